"""The configurations the scale-out benchmarks measure: one `Variant` each, declared in `VARIANTS`.

A variant is a strategy at a layout (hosts, and optionally its own cores
and ranks per host) with extra `deepfm.train` flags and environment. Adding
one is one line in `VARIANTS`, e.g. a new `hybrid` option:

    Variant("hybrid+stale", names.HYBRID, "--exchange_staleness 1", ("--exchange_staleness", "1")),

and, to have the report compare it, one line in `LEVER_COMPARISONS`.
Strategy names come from the names table (`strategies.strategy_names`).
"""

import dataclasses
from typing import Tuple

from jobs import spec as spec_lib
from strategies import strategy_names as names

# The hosts of a distributed variant unless it says otherwise (the 2-host benchmark).
REFERENCE_HOSTS = 2
HOST_NAME = "algo-%d"
BASELINE = "single"
# Two independent singles at once: what two busy hosts of this machine do without any exchange.
INDEPENDENT = "single_x2"
# How a variant's ranks start: each directly in its host (`supervisor` serves the rendezvous), or all of them
# on one host by Horovod's launcher as `deepfm.launch` starts it (`jobs.local.horovod_runner`, horovodrun less
# its build check) with Gloo, MPI (Open MPI's choice of transport: shared memory between local ranks), MPI over
# TCP only, or MPI whose waits yield the core (`mpi_yield_when_idle`: Open MPI otherwise spins while a rank
# waits for its peers, on the core its TensorFlow threads need).
LAUNCH_DIRECT, LAUNCH_GLOO, LAUNCH_MPI, LAUNCH_MPI_TCP, LAUNCH_MPI_YIELD = (
    "direct", "gloo", "mpi", "mpi_tcp", "mpi_yield")
MPI_YIELD_ARGS = spec_lib.MPI_YIELD_OPTIONS
HOROVODRUN_ARGS = {LAUNCH_GLOO: ("--gloo",), LAUNCH_MPI: ("--mpi",),
                   LAUNCH_MPI_TCP: ("--mpi", "--mpi-args=-mca btl tcp,self"),
                   LAUNCH_MPI_YIELD: ("--mpi", "--mpi-args=" + MPI_YIELD_ARGS)}
# Or the ranks of every host started by `mpirun` on `algo-1` over ssh, with the options SageMaker's toolkit
# gives it (sshd in every host), plainly or with waits that yield (what `custom_mpi_options` adds there).
LAUNCH_SSH_MPI, LAUNCH_SSH_MPI_YIELD = "ssh_mpi", "ssh_mpi_yield"
SSH_MPI_ARGS = {LAUNCH_SSH_MPI: (), LAUNCH_SSH_MPI_YIELD: tuple(MPI_YIELD_ARGS.split())}
# In a variant's training flags: replaced by the measured id capacity (`BenchmarkConfig.id_capacity`).
ID_CAPACITY = "{id_capacity}"
ID_CAPACITY_MARGIN = 1.1
# Each of the run's layout values a variant may leave to the run (`--cores_per_host`, `--ranks_per_host`).
FROM_RUN = 0


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration a benchmark measures.

    Attributes:
      name: its label in the report and in `--variants`.
      strategy: a name of `strategies.strategy_names`: single, ps, horovod or hybrid.
      note: what it is, for the report.
      train_flags: further `deepfm.train` flags (`ID_CAPACITY` stands for
        the measured id capacity).
      env: extra environment variables of its processes.
      baseline: the variant whose examples/sec its efficiency divides by.
      copies: single only: independent copies, one per host, run at the
        same time (what sharing the machine alone costs).
      hosts: the hosts of a distributed variant.
      cores_per_host: its hosts' cores (`FROM_RUN`: the run's `--cores_per_host`).
      ranks_per_host: training processes per host (`FROM_RUN`: the run's
        `--ranks_per_host`); a single process runs on the cores of one
        such rank (cores_per_host / ranks_per_host).
      launcher: how its Horovod ranks start (`LAUNCH_DIRECT`: each in its
        host; `SSH_MPI_ARGS`'s: on every host, by `mpirun` over ssh; the
        others: all of them on one host, by `horovodrun`).
    """

    name: str
    strategy: str
    note: str
    train_flags: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    baseline: str = BASELINE
    copies: int = 1
    hosts: int = REFERENCE_HOSTS
    cores_per_host: int = FROM_RUN
    ranks_per_host: int = FROM_RUN
    launcher: str = LAUNCH_DIRECT

    def __post_init__(self):
        if self.strategy not in (names.SINGLE, names.PS) + names.HOROVOD_RANKS:
            raise ValueError("variant %s: strategy %r is not one of %s" % (
                self.name, self.strategy, ", ".join((names.SINGLE, names.PS) + names.HOROVOD_RANKS)))
        if self.launcher != LAUNCH_DIRECT:
            launchers = tuple(HOROVODRUN_ARGS) + tuple(SSH_MPI_ARGS)
            if self.launcher not in launchers or self.strategy not in names.HOROVOD_RANKS:
                raise ValueError("variant %s: launcher %r needs a strategy of Horovod ranks and one of %s"
                                 % (self.name, self.launcher, ", ".join(launchers)))
            if self.launcher in HOROVODRUN_ARGS and self.hosts != 1:
                raise ValueError("variant %s: launcher %r starts every rank on one host, got hosts=%d"
                                 % (self.name, self.launcher, self.hosts))
        for field in ("copies", "hosts"):
            if getattr(self, field) < 1:
                raise ValueError("variant %s: %s must be >= 1, got %r" % (self.name, field, getattr(self, field)))
        for field in ("cores_per_host", "ranks_per_host"):
            if getattr(self, field) < FROM_RUN:
                raise ValueError("variant %s: %s must be >= 1 (or %d: the run's), got %r"
                                 % (self.name, field, FROM_RUN, getattr(self, field)))
        if self.strategy == names.PS and self.ranks_per_host > 1:
            raise ValueError("variant %s: ps runs one worker and one parameter server per host (SageMaker's "
                             "layout), got ranks_per_host=%d" % (self.name, self.ranks_per_host))

    @property
    def is_single(self) -> bool:
        """One process (or independent copies of it), no exchange."""
        return self.strategy == names.SINGLE

    @property
    def rank_per_process(self) -> bool:
        """Its training processes are Horovod ranks."""
        return self.strategy in names.HOROVOD_RANKS

    @property
    def over_ssh(self) -> bool:
        """Its ranks start on every host by `mpirun` over ssh (`SSH_MPI_ARGS`)."""
        return self.launcher in SSH_MPI_ARGS

    @property
    def ranks_on_every_host(self) -> bool:
        """Its training processes run on each of its hosts (not all on one host by `horovodrun`)."""
        return self.launcher == LAUNCH_DIRECT or self.over_ssh

    @property
    def processes(self) -> int:
        """Its training processes (a layout left to the run counts one rank per host)."""
        if self.is_single:
            return self.copies
        return self.hosts * max(1, self.ranks_per_host)

    @property
    def num_hosts(self) -> int:
        """The hosts it runs on."""
        return self.copies if self.is_single else self.hosts

    @property
    def uses_id_capacity(self) -> bool:
        return any(ID_CAPACITY in flag for flag in self.train_flags)

    def at_layout(self, cores_per_host: int, ranks_per_host: int) -> "Variant":
        """This variant with the run's layout where it leaves it to the run.

        Raises:
          ValueError: ps with several ranks per host, or cores that the
            ranks cannot share evenly; the message names the variant.
        """
        cores = self.cores_per_host or cores_per_host
        ranks = self.ranks_per_host or ranks_per_host
        if self.strategy == names.PS and ranks > 1:
            raise ValueError("variant %s: ps runs one worker and one parameter server per host (SageMaker's "
                             "layout); leave it out, or run it with --ranks_per_host 1" % self.name)
        if self.launcher == LAUNCH_DIRECT and cores % ranks:
            raise ValueError("variant %s: %d cores per host do not divide among %d ranks per host"
                             % (self.name, cores, ranks))
        return dataclasses.replace(self, cores_per_host=cores, ranks_per_host=ranks)

    @property
    def cores_per_rank(self) -> int:
        """The cores of each of its training processes (of the one process of single)."""
        return max(1, max(1, self.cores_per_host) // max(1, self.ranks_per_host))

    def shape(self) -> str:
        """`ranks x cores per rank`, e.g. `4x4` (hosts x ranks per host ranks of that many cores)."""
        return "%dx%d" % (self.processes, self.cores_per_rank)


def host_names(count: int) -> Tuple[str, ...]:
    """`algo-1`, ..., `algo-<count>`: SageMaker's host names."""
    return tuple(HOST_NAME % (index + 1) for index in range(count))


# Every variant of `benchmarks.scale_out`, in report order: the baseline, the strategies at the defaults, then
# levers (a lever: the strategy with extra training flags or environment).
VARIANTS = (
    Variant(BASELINE, names.SINGLE, "1 process on the cores of one rank (defaults)"),
    Variant(INDEPENDENT, names.SINGLE, "2 independent singles, 1 per host, at once (no exchange)",
            copies=REFERENCE_HOSTS),
    Variant("ps", names.PS, "ps + worker per host, async (defaults)"),
    Variant("horovod", names.HOROVOD, "Horovod ranks, Gloo (defaults: learning rate x1.5)"),
    Variant("hybrid", names.HYBRID, "Horovod ranks, Gloo, tables sharded, all-to-all lookups (defaults)"),
    Variant("single+dedup", names.SINGLE, "--dedup_lookups", ("--dedup_lookups",)),
    Variant("single+no_check_ids", names.SINGLE, "--nocheck_ids", ("--nocheck_ids",)),
    Variant("ps+dedup", names.PS, "--dedup_lookups", ("--dedup_lookups",), baseline="single+dedup"),
    Variant("ps+threads1", names.PS, "intra/inter-op threads 1/1 (every task)",
            ("--intra_op_threads", "1", "--inter_op_threads", "1")),
    Variant("horovod+dedup", names.HOROVOD, "--dedup_lookups", ("--dedup_lookups",), baseline="single+dedup"),
    Variant("horovod+sparse_as_dense", names.HOROVOD, "--sparse_as_dense (dense allreduce)", ("--sparse_as_dense",)),
    Variant("horovod+sparse_as_dense+fp16", names.HOROVOD, "--sparse_as_dense --hvd_compression fp16",
            ("--sparse_as_dense", "--hvd_compression", "fp16")),
    Variant("horovod+cycle5ms", names.HOROVOD, "--hvd_cycle_time_ms 5", ("--hvd_cycle_time_ms", "5")),
    Variant("horovod+fusion0", names.HOROVOD, "--hvd_fusion_threshold_bytes 0 (no fusion)",
            ("--hvd_fusion_threshold_bytes", "0")),
    Variant("horovod+threads1", names.HOROVOD, "intra/inter-op threads 1/1",
            ("--intra_op_threads", "1", "--inter_op_threads", "1")),
    Variant("horovod+lr_none", names.HOROVOD, "--lr_scaling none (learning rate x1)", ("--lr_scaling", "none")),
    Variant("horovod+lr_sqrt", names.HOROVOD, "--lr_scaling sqrt", ("--lr_scaling", "sqrt")),
    Variant("horovod+lr_linear", names.HOROVOD, "--lr_scaling linear", ("--lr_scaling", "linear")),
    Variant("horovod+cycle0.2ms", names.HOROVOD, "--hvd_cycle_time_ms 0.2", ("--hvd_cycle_time_ms", "0.2")),
    Variant("hybrid+fp16", names.HYBRID, "--exchange_fp16 (rows and their gradients as float16)",
            ("--exchange_fp16",)),
    Variant("hybrid+capacity", names.HYBRID, "--id_capacity (measured distinct ids per owner x%g)"
            % ID_CAPACITY_MARGIN, ("--id_capacity", ID_CAPACITY)),
    Variant("hybrid+cycle0.2ms", names.HYBRID, "--hvd_cycle_time_ms 0.2", ("--hvd_cycle_time_ms", "0.2")),
    Variant("hybrid+cycle5ms", names.HYBRID, "--hvd_cycle_time_ms 5", ("--hvd_cycle_time_ms", "5")),
    Variant("hybrid+warmup_steps100", names.HYBRID, "--large_batch_warmup_steps 100 (the warm-up in global "
            "steps: twice the examples of single's at the same --batch_size)", ("--large_batch_warmup_steps", "100")),
    Variant("hybrid+autotune", names.HYBRID, "HOROVOD_AUTOTUNE=1 (Horovod's tuner of cycle time, fusion and cache)",
            env=(("HOROVOD_AUTOTUNE", "1"),)),
    Variant("hybrid+cycle10ms", names.HYBRID, "--hvd_cycle_time_ms 10", ("--hvd_cycle_time_ms", "10")),
    Variant("hybrid+cycle20ms", names.HYBRID, "--hvd_cycle_time_ms 20", ("--hvd_cycle_time_ms", "20")),
    Variant("hybrid+groups1", names.HYBRID, "--hvd_groups 1 (the dense gradients in one collective)",
            ("--hvd_groups", "1")),
    Variant("hybrid+fusion0", names.HYBRID, "--hvd_fusion_threshold_bytes 0 (no fusion)",
            ("--hvd_fusion_threshold_bytes", "0")),
    Variant("hybrid+lr_none", names.HYBRID, "--lr_scaling none (learning rate x1)", ("--lr_scaling", "none")),
    Variant("hybrid+levers", names.HYBRID, "--id_capacity (as +capacity) --hvd_cycle_time_ms 0.2 --exchange_fp16",
            ("--id_capacity", ID_CAPACITY, "--hvd_cycle_time_ms", "0.2", "--exchange_fp16")),
    # The exchange pipeline and padded exchanges (the defaults), each turned off, and both: the step of before.
    Variant("hybrid+in_step", names.HYBRID, "--noexchange_pipeline --id_capacity 0 (every exchange in the step, "
            "shapes of variable size)", ("--noexchange_pipeline", "--id_capacity", "0")),
    Variant("hybrid+no_pipeline", names.HYBRID, "--noexchange_pipeline (the id exchange in the step)",
            ("--noexchange_pipeline",)),
    Variant("hybrid+unpadded", names.HYBRID, "--id_capacity 0 (exchanges of variable size)", ("--id_capacity", "0")),
    Variant("hybrid+stale", names.HYBRID, "--exchange_staleness 1 (the next batch's rows exchanged during the step, "
            "one update old)", ("--exchange_staleness", "1")),
    Variant("hybrid+stale+cycle5ms", names.HYBRID, "--exchange_staleness 1 --hvd_cycle_time_ms 5",
            ("--exchange_staleness", "1", "--hvd_cycle_time_ms", "5")),
    # Horovod over MPI as SageMaker's toolkit starts it (mpirun over ssh), and with waits that yield the core.
    Variant("hybrid+mpi", names.HYBRID, "MPI instead of Gloo: mpirun on algo-1 over ssh (SageMaker's options)",
            launcher=LAUNCH_SSH_MPI),
    Variant("hybrid+mpi_yield", names.HYBRID, "as +mpi, with -mca mpi_yield_when_idle 1 (waits yield the core)",
            launcher=LAUNCH_SSH_MPI_YIELD),
    Variant("horovod+mpi_yield", names.HOROVOD, "MPI with waits that yield the core instead of Gloo: mpirun on algo-1 "
            "over ssh (SageMaker's options, -mca mpi_yield_when_idle 1)", launcher=LAUNCH_SSH_MPI_YIELD),
    Variant("horovod+dedup+mpi_yield", names.HOROVOD, "--dedup_lookups, as +mpi_yield", ("--dedup_lookups",),
            baseline="single+dedup", launcher=LAUNCH_SSH_MPI_YIELD),
)


def all_variants() -> Tuple[Variant, ...]:
    """Every variant of `benchmarks.scale_out` (`VARIANTS`)."""
    return VARIANTS


# Lever findings: (what, variant, reference variant).
LEVER_COMPARISONS = (
    ("dedup lookups, single", "single+dedup", "single"),
    ("dedup lookups, ps", "ps+dedup", "ps"),
    ("dedup lookups, horovod", "horovod+dedup", "horovod"),
    ("id range check off, single", "single+no_check_ids", "single"),
    ("threads 1/1, ps", "ps+threads1", "ps"),
    ("sparse_as_dense, horovod", "horovod+sparse_as_dense", "horovod"),
    ("sparse_as_dense + fp16, horovod", "horovod+sparse_as_dense+fp16", "horovod+sparse_as_dense"),
    ("cycle time 5 ms, horovod", "horovod+cycle5ms", "horovod"),
    ("no tensor fusion, horovod", "horovod+fusion0", "horovod"),
    ("threads 1/1, horovod", "horovod+threads1", "horovod"),
    ("learning rate x1 instead of x1.5, horovod", "horovod+lr_none", "horovod"),
    ("learning rate x sqrt(2), horovod", "horovod+lr_sqrt", "horovod"),
    ("learning rate x 2, horovod", "horovod+lr_linear", "horovod"),
    ("cycle time 0.2 ms, horovod", "horovod+cycle0.2ms", "horovod"),
    ("hybrid instead of horovod", "hybrid", "horovod"),
    ("fp16 exchange, hybrid", "hybrid+fp16", "hybrid"),
    ("fixed id capacity, hybrid", "hybrid+capacity", "hybrid"),
    ("cycle time 0.2 ms, hybrid", "hybrid+cycle0.2ms", "hybrid"),
    ("cycle time 5 ms, hybrid", "hybrid+cycle5ms", "hybrid"),
    ("warm-up in examples instead of 100 steps, hybrid", "hybrid", "hybrid+warmup_steps100"),
    ("Horovod's autotuner, hybrid", "hybrid+autotune", "hybrid"),
    ("cycle time 10 ms, hybrid", "hybrid+cycle10ms", "hybrid"),
    ("cycle time 20 ms, hybrid", "hybrid+cycle20ms", "hybrid"),
    ("one group of dense collectives, hybrid", "hybrid+groups1", "hybrid"),
    ("no tensor fusion, hybrid", "hybrid+fusion0", "hybrid"),
    ("learning rate x1 instead of x1.5, hybrid", "hybrid+lr_none", "hybrid"),
    ("capacity + cycle time 0.2 ms + fp16 exchange, hybrid", "hybrid+levers", "hybrid"),
    ("hybrid with its levers instead of horovod", "hybrid+levers", "horovod"),
    ("exchange pipeline + padded exchanges (the defaults), hybrid", "hybrid", "hybrid+in_step"),
    ("exchange pipeline, hybrid", "hybrid", "hybrid+no_pipeline"),
    ("padded exchanges, hybrid", "hybrid", "hybrid+unpadded"),
    ("rows one step stale, hybrid", "hybrid+stale", "hybrid"),
    ("cycle time 5 ms with stale rows, hybrid", "hybrid+stale+cycle5ms", "hybrid+stale"),
    ("MPI over ssh instead of Gloo, hybrid", "hybrid+mpi", "hybrid"),
    ("MPI waits that yield, hybrid", "hybrid+mpi_yield", "hybrid+mpi"),
    ("MPI with yielding waits instead of Gloo, hybrid", "hybrid+mpi_yield", "hybrid"),
    ("MPI with yielding waits instead of Gloo, horovod", "horovod+mpi_yield", "horovod"),
    ("MPI with yielding waits instead of Gloo, horovod --dedup_lookups", "horovod+dedup+mpi_yield", "horovod+dedup"),
    ("hybrid instead of horovod --dedup_lookups, both over MPI with yielding waits", "hybrid+mpi_yield",
     "horovod+dedup+mpi_yield"),
)
