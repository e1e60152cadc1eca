"""Which strategy, and how many processes per host, to scale out with: measures a step here, predicts the cluster.

    python -m deepfm.advise --data data/synthetic_300k --hosts 2 --cores_per_host 16 --link_gbps 25

Measures on this machine, pinned to one core: the wall time of a training
step of the default model on real batches of `--data` (input pipeline
included, `--steps` steps after `--warmup_steps`), the ids and distinct ids
per batch and the parameters outside the embedding tables. Then prints the
predicted examples/sec of every strategy for the cluster shape at every
number of training processes per host that divides its cores (each
process on cores_per_host / processes cores, as many threads;
`--ranks_per_host` fixes it), and the strategy and layout it would pick with
the reason. `--compute_ms` replaces the measured step (e.g. a GPU's step
time measured elsewhere).

What a distributed step costs beyond its compute and its bytes' time on
the link (`cost_model.StepCosts`: a fixed cost, CPU per byte moved, and a
share of the compute, waiting included; one set for Horovod's allgathers,
one for parameter servers, one for the hybrid strategy's all-to-alls) is
not measured by a step alone: it defaults to the costs fitted to two runs
of the 2-host scale-out benchmark, at batches 1,024 and 8,192
(`FITTED_TO`). `--fit_to A.json,B.json` fits them to other runs of
`benchmarks.scale_out`, and `--check_against A.json,B.json` prints, for
each 2-host variant measured there, the prediction next to the
measurement and the error. Horovod's ranks talk over MPI with yielding
waits by default (`--transport mpi`: SageMaker's `mpi` distribution, a
Kubernetes MPIJob, `deepfm.launch` with `mpirun`), where the hybrid
strategy has costs of its own, fitted to two runs of `hybrid+mpi_yield`
(`MPI_FITTED_TO`; `--fit_mpi_to` refits them); `--transport gloo` for
`horovodrun --gloo`. Runs at another per-replica batch than
`--batch_size` are read with that batch's distinct ids, counted on
`--data` (the runs' data).

What a process's further cores give (`cost_model.CoreCosts`: the serial
share of a step's compute, the share of the exchange's cost that spreads
over a rank's cores) defaults to the figures of 16 vCPUs in
`CORES_FITTED_TO` (`benchmarks.multicore`'s format: one process on 4 vCPUs
against one, and `horovod` at 2 hosts of 4 vCPUs against 2 of 1);
`--fit_cores_to` fits them to other runs of `benchmarks.multicore`, whose
results `--check_against` also reads (every distributed run at its layout).
"""

import contextlib
import dataclasses
import json
import os
import time
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from absl import app, flags

from cli import entry
from deepfm import config as config_lib
from input_pipeline import schema
from strategies import calibrated, cost_model, host_layout

PROGRAM = "deepfm.advise"

FLAGS = flags.FLAGS
# The costs of a distributed step beyond compute and the link, and what a process's further cores give, as
# fitted to FITTED_TO and CORES_FITTED_TO (`strategies.calibrated`).
FITTED_TO = calibrated.FITTED_TO
CALIBRATED_COSTS = calibrated.STEP_COSTS
CORES_FITTED_TO = calibrated.CORES_FITTED_TO
CALIBRATED_CORE_COSTS = calibrated.CORE_COSTS
DEDUP_FLAG = "--dedup_lookups"
FP16_EXCHANGE_FLAG = "--exchange_fp16"
SINGLE_VARIANT = "single"
SPARSE_AS_DENSE_FLAG = "--sparse_as_dense"
# The benchmark variants each strategy's costs are fitted to. Horovod's and the parameter servers' have two
# byte counts at each batch; the hybrid strategy's all-to-alls share Horovod's transport and its cost per byte.
FIT_VARIANTS = {cost_model.HOROVOD: ("horovod", "horovod+dedup"), cost_model.PS: ("ps", "ps+dedup"),
                cost_model.HYBRID: ("hybrid", "hybrid+fp16")}
# The variants the costs over MPI with yielding waits are fitted to (`--fit_mpi_to`), by the key of their costs.
FIT_MPI_VARIANTS = {cost_model.costs_key(cost_model.HYBRID, cost_model.MPI): ("hybrid+mpi_yield",)}
MPI_FITTED_TO = calibrated.MPI_FITTED_TO
# How a benchmark's ranks were started (`benchmarks.scale_out`'s `Variant.launcher`, `benchmarks.multicore`'s
# entries): each rank in its host without a launcher (Gloo), or by horovodrun or mpirun over MPI with waits that
# yield their core; MPI with spinning waits is a transport the cost model does not model.
GLOO_LAUNCHERS = ("direct", "gloo")
MPI_YIELD_LAUNCHERS = ("mpi_yield", "ssh_mpi_yield")
# Results written before the launcher was recorded say it in the variant's note or the entry's key.
MPI_YIELD_NOTE = "mpi_yield_when_idle 1"
MPI_ENTRY_SUFFIX = ", MPI"
EMBEDDING_VARIABLES = ("fm_w", "fm_v")
DEFAULT_STEPS = 30
DEFAULT_WARMUP_STEPS = 10


def define_flags() -> None:
    """Defines the flags of the entry point."""
    flags.DEFINE_string("data", None, "A dataset root (metadata.json, train/) to measure a step on.")
    flags.DEFINE_integer("hosts", 2, "Hosts of the cluster.")
    flags.DEFINE_integer("cores_per_host", 1, "Cores per host.")
    flags.DEFINE_integer("ranks_per_host", 0, "Training processes per host, each on cores_per_host / ranks_per_host "
                         "cores (0: advise it, trying every number that divides the cores).")
    flags.DEFINE_float("link_gbps", 25.0, "Each host's link in Gbit/s.")
    flags.DEFINE_enum("transport", cost_model.MPI, list(cost_model.TRANSPORTS),
                      "How Horovod's ranks talk: mpi, with waits that yield the core, as SageMaker's mpi "
                      "distribution, a Kubernetes MPIJob and deepfm.launch where mpirun is installed start them; or "
                      "gloo (horovodrun --gloo).")
    flags.DEFINE_float("latency_us", cost_model.DEFAULT_LATENCY_S * 1e6, "One-way latency between hosts in us.")
    flags.DEFINE_integer("batch_size", config_lib.DEFAULT_BATCH_SIZE, "Examples per replica and step.")
    flags.DEFINE_bool("dedup_lookups", False, "Deduplicated embedding lookups.")
    flags.DEFINE_integer("steps", DEFAULT_STEPS, "Timed steps of the measurement.")
    flags.DEFINE_integer("warmup_steps", DEFAULT_WARMUP_STEPS, "Steps before the timed ones.")
    flags.DEFINE_float("compute_ms", None, "Use this step time instead of measuring one.")
    flags.DEFINE_list("fit_to", [], "benchmarks.scale_out results JSONs (comma-separated) to fit the costs of a "
                      "distributed step to (default: the costs fitted to %s)." % " and ".join(FITTED_TO))
    flags.DEFINE_list("fit_mpi_to", [], "benchmarks.scale_out results JSONs (comma-separated) with hybrid+mpi_yield "
                      "at two batches, to fit the costs over MPI to (default: the costs fitted to %s)."
                      % " and ".join(MPI_FITTED_TO))
    flags.DEFINE_list("check_against", [], "benchmarks.scale_out or benchmarks.multicore results JSONs "
                      "(comma-separated): print the predictions next to their measured distributed runs.")
    flags.DEFINE_list("fit_cores_to", [], "benchmarks.multicore results JSONs (comma-separated) to fit what a "
                      "process's further cores give to (default: %s)." % " and ".join(CORES_FITTED_TO))
    flags.DEFINE_bool("json", False, "Print one JSON object (the measured step, every prediction, the pick and "
                      "its reason) instead of the tables; what `--distribution auto` of `deepfm.sagemaker` reads.")
    flags.mark_flag_as_required("data")


def pin_to_one_core() -> int:
    """Pins this process to the first core it may run on; returns that core."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def _training_batches(data: str, batch_size: int):
    """`(metadata, DatasetBuilder)` of `data`'s TFRecord training split at `batch_size`, repeated."""
    from input_pipeline import files, formats, pipeline, schema

    metadata = schema.load_metadata(os.path.join(data, schema.METADATA_FILE) if os.path.isdir(data) else data)
    builder = pipeline.DatasetBuilder(
        files.resolve([data], formats.TFRECORD, split=schema.TRAIN_SPLIT),
        pipeline.PipelineConfig(data_format=formats.TFRECORD, field_size=metadata.field_size),
        batch_size=batch_size, num_epochs=None)
    return metadata, builder


@contextlib.contextmanager
def _whole_batches(data: str, batch_size: int):
    """Turns the end of `data`'s training batches (fewer rows than one batch) into a ValueError naming both."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OutOfRangeError as e:
        raise ValueError("--data %r has no whole batch of %d training rows: give a larger dataset or a smaller "
                         "batch" % (data, batch_size)) from e


def measure_step(data: str, batch_size: int, dedup: bool, steps: int, warmup_steps: int):
    """Measures training steps of the default model on `data` here.

    Returns:
      (seconds per step, ids per batch, mean distinct ids per batch, dense parameters, ModelConfig).
    """
    import numpy as np
    import tensorflow as tf

    import strategies
    from deepfm.models import ctr
    from deepfm.models import deepfm as model_lib
    from input_pipeline import schema

    metadata, builder = _training_batches(data, batch_size)
    model = config_lib.ModelConfig(feature_size=metadata.feature_size, field_size=metadata.field_size)
    strategy = strategies.get(strategies.StrategyConfig(dedup_lookups=dedup))
    strategy.setup()
    context = strategy.model_context(tf.estimator.ModeKeys.TRAIN)
    with tf.Graph().as_default():
        features, labels = tf.compat.v1.data.make_one_shot_iterator(builder(None)).get_next()
        spec = model_lib.model_fn(features, labels, tf.estimator.ModeKeys.TRAIN,
                                  context.with_params(ctr.model_params(model)))
        dense = sum(v.shape.num_elements() for v in tf.compat.v1.trainable_variables()
                    if not any(name in v.name for name in EMBEDDING_VARIABLES))
        ids = features[schema.FEAT_IDS]
        distinct = []
        with tf.compat.v1.Session() as session, _whole_batches(data, batch_size):
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(warmup_steps):
                _, batch_ids = session.run([spec.train_op, ids])
                distinct.append(len(np.unique(batch_ids)))
            started = time.perf_counter()
            for _ in range(steps):
                session.run(spec.train_op)
            seconds = (time.perf_counter() - started) / steps
    return seconds, batch_size * metadata.field_size, float(np.mean(distinct)), int(dense), model


def count_distinct_ids(data: str, batch_size: int, batches: int = DEFAULT_WARMUP_STEPS) -> float:
    """The mean distinct ids of the first `batches` training batches of `data` at `batch_size`."""
    import numpy as np
    import tensorflow as tf

    from input_pipeline import schema

    _, builder = _training_batches(data, batch_size)
    with tf.Graph().as_default():
        features, _ = tf.compat.v1.data.make_one_shot_iterator(builder(None)).get_next()
        with tf.compat.v1.Session() as session, _whole_batches(data, batch_size):
            return float(np.mean([len(np.unique(session.run(features[schema.FEAT_IDS]))) for _ in range(batches)]))


def format_table(predictions) -> str:
    """The predictions as a markdown table."""
    rows = [cost_model.as_row(p) for p in predictions]
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row[key] for key in header) + " |" for row in rows]
    return "\n".join(lines)


def main(argv):
    del argv
    entry.configure_logging(entry.flags_want_detail())
    for flag in ("hosts", "cores_per_host", "batch_size", "steps"):
        if getattr(FLAGS, flag) < 1:
            raise app.UsageError("--%s must be >= 1, got %r" % (flag, getattr(FLAGS, flag)))
    if not os.path.isfile(os.path.join(FLAGS.data, schema.METADATA_FILE)):
        raise app.UsageError(
            "--data %r is not a dataset root (a directory with metadata.json): make one with `python -m "
            "dataprep.synthetic --rows 300000 --output_dir %s` (the scale-out benchmarks' data) or `python -m "
            "dataprep.criteo`" % (FLAGS.data, FLAGS.data))
    try:
        cluster = cost_model.Cluster(hosts=FLAGS.hosts, cores_per_host=FLAGS.cores_per_host,
                                     link_gbps=FLAGS.link_gbps, latency_s=FLAGS.latency_us * 1e-6,
                                     ranks_per_host=FLAGS.ranks_per_host, transport=FLAGS.transport)
    except ValueError as e:
        raise app.UsageError("--ranks_per_host / --cores_per_host: %s" % e) from e
    try:
        core_costs = fit_cores(FLAGS.fit_cores_to) if FLAGS.fit_cores_to else CALIBRATED_CORE_COSTS
    except (OSError, KeyError, ValueError) as e:
        raise app.UsageError("--fit_cores_to: %s" % e) from e
    core = pin_to_one_core()
    try:
        seconds, ids, distinct, dense, model = measure_step(FLAGS.data, FLAGS.batch_size, FLAGS.dedup_lookups,
                                                            FLAGS.steps, FLAGS.warmup_steps)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if FLAGS.compute_ms is not None:
        seconds = FLAGS.compute_ms / 1000.0
    profile = cost_model.StepProfile(
        compute_s=seconds, batch_size=FLAGS.batch_size, ids_per_step=ids, distinct_ids_per_step=distinct,
        embedding_size=model.embedding_size, feature_size=model.feature_size, dense_params=dense,
        step_costs=CALIBRATED_COSTS, dedup=FLAGS.dedup_lookups, core_costs=core_costs)
    try:
        distinct_ids = {batch: count_distinct_ids(FLAGS.data, batch)
                        for batch in result_batches(FLAGS.fit_to + FLAGS.fit_mpi_to + FLAGS.check_against)
                        if batch != FLAGS.batch_size}
        if FLAGS.fit_to:
            profile = fit(FLAGS.fit_to, profile, distinct_ids)
        if FLAGS.fit_mpi_to:
            profile = fit_mpi(FLAGS.fit_mpi_to, profile, distinct_ids)
        checked = check(FLAGS.check_against, profile, distinct_ids) if FLAGS.check_against else None
    except (OSError, KeyError, ValueError) as e:
        raise app.UsageError("--fit_to / --fit_mpi_to / --check_against: %s" % e) from e
    best, reason = advise_layout(profile, cluster)
    if FLAGS.json:
        print(json.dumps({"step_ms": 1000 * seconds, "ids_per_step": ids, "distinct_ids_per_step": distinct,
                          "cluster": dataclasses.asdict(cluster), "core_costs": profile.core_costs._asdict(),
                          "predictions": [dataclasses.asdict(p) for p in layouts(profile, cluster)],
                          "pick": best.strategy, "ranks_per_host": best.ranks_per_host,
                          "threads_per_rank": best.threads, "reason": reason}, sort_keys=True))
        return
    print("measured on core %d: step %.2f ms%s, %d ids and %.0f distinct per batch, %d dense parameters"
          % (core, 1000 * seconds, " (given)" if FLAGS.compute_ms is not None else "", ids, distinct, dense))
    fitted_to = ", ".join(os.path.basename(path) for path in FLAGS.fit_to or FITTED_TO)
    mpi_fitted_to = ", ".join(os.path.basename(path) for path in FLAGS.fit_mpi_to or MPI_FITTED_TO)
    for name in list(FIT_VARIANTS) + list(FIT_MPI_VARIANTS):
        costs = profile.step_costs.get(name) or profile.costs(name)
        if name in FIT_MPI_VARIANTS:
            fitted_to = mpi_fitted_to
        print("%s costs (fitted to %s): %.2f ms fixed per step, %.2f ns CPU per byte moved, %.3f s per s of "
              "compute" % (name, fitted_to, 1000 * costs.overhead_s, 1e9 * costs.cpu_s_per_byte,
                           costs.compute_factor))
    print("a process's further cores (fitted to %s): %.3f of a step's compute is serial, %.3f of the exchange's "
          "cost spreads over a rank's cores" % (", ".join(os.path.basename(p) for p in FLAGS.fit_cores_to or
                                                          CORES_FITTED_TO), profile.core_costs.serial_fraction,
                                                profile.core_costs.exchange_spread))
    if checked:
        print("\nchecked against %s:\n" % ", ".join(os.path.basename(path) for path in FLAGS.check_against))
        print(checked)
    print("predicted for %d host(s) x %d core(s), %g Gbit/s, %g us latency, Horovod over %s, dedup_lookups=%s, "
          "processes per host: %s:\n"
          % (cluster.hosts, cluster.cores_per_host, cluster.link_gbps, FLAGS.latency_us, cluster.transport,
             FLAGS.dedup_lookups, FLAGS.ranks_per_host or "every divisor of the cores"))
    print(format_table(layouts(profile, cluster)))
    print("\npick: %s, %d process(es) per host of %d core(s) and thread(s) each (%s)"
          % (best.strategy, best.ranks_per_host, best.threads, reason))


def layouts(profile: cost_model.StepProfile, cluster: cost_model.Cluster) -> List[cost_model.Prediction]:
    """The predictions to show: every strategy at the given processes per host, else at every layout."""
    if cluster.ranks_per_host:
        return cost_model.predict_all(profile, cluster)
    return host_layout.predict_layouts(profile, cluster)


def advise_layout(profile: cost_model.StepProfile, cluster: cost_model.Cluster
                  ) -> Tuple[cost_model.Prediction, str]:
    """The best prediction and why: at the given processes per host, or over every layout."""
    if cluster.ranks_per_host:
        strategy, reason = cost_model.choose(profile, cluster)
        return cost_model.predict(strategy, profile, cluster), reason
    return host_layout.choose_layout(profile, cluster)


def _transport_of(variant: dict, name: str) -> Optional[str]:
    """How a measured run's ranks talked (`cost_model.GLOO` or `MPI`); None: MPI with spinning waits."""
    launcher = variant.get("launcher")
    if launcher is None:
        if MPI_YIELD_NOTE in variant.get("note", "") or name.endswith(MPI_ENTRY_SUFFIX):
            return cost_model.MPI
        return None if "+mpi" in name else cost_model.GLOO
    if launcher in MPI_YIELD_LAUNCHERS:
        return cost_model.MPI
    return cost_model.GLOO if launcher in GLOO_LAUNCHERS else None


def _strategy_of(variant: dict) -> str:
    if variant["strategy"] == "ps":
        return cost_model.PS
    if variant["strategy"] == cost_model.HYBRID:
        return cost_model.HYBRID
    return cost_model.HOROVOD_DENSE if SPARSE_AS_DENSE_FLAG in variant["train_flags"] else cost_model.HOROVOD


def _median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else 0.5 * (values[middle - 1] + values[middle])


def _read(path: str) -> Dict:
    with open(path) as f:
        return json.load(f)["results"]


def _batch(run: Dict, setup: Dict) -> int:
    return run.get("batch", setup.get("batch", config_lib.DEFAULT_BATCH_SIZE))


def result_batches(paths: Sequence[str]) -> List[int]:
    """The per-replica batches of each results JSON (`benchmarks.scale_out`'s setup, `benchmarks.multicore`'s runs)."""
    batches = []
    for path in paths:
        results = _read(path)
        if "entries" in results:
            batches.extend(sorted({_batch(entry, results["setup"]) for entry in results["entries"].values()}))
        else:
            batches.append(_batch({}, results["setup"]))
    return batches


def profile_at(profile: cost_model.StepProfile, batch: int,
               distinct_ids: Mapping[int, float]) -> cost_model.StepProfile:
    """`profile` at another per-replica batch, with that batch's distinct ids (`distinct_ids[batch]`).

    Raises:
      ValueError: no distinct ids counted at `batch`.
    """
    if batch == profile.batch_size:
        return profile
    if batch not in distinct_ids:
        raise ValueError("no distinct ids counted at a per-replica batch of %d (this step is at %d)"
                         % (batch, profile.batch_size))
    fields = profile.ids_per_step // profile.batch_size
    return dataclasses.replace(profile, batch_size=batch, ids_per_step=batch * fields,
                               distinct_ids_per_step=distinct_ids[batch])


class Measured(NamedTuple):
    """A distributed run of a benchmark's results: what the cost model needs of it.

    Attributes:
      variant: its entry in the results JSON.
      strategy: the cost model's strategy.
      cluster: its layout: hosts, cores per host, processes per host, the link.
      profile: the step: the run's batch, its reference's compute on the
        cores of one of its ranks (`compute_at(cluster.threads)`), its rows' options.
      beyond_s: median seconds its step took beyond that compute and its bytes' time on the link.
      handled_bytes: the bytes a process handles per step (`cost_model.traffic`).
    """

    variant: dict
    strategy: str
    cluster: cost_model.Cluster
    profile: cost_model.StepProfile
    beyond_s: float
    handled_bytes: float


def _runs_of(results: Dict) -> Dict[str, Tuple[dict, Optional[dict], int, int, int, int]]:
    """Per distributed run: (its entry, its reference's entry, batch, hosts, cores per host, processes per host).

    Reads `benchmarks.scale_out` results (variants; hosts of `setup.cores_per_host`, 1 before it was
    recorded) and `benchmarks.multicore` results (entries, each with its layout and reference).
    """
    setup = results["setup"]
    found = {}
    if "entries" in results:
        entries = results["entries"]
        for key, entry in entries.items():
            if entry["strategy"] == "single" or not entry["runs"]:
                continue
            reference = entries.get(entry.get("reference", ""))
            if reference is None:
                # Transcribed figures name no reference: single at the batch on the cores of one rank.
                per_rank = entry["cores_per_host"] // entry["ranks_per_host"]
                reference = next((e for e in entries.values() if e["strategy"] == "single" and
                                  e["batch"] == entry["batch"] and e["cores_per_host"] == per_rank), None)
            found[key] = (entry, reference, entry["batch"], entry["hosts"], entry["cores_per_host"],
                          entry["ranks_per_host"])
        return found
    variants = results["variants"]
    for name, variant in variants.items():
        if variant["strategy"] == "single" or not variant["runs"]:
            continue
        reference = variants.get(variant["baseline"]) if variant["baseline"] in variants else None
        if not reference or not reference["runs"]:
            reference = variants.get(SINGLE_VARIANT)
        found[name] = (variant, reference, _batch({}, setup), variant.get("hosts", 2),
                       variant.get("cores_per_host", setup.get("cores_per_host", 1)),
                       variant.get("ranks_per_host", setup.get("ranks_per_host", 1)))
    return found


def measured_variants(path: str, profile: cost_model.StepProfile, distinct_ids: Mapping[int, float]
                      ) -> Dict[str, Measured]:
    """`{name: Measured}` of every distributed run with runs and a measured reference in a results JSON.

    Compute = the run's reference single process's (on the cores of one
    of its ranks) median wall ms per step; rows follow its `--dedup_lookups`
    and `--exchange_fp16`; hosts without a bandwidth limit get
    `cost_model.DEFAULT_UNLIMITED_GBPS`.

    Raises:
      ValueError: the run's batch is not `profile`'s and has no distinct ids counted.
    """
    results = _read(path)
    link_gbps = results["setup"].get("link_gbps") or cost_model.DEFAULT_UNLIMITED_GBPS
    measured = {}
    for name, (variant, reference, batch, hosts, cores, ranks) in _runs_of(results).items():
        transport = _transport_of(variant, name)
        if not reference or not reference["runs"] or transport is None:
            continue
        cluster = cost_model.Cluster(hosts=hosts, cores_per_host=cores, link_gbps=link_gbps, latency_s=0.0,
                                     ranks_per_host=ranks, transport=transport)
        at_batch = profile_at(profile, batch, distinct_ids)
        share = cost_model.CoreCosts(*at_batch.core_costs).compute_share(cluster.threads)
        step = dataclasses.replace(
            at_batch, compute_s=_median([r["step_ms"] for r in reference["runs"]]) / 1000.0 / share,
            dedup=DEDUP_FLAG in variant["train_flags"], exchange_fp16=FP16_EXCHANGE_FLAG in variant["train_flags"])
        strategy = _strategy_of(variant)
        link_bytes, handled, _ = cost_model.traffic(strategy, step, cluster)
        beyond = (_median([r["step_ms"] for r in variant["runs"]]) / 1000.0 - step.compute_at(cluster.threads)
                  - link_bytes / cluster.link_bytes_per_s)
        measured[name] = Measured(variant, strategy, cluster, step, beyond, handled)
    return measured


def fit(paths: Sequence[str], profile: cost_model.StepProfile,
        distinct_ids: Mapping[int, float]) -> cost_model.StepProfile:
    """`profile` with its step costs fitted to scale-out benchmarks' results.

    Each strategy's costs are fitted to its `FIT_VARIANTS` in every file,
    at one core per process (`cost_model.calibrate`); the hybrid strategy's
    take Horovod's cost per byte.

    Raises:
      ValueError: fewer than two configurations of a strategy's variants in all the files.
    """
    found: Dict[str, List[Measured]] = {strategy: [] for strategy in FIT_VARIANTS}
    for path in paths:
        measured = measured_variants(path, profile, distinct_ids)
        for strategy, names in FIT_VARIANTS.items():
            found[strategy] += [measured[name] for name in names if name in measured
                                and measured[name].cluster.threads == 1
                                and measured[name].cluster.transport == cost_model.GLOO]
    costs: Dict[str, cost_model.StepCosts] = {}
    for strategy in (cost_model.HOROVOD, cost_model.PS, cost_model.HYBRID):
        runs = found[strategy]
        if len(runs) < 2:
            raise ValueError("%s: %d run(s) of %s, and the fit needs two (two byte counts, or two batches)"
                             % (", ".join(paths), len(runs), " or ".join(FIT_VARIANTS[strategy])))
        costs[strategy] = cost_model.calibrate(
            [m.handled_bytes for m in runs], [m.profile.compute_s for m in runs], [m.beyond_s for m in runs],
            cpu_s_per_byte=costs[cost_model.HOROVOD].cpu_s_per_byte if strategy == cost_model.HYBRID else None)
    costs.update({key: value for key, value in profile.step_costs.items() if key not in costs})
    return dataclasses.replace(profile, step_costs=costs)


def fit_mpi(paths: Sequence[str], profile: cost_model.StepProfile,
            distinct_ids: Mapping[int, float]) -> cost_model.StepProfile:
    """`profile` with its costs over MPI with yielding waits fitted to scale-out results (`FIT_MPI_VARIANTS`).

    Fitted as `fit` fits a strategy's costs over Gloo, at one core per
    process, with the strategy's cost per byte over Gloo (the rows are
    serialized and applied the same way; the transport changes what a
    step waits and spins).

    Raises:
      ValueError: fewer than two configurations of a strategy's variants in all the files.
    """
    costs = dict(profile.step_costs)
    for key, names in FIT_MPI_VARIANTS.items():
        strategy = key.split(cost_model.TRANSPORT_SEPARATOR)[0]
        runs: List[Measured] = []
        for path in paths:
            measured = measured_variants(path, profile, distinct_ids)
            runs += [measured[name] for name in names if name in measured and measured[name].cluster.threads == 1
                     and measured[name].cluster.transport == cost_model.MPI]
        if len(runs) < 2:
            raise ValueError("%s: %d run(s) of %s, and the fit needs two (two batches)"
                             % (", ".join(paths), len(runs), " or ".join(names)))
        costs[key] = cost_model.calibrate(
            [m.handled_bytes for m in runs], [m.profile.compute_s for m in runs], [m.beyond_s for m in runs],
            cpu_s_per_byte=profile.costs(strategy).cpu_s_per_byte)
    return dataclasses.replace(profile, step_costs=costs)


def core_points(paths: Sequence[str], step_costs: Mapping[str, cost_model.StepCosts] = CALIBRATED_COSTS
                ) -> Tuple[List[Tuple[int, float]], List[Tuple[int, float]]]:
    """What `benchmarks.multicore` results say of a process's further cores.

    Returns:
      `(speed-ups, exchange ratios)`: per single run on T > 1 cores, `(T,
      its examples/sec over single on one core's at its batch)`; per
      distributed run at T > 1 cores per rank with the same strategy, hosts
      and batch measured at one core per rank, `(T, the exchange's cost at
      T over its cost at one)`, the exchange's cost being what the step
      took beyond its reference's step and the share of it that grows
      with the compute (`step_costs`' compute factor).
    """
    speedups, ratios = [], []
    for path in paths:
        entries = _read(path)["entries"]

        def rate(result):
            return _median([r["examples_per_sec"] for r in result["runs"]])

        singles = {(e["batch"], e["cores_per_host"] // e["ranks_per_host"]): e for e in entries.values()
                   if e["strategy"] == "single" and e["runs"]}
        for (batch, threads), single in singles.items():
            if threads > 1 and (batch, 1) in singles:
                speedups.append((threads, rate(single) / rate(singles[(batch, 1)])))
        # The spread is fitted over Gloo, the transport the figures measured.
        gloo = {key: e for key, e in entries.items() if _transport_of(e, key) == cost_model.GLOO}
        for result in gloo.values():
            threads = result["cores_per_host"] // result["ranks_per_host"]
            if result["strategy"] == "single" or threads == 1 or not result["runs"]:
                continue
            one = next((e for e in gloo.values() if e["strategy"] == result["strategy"] and e["runs"] and
                        e["hosts"] == result["hosts"] and e["batch"] == result["batch"] and
                        e["ranks_per_host"] == result["ranks_per_host"] and e["cores_per_host"] == e["ranks_per_host"]),
                       None)
            if one is None or (result["batch"], threads) not in singles or (result["batch"], 1) not in singles:
                continue
            factor = cost_model.StepCosts(*step_costs.get(_strategy_of(result), step_costs.get(
                cost_model.HOROVOD, cost_model.StepCosts()))).compute_factor
            exchange = []
            for run, cores in ((result, threads), (one, 1)):
                compute = _median([r["step_ms"] for r in singles[(run["batch"], cores)]["runs"]])
                exchange.append(_median([r["step_ms"] for r in run["runs"]]) - compute * (1.0 + factor))
            if exchange[1] > 0:
                ratios.append((threads, exchange[0] / exchange[1]))
    return speedups, ratios


def fit_cores(paths: Sequence[str], step_costs: Mapping[str, cost_model.StepCosts] = CALIBRATED_COSTS
              ) -> cost_model.CoreCosts:
    """The `cost_model.CoreCosts` that fit `benchmarks.multicore` results (`core_points`).

    Raises:
      ValueError: no single run on more than one core with one on a core to compare, or no distributed
        run at more cores per rank with its one-core counterpart.
    """
    speedups, ratios = core_points(paths, step_costs)
    if not speedups:
        raise ValueError("%s: no single run on several cores beside one on one core at the same batch"
                         % ", ".join(paths))
    if not ratios:
        raise ValueError("%s: no distributed run at several cores per rank beside the same at one core per rank "
                         "(benchmarks.multicore --one_vcpu_hosts)" % ", ".join(paths))
    return cost_model.CoreCosts(serial_fraction=cost_model.fit_serial_fraction(speedups),
                                exchange_spread=cost_model.fit_exchange_spread(ratios))


def check(paths: Sequence[str], profile: cost_model.StepProfile, distinct_ids: Mapping[int, float]) -> str:
    """Predictions with `profile`'s costs next to each distributed run measured in `paths`, as markdown."""
    lines = ["| run | batch | variant | hosts x processes x cores | predicted examples/sec | measured | error "
             "| predicted MB/step on the link | measured tx MB/step |", "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        for name, m in measured_variants(path, profile, distinct_ids).items():
            step = dataclasses.replace(m.profile, step_costs=profile.step_costs)
            prediction = cost_model.predict(m.strategy, step, m.cluster)
            rate = _median([r["examples_per_sec"] for r in m.variant["runs"]])
            tx = [r["tx_bytes_per_step"] for r in m.variant["runs"] if "tx_bytes_per_step" in r]
            lines.append("| %s | %s | %s | %dx%dx%d | %s | %s | %+.0f%% | %.2f | %s |" % (
                os.path.splitext(os.path.basename(path))[0], format(step.batch_size, ","), name,
                m.cluster.hosts, m.cluster.ranks, m.cluster.threads, format(prediction.examples_per_sec, ",.0f"),
                format(rate, ",.0f"), 100 * cost_model.relative_error(prediction.examples_per_sec, rate),
                prediction.link_bytes / 1e6, "%.2f" % (_median(tx) / 1e6) if tx else "n/a"))
    return "\n".join(lines) + "\n"


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    run()
