"""One process against its peers: the library's `single` strategy, a bare TF 1.x Estimator recipe, DeepCTR.

    python -m benchmarks.peers --data_dir data/synthetic [--runs 3] [--warmup_steps 200] [--steps 500]
                               [--variants NAME,...] [--name peers] [--results_dir DIR]

Every variant trains DeepFM at the SageMaker sample's sizes (batch 1,024,
embedding 32, layers 128-64-32, dropout 0.5, learning rate 0.0005) on the
benchmarks' synthetic TFRecord set, in a fresh process per run, variants
interleaved round by round (`benchmarks.harness`, each round starting one
variant further on). Throughput is the wall time from the end of step
`warmup_steps` to the end of step `warmup_steps + steps` (everything between
steps included: hooks, input, summaries); AUC is the exact (rank) AUC of the
trained model's predictions on the same first `eval_rows` validation rows,
after the same number of training examples, computed here for every variant
alike.

Variants:

* `library` and `library+adam`: `deepfm.train_and_evaluate` with the
  `single` strategy, what the command line runs (its trainer, hooks, input
  pipeline, summaries), with the default optimizer (`lazy_adam`) and with
  Adam. Timed from the trainer's progress file.
* `library_compute`: the library's Estimator as the trainer builds it
  (`trainer.build_estimator`: its model_fn, strategy wrapping and session
  settings, default optimizer) fed one batch of its own input pipeline,
  cached and repeated: the step without input, the ceiling of `library`.
* `library_estimator`: the same Estimator on the library's full input
  pipeline, without the trainer around it (its hooks, progress and stop
  agreement): `library` against it is what the trainer costs, it against
  `library_compute` what the input costs.
* `bare+adam`: a plain Estimator recipe (`benchmarks.peers_models.bare_model_fn`,
  the same DeepFM in a few lines: the same loss, L2 on the looked-up rows,
  Adam), fed TFRecordDataset -> batch -> parse_example -> prefetch.
* `bare_compute+adam`: the same recipe on one parsed batch, cached and repeated.
* `deepctr+adam`: DeepCTR's `DeepFM` (Keras `fit` on in-memory arrays of the
  same training rows, Adam), when the `peers` extra is installed
  (`pip install --no-deps deepctr==0.9.4`); its 39 fields are sparse inputs
  sharing one 117,581 x 32 table (DeepCTR multiplies no feature values into
  its embeddings). Without DeepCTR its row says so.

Levers (`LEVERS`, named in `--variants`): `library` with one setting
changed (the id check, deduplicated lookups, thread pools, parallel reads,
oneDNN, one table for the FM weights and factors), in the same interleaved
run, with their ratio to `library`.

Writes `benchmarks/results/<--name>.{md,json,png}` (default `peers`).
"""

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks import common, harness
from benchmarks import peers_models as models
from cli import config_flags

DEFAULT_WARMUP_STEPS = 200
DEFAULT_STEPS = 500
DEFAULT_RUNS = 3
DEFAULT_EVAL_ROWS = 100_000
# The library's progress interval: its default (`--log_every_n_steps`).
DEFAULT_LOG_EVERY_N_STEPS = 100
EVAL_BATCH_SIZE = 4096
RUN_TIMEOUT_S = 1800
# The goals of the comparison: `library+adam` / `bare+adam`, `library` / `deepctr+adam`,
# `library` / `library_compute`, and |AUC(library+adam) - AUC(bare+adam)|.
GOAL_SAME_OPTIMIZER_RATIO = 1.0
GOAL_DEEPCTR_RATIO = 1.7
GOAL_CEILING_SHARE = 0.9
GOAL_AUC_GAP = 0.002
DEEPCTR_VERSION = "0.9.4"
NAME = "peers"
# The dataset root's splits (`input_pipeline.schema.TRAIN_SPLIT`, `VALIDATION_SPLIT`).
TRAIN, VALIDATION = "train", "validation"
# The ratio columns of the report: to the bare recipe, and to the library at its defaults (the levers' effect).
REFERENCES = ("bare+adam", "library")
DEEPCTR_MISSING = "DeepCTR is not installed (pip install --no-deps deepctr==%s)" % DEEPCTR_VERSION


@dataclasses.dataclass(frozen=True)
class Variant:
    """One contender.

    Attributes:
      name: its row's name.
      kind: how it runs: `library`, `library_compute`, `library_estimator`, `bare`, `bare_compute`, `deepctr`.
      optimizer: the library's optimizer name (`library` kinds).
      what: one line for the report.
      model: `deepfm.ModelConfig` fields set for this variant (`library` kinds), as (name, value) pairs.
      strategy: `strategies.StrategyConfig` fields set for it.
      pipeline: `input_pipeline.pipeline.PipelineConfig` fields set for it.
      model_fn: the name of a model_fn of `benchmarks.peers_models` trained instead of
        the built-in DeepFM (`library` kinds); "" for the built-in one.
      env: environment variables of its process, as (name, value) pairs.
    """

    name: str
    kind: str
    optimizer: str
    what: str
    model: Tuple[Tuple[str, object], ...] = ()
    strategy: Tuple[Tuple[str, object], ...] = ()
    pipeline: Tuple[Tuple[str, object], ...] = ()
    model_fn: str = ""
    env: Tuple[Tuple[str, str], ...] = ()


VARIANTS = (
    Variant("library", "library", "lazy_adam", "deepfm.train_and_evaluate, single, defaults (lazy_adam)"),
    Variant("library+adam", "library", "adam", "deepfm.train_and_evaluate, single, --optimizer adam"),
    Variant("library_compute", "library_compute", "lazy_adam",
            "the library's Estimator on one cached batch of its pipeline (lazy_adam)"),
    Variant("library_estimator", "library_estimator", "lazy_adam",
            "the library's Estimator on its full pipeline, without the trainer's hooks (what they cost)"),
    Variant("bare+adam", "bare", "adam", "plain Estimator recipe, TFRecordDataset -> batch -> parse -> prefetch"),
    Variant("bare_compute+adam", "bare_compute", "adam", "the plain recipe on one cached batch"),
    Variant("deepctr+adam", "deepctr", "adam", "DeepCTR %s DeepFM, Keras fit on in-memory arrays" % DEEPCTR_VERSION),
)
# Levers of the default step, each `library` with one setting changed (`--variants` names them).
LEVERS = (
    Variant("library+no_check_ids", "library", "lazy_adam", "--nocheck_ids", model=(("check_ids", False),)),
    Variant("library+dedup", "library", "lazy_adam", "--dedup_lookups", strategy=(("dedup_lookups", True),)),
    Variant("library+intra1_inter2", "library", "lazy_adam", "--intra_op_threads 1 --inter_op_threads 2",
            strategy=(("intra_op_threads", 1), ("inter_op_threads", 2))),
    Variant("library+intra2_inter1", "library", "lazy_adam", "--intra_op_threads 2 --inter_op_threads 1",
            strategy=(("intra_op_threads", 2), ("inter_op_threads", 1))),
    Variant("library+reads1", "library", "lazy_adam", "one file read at a time (PipelineConfig.num_parallel_reads=1)",
            pipeline=(("num_parallel_reads", 1),)),
    Variant("library+autotune", "library", "lazy_adam", "--input_autotune: tf.data's autotuning thread on",
            pipeline=(("autotune", True),)),
    Variant("library+packed", "library", "lazy_adam",
            "--data_format tfrecord_packed (the same rows, 256 to a TFRecord record)",
            pipeline=(("data_format", "tfrecord_packed"),)),
    Variant("library+adam+packed", "library", "adam", "--optimizer adam --data_format tfrecord_packed",
            pipeline=(("data_format", "tfrecord_packed"),)),
    Variant("library_estimator+packed", "library_estimator", "lazy_adam",
            "library_estimator on --data_format tfrecord_packed", pipeline=(("data_format", "tfrecord_packed"),)),
    Variant("library+onednn_off", "library", "lazy_adam", "TF_ENABLE_ONEDNN_OPTS=0 (Eigen kernels, not oneDNN)",
            env=(("TF_ENABLE_ONEDNN_OPTS", "0"),)),
    Variant("library_compute+intra2_inter1", "library_compute", "lazy_adam",
            "library_compute with --intra_op_threads 2 --inter_op_threads 1",
            strategy=(("intra_op_threads", 2), ("inter_op_threads", 1))),
    Variant("library+one_gather", "library", "lazy_adam",
            "one table [feature_size, 1 + 32] for the FM weights and factors: one lookup (one_gather_model_fn)",
            model_fn="one_gather_model_fn"),
)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What one run trains and measures.

    Attributes:
      data_dir: the dataset root.
      warmup_steps: steps before the timed window.
      steps: timed steps.
      eval_rows: validation rows the AUC is computed on (the first ones).
      log_every_n_steps: the library's progress interval; divides
        `warmup_steps` and `steps`.
    """

    data_dir: str
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    steps: int = DEFAULT_STEPS
    eval_rows: int = DEFAULT_EVAL_ROWS
    log_every_n_steps: int = DEFAULT_LOG_EVERY_N_STEPS

    def __post_init__(self):
        for name in ("warmup_steps", "steps", "eval_rows", "log_every_n_steps"):
            if getattr(self, name) < 1:
                raise ValueError("--%s must be >= 1, got %r" % (name, getattr(self, name)))
        if self.warmup_steps % self.log_every_n_steps or self.steps % self.log_every_n_steps:
            raise ValueError("--log_every_n_steps %d must divide --warmup_steps %d and --steps %d: the library "
                             "is timed from its progress records" % (
                                 self.log_every_n_steps, self.warmup_steps, self.steps))

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.steps


# --- measuring -------------------------------------------------------------------------------------
def exact_auc(labels, scores) -> float:
    """The area under the ROC curve of `scores` for binary `labels`, ties counted half (rank statistic).

    Raises:
      ValueError: the labels hold one class only.
    """
    import numpy as np

    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    positives = float(labels.sum())
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        raise ValueError("AUC needs both classes; the %d labels hold one" % labels.size)
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # The average rank (1-based) of each group of tied scores.
    group_rank = np.cumsum(counts) - (counts - 1) / 2.0
    ranks = group_rank[inverse]
    return float((ranks[labels > 0.5].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def window_span(at_step: Dict[int, float], spec: RunSpec) -> float:
    """How much a clock advanced from the end of step `warmup_steps` to the end of step `total_steps`.

    Args:
      at_step: the clock's reading at the end of (at least) those two steps, by step.
      spec: the run.

    Raises:
      ValueError: a step of the window was not timed (training ended early).
    """
    missing = [s for s in (spec.warmup_steps, spec.total_steps) if s not in at_step]
    if missing:
        raise ValueError("step(s) %s were not timed (timed: %s)" % (missing, sorted(at_step)))
    return at_step[spec.total_steps] - at_step[spec.warmup_steps]


def window_rate(times: Dict[int, float], spec: RunSpec) -> float:
    """Examples/sec in the window, from wall times by step (`window_span`)."""
    return spec.steps * models.BATCH_SIZE / window_span(times, spec)


def window_cpu_us(cpu: Dict[int, float], spec: RunSpec) -> float:
    """CPU microseconds per example in the window, from the process's CPU seconds (every thread) by step."""
    return window_span(cpu, spec) * 1e6 / (spec.steps * models.BATCH_SIZE)


def _step_timer(steps: Sequence[int]):
    """A session hook recording the wall time and the process's CPU time at the end of each of `steps` (from 1)."""
    import tensorflow as tf

    class StepTimer(tf.estimator.SessionRunHook):
        def __init__(self):
            self.step = 0
            self.times: Dict[int, float] = {}
            self.cpu: Dict[int, float] = {}

        def after_run(self, run_context, run_values):
            self.step += 1
            if self.step in steps:
                self.times[self.step] = time.perf_counter()
                self.cpu[self.step] = time.process_time()
    return StepTimer()


def _split_files(data_dir: str, split: str, data_format: str = "tfrecord") -> List[str]:
    """The files of the dataset root's `TRAIN` or `VALIDATION` split in `data_format` (TFRecord by default)."""
    from input_pipeline import files
    return files.resolve([data_dir], data_format) if split == TRAIN else \
        files.default_validation([data_dir], data_format)


def read_rows(paths: Sequence[str], rows: int, field_size: int):
    """The first `rows` rows of TFRecord `paths`, in file order: (ids int64, values float32, labels float32) arrays.

    Raises:
      ValueError: the files hold fewer rows.
    """
    import numpy as np
    import tensorflow as tf

    from input_pipeline import decoders, schema

    spec = decoders.tfrecord_feature_spec(field_size)
    ids, values, labels = [], [], []
    with tf.Graph().as_default():
        parsed = tf.data.TFRecordDataset(list(paths)).take(rows).batch(EVAL_BATCH_SIZE).map(
            lambda serialized: tf.io.parse_example(serialized, spec))
        batch = tf.compat.v1.data.make_one_shot_iterator(parsed).get_next()
        with tf.compat.v1.Session() as session:
            while True:
                try:
                    out = session.run(batch)
                except tf.errors.OutOfRangeError:
                    break
                ids.append(out[schema.IDS_KEY])
                values.append(out[schema.VALUES_KEY])
                labels.append(out[schema.LABEL_KEY])
    got = sum(len(chunk) for chunk in labels)
    if got < rows:
        raise ValueError("%s hold %d rows, fewer than the %d needed" % (", ".join(paths), got, rows))
    return np.concatenate(ids), np.concatenate(values), np.concatenate(labels)


def _numpy_input_fn(ids, values, labels=None):
    """An Estimator input_fn over in-memory rows, in order, once."""
    import tensorflow as tf

    from input_pipeline import schema

    def input_fn():
        features = {schema.FEAT_IDS: ids, schema.FEAT_VALS: values}
        return tf.data.Dataset.from_tensor_slices((features, labels) if labels is not None else features).batch(
            EVAL_BATCH_SIZE)
    return input_fn


def _predictions(estimator, ids, values):
    import numpy as np

    from deepfm.models import ctr
    return np.array([p[ctr.PREDICTION_KEY] for p in estimator.predict(_numpy_input_fn(ids, values),
                                                                      yield_single_examples=True)])


# --- one run of each kind --------------------------------------------------------------------------
def _quiet_tensorflow() -> None:
    import logging as std_logging

    from absl import logging
    logging.set_verbosity(logging.WARNING)
    std_logging.getLogger("tensorflow").setLevel(std_logging.ERROR)


def _library_configs(spec: RunSpec, model_dir: str, variant: Variant, metadata, progress_file: Optional[str] = None):
    """The library's train, model, strategy and pipeline configurations of `variant`."""
    import deepfm
    import strategies
    from input_pipeline import pipeline
    pipeline_options: Dict[str, Any] = dict(variant.pipeline)
    input_config = pipeline.PipelineConfig(field_size=metadata.field_size, **pipeline_options)
    train_files = tuple(_split_files(spec.data_dir, TRAIN, input_config.data_format.name))
    return (deepfm.TrainConfig(model_dir=model_dir, train_files=train_files,
                               max_steps=spec.total_steps, batch_size=models.BATCH_SIZE,
                               log_every_n_steps=spec.log_every_n_steps, progress_file=progress_file),
            deepfm.ModelConfig(feature_size=metadata.feature_size, field_size=metadata.field_size,
                               embedding_size=models.EMBEDDING_SIZE, deep_layers=models.DEEP_LAYERS,
                               dropout=(models.DROPOUT,) * len(models.DEEP_LAYERS), learning_rate=models.LEARNING_RATE,
                               l2_reg=models.L2_REG, optimizer=variant.optimizer, **dict(variant.model)),
            strategies.StrategyConfig(name="single", **dict(variant.strategy)),
            input_config)


def run_library(spec: RunSpec, variant: Variant, model_dir: str, metadata) -> tuple:
    """Trains through the public API (`library`) or the library's Estimator on one cached batch."""
    import deepfm
    import strategies
    from deepfm.runtime import hooks, trainer
    from input_pipeline import pipeline

    progress_file = os.path.join(model_dir, "progress.jsonl")
    train, model, strategy_config, input_config = _library_configs(spec, model_dir, variant, metadata, progress_file)
    strategy = strategies.get(strategy_config)
    model_fn = getattr(models, variant.model_fn) if variant.model_fn else None
    if variant.kind == "library":
        deepfm.train_and_evaluate(train, model, input_config, strategy=strategy, model_fn=model_fn)
        times = {record.step: record.time for record in hooks.read_progress_file(progress_file)}
        cpu_us = None  # The trainer takes no hook of the benchmark's.
    else:
        builder = pipeline.DatasetBuilder(list(train.train_files), input_config, batch_size=models.BATCH_SIZE,
                                          num_epochs=None)
        strategy.setup()
        strategy.prepare(trainer.plan_for(train, spec.total_steps))
        context = strategy.input_plan().context
        timer = _step_timer((spec.warmup_steps, spec.total_steps))

        def input_fn():
            dataset = builder(context)
            return dataset.take(1).cache().repeat() if variant.kind == "library_compute" else dataset
        trainer.build_estimator(model, strategy, model_fn).train(input_fn, max_steps=spec.total_steps, hooks=[timer])
        times = timer.times
        cpu_us = window_cpu_us(timer.cpu, spec)
    return window_rate(times, spec), cpu_us, trainer.build_estimator(model, strategy, model_fn)


def run_bare(spec: RunSpec, variant: Variant, model_dir: str, metadata) -> tuple:
    """Trains the plain Estimator recipe."""
    import tensorflow as tf

    timer = _step_timer((spec.warmup_steps, spec.total_steps))
    estimator = tf.estimator.Estimator(models.bare_model_fn, model_dir=model_dir, params={
        "feature_size": metadata.feature_size, "field_size": metadata.field_size})
    estimator.train(models.bare_input_fn(_split_files(spec.data_dir, TRAIN), metadata.field_size,
                                  compute_only=variant.kind == "bare_compute"),
                    max_steps=spec.total_steps, hooks=[timer])
    return window_rate(timer.times, spec), window_cpu_us(timer.cpu, spec), estimator


def run_deepctr(spec: RunSpec, metadata, val_ids, val_labels) -> Dict:
    """Trains DeepCTR's DeepFM with Keras `fit`; returns the run's measurements."""
    import numpy as np
    import tensorflow as tf
    from deepctr.feature_column import SparseFeat
    from deepctr.models import DeepFM

    ids, _, labels = read_rows(_split_files(spec.data_dir, TRAIN), spec.total_steps * models.BATCH_SIZE,
                               metadata.field_size)
    names = ["f%d" % f for f in range(metadata.field_size)]
    columns = [SparseFeat(name, vocabulary_size=metadata.feature_size, embedding_dim=models.EMBEDDING_SIZE,
                          embedding_name="ids", dtype="int64") for name in names]
    model = DeepFM(columns, columns, dnn_hidden_units=models.DEEP_LAYERS, dnn_dropout=models.DROPOUT)
    model.compile(tf.keras.optimizers.Adam(models.LEARNING_RATE), "binary_crossentropy")
    times: Dict[int, float] = {}
    cpu: Dict[int, float] = {}

    class Timer(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 in (spec.warmup_steps, spec.total_steps):
                times[batch + 1] = time.perf_counter()
                cpu[batch + 1] = time.process_time()

    model.fit({name: ids[:, f] for f, name in enumerate(names)}, labels, batch_size=models.BATCH_SIZE, epochs=1,
              shuffle=False, verbose=0, callbacks=[Timer()])
    prob = model.predict({name: val_ids[:, f] for f, name in enumerate(names)}, batch_size=EVAL_BATCH_SIZE,
                         verbose=0)
    return {"examples_per_sec": window_rate(times, spec), "cpu_us_per_example": window_cpu_us(cpu, spec),
            "auc": exact_auc(val_labels, np.reshape(prob, [-1]))}


def run_one(spec: RunSpec, variant: Variant) -> Dict:
    """Trains `variant` once here; returns examples/sec, CPU per example (None for `library`), AUC, peak memory."""
    from input_pipeline import schema

    _quiet_tensorflow()
    metadata = schema.DatasetMetadata.read(spec.data_dir)
    val_ids, val_values, val_labels = read_rows(_split_files(spec.data_dir, VALIDATION), spec.eval_rows,
                                                metadata.field_size)
    if variant.kind == "deepctr":
        out = run_deepctr(spec, metadata, val_ids, val_labels)
    else:
        with tempfile.TemporaryDirectory() as model_dir:
            run = run_library if variant.kind.startswith("library") else run_bare
            rate, cpu_us, estimator = run(spec, variant, model_dir, metadata)
            out = {"examples_per_sec": rate, "cpu_us_per_example": cpu_us,
                   "auc": exact_auc(val_labels, _predictions(estimator, val_ids, val_values))}
    out["peak_rss_mb"] = common.peak_rss_mb()
    return out


def deepctr_available() -> Optional[str]:
    """None when DeepCTR can be imported, else why not."""
    return None if importlib.util.find_spec("deepctr") is not None else DEEPCTR_MISSING


# --- the comparison --------------------------------------------------------------------------------
def round_ratios(results: Dict[str, Dict[str, list]], a: str, b: str) -> common.Stats:
    """`a`'s examples/sec over `b`'s, one ratio per round (the two ran in the same round)."""
    return common.Stats([x / y for x, y in zip(results[a]["examples_per_sec"], results[b]["examples_per_sec"])])


def goals(results: Dict[str, Dict[str, list]], auc: Dict[str, common.Stats]) -> List[List[str]]:
    """The issue's goals, each with its measured value and whether it is met (rows of the goals table).

    Speed goals are medians of per-round ratios; the AUC goal compares the
    medians of the two variants' AUCs.
    """
    rows = []

    def check(goal, a, b, threshold, absolute=False):
        if a not in results or b not in results:
            rows.append([goal, "not measured (%s or %s missing)" % (a, b), "n/a"])
            return
        if absolute:
            value = abs(auc[a].median - auc[b].median)
            rows.append([goal, "%.4f" % value, "yes" if value <= threshold else "no"])
        else:
            ratios = round_ratios(results, a, b)
            rows.append([goal, ratios.fmt(".2f"), "yes" if ratios.median >= threshold else "no"])
    check("library+adam / bare+adam >= %.2f" % GOAL_SAME_OPTIMIZER_RATIO, "library+adam", "bare+adam",
          GOAL_SAME_OPTIMIZER_RATIO)
    check("library / deepctr+adam >= %.1f" % GOAL_DEEPCTR_RATIO, "library", "deepctr+adam", GOAL_DEEPCTR_RATIO)
    check("library / library_compute >= %.2f" % GOAL_CEILING_SHARE, "library", "library_compute", GOAL_CEILING_SHARE)
    check("|AUC library+adam - AUC bare+adam| <= %.3f" % GOAL_AUC_GAP, "library+adam", "bare+adam", GOAL_AUC_GAP,
          absolute=True)
    return rows


@dataclasses.dataclass(frozen=True)
class PeersConfig(harness.HarnessConfig):
    """The benchmark's options (its flags); `spec()` is what each run trains and measures."""

    rounds: int = config_flags.field(DEFAULT_RUNS, "Runs per variant, each a fresh process.", flag="runs")
    variants: str = config_flags.field("", "Comma-separated variants (default: %s; levers: %s)." % (
        ", ".join(v.name for v in VARIANTS), ", ".join(v.name for v in LEVERS)))
    data_dir: str = config_flags.field(common.DEFAULT_DATA_DIR, "The synthetic dataset (written when missing).")
    rows: int = config_flags.field(common.DEFAULT_ROWS, "Rows generated when --data_dir is empty.")
    warmup_steps: int = config_flags.field(DEFAULT_WARMUP_STEPS, "Steps before the timed window.")
    steps: int = config_flags.field(DEFAULT_STEPS, "Timed steps per run, after the warm-up.")
    eval_rows: int = config_flags.field(DEFAULT_EVAL_ROWS, "Validation rows the AUC is computed on.")
    log_every_n_steps: int = config_flags.field(DEFAULT_LOG_EVERY_N_STEPS, "The library's progress interval; "
                                                "divides --warmup_steps and --steps.")
    one: str = config_flags.field("", "Internal: train this variant once in this process and print JSON.")

    def __post_init__(self):
        super().__post_init__()
        self.spec()
        common.select_variants(self.variants or self.one, VARIANTS + LEVERS)

    def spec(self) -> RunSpec:
        """What one run trains and measures (checked: a bad value is named with its flag)."""
        return RunSpec(self.data_dir, self.warmup_steps, self.steps, self.eval_rows, self.log_every_n_steps)


@dataclasses.dataclass
class PeerVariant(harness.Variant):
    """A contender, trained in a fresh process per round."""

    variant: Variant
    config: PeersConfig

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.variant.name

    def measure(self, round_index: int) -> harness.Measurement:
        c = self.config
        out = common.run_json_subprocess(
            ["-m", "benchmarks.peers", "--data_dir", c.data_dir, "--warmup_steps", str(c.warmup_steps),
             "--steps", str(c.steps), "--eval_rows", str(c.eval_rows), "--log_every_n_steps", str(c.log_every_n_steps),
             "--one", self.variant.name], timeout=RUN_TIMEOUT_S, env=dict(self.variant.env))
        print("run %d %-18s %8.0f examples/sec  AUC %.4f  %6.0f MiB" % (
            round_index, self.variant.name, out["examples_per_sec"], out["auc"], out[harness.PEAK_RSS_MB]),
            file=sys.stderr)
        metrics = {"examples_per_sec": out["examples_per_sec"], "auc": out["auc"]}
        if out["cpu_us_per_example"] is not None:
            metrics["cpu_us_per_example"] = out["cpu_us_per_example"]
        return harness.Measurement(metrics, out[harness.PEAK_RSS_MB])


def report_body(config: PeersConfig, variants: Sequence[Variant], results: harness.Results,
                absent: Dict[str, str]) -> str:
    """The report's tables: a row per variant (or why it was not measured), then the goals."""
    table = {name: results.values[name] for name in results.names if results.values[name]}
    stats = {name: common.Stats(r["examples_per_sec"]) for name, r in table.items()}
    auc = {name: common.Stats(r["auc"]) for name, r in table.items()}
    references = [name for name in REFERENCES if name in stats] or list(stats)[:1]
    spec = config.spec()
    rows = []
    for v in variants:
        if v.name in absent or v.name not in table:
            why = absent.get(v.name) or results.failures.get(v.name, "no round")
            rows.append([v.name, v.what, "not measured: %s" % why] + [""] * (len(references) + 3))
            continue
        cpu = table[v.name].get("cpu_us_per_example", [])
        rows.append([v.name, v.what, stats[v.name].fmt()]
                    + [round_ratios(table, v.name, r).fmt(".2f") for r in references]
                    + [common.Stats(cpu).fmt(".1f") if cpu else "-",
                       auc[v.name].fmt(".4f"), "%.0f" % max(table[v.name][harness.PEAK_RSS_MB])])
    return (
        "DeepFM on %s synthetic rows (TFRecord), batch %d, embedding %d, layers %s, dropout %.1f, learning rate "
        "%g, feature_size %d, 39 fields. %d runs per variant, each a fresh process, variants interleaved (each "
        "round starting one variant further on); ratios: median (min-max) of the per-round ratios; "
        "%d warm-up steps, then %d timed steps (wall time from the end of step %d to the end of step %d; CPU: "
        "the process's, every thread, in the same window, where a hook can time it: not `library`, whose trainer "
        "takes none); "
        "AUC: exact, on the first %s validation rows, after %s training examples.\n\n" % (
            format(config.rows, ","), models.BATCH_SIZE, models.EMBEDDING_SIZE, "-".join(map(str, models.DEEP_LAYERS)),
            models.DROPOUT, models.LEARNING_RATE, common.FEATURE_SIZE, results.rounds_run, config.warmup_steps,
            config.steps, config.warmup_steps, spec.total_steps, format(config.eval_rows, ","),
            format(spec.total_steps * models.BATCH_SIZE, ","))
        + common.markdown_table(["variant", "what", "examples/sec median (min-max)"]
                                + ["ratio to %s" % r for r in references]
                                + ["CPU µs/example median (min-max)", "AUC median (min-max)", "peak RSS MiB"], rows)
        + "\n\nGoals:\n\n" + common.markdown_table(["goal", "measured (median (min-max) over rounds)", "met"],
                                                      goals(table, auc)))


def benchmark(config: PeersConfig) -> int:
    """Runs the benchmark (or, with `one`, one variant's run in this process); returns the exit status."""
    if config.one:
        print(json.dumps(run_one(config.spec(), common.select_variants(config.one, VARIANTS + LEVERS)[0])))
        return 0
    variants = common.select_variants(config.variants or ",".join(v.name for v in VARIANTS), VARIANTS + LEVERS)
    common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
    absent = {v.name: why for v in variants if v.kind == "deepctr" and (why := deepctr_available())}
    measured = [PeerVariant(v, config) for v in variants if v.name not in absent]
    results = harness.run(measured, config.rounds, config.warmup_rounds, rotate=True)
    body = report_body(config, variants, results, absent)
    record = harness.machine_record()
    try:
        record["deepctr"] = importlib.metadata.version("deepctr")
    except importlib.metadata.PackageNotFoundError:
        record["deepctr"] = "not installed"
    shown = [name for name in results.names if results.values[name]]

    def chart(name: str, results_dir: str) -> str:
        return common.bar_chart(name, "DeepFM, one process (%s cores)" % record["cores"], shown,
                                [common.Stats(results.values[n]["examples_per_sec"]) for n in shown], "examples/sec",
                                results_dir=results_dir)

    harness.write(results, config, NAME, "One process against its peers",
                  body + "\n\nCommand: `%s`" % record["command"], record, chart=chart if shown else None,
                  extra={"absent": absent})
    print(body)
    return 1 if results.failures else 0


if __name__ == "__main__":
    harness.main(PeersConfig, benchmark)
