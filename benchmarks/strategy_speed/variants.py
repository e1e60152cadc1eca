"""What the strategy benchmark measures: every strategy, the levers of the tower method, the two ceilings."""

import dataclasses
from typing import Tuple

GLOBAL_BATCH = 1024
# Replicas of the distributed variants: towers, MirroredStrategy replicas, ps workers, Horovod ranks.
REPLICAS = 2
NUM_PS = 1
OMP_THREADS = 2
KMP_AFFINITY_COMPACT = "granularity=fine,compact,1,0"
# Without it, TensorFlow's XLA auto-clustering (`--xla`) leaves CPU graphs alone.
XLA_CPU_JIT_FLAGS = "--tf_xla_cpu_global_jit"

KIND_TRAIN = "train"
KIND_LAUNCH = "launch"
KIND_INPUT = "input_ceiling"
KIND_COMPUTE = "compute_ceiling"
CHILD_KINDS = (KIND_INPUT, KIND_COMPUTE)
GROUP_STRATEGY = "strategy"
GROUP_LEVER = "lever"
GROUP_CEILING = "ceiling"
BASELINE = "single"
INPUT_CEILING = "input_ceiling"
COMPUTE_CEILING = "compute_ceiling"


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration the benchmark measures.

    Attributes:
      name: its label in the report and in `--variants`.
      group: `GROUP_STRATEGY`, `GROUP_LEVER` or `GROUP_CEILING`.
      note: what it is, for the report.
      kind: how it runs: `KIND_TRAIN` (`python -m deepfm.train`),
        `KIND_LAUNCH` (`python -m deepfm.launch`), `KIND_INPUT` or
        `KIND_COMPUTE` (a child process, `benchmarks.strategy_speed.ceilings`).
      strategy: `--strategy` of the training processes.
      replicas: replicas sharing the global batch.
      processes: training processes (each reads global batch / processes
        examples per step).
      optimizer: `--optimizer`.
      train_flags: further `deepfm.train` flags.
      launch_flags: `deepfm.launch` flags (`KIND_LAUNCH`).
      env: extra environment variables of the job.
    """

    name: str
    group: str
    note: str
    kind: str = KIND_TRAIN
    strategy: str = "single"
    replicas: int = 1
    processes: int = 1
    optimizer: str = "adam"
    train_flags: Tuple[str, ...] = ()
    launch_flags: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()

    def per_replica_batch(self, global_batch: int) -> int:
        """`--batch_size`: global / replicas, rounded down (3 towers of 341 make 1023)."""
        return global_batch // self.replicas

    def process_batch(self, global_batch: int) -> int:
        """Examples one step of one training process consumes."""
        return self.per_replica_batch(global_batch) * self.replicas // self.processes


def _towers(count: int) -> Tuple[str, ...]:
    return ("--num_devices", str(count), "--device_type", "cpu")


def _threads(intra: int, inter: int) -> Tuple[str, ...]:
    return ("--intra_op_threads", str(intra), "--inter_op_threads", str(inter))


def _tower_lever(name: str, note: str, towers: int = REPLICAS, flags: Tuple[str, ...] = (),
                 env: Tuple[Tuple[str, str], ...] = ()) -> Variant:
    return Variant(name, GROUP_LEVER, note, strategy="tower", replicas=towers, optimizer="lazy_adam",
                   train_flags=_towers(towers) + flags, env=env)


def all_variants() -> Tuple[Variant, ...]:
    """Every variant, in report order: strategies, levers of the tower method, ceilings."""
    return (
        Variant("single", GROUP_STRATEGY, "one device"),
        Variant("tower", GROUP_STRATEGY, "%d CPU towers, one process" % REPLICAS, strategy="tower",
                replicas=REPLICAS, train_flags=_towers(REPLICAS)),
        Variant("mirrored", GROUP_STRATEGY, "MirroredStrategy, %d CPU replicas" % REPLICAS, strategy="mirrored",
                replicas=REPLICAS, train_flags=_towers(REPLICAS)),
        Variant("ps", GROUP_STRATEGY, "%d ps + %d async workers (gRPC)" % (NUM_PS, REPLICAS), kind=KIND_LAUNCH,
                strategy="ps", replicas=REPLICAS, processes=REPLICAS,
                launch_flags=("--num_ps", str(NUM_PS), "--num_workers", str(REPLICAS))),
        Variant("horovod", GROUP_STRATEGY, "%d ranks, Gloo" % REPLICAS, kind=KIND_LAUNCH, strategy="horovod",
                replicas=REPLICAS, processes=REPLICAS, launch_flags=("--np", str(REPLICAS))),
        Variant("single+lazy_adam", GROUP_LEVER, "sparse-row Adam", optimizer="lazy_adam"),
        _tower_lever("tower+lazy_adam", "sparse-row Adam (base of the levers below)"),
        _tower_lever("tower+lazy_adam+xla", "--xla (session jit level only)", flags=("--xla",)),
        _tower_lever("tower+lazy_adam+xla_cpu", "--xla, TF_XLA_FLAGS=" + XLA_CPU_JIT_FLAGS, flags=("--xla",),
                     env=(("TF_XLA_FLAGS", XLA_CPU_JIT_FLAGS),)),
        _tower_lever("tower+lazy_adam+threads1/1", "intra 1, inter 1", flags=_threads(1, 1)),
        _tower_lever("tower+lazy_adam+threads2/1", "intra 2, inter 1", flags=_threads(2, 1)),
        _tower_lever("tower+lazy_adam+threads2/2", "intra 2, inter 2", flags=_threads(2, 2)),
        _tower_lever("tower1+lazy_adam", "1 tower", towers=1),
        _tower_lever("tower3+lazy_adam", "3 towers (per-replica batch 341)", towers=3),
        _tower_lever("tower+lazy_adam+omp_kmp",
                     "OMP_NUM_THREADS=%d, KMP_AFFINITY=%s" % (OMP_THREADS, KMP_AFFINITY_COMPACT),
                     flags=("--omp_num_threads", str(OMP_THREADS), "--kmp_affinity", KMP_AFFINITY_COMPACT)),
        Variant(INPUT_CEILING, GROUP_CEILING, "input pipeline alone", kind=KIND_INPUT),
        Variant(COMPUTE_CEILING, GROUP_CEILING, "one cached batch repeated, single, adam", kind=KIND_COMPUTE),
        Variant(COMPUTE_CEILING + "+lazy_adam", GROUP_CEILING, "one cached batch repeated, single, lazy_adam",
                kind=KIND_COMPUTE, optimizer="lazy_adam"),
    )


# Lever findings: (what, variant, reference variant).
LEVER_COMPARISONS = (
    ("lazy_adam vs adam, single", "single+lazy_adam", "single"),
    ("lazy_adam vs adam, tower", "tower+lazy_adam", "tower"),
    ("lazy_adam vs adam, compute ceiling", COMPUTE_CEILING + "+lazy_adam", COMPUTE_CEILING),
    ("2 towers vs single, lazy_adam", "tower+lazy_adam", "single+lazy_adam"),
    ("1 tower vs 2", "tower1+lazy_adam", "tower+lazy_adam"),
    ("3 towers vs 2", "tower3+lazy_adam", "tower+lazy_adam"),
    ("--xla (jit level only)", "tower+lazy_adam+xla", "tower+lazy_adam"),
    ("--xla + tf_xla_cpu_global_jit", "tower+lazy_adam+xla_cpu", "tower+lazy_adam"),
    ("threads 1/1 vs default", "tower+lazy_adam+threads1/1", "tower+lazy_adam"),
    ("threads 2/1 vs default", "tower+lazy_adam+threads2/1", "tower+lazy_adam"),
    ("threads 2/2 vs default", "tower+lazy_adam+threads2/2", "tower+lazy_adam"),
    ("OMP/KMP variables", "tower+lazy_adam+omp_kmp", "tower+lazy_adam"),
)
