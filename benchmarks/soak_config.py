"""What a soak runs (`SoakConfig`) and its settings, shared by the runner (`benchmarks.soak`) and its report."""

import dataclasses
from typing import Dict, Mapping, Sequence, Tuple

from benchmarks import common
from benchmarks.soak_faults import KINDS, LAST_POINT
from cli import config_flags

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

    strategies: Tuple[str, ...] = config_flags.field(STRATEGIES, "The strategies to soak, in order.")
    faults: int = config_flags.field(DEFAULT_FAULTS, "Faults per strategy.")
    seed: int = config_flags.field(DEFAULT_SEED, "The schedule's and the jobs' seed.")
    rows: int = config_flags.field(DEFAULT_ROWS, "Synthetic rows (train and validation together).")
    feature_size: int = config_flags.field(DEFAULT_FEATURE_SIZE, "Distinct ids.")
    epochs: int = config_flags.field(DEFAULT_EPOCHS, "Passes over the training split.")
    ps_epochs: int = config_flags.field(0, "Passes of the ps jobs (0: --epochs): an asynchronous job trains on "
                                           "while each fault is handled, so it needs more steps for them.")
    batch_size: int = config_flags.field(DEFAULT_BATCH, "Examples per worker and step.")
    checkpoint_steps: int = config_flags.field(DEFAULT_CHECKPOINT_STEPS, "--save_checkpoints_steps of the jobs.")
    work_dir: str = config_flags.field("", "Where the data and the jobs go (default: a new temporary directory, "
                                           "removed at the end).")
    wait_s: float = config_flags.field(DEFAULT_WAIT_S, "The longest any one wait of the soak may take.")
    kinds: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    fault_kinds: Tuple[str, ...] = config_flags.field(
        (), "Only these kinds in every drawn schedule, e.g. memory,kill_in_restore,kill_in_evaluation; a kind a "
            "strategy has not is left out of its schedule.")
    export_kill: bool = config_flags.field(True, "End each faulted job with a kill during its export.")
    last_point: float = config_flags.field(LAST_POINT, "Faults land before this fraction of the example budget "
                                                       "(the export kill aside).")
    ps_workers: int = config_flags.field(DEFAULT_PS_WORKERS, "Training tasks of the ps jobs, the chief included.")
    references: int = config_flags.field(1, "Fault-free runs of each job.")

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



@dataclasses.dataclass(frozen=True)
class SoakCommand:
    """What the command line asks besides the soak itself: the kinds as typed, and where the report goes."""

    kinds: str = config_flags.field("", "Per strategy, the kinds of its faults in order, e.g. "
                                        "ps=lose_ps+kill_in_checkpoint,hybrid=resize+resize (default: drawn from "
                                        "the seed).")
    name: str = config_flags.field(NAME, "The report's name under --results_dir.")
    results_dir: str = config_flags.field(common.RESULTS_DIR, "Where the report goes.")

    def __post_init__(self):
        parse_kinds(self.kinds)


def parse_kinds(text: str) -> Dict[str, Sequence[str]]:
    """`ps=lose_ps+kill_task,hybrid=resize` -> {"ps": ("lose_ps", "kill_task"), "hybrid": ("resize",)}.

    Raises:
      ValueError: another form; the message names the part.
    """
    kinds: Dict[str, Sequence[str]] = {}
    for part in filter(None, text.split(",")):
        strategy, separator, names = part.partition("=")
        if not separator or not names:
            raise ValueError("--kinds %r: %r is not STRATEGY=KIND+KIND..." % (text, part))
        kinds[strategy] = tuple(names.split("+"))
    return kinds
