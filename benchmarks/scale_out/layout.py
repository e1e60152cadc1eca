"""Where the processes of one run sit: each emulated host's cores, each training process's cores, its threads.

The machine's vCPUs, in `benchmarks.topology.Topology.order` (the
hyperthreads of a core next to each other), are cut into consecutive blocks
of `cores_per_host`, one per host: host i gets vCPUs [i C, (i + 1) C) of that
order. Inside a host of C cores with R ranks, rank j gets the host's vCPUs
[j C/R, (j + 1) C/R) (`taskset`), and every training process runs C/R
TensorFlow threads (`--intra_op_threads` and `--inter_op_threads`). A
`single` process runs on the first C/R cores of its host: the cores of one
rank, so that efficiency compares processes on the same cores. A `ps` host
runs its worker and its parameter server on the host's cores.

With `shared_cores` N (the rank-growth benchmark's default) every host is
pinned to the same first N vCPUs and `single` to the first of them; no
process is pinned within its host and threads are left to the variant.
"""

import dataclasses
from typing import List, Optional, Sequence, Tuple

from benchmarks.scale_out import variants as variants_lib

TASKSET = "taskset"
THREAD_FLAGS = ("--intra_op_threads", "--inter_op_threads")


@dataclasses.dataclass(frozen=True)
class CorePlan:
    """The cores of one run of one variant.

    Attributes:
      hosts: per host, the vCPUs its init pins every process of it to.
      processes: per host, the vCPUs of each of its training processes, in
        the order they start (empty: not pinned within the host).
      threads: TensorFlow's intra- and inter-op threads of every training
        process (0: the variant's flags or TensorFlow's choice).
    """

    hosts: Tuple[Tuple[int, ...], ...]
    processes: Tuple[Tuple[Tuple[int, ...], ...], ...]
    threads: int = 0

    def pin(self, host: int, process: int) -> List[str]:
        """The `taskset` prefix of a training process's command line (none where it is not pinned)."""
        cores = self.processes[host][process] if process < len(self.processes[host]) else ()
        return [TASKSET, "--cpu-list", cpu_list(cores)] if cores else []

    def thread_flags(self) -> List[str]:
        """`--intra_op_threads T --inter_op_threads T`, or nothing where the plan leaves threads alone."""
        return [part for flag in THREAD_FLAGS for part in (flag, str(self.threads))] if self.threads else []

    def describe(self) -> str:
        """`algo-1: 0-3 (processes on 0-1, 2-3); algo-2: ...` for the report."""
        parts = []
        for index, cores in enumerate(self.hosts):
            inside = self.processes[index]
            ranks = (" (processes on %s)" % ", ".join(cpu_list(c) for c in inside)
                     if len(inside) > 1 or (inside and tuple(inside[0]) != tuple(cores)) else "")
            parts.append("%s: %s%s" % (variants_lib.HOST_NAME % (index + 1), cpu_list(cores) or "not pinned", ranks))
        return "; ".join(parts)


def cpu_list(cores: Sequence[int]) -> str:
    """`taskset --cpu-list`'s form: runs of consecutive vCPUs as ranges, e.g. `0-3,8`; the order kept."""
    parts: List[str] = []
    start: Optional[int] = None
    previous: Optional[int] = None
    for cpu in cores:
        if previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None and previous is not None:
            parts.append(str(start) if start == previous else "%d-%d" % (start, previous))
        start = previous = cpu
    if start is not None and previous is not None:
        parts.append(str(start) if start == previous else "%d-%d" % (start, previous))
    return ",".join(parts)


def split(cores: Sequence[int], parts: int) -> Tuple[Tuple[int, ...], ...]:
    """`cores` cut into `parts` consecutive blocks of equal size.

    Raises:
      ValueError: `parts` does not divide the cores.
    """
    if parts < 1 or len(cores) % parts:
        raise ValueError("%d cores do not divide into %d equal blocks" % (len(cores), parts))
    size = len(cores) // parts
    return tuple(tuple(cores[i * size:(i + 1) * size]) for i in range(parts))


def plan(variant: variants_lib.Variant, order: Sequence[int], shared_cores: int = 0) -> CorePlan:
    """The `CorePlan` of `variant` (at its resolved layout) on the vCPUs `order`.

    Args:
      variant: the variant, its `cores_per_host` and `ranks_per_host` set
        (`Variant.at_layout`).
      order: the vCPUs this benchmark may use, in topology order.
      shared_cores: N > 0: every host on the same first N vCPUs.

    Raises:
      ValueError: more vCPUs needed than `order` holds; the message gives both.
    """
    hosts = variant.num_hosts
    if shared_cores:
        shared = _take(order, shared_cores, "%d shared core(s)" % shared_cores)
        return CorePlan(hosts=(shared[:1] if variant.is_single else shared,) * hosts, processes=((),) * hosts)
    per_host = variant.cores_per_host
    blocks = split(_take(order, hosts * per_host, "%d host(s) x %d core(s)" % (hosts, per_host)), hosts)
    per_rank = variant.cores_per_rank
    processes: Tuple[Tuple[Tuple[int, ...], ...], ...]
    if variant.is_single:
        processes = tuple((block[:per_rank],) for block in blocks)
    elif variant.launcher != variants_lib.LAUNCH_DIRECT:
        # horovodrun (or mpirun's daemon) starts the host's ranks: they share its cores.
        processes = tuple(() for _ in blocks)
    elif variant.rank_per_process:
        processes = tuple(split(block, variant.ranks_per_host) for block in blocks)
    else:
        # ps: the host's worker on the host's cores (its parameter server beside it).
        processes = tuple((block,) for block in blocks)
    ps_host = not variant.is_single and not variant.rank_per_process
    return CorePlan(hosts=blocks, processes=processes, threads=per_host if ps_host else per_rank)


def _take(order: Sequence[int], count: int, what: str) -> Tuple[int, ...]:
    if count > len(order):
        raise ValueError("%s need %d vCPUs; this process may use %d (%s)"
                         % (what, count, len(order), cpu_list(sorted(order))))
    return tuple(order[:count])

