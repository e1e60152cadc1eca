"""One strategy benchmark's set-up: `BenchmarkConfig`."""

import dataclasses
from typing import Tuple

from benchmarks.strategy_speed.variants import Variant

NAME = "strategies"
QUICK_NAME = "strategies_quick"
DEFAULT_RUNS = 3
DEFAULT_STEPS = 200
DEFAULT_WARMUP_STEPS = 50
QUICK_STEPS = 60
QUICK_WARMUP_STEPS = 20
RUN_TIMEOUT_S = 900


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """What one benchmark run measures.

    Attributes:
      data_dir: the synthetic dataset root (generated with `rows` rows when
        missing).
      rows: rows of a generated dataset.
      runs: runs of every variant.
      steps: timed steps of every training process, after warm-up.
      warmup_steps: steps of every training process before the window.
      global_batch: examples per global step.
      variants: the variants to run, in order.
      results_dir: where the report goes.
      name: the report's file name (without extension).
      timeout_s: the longest one run of a variant may take.
    """

    data_dir: str
    rows: int
    runs: int
    steps: int
    warmup_steps: int
    global_batch: int
    variants: Tuple[Variant, ...]
    results_dir: str
    name: str
    timeout_s: float = RUN_TIMEOUT_S

    @property
    def max_steps(self) -> int:
        """`--max_steps`: steps of every training process."""
        return self.warmup_steps + self.steps

    @property
    def examples(self) -> int:
        """Training examples of every variant: N of "AUC after N"."""
        return self.max_steps * self.global_batch
