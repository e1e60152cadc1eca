"""Elastic restarts: how many training workers a restarted job starts with.

A job with `--min_replicas < --max_replicas` restarts from its latest
checkpoint with the workers that are up, down to the minimum, and with every
worker that came back, up to the maximum. The size is decided only when the
job (re)starts; each process then derives its data shard and learning-rate
scaling from the size, as it does at any start.

`ElasticRange` holds the bounds; `deepfm.launch` learns which workers are up
from a host-discovery script in Horovod's elastic format
(`discover_hosts`), `deepfm.kubernetes local` from its emulated nodes.
This module never imports TensorFlow.
"""

import dataclasses
import subprocess
from typing import Sequence

DISCOVERY_TIMEOUT_S = 60.0


class BelowMinimumError(RuntimeError):
    """Fewer workers are up than the job's minimum."""


@dataclasses.dataclass(frozen=True)
class ElasticRange:
    """The sizes a job may run at.

    Attributes:
      minimum: the fewest training workers it may continue with.
      maximum: the most it may grow to.
    """

    minimum: int
    maximum: int

    def __post_init__(self):
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError("--min_replicas %d and --max_replicas %d: need 1 <= min <= max"
                             % (self.minimum, self.maximum))

    @property
    def elastic(self) -> bool:
        return self.minimum < self.maximum

    def size(self, available: int) -> int:
        """The workers to start with when `available` are up: at most the maximum.

        Raises:
          BelowMinimumError: fewer than the minimum are up; the message gives both.
        """
        if available < self.minimum:
            raise BelowMinimumError("%d training worker(s) are up, fewer than the minimum %d (--min_replicas)"
                                    % (available, self.minimum))
        return min(available, self.maximum)


def parse_discovery(output: str, source: str = "the host-discovery script") -> int:
    """The worker slots a host-discovery script reports: one `host` or `host:slots` line per host (Horovod's format).

    Raises:
      ValueError: a line that is neither; the message names the line.
    """
    total = 0
    for number, line in enumerate(output.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        host, separator, slots = line.partition(":")
        if not host or (separator and not slots.isdigit()):
            raise ValueError("%s, line %d: %r is not HOST or HOST:SLOTS" % (source, number, line))
        total += int(slots) if separator else 1
    return total


def discover(script: Sequence[str]) -> int:
    """Runs a host-discovery script and returns the worker slots it reports.

    Raises:
      ValueError: it failed, timed out, or printed something else; the message names it.
    """
    try:
        result = subprocess.run(list(script), capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ValueError("host-discovery script %s: %s" % (" ".join(script), e)) from e
    if result.returncode != 0:
        raise ValueError("host-discovery script %s exited with %d: %s"
                         % (" ".join(script), result.returncode, result.stderr.strip()[-500:]))
    return parse_discovery(result.stdout, "host-discovery script %s" % " ".join(script))
