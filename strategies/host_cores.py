"""A host's cores as this process sees them, and the TensorFlow threads of each of a host's ranks.

`physical_cores` and `cores_of` read the physical cores under the vCPUs a
process may use (sysfs); `threads_for_rank` gives each of the Horovod
ranks started on one host its share of the vCPUs. The launchers' choice of
how many processes a host runs is the planner's (`planner.layouts`). This
module imports no TensorFlow.
"""

import os
from typing import Iterable, Mapping, Optional, Tuple

SYS_CPU = "/sys/devices/system/cpu/cpu%d/topology/%s"


def physical_cores(cpus: Optional[Iterable[int]] = None) -> int:
    """The physical cores under `cpus` (default: the vCPUs this process may use), from sysfs; `len(cpus)` if unknown."""
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    cores = set()
    for cpu in cpus:
        try:
            with open(SYS_CPU % (cpu, "physical_package_id")) as f:
                package = f.read().strip()
            with open(SYS_CPU % (cpu, "core_id")) as f:
                cores.add((package, f.read().strip()))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


def cores_of(vcpus: int, cpus: Optional[Iterable[int]] = None) -> int:
    """The physical cores of a host of `vcpus` vCPUs carved from this machine: its share of `physical_cores`.

    `vcpus` itself where the share does not divide them evenly (hyperthreads unknown).
    """
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    cores = max(1, vcpus * physical_cores(cpus) // max(1, len(cpus)))
    return cores if vcpus % cores == 0 else vcpus


# Where a Horovod rank finds how many ranks share its host: horovodrun's (Gloo) variable, then Open MPI's.
LOCAL_SIZE_VARIABLES = ("HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")


def threads_for_rank(environ: Mapping[str, str], vcpus: int) -> Optional[Tuple[int, str]]:
    """`(threads, reason)` for one of the L ranks started on this host, each given vCPUs / L; None for L = 1.

    Without it every rank's TensorFlow takes all the vCPUs it may run on
    for its thread pools, L times over.

    Args:
      environ: the rank's environment (`LOCAL_SIZE_VARIABLES`).
      vcpus: the vCPUs this process may run on.
    """
    for variable in LOCAL_SIZE_VARIABLES:
        local = int(environ.get(variable, "1") or 1)
        if local > 1:
            share = max(1, vcpus // local)
            return share, ("%s=%d ranks share this host's %d vCPUs: %d TensorFlow thread(s) each"
                           % (variable, local, vcpus, share))
    return None
