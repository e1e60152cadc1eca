"""The registered names of the strategies, defined once, and how each one is launched.

Each adapter module registers itself under its name here. The job layer
(`jobs/`), which must not import TensorFlow, launches strategies by these
names, and reads how from each one's `Launch` declaration (`launch_of`):
its kind of processes, their roles, the launcher flag that counts its
training workers, its parameter servers and the distribution that starts
it. No launcher compares a strategy's name. This module imports only the
standard library and `strategies.cluster` (the cluster's role names).
"""

import dataclasses
from typing import Dict, Tuple

from strategies import cluster

SINGLE = "single"
TOWER = "tower"
MIRRORED = "mirrored"
PS = "ps"
HOROVOD = "horovod"
HYBRID = "hybrid"
AUTO = "auto"

# Every name, in the order the documentation lists them.
ALL = (SINGLE, TOWER, MIRRORED, PS, HOROVOD, HYBRID, AUTO)

# The kinds of processes a strategy runs as (`Launch.kind`): one `deepfm.train` process; a TensorFlow
# gRPC cluster of parameter servers, a chief and workers, each given its TF_CONFIG; Horovod ranks,
# started by horovodrun or mpirun.
ONE_PROCESS, TF_CLUSTER, RANKS = "one_process", "tf_cluster", "ranks"
KINDS = (ONE_PROCESS, TF_CLUSTER, RANKS)
# The roles of the processes (`Launch.roles`); a cluster's are its TF_CONFIG jobs (`strategies.cluster`).
ROLE_PROCESS, ROLE_RANK = "process", "rank"
ROLE_PS, ROLE_CHIEF, ROLE_WORKER = cluster.PS, cluster.CHIEF, cluster.WORKER
# The launcher flags (`deepfm.launch`) that count a job's training workers (`Launch.workers_flag`).
NUM_WORKERS_FLAG, NP_FLAG = "num_workers", "np"
# The distributions that start the processes (`Launch.distribution`): SageMaker's names, which Kubernetes
# jobs speak too (`jobs.spec.DISTRIBUTIONS`).
DISTRIBUTIONS = ("none", "parameter_server", "mpi")
DISTRIBUTION_NONE, DISTRIBUTION_PS, DISTRIBUTION_MPI = DISTRIBUTIONS


@dataclasses.dataclass(frozen=True)
class Launch:
    """How a strategy is launched: the declaration every launcher reads instead of comparing names.

    Attributes:
      name: the strategy.
      kind: its processes: `ONE_PROCESS`, `TF_CLUSTER` or `RANKS`.
      roles: the roles of its processes, in the order a launcher starts
        them (a cluster's parameter servers first).
      workers_flag: the launcher flag that counts its training workers:
        `num_workers` (a cluster's chief included) or `np` (ranks); "" for
        one process.
      parameter_servers: whether some of its processes are parameter
        servers, which serve variables and do not train.
      distribution: the SageMaker or Kubernetes distribution that starts its
        processes (one of `DISTRIBUTIONS`).
      default: whether its distribution runs it when the job names no
        strategy (one strategy per distribution).
    """

    name: str
    kind: str
    roles: Tuple[str, ...]
    workers_flag: str
    parameter_servers: bool
    distribution: str
    default: bool = False

    @property
    def multi_process(self) -> bool:
        """Whether a launcher of several processes (`deepfm.launch`, `mpi`, `parameter_server`) starts it."""
        return self.kind != ONE_PROCESS


def _one_process(name: str, default: bool = False) -> Launch:
    return Launch(name, ONE_PROCESS, (ROLE_PROCESS,), "", parameter_servers=False, distribution=DISTRIBUTION_NONE,
                  default=default)


def _cluster(name: str, default: bool = False) -> Launch:
    return Launch(name, TF_CLUSTER, (ROLE_PS, ROLE_CHIEF, ROLE_WORKER), NUM_WORKERS_FLAG, parameter_servers=True,
                  distribution=DISTRIBUTION_PS, default=default)


def _ranks(name: str, default: bool = False) -> Launch:
    return Launch(name, RANKS, (ROLE_RANK,), NP_FLAG, parameter_servers=False, distribution=DISTRIBUTION_MPI,
                  default=default)


# Every strategy's declaration, in `ALL`'s order. `auto` starts as one process and picks its strategy
# from what it finds (a TF_CONFIG, Horovod's variables, the devices); no launcher starts it by name.
LAUNCHES: Dict[str, Launch] = {launch.name: launch for launch in (
    _one_process(SINGLE, default=True), _one_process(TOWER), _one_process(MIRRORED), _cluster(PS, default=True),
    _ranks(HOROVOD, default=True), _ranks(HYBRID), _one_process(AUTO))}
# The strategies a launcher of several processes starts (`deepfm.launch --strategy`).
MULTI_PROCESS = tuple(name for name, launch in LAUNCHES.items() if launch.multi_process)
# The strategies whose processes are Horovod ranks (started by horovodrun or mpirun).
HOROVOD_RANKS = tuple(name for name, launch in LAUNCHES.items() if launch.kind == RANKS)


def launch_of(name: str) -> Launch:
    """The declaration of strategy `name`.

    Raises:
      ValueError: `name` is no strategy's.
    """
    if name not in LAUNCHES:
        raise ValueError("strategy must be one of %s, got %r" % (", ".join(LAUNCHES), name))
    return LAUNCHES[name]


def _check_distribution(distribution: str) -> None:
    if distribution not in DISTRIBUTIONS:
        raise ValueError("distribution must be one of %s, got %r" % (", ".join(DISTRIBUTIONS), distribution))


def default_of(distribution: str) -> str:
    """The strategy a job of `distribution` runs when it names none (`mpi`: `horovod`).

    Raises:
      ValueError: an unknown distribution.
    """
    _check_distribution(distribution)
    return next(name for name, launch in LAUNCHES.items() if launch.distribution == distribution and launch.default)


def choices_of(distribution: str) -> Tuple[str, ...]:
    """The strategies a job of `distribution` may name, where it starts several (`mpi`: `horovod`, `hybrid`).

    A distribution that starts one strategy only names it itself: ().

    Raises:
      ValueError: an unknown distribution.
    """
    _check_distribution(distribution)
    started = tuple(name for name in MULTI_PROCESS if LAUNCHES[name].distribution == distribution)
    return started if len(started) > 1 else ()
