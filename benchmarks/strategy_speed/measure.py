"""One run of a variant in a fresh process tree, measured in the window where every process trains.

See the package docstring for the rules: the window, examples/sec, CPU
utilization, peak memory and AUC of a run. `measure` runs every variant of a
benchmark, interleaved round by round.
"""

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
from benchmarks.strategy_speed.config import BenchmarkConfig
from benchmarks.strategy_speed.variants import CHILD_KINDS, KIND_LAUNCH, KIND_TRAIN, Variant
from jobs import source
from jobs.local import processes

LOG_EVERY_STEPS = 10
SAMPLE_SECONDS = 0.2
# A checkpoint interval no run reaches: only the final checkpoint is saved.
NO_CHECKPOINT_STEPS = 10 ** 9
MIB = float(1 << 20)
# Where each training process of a run writes its progress (`--progress_file`, `{task}` per process).
PROGRESS_DIR = "progress"
PROGRESS_FILE = "{task}.jsonl"
# The module whose `--child` runs a ceiling.
PROGRAM = "benchmarks.strategy_speed"

Progress = List[Tuple[float, int]]


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
    return [python, "-m", PROGRAM, "--child", variant.kind, "--child_output",
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


def measure(config: BenchmarkConfig) -> Tuple[Dict[str, List[RunResult]], Dict[str, List[str]]]:
    """Runs every variant `config.runs` times, interleaved; a failed run is recorded, not fatal."""
    results: Dict[str, List[RunResult]] = {v.name: [] for v in config.variants}
    failures: Dict[str, List[str]] = {v.name: [] for v in config.variants}
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
