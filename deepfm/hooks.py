"""Session hooks of the training loop."""

import time
from typing import List, Optional

import tensorflow as tf
from absl import logging

DEFAULT_WARMUP_STEPS = 20


class ExamplesPerSecondHook(tf.estimator.SessionRunHook):
    """Logs training throughput and keeps its mean after a warm-up.

    Args:
      examples_per_step: global batch size: examples one step consumes in
        this process (all its replicas together).
      every_n_steps: how often to log.
      warmup_steps: steps left out of the mean (graph start-up, first
        buffer fills).
    """

    def __init__(self, examples_per_step: int, every_n_steps: int = 100,
                 warmup_steps: int = DEFAULT_WARMUP_STEPS):
        self._examples_per_step = examples_per_step
        self._every_n_steps = max(1, every_n_steps)
        self._warmup_steps = warmup_steps
        self._steps = 0
        self._timed_steps = 0
        self._timed_seconds = 0.0
        self._window_steps = 0
        self._window_start: Optional[float] = None
        self._step_start = 0.0
        self.rates: List[float] = []

    def before_run(self, run_context):
        self._step_start = time.perf_counter()
        if self._window_start is None:
            self._window_start = self._step_start

    def after_run(self, run_context, run_values):
        now = time.perf_counter()
        self._steps += 1
        if self._steps > self._warmup_steps:
            self._timed_steps += 1
            self._timed_seconds += now - self._step_start
        self._window_steps += 1
        if self._window_steps >= self._every_n_steps:
            rate = self._window_steps * self._examples_per_step / (now - self._window_start)
            self.rates.append(rate)
            logging.info("examples/sec: %.0f (step %d of this run)", rate, self._steps)
            self._window_steps = 0
            self._window_start = now

    @property
    def examples_per_second(self) -> Optional[float]:
        """Mean throughput of the steps after warm-up (all steps if too few)."""
        if self._timed_steps:
            return self._timed_steps * self._examples_per_step / self._timed_seconds
        return None
