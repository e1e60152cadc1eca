"""`--distribution auto`: the SageMaker distribution the cost model predicts fastest for a job's shape.

The choice is `deepfm.advise`'s (the same measurement and cost model,
`strategies.cost_model.choose`), run as a child process: it measures a step of
the default model on one core of this machine on a local dataset root and
predicts every strategy for `instance_count` hosts of `cores_per_host` cores
on a `link_gbps` link. Its pick becomes a distribution:

* one instance: `none` (scale up first; the training's own `--strategy auto`
  then picks towers or MirroredStrategy on the host);
* `horovod`: `mpi`, one rank per core;
* `horovod_dense`: `mpi`, one rank per core, with `--sparse_as_dense`;
* `hybrid`: `mpi`, one rank per core, with `--strategy hybrid`;
* `ps`: `parameter_server` (SageMaker runs one worker and one ps per host);
* `single` on several instances is refused: the model predicts that one
  process beats every multi-host layout, and the extra instances would be
  paid for nothing.

This module imports no TensorFlow (`strategies.cost_model` is arithmetic): the child process does.
"""

import dataclasses
import json
import subprocess
import sys
from typing import Dict, Mapping, Optional, Sequence

from strategies import cost_model
from jobs import spec as spec_lib

AUTO = "auto"
ADVISE_MODULE = "deepfm.advise"
ADVISE_TIMEOUT_S = 600
SPARSE_AS_DENSE = "sparse_as_dense"
STRATEGY = "strategy"


@dataclasses.dataclass(frozen=True)
class Choice:
    """What `--distribution auto` resolved to.

    Attributes:
      distribution: `none`, `parameter_server` or `mpi`.
      processes_per_host: MPI ranks per host (1 otherwise).
      hyperparameters: hyperparameters the choice adds (the user's own win).
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
        ranks = " with %d rank(s) per host" % self.processes_per_host if self.distribution == "mpi" else ""
        return "--distribution auto: %s%s%s (%s)" % (self.distribution, ranks, extra, self.reason)


def from_advice(advice: Mapping[str, object], instance_count: int, cores_per_host: int) -> Choice:
    """The `Choice` for `deepfm.advise --json`'s output.

    Raises:
      ValueError: the pick is `single` on several instances, or unknown.
    """
    pick, reason = advice["pick"], str(advice["reason"])
    if pick == cost_model.HOROVOD:
        return Choice(spec_lib.DISTRIBUTION_MPI, cores_per_host, {}, pick, reason)
    if pick == cost_model.HOROVOD_DENSE:
        return Choice(spec_lib.DISTRIBUTION_MPI, cores_per_host, {SPARSE_AS_DENSE: True}, pick, reason)
    if pick == cost_model.HYBRID:
        return Choice(spec_lib.DISTRIBUTION_MPI, cores_per_host, {STRATEGY: cost_model.HYBRID}, pick, reason)
    if pick == cost_model.PS:
        return Choice(spec_lib.DISTRIBUTION_PS, 1, {}, pick, reason)
    if pick == cost_model.SINGLE:
        raise ValueError("--distribution auto: the cost model predicts one process on one core beats every "
                         "layout of %d instances (%s); use --instance_count 1" % (instance_count, reason))
    raise ValueError("--distribution auto: unknown pick %r from %s" % (pick, ADVISE_MODULE))


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
           python: str = sys.executable) -> Choice:
    """The distribution for `instance_count` hosts of `cores_per_host` cores (see the module docstring).

    Args:
      data: a local dataset root to measure a step on (not needed for one instance).
      instance_count: hosts.
      cores_per_host: cores of each host.
      link_gbps: each host's link.
      python: the interpreter that runs `deepfm.advise`.

    Raises:
      ValueError: no `data` for several instances, or as `from_advice` and `advise`.
    """
    if instance_count == 1:
        return Choice(spec_lib.DISTRIBUTION_NONE, 1, {}, cost_model.SINGLE,
                      "one instance: scale up before scaling out; the training's --strategy auto uses its "
                      "devices")
    if not data:
        raise ValueError("--distribution auto on %d instances needs a local dataset root to measure a step on "
                         "(--auto_data DIR)" % instance_count)
    return from_advice(advise(data, instance_count, cores_per_host, link_gbps, python), instance_count,
                       cores_per_host)
