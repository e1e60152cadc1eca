"""The records of `benchmarks.large_tables` and their report: variants, runs, rows, the table.

Nothing here runs anything: `benchmarks.large_tables` measures, these
dataclasses hold what it measured, and the functions below write the
report's table and every process's peak memory.
"""

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

GB = 1000.0 ** 3
SINGLE = "single"
START, RESTART = "start", "restart"
# Lines of the runs' logs (`--verbosity 0`): a restore (`strategies.saving`, the sharded restore of `hybrid`), in
# seconds, and the Estimator's evaluation.
RESTORE_LINE = re.compile(r"\brestored \S.* in (\d+(?:\.\d+)?) s\b")
EVALUATION_LINE = re.compile(r"Inference Time : (\d+(?:\.\d+)?)s")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One strategy at one number of processes.

    Attributes:
      strategy: `--strategy`.
      processes: `single`: 1; `hybrid`: ranks; `ps`: parameter servers and
        as many training workers.
    """

    strategy: str
    processes: int = 1

    @property
    def name(self) -> str:
        return self.strategy if self.strategy == SINGLE else "%s x%d" % (self.strategy, self.processes)


@dataclasses.dataclass
class RunMeasure:
    """One run (the start or the restart) of one row.

    Attributes:
      wall_s: seconds from its start until its command exited.
      time_to_first_step_s: from its start until every training process
        had finished a step.
      first_step_s: per training process (progress file name), from the
        start to its first step.
      processes: per process of the tree that a sample measured: `label`,
        `pid`, `peak_rss_bytes`.
      examples_per_sec: the job's throughput after warm-up (None: too few
        steps for a window; `window_error` says why).
      hook_examples_per_sec: the chief's own mean (its `--metrics_file`).
      end_s: from the chief's last step until its metrics file was written.
      restore_s: the slowest process's restore of the checkpoint, from the
        runs' logs (`restored ... in S s`; None: nothing was restored).
      evaluation_s: the slowest process's evaluation, from the runs' logs
        (the Estimator's `Inference Time`; None: no evaluation).
      window_error: why there is no examples/sec.
    """

    wall_s: float
    time_to_first_step_s: float
    first_step_s: Dict[str, float]
    processes: List[Dict]
    examples_per_sec: Optional[float] = None
    hook_examples_per_sec: Optional[float] = None
    end_s: Optional[float] = None
    restore_s: Optional[float] = None
    evaluation_s: Optional[float] = None
    window_error: str = ""

    @property
    def largest(self) -> Dict:
        """The process of the largest peak resident memory."""
        return max(self.processes, key=lambda p: p["peak_rss_bytes"])


@dataclasses.dataclass
class Row:
    """One variant at one table size.

    Attributes:
      variant: what ran.
      feature_size: ids of the table.
      state_bytes: weights and optimizer slots of the whole model.
      share_bytes: the largest part of them one process holds.
      start: the first run (None: it failed).
      restart: the run resuming it (None: it failed or never ran).
      error: why a run failed ("" when none did).
    """

    variant: Variant
    feature_size: int
    state_bytes: int
    share_bytes: int
    start: Optional[RunMeasure] = None
    restart: Optional[RunMeasure] = None
    error: str = ""

    @property
    def peak_rss_bytes(self) -> Optional[int]:
        """The largest peak of any process of either run."""
        peaks = [run.largest["peak_rss_bytes"] for run in (self.start, self.restart) if run is not None]
        return max(peaks) if peaks else None


def _gb(value: Optional[float]) -> str:
    return "n/a" if value is None else "%.2f" % (value / GB)


def _seconds(run: Optional[RunMeasure], field: str) -> str:
    value = None if run is None else getattr(run, field)
    return "n/a" if value is None else "%.1f" % value


def table_row(row: Row) -> List[str]:
    """The report's cells of one row."""
    peak = row.peak_rss_bytes
    largest = max((run.largest for run in (row.start, row.restart) if run is not None),
                  key=lambda p: p["peak_rss_bytes"], default=None)
    rate = row.start.examples_per_sec if row.start is not None else None
    save = row.restart.end_s if row.restart is not None else None
    restore = row.restart.restore_s if row.restart is not None else None
    return [
        row.variant.name, format(row.feature_size, ","), _gb(row.state_bytes), _gb(row.share_bytes),
        "n/a" if largest is None else "%s (%s)" % (_gb(peak), largest["label"]),
        "n/a" if peak is None or not row.share_bytes else "%.2f" % (peak / row.share_bytes),
        _seconds(row.start, "time_to_first_step_s"), _seconds(row.restart, "time_to_first_step_s"),
        "n/a" if rate is None else format(rate, ",.0f"),
        _seconds(row.start, "wall_s"), _seconds(row.start, "end_s"), _seconds(row.start, "evaluation_s"),
        "n/a" if save is None else "%.1f (%.1f s/GB)" % (save, save / (row.state_bytes / GB)),
        "n/a" if restore is None or not row.share_bytes else "%.1f (%.1f s/GB)" % (
            restore, restore / (row.share_bytes / GB)),
        failure_summary(row.error),
    ]


# Lines of a failed run's output that say why, in the order looked for.
FAILURE_MARKERS = ("killed for memory", "not enough memory", "launch failed", "Error", "error")
FAILURE_CELL_CHARS = 240


def failure_summary(error: str) -> str:
    """A table cell for a failed run: its first line, and the first line after it that says why."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    reason = next((line for marker in FAILURE_MARKERS for line in lines[1:] if marker in line), "")
    text = lines[0] if not reason else "%s ... %s" % (lines[0], reason)
    return "failed: " + text[:FAILURE_CELL_CHARS].replace("|", "/")


HEADER = ["variant", "ids", "state GB", "largest share GB", "peak RSS GB (process)", "peak / share",
          "first step s (start)", "first step s (restart)", "examples/sec", "wall s (start)",
          "end s (start: save, evaluation, export)", "evaluation s", "end s (restart: save)",
          "restore s (restart; per GB of the share)", "failure"]


def process_lines(rows: Sequence[Row]) -> str:
    """Per row and run, the peak resident memory of every process of its tree."""
    lines = []
    for row in rows:
        for phase, run in ((START, row.start), (RESTART, row.restart)):
            if run is not None:
                peaks = "; ".join("%s %s GB" % (p["label"], _gb(p["peak_rss_bytes"])) for p in run.processes)
                lines.append("- %s, %s ids, %s: %s" % (row.variant.name, format(row.feature_size, ","), phase, peaks))
    return "\n".join(lines)


def seconds_in_log(text: str) -> Tuple[Optional[float], Optional[float]]:
    """(restore seconds, evaluation seconds) of one process's log: the sums of its lines, None where none."""
    restores = [float(m.group(1)) for m in RESTORE_LINE.finditer(text)]
    evaluations = [float(m.group(1)) for m in EVALUATION_LINE.finditer(text)]
    return (sum(restores) if restores else None), (sum(evaluations) if evaluations else None)


def slowest(logs: Sequence[str]) -> Tuple[Optional[float], Optional[float]]:
    """(restore seconds, evaluation seconds) of the slowest process among `logs` (each one process's text)."""
    found = [seconds_in_log(text) for text in logs]
    restores = [r for r, _ in found if r is not None]
    evaluations = [e for _, e in found if e is not None]
    return (max(restores) if restores else None), (max(evaluations) if evaluations else None)


def rows_json(rows: Sequence[Row]) -> List[Dict]:
    """Every row as JSON, both runs whole."""
    return [{"variant": row.variant.name, "strategy": row.variant.strategy, "processes": row.variant.processes,
             "feature_size": row.feature_size, "state_bytes": row.state_bytes, "share_bytes": row.share_bytes,
             "peak_rss_bytes": row.peak_rss_bytes, "error": row.error,
             START: None if row.start is None else dataclasses.asdict(row.start),
             RESTART: None if row.restart is None else dataclasses.asdict(row.restart)} for row in rows]
