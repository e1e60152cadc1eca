"""`MemoryShare`: how a strategy's job shares a model's memory among its processes.

`Strategy.memory(state, ids_per_step)` returns it: the memory each kind of
process holds, by role (`topology.ROLES`), at this job's count of processes
or another, and how that count is named where the model is spread over the
processes (`deepfm.runtime.preflight` names the strategies and counts that
fit a host)::

    share = strategy.memory(state, ids_per_step)
    mine = share.estimates()[topology.role]
    if share.spreads:
        print("%s %s" % (strategy.name, share.scale % 4))      # "hybrid at 4 rank(s)"
"""

import dataclasses
from typing import Callable, Dict, Optional

from strategies import memory_estimate

EstimatesAt = Callable[[Optional[int]], Dict[str, memory_estimate.ProcessMemory]]


@dataclasses.dataclass(frozen=True)
class MemoryShare:
    """The memory each kind of process of a strategy's job holds of one model.

    Attributes:
      scale: the count of processes the model is spread over, as a phrase of
        it (`"at %d rank(s)"`); empty where a process holds as much whatever
        the job's size.
      estimates_at: the estimates by role at a count of processes (the one
        `scale` names); None: this job's (which may need `setup()`).
    """

    scale: str
    estimates_at: EstimatesAt

    @property
    def spreads(self) -> bool:
        """Whether a process holds less as the job has more (`scale` names the count)."""
        return bool(self.scale)

    def estimates(self, scale: Optional[int] = None) -> Dict[str, memory_estimate.ProcessMemory]:
        """The memory each kind of process holds, by role, at `scale` processes (None: this job's)."""
        return self.estimates_at(scale)
