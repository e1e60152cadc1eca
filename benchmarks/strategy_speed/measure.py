"""Every distribution strategy side by side, the levers of the best, and the two ceilings.

    python -m benchmarks.strategy_speed [--runs 3] [--steps 300] [--quick] [--variants a,b]

Trains DeepFM at the SageMaker sample's defaults (embedding 32, layers
128-64-32, feature_size 117,581, 39 fields) on the synthetic dataset with the
same GLOBAL batch in every variant (1024; per-replica batch = global /
replicas): `single`, `tower` (2 CPU towers), `mirrored` (2 CPU replicas),
`ps` (1 parameter server and 2 workers on localhost, through
`deepfm.launch`) and `horovod` (2 ranks, through `deepfm.launch`), then
levers on the tower method: the sparse-row `lazy_adam` optimizer, XLA,
intra/inter-op thread pools, the tower split and the OpenMP/KMP variables.
In the same run it measures the two ceilings: the input pipeline alone
(the training `DatasetBuilder`, iterated) and the compute alone (one decoded
batch, cached and repeated, through the same Estimator and model_fn).

Each run of a variant is a fresh process tree (the real `python -m
deepfm.train` or `python -m deepfm.launch`), variants interleaved round by
round. Per run:

* examples/sec: the whole job's throughput after warm-up. Every training
  process records its progress through `deepfm.runtime.hooks.ProgressHook` in its
  own JSON-lines `--progress_file` (wall time and step of this run, every
  `LOG_EVERY_STEPS` steps and at its last step). The window opens when the last training process
  has passed `warmup_steps` of its own steps and closes when the first one
  logs its last line; throughput = examples all processes trained in that
  window (each process's steps, interpolated at the window's ends, times its
  batch) / the window's wall time. For one process this is its rate from
  step `warmup_steps` to its last step; for Horovod's synchronous ranks it is
  the sum over ranks; for the asynchronous parameter-server workers it
  counts only the time they all train at once (the chief starts seconds
  before the other worker, which a per-worker average would hide). The
  hook's own mean (the chief's `--metrics_file` `examples_per_sec`, which
  leaves out the time between steps) is kept in the JSON as
  `hook_examples_per_sec`.
* CPU utilization: CPU seconds of the whole process tree within the window
  / its wall seconds / cores (`benchmarks.common.ProcessTreeSampler`).
* peak resident memory of each process of the tree (launcher, parameter
  servers, workers, ranks); the table shows the largest.
* AUC on the validation split after the same N = (warm-up + timed steps) x
  global batch training examples in every variant (the chief's
  `--metrics_file`).

Results go to `benchmarks/results/strategies.{md,json,png}`.
"""

import argparse
import dataclasses
import glob
import json
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy

from benchmarks import common
from jobs.local import processes

NAME = "strategies"
QUICK_NAME = "strategies_quick"
GLOBAL_BATCH = 1024
DEFAULT_RUNS = 3
DEFAULT_STEPS = 200
DEFAULT_WARMUP_STEPS = 50
QUICK_STEPS = 60
QUICK_WARMUP_STEPS = 20
LOG_EVERY_STEPS = 10
SAMPLE_SECONDS = 0.2
RUN_TIMEOUT_S = 900
# A checkpoint interval no run reaches: only the final checkpoint is saved.
NO_CHECKPOINT_STEPS = 10 ** 9
MIB = float(1 << 20)

# Replicas of the distributed variants: towers, MirroredStrategy replicas, ps workers, Horovod ranks.
REPLICAS = 2
NUM_PS = 1
OMP_THREADS = 2
KMP_AFFINITY_COMPACT = "granularity=fine,compact,1,0"
# Without it, TensorFlow's XLA auto-clustering (`--xla`) leaves CPU graphs alone.
XLA_CPU_JIT_FLAGS = "--tf_xla_cpu_global_jit"

TARGET_EXAMPLES_PER_SEC = 90_000
TARGET_RSS_MIB = 1024
TARGET_CEILING_FRACTION = 0.9

KIND_TRAIN = "train"
KIND_LAUNCH = "launch"
KIND_INPUT = "input_ceiling"
KIND_COMPUTE = "compute_ceiling"
CHILD_KINDS = (KIND_INPUT, KIND_COMPUTE)
GROUP_STRATEGY = "strategy"
GROUP_LEVER = "lever"
GROUP_CEILING = "ceiling"
BASELINE = "single"
INPUT_CEILING = "input_ceiling"
COMPUTE_CEILING = "compute_ceiling"

# Where each training process of a run writes its progress (`--progress_file`, `{task}` per process).
PROGRESS_DIR = "progress"
PROGRESS_FILE = "{task}.jsonl"

Progress = List[Tuple[float, int]]


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration the benchmark measures.

    Attributes:
      name: its label in the report and in `--variants`.
      group: `GROUP_STRATEGY`, `GROUP_LEVER` or `GROUP_CEILING`.
      note: what it is, for the report.
      kind: how it runs: `KIND_TRAIN` (`python -m deepfm.train`),
        `KIND_LAUNCH` (`python -m deepfm.launch`), `KIND_INPUT` or
        `KIND_COMPUTE` (a child process of this module).
      strategy: `--strategy` of the training processes.
      replicas: replicas sharing the global batch.
      processes: training processes (each reads global batch / processes
        examples per step).
      optimizer: `--optimizer`.
      train_flags: further `deepfm.train` flags.
      launch_flags: `deepfm.launch` flags (`KIND_LAUNCH`).
      env: extra environment variables of the job.
    """

    name: str
    group: str
    note: str
    kind: str = KIND_TRAIN
    strategy: str = "single"
    replicas: int = 1
    processes: int = 1
    optimizer: str = "adam"
    train_flags: Tuple[str, ...] = ()
    launch_flags: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()

    def per_replica_batch(self, global_batch: int) -> int:
        """`--batch_size`: global / replicas, rounded down (3 towers of 341 make 1023)."""
        return global_batch // self.replicas

    def process_batch(self, global_batch: int) -> int:
        """Examples one step of one training process consumes."""
        return self.per_replica_batch(global_batch) * self.replicas // self.processes


def _towers(count: int) -> Tuple[str, ...]:
    return ("--num_devices", str(count), "--device_type", "cpu")


def _threads(intra: int, inter: int) -> Tuple[str, ...]:
    return ("--intra_op_threads", str(intra), "--inter_op_threads", str(inter))


def _tower_lever(name: str, note: str, towers: int = REPLICAS, flags: Tuple[str, ...] = (),
                 env: Tuple[Tuple[str, str], ...] = ()) -> Variant:
    return Variant(name, GROUP_LEVER, note, strategy="tower", replicas=towers, optimizer="lazy_adam",
                   train_flags=_towers(towers) + flags, env=env)


def all_variants() -> Tuple[Variant, ...]:
    """Every variant, in report order: strategies, levers of the tower method, ceilings."""
    return (
        Variant("single", GROUP_STRATEGY, "one device"),
        Variant("tower", GROUP_STRATEGY, "%d CPU towers, one process" % REPLICAS, strategy="tower",
                replicas=REPLICAS, train_flags=_towers(REPLICAS)),
        Variant("mirrored", GROUP_STRATEGY, "MirroredStrategy, %d CPU replicas" % REPLICAS, strategy="mirrored",
                replicas=REPLICAS, train_flags=_towers(REPLICAS)),
        Variant("ps", GROUP_STRATEGY, "%d ps + %d async workers (gRPC)" % (NUM_PS, REPLICAS), kind=KIND_LAUNCH,
                strategy="ps", replicas=REPLICAS, processes=REPLICAS,
                launch_flags=("--num_ps", str(NUM_PS), "--num_workers", str(REPLICAS))),
        Variant("horovod", GROUP_STRATEGY, "%d ranks, Gloo" % REPLICAS, kind=KIND_LAUNCH, strategy="horovod",
                replicas=REPLICAS, processes=REPLICAS, launch_flags=("--np", str(REPLICAS))),
        Variant("single+lazy_adam", GROUP_LEVER, "sparse-row Adam", optimizer="lazy_adam"),
        _tower_lever("tower+lazy_adam", "sparse-row Adam (base of the levers below)"),
        _tower_lever("tower+lazy_adam+xla", "--xla (session jit level only)", flags=("--xla",)),
        _tower_lever("tower+lazy_adam+xla_cpu", "--xla, TF_XLA_FLAGS=" + XLA_CPU_JIT_FLAGS, flags=("--xla",),
                     env=(("TF_XLA_FLAGS", XLA_CPU_JIT_FLAGS),)),
        _tower_lever("tower+lazy_adam+threads1/1", "intra 1, inter 1", flags=_threads(1, 1)),
        _tower_lever("tower+lazy_adam+threads2/1", "intra 2, inter 1", flags=_threads(2, 1)),
        _tower_lever("tower+lazy_adam+threads2/2", "intra 2, inter 2", flags=_threads(2, 2)),
        _tower_lever("tower1+lazy_adam", "1 tower", towers=1),
        _tower_lever("tower3+lazy_adam", "3 towers (per-replica batch 341)", towers=3),
        _tower_lever("tower+lazy_adam+omp_kmp",
                     "OMP_NUM_THREADS=%d, KMP_AFFINITY=%s" % (OMP_THREADS, KMP_AFFINITY_COMPACT),
                     flags=("--omp_num_threads", str(OMP_THREADS), "--kmp_affinity", KMP_AFFINITY_COMPACT)),
        Variant(INPUT_CEILING, GROUP_CEILING, "input pipeline alone", kind=KIND_INPUT),
        Variant(COMPUTE_CEILING, GROUP_CEILING, "one cached batch repeated, single, adam", kind=KIND_COMPUTE),
        Variant(COMPUTE_CEILING + "+lazy_adam", GROUP_CEILING, "one cached batch repeated, single, lazy_adam",
                kind=KIND_COMPUTE, optimizer="lazy_adam"),
    )


# Lever findings: (what, variant, reference variant).
LEVER_COMPARISONS = (
    ("lazy_adam vs adam, single", "single+lazy_adam", "single"),
    ("lazy_adam vs adam, tower", "tower+lazy_adam", "tower"),
    ("lazy_adam vs adam, compute ceiling", COMPUTE_CEILING + "+lazy_adam", COMPUTE_CEILING),
    ("2 towers vs single, lazy_adam", "tower+lazy_adam", "single+lazy_adam"),
    ("1 tower vs 2", "tower1+lazy_adam", "tower+lazy_adam"),
    ("3 towers vs 2", "tower3+lazy_adam", "tower+lazy_adam"),
    ("--xla (jit level only)", "tower+lazy_adam+xla", "tower+lazy_adam"),
    ("--xla + tf_xla_cpu_global_jit", "tower+lazy_adam+xla_cpu", "tower+lazy_adam"),
    ("threads 1/1 vs default", "tower+lazy_adam+threads1/1", "tower+lazy_adam"),
    ("threads 2/1 vs default", "tower+lazy_adam+threads2/1", "tower+lazy_adam"),
    ("threads 2/2 vs default", "tower+lazy_adam+threads2/2", "tower+lazy_adam"),
    ("OMP/KMP variables", "tower+lazy_adam+omp_kmp", "tower+lazy_adam"),
)


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """What one benchmark run measures.

    Attributes:
      data_dir: the synthetic dataset root (generated with `rows` rows when
        missing).
      rows: rows of a generated dataset.
      runs: runs of every variant.
      steps: timed steps of every training process, after warm-up.
      warmup_steps: steps of every training process before the window.
      global_batch: examples per global step.
      variants: the variants to run, in order.
      results_dir: where the report goes.
      name: the report's file name (without extension).
      timeout_s: the longest one run of a variant may take.
    """

    data_dir: str
    rows: int
    runs: int
    steps: int
    warmup_steps: int
    global_batch: int
    variants: Tuple[Variant, ...]
    results_dir: str
    name: str
    timeout_s: float = RUN_TIMEOUT_S

    @property
    def max_steps(self) -> int:
        """`--max_steps`: steps of every training process."""
        return self.warmup_steps + self.steps

    @property
    def examples(self) -> int:
        """Training examples of every variant: N of "AUC after N"."""
        return self.max_steps * self.global_batch


@dataclasses.dataclass
class RunResult:
    """One run of one variant.

    Attributes:
      examples_per_sec: the job's throughput in the window.
      cpu_util: CPU seconds of the process tree in the window / wall / cores.
      examples_per_cpu_second: examples per CPU second of the tree in the
        window; less sensitive than examples/sec to other work taking cores
        away on a shared machine.
      window_s: the window's wall seconds.
      processes: per process of the tree: `label` and `peak_rss_mib`.
      auc: validation AUC after training (None for the ceilings).
      hook_examples_per_sec: the chief's own `ProgressHook` mean.
    """

    examples_per_sec: float
    cpu_util: float
    examples_per_cpu_second: float
    window_s: float
    processes: List[Dict]
    auc: Optional[float] = None
    hook_examples_per_sec: Optional[float] = None

    @property
    def peak_rss_mib(self) -> float:
        """The largest peak resident memory of any process of the job."""
        return max(p["peak_rss_mib"] for p in self.processes)


# --- measuring -----------------------------------------------------------------


def read_progress(path: str) -> Progress:
    """The (wall time, step) points of a training process's progress file.

    Args:
      path: a `--progress_file` of `deepfm.train`: one JSON object per line
        with (among others) `time`, seconds since the epoch, and `step`, the
        process's steps in this run.

    Returns:
      (seconds since the epoch, step of this process) per line, in order.

    Raises:
      ValueError: a line is not such an object; the message names the file
        and line.
    """
    points = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                points.append((float(record["time"]), int(record["step"])))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError("%s:%d is not a progress record: %s" % (path, number, e)) from e
    return points


def job_window(progress: Sequence[Progress], batches: Sequence[int], warmup_steps: int
               ) -> Tuple[float, float, float]:
    """The window in which every process trains past warm-up, and the job's throughput in it.

    Args:
      progress: per training process, its (wall time, step) points.
      batches: per training process, examples per step.
      warmup_steps: steps each process runs before its part of the window.

    Returns:
      (start, end, examples/sec): the window opens when the last process
      has done `warmup_steps` steps and closes at the first process's last
      point; examples/sec = the examples all processes trained in it
      (steps interpolated at its ends) / its length.

    Raises:
      ValueError: a process logged fewer than two points after warm-up, or
        the processes never trained past warm-up at the same time.
    """
    starts, ends = [], []
    for index, points in enumerate(progress):
        timed = [point for point in points if point[1] >= warmup_steps]
        if len(timed) < 2:
            raise ValueError("training process %d logged %d progress line(s) after %d warm-up steps; "
                             "it needs 2 (more --steps)" % (index, len(timed), warmup_steps))
        starts.append(timed[0][0])
        ends.append(timed[-1][0])
    start, end = max(starts), min(ends)
    if end <= start:
        raise ValueError("the training processes never trained past warm-up at the same time "
                         "(the last started at %.2f, the first ended at %.2f): raise --steps" % (start, end))
    examples = 0.0
    for points, batch in zip(progress, batches):
        times, steps = zip(*points)
        examples += batch * (numpy.interp(end, times, steps) - numpy.interp(start, times, steps))
    return start, end, examples / (end - start)


def _child_env(variant: Variant) -> Dict[str, str]:
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **dict(variant.env))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    return env


def _train_flags(variant: Variant, config: BenchmarkConfig, work: str) -> List[str]:
    return [
        "--train_data", config.data_dir, "--model_dir", os.path.join(work, "model"),
        "--metrics_file", os.path.join(work, "metrics.json"),
        "--batch_size", str(variant.per_replica_batch(config.global_batch)),
        "--max_steps", str(config.max_steps), "--log_every_n_steps", str(LOG_EVERY_STEPS),
        "--progress_file", os.path.join(work, PROGRESS_DIR, PROGRESS_FILE),
        "--save_checkpoints_steps", str(NO_CHECKPOINT_STEPS), "--optimizer", variant.optimizer,
    ] + list(variant.train_flags)


def command(variant: Variant, config: BenchmarkConfig, work: str) -> List[str]:
    """The command line of one run of `variant`, with its files under `work`."""
    python = sys.executable
    if variant.kind == KIND_TRAIN:
        return [python, "-m", "deepfm.train", "--strategy", variant.strategy] + _train_flags(variant, config, work)
    if variant.kind == KIND_LAUNCH:
        return ([python, "-m", "deepfm.launch", "--strategy", variant.strategy,
                 "--log_dir", os.path.join(work, "tasks"), "--timeout_s", str(config.timeout_s)]
                + list(variant.launch_flags) + ["--"] + _train_flags(variant, config, work))
    return [python, "-m", "benchmarks.strategy_speed", "--child", variant.kind, "--child_output",
            os.path.join(work, "child.json"), "--data_dir", config.data_dir,
            "--batch_size", str(config.global_batch), "--steps", str(config.steps),
            "--warmup_steps", str(config.warmup_steps), "--optimizer", variant.optimizer]


def _progress(variant: Variant, work: str) -> List[Progress]:
    if variant.kind in CHILD_KINDS:
        with open(os.path.join(work, "child.json")) as f:
            return [[(t, int(step)) for t, step in json.load(f)["progress"]]]
    paths = sorted(glob.glob(os.path.join(work, PROGRESS_DIR, "*.jsonl")))
    if len(paths) != variant.processes:
        raise RuntimeError("%s: found the progress files of %d training process(es) in %s, expected %d"
                           % (variant.name, len(paths), os.path.join(work, PROGRESS_DIR), variant.processes))
    return [read_progress(path) for path in paths]


def run_variant(variant: Variant, config: BenchmarkConfig) -> RunResult:
    """Runs `variant` once in a fresh process tree and measures it.

    Raises:
      jobs.local.processes.TaskFailedError: the job failed (the message holds the
        end of its log).
      TimeoutError: it ran longer than `config.timeout_s`.
      ValueError: its progress files do not allow a measurement window.
    """
    with tempfile.TemporaryDirectory(prefix="bench-strategies-") as work:
        with processes.ProcessGroup(os.path.join(work, "job")) as group:
            task = group.start("job", command(variant, config, work), env=_child_env(variant))
            with common.ProcessTreeSampler(task.pid, SAMPLE_SECONDS) as sampler:
                group.wait(timeout=config.timeout_s)
        progress = _progress(variant, work)
        batch = variant.process_batch(config.global_batch)
        start, end, rate = job_window(progress, [batch] * len(progress), config.warmup_steps)
        cpu_seconds = sampler.cpu_seconds_at(end) - sampler.cpu_seconds_at(start)
        result = RunResult(
            examples_per_sec=rate, cpu_util=cpu_seconds / (end - start) / (os.cpu_count() or 1),
            examples_per_cpu_second=rate * (end - start) / cpu_seconds if cpu_seconds > 0 else 0.0,
            window_s=end - start,
            processes=[{"label": p.label, "pid": p.pid, "peak_rss_mib": p.peak_rss_bytes / MIB}
                       for p in sampler.processes])
        metrics_path = os.path.join(work, "metrics.json")
        if variant.kind not in CHILD_KINDS:
            with open(metrics_path) as f:
                metrics = json.load(f)
            result.auc = metrics.get("auc")
            result.hook_examples_per_sec = metrics.get("examples_per_sec")
        return result


# --- the ceilings (child processes) ------------------------------------------------


class ProgressRecorder:
    """Records (wall time, step) every `LOG_EVERY_STEPS` steps, as the training logs do."""

    def __init__(self):
        self.points: Progress = []
        self._steps = 0

    def step(self) -> None:
        self._steps += 1
        if self._steps % LOG_EVERY_STEPS == 0:
            self.points.append((time.time(), self._steps))


def _builder(data_dir: str, batch_size: int):
    from input_pipeline import files, formats, pipeline, schema
    metadata = schema.DatasetMetadata.read(data_dir)
    train_files = files.resolve([data_dir], formats.TFRECORD, split=schema.TRAIN_SPLIT)
    input_config = pipeline.PipelineConfig(data_format=formats.TFRECORD, field_size=metadata.field_size)
    return metadata, train_files, pipeline.DatasetBuilder(train_files, input_config, batch_size=batch_size,
                                                          num_epochs=None)


def input_ceiling(data_dir: str, batch_size: int, total_steps: int) -> Progress:
    """Iterates the training `DatasetBuilder`'s dataset alone; returns its progress points."""
    _, _, builder = _builder(data_dir, batch_size)
    progress = ProgressRecorder()
    for _ in builder(None).take(total_steps):
        progress.step()
    return progress.points


def compute_ceiling(data_dir: str, batch_size: int, total_steps: int, optimizer: str) -> Progress:
    """Trains the single-device Estimator on one decoded batch, cached and repeated.

    The same `DatasetBuilder`, model_fn and Estimator as training (through
    `deepfm.runtime.trainer.build_estimator`), at the defaults; only the reading
    and decoding of the input, and the training job's logging hooks (the
    throughput log and the step counter, every `LOG_EVERY_STEPS` steps),
    are taken out of the step.

    Returns:
      The progress points of the training steps.
    """
    import tensorflow as tf

    import strategies
    from deepfm import config as config_lib
    from deepfm.runtime import trainer

    metadata, train_files, builder = _builder(data_dir, batch_size)
    strategy = strategies.get(strategies.StrategyConfig(name=BASELINE))
    strategy.validate()
    strategy.setup()
    progress = ProgressRecorder()

    class Hook(tf.estimator.SessionRunHook):
        def after_run(self, run_context, run_values):
            progress.step()

    with tempfile.TemporaryDirectory(prefix="bench-compute-ceiling-") as model_dir:
        train = config_lib.TrainConfig(model_dir=model_dir, train_files=tuple(train_files), batch_size=batch_size,
                                       max_steps=total_steps, save_checkpoints_steps=NO_CHECKPOINT_STEPS,
                                       log_every_n_steps=NO_CHECKPOINT_STEPS)
        model = config_lib.ModelConfig(feature_size=metadata.feature_size, field_size=metadata.field_size,
                                       optimizer=optimizer)
        estimator = trainer.build_estimator(train, model, strategy)
        estimator.train(lambda: builder(None).take(1).cache().repeat(), max_steps=total_steps, hooks=[Hook()])
    return progress.points


def run_child(args: argparse.Namespace) -> None:
    """Runs one ceiling in this process and writes its progress to `--child_output`."""
    total = args.warmup_steps + args.steps
    if args.child == KIND_INPUT:
        points = input_ceiling(args.data_dir, args.batch_size, total)
    else:
        points = compute_ceiling(args.data_dir, args.batch_size, total, args.optimizer)
    with open(args.child_output, "w") as f:
        json.dump({"progress": points}, f)


# --- the report ----------------------------------------------------------------


def lower_ceiling(variant: Variant, stats: Dict[str, common.Stats]) -> Optional[float]:
    """min(input ceiling, compute ceiling of the variant's optimizer), medians; None if not measured."""
    compute = COMPUTE_CEILING if variant.optimizer == "adam" else COMPUTE_CEILING + "+" + variant.optimizer
    if INPUT_CEILING not in stats or compute not in stats:
        return None
    return min(stats[INPUT_CEILING].median, stats[compute].median)


def _stats(results: Dict[str, List[RunResult]], field: str) -> Dict[str, common.Stats]:
    return {name: common.Stats([getattr(r, field) for r in runs]) for name, runs in results.items() if runs}


def _ratio(value: float, reference: Optional[float]) -> str:
    return "%.2f" % (value / reference) if reference else "n/a"


def _median(values: Sequence[Optional[float]], spec: str) -> str:
    present = [v for v in values if v is not None]
    return format(common.Stats(present).median, spec) if present else "n/a"


def report_body(config: BenchmarkConfig, results: Dict[str, List[RunResult]],
                failures: Dict[str, List[str]], load: Tuple[float, float]) -> str:
    """The markdown of the report: setup, table, ranking, levers, targets.

    Args:
      config: what was measured.
      results: per variant name, its successful runs.
      failures: per variant name, the errors of its failed runs.
      load: the machine's 1-minute load average before and after.
    """
    stats = _stats(results, "examples_per_sec")
    per_cpu = _stats(results, "examples_per_cpu_second")
    baseline = stats[BASELINE].median if BASELINE in stats else None
    rows = []
    for variant in config.variants:
        runs = results.get(variant.name, [])
        failed = len(failures.get(variant.name, []))
        note = " (%d of %d runs failed)" % (failed, config.runs) if failed else ""
        if not runs:
            rows.append([variant.name, variant.note, "failed" + note] + ["n/a"] * 6)
            continue
        training = variant.group != GROUP_CEILING
        ceiling = lower_ceiling(variant, stats) if training else None
        rows.append([
            variant.name, variant.note, stats[variant.name].fmt() + note,
            _ratio(stats[variant.name].median, baseline) if training else "n/a",
            _ratio(stats[variant.name].median, ceiling) if training else "n/a",
            "%.0f%%" % (100 * common.Stats([r.cpu_util for r in runs]).median),
            format(per_cpu[variant.name].median, ",.0f"),
            "%.0f (%d)" % (max(r.peak_rss_mib for r in runs), len(runs[0].processes)),
            _median([r.auc for r in runs], ".4f")])
    table = common.markdown_table(
        ["variant", "what", "examples/sec median (min-max)", "ratio to single", "ratio to lower ceiling",
         "CPU util", "examples per CPU-second", "peak RSS MiB/process (processes)",
         "AUC after %s examples" % format(config.examples, ",")],
        rows)
    sections = [_setup_text(config, load), table, _ceiling_text(stats), _ranking_text(config, stats),
                _lever_text(stats, per_cpu), _target_text(config, results, stats)]
    return "\n\n".join(s for s in sections if s)


def _setup_text(config: BenchmarkConfig, load: Tuple[float, float]) -> str:
    return (
        "DeepFM (embedding 32, layers 128-64-32, dropout 0.5, feature_size from the data, 39 fields) on the "
        "synthetic dataset `%s` (TFRecord, vectorized pipeline), the same global batch of %d in every variant "
        "(per-replica batch = global / replicas). %d run(s) per variant, each a fresh process tree, variants "
        "interleaved; each training process runs %d warm-up steps, then %d timed steps. examples/sec: the "
        "job's throughput in the window where every training process is past warm-up (sum over processes; "
        "see the module docstring of `benchmarks/strategy_speed.py`); CPU util: CPU seconds of the whole process "
        "tree in that window / wall seconds / %d cores; examples per CPU-second: the examples of the window / the "
        "tree's CPU seconds in it; peak RSS: the largest process of the job, with the "
        "number of processes in its tree (launchers, parameter servers, workers, ranks); AUC on the "
        "validation split after %s training examples in every variant. Ratio to lower ceiling: median / "
        "min(input ceiling, compute ceiling with the variant's optimizer). 1-minute load average before / "
        "after the benchmark: %.2f / %.2f (other work on the machine lowers the CPU share of the runs)."
        % (os.path.basename(config.data_dir), config.global_batch, config.runs, config.warmup_steps, config.steps,
           os.cpu_count() or 1, format(config.examples, ","), load[0], load[1]))


def _ceiling_text(stats: Dict[str, common.Stats]) -> str:
    names = [n for n in (INPUT_CEILING, COMPUTE_CEILING, COMPUTE_CEILING + "+lazy_adam") if n in stats]
    if not names:
        return ""
    return "Ceilings (medians): " + "; ".join("%s %s examples/sec" % (n, format(stats[n].median, ",.0f"))
                                              for n in names) + "."


def _ranking_text(config: BenchmarkConfig, stats: Dict[str, common.Stats]) -> str:
    trained = [v.name for v in config.variants if v.group != GROUP_CEILING and v.name in stats]
    ranked = sorted(trained, key=lambda name: -stats[name].median)
    return "Ranking by median examples/sec: " + " > ".join(
        "%s (%s)" % (name, format(stats[name].median, ",.0f")) for name in ranked) + "." if ranked else ""


def _lever_text(stats: Dict[str, common.Stats], per_cpu: Dict[str, common.Stats]) -> str:
    lines = ["- %s: x%.2f examples/sec, x%.2f examples per CPU-second (%s vs %s)" % (
        what, stats[name].median / stats[reference].median, per_cpu[name].median / per_cpu[reference].median,
        name, reference) for what, name, reference in LEVER_COMPARISONS if name in stats and reference in stats]
    return "Levers (ratios of medians):\n" + "\n".join(lines) if lines else ""


def _target_text(config: BenchmarkConfig, results: Dict[str, List[RunResult]],
                 stats: Dict[str, common.Stats]) -> str:
    trained = [v for v in config.variants if v.group != GROUP_CEILING and v.name in stats]
    if not trained:
        return ""
    best = max(trained, key=lambda v: stats[v.name].median)
    rate = stats[best.name].median
    rss = max(r.peak_rss_mib for r in results[best.name])
    ceiling = lower_ceiling(best, stats)
    fraction = rate / ceiling if ceiling else None
    return (
        "Targets, best variant `%s`: %s examples/sec (target >= %s: %s); peak RSS %.0f MiB per process "
        "(target < %d: %s); %s of the lower ceiling (target >= %.0f%%: %s)." % (
            best.name, format(rate, ",.0f"), format(TARGET_EXAMPLES_PER_SEC, ","),
            "met" if rate >= TARGET_EXAMPLES_PER_SEC else "not met", rss, TARGET_RSS_MIB,
            "met" if rss < TARGET_RSS_MIB else "not met",
            "%.0f%%" % (100 * fraction) if fraction is not None else "n/a", 100 * TARGET_CEILING_FRACTION,
            "n/a" if fraction is None else "met" if fraction >= TARGET_CEILING_FRACTION else "not met"))


def raw_results(results: Dict[str, List[RunResult]], failures: Dict[str, List[str]],
                config: BenchmarkConfig) -> dict:
    """The JSON of the report: the setup and every run."""
    return {
        "setup": {"global_batch": config.global_batch, "steps": config.steps, "warmup_steps": config.warmup_steps,
                  "runs": config.runs, "examples": config.examples, "data_dir": os.path.basename(config.data_dir),
                  "log_every_n_steps": LOG_EVERY_STEPS},
        "variants": {
            v.name: {"group": v.group, "note": v.note, "kind": v.kind, "strategy": v.strategy,
                     "replicas": v.replicas, "processes": v.processes, "optimizer": v.optimizer,
                     "per_replica_batch": v.per_replica_batch(config.global_batch),
                     "train_flags": list(v.train_flags), "launch_flags": list(v.launch_flags), "env": dict(v.env),
                     "runs": [dataclasses.asdict(r) for r in results.get(v.name, [])],
                     "failures": failures.get(v.name, [])}
            for v in config.variants},
    }


def write_chart(config: BenchmarkConfig, results: Dict[str, List[RunResult]], info: Dict[str, str]) -> str:
    """The bar chart of every measured variant but the input ceiling, whose bar would dwarf the rest."""
    shown = [v.name for v in config.variants if results[v.name] and v.name != INPUT_CEILING]
    title = "DeepFM training, global batch %d, %s cores" % (config.global_batch, info["cores"])
    if results.get(INPUT_CEILING):
        title += "; input ceiling %s/s" % format(
            common.Stats([r.examples_per_sec for r in results[INPUT_CEILING]]).median, ",.0f")
    return common.bar_chart(config.name, title, shown,
                            [common.Stats([r.examples_per_sec for r in results[n]]) for n in shown],
                            "examples/sec", TARGET_EXAMPLES_PER_SEC, "target", results_dir=config.results_dir)


# --- the entry point -------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=common.DEFAULT_DATA_DIR)
    parser.add_argument("--rows", type=int, default=common.DEFAULT_ROWS, help="rows of a generated dataset")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per training process (default %d)"
                        % DEFAULT_STEPS)
    parser.add_argument("--warmup_steps", type=int, default=None, help="default %d" % DEFAULT_WARMUP_STEPS)
    parser.add_argument("--batch_size", type=int, default=GLOBAL_BATCH, help="global batch")
    parser.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: %d warm-up + %d timed steps, 1 run, report named %s"
                        % (QUICK_WARMUP_STEPS, QUICK_STEPS, QUICK_NAME))
    parser.add_argument("--results_dir", default=common.RESULTS_DIR)
    parser.add_argument("--timeout_s", type=float, default=RUN_TIMEOUT_S, help="limit of one run of a variant")
    parser.add_argument("--optimizer", default="adam", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=CHILD_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--child_output", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def make_config(args: argparse.Namespace) -> BenchmarkConfig:
    """The `BenchmarkConfig` of the parsed arguments.

    Raises:
      ValueError: a bad argument; the message names it and its value.
    """
    variants = tuple(common.select_variants(args.variants, all_variants()))
    steps = args.steps if args.steps is not None else QUICK_STEPS if args.quick else DEFAULT_STEPS
    warmup = (args.warmup_steps if args.warmup_steps is not None
              else QUICK_WARMUP_STEPS if args.quick else DEFAULT_WARMUP_STEPS)
    runs = 1 if args.quick else args.runs
    for flag, value, least in (("runs", runs, 1), ("steps", steps, 2 * LOG_EVERY_STEPS),
                               ("warmup_steps", warmup, 0), ("batch_size", args.batch_size, 1),
                               ("timeout_s", args.timeout_s, 1)):
        if value < least:
            raise ValueError("--%s must be >= %d, got %r" % (flag, least, value))
    too_small = [v.name for v in variants if args.batch_size < v.replicas]
    if too_small:
        raise ValueError("--batch_size %d is smaller than the replicas of %s" % (args.batch_size, ", ".join(too_small)))
    return BenchmarkConfig(
        data_dir=os.path.abspath(args.data_dir), rows=args.rows, runs=runs, steps=steps, warmup_steps=warmup,
        global_batch=args.batch_size, variants=variants, results_dir=args.results_dir,
        name=QUICK_NAME if args.quick else NAME, timeout_s=args.timeout_s)


def measure(config: BenchmarkConfig) -> Tuple[Dict[str, List[RunResult]], Dict[str, List[str]]]:
    """Runs every variant `config.runs` times, interleaved; a failed run is recorded, not fatal."""
    results = {v.name: [] for v in config.variants}
    failures = {v.name: [] for v in config.variants}
    for run in range(config.runs):
        for variant in config.variants:
            started = time.time()
            try:
                result = run_variant(variant, config)
            except (RuntimeError, TimeoutError, ValueError, OSError) as e:
                failures[variant.name].append(str(e)[-2000:])
                print("run %d %-28s FAILED: %s" % (run, variant.name, str(e)[-2000:]), file=sys.stderr)
                continue
            results[variant.name].append(result)
            print("run %d %-28s %8.0f examples/sec  cpu %3.0f%%  rss %5.0f MiB  auc %s  (%.0f s)" % (
                run, variant.name, result.examples_per_sec, 100 * result.cpu_util, result.peak_rss_mib,
                "n/a" if result.auc is None else "%.4f" % result.auc, time.time() - started), file=sys.stderr)
    return results, failures


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.child:
        run_child(args)
        return 0
    try:
        config = make_config(args)
    except ValueError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    common.ensure_data(config.data_dir, config.rows, common.FEATURE_SIZE)
    load_before = os.getloadavg()[0]
    results, failures = measure(config)
    body = report_body(config, results, failures, (load_before, os.getloadavg()[0]))
    info = common.machine_info()
    common.write_report(config.name, "Distribution strategies side by side", body, info,
                        raw_results(results, failures, config), results_dir=config.results_dir)
    write_chart(config, results, info)
    print(body)
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
