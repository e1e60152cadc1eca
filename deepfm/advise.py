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
(`planner.calibrated.FITTED_TO`). `--fit_to A.json,B.json` fits them to other runs of
`benchmarks.scale_out`, and `--check_against A.json,B.json` prints, for
each 2-host variant measured there, the prediction next to the
measurement and the error. Horovod's ranks talk over MPI with yielding
waits by default (`--transport mpi`: SageMaker's `mpi` distribution, a
Kubernetes MPIJob, `deepfm.launch` with `mpirun`), where the hybrid
strategy has costs of its own, fitted to two runs of `hybrid+mpi_yield`
(`planner.calibrated.MPI_FITTED_TO`; `--fit_mpi_to` refits them); `--transport gloo` for
`horovodrun --gloo`. Runs at another per-replica batch than
`--batch_size` are read with that batch's distinct ids, counted on
`--data` (the runs' data).

What a process's further cores give (`cost_model.CoreCosts`: the serial
share of a step's compute, the share of the exchange's cost that spreads
over a rank's cores) defaults to the figures of 16 vCPUs in
`planner.calibrated.CORES_FITTED_TO` (`benchmarks.multicore`'s format: one process on 4 vCPUs
against one, and `horovod` at 2 hosts of 4 vCPUs against 2 of 1);
`--fit_cores_to` fits them to other runs of `benchmarks.multicore`, whose
results `--check_against` also reads (every distributed run at its layout).
Reading, fitting and checking are `planner.benchmark_fit`'s.
"""

import contextlib
import dataclasses
import json
import os
import time
from typing import List, Tuple

from absl import app, flags

from cli import config_flags, entry
from deepfm import config as config_lib
from input_pipeline import schema
from planner import advice, cost_model
from planner import benchmark_fit as fit_lib
from planner import layouts as layouts_lib

PROGRAM = "deepfm.advise"

FLAGS = flags.FLAGS
EMBEDDING_VARIABLES = ("fm_w", "fm_v")


def define_flags() -> None:
    """Defines the flags of the entry point: `planner.advice.AdviceConfig`'s fields."""
    config_flags.define_flags([advice.AdviceConfig])
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


def count_distinct_ids(data: str, batch_size: int, batches: int = advice.DEFAULT_WARMUP_STEPS) -> float:
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
    try:
        config = advice.AdviceConfig(**config_flags.values(advice.AdviceConfig, FLAGS))
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if not os.path.isfile(os.path.join(config.data, schema.METADATA_FILE)):
        raise app.UsageError(
            "--data %r is not a dataset root (a directory with metadata.json): make one with `python -m "
            "dataprep.synthetic --rows 300000 --output_dir %s` (the scale-out benchmarks' data) or `python -m "
            "dataprep.criteo`" % (config.data, config.data))
    try:
        cluster = cost_model.Cluster(hosts=config.hosts, cores_per_host=config.cores_per_host,
                                     link_gbps=config.link_gbps, latency_s=config.latency_us * 1e-6,
                                     ranks_per_host=config.ranks_per_host, transport=config.transport)
    except ValueError as e:
        raise app.UsageError("--ranks_per_host / --cores_per_host: %s" % e) from e
    try:
        core_costs = fit_lib.fit_cores(config.fit_cores_to) if config.fit_cores_to else fit_lib.CALIBRATED_CORE_COSTS
    except (OSError, KeyError, ValueError) as e:
        raise app.UsageError("--fit_cores_to: %s" % e) from e
    core = pin_to_one_core()
    try:
        seconds, ids, distinct, dense, model = measure_step(config.data, config.batch_size, config.dedup_lookups,
                                                            config.steps, config.warmup_steps)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if config.compute_ms is not None:
        seconds = config.compute_ms / 1000.0
    profile = cost_model.StepProfile(
        compute_s=seconds, batch_size=config.batch_size, ids_per_step=ids, distinct_ids_per_step=distinct,
        embedding_size=model.embedding_size, feature_size=model.feature_size, dense_params=dense,
        step_costs=fit_lib.CALIBRATED_COSTS, dedup=config.dedup_lookups, core_costs=core_costs)
    try:
        distinct_ids = {batch: count_distinct_ids(config.data, batch)
                        for batch in fit_lib.result_batches(config.fit_to + config.fit_mpi_to + config.check_against)
                        if batch != config.batch_size}
        if config.fit_to:
            profile = fit_lib.fit(config.fit_to, profile, distinct_ids)
        if config.fit_mpi_to:
            profile = fit_lib.fit_mpi(config.fit_mpi_to, profile, distinct_ids)
        checked = fit_lib.check(config.check_against, profile, distinct_ids) if config.check_against else None
    except (OSError, KeyError, ValueError) as e:
        raise app.UsageError("--fit_to / --fit_mpi_to / --check_against: %s" % e) from e
    best, reason = advise_layout(profile, cluster)
    if config.json:
        print(json.dumps({"step_ms": 1000 * seconds, "ids_per_step": ids, "distinct_ids_per_step": distinct,
                          "cluster": dataclasses.asdict(cluster), "core_costs": profile.core_costs._asdict(),
                          "predictions": [dataclasses.asdict(p) for p in layouts(profile, cluster)],
                          "pick": best.strategy, "ranks_per_host": best.ranks_per_host,
                          "threads_per_rank": best.threads, "reason": reason}, sort_keys=True))
        return
    print("measured on core %d: step %.2f ms%s, %d ids and %.0f distinct per batch, %d dense parameters"
          % (core, 1000 * seconds, " (given)" if config.compute_ms is not None else "", ids, distinct, dense))
    fitted_to = ", ".join(os.path.basename(path) for path in config.fit_to or fit_lib.FITTED_TO)
    mpi_fitted_to = ", ".join(os.path.basename(path) for path in config.fit_mpi_to or fit_lib.MPI_FITTED_TO)
    for name in list(fit_lib.FIT_VARIANTS) + list(fit_lib.FIT_MPI_VARIANTS):
        if name in fit_lib.FIT_MPI_VARIANTS:
            fitted_to = mpi_fitted_to
            if name not in profile.step_costs:
                print("%s costs: none fitted (no run of it in %s): its costs over Gloo stand for them"
                      % (name, fitted_to))
                continue
        costs = profile.step_costs.get(name) or profile.costs(name)
        print("%s costs (fitted to %s): %.2f ms fixed per step, %.2f ns CPU per byte moved, %.3f s per s of "
              "compute" % (name, fitted_to, 1000 * costs.overhead_s, 1e9 * costs.cpu_s_per_byte,
                           costs.compute_factor))
    print("a process's further cores (fitted to %s): %.3f of a step's compute is serial, %.3f of the exchange's "
          "cost spreads over a rank's cores" % (", ".join(os.path.basename(p) for p in config.fit_cores_to or
                                                          fit_lib.CORES_FITTED_TO), profile.core_costs.serial_fraction,
                                                profile.core_costs.exchange_spread))
    if checked:
        print("\nchecked against %s:\n" % ", ".join(os.path.basename(path) for path in config.check_against))
        print(checked)
    print("predicted for %d host(s) x %d core(s), %g Gbit/s, %g us latency, Horovod over %s, dedup_lookups=%s, "
          "processes per host: %s:\n"
          % (cluster.hosts, cluster.cores_per_host, cluster.link_gbps, config.latency_us, cluster.transport,
             config.dedup_lookups, config.ranks_per_host or "every divisor of the cores"))
    print(format_table(layouts(profile, cluster)))
    print("\npick: %s, %d process(es) per host of %d core(s) and thread(s) each (%s)"
          % (best.strategy, best.ranks_per_host, best.threads, reason))


def layouts(profile: cost_model.StepProfile, cluster: cost_model.Cluster) -> List[cost_model.Prediction]:
    """The predictions to show: every strategy at the given processes per host, else at every layout."""
    if cluster.ranks_per_host:
        return cost_model.predict_all(profile, cluster)
    return layouts_lib.predict_layouts(profile, cluster)


def advise_layout(profile: cost_model.StepProfile, cluster: cost_model.Cluster
                  ) -> Tuple[cost_model.Prediction, str]:
    """The best prediction and why: at the given processes per host, or over every layout."""
    if cluster.ranks_per_host:
        strategy, reason = cost_model.choose(profile, cluster)
        return cost_model.predict(strategy, profile, cluster), reason
    return layouts_lib.choose_layout(profile, cluster)


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    run()
