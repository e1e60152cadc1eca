"""Evaluation during training, early stopping, and the best checkpoint.

With `--eval_every_n_steps N` a training process trains in rounds: to the
next global step that is a multiple of N (and to the step budget last),
then evaluates the checkpoint training saved there on the whole validation
set. `Estimator.train(max_steps=...)` followed by `Estimator.evaluate` is the
same for every strategy in this package, so every strategy trains this way:
the one-process ones, and every Horovod rank, all at the same steps (the
schedule starts from rank 0's resume step, and each rank evaluates the same
data with equal variables, so each computes the same AUC; an allreduce of the
stop decisions makes sure they all stop at the same round, so no rank waits
in a collective for another). A parameter-server chief cannot train in
rounds (`EvaluateInSessionHook`).

`BestCheckpoint` keeps the checkpoint with the highest validation AUC:
copied into `<model_dir>/best/` (out of reach of the Estimator's
`keep_checkpoint_max`) with a `best.json` holding its step, its metrics, the
evaluations so far and the count of evaluations without a better AUC, which
a resumed run reads back. `--early_stopping_patience K` ends training after K
evaluations in a row without a better AUC.
"""

import dataclasses
import glob
import json
import os
import shutil
from typing import Callable, List, Optional

import tensorflow as tf
from absl import logging

BEST_DIR = "best"
STATE_FILE = "best.json"
# The Estimator's checkpoint file prefix in the model directory.
CHECKPOINT_PREFIX = "model.ckpt"


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The validation metrics of one checkpoint."""

    step: int
    auc: float
    logloss: float


def next_eval_step(step: int, max_steps: int, every_n_steps: int) -> int:
    """The first step to evaluate at after `step`: the next multiple of `every_n_steps`, at most `max_steps`.

    Raises:
      ValueError: `every_n_steps` < 1.
    """
    if every_n_steps < 1:
        raise ValueError("--eval_every_n_steps must be >= 1, got %r" % every_n_steps)
    return min(max_steps, (step // every_n_steps + 1) * every_n_steps)


class BestCheckpoint:
    """The best checkpoint by validation AUC, and the early-stopping count.

    Args:
      model_dir: the model directory; the copy and its state live in
        `model_dir/best/`.
      patience: evaluations without a better AUC before stopping; None never
        stops.
      keep: copy the best checkpoint and write the state (the process that
        saves checkpoints); other processes only track the metrics.
    """

    def __init__(self, model_dir: str, patience: Optional[int] = None, keep: bool = True):
        if patience is not None and patience < 1:
            raise ValueError("--early_stopping_patience must be >= 1, got %r" % patience)
        self.directory = os.path.join(model_dir, BEST_DIR)
        self.patience = patience
        self.keep = keep
        self.best: Optional[Evaluation] = None
        self.checkpoint_path: Optional[str] = None
        self.without_improvement = 0
        self.history: List[Evaluation] = []
        if keep:
            self._load()

    @property
    def state_path(self) -> str:
        return os.path.join(self.directory, STATE_FILE)

    def _load(self) -> None:
        if not os.path.exists(self.state_path):
            return
        with open(self.state_path) as f:
            state = json.load(f)
        try:
            self.best = Evaluation(**state["best"])
            self.checkpoint_path = os.path.join(self.directory, state["checkpoint"])
            self.without_improvement = int(state["without_improvement"])
            self.history = [Evaluation(**item) for item in state["history"]]
        except (KeyError, TypeError) as e:
            raise ValueError("%s is not a best-checkpoint state (%s): remove %s to start the "
                             "tracking again" % (self.state_path, e, self.directory)) from e
        logging.info("best checkpoint so far: step %d, AUC %.4f", self.best.step, self.best.auc)

    def update(self, evaluation: Evaluation, checkpoint_path: Optional[str]) -> bool:
        """Records an evaluation of `checkpoint_path`; True when its AUC is the best so far.

        The best checkpoint's files are copied (replacing the previous best)
        before the state says it is there.
        """
        self.history.append(evaluation)
        improved = self.best is None or evaluation.auc > self.best.auc
        if improved:
            self.best = evaluation
            self.without_improvement = 0
            if self.keep and checkpoint_path:
                self.checkpoint_path = self._copy(checkpoint_path)
            else:
                self.checkpoint_path = checkpoint_path
        else:
            self.without_improvement += 1
        if self.keep:
            self._save()
        return improved

    @property
    def should_stop(self) -> bool:
        """Whether `patience` evaluations in a row brought no better AUC."""
        return self.patience is not None and self.without_improvement >= self.patience

    def _copy(self, checkpoint_path: str) -> str:
        os.makedirs(self.directory, exist_ok=True)
        sources = glob.glob(checkpoint_path + ".*")
        if not sources:
            raise FileNotFoundError("checkpoint %s has no files to keep as the best one" % checkpoint_path)
        prefix = os.path.basename(checkpoint_path)
        for old in os.listdir(self.directory):
            if old != STATE_FILE and not old.startswith(prefix + "."):
                os.remove(os.path.join(self.directory, old))
        for source in sources:
            shutil.copy2(source, os.path.join(self.directory, os.path.basename(source)))
        return os.path.join(self.directory, prefix)

    def _save(self) -> None:
        state = {
            "best": dataclasses.asdict(self.best) if self.best else None,
            "checkpoint": os.path.basename(self.checkpoint_path) if self.checkpoint_path else None,
            "without_improvement": self.without_improvement,
            "history": [dataclasses.asdict(item) for item in self.history],
        }
        os.makedirs(self.directory, exist_ok=True)
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, self.state_path)


def report_evaluation(tracker: BestCheckpoint, evaluation: Evaluation, checkpoint_path: Optional[str],
                      report: Callable[[str], None]) -> bool:
    """Records an evaluation, prints it; True when the tracker says to stop."""
    improved = tracker.update(evaluation, checkpoint_path)
    best = tracker.best
    assert best is not None, "an updated tracker has a best evaluation"
    report("validation at step %d: AUC %.4f, logloss %.4f%s" % (
        evaluation.step, evaluation.auc, evaluation.logloss,
        " (best so far)" if improved else " (best: AUC %.4f at step %d; %d evaluation(s) without a better one)"
        % (best.auc, best.step, tracker.without_improvement)))
    return tracker.should_stop


def report_early_stop(tracker: BestCheckpoint, step: int, report: Callable[[str], None]) -> None:
    """Prints why training stops early."""
    best = tracker.best
    assert best is not None, "a tracker that stops has a best evaluation"
    report("early stopping at step %d: no better validation AUC in %d evaluations; the best is step %d (AUC %.4f)"
           % (step, tracker.without_improvement, best.step, best.auc))


@dataclasses.dataclass
class RoundsOutcome:
    """How training in rounds ended.

    Attributes:
      best: the best evaluation (None if no round ran).
      checkpoint_path: the kept copy of the best checkpoint.
      evaluations: every evaluation of this run and the runs it resumes.
      stopped_early: training ended by early stopping.
    """

    best: Optional[Evaluation]
    checkpoint_path: Optional[str]
    evaluations: List[Evaluation]
    stopped_early: bool


def train_in_rounds(train_to: Callable[[int], int], evaluate: Callable[[], "tuple"],
                    tracker: BestCheckpoint, start_step: int, max_steps: int, every_n_steps: int,
                    agree: Callable[[int], int] = lambda value: value,
                    report: Callable[[str], None] = lambda text: None,
                    interrupted: Callable[[], bool] = lambda: False) -> RoundsOutcome:
    """Trains to each evaluation step in turn, evaluates, and stops early when the tracker says so.

    Args:
      train_to: trains up to a global step; returns the global step reached
        (asynchronous workers may have passed it).
      evaluate: evaluates the latest checkpoint; returns `(Evaluation,
        checkpoint path)`.
      tracker: the best checkpoint and the early-stopping count.
      start_step: the global step training starts from (the same on every
        process that trains in rounds).
      max_steps: the step budget.
      every_n_steps: the evaluation interval.
      agree: combines every process's stop decision so that all take the
        same (a maximum over the ranks on Horovod, a collective; the
        identity elsewhere).
      report: prints a line to the console.
      interrupted: whether a stop signal ended the last round (then no more
        rounds, and no evaluation of it).
    """
    step = start_step
    stopped_early = False
    while step < max_steps:
        step = train_to(next_eval_step(step, max_steps, every_n_steps))
        if interrupted():
            break
        evaluation, checkpoint_path = evaluate()
        stop = report_evaluation(tracker, evaluation, checkpoint_path, report)
        if agree(int(stop)) and step < max_steps:
            stopped_early = True
            report_early_stop(tracker, step, report)
            break
    return RoundsOutcome(best=tracker.best, checkpoint_path=tracker.checkpoint_path,
                         evaluations=list(tracker.history), stopped_early=stopped_early)


class EvaluateInSessionHook(tf.estimator.SessionRunHook):
    """Evaluates at each evaluation step from inside one training session (a parameter-server chief).

    A parameter-server chief cannot train in rounds: each new training
    session of the chief restores the variables on the parameter servers from
    its last checkpoint, undoing what the other workers trained while it
    evaluated. This hook keeps the chief's session open instead: at the first
    step at or past each evaluation step it saves a checkpoint with the
    Estimator's saver, evaluates it (the other workers train on meanwhile),
    keeps the best, and stops training early when the tracker says so.

    Args:
      model_dir: where the checkpoint is saved.
      evaluate: evaluates a checkpoint path; returns an `Evaluation`.
      tracker: the best checkpoint and the early-stopping count.
      max_steps: the step budget (the last evaluation comes after training,
        from the trainer).
      every_n_steps: the evaluation interval in global steps.
      report: prints a line to the console.
    """

    def __init__(self, model_dir: str, evaluate: Callable[[str], Evaluation], tracker: BestCheckpoint,
                 max_steps: int, every_n_steps: int, report: Callable[[str], None] = lambda text: None):
        self._model_dir = model_dir
        self._evaluate = evaluate
        self._tracker = tracker
        self._max_steps = max_steps
        self._every_n_steps = every_n_steps
        self._report = report
        self._global_step = None
        # The step of the next evaluation; `after_create_session` sets it from the restored global step.
        self._next = max_steps
        self.stopped_early = False

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        del coord
        self._next = next_eval_step(int(session.run(self._global_step)), self._max_steps, self._every_n_steps)

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if step < self._next or step >= self._max_steps:
            return
        saver = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS)[0]
        path = saver.save(run_context.session, os.path.join(self._model_dir, CHECKPOINT_PREFIX), global_step=step)
        if report_evaluation(self._tracker, self._evaluate(path), path, self._report):
            self.stopped_early = True
            report_early_stop(self._tracker, step, self._report)
            run_context.request_stop()
        self._next = next_eval_step(step, self._max_steps, self._every_n_steps)
