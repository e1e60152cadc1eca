"""The training job: train, evaluate, export, report, any model_fn through any strategy.

`run` is what `python -m deepfm.train` and the public API
(`deepfm.train_and_evaluate`) call once the configuration is resolved.

The chief writes the run's resolved configuration next to the checkpoints
(`<model_dir>/config.json`) and a resumed run is compared with it
(`deepfm.runtime.run_config`).

The step budget: every worker runs the same number of steps, so that no
Horovod rank waits on another that ran out of data. With `max_steps` unset,
each worker runs `num_epochs * steps_per_epoch` steps, where
`steps_per_epoch` is the number of full batches of the *smallest* input shard
(from the row counts in the dataset's metadata). A strategy maps that to the
global step at which training stops (asynchronous parameter servers add up
every worker's steps).

With `eval_every_n_steps`, training goes in rounds with an evaluation after
each, the best checkpoint is kept and exported, and training may stop early
(`deepfm.runtime.early_stopping`).
"""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import time
from typing import Dict, List, Optional

import tensorflow as tf
from absl import logging

from deepfm import models
from deepfm.config import ModelConfig, TrainConfig
from deepfm.models import ctr
from deepfm.runtime import (
    checkpoints,
    early_stopping,
    input_position,
    interrupt,
    metrics_server,
    preflight,
    run_config,
    step_trace,
    watchdog,
)
from deepfm.runtime import console as console_lib
from deepfm.runtime import hooks as hooks_lib
from input_pipeline import pipe, pipeline
from strategies import base as strategies_base

EVAL_BATCH_SIZE = 4096
# The EVAL metrics a model_fn must return: the result, the best checkpoint and early stopping use them.
REPORTED_METRICS = ("auc", "logloss")
# The directory TensorFlow writes a SavedModel into before moving it to `<export_dir>/<timestamp>`.
PARTIAL_EXPORT = re.compile(r"^temp-\d+$")
# Under the model directory, where `--trace_steps` traces go by default.
TRACE_DIR = "traces"


@dataclasses.dataclass
class TrainResult:
    """What a training job reports.

    Attributes:
      auc: validation AUC (None without validation data).
      logloss: validation log loss.
      examples_per_sec: mean training throughput of this process after
        warm-up, all its replicas together.
      global_step: the global step at the end.
      export_path: the SavedModel directory (None where this process does
        not export).
      model_dir: the checkpoint directory.
      strategy: the strategy's description.
      train_seconds: wall time of training.
      best_step: the step of the checkpoint `auc` and `logloss` describe
        and the SavedModel holds: the best by validation AUC when training
        evaluated in rounds, else the last.
      stopped_early: training ended by early stopping.
      evaluations: with evaluation during training, every evaluation
        (`step`, `auc`, `logloss`), in order.
    """

    auc: Optional[float] = None
    logloss: Optional[float] = None
    examples_per_sec: Optional[float] = None
    global_step: int = 0
    export_path: Optional[str] = None
    model_dir: str = ""
    strategy: str = ""
    train_seconds: float = 0.0
    best_step: Optional[int] = None
    stopped_early: bool = False
    evaluations: List[Dict] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)


def check_model_dir(model_dir: str, model: Optional[ModelConfig] = None, repair: bool = True,
                    model_fn: Optional[strategies_base.ModelFn] = None) -> Optional[int]:
    """Makes sure `model_dir` is usable before training starts (`preflight.resume_point`, `prepare_model_dir`).

    Args:
      model_dir: the model directory.
      model: the model this run trains; None skips the shape check.
      repair: prepare the directory for training (the chief): point the
        state file at the checkpoint resumed from when a newer one is
        unreadable, and remove what saves cut short left.
      model_fn: the model function; default: the built-in `model.model`.

    Returns:
      The global step of the checkpoint training resumes from, or None for a
      new model directory.

    Raises:
      ValueError: as `preflight.resume_point`.
    """
    checkpoint = preflight.resume_point(model_dir, model, model_fn)
    if repair:
        preflight.prepare_model_dir(model_dir, checkpoint)
    return None if checkpoint is None else checkpoints.checkpoint_step(checkpoint)


def _steps_per_worker(train: TrainConfig, builder: pipeline.DatasetBuilder,
                      context: tf.distribute.InputContext, batches_per_step: int) -> Optional[int]:
    """Each worker's step budget; None for a Pipe channel of unknown size (train to its end)."""
    if train.max_steps:
        return train.max_steps
    steps = builder.steps_per_epoch(context)
    if steps is None and builder.channel is not None:
        return None
    if steps is None:
        raise ValueError(
            "the number of rows of %s is unknown (no metadata.json beside the files, or Pipe mode): "
            "set --max_steps" % (", ".join(train.train_files) or "the input"))
    if steps == 0:
        raise ValueError(
            "the smallest input shard holds fewer rows than one batch of %d: lower --batch_size "
            "or use fewer workers" % builder.batch_size)
    return steps * train.num_epochs // batches_per_step


def build_estimator(train: TrainConfig, model: ModelConfig, strategy: strategies_base.Strategy,
                    model_fn: Optional[strategies_base.ModelFn] = None) -> tf.estimator.Estimator:
    """The Estimator of `model_fn` (default: the built-in `model.model`) as `strategy` trains it."""
    estimator_config = strategy.run_config(
        model_dir=train.model_dir,
        tf_random_seed=train.seed,
        save_checkpoints_steps=train.save_checkpoints_steps,
        save_checkpoints_secs=None,
        save_summary_steps=train.log_every_n_steps,
        log_step_count_steps=train.log_every_n_steps)
    return tf.estimator.Estimator(
        model_fn=strategy.wrap_model_fn(hooks_lib.recording_loss(model_fn or models.get(model.model)),
                                        per_replica_batch=train.batch_size),
        config=estimator_config,
        params=ctr.model_params(model))


def run(train: TrainConfig, model: ModelConfig, input_config: pipeline.PipelineConfig,
        strategy: strategies_base.Strategy, console: Optional[console_lib.Console] = None,
        model_fn: Optional[strategies_base.ModelFn] = None) -> Optional[TrainResult]:
    """Runs this process's part of a training job.

    Args:
      train: what to train on and where results go.
      model: the model's hyperparameters.
      input_config: how the input pipeline reads the data.
      strategy: the distribution strategy adapter of this process.
      console: where progress and evaluations are printed; None prints
        nothing (library use).
      model_fn: the Estimator model_fn to train (see `strategies.base` for
        what it gets from the strategy); default: the built-in model named
        by `model.model`.

    Returns:
      The result, or None on a process that does not train (a parameter
      server).

    Raises:
      ValueError: bad configuration, found before training starts.
    """
    strategy.validate()
    strategy.setup()
    if strategy.role != strategies_base.ROLE_WORKER:
        strategy.serve()
        return None

    model_fn = model_fn or models.get(model.model)
    # Every check first, then the first write: a refused run leaves the model directory as it was.
    record = run_config.resolved(train, model, input_config, strategy.config, _qualified_name(model_fn))
    if strategy.is_chief:
        run_config.check_resume(train.model_dir, record)
    checkpoint = preflight.resume_point(train.model_dir, model, model_fn)
    resumed_step = None if checkpoint is None else checkpoints.checkpoint_step(checkpoint)
    context = strategy.input_context()
    batch = strategy.batch_per_input_pipeline(train.batch_size)
    pipe_mode = input_config.input_mode == pipeline.INPUT_MODE_PIPE
    source = strategy.pipe_channel() if pipe_mode else train.train_files
    train_builder = pipeline.DatasetBuilder(source, input_config, batch_size=batch, num_epochs=None)
    per_step = strategy.batches_per_step()
    steps = _steps_per_worker(train, train_builder, context, per_step)
    rounds = bool(train.eval_every_n_steps) and strategy.evaluates
    if rounds and pipe_mode:
        raise ValueError("--eval_every_n_steps needs File mode: training in rounds would reopen the Pipe-mode "
                         "channel %r from its first epoch each round" % source)
    if train.check_data and not pipe_mode:
        preflight.check_data(train, model, input_config, _file_eval_config(input_config), strategy, context)
    if strategy.is_chief:
        preflight.prepare_model_dir(train.model_dir, checkpoint)
        run_config.write(train.model_dir, record)
    console = console or console_lib.Console(enabled=False)
    if resumed_step is not None:
        resuming = "resuming from the checkpoint in %s at global step %d" % (train.model_dir, resumed_step)
        logging.info("%s", resuming)
        console.line(resuming)
    position = None
    if steps is None:
        # Pipe mode without row counts: each epoch ends with its FIFO.
        train_builder = pipeline.DatasetBuilder(source, input_config, batch_size=batch, num_epochs=train.num_epochs)
        max_steps = None

        def input_fn():
            return strategy.finite_input(train_builder(context))
        logging.info("%s; per-replica batch %d; training for %d epoch(s) of channel %s, each ending with its FIFO",
                     strategy.describe(), train.batch_size, train.num_epochs, source)
    else:
        position = preflight.resume_plan(train, strategy, resumed_step, steps, strategy.global_max_steps(steps), batch,
                                per_step)
        max_steps = position.max_steps
        skip = position.skip_in_pass(_batches_per_pass(train_builder, context))

        def input_fn():
            dataset = train_builder(context)
            return dataset.skip(skip) if skip else dataset
        logging.info("%s; per-replica batch %d; training to global step %d",
                     strategy.describe(), train.batch_size, max_steps)
        if position.resumed_step:
            logging.info("the steps before global step %d trained %d of the budget's %d examples: this worker's "
                         "input skips their %d batch(es) of its shard", position.resumed_step,
                         position.examples_done, position.examples_budget, skip)

    epoch_steps = _global_steps_per_epoch(train_builder, context, per_step, steps, max_steps)
    console.line("%s; per-replica batch %d; %s" % (
        strategy.describe(), train.batch_size, "training to global step %d" % max_steps if max_steps
        else "training to the end of the channel"))
    estimator = build_estimator(train, model, strategy, model_fn)
    metrics = metrics_server.MetricsServer(train.metrics_port if strategy.is_chief else None, train.model_dir)
    throughput = hooks_lib.ProgressHook(
        batch * per_step, every_n_steps=train.log_every_n_steps,
        listeners=_progress_listeners(train, model, strategy, console, max_steps, epoch_steps) + [metrics])
    train_input_fn = _continuing_input_fn(train_builder, context, throughput, per_step,
                                          position.skip_batches if position else 0) if rounds else input_fn
    start = time.time()
    outcome = None
    with interrupt.StopRequest() as stop, checkpoints.save_errors(train.model_dir), \
            watchdog.watch_peers(strategy.peers()), metrics.serving(), _named_stream_errors(source, pipe_mode,
                                                                                            train.model_dir):
        hooks = strategy.train_hooks() + [throughput, stop.hook(strategy.agree_to_stop)]
        if train.trace_steps:
            hooks.append(_trace_hook(train, strategy))
        if rounds and strategy.evaluates_in_training_session:
            outcome = _train_evaluating_in_session(estimator, train_input_fn, hooks, train, input_config, console,
                                                   max_steps, lambda: stop.stopped_before(max_steps) is not None)
        elif rounds:
            outcome = _train_in_rounds(estimator, train_input_fn, hooks, train, input_config, console,
                                       position.resumed_step, max_steps, strategy,
                                       lambda: stop.stopped_before(max_steps) is not None)
        elif position is not None and position.budget_reached:
            _train_no_step(estimator, train_input_fn, hooks, position, console)
        else:
            estimator.train(train_input_fn, max_steps=max_steps, hooks=hooks)
    console.close()
    interrupted = stop.stopped_before(max_steps) is not None
    if not interrupted:
        strategy.finish_training()
    result = TrainResult(
        examples_per_sec=throughput.examples_per_second, model_dir=train.model_dir,
        strategy=strategy.describe(), train_seconds=time.time() - start,
        global_step=int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP)))
    if interrupted:
        interrupt.stop_training(result, train.metrics_file if strategy.is_chief else None, stop)

    if outcome is not None:
        if outcome.best is not None:
            result.auc, result.logloss, result.best_step = outcome.best.auc, outcome.best.logloss, outcome.best.step
        result.stopped_early = outcome.stopped_early
        result.evaluations = [dataclasses.asdict(e) for e in outcome.evaluations]
    elif train.val_channel and input_config.input_mode == pipeline.INPUT_MODE_PIPE:
        if strategy.is_chief:
            result.auc, result.logloss, result.global_step = _evaluate(
                estimator, train.val_channel, dataclasses.replace(input_config, shuffle_buffer=0, cache=None,
                                                                  drop_remainder=False))
    elif strategy.evaluates and train.val_files:
        result.auc, result.logloss, result.global_step = _evaluate(
            estimator, train.val_files, _file_eval_config(input_config))
    if outcome is None:
        result.best_step = result.global_step
    if strategy.is_chief:
        if train.export_dir:
            result.export_path = export(estimator, train.export_dir, model.field_size,
                                        outcome.checkpoint_path if outcome is not None else None)
        if train.metrics_file:
            write_metrics(train.metrics_file, result)
    return result


@contextlib.contextmanager
def _named_stream_errors(channel, pipe_mode: bool, model_dir: str):
    """In Pipe mode, a channel's stream that broke (`pipe.broken_stream`) is a `ValueError` naming its FIFO."""
    try:
        yield
    except tf.errors.OpError as e:
        broken = pipe.broken_stream(e, channel) if pipe_mode else None
        if broken is None:
            raise
        raise ValueError("%s. Training stopped; --model_dir %r keeps the checkpoints saved before (the latest: %s)"
                         % (broken, model_dir, tf.train.latest_checkpoint(model_dir) or "none")) from None


def _file_eval_config(input_config: pipeline.PipelineConfig) -> pipeline.PipelineConfig:
    """How evaluation reads validation files: every row once, in order."""
    return dataclasses.replace(input_config, input_mode=pipeline.INPUT_MODE_FILE, shuffle_buffer=0, cache=None,
                               drop_remainder=False)


def _evaluate(estimator, source: pipeline.Source, eval_config: pipeline.PipelineConfig,
              checkpoint_path: Optional[str] = None):
    """Evaluates on every row of `source` (files, or a Pipe channel)."""
    builder = pipeline.DatasetBuilder(source, eval_config, batch_size=EVAL_BATCH_SIZE, num_epochs=1)
    metrics = estimator.evaluate(builder.input_fn(), name="validation", checkpoint_path=checkpoint_path)
    logging.info("validation: %s", metrics)
    missing = [name for name in REPORTED_METRICS if name not in metrics]
    if missing:
        raise ValueError("the model_fn's EVAL metrics lack %s (it returned %s): the runtime reports, tracks and "
                         "exports by them; deepfm.models.ctr.prediction_metrics computes both"
                         % (" and ".join(missing), ", ".join(sorted(metrics))))
    return float(metrics["auc"]), float(metrics["logloss"]), int(metrics["global_step"])


def _continuing_input_fn(builder: pipeline.DatasetBuilder, context: tf.distribute.InputContext,
                         progress: hooks_lib.ProgressHook, per_step: int, resumed_batches: int = 0):
    """An input_fn for training in rounds: each round goes on where the last one left the data.

    The dataset skips the batches trained before this run resumed
    (`resumed_batches`) and those this process trained in earlier rounds,
    modulo one pass over its shard.
    """
    pass_batches = _batches_per_pass(builder, context)

    def input_fn():
        skip = resumed_batches + progress.steps * per_step
        return builder(context).skip(skip % pass_batches if pass_batches else skip)
    return input_fn


def _batches_per_pass(builder: pipeline.DatasetBuilder, context: tf.distribute.InputContext) -> Optional[int]:
    """Full batches one pass over this process's own shard yields; None where its rows are unknown."""
    plan = builder.shard_plan(context)
    if plan.rows_per_shard is None:
        return None
    return plan.rows_per_shard[plan.index] // builder.batch_size


class _StopBeforeFirstStep(tf.estimator.SessionRunHook):
    """Ends a training session before its first step (its hooks still start and end)."""

    def after_create_session(self, session, coord):
        del session
        coord.request_stop()


def _train_no_step(estimator: tf.estimator.Estimator, input_fn, hooks, position: input_position.ResumePlan,
                   console: console_lib.Console) -> None:
    """A run resumed at its budget: one training session of no step, on every process.

    `Estimator.train` would skip the session where the checkpoint reached
    `max_steps` (rank 0) and not elsewhere (the other Horovod ranks, with
    private directories), which would then wait for rank 0 in a collective.
    The session restores the checkpoint everywhere and its savers write each
    process's own checkpoint (what the other ranks evaluate), so evaluation
    and the export follow as after the last step.
    """
    message = ("the checkpoint at global step %d already holds the budget's %d examples: no step to train; "
               "evaluating and exporting it" % (position.resumed_step, position.examples_budget))
    logging.info("%s", message)
    console.line(message)
    estimator.train(input_fn, hooks=list(hooks) + [_StopBeforeFirstStep()])


def _global_steps_per_epoch(builder: pipeline.DatasetBuilder, context: tf.distribute.InputContext,
                            per_step: int, steps_per_worker: Optional[int], max_steps: Optional[int]
                            ) -> Optional[int]:
    """Global steps of one epoch (for the console's `epoch e/N`); None when rows are unknown."""
    batches = builder.steps_per_epoch(context)
    if not batches or not steps_per_worker or not max_steps or batches < per_step:
        return None
    return max(1, (batches // per_step) * max_steps // steps_per_worker)


def _progress_listeners(train: TrainConfig, model: ModelConfig, strategy: strategies_base.Strategy,
                        console: console_lib.Console, max_steps: Optional[int],
                        epoch_steps: Optional[int]) -> List[hooks_lib.Listener]:
    """Where progress goes: the console, the chief's TensorBoard scalars, the progress file."""
    listeners: List[hooks_lib.Listener] = [hooks_lib.ConsoleProgress(
        console, max_steps or None, epoch_steps, None if train.max_steps else train.num_epochs)]
    if strategy.is_chief:
        listeners.append(hooks_lib.SummaryProgress(
            train.model_dir, model.learning_rate * strategy.learning_rate_factor()))
    if train.progress_file and (strategy.is_chief or hooks_lib.TASK_PLACEHOLDER in train.progress_file):
        listeners.append(hooks_lib.ProgressFile(
            train.progress_file.replace(hooks_lib.TASK_PLACEHOLDER, strategy.task_name)))
    return listeners


def _trace_hook(train: TrainConfig, strategy: strategies_base.Strategy) -> step_trace.StepTraceHook:
    """The hook tracing `train.trace_steps` steps of this process (`deepfm.runtime.step_trace`)."""
    return step_trace.StepTraceHook(
        train.trace_dir or os.path.join(train.model_dir, TRACE_DIR), strategy.task_name, train.trace_steps,
        own_job=strategy.job_name)


def _qualified_name(model_fn) -> str:
    """`module.name` of a model function, as the run's configuration records it."""
    return "%s.%s" % (getattr(model_fn, "__module__", "?"), getattr(model_fn, "__name__", type(model_fn).__name__))


def _agree(strategy: strategies_base.Strategy, value: int) -> int:
    """The largest `value` of the processes that must agree (Horovod ranks); `value` elsewhere.

    A collective where the strategy has one (`agree_to_stop`): every rank
    calls it at the same point.
    """
    combined = preflight.combined(strategy, (value,))
    return value if combined is None else combined[0]


def _train_in_rounds(estimator: tf.estimator.Estimator, input_fn, hooks, train: TrainConfig,
                     input_config: pipeline.PipelineConfig, console: console_lib.Console, start_step: int,
                     max_steps: int, strategy: strategies_base.Strategy, interrupted) -> early_stopping.RoundsOutcome:
    """Trains to each evaluation step, evaluates, keeps the best checkpoint, stops early."""
    tracker = early_stopping.BestCheckpoint(train.model_dir, train.early_stopping_patience, keep=strategy.is_chief)
    eval_config = _file_eval_config(input_config)

    def train_to(step: int) -> int:
        estimator.train(input_fn, max_steps=step, hooks=hooks)
        return int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP))

    def evaluate():
        checkpoint = estimator.latest_checkpoint()
        auc, logloss, step = _evaluate(estimator, train.val_files, eval_config, checkpoint)
        return early_stopping.Evaluation(step=step, auc=auc, logloss=logloss), checkpoint

    # `start_step` is rank 0's resume step on every Horovod rank (`preflight.resume_plan`): the others train in
    # private directories.
    return early_stopping.train_in_rounds(
        train_to, evaluate, tracker, start_step, max_steps, train.eval_every_n_steps,
        agree=lambda flag: _agree(strategy, flag), report=console.line, interrupted=interrupted)


def _train_evaluating_in_session(estimator: tf.estimator.Estimator, input_fn, hooks, train: TrainConfig,
                                 input_config: pipeline.PipelineConfig, console: console_lib.Console,
                                 max_steps: int, interrupted) -> early_stopping.RoundsOutcome:
    """A parameter-server chief: evaluates from inside one training session, then once at the end.

    A new session of the chief would restore the parameter servers from its
    last checkpoint and undo the other workers' updates since
    (`early_stopping.EvaluateInSessionHook`).
    """
    tracker = early_stopping.BestCheckpoint(train.model_dir, train.early_stopping_patience)
    eval_config = _file_eval_config(input_config)

    def evaluate(checkpoint: str) -> early_stopping.Evaluation:
        auc, logloss, step = _evaluate(estimator, train.val_files, eval_config, checkpoint)
        return early_stopping.Evaluation(step=step, auc=auc, logloss=logloss)

    hook = early_stopping.EvaluateInSessionHook(train.model_dir, evaluate, tracker, max_steps,
                                                train.eval_every_n_steps, report=console.line)
    estimator.train(input_fn, max_steps=max_steps, hooks=hooks + [hook])
    if not hook.stopped_early and not interrupted():
        checkpoint = estimator.latest_checkpoint()
        early_stopping.report_evaluation(tracker, evaluate(checkpoint), checkpoint, console.line)
    return early_stopping.RoundsOutcome(best=tracker.best, checkpoint_path=tracker.checkpoint_path,
                                        evaluations=list(tracker.history), stopped_early=hook.stopped_early)


def export(estimator: tf.estimator.Estimator, export_dir: str, field_size: int,
           checkpoint_path: Optional[str] = None) -> str:
    """Exports a checkpoint (by default the latest) as a SavedModel under `export_dir`.

    An export cut short (a killed process) leaves its `temp-<timestamp>`
    directory, which TensorFlow Serving ignores; it is removed first.

    Returns:
      The timestamped SavedModel directory.
    """
    remove_partial_exports(export_dir)
    path = estimator.export_saved_model(export_dir, ctr.serving_input_receiver_fn(field_size),
                                        checkpoint_path=checkpoint_path)
    return path.decode() if isinstance(path, bytes) else path


def remove_partial_exports(export_dir: str) -> List[str]:
    """Removes the `temp-<timestamp>` directories exports cut short left in `export_dir`; returns them."""
    if not os.path.isdir(export_dir):
        return []
    removed = []
    for name in sorted(os.listdir(export_dir)):
        target = os.path.join(export_dir, name)
        if PARTIAL_EXPORT.match(name) and os.path.isdir(target):
            shutil.rmtree(target, ignore_errors=True)
            logging.warning("removed %s, left by an export that was cut short (a killed process)", target)
            removed.append(target)
    return removed


def write_metrics(path: str, result: TrainResult) -> None:
    """Writes the final evaluation as JSON (auc, logloss, examples_per_sec, global_step, ...)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(result.to_json())
    os.replace(tmp, path)


def summary(result: TrainResult, extra: Optional[Dict[str, str]] = None) -> str:
    """A short human-readable summary of a result."""
    def fmt(value, spec):
        return "n/a" if value is None else format(value, spec)
    items = [
        ("strategy", result.strategy),
        ("validation AUC", fmt(result.auc, ".4f")),
        ("validation logloss", fmt(result.logloss, ".4f")),
        ("examples/sec", fmt(result.examples_per_sec, ",.0f")),
        ("global step", str(result.global_step)),
    ] + ([("best checkpoint", "step %s of %d evaluations%s" % (
        result.best_step, len(result.evaluations), ", stopped early" if result.stopped_early else ""))]
         if result.evaluations else []) + [
        ("model dir", result.model_dir),
        ("SavedModel", result.export_path or "not exported"),
    ] + list((extra or {}).items())
    width = max(len(key) for key, _ in items) + 2
    return "\n".join((key + ":").ljust(width) + value for key, value in items)
