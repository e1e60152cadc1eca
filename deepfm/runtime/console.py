"""What a training or prediction run prints to its console: progress lines, a live bar, a summary.

By default a run prints a short record: what it trains, one progress line per
interval, the evaluations, a summary (how the rest of the output is kept
quiet: `cli.entry`). Progress goes to stdout: plain lines, or a live
single-line bar updated in place when stdout is a terminal (and not a
Horovod rank's). Only the process that reports (the chief) prints it.
"""

import datetime
import os
import sys
from typing import Optional, TextIO

BAR_WIDTH = 24
# Set in the processes horovodrun or mpirun start.
RANK_ENVIRONMENT = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def format_duration(seconds: Optional[float]) -> str:
    """`H:MM:SS` (or `?` when unknown)."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    return str(datetime.timedelta(seconds=int(round(seconds))))


def format_progress(step: int, total: Optional[int], examples_per_sec: float, loss: Optional[float],
                    elapsed: float, remaining: Optional[float], epoch: Optional[int] = None,
                    num_epochs: Optional[int] = None) -> str:
    """One progress line: step / total (`?` when unknown), epoch, examples/sec, loss, elapsed and remaining time.

    Numbers are plain (no thousands separators): SageMaker reads the loss
    and examples/sec of this line as metrics (`jobs.sagemaker.metrics`).
    """
    parts = ["step %d/%s" % (step, "?" if total is None else total)]
    if epoch is not None:
        parts.append("epoch %d/%d" % (epoch, num_epochs) if num_epochs else "epoch %d" % epoch)
    parts.append("%.0f ex/s" % examples_per_sec)
    parts.append("loss %s" % ("n/a" if loss is None else "%.4f" % loss))
    parts.append("elapsed %s" % format_duration(elapsed))
    parts.append("left %s" % format_duration(remaining))
    return " | ".join(parts)


def progress_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """`[#####.....]  42%` for a fraction in [0, 1]."""
    fraction = min(1.0, max(0.0, fraction))
    filled = int(round(fraction * width))
    return "[%s%s] %3d%%" % ("#" * filled, "." * (width - filled), int(fraction * 100))


class Console:
    """The console of a run: plain lines, and progress as lines or a live bar.

    Args:
      enabled: whether this process reports (the chief); a disabled console
        prints nothing.
      stream: where it prints (stdout by default).
      live: update one line in place; by default when `stream` is a terminal.
    """

    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None, live: Optional[bool] = None):
        self.enabled = enabled
        self._stream = stream
        self._live = live
        self._bar_open = False

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    @property
    def live(self) -> bool:
        """Whether progress updates one line in place: stdout is a terminal and not a Horovod rank's.

        (horovodrun gives its ranks a pseudo-terminal and prefixes their
        lines, so a rank's stdout looks like a terminal but is a log.)
        """
        if self._live is not None:
            return self._live
        if any(name in os.environ for name in RANK_ENVIRONMENT):
            return False
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def line(self, text: str) -> None:
        """Prints a line (after closing a live bar)."""
        if not self.enabled:
            return
        self._close_bar()
        self._write(text + "\n")

    def progress(self, text: str, fraction: Optional[float]) -> None:
        """Shows a progress line: in place on a terminal (a bar unless `fraction` is None), else as a new line."""
        if not self.enabled:
            return
        if self.live:
            bar = "" if fraction is None else progress_bar(fraction) + " "
            self._bar_open = self._write("\r\033[K%s%s" % (bar, text))
        else:
            self.line(text)

    def close(self) -> None:
        """Ends a live bar's line."""
        self._close_bar()

    def _close_bar(self) -> None:
        if self._bar_open:
            self._write("\n")
            self._bar_open = False

    def _write(self, text: str) -> bool:
        """Writes and flushes; a reader that went away (a stopped job's log relay) silences the console.

        A report must never cost training its last checkpoint.
        """
        try:
            self.stream.write(text)
            self.stream.flush()
            return True
        except (BrokenPipeError, ValueError, OSError):
            self.enabled = False
            return False
