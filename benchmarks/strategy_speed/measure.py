"""One run of a variant in a fresh process tree, measured in the window where every process trains.

See the package docstring for the rules: the window, examples/sec, CPU
utilization, peak memory and AUC of a run. `HarnessVariant` is a variant
as `benchmarks.harness.run` measures it, round by round.
"""

import dataclasses
import glob
import json
import os
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy

from benchmarks import common, harness
from benchmarks.strategy_speed.ceilings import NO_CHECKPOINT_STEPS, Progress
from benchmarks.strategy_speed.config import LOG_EVERY_STEPS, BenchmarkConfig
from benchmarks.strategy_speed.variants import CHILD_KINDS, KIND_LAUNCH, KIND_TRAIN, Variant
from jobs import source
from jobs.local import processes

SAMPLE_SECONDS = 0.2
MIB = float(1 << 20)
# Where each training process of a run writes its progress (`--progress_file`, `{task}` per process).
PROGRESS_DIR = "progress"
PROGRESS_FILE = "{task}.jsonl"
# The module that runs a ceiling in a child process.
CEILING_PROGRAM = "benchmarks.strategy_speed.ceilings"
# The metrics of a run, as the harness records them (besides its peak memory).
METRICS = ("examples_per_sec", "cpu_util", "examples_per_cpu_second", "window_s")


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
        examples += batch * float(numpy.interp(end, times, steps) - numpy.interp(start, times, steps))
    return start, end, examples / (end - start)


def _child_env(variant: Variant) -> Dict[str, str]:
    package_root = source.project_root()
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
    return [python, "-m", CEILING_PROGRAM, "--kind", variant.kind, "--output", os.path.join(work, "child.json"),
            "--data_dir", config.data_dir, "--batch_size", str(config.global_batch),
            "--total_steps", str(config.max_steps), "--optimizer", variant.optimizer]


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


class HarnessVariant(harness.Variant):
    """A variant as the harness measures it: each round one run in a fresh process tree."""

    def __init__(self, variant: Variant, config: BenchmarkConfig):
        self.name = variant.name
        self.variant = variant
        self.config = config

    def measure(self, round_index: int) -> harness.Measurement:
        """One run (`run_variant`); its `RunResult` whole in the details."""
        result = run_variant(self.variant, self.config)
        metrics = {name: float(getattr(result, name)) for name in METRICS}
        if result.auc is not None:
            metrics["auc"] = float(result.auc)
        return harness.Measurement(metrics=metrics, peak_rss_mb=result.peak_rss_mib,
                                   details=dataclasses.asdict(result))


def run_results(results: harness.Results) -> Dict[str, List[RunResult]]:
    """Per variant, the `RunResult` of each of its measured rounds."""
    return {name: [RunResult(**details) for details in results.details[name]] for name in results.names}
