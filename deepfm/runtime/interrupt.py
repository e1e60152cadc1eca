"""Stopping training on SIGTERM or SIGINT without losing a trained step.

SIGTERM is what SageMaker sends on a stop or a spot interruption (and what
the local launcher sends its tasks); SIGINT is Ctrl-C. While a
`StopRequest` is active, either signal only records the request; the
`StopOnRequestHook` it builds then lets the step in flight finish and asks
the training session to stop. Estimator's checkpoint saver writes a
checkpoint at that step as the session closes (on the chief), and the
trainer writes the metrics file marked `"interrupted": true` with the step
and exits with `INTERRUPTED_EXIT_CODE` (`TrainingInterrupted`). Rerunning
the same command resumes from that checkpoint: no trained step is lost.

Synchronous multi-process strategies (Horovod) must stop every process at
the same step, or one would wait for ever in a collective of a step the
others never run. Their processes are in lockstep (`Topology.lockstep`),
and the trainer passes the hook the strategy's agreement
(`Strategy.agree_max`, a maximum over the ranks, as the collective
`STOP_AGREEMENT_NAME`); the hook feeds its local flag and stops when the
combined one is set, so all ranks stop after the same step even when only
one of them got the signal. Without an agreement each process stops alone.

A second signal of the same kind while the first is being handled is not
caught: SIGINT raises `KeyboardInterrupt`, SIGTERM ends the process.
"""

import dataclasses
import json
import os
import signal
import threading
from typing import Any, Callable, Dict, Optional, Sequence

import tensorflow as tf
from absl import logging

# The exit code of a process whose training was interrupted by a signal and
# saved: EX_TEMPFAIL of sysexits.h, "try again later". Running the same
# command again resumes from the saved step.
INTERRUPTED_EXIT_CODE = 75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
NO_SIGNAL = 0
# The metrics-file keys an interrupted run adds.
INTERRUPTED_KEY = "interrupted"
SIGNAL_KEY = "signal"
STOP_FLAG_NAME = "deepfm_stop_requested"
# The collective by which processes in lockstep agree to stop.
STOP_AGREEMENT_NAME = "any_rank_stops"

Agreement = Callable[[tf.Tensor], Optional[tf.Tensor]]


class TrainingInterrupted(SystemExit):
    """Training stopped early on a signal, after saving its step.

    A `SystemExit`: left unhandled, the process exits with
    `INTERRUPTED_EXIT_CODE` and no traceback.

    Attributes:
      global_step: the step training stopped (and, on the chief, saved) at.
      signum: the signal that asked for the stop (`NO_SIGNAL` where another
        process asked for it).
    """

    def __init__(self, global_step: int, signum: int):
        super().__init__(INTERRUPTED_EXIT_CODE)
        self.global_step = global_step
        self.signum = signum

    def __str__(self):
        return "training interrupted by %s at global step %d; run the same command again to resume" % (
            signal_name(self.signum), self.global_step)


def signal_name(signum: int) -> str:
    """`SIGTERM`, or `another process's signal` for `NO_SIGNAL`."""
    if signum == NO_SIGNAL:
        return "another process's signal"
    return signal.Signals(signum).name


class StopRequest:
    """A context in which SIGTERM and SIGINT only request a stop.

    Handlers are installed on entering (in the main thread only; elsewhere
    the signals keep their handlers and a warning says so) and the previous
    ones restored on leaving.

    Args:
      signums: the signals that request a stop.
    """

    def __init__(self, signums: Sequence[int] = STOP_SIGNALS):
        self._signums = tuple(signums)
        self._previous: Dict[int, Any] = {}
        self.signum = NO_SIGNAL
        self._hook: Optional["StopOnRequestHook"] = None

    @property
    def requested(self) -> bool:
        """Whether one of the signals arrived."""
        return self.signum != NO_SIGNAL

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is not threading.main_thread():
            logging.warning("not in the main thread: %s will not stop training cleanly",
                            ", ".join(signal.Signals(s).name for s in self._signums))
            return self
        for signum in self._signums:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        del frame
        if self.requested:
            # A second signal: no longer caught.
            previous = self._previous.pop(signum, None)
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
            signal.raise_signal(signum)
            return
        self.signum = signum
        logging.warning("received %s: training stops after the step in flight and saves a checkpoint "
                        "(send it again to stop at once)", signal.Signals(signum).name)

    def hook(self, agree: Optional[Agreement] = None) -> "StopOnRequestHook":
        """The training hook acting on this request (one per `StopRequest`).

        Args:
          agree: combines this process's stop flag with the other processes'
            (`Strategy.agree_max`; see the module docstring); None where
            each process stops alone.
        """
        self._hook = StopOnRequestHook(self, agree)
        return self._hook

    def stopped_before(self, max_steps: Optional[int]) -> Optional[int]:
        """The global step training stopped at on request, if that is before `max_steps`.

        Args:
          max_steps: the step budget; None where training ends with its input.

        Returns:
          The step, or None when training ran to its step budget (a request
          during the last step loses nothing) or the hook never stopped it.
        """
        if self._hook is None or self._hook.stopped_at is None:
            return None
        if max_steps is not None and self._hook.stopped_at >= max_steps:
            return None
        return self._hook.stopped_at


class StopOnRequestHook(tf.estimator.SessionRunHook):
    """Stops training after the step in flight once a stop is requested (or agreed).

    Attributes:
      stopped_at: the global step when this hook stopped training, else None.

    Args:
      request: the `StopRequest` whose signal this hook watches.
      agree: the strategy's combination of every process's stop flag, or None.
    """

    def __init__(self, request: StopRequest, agree: Optional[Agreement] = None):
        self._request = request
        self._agree = agree
        self._flag = None
        self._agreed = None
        self._global_step = None
        self._stopping = False
        self.stopped_at: Optional[int] = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()
        if self._agree is not None:
            self._flag = tf.compat.v1.placeholder_with_default(
                tf.constant(0, tf.int32), shape=[], name=STOP_FLAG_NAME)
            self._agreed = self._agree(self._flag)

    def before_run(self, run_context):
        if self._agreed is None:
            return None
        return tf.estimator.SessionRunArgs(self._agreed, feed_dict={self._flag: int(self._request.requested)})

    def after_run(self, run_context, run_values):
        stop = bool(run_values.results) if self._agreed is not None else self._request.requested
        if stop and not self._stopping:
            self._stopping = True
            if not self._request.requested:
                logging.warning("another process received a stop signal: stopping after this step")
            run_context.request_stop()

    def end(self, session):
        if self._stopping:
            self.stopped_at = int(session.run(self._global_step))
            logging.warning("training stopped on request at global step %d", self.stopped_at)


def stop_training(result, metrics_file: Optional[str], request: StopRequest) -> None:
    """Writes what an interrupted run has and raises `TrainingInterrupted`.

    Args:
      result: the run's `TrainResult` so far (a dataclass; its global step is
        the step training stopped at).
      metrics_file: where the chief writes the metrics, marked
        `"interrupted": true` with the signal's name; None writes nothing.
      request: the stop request that stopped training.

    Raises:
      TrainingInterrupted: always.
    """
    if metrics_file:
        record = dict(dataclasses.asdict(result), **{INTERRUPTED_KEY: True, SIGNAL_KEY: signal_name(request.signum)})
        os.makedirs(os.path.dirname(os.path.abspath(metrics_file)), exist_ok=True)
        tmp = metrics_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)
        os.replace(tmp, metrics_file)
    error = TrainingInterrupted(result.global_step, request.signum)
    logging.warning("%s", error)
    raise error
