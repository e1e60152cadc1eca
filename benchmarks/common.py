"""Shared parts of the benchmarks: statistics, machine description, process-tree
sampling, reports.

Every benchmark measures its variants side by side in one run, interleaved
round by round (A, B, C, A, B, C, ...) so that noise from a shared machine
falls on all of them alike, and reports min/median/max and ratios.
"""

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

import numpy
import psutil

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# The project's root: a report records the paths under it relative to it (`project_path`).
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benchmarks' dataset: the main job's synthetic data at the SageMaker sample's feature_size.
DEFAULT_DATA_DIR = os.path.join("data", "synthetic")
DEFAULT_ROWS = 1_000_000
FEATURE_SIZE = 117_581
CHART_WIDTH_INCHES = 9.0
CHART_MIN_HEIGHT_INCHES = 3.0
CHART_INCHES_PER_BAR = 0.35
CHART_MARGIN_INCHES = 1.5
# Open MPI's rank of a process that mpirun started.
MPI_RANK_VARIABLE = "OMPI_COMM_WORLD_RANK"
# The start of the label of a process that has its parent's command line (`process_label`).
FORK_OF = "fork of "
PACKAGES = ("tensorflow", "tensorflow-estimator", "horovod", "sagemaker-tensorflow", "numpy")


@dataclasses.dataclass
class Stats:
    """Summary of repeated measurements of one variant."""

    values: List[float]

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def fmt(self, spec: str = ",.0f") -> str:
        """`median (min-max)`."""
        return "%s (%s-%s)" % (format(self.median, spec), format(self.min, spec), format(self.max, spec))


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def machine_info() -> Dict[str, str]:
    """The machine and package versions a result came from."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            memory = "%.1f GiB" % (int(f.readline().split()[1]) / 2 ** 20)
    except (OSError, ValueError, IndexError):
        pass
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        "python": platform.python_version(),
        "os": platform.platform(),
    }
    for package in PACKAGES:
        try:
            info[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info[package] = "not installed"
    return info


def project_path(path: str) -> str:
    """`path` as a report records it: relative to the project's root where it lies under it, else as given."""
    absolute = os.path.abspath(path)
    if os.path.commonpath([absolute, PROJECT_ROOT]) == PROJECT_ROOT:
        return os.path.relpath(absolute, PROJECT_ROOT)
    return path


def ensure_data(data_dir: str, rows: int, feature_size: int, seed: int = 0) -> None:
    """Generates the synthetic dataset root `data_dir` unless one is already there."""
    from dataprep import synthetic
    from input_pipeline import schema
    if os.path.isfile(os.path.join(data_dir, schema.METADATA_FILE)):
        return
    synthetic.generate(rows, data_dir, feature_size=feature_size, seed=seed)


def run_json_subprocess(args: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None) -> dict:
    """Runs `python args...` and returns the JSON object on its last stdout line.

    Raises:
      RuntimeError: the child failed; the message holds the tail of its output.
    """
    child_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    proc = subprocess.run([sys.executable] + list(args), capture_output=True, text=True, timeout=timeout,
                          env=child_env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(args), proc.returncode,
                                                          (proc.stdout + proc.stderr)[-3000:]))
    return json.loads(lines[-1])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(out)


def machine_section(info: Dict[str, str]) -> str:
    """A markdown list describing the machine."""
    return "\n".join("- %s: %s" % (key, value) for key, value in info.items())


def write_report(name: str, title: str, body: str, info: Dict[str, str], raw: dict,
                 results_dir: str = RESULTS_DIR, extra: Optional[dict] = None) -> str:
    """Writes `<results_dir>/<name>.md` and `<results_dir>/<name>.json`; returns the .md path.

    The json holds `machine` (`info`), `results` (`raw`) and the keys of `extra`.
    """
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, name + ".md")
    with open(path, "w") as f:
        f.write("# %s\n\n%s\n\n## Machine\n%s\n" % (title, body, machine_section(info)))
    with open(os.path.join(results_dir, name + ".json"), "w") as f:
        json.dump(dict(extra or {}, machine=info, results=raw), f, indent=1, sort_keys=True)
    return path


def bar_chart(name: str, title: str, labels: Sequence[str], stats: Sequence[Stats], unit: str,
              reference: Optional[float] = None, reference_label: str = "",
              results_dir: str = RESULTS_DIR) -> str:
    """Writes `<results_dir>/<name>.png`: medians as bars, min-max as error bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    medians = [s.median for s in stats]
    lower = [s.median - s.min for s in stats]
    upper = [s.max - s.median for s in stats]
    # Horizontal bars: the height grows with the number of variants.
    fig, ax = plt.subplots(figsize=(CHART_WIDTH_INCHES, max(CHART_MIN_HEIGHT_INCHES,
                                                            CHART_INCHES_PER_BAR * len(labels) + CHART_MARGIN_INCHES)))
    ax.barh(range(len(labels)), medians, xerr=[lower, upper], color="#4c72b0", capsize=3)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel(unit + " (median; bars: min-max)")
    ax.set_title(title)
    if reference is not None:
        ax.axvline(reference, color="#c44e52", linestyle="--", label=reference_label)
        ax.legend(loc="lower right")
    fig.tight_layout()
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclasses.dataclass
class ProcessRecord:
    """What a `ProcessTreeSampler` saw of one process.

    Attributes:
      pid: its process id.
      label: what it is (its module or program, and its task or rank).
      cpu_seconds: user + system CPU time at the last sample.
      peak_rss_bytes: its largest resident memory: the largest sample, or
        the kernel's high-water mark (`VmHWM`) where it is readable.
    """

    pid: int
    label: str
    cpu_seconds: float = 0.0
    peak_rss_bytes: int = 0


class PeriodicSampler:
    """Calls `sample` now, every `interval_s` seconds in a thread, and once more on exit (a context manager).

    Subclasses append what they see to `samples`.

    Args:
      interval_s: seconds between samples.
      name: the thread's name.
    """

    def __init__(self, interval_s: float, name: str):
        self._interval_s = interval_s
        self.samples: List[tuple] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        """Takes one sample."""
        raise NotImplementedError

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self._interval_s):
                self.sample()
                return


def select_variants(spec: str, variants: Sequence) -> List:
    """The variants named in the comma-separated `spec` (all of them when empty), in `spec`'s order.

    Args:
      spec: e.g. `"single,ps"`.
      variants: every variant (each with a `name`).

    Raises:
      ValueError: an unknown name; the message lists the known ones.
    """
    known = {v.name: v for v in variants}
    names = [n.strip() for n in spec.split(",") if n.strip()] or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError("--variants: unknown %s; known: %s" % (", ".join(map(repr, unknown)), ", ".join(known)))
    return [known[n] for n in names]


class ProcessTreeSampler(PeriodicSampler):
    """Samples the CPU time and resident memory of a process and its descendants.

    A background thread looks at the tree every `interval_s` seconds. A
    process that exits keeps its last CPU time in the total, so
    `cpu_seconds_at` is the CPU the whole tree had used by then.

    Args:
      root_pid: the process at the top of the tree.
      interval_s: seconds between samples.
      exclude: processes left out with their descendants (e.g. the
        sampling process itself, under a root above it).
    """

    def __init__(self, root_pid: int, interval_s: float, exclude: Sequence[int] = ()):
        super().__init__(interval_s, "process-tree-sampler")
        self._root_pid = root_pid
        self._exclude = tuple(exclude)
        self._records: Dict[tuple, ProcessRecord] = {}

    @property
    def processes(self) -> List[ProcessRecord]:
        """Every process seen, in the order first seen."""
        return list(self._records.values())

    def cpu_seconds_at(self, when: float) -> float:
        """CPU seconds of the whole tree at wall time `when`, interpolated between samples.

        Raises:
          ValueError: fewer than two samples were taken.
        """
        if len(self.samples) < 2:
            raise ValueError("the process tree was sampled %d time(s); it needs 2 to interpolate"
                             % len(self.samples))
        times, cpu = zip(*self.samples)
        return float(numpy.interp(when, times, cpu))

    def sample(self) -> None:
        """Takes one sample now."""
        now = time.time()
        try:
            root = psutil.Process(self._root_pid)
            tree = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        if self._exclude:
            excluded = set(self._exclude)
            for pid in self._exclude:
                try:
                    excluded.update(child.pid for child in psutil.Process(pid).children(recursive=True))
                except psutil.NoSuchProcess:
                    pass
            tree = [process for process in tree if process.pid not in excluded]
        for process in tree:
            try:
                with process.oneshot():
                    key = (process.pid, process.create_time())
                    times = process.cpu_times()
                    rss = process.memory_info().rss
                record = self._records.get(key)
                if record is None:
                    record = self._records[key] = ProcessRecord(process.pid, process.name())
                # A child seen between fork and exec still shows its parent's command line, and
                # one just exec'd or exited shows none: the last label seen with one stays.
                record.label = process_label(process) or record.label
                record.cpu_seconds = times.user + times.system
                record.peak_rss_bytes = max(record.peak_rss_bytes, rss, _high_water_mark(process.pid))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self.samples.append((now, sum(record.cpu_seconds for record in self._records.values())))


def process_label(process) -> str:
    """`module (task)`: what a process of a benchmarked job is, from its command line and environment.

    A process with its parent's command line is a fork of it (`FORK_OF` the
    parent's label): a child between fork and exec (a rank starting a
    command), or a forked worker. It is not counted as one of the job's own.

    Args:
      process: a `psutil.Process`.

    Returns:
      The label; "" while its command line cannot be read (a process that
      has just started a program, or has exited), and for a process that
      exits or starts a program while it is read (its environment or parent
      read after its command line changed: such a label would lose its task).
    """
    try:
        argv = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        argv = []
    if not argv:
        return ""
    try:
        parent = process.parent()
        forked = parent is not None and parent.cmdline() == argv
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""
    except psutil.AccessDenied:
        forked = False
    # `python -m module ...` -> module; `python script ...` -> script; `program ...` -> program.
    args = argv[1:] if os.path.basename(argv[0]).startswith("python") else argv
    if len(args) > 1 and args[0] == "-m":
        label = args[1]
    elif args and not args[0].startswith("-"):
        label = os.path.basename(args[0])
    else:
        label = process.name()
    try:
        env = process.environ()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""
    except psutil.AccessDenied:
        env = {}
    task = ""
    if env.get("TF_CONFIG"):
        try:
            spec = json.loads(env["TF_CONFIG"])["task"]
            task = "%s_%s" % (spec["type"], spec["index"])
        except (ValueError, KeyError, TypeError):
            task = ""
    elif "HOROVOD_RANK" in env:
        task = "rank %s" % env["HOROVOD_RANK"]
    elif MPI_RANK_VARIABLE in env:
        # Horovod's ranks under mpirun learn their rank from MPI, which names it here.
        task = "rank %s" % env[MPI_RANK_VARIABLE]
    try:
        # The same command line after the reads: the process did not exit or start a program meanwhile
        # (an exiting process's environment reads empty).
        unchanged = process.cmdline() == argv
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        unchanged = False
    if not unchanged:
        return ""
    labelled = "%s (%s)" % (label, task) if task else label
    return FORK_OF + labelled if forked else labelled


def _high_water_mark(pid: int) -> int:
    """The kernel's peak resident memory of `pid` in bytes (`VmHWM`); 0 where unreadable."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
