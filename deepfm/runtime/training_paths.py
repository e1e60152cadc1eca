"""The ways a process trains: in one pass, in rounds with evaluations, evaluating inside one session, or no step.

`choose` picks the path of a run from its configuration and the process's
topology; each path is built the same way and has one entry point,
`run(estimator, hooks, interrupted)`, which returns the outcome of the
rounds (None for one pass: evaluation then follows training).

* `OnePass`: `Estimator.train` to the step budget (or to the end of a Pipe
  channel).
* `Rounds` (`--eval_every_n_steps` on a process that evaluates): trains to
  each evaluation step, evaluates, keeps the best checkpoint, may stop early
  (`deepfm.runtime.early_stopping`); processes in lockstep agree on each
  stop.
* `RoundsInSession`: the same for a strategy whose evaluation must run
  inside the one training session (a parameter-server chief).
* `NoStep`: a run resumed at its budget (a job stopped during its final
  evaluation or export): one training session of no step on every process.
"""

import dataclasses
from typing import Callable, List, Optional, Tuple, Type

import tensorflow as tf

from deepfm.config import TrainConfig
from deepfm.runtime import console as console_lib
from deepfm.runtime import early_stopping, evaluation
from deepfm.runtime import hooks as hooks_lib
from deepfm.runtime.training_input import TrainingInput
from input_pipeline import pipeline
from strategies import strategy as strategy_lib

Interrupted = Callable[[], bool]


@dataclasses.dataclass(frozen=True)
class TrainingPath:
    """A way to train; every path is built from the same parts.

    Attributes:
      train: the run's training configuration.
      input_config: how the input is read (evaluation reads it too).
      strategy: this process's strategy, prepared.
      feed: this process's training input.
      progress: the progress hook counting this process's steps.
      console: where evaluations are reported.
    """

    train: TrainConfig
    input_config: pipeline.PipelineConfig
    strategy: strategy_lib.Strategy
    feed: TrainingInput
    progress: hooks_lib.ProgressHook
    console: console_lib.Console

    def run(self, estimator: tf.estimator.Estimator, hooks: List[tf.estimator.SessionRunHook],
                    interrupted: Interrupted) -> Optional[early_stopping.RoundsOutcome]:
        """Trains `estimator` with `hooks`; `interrupted` says whether a stop signal ended training."""
        raise NotImplementedError

    def _rounds(self) -> Tuple[int, int]:
        """The step budget and the steps between evaluations of a path in rounds.

        Raises:
          ValueError: either is unset (`choose` picks a path in rounds only
            with both: File mode always has a step budget).
        """
        max_steps, every = self.strategy.run.max_steps, self.train.eval_every_n_steps
        if max_steps is None or not every:
            raise ValueError("training in rounds needs a step budget and --eval_every_n_steps, got %r and %r"
                             % (max_steps, every))
        return max_steps, every


class OnePass(TrainingPath):
    """Trains to the step budget in one `Estimator.train` call."""

    def run(self, estimator, hooks, interrupted) -> None:
        del interrupted
        estimator.train(self.feed.input_fn(self.strategy.input_plan().finite_input),
                        max_steps=self.strategy.run.max_steps, hooks=hooks)
        return None


class _StopBeforeFirstStep(tf.estimator.SessionRunHook):
    """Ends a training session before its first step (its hooks still start and end)."""

    def after_create_session(self, session, coord):
        del session
        coord.request_stop()


class NoStep(TrainingPath):
    """A run resumed at its budget: one training session of no step, on every process.

    `Estimator.train` would skip the session where the checkpoint reached
    `max_steps` (rank 0) and not elsewhere (the other Horovod ranks, with
    private directories), which would then wait for rank 0 in a collective.
    The session restores the checkpoint everywhere and its savers write each
    process's own checkpoint (what the other ranks evaluate), so evaluation
    and the export follow as after the last step.
    """

    def run(self, estimator, hooks, interrupted) -> None:
        del interrupted
        estimator.train(self.feed.input_fn(self.strategy.input_plan().finite_input),
                        hooks=list(hooks) + [_StopBeforeFirstStep()])
        return None


class Rounds(TrainingPath):
    """Trains to each evaluation step, evaluates, keeps the best checkpoint, stops early."""

    def run(self, estimator, hooks, interrupted) -> early_stopping.RoundsOutcome:
        strategy, train = self.strategy, self.train
        max_steps, every = self._rounds()
        tracker = early_stopping.BestCheckpoint(train.model_dir, train.early_stopping_patience,
                                                keep=strategy.topology.is_chief)
        eval_config = evaluation.file_eval_config(self.input_config)
        input_fn = self.feed.continuing_input_fn(self.progress)

        def train_to(step: int) -> int:
            estimator.train(input_fn, max_steps=step, hooks=hooks)
            return int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP))

        def evaluate():
            checkpoint = estimator.latest_checkpoint()
            auc, logloss, step = evaluation.evaluate(estimator, train.val_files, eval_config, checkpoint,
                                                     dataset=self.feed.dataset, strategy=strategy)
            return early_stopping.Evaluation(step=step, auc=auc, logloss=logloss), checkpoint

        # The agreed start: rank 0's resume step on every Horovod rank (the others train in private directories).
        return early_stopping.train_in_rounds(
            train_to, evaluate, tracker, strategy.run.start_step, max_steps, every,
            agree=strategy.agree_max, report=self.console.line, interrupted=interrupted)


class RoundsInSession(TrainingPath):
    """Evaluates from inside one training session, then once at the end (a parameter-server chief).

    A new session of the chief would restore the parameter servers from its
    last checkpoint and undo the other workers' updates since
    (`early_stopping.EvaluateInSessionHook`).
    """

    def run(self, estimator, hooks, interrupted) -> early_stopping.RoundsOutcome:
        train = self.train
        max_steps, every = self._rounds()
        tracker = early_stopping.BestCheckpoint(train.model_dir, train.early_stopping_patience)
        eval_config = evaluation.file_eval_config(self.input_config)

        def evaluate(checkpoint: str) -> early_stopping.Evaluation:
            auc, logloss, step = evaluation.evaluate(estimator, train.val_files, eval_config, checkpoint,
                                                     dataset=self.feed.dataset, strategy=self.strategy)
            return early_stopping.Evaluation(step=step, auc=auc, logloss=logloss)

        hook = early_stopping.EvaluateInSessionHook(train.model_dir, evaluate, tracker, max_steps, every,
                                                    report=self.console.line)
        estimator.train(self.feed.continuing_input_fn(self.progress), max_steps=max_steps,
                        hooks=hooks + [hook])
        if not hook.stopped_early and not interrupted():
            checkpoint = estimator.latest_checkpoint()
            early_stopping.report_evaluation(tracker, evaluate(checkpoint), checkpoint, self.console.line)
        return early_stopping.RoundsOutcome(best=tracker.best, checkpoint_path=tracker.checkpoint_path,
                                            evaluations=list(tracker.history), stopped_early=hook.stopped_early)


def choose(train: TrainConfig, input_config: pipeline.PipelineConfig,
           strategy: strategy_lib.Strategy) -> Type[TrainingPath]:
    """The path a set-up strategy's process trains on.

    Raises:
      ValueError: evaluation during training from a Pipe-mode channel (each
        round would reopen it from its first epoch).
    """
    if not train.eval_every_n_steps or not strategy.topology.evaluates:
        return OnePass
    if input_config.input_mode == pipeline.INPUT_MODE_PIPE:
        raise ValueError("--eval_every_n_steps needs File mode: training in rounds would reopen the Pipe-mode "
                         "channel %r from its first epoch each round" % strategy.input_plan().pipe_channel())
    return RoundsInSession if strategy.topology.evaluates_in_training_session else Rounds
