"""`--distribution auto`: the SageMaker distribution, processes per host and threads the cost model predicts fastest.

The choice is `deepfm.advise`'s (the same measurement and cost model,
`planner.layouts.choose_layout`), run as a child process: it
measures a step of the default model on one core of this machine on a
local dataset root and predicts every strategy for `instance_count` hosts
of `cores_per_host` physical cores on a `link_gbps` link, at every number
of processes per host that divides the cores. Its pick becomes a
distribution, its processes per host R the MPI ranks per host, and each
rank runs vCPUs / R TensorFlow threads (`--intra_op_threads`,
`--inter_op_threads`: the hyperthreads of its cores with it; one process
per host gets its threads from the container, all the host's vCPUs):

* `horovod`: `mpi`, R ranks per host;
* `horovod_dense`: `mpi`, R ranks per host, with `--sparse_as_dense`;
* `hybrid`: `mpi`, R ranks per host, with `--strategy hybrid`;
* `ps`: `parameter_server` (SageMaker runs one worker and one ps per host);
* `single`: on one instance `none` (one process on all its vCPUs); on
  several it is refused: the model predicts that one process beats every
  multi-host layout, and the extra instances would be paid for nothing.

One instance without a dataset to measure on is `none`, one process on
all its vCPUs (the training's own `--strategy auto` then picks towers or
MirroredStrategy on the host). The reason is printed with the choice.
This module imports no TensorFlow (`planner.cost_model` is arithmetic): the child process does.
"""

import dataclasses
import json
import subprocess
import sys
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from jobs import spec as spec_lib
from planner import cost_model
from strategies import strategy_names

ADVISE_MODULE = "deepfm.advise"
ADVISE_TIMEOUT_S = 600
SPARSE_AS_DENSE = "sparse_as_dense"
STRATEGY = "strategy"
INTRA_OP_THREADS, INTER_OP_THREADS = "intra_op_threads", "inter_op_threads"
# The cost model's picks that are a strategy run with flags of its own: (the strategy, its flags).
VARIANTS: Dict[str, Tuple[str, Dict[str, object]]] = {
    cost_model.HOROVOD_DENSE: (strategy_names.HOROVOD, {SPARSE_AS_DENSE: True})}


@dataclasses.dataclass(frozen=True)
class Choice:
    """What `--distribution auto` resolved to.

    Attributes:
      distribution: `none`, `parameter_server` or `mpi`.
      processes_per_host: MPI ranks per host (1 otherwise).
      hyperparameters: hyperparameters the choice adds (the user's own win),
        the threads of each process among them.
      strategy: the cost model's pick.
      reason: why, for the console.
    """

    distribution: str
    processes_per_host: int
    hyperparameters: Mapping[str, object]
    strategy: str
    reason: str

    def describe(self) -> str:
        """One line for the console."""
        extra = "".join(" --%s" % key if value is True else " --%s %s" % (key, value)
                        for key, value in self.hyperparameters.items())
        ranks = (" with %d rank(s) per host" % self.processes_per_host
                 if self.distribution == spec_lib.DISTRIBUTION_MPI else "")
        return "--distribution auto: %s%s%s (%s)" % (self.distribution, ranks, extra, self.reason)


def threads(vcpus: int, processes: int) -> Dict[str, object]:
    """The hyperparameters that give each of `processes` processes its share of `vcpus` as TensorFlow threads."""
    share = max(1, vcpus // processes)
    return {INTRA_OP_THREADS: share, INTER_OP_THREADS: share}


def from_advice(advice: Mapping[str, Any], instance_count: int, cores_per_host: int,
                vcpus_per_host: Optional[int] = None) -> Choice:
    """The `Choice` for `deepfm.advise --json`'s output.

    Args:
      advice: the JSON (`pick`, `reason`, `ranks_per_host`; one rank per
        core where an older advise gave no `ranks_per_host`).
      instance_count: hosts.
      cores_per_host: each host's physical cores.
      vcpus_per_host: each host's vCPUs (default: `cores_per_host`).

    Raises:
      ValueError: the pick is `single` on several instances, or unknown.
    """
    pick, reason = advice["pick"], str(advice["reason"])
    vcpus = vcpus_per_host or cores_per_host
    ranks = int(advice.get("ranks_per_host") or cores_per_host)
    # The cost model's variants that run a strategy with a flag of its own.
    if pick not in cost_model.STRATEGIES:
        raise ValueError("--distribution auto: unknown pick %r from %s" % (pick, ADVISE_MODULE))
    strategy, flags = VARIANTS.get(pick, (pick, {}))
    launch = strategy_names.launch_of(strategy)
    if launch.kind == strategy_names.RANKS:
        if strategy != strategy_names.default_of(launch.distribution):
            flags = dict(flags, **{STRATEGY: strategy})
        return Choice(launch.distribution, ranks, dict(flags, **threads(vcpus, ranks)), pick, reason)
    if launch.kind == strategy_names.ONE_PROCESS and instance_count > 1:
        raise ValueError("--distribution auto: the cost model predicts one process beats every layout of %d "
                         "instances (%s); use --instance_count 1" % (instance_count, reason))
    return Choice(launch.distribution, 1, dict(flags), pick, reason)


def advise(data: str, instance_count: int, cores_per_host: int, link_gbps: float,
           python: str = sys.executable, extra_args: Sequence[str] = ()) -> Dict[str, object]:
    """Runs `deepfm.advise --json` on `data` for the shape; returns its JSON.

    Raises:
      ValueError: advise failed (its error output is in the message).
    """
    argv = [python, "-m", ADVISE_MODULE, "--json", "--data", data, "--hosts", str(instance_count),
            "--cores_per_host", str(cores_per_host), "--link_gbps", str(link_gbps)] + list(extra_args)
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=ADVISE_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise ValueError("--distribution auto: %s exited with %d: %s"
                         % (" ".join(argv[1:4]), done.returncode, done.stderr.strip()[-2000:]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def choose(data: Optional[str], instance_count: int, cores_per_host: int, link_gbps: float,
           python: str = sys.executable, vcpus_per_host: Optional[int] = None) -> Choice:
    """The distribution, processes per host and threads for `instance_count` hosts (see the module docstring).

    Args:
      data: a local dataset root to measure a step on (one instance without
        it: `none`, one process on all the vCPUs).
      instance_count: hosts.
      cores_per_host: physical cores of each host.
      link_gbps: each host's link.
      python: the interpreter that runs `deepfm.advise`.
      vcpus_per_host: vCPUs of each host (default: `cores_per_host`, no hyperthreads).

    Raises:
      ValueError: no `data` for several instances, or as `from_advice` and `advise`.
    """
    if instance_count == 1 and not data:
        return Choice(spec_lib.DISTRIBUTION_NONE, 1, {}, strategy_names.default_of(spec_lib.DISTRIBUTION_NONE),
                      "one instance and no dataset to measure a step on (--auto_data): one process on all its "
                      "vCPUs; the training's --strategy auto uses its devices")
    if not data:
        raise ValueError("--distribution auto on %d instances needs a local dataset root to measure a step on "
                         "(--auto_data DIR)" % instance_count)
    return from_advice(advise(data, instance_count, cores_per_host, link_gbps, python), instance_count,
                       cores_per_host, vcpus_per_host)
