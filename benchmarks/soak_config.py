"""What a soak runs (`SoakConfig`) and its settings, shared by the runner (`benchmarks.soak`) and its report."""

import dataclasses
from typing import Mapping, Sequence

from benchmarks.soak_faults import KINDS, LAST_POINT

NAME = "soak"
STRATEGIES = ("ps", "horovod", "hybrid")
AUC_TOLERANCE = 0.005
# How far the faulted job's validation log loss may be from the fault-free run's (`ps`: above it).
LOGLOSS_TOLERANCE = 0.005
DEFAULT_FAULTS = 3
DEFAULT_SEED = 1
DEFAULT_ROWS = 540_000
DEFAULT_FEATURE_SIZE = 50_000
DEFAULT_EPOCHS = 1
DEFAULT_BATCH = 128
DEFAULT_CHECKPOINT_STEPS = 20
DEFAULT_WAIT_S = 600.0
DEFAULT_PS_WORKERS = 2

# What stands for the soak's working directory in its report.
WORK_DIR_MARK = "<work_dir>"


@dataclasses.dataclass(frozen=True)
class SoakConfig:
    """What to soak.

    Attributes:
      strategies: the strategies, each a reference job and a faulted one.
      faults: faults per strategy.
      seed: the schedule's and the jobs' seed.
      rows: synthetic rows (train and validation together).
      feature_size: distinct ids.
      epochs: passes over the training split.
      ps_epochs: passes of the `ps` jobs (0: `epochs`). An asynchronous job
        trains on while a fault and its restart are handled (its chief
        alone at first), so it needs more steps than a synchronous one to
        hold the same faults.
      batch_size: per worker.
      checkpoint_steps: `--save_checkpoints_steps`.
      work_dir: where the data and the jobs go.
      wait_s: the longest any one wait of the soak may take.
      kinds: per strategy, the kinds of its faults in order (the export kill
        aside); a strategy not named draws them from the seed.
      fault_kinds: the kinds drawn schedules hold (empty: every kind of the
        strategy).
      export_kill: whether each faulted job ends with `kill_in_export`.
      last_point: the fraction of the budget the last fault (the export
        kill aside) lands before: short jobs need room after it.
      ps_workers: training tasks of a `ps` job (the chief included).
      references: fault-free runs of each job; the AUC check takes the
        nearest (asynchronous `ps` runs differ among themselves).
    """

    strategies: Sequence[str] = STRATEGIES
    faults: int = DEFAULT_FAULTS
    seed: int = DEFAULT_SEED
    rows: int = DEFAULT_ROWS
    feature_size: int = DEFAULT_FEATURE_SIZE
    epochs: int = DEFAULT_EPOCHS
    ps_epochs: int = 0
    batch_size: int = DEFAULT_BATCH
    checkpoint_steps: int = DEFAULT_CHECKPOINT_STEPS
    work_dir: str = ""
    wait_s: float = DEFAULT_WAIT_S
    kinds: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    fault_kinds: Sequence[str] = ()
    export_kill: bool = True
    last_point: float = LAST_POINT
    ps_workers: int = DEFAULT_PS_WORKERS
    references: int = 1

    def __post_init__(self):
        if not 0.0 < self.last_point <= 1.0:
            raise ValueError("--last_point must be in (0, 1], got %r" % self.last_point)
        if self.ps_epochs < 0:
            raise ValueError("--ps_epochs must be >= 0 (0: --epochs), got %r" % self.ps_epochs)
        wrong = [kind for kind in self.fault_kinds if kind not in KINDS]
        if wrong:
            raise ValueError("--fault_kinds: unknown %s (known: %s)" % (", ".join(wrong), ", ".join(KINDS)))
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown:
            raise ValueError("--strategies: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(STRATEGIES)))
        for name in ("faults", "rows", "feature_size", "epochs", "batch_size", "checkpoint_steps", "ps_workers",
                     "references"):
            if getattr(self, name) < 1:
                raise ValueError("--%s must be >= 1, got %r" % (name, getattr(self, name)))


def epochs_of(config: SoakConfig, strategy: str) -> int:
    """The passes over the training split of `strategy`'s jobs."""
    return config.ps_epochs if strategy == "ps" and config.ps_epochs else config.epochs

