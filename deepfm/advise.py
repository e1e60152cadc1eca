"""Which strategy to scale out with: measures a step here, predicts N hosts x C cores with `strategies.cost_model`.

    python -m deepfm.advise --data data/synthetic_300k --hosts 2 --cores_per_host 1 --link_gbps 25

Measures on this machine, pinned to one core: the wall time of a training
step of the default model on real batches of `--data` (input pipeline
included, `--steps` steps after `--warmup_steps`), the ids and distinct ids
per batch and the parameters outside the embedding tables. Then prints the
predicted examples/sec of every strategy for the cluster shape, and the one
it would pick with the reason. `--compute_ms` replaces the measured step
(e.g. a GPU's step time measured elsewhere).

What a distributed step costs beyond its compute and its bytes' time on
the link (`cost_model.StepCosts`: a fixed cost, CPU per byte moved, and a
share of the compute, waiting included; one set for Horovod's allgathers,
one for parameter servers, one for the hybrid strategy's all-to-alls) is
not measured by a step alone: it defaults to the costs fitted to two runs
of the 2-host scale-out benchmark, at batches 1,024 and 8,192
(`FITTED_TO`). `--fit_to A.json,B.json` fits them to other runs of
`benchmarks.scale_out`, and `--check_against A.json,B.json` prints, for
each 2-host variant measured there, the prediction next to the
measurement and the error. Runs at another per-replica batch than
`--batch_size` are read with that batch's distinct ids, counted on
`--data` (the runs' data).
"""

import contextlib
import dataclasses
import json
import os
import time
from typing import Dict, List, Mapping, NamedTuple, Sequence, Tuple

from absl import app, flags

from deepfm import config as config_lib
from cli import entry
from strategies import cost_model

PROGRAM = "deepfm.advise"

FLAGS = flags.FLAGS
# The costs of a distributed step beyond compute and the link (`cost_model.StepCosts`), fitted by
# `cost_model.calibrate` (`--fit_to`) to FITTED_TO, runs of benchmarks.scale_out at two batches.
FITTED_TO = ("benchmarks/results/scale_out_costs_1024.json", "benchmarks/results/scale_out_costs_8192.json")
CALIBRATED_COSTS = {
    cost_model.HOROVOD: cost_model.StepCosts(overhead_s=3.88e-3, cpu_s_per_byte=0.904e-9, compute_factor=0.182),
    cost_model.PS: cost_model.StepCosts(overhead_s=10.69e-3, cpu_s_per_byte=0.609e-9, compute_factor=0.1355),
    cost_model.HYBRID: cost_model.StepCosts(overhead_s=21.83e-3, cpu_s_per_byte=0.904e-9, compute_factor=0.122),
}
DEDUP_FLAG = "--dedup_lookups"
FP16_EXCHANGE_FLAG = "--exchange_fp16"
SINGLE_VARIANT = "single"
SPARSE_AS_DENSE_FLAG = "--sparse_as_dense"
# The benchmark variants each strategy's costs are fitted to. Horovod's and the parameter servers' have two
# byte counts at each batch; the hybrid strategy's all-to-alls share Horovod's transport and its cost per byte.
FIT_VARIANTS = {cost_model.HOROVOD: ("horovod", "horovod+dedup"), cost_model.PS: ("ps", "ps+dedup"),
                cost_model.HYBRID: ("hybrid", "hybrid+fp16")}
EMBEDDING_VARIABLES = ("fm_w", "fm_v")
DEFAULT_STEPS = 30
DEFAULT_WARMUP_STEPS = 10


def define_flags() -> None:
    """Defines the flags of the entry point."""
    flags.DEFINE_string("data", None, "A dataset root (metadata.json, train/) to measure a step on.")
    flags.DEFINE_integer("hosts", 2, "Hosts of the cluster.")
    flags.DEFINE_integer("cores_per_host", 1, "Cores per host (one training process per core).")
    flags.DEFINE_float("link_gbps", 25.0, "Each host's link in Gbit/s.")
    flags.DEFINE_float("latency_us", cost_model.DEFAULT_LATENCY_S * 1e6, "One-way latency between hosts in us.")
    flags.DEFINE_integer("batch_size", config_lib.DEFAULT_BATCH_SIZE, "Examples per replica and step.")
    flags.DEFINE_bool("dedup_lookups", False, "Deduplicated embedding lookups.")
    flags.DEFINE_integer("steps", DEFAULT_STEPS, "Timed steps of the measurement.")
    flags.DEFINE_integer("warmup_steps", DEFAULT_WARMUP_STEPS, "Steps before the timed ones.")
    flags.DEFINE_float("compute_ms", None, "Use this step time instead of measuring one.")
    flags.DEFINE_list("fit_to", [], "benchmarks.scale_out results JSONs (comma-separated) to fit the costs of a "
                      "distributed step to (default: the costs fitted to %s)." % " and ".join(FITTED_TO))
    flags.DEFINE_list("check_against", [], "benchmarks.scale_out results JSONs (comma-separated): print the "
                      "predictions next to their measured 2-host variants.")
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
    context = strategies.get(strategies.StrategyConfig(dedup_lookups=dedup)).model_context(
        tf.estimator.ModeKeys.TRAIN)
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
    if not os.path.isdir(FLAGS.data):
        raise app.UsageError("--data %r is not a directory (a dataset root with metadata.json)" % FLAGS.data)
    try:
        cluster = cost_model.Cluster(hosts=FLAGS.hosts, cores_per_host=FLAGS.cores_per_host,
                                     link_gbps=FLAGS.link_gbps, latency_s=FLAGS.latency_us * 1e-6)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
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
        step_costs=CALIBRATED_COSTS, dedup=FLAGS.dedup_lookups)
    try:
        distinct_ids = {batch: count_distinct_ids(FLAGS.data, batch)
                        for batch in result_batches(FLAGS.fit_to + FLAGS.check_against) if batch != FLAGS.batch_size}
        if FLAGS.fit_to:
            profile = fit(FLAGS.fit_to, profile, distinct_ids)
        checked = check(FLAGS.check_against, profile, distinct_ids) if FLAGS.check_against else None
    except (OSError, KeyError, ValueError) as e:
        raise app.UsageError("--fit_to / --check_against: %s" % e) from e
    strategy, reason = cost_model.choose(profile, cluster)
    if FLAGS.json:
        print(json.dumps({"step_ms": 1000 * seconds, "ids_per_step": ids, "distinct_ids_per_step": distinct,
                          "cluster": dataclasses.asdict(cluster),
                          "predictions": [dataclasses.asdict(p) for p in cost_model.predict_all(profile, cluster)],
                          "pick": strategy, "reason": reason}, sort_keys=True))
        return
    print("measured on core %d: step %.2f ms%s, %d ids and %.0f distinct per batch, %d dense parameters"
          % (core, 1000 * seconds, " (given)" if FLAGS.compute_ms is not None else "", ids, distinct, dense))
    fitted_to = ", ".join(os.path.basename(path) for path in FLAGS.fit_to or FITTED_TO)
    for name in FIT_VARIANTS:
        costs = profile.costs(name)
        print("%s costs (fitted to %s): %.2f ms fixed per step, %.2f ns CPU per byte moved, %.3f s per s of "
              "compute" % (name, fitted_to, 1000 * costs.overhead_s, 1e9 * costs.cpu_s_per_byte,
                           costs.compute_factor))
    if checked:
        print("\nchecked against %s:\n" % ", ".join(os.path.basename(path) for path in FLAGS.check_against))
        print(checked)
    print("predicted for %d host(s) x %d core(s), %g Gbit/s, %g us latency, dedup_lookups=%s:\n"
          % (cluster.hosts, cluster.cores_per_host, cluster.link_gbps, FLAGS.latency_us, FLAGS.dedup_lookups))
    print(format_table(cost_model.predict_all(profile, cluster)))
    print("\npick: %s (%s)" % (strategy, reason))


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


def result_batches(paths: Sequence[str]) -> List[int]:
    """The per-replica batch of each results JSON (`benchmarks.scale_out`'s setup)."""
    batches = []
    for path in paths:
        with open(path) as f:
            batches.append(json.load(f)["results"]["setup"].get("batch", config_lib.DEFAULT_BATCH_SIZE))
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
    """A 2-host variant of a scale-out run: what the cost model needs of it.

    Attributes:
      variant: its entry in the results JSON.
      strategy: the cost model's strategy.
      profile: the step: the run's batch, its reference's compute, its rows' options.
      beyond_s: median seconds its step took beyond that compute and its bytes' time on the link.
      handled_bytes: the bytes a process handles per step (`cost_model.traffic`).
    """

    variant: dict
    strategy: str
    profile: cost_model.StepProfile
    beyond_s: float
    handled_bytes: float


def measured_variants(path: str, profile: cost_model.StepProfile, distinct_ids: Mapping[int, float]
                      ) -> Tuple[cost_model.Cluster, Dict[str, Measured]]:
    """`(cluster, {name: Measured})` of every 2-host variant with runs in a results JSON.

    Compute = the variant's reference single variant's (else `single`'s)
    median wall ms per step; rows follow its `--dedup_lookups` and
    `--exchange_fp16`.

    Raises:
      ValueError: the run's batch is not `profile`'s and has no distinct ids counted.
    """
    with open(path) as f:
        data = json.load(f)
    variants = data["results"]["variants"]
    setup = data["results"]["setup"]
    at_batch = profile_at(profile, setup.get("batch", config_lib.DEFAULT_BATCH_SIZE), distinct_ids)
    link_gbps = setup["link_gbps"] or cost_model.DEFAULT_UNLIMITED_GBPS
    cluster = cost_model.Cluster(hosts=2, cores_per_host=1, link_gbps=link_gbps, latency_s=0.0)
    measured = {}
    for name, variant in variants.items():
        reference = (variants.get(variant["baseline"], {}).get("runs")
                     or variants.get(SINGLE_VARIANT, {}).get("runs"))
        if variant["strategy"] == "single" or not variant["runs"] or not reference:
            continue
        step = dataclasses.replace(
            at_batch, compute_s=_median([r["step_ms"] for r in reference]) / 1000.0,
            dedup=DEDUP_FLAG in variant["train_flags"], exchange_fp16=FP16_EXCHANGE_FLAG in variant["train_flags"])
        strategy = _strategy_of(variant)
        link_bytes, handled, _ = cost_model.traffic(strategy, step, cluster)
        beyond = (_median([r["step_ms"] for r in variant["runs"]]) / 1000.0 - step.compute_s
                  - link_bytes / cluster.link_bytes_per_s)
        measured[name] = Measured(variant, strategy, step, beyond, handled)
    return cluster, measured


def fit(paths: Sequence[str], profile: cost_model.StepProfile,
        distinct_ids: Mapping[int, float]) -> cost_model.StepProfile:
    """`profile` with its step costs fitted to scale-out benchmarks' results.

    Each strategy's costs are fitted to its `FIT_VARIANTS` in every file
    (`cost_model.calibrate`); the hybrid strategy's take Horovod's cost per byte.

    Raises:
      ValueError: fewer than two configurations of a strategy's variants in all the files.
    """
    found = {strategy: [] for strategy in FIT_VARIANTS}
    for path in paths:
        _, measured = measured_variants(path, profile, distinct_ids)
        for strategy, names in FIT_VARIANTS.items():
            found[strategy] += [measured[name] for name in names if name in measured]
    costs = {}
    for strategy in (cost_model.HOROVOD, cost_model.PS, cost_model.HYBRID):
        runs = found[strategy]
        if len(runs) < 2:
            raise ValueError("%s: %d run(s) of %s, and the fit needs two (two byte counts, or two batches)"
                             % (", ".join(paths), len(runs), " or ".join(FIT_VARIANTS[strategy])))
        costs[strategy] = cost_model.calibrate(
            [m.handled_bytes for m in runs], [m.profile.compute_s for m in runs], [m.beyond_s for m in runs],
            cpu_s_per_byte=costs[cost_model.HOROVOD].cpu_s_per_byte if strategy == cost_model.HYBRID else None)
    return dataclasses.replace(profile, step_costs=costs)


def check(paths: Sequence[str], profile: cost_model.StepProfile, distinct_ids: Mapping[int, float]) -> str:
    """Predictions with `profile`'s step costs next to each 2-host variant measured in `paths`, as markdown."""
    lines = ["| run | batch | variant | predicted examples/sec | measured | error | predicted MB/step on the link "
             "| measured tx MB/step |", "|---|---|---|---|---|---|---|---|"]
    for path in paths:
        cluster, measured = measured_variants(path, profile, distinct_ids)
        for name, m in measured.items():
            step = dataclasses.replace(m.profile, step_costs=profile.step_costs)
            prediction = cost_model.predict(m.strategy, step, cluster)
            rate = _median([r["examples_per_sec"] for r in m.variant["runs"]])
            tx = _median([r["tx_bytes_per_step"] for r in m.variant["runs"]])
            lines.append("| %s | %s | %s | %s | %s | %+.0f%% | %.2f | %.2f |" % (
                os.path.splitext(os.path.basename(path))[0], format(step.batch_size, ","), name,
                format(prediction.examples_per_sec, ",.0f"), format(rate, ",.0f"),
                100 * cost_model.relative_error(prediction.examples_per_sec, rate), prediction.link_bytes / 1e6,
                tx / 1e6))
    return "\n".join(lines) + "\n"


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    run()
