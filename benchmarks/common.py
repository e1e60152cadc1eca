"""Shared parts of the benchmarks: statistics, machine description, reports.

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
from typing import Dict, List, Optional, Sequence

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
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


def write_report(name: str, title: str, body: str, info: Dict[str, str], raw: dict) -> str:
    """Writes `results/<name>.md` and `results/<name>.json`; returns the .md path."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, name + ".md")
    with open(path, "w") as f:
        f.write("# %s\n\n%s\n\n## Machine\n%s\n" % (title, body, machine_section(info)))
    with open(os.path.join(RESULTS_DIR, name + ".json"), "w") as f:
        json.dump({"machine": info, "results": raw}, f, indent=1, sort_keys=True)
    return path


def bar_chart(name: str, title: str, labels: Sequence[str], stats: Sequence[Stats], unit: str,
              reference: Optional[float] = None, reference_label: str = "") -> str:
    """Writes `results/<name>.png`: medians as bars, min-max as error bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    medians = [s.median for s in stats]
    lower = [s.median - s.min for s in stats]
    upper = [s.max - s.median for s in stats]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(labels) + 2), 4.5))
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
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
