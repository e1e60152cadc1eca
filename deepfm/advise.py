"""Which strategy to scale out with: measures a step here, predicts N hosts x C cores with `strategies.cost_model`.

    python -m deepfm.advise --data data/synthetic_300k --hosts 2 --cores_per_host 1 --link_gbps 25

Measures on this machine, pinned to one core: the wall time of a training
step of the default model on real batches of `--data` (input pipeline
included, `--steps` steps after `--warmup_steps`), the ids and distinct ids
per batch and the parameters outside the embedding tables. Then prints the
predicted examples/sec of every strategy for the cluster shape, and the one
it would pick with the reason. `--compute_ms` replaces the measured step
(e.g. a GPU's step time measured elsewhere).

The CPU cost of moving bytes and the fixed cost of a distributed step (one
pair for Horovod's allgathers, one for parameter servers, one for the
hybrid strategy's all-to-alls) are not measured by a step alone: they default to the values fitted to the 2-host scale-out benchmark
(`benchmarks/results/scale_out.json`); `--fit_to RESULTS_JSON` fits
them to another run of `benchmarks.scale_out`, and `--check_against
RESULTS_JSON` prints, for each 2-host variant measured there, the
prediction next to the measurement and the error (the results must be of
the same per-replica batch as `--batch_size`).
"""

import dataclasses
import json
import os
import time

from absl import app, flags

from deepfm import config as config_lib
from cli import entry
from strategies import cost_model

PROGRAM = "deepfm.advise"

FLAGS = flags.FLAGS
# Horovod's and the parameter servers' costs: fitted by `cost_model.calibrate` (`--fit_to`) to
# benchmarks/results/scale_out.json. The hybrid strategy's: Horovod's CPU per byte (the same Gloo
# transport), and the fixed cost that leaves of the extra CPU per step of `hybrid` in
# benchmarks/results/scale_out_hybrid.json (its tables' rows in one exchange; that run has no
# second byte count to fit both).
CALIBRATED_CPU_NS_PER_BYTE = 0.53
CALIBRATED_OVERHEAD_MS = 12.29
CALIBRATED_PS_CPU_NS_PER_BYTE = 0.50
CALIBRATED_PS_OVERHEAD_MS = 15.24
CALIBRATED_HYBRID_CPU_NS_PER_BYTE = 0.53
CALIBRATED_HYBRID_OVERHEAD_MS = 11.7
DEDUP_FLAG = "--dedup_lookups"
FP16_EXCHANGE_FLAG = "--exchange_fp16"
SINGLE_VARIANT = "single"
SPARSE_AS_DENSE_FLAG = "--sparse_as_dense"
# The benchmark variants each strategy's CPU costs are fitted to (two byte counts each).
HOROVOD_FIT = ("horovod", "horovod+dedup")
PS_FIT = ("ps", "ps+dedup")
HYBRID_FIT = ("hybrid", "hybrid+fp16")
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
    flags.DEFINE_string("fit_to", None, "A benchmarks.scale_out results JSON to fit the CPU costs of moving "
                        "bytes to (default: the costs fitted to benchmarks/results/scale_out.json).")
    flags.DEFINE_string("check_against", None, "A benchmarks.scale_out results JSON: print the predictions "
                        "next to its measured 2-host variants.")
    flags.DEFINE_bool("json", False, "Print one JSON object (the measured step, every prediction, the pick and "
                      "its reason) instead of the tables; what `--distribution auto` of `deepfm.sagemaker` reads.")
    flags.mark_flag_as_required("data")


def pin_to_one_core() -> int:
    """Pins this process to the first core it may run on; returns that core."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


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
    from input_pipeline import files, formats, pipeline, schema

    metadata = schema.load_metadata(os.path.join(data, schema.METADATA_FILE) if os.path.isdir(data) else data)
    train_files = files.resolve([data], formats.TFRECORD, split=schema.TRAIN_SPLIT)
    builder = pipeline.DatasetBuilder(
        train_files, pipeline.PipelineConfig(data_format=formats.TFRECORD, field_size=metadata.field_size),
        batch_size=batch_size, num_epochs=None)
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
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(warmup_steps):
                _, batch_ids = session.run([spec.train_op, ids])
                distinct.append(len(np.unique(batch_ids)))
            started = time.perf_counter()
            for _ in range(steps):
                session.run(spec.train_op)
            seconds = (time.perf_counter() - started) / steps
    return seconds, batch_size * metadata.field_size, float(np.mean(distinct)), int(dense), model


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
    seconds, ids, distinct, dense, model = measure_step(FLAGS.data, FLAGS.batch_size, FLAGS.dedup_lookups,
                                                        FLAGS.steps, FLAGS.warmup_steps)
    if FLAGS.compute_ms is not None:
        seconds = FLAGS.compute_ms / 1000.0
    profile = cost_model.StepProfile(
        compute_s=seconds, batch_size=FLAGS.batch_size, ids_per_step=ids, distinct_ids_per_step=distinct,
        embedding_size=model.embedding_size, feature_size=model.feature_size, dense_params=dense,
        cpu_s_per_byte=CALIBRATED_CPU_NS_PER_BYTE * 1e-9, overhead_s=CALIBRATED_OVERHEAD_MS / 1000.0,
        ps_cpu_s_per_byte=CALIBRATED_PS_CPU_NS_PER_BYTE * 1e-9, ps_overhead_s=CALIBRATED_PS_OVERHEAD_MS / 1000.0,
        hybrid_cpu_s_per_byte=CALIBRATED_HYBRID_CPU_NS_PER_BYTE * 1e-9,
        hybrid_overhead_s=CALIBRATED_HYBRID_OVERHEAD_MS / 1000.0, dedup=FLAGS.dedup_lookups)
    try:
        if FLAGS.fit_to:
            profile = fit(FLAGS.fit_to, profile)
        checked = check(FLAGS.check_against, profile) if FLAGS.check_against else None
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
    for name in (cost_model.HOROVOD, cost_model.PS, cost_model.HYBRID):
        overhead, per_byte = profile.costs(name)
        print("%s costs%s: %.2f ns CPU per byte moved, %.2f ms fixed per step" % (
            name, " fitted to " + os.path.basename(FLAGS.fit_to) if FLAGS.fit_to else "",
            1e9 * per_byte, 1000 * overhead))
    if checked:
        print("\nchecked against %s:\n" % os.path.basename(FLAGS.check_against))
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


def _measured_variants(path: str, profile: cost_model.StepProfile):
    """`(cluster, {name: (variant, profile of its step, extra CPU s per step)})` of a results JSON.

    Each 2-host variant with runs: compute = its reference single variant's
    (else `single`'s) median wall ms per step; rows follow its
    `--dedup_lookups` and `--exchange_fp16`; extra CPU = its median CPU ms
    per step (per host) minus the reference's.

    Raises:
      ValueError: the results are of another per-replica batch than `profile`'s.
    """
    with open(path) as f:
        data = json.load(f)
    variants = data["results"]["variants"]
    setup = data["results"]["setup"]
    batch = setup.get("batch", config_lib.DEFAULT_BATCH_SIZE)
    if batch != profile.batch_size:
        raise ValueError("%s was measured at a per-replica batch of %d, and this step at %d: pass --batch_size %d"
                         % (path, batch, profile.batch_size, batch))
    link_gbps = setup["link_gbps"] or cost_model.DEFAULT_UNLIMITED_GBPS
    cluster = cost_model.Cluster(hosts=2, cores_per_host=1, link_gbps=link_gbps, latency_s=0.0)
    measured = {}
    for name, variant in variants.items():
        reference = (variants.get(variant["baseline"], {}).get("runs")
                     or variants.get(SINGLE_VARIANT, {}).get("runs"))
        if variant["strategy"] == "single" or not variant["runs"] or not reference:
            continue
        step = dataclasses.replace(
            profile, compute_s=_median([r["step_ms"] for r in reference]) / 1000.0,
            dedup=DEDUP_FLAG in variant["train_flags"], exchange_fp16=FP16_EXCHANGE_FLAG in variant["train_flags"])
        extra = (_median([r["cpu_ms_per_step"] for r in variant["runs"]])
                 - _median([r["cpu_ms_per_step"] for r in reference])) / 1000.0
        measured[name] = (variant, step, extra)
    return cluster, measured


def fit(path: str, profile: cost_model.StepProfile) -> cost_model.StepProfile:
    """`profile` with its CPU costs fitted to a scale-out benchmark's results.

    Horovod's costs are fitted to `HOROVOD_FIT` (with and without deduplicated
    lookups: two byte counts), the parameter servers' to `PS_FIT`, the
    hybrid strategy's to `HYBRID_FIT` (float32 and float16 rows).

    Raises:
      ValueError: the file lacks the runs of a variant the fit needs.
    """
    cluster, measured = _measured_variants(path, profile)
    costs = {}
    for strategy, names in ((cost_model.HOROVOD, HOROVOD_FIT), (cost_model.PS, PS_FIT),
                            (cost_model.HYBRID, HYBRID_FIT)):
        missing = [name for name in names if name not in measured]
        if missing:
            raise ValueError("%s has no runs of %s, which the fit needs" % (path, ", ".join(missing)))
        handled = [cost_model.traffic(strategy, measured[n][1], cluster)[1] for n in names]
        costs[strategy] = cost_model.calibrate(handled, [measured[n][2] for n in names])
    return dataclasses.replace(
        profile, overhead_s=costs[cost_model.HOROVOD][0], cpu_s_per_byte=costs[cost_model.HOROVOD][1],
        ps_overhead_s=costs[cost_model.PS][0], ps_cpu_s_per_byte=costs[cost_model.PS][1],
        hybrid_overhead_s=costs[cost_model.HYBRID][0], hybrid_cpu_s_per_byte=costs[cost_model.HYBRID][1])


def check(path: str, profile: cost_model.StepProfile) -> str:
    """Predictions with `profile`'s CPU costs next to each 2-host variant measured in `path`, as markdown."""
    cluster, measured = _measured_variants(path, profile)
    lines = ["| variant | predicted examples/sec | measured | error | predicted MB/step on the link "
             "| measured tx MB/step |", "|---|---|---|---|---|---|"]
    for name, (variant, step, _) in measured.items():
        step = dataclasses.replace(profile, compute_s=step.compute_s, dedup=step.dedup,
                                   exchange_fp16=step.exchange_fp16)
        prediction = cost_model.predict(_strategy_of(variant), step, cluster)
        rate = _median([r["examples_per_sec"] for r in variant["runs"]])
        tx = _median([r["tx_bytes_per_step"] for r in variant["runs"]])
        lines.append("| %s | %s | %s | %+.0f%% | %.2f | %.2f |" % (
            name, format(prediction.examples_per_sec, ",.0f"), format(rate, ",.0f"),
            100 * cost_model.relative_error(prediction.examples_per_sec, rate), prediction.link_bytes / 1e6,
            tx / 1e6))
    return "\n".join(lines) + "\n"


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    run()
