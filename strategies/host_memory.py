"""The memory a process of this host may use: its memory cgroup's limit, else what the kernel says is available.

    memory = host_memory.read()
    if memory is not None:
        print(memory.available, memory.source)

A process in a memory cgroup (a container, a Kubernetes pod, a SageMaker
training container, a systemd slice) is killed by the kernel when the
cgroup's memory goes over its limit, whatever the host has free: its limit
is the number that counts. cgroup v1 (`memory.limit_in_bytes`) and v2
(`memory.max`) are read for the cgroup of this process named in
`/proc/self/cgroup` and for every cgroup above it (a parent's limit holds
for its children); the smallest holds. Elsewhere, and where the host has
less than the limit, the available memory is `MemAvailable` of
`/proc/meminfo` (what the kernel can give without swapping) plus this
process's own resident memory (it holds that already).

This module imports no TensorFlow.
"""

import dataclasses
import os
from typing import Iterator, List, Optional, Tuple

PROC_CGROUP = "/proc/self/cgroup"
PROC_MEMINFO = "/proc/meminfo"
PROC_STATUS = "/proc/self/status"
CGROUP_ROOT = "/sys/fs/cgroup"
# cgroup v1: the memory controller's own hierarchy, and its limit file.
V1_CONTROLLER = "memory"
V1_LIMIT_FILE = "memory.limit_in_bytes"
# cgroup v2: the unified hierarchy (hierarchy id 0, no controller list), its limit file and its "no limit".
V2_HIERARCHY = "0"
V2_LIMIT_FILE = "memory.max"
V2_NO_LIMIT = "max"
V2_CONTROLLERS_FILE = "cgroup.controllers"
# The /proc/meminfo and /proc/self/status fields read, in kB.
MEM_AVAILABLE = "MemAvailable"
MEM_TOTAL = "MemTotal"
VM_RSS = "VmRSS"
KILOBYTE = 1024


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """What this process may use, and where the figure came from.

    Attributes:
      available: bytes.
      source: where `available` came from, for messages (a cgroup's limit
        file, or `/proc/meminfo`).
    """

    available: int
    source: str


def cgroup_limit(proc_cgroup: str = PROC_CGROUP, root: str = CGROUP_ROOT) -> Optional[Tuple[int, str]]:
    """The smallest memory limit of this process's cgroups (v1 or v2) and the file it was read from; None: none.

    A limit no smaller than the host's memory (v1's "unlimited" is a huge
    number) is no limit.

    Args:
      proc_cgroup: the process's cgroup membership (`/proc/<pid>/cgroup`).
      root: where the cgroup hierarchies are mounted.
    """
    total = _meminfo_field(PROC_MEMINFO, MEM_TOTAL)
    limits = []
    for path in _limit_files(proc_cgroup, root):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text == V2_NO_LIMIT or not text.isdigit():
            continue
        limit = int(text)
        if total is None or limit < total:
            limits.append((limit, path))
    return min(limits) if limits else None


def _limit_files(proc_cgroup: str, root: str) -> Iterator[str]:
    """The limit files of the process's memory cgroup and of each cgroup above it, up to the hierarchy's root."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if V1_CONTROLLER in controllers.split(","):
            base, limit_file = os.path.join(root, V1_CONTROLLER), V1_LIMIT_FILE
        elif hierarchy == V2_HIERARCHY and not controllers and os.path.exists(os.path.join(root, V2_CONTROLLERS_FILE)):
            base, limit_file = root, V2_LIMIT_FILE
        else:
            continue
        for directory in _ancestors(path):
            yield os.path.join(base, directory, limit_file) if directory else os.path.join(base, limit_file)


def _ancestors(path: str) -> List[str]:
    """`a/b/c`, `a/b`, `a`, `` (the root) for the cgroup path `/a/b/c`."""
    parts = [part for part in path.split("/") if part]
    return ["/".join(parts[:end]) for end in range(len(parts), -1, -1)]


def _meminfo_field(path: str, field: str) -> Optional[int]:
    """A `Name:  N kB` field of a /proc file in bytes; None where the file or the field is missing."""
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name == field:
                    return int(value.split()[0]) * KILOBYTE
    except (OSError, ValueError, IndexError):
        return None
    return None


def meminfo_available(meminfo: str = PROC_MEMINFO, status: str = PROC_STATUS) -> Optional[int]:
    """`MemAvailable` plus this process's resident memory, in bytes; None where /proc does not say."""
    available = _meminfo_field(meminfo, MEM_AVAILABLE)
    if available is None:
        return None
    return available + (_meminfo_field(status, VM_RSS) or 0)


def read(proc_cgroup: str = PROC_CGROUP, root: str = CGROUP_ROOT, meminfo: str = PROC_MEMINFO,
         status: str = PROC_STATUS) -> Optional[HostMemory]:
    """The memory this process may use: the smaller of its cgroups' limit and the host's available memory.

    Returns:
      The figure and its source, or None where neither is known (a host
      without /proc).
    """
    limit = cgroup_limit(proc_cgroup, root)
    available = meminfo_available(meminfo, status)
    if limit is not None and (available is None or limit[0] <= available):
        return HostMemory(limit[0], "the memory cgroup limit in %s" % limit[1])
    if available is not None:
        return HostMemory(available, "%s of %s plus this process's resident memory" % (MEM_AVAILABLE, meminfo))
    return None
