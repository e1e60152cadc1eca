"""Session hooks of the training loop: progress, throughput, and where they are reported.

`ProgressHook` measures every interval of `every_n_steps` steps of this
process (its throughput, the mean training loss, the global step) and hands a
`ProgressRecord` to its listeners: the console line (`ConsoleProgress`), the
TensorBoard scalars `examples_per_sec` and `learning_rate`
(`SummaryProgress`), and a JSON-lines file (`ProgressFile`) that tools such
as `benchmarks.strategy_speed` read instead of the log text. One hook serves
several `Estimator.train` calls (training in rounds between evaluations):
its counts go on across them, and the time between rounds is left out of the
throughput.
"""

import dataclasses
import json
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from deepfm.runtime import console as console_lib
from input_pipeline import pipe

DEFAULT_WARMUP_STEPS = 20
# In TRAIN, the loss of every model_fn call (once per tower or replica) goes to
# this graph collection (`recording_loss`), where `ProgressHook` finds it.
TRAIN_LOSS_COLLECTION = "deepfm_train_losses"
EXAMPLES_PER_SEC_TAG = "examples_per_sec"
# In a progress file's path, replaced by the process's task name.
TASK_PLACEHOLDER = "{task}"
LEARNING_RATE_TAG = "learning_rate"


@dataclasses.dataclass(frozen=True)
class ProgressRecord:
    """One interval of training in one process.

    Attributes:
      time: wall-clock time at the interval's end (seconds since the epoch).
      elapsed: seconds since this process started training (evaluations
        between rounds included).
      step: steps this process has run in this run (not resumed ones).
      global_step: the global step after the interval's last step.
      examples_per_sec: this process's throughput over the interval (all its
        replicas together).
      loss: mean training loss over the interval's steps (the towers' or
        replicas' mean); None when the model_fn publishes none.
      interval_steps: steps in the interval.
    """

    time: float
    elapsed: float
    step: int
    global_step: int
    examples_per_sec: float
    loss: Optional[float]
    interval_steps: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


Listener = Callable[[ProgressRecord], None]


def recording_loss(model_fn: Callable) -> Callable:
    """`model_fn`, adding its TRAIN loss to `TRAIN_LOSS_COLLECTION` (any model_fn reports its loss)."""
    def recording(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        if mode == tf.estimator.ModeKeys.TRAIN and spec.loss is not None:
            tf.compat.v1.add_to_collection(TRAIN_LOSS_COLLECTION, spec.loss)
        return spec
    return recording


class ProgressHook(tf.estimator.SessionRunHook):
    """Measures training every `every_n_steps` steps and reports it to listeners.

    Args:
      examples_per_step: examples one step consumes in this process (all its
        replicas together).
      every_n_steps: the interval in steps; a shorter last interval is
        reported when training ends.
      warmup_steps: steps left out of the mean throughput (graph start-up,
        first buffer fills).
      listeners: called with each `ProgressRecord`.
    """

    def __init__(self, examples_per_step: int, every_n_steps: int = 100,
                 warmup_steps: int = DEFAULT_WARMUP_STEPS, listeners: Sequence[Listener] = ()):
        self._examples_per_step = examples_per_step
        self._every_n_steps = max(1, every_n_steps)
        self._warmup_steps = warmup_steps
        self._listeners = list(listeners)
        self._steps = 0
        self._timed_steps = 0
        self._timed_seconds = 0.0
        self._start: Optional[float] = None
        self._fetches: Dict[str, Any] = {}
        self._global_step_tensor = None
        self._reset_window(None)
        self._step_start = 0.0
        self.records: List[ProgressRecord] = []

    @property
    def steps(self) -> int:
        """Steps this process has trained in this run, over every round."""
        return self._steps

    def _reset_window(self, now: Optional[float]) -> None:
        self._window_start = now
        self._window_steps = 0
        self._window_losses: List[float] = []
        self._global_step = 0

    def begin(self):
        self._global_step_tensor = tf.compat.v1.train.get_global_step()
        fetches = {}
        losses = tf.compat.v1.get_collection(TRAIN_LOSS_COLLECTION)
        if losses:
            fetches["loss"] = tf.reduce_mean(tf.stack([tf.cast(loss, tf.float32) for loss in losses]))
        self._fetches = fetches

    def after_create_session(self, session, coord):
        del session, coord
        self._reset_window(None)

    def before_run(self, run_context):
        self._step_start = time.perf_counter()
        if self._window_start is None:
            self._window_start = self._step_start
        if self._start is None:
            self._start = time.time()
        return tf.estimator.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        now = time.perf_counter()
        self._steps += 1
        if self._steps > self._warmup_steps:
            self._timed_steps += 1
            self._timed_seconds += now - self._step_start
        self._window_steps += 1
        results = run_values.results or {}
        if "loss" in results:
            self._window_losses.append(float(results["loss"]))
        if self._window_steps >= self._every_n_steps:
            self._global_step = int(run_context.session.run(self._global_step_tensor))
            self._report(now)

    def end(self, session):
        if self._window_steps:
            self._global_step = int(session.run(self._global_step_tensor))
            self._report(time.perf_counter())

    def _report(self, now: float) -> None:
        assert self._start is not None and self._window_start is not None, "a report follows a started window"
        seconds = max(now - self._window_start, 1e-9)
        record = ProgressRecord(
            time=time.time(), elapsed=time.time() - self._start, step=self._steps,
            global_step=self._global_step,
            examples_per_sec=self._window_steps * self._examples_per_step / seconds,
            loss=float(np.mean(self._window_losses)) if self._window_losses else None,
            interval_steps=self._window_steps)
        self.records.append(record)
        for listener in self._listeners:
            listener(record)
        self._window_start = now
        self._window_steps = 0
        self._window_losses = []

    @property
    def examples_per_second(self) -> Optional[float]:
        """Mean throughput of the steps after warm-up (None if there were none)."""
        if self._timed_steps:
            return self._timed_steps * self._examples_per_step / self._timed_seconds
        return None


class ReleasePipeWaitsHook(tf.estimator.SessionRunHook):
    """When training ends, before its session closes: Pipe mode's waits for FIFOs nobody reads end.

    The input reads ahead; where the step budget ends at the end of the data
    fed, that read waits for the next epoch's FIFO, and the session's close
    would wait with it, up to `--pipe_timeout_s` (`pipe.release_waits`). So
    does a session that failed (a channel's stream broke inside a record):
    its error would come only after that wait. The session's close asks its
    coordinator to stop before it closes, whether training ended or failed
    (hooks' `end` runs only when it ended), so a thread of the coordinator
    releases the waits then.
    """

    def after_create_session(self, session, coord):
        del session

        def release_when_stopping():
            coord.wait_for_stop()
            pipe.release_waits()
        thread = threading.Thread(target=release_when_stopping, name="release-pipe-waits", daemon=True)
        coord.register_thread(thread)
        thread.start()

    def end(self, session):
        del session
        pipe.release_waits()


class ConsoleProgress:
    """Prints each record as a progress line (a live bar on a terminal).

    Args:
      console: where to print.
      total_steps: the global step training stops at; None when unknown (it
        ends with its data: SageMaker's Pipe mode).
      steps_per_epoch: global steps per epoch, or None when unknown.
      num_epochs: epochs of the run, shown as `epoch e/N` (None: `epoch e`).
    """

    def __init__(self, console: console_lib.Console, total_steps: Optional[int],
                 steps_per_epoch: Optional[int] = None,
                 num_epochs: Optional[int] = None):
        self._console = console
        self._total = total_steps
        self._steps_per_epoch = steps_per_epoch
        self._num_epochs = num_epochs
        self._last: Optional[ProgressRecord] = None

    def __call__(self, record: ProgressRecord) -> None:
        epoch = None
        if self._steps_per_epoch:
            epoch = record.global_step // self._steps_per_epoch + 1
            if self._num_epochs:
                epoch = min(epoch, self._num_epochs)
        remaining = None
        if self._total is not None and self._last is not None and record.global_step > self._last.global_step:
            rate = (record.global_step - self._last.global_step) / max(record.time - self._last.time, 1e-9)
            remaining = (self._total - record.global_step) / rate
        elif self._total is not None and record.global_step and record.elapsed > 0:
            remaining = (self._total - record.global_step) * record.elapsed / record.global_step
        self._last = record
        text = console_lib.format_progress(
            record.global_step, self._total, record.examples_per_sec, record.loss, record.elapsed,
            max(0.0, remaining) if remaining is not None else None, epoch, self._num_epochs)
        self._console.progress(text, record.global_step / max(1, self._total) if self._total else None)


class SummaryProgress:
    """Writes `examples_per_sec` and `learning_rate` to the TensorBoard event files of `model_dir`.

    Args:
      model_dir: the Estimator's model directory (the chief's).
      learning_rate: the learning rate the optimizer uses (after the
        strategy's scaling).
    """

    def __init__(self, model_dir: str, learning_rate: float):
        self._model_dir = model_dir
        self._learning_rate = learning_rate

    def __call__(self, record: ProgressRecord) -> None:
        writer = tf.compat.v1.summary.FileWriterCache.get(self._model_dir)
        summary = tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag=EXAMPLES_PER_SEC_TAG, simple_value=record.examples_per_sec),
            tf.compat.v1.Summary.Value(tag=LEARNING_RATE_TAG, simple_value=self._learning_rate)])
        writer.add_summary(summary, record.global_step)
        writer.flush()


class ProgressFile:
    """Appends each record to a JSON-lines file (one object per line, `ProgressRecord` fields).

    Args:
      path: the file; its directory is created.
    """

    def __init__(self, path: str):
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)

    def __call__(self, record: ProgressRecord) -> None:
        with open(self.path, "a") as f:
            f.write(record.to_json() + "\n")


def read_progress_file(path: str) -> List[ProgressRecord]:
    """The records of a `ProgressFile`.

    Raises:
      ValueError: a line is not a progress record; the message names the
        file and line.
    """
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(ProgressRecord(**json.loads(line)))
            except (ValueError, TypeError) as e:
                raise ValueError("%s:%d is not a progress record: %s" % (path, number, e)) from e
    return records
