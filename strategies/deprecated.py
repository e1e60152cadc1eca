"""The members `Strategy` had before its lifecycle was explicit, kept as aliases that warn.

Each reads the member that replaced it (most are fields of the `Topology`
that `Strategy.setup()` returns) and raises a `DeprecationWarning` naming
it. They are kept apart from the interface so that `strategies.strategy`
shows only what a strategy is now.
"""

import warnings
from typing import ClassVar, Dict, Optional

from strategies import topology as topology_lib

# What replaced each old member.
REPLACEMENTS = {
    "num_replicas_in_sync": "topology.replicas_in_sync",
    "num_workers": "topology.workers",
    "is_chief": "topology.is_chief",
    "evaluates": "topology.evaluates",
    "task_name": "topology.task",
    "job_name": "topology.job_name",
    "role": "topology.role",
    "peers": "topology.peers",
    "agree_to_stop": "agree_max (where topology.lockstep)",
    "concrete_name": "name (strategies.registry.resolve tells what `auto` picks)",
}


def warn(old: str, stacklevel: int = 3) -> None:
    """Warns that `old` is deprecated, naming what replaced it."""
    warnings.warn("Strategy.%s is deprecated: use Strategy.%s" % (old, REPLACEMENTS[old]), DeprecationWarning,
                  stacklevel=stacklevel)


class StrategyMembers:
    """The old members of `Strategy` (a base of it): each warns, then reads its replacement."""

    # What the old members read; `Strategy` defines them.
    name: ClassVar[str]

    @property
    def topology(self) -> topology_lib.Topology:
        raise NotImplementedError

    @property
    def num_replicas_in_sync(self) -> int:
        warn("num_replicas_in_sync")
        return self.topology.replicas_in_sync

    @property
    def num_workers(self) -> int:
        warn("num_workers")
        return self.topology.workers

    @property
    def is_chief(self) -> bool:
        warn("is_chief")
        return self.topology.is_chief

    @property
    def evaluates(self) -> bool:
        warn("evaluates")
        return self.topology.evaluates

    @property
    def task_name(self) -> str:
        warn("task_name")
        return self.topology.task

    @property
    def job_name(self) -> Optional[str]:
        warn("job_name")
        return self.topology.job_name

    @property
    def role(self) -> str:
        warn("role")
        return self.topology.role

    def peers(self) -> Dict[str, str]:
        warn("peers")
        return dict(self.topology.peers)

    def agree_to_stop(self, flag):
        """The maximum of every lockstep process's stop `flag`; None where each process stops alone."""
        warn("agree_to_stop")
        return self.agree_max(flag) if self.topology.lockstep else None

    @classmethod
    def concrete_name(cls) -> str:
        warn("concrete_name")
        return cls.name
