"""What one run measured (`RunResult`), read from the files its hosts and processes wrote (`measure_run`).

Per run, in the window where every training process is past warm-up
(`benchmarks.strategy_speed.measure.job_window`, from the processes' `--progress_file`):

* examples/sec of the job;
* CPU-seconds per 1,000 examples: every process of the job (parameter
  servers included);
* bytes sent per step: the hosts' interface tx bytes in the window / the
  steps of their training processes in it (a host's ps traffic counts with
  its host; ranks of one host talk to each other inside it, which its
  interface does not see; hosts without namespaces: the loopback bytes of
  the whole machine);
* the step time split (ranks of one core each): step = window / steps of a
  training process; compute = `single`'s CPU time per step; communication
  CPU = the host's CPU time per step minus compute (serialization,
  Gloo/gRPC, the ps's work); waiting = step minus the host's CPU time per
  step (its core idle: the network and the other host);
* AUC: the chief's `metrics.json`;
* other load: the machine's CPU time in the window (`/proc/stat`) not used by
  the job's processes, in cores: what else ran at the same time.
"""

import dataclasses
import glob
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy

from benchmarks.scale_out import variants as variants_lib
from benchmarks.scale_out.config import BenchmarkConfig
from benchmarks.scale_out.variants import Variant
from benchmarks.strategy_speed import measure as strategies_bench

PROGRESS_DIR = "progress"
HOST_OUTPUT = "host-%s.json"
TRACES = "traces"
METRICS_FILE = "metrics.json"
MB = 1e6


@dataclasses.dataclass
class RunResult:
    """One run of one variant (see the module docstring for each measure).

    Attributes:
      examples_per_sec: the job's throughput in the window.
      window_s: the window's wall seconds.
      steps: per training process, its steps in the window.
      cpu_seconds: per process of the job (label: CPU seconds in the window).
      tx_bytes: per host, bytes sent in the window.
      rx_bytes: per host, bytes received in the window.
      host_cpu_seconds: per host, CPU seconds of its processes in the window.
      auc: validation AUC after training.
      stopped_hosts: hosts stopped after the others had finished
        (`runner.STRAGGLER_GRACE_S`); their measurements are complete.
      traces: a traced run's step breakdowns (`deepfm.runtime.step_trace`'s
        medians) by training process; empty for a timed run.
      round: the round (0-based) the run belongs to.
      machine_busy_s: the machine's busy CPU seconds in the window, every
        process on it (None: not sampled).
    """

    examples_per_sec: float
    window_s: float
    steps: List[float]
    cpu_seconds: Dict[str, float]
    tx_bytes: List[float]
    rx_bytes: List[float]
    host_cpu_seconds: List[float]
    auc: Optional[float] = None
    stopped_hosts: List[str] = dataclasses.field(default_factory=list)
    round: int = 0
    machine_busy_s: Optional[float] = None
    traces: Dict[str, Dict] = dataclasses.field(default_factory=dict)

    @property
    def examples(self) -> float:
        return self.examples_per_sec * self.window_s

    @property
    def cpu_seconds_per_1k(self) -> float:
        """CPU seconds of every process of the job per 1,000 examples."""
        return 1000.0 * sum(self.host_cpu_seconds) / self.examples

    @property
    def other_cores(self) -> Optional[float]:
        """The machine's CPU in the window not used by the job's processes, in cores."""
        if self.machine_busy_s is None:
            return None
        return max(0.0, self.machine_busy_s - sum(self.host_cpu_seconds)) / self.window_s

    @property
    def tx_bytes_per_step(self) -> float:
        """Bytes a training process sent per step: every host's tx bytes / every training process's steps."""
        return float(sum(self.tx_bytes) / sum(self.steps))

    @property
    def step_ms(self) -> float:
        """Mean over training processes of their wall milliseconds per step."""
        return float(numpy.mean([1000.0 * self.window_s / steps for steps in self.steps]))

    @property
    def cpu_ms_per_step(self) -> float:
        """CPU milliseconds per step of a training process: every host's CPU / every training process's steps."""
        return float(1000.0 * sum(self.host_cpu_seconds) / sum(self.steps))

    def as_json(self) -> Dict:
        """Its fields and derived measures, for a results JSON (`from_json` reads it back)."""
        return dict(dataclasses.asdict(self), tx_bytes_per_step=self.tx_bytes_per_step,
                    cpu_seconds_per_1k=self.cpu_seconds_per_1k, step_ms=self.step_ms,
                    cpu_ms_per_step=self.cpu_ms_per_step, other_cores=self.other_cores)

    @classmethod
    def from_json(cls, data: Dict) -> "RunResult":
        fields = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in fields})


def step_split(step_ms: float, cpu_ms_per_step: float, compute_ms: float) -> Tuple[float, float, float]:
    """`(compute, communication CPU, waiting)` milliseconds of one step of a distributed process.

    Args:
      step_ms: wall time of a step of one training process.
      cpu_ms_per_step: CPU time its host spent per step per process (1 core per process).
      compute_ms: CPU time of the same step in one process alone (`single`).

    Returns:
      compute (at most the step), communication CPU (the host's CPU beyond
      compute, >= 0), waiting (the step beyond the host's CPU, >= 0).
    """
    compute = min(compute_ms, step_ms)
    busy = min(cpu_ms_per_step, step_ms)
    return compute, max(0.0, busy - compute), max(0.0, step_ms - max(busy, compute))


def _interp(samples: Sequence[Sequence[float]], column: int, when: float) -> float:
    if not samples:
        return 0.0
    times = [s[0] for s in samples]
    return float(numpy.interp(when, times, [s[column] for s in samples]))


def measure_run(variant: Variant, config: BenchmarkConfig, work: str,
                machine_cpu: Sequence[Sequence[float]] = ()) -> RunResult:
    """Measures a finished run from its files under `work` (see the module docstring).

    Args:
      variant: what ran.
      config: the benchmark's set-up.
      work: the run's directory.
      machine_cpu: `supervisor.MachineCpuSampler` samples taken during the
        run (none: other load unknown).

    Raises:
      ValueError: a file is missing or the progress allows no window.
    """
    trainers, tx, rx, host_cpu, cpu = [], [], [], [], {}
    outputs = []
    names = variants_lib.host_names(variant.num_hosts)
    for name in names:
        with open(os.path.join(work, HOST_OUTPUT % name)) as f:
            outputs.append(json.load(f))
    paths = sorted(glob.glob(os.path.join(work, PROGRESS_DIR, "*.jsonl")))
    if len(paths) != variant.processes:
        raise ValueError("%s: %d progress file(s) in %s, expected %d"
                         % (variant.name, len(paths), os.path.join(work, PROGRESS_DIR), variant.processes))
    # One progress file per training process, named by its task.
    progress = [strategies_bench.read_progress(path) for path in paths]
    start, end, rate = strategies_bench.job_window(progress, [config.batch] * len(progress), config.warmup_steps)
    for points in progress:
        times, steps = zip(*points)
        trainers.append(float(numpy.interp(end, times, steps) - numpy.interp(start, times, steps)))
    for index, output in enumerate(outputs):
        counters = output["counters"]
        tx.append(_interp(counters, 1, end) - _interp(counters, 1, start))
        rx.append(_interp(counters, 2, end) - _interp(counters, 2, start))
        total = 0.0
        for name, samples in output["processes"].items():
            used = _interp(samples, 1, end) - _interp(samples, 1, start)
            # Independent copies run under the same name on every host.
            cpu[name if variant.copies == 1 else "%s_%s" % (names[index], name)] = used
            total += used
        host_cpu.append(total)
    auc = None
    metrics = os.path.join(work, METRICS_FILE)
    if os.path.exists(metrics):
        with open(metrics) as f:
            auc = json.load(f).get("auc")
    busy = None
    if len(machine_cpu) >= 2:
        busy = _interp(machine_cpu, 1, end) - _interp(machine_cpu, 1, start)
    traces = {}
    # Only a traced run's processes write there (`--trace_dir`): a parent that traces nothing
    # (`benchmarks.multicore`'s, `benchmarks.rank_growth`'s) never imports TensorFlow (seconds of CPU).
    if os.path.isdir(os.path.join(work, TRACES)):
        from deepfm.runtime import step_trace

        for path in sorted(glob.glob(os.path.join(work, TRACES, "*" + step_trace.SUMMARY_SUFFIX))):
            summary = step_trace.read_summary(path)
            traces[summary["task"]] = summary["median"]
    return RunResult(examples_per_sec=rate, window_s=end - start, steps=trainers, cpu_seconds=cpu,
                     tx_bytes=tx, rx_bytes=rx, host_cpu_seconds=host_cpu, auc=auc, machine_busy_s=busy,
                     traces=traces)
