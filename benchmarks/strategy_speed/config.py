"""One strategy benchmark's options (`BenchmarkConfig`), from which its flags are generated."""

import dataclasses
import os
from typing import Tuple

from benchmarks import common, harness
from benchmarks.strategy_speed.variants import GLOBAL_BATCH, Variant, all_variants
from cli import config_flags

NAME = "strategies"
QUICK_NAME = "strategies_quick"
DEFAULT_RUNS = 3
DEFAULT_STEPS = 200
DEFAULT_WARMUP_STEPS = 50
QUICK_STEPS = 60
QUICK_WARMUP_STEPS = 20
RUN_TIMEOUT_S = 900
# Progress lines every so many steps (`--log_every_n_steps` of every training process).
LOG_EVERY_STEPS = 10
# A step count that stands for "the default of a full run or of --quick".
UNSET = 0
UNSET_WARMUP = -1


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig(harness.HarnessConfig):
    """What one benchmark run measures; the full or `--quick` defaults filled in.

    `variants` names the variants (all where empty), `selected()` gives
    them; `global_batch` is `--batch_size`, the examples of one global step
    in every variant.
    """

    rounds: int = config_flags.field(DEFAULT_RUNS, "Runs of every variant, each a fresh process tree, "
                                                   "interleaved (with --quick: 1).", flag="runs")
    data_dir: str = config_flags.field(common.DEFAULT_DATA_DIR, "The synthetic dataset root (generated with --rows "
                                                                "rows where missing).")
    rows: int = config_flags.field(common.DEFAULT_ROWS, "Rows of a generated dataset.")
    steps: int = config_flags.field(UNSET, "Timed steps per training process (0: %d; with --quick %d)."
                                    % (DEFAULT_STEPS, QUICK_STEPS))
    warmup_steps: int = config_flags.field(UNSET_WARMUP, "Steps of every training process before the window "
                                                         "(-1: %d; with --quick %d)."
                                           % (DEFAULT_WARMUP_STEPS, QUICK_WARMUP_STEPS))
    global_batch: int = config_flags.field(GLOBAL_BATCH, "Global batch: examples per global step in every "
                                                         "variant (per replica: global / replicas).",
                                           flag="batch_size")
    quick: bool = config_flags.field(False, "A smoke test: %d warm-up + %d timed steps, 1 run, report named %s."
                                     % (QUICK_WARMUP_STEPS, QUICK_STEPS, QUICK_NAME))
    timeout_s: float = config_flags.field(float(RUN_TIMEOUT_S), "The longest one run of a variant may take.")

    def __post_init__(self):
        defaults = ((QUICK_STEPS, QUICK_WARMUP_STEPS) if self.quick else (DEFAULT_STEPS, DEFAULT_WARMUP_STEPS))
        for key, unset, default in zip(("steps", "warmup_steps"), (UNSET, UNSET_WARMUP), defaults):
            if getattr(self, key) == unset:
                object.__setattr__(self, key, default)
        if self.quick:
            object.__setattr__(self, "rounds", 1)
        object.__setattr__(self, "name", self.name or (QUICK_NAME if self.quick else NAME))
        object.__setattr__(self, "data_dir", os.path.abspath(self.data_dir))
        super().__post_init__()
        for flag, value, least in (("steps", self.steps, 2 * LOG_EVERY_STEPS), ("warmup_steps", self.warmup_steps, 0),
                                   ("batch_size", self.global_batch, 1), ("timeout_s", self.timeout_s, 1),
                                   ("rows", self.rows, 1)):
            if value < least:
                raise ValueError("--%s must be >= %d, got %r" % (flag, least, value))
        too_small = [v.name for v in self.selected() if self.global_batch < v.replicas]
        if too_small:
            raise ValueError("--batch_size %d is smaller than the replicas of %s"
                             % (self.global_batch, ", ".join(too_small)))

    def selected(self) -> Tuple[Variant, ...]:
        """The variants to run, in order.

        Raises:
          ValueError: an unknown name; the message lists the known ones.
        """
        return tuple(common.select_variants(self.variants, all_variants()))

    @property
    def max_steps(self) -> int:
        """`--max_steps`: steps of every training process."""
        return self.warmup_steps + self.steps

    @property
    def examples(self) -> int:
        """Training examples of every variant: N of "AUC after N"."""
        return self.max_steps * self.global_batch
