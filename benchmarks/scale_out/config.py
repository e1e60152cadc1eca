"""What one run of the scale-out benchmarks measures (`BenchmarkConfig`) and its defaults."""

import dataclasses
import os
from typing import Optional, Tuple

from benchmarks.scale_out import variants as variants_lib
from benchmarks.scale_out.variants import Variant
from jobs.local import memory as memory_lib

NAME = "scale_out"
DEFAULT_DATA_DIR = os.path.join("data", "synthetic_300k")
DEFAULT_ROWS = 300_000
BATCH = 1024
# The per-replica batch from which the larger efficiency target applies (with a large-batch rule).
LARGE_BATCH = 8192
DEFAULT_RUNS = 3
DEFAULT_STEPS = 120
DEFAULT_WARMUP_STEPS = 30
DEFAULT_LINK_GBPS = 25.0
LOG_EVERY_STEPS = 10
RUN_TIMEOUT_S = 600
# How the hosts are made: network namespaces (`jobs.local.hosts`, root), blocks of this machine's cores without
# namespaces (ranks over the loopback interface), or emulated where they can be made, else local.
HOSTS_EMULATED, HOSTS_LOCAL, HOSTS_AUTO = "emulated", "local", "auto"
HOSTS_MODES = (HOSTS_EMULATED, HOSTS_LOCAL, HOSTS_AUTO)


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """What one benchmark run measures.

    Attributes:
      data_dir: the synthetic dataset root (generated with `rows` rows when missing).
      rows: rows of a generated dataset.
      runs: runs of every variant, interleaved.
      steps: timed steps of each distributed training process (`single`: twice as many).
      warmup_steps: steps of every training process before the window.
      link_gbps: egress limit of each host in Gbit/s (0: none).
      variants: the variants, in order, at their layout (`Variant.at_layout`).
      results_dir: where the report goes.
      name: the report's file name (without extension).
      timeout_s: the longest one run may take.
      shared_note: what else ran on the machine, for the report.
      trace_steps: steps each training process traces in one extra run of
        every variant after the timed rounds (0: no traced run).
      batch: the per-replica batch of every variant.
      train_flags: flags added to every variant's `deepfm.train`.
      id_capacity: what `ID_CAPACITY` in a variant's flags stands for (0:
        not measured).
      shared_cores: 0: each host on cores of its own. N > 0: every host of
        a distributed variant on the same N cores (a `single` on one), the
        efficiency counted against N cores.
      same_steps: every training process runs warm-up + steps (a rate
        measurement), instead of every variant training the same examples.
      cores_per_host: the cores of each host (of variants that leave it to the run).
      ranks_per_host: training processes per host (likewise); each on
        cores_per_host / ranks_per_host cores, as is `single`.
      hosts_mode: `HOSTS_EMULATED`, `HOSTS_LOCAL` or `HOSTS_AUTO`.
      host_memory: each host's memory limit (`jobs.local.memory.parse_size`:
        `6g`), a memory cgroup per host; "" for none.
      warmup_rounds: rounds of every variant run first and left out.
    """

    data_dir: str
    rows: int
    runs: int
    steps: int
    warmup_steps: int
    link_gbps: float
    variants: Tuple[Variant, ...]
    results_dir: str
    name: str = NAME
    timeout_s: float = RUN_TIMEOUT_S
    shared_note: str = ""
    trace_steps: int = 0
    batch: int = BATCH
    train_flags: Tuple[str, ...] = ()
    id_capacity: int = 0
    shared_cores: int = 0
    same_steps: bool = False
    cores_per_host: int = 1
    ranks_per_host: int = 1
    hosts_mode: str = HOSTS_EMULATED
    host_memory: str = ""
    warmup_rounds: int = 0

    def __post_init__(self):
        if self.host_memory:
            memory_lib.parse_size(self.host_memory)
        if self.cores_per_host < 1 or self.ranks_per_host < 1:
            raise ValueError("--cores_per_host and --ranks_per_host must be >= 1, got %r and %r"
                             % (self.cores_per_host, self.ranks_per_host))
        if self.cores_per_host % self.ranks_per_host:
            raise ValueError("--cores_per_host %d does not divide among --ranks_per_host %d: each rank gets "
                             "cores_per_host / ranks_per_host cores" % (self.cores_per_host, self.ranks_per_host))
        if self.shared_cores and (self.cores_per_host, self.ranks_per_host) != (1, 1):
            raise ValueError("--cores_per_host %d / --ranks_per_host %d: hosts of their own cores; with shared cores "
                             "(%d) every host runs on the same cores" % (self.cores_per_host, self.ranks_per_host,
                                                                         self.shared_cores))
        if self.hosts_mode not in HOSTS_MODES:
            raise ValueError("--hosts_mode %r: one of %s" % (self.hosts_mode, ", ".join(HOSTS_MODES)))
        # Every variant at its layout: the run's cores and ranks per host where it leaves them to the run.
        object.__setattr__(self, "variants", tuple(
            v.at_layout(self.cores_per_host, self.ranks_per_host) for v in self.variants))

    def max_steps(self, variant: Variant) -> int:
        """`--max_steps` of each training process: the same examples in every variant (or `same_steps`).

        The examples are those of `REFERENCE_HOSTS` processes running warm-up + steps.
        """
        if self.same_steps:
            return self.warmup_steps + self.steps
        examples_steps = (self.warmup_steps + self.steps) * variants_lib.REFERENCE_HOSTS
        if variant.is_single:
            return examples_steps
        return max(1, examples_steps // variant.processes)

    @property
    def examples(self) -> int:
        """Training examples of every variant (of each copy of `single_x2`): N of "AUC after N"."""
        return (self.warmup_steps + self.steps) * variants_lib.REFERENCE_HOSTS * self.batch

    def references(self, variant: Variant) -> int:
        """How many reference processes the variant's examples/sec is counted against (its efficiency's divisor).

        Its training processes (each on the cores of its reference), or with
        `shared_cores` those cores (the reference on one of them).
        """
        if self.shared_cores and not variant.is_single:
            return self.shared_cores
        return variant.processes

    @property
    def num_hosts(self) -> int:
        """The hosts the largest variant needs."""
        return max([variants_lib.REFERENCE_HOSTS] + [variant.num_hosts for variant in self.variants])

    def layout_text(self) -> str:
        """The run's layout in words, e.g. `hosts of 4 cores, 2 ranks per host of 2 cores each`."""
        if self.shared_cores:
            return "every host on the same %d shared core(s)" % self.shared_cores
        per_rank = self.cores_per_host // self.ranks_per_host
        return "hosts of %d core(s), %d rank(s) per host of %d core(s) each (`taskset`, %d TensorFlow thread(s))" % (
            self.cores_per_host, self.ranks_per_host, per_rank, per_rank)


def variant_named(config: BenchmarkConfig, name: str) -> Optional[Variant]:
    """The variant of `config` called `name`, if any."""
    for variant in config.variants:
        if variant.name == name:
            return variant
    return None
