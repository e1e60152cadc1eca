"""`Topology`: where one process sits in its training job, as its strategy set it up.

`Strategy.setup()` returns it, and `Strategy.topology` reads it afterwards:
one value instead of questions put to each adapter. Everything in it is
fixed for the life of the process.

    topology = strategy.setup()
    if topology.role == ROLE_PS: ...          # a parameter server serves
    if topology.is_chief: ...                 # saves, writes the metrics, exports
    if topology.lockstep: ...                 # every rank must take the same steps

This module imports no TensorFlow.
"""

import dataclasses
from typing import Mapping, Optional

from input_pipeline import sharding

ROLE_WORKER = "worker"
ROLE_PS = "ps"
ROLES = (ROLE_WORKER, ROLE_PS)
# The task name of a job of one process.
MAIN_TASK = "main"


@dataclasses.dataclass(frozen=True)
class Topology:
    """Where one process sits in its training job.

    The defaults describe one process on one device.

    Attributes:
      role: `ROLE_WORKER` for a process that trains, `ROLE_PS` for a
        parameter server (which only serves).
      task: this process's name in its job, for logs, traces and progress
        files: `main` alone, `rank<r>` (Horovod), `<job>_<index>` (`ps`).
      job_name: this process's job in a between-graph cluster (its devices'
        `/job:` name); None elsewhere.
      is_chief: this process saves checkpoints, writes metrics and exports.
      evaluates: this process runs evaluation.
      evaluates_in_training_session: evaluation during training must run
        inside the one training session. So it is with asynchronous
        parameter servers: a new session of the chief would restore the
        servers from its last checkpoint and undo the other workers' updates
        since (`deepfm.runtime.early_stopping`).
      replicas_in_sync: replicas whose gradients are combined into one
        update (towers or ranks; 1 for an asynchronous ps worker).
      workers: training processes in the whole job.
      rank: this training process among `workers`, the chief 0 (0 on a
        parameter server).
      workers_per_host: training processes on each host.
      local_rank: this process on its host, in [0, workers_per_host).
      lockstep: every training process takes the same steps and must stop
        at the same one (Horovod ranks): values they decide on are agreed
        (`Strategy.agree_max`), or one would wait for ever in a collective.
      peers: the tasks this process cannot train without, name ->
        `host:port` (a `ps` worker's parameter servers); a watchdog ends the
        process when one is gone (`deepfm.runtime.watchdog`).
    """

    role: str = ROLE_WORKER
    task: str = MAIN_TASK
    job_name: Optional[str] = None
    is_chief: bool = True
    evaluates: bool = True
    evaluates_in_training_session: bool = False
    replicas_in_sync: int = 1
    workers: int = 1
    rank: int = 0
    workers_per_host: int = 1
    local_rank: int = 0
    lockstep: bool = False
    peers: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError("role must be one of %s, got %r" % (", ".join(ROLES), self.role))
        for name in ("replicas_in_sync", "workers", "workers_per_host"):
            if getattr(self, name) < 1:
                raise ValueError("%s must be >= 1, got %r" % (name, getattr(self, name)))
        if self.workers % self.workers_per_host:
            raise ValueError("%d training processes do not fill hosts of %d each: start the same number on every "
                             "host" % (self.workers, self.workers_per_host))
        for name, value, bound in (("rank", self.rank, self.workers),
                                   ("local_rank", self.local_rank, self.workers_per_host)):
            if not 0 <= value < bound:
                raise ValueError("%s must be in [0, %d), got %r" % (name, bound, value))
        object.__setattr__(self, "peers", dict(self.peers))

    @property
    def hosts(self) -> int:
        """Hosts the training processes run on."""
        return self.workers // self.workers_per_host

    @property
    def host_index(self) -> int:
        """This process's host, in [0, hosts): ranks fill hosts in order."""
        return self.rank // self.workers_per_host

    def placement(self) -> sharding.Topology:
        """Where this process sits among the hosts, as the input pipeline's sharding rules take it."""
        return sharding.Topology.from_ranks(rank=self.rank, size=self.workers, local_rank=self.local_rank,
                                            workers_per_host=self.workers_per_host)
