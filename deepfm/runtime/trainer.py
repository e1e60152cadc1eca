"""The training job: train, evaluate, export, report, any model_fn through any strategy.

`run` is what `python -m deepfm.train` and the public API
(`deepfm.train_and_evaluate`) call once the configuration is resolved. It
takes the strategy through its lifecycle (`strategies.lifecycle`): `setup()`
(a parameter server then only serves), the input and the step budget
(`deepfm.runtime.training_input`), `prepare(plan)`, then one of the training
paths (`deepfm.runtime.training_paths`), evaluation
(`deepfm.runtime.evaluation`), the export and the metrics file.

The chief writes the run's resolved configuration next to the checkpoints
(`<model_dir>/config.json`) and a resumed run is compared with it
(`deepfm.runtime.run_config`).
"""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import tempfile
import time
from typing import Dict, List, Optional, Tuple, Type

import tensorflow as tf
from absl import logging

import strategies
from deepfm import models
from deepfm.config import ModelConfig, TrainConfig
from deepfm.job_config import JobConfig
from deepfm.models import ctr
from deepfm.runtime import (
    checkpoints,
    evaluation,
    interrupt,
    metrics_server,
    preflight,
    run_config,
    step_trace,
    training_paths,
    watchdog,
)
from deepfm.runtime import console as console_lib
from deepfm.runtime import hooks as hooks_lib
from deepfm.runtime.training_input import TrainingInput
from input_pipeline import dataset as dataset_lib
from input_pipeline import pipe, pipeline
from strategies import context as context_lib
from strategies import lifecycle
from strategies import strategy as strategy_lib
from strategies import topology as topology_lib
from strategies.sharded import checkpoint as sharded_checkpoint
from strategies.sharded import row_stream

# The directory TensorFlow writes a SavedModel into before moving it to `<export_dir>/<timestamp>`.
PARTIAL_EXPORT = re.compile(r"^temp-\d+$")
# Beside a checkpoint of sharded tables, where an export gathers their weights (removed after).
WEIGHTS_DIR_PREFIX = "export-weights-"
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
                    model_fn: Optional[context_lib.ModelFn] = None) -> Optional[int]:
    """Makes sure `model_dir` is usable before training starts.

    Unreadable checkpoints are skipped and, with `model`, a checkpoint of
    another model shape is refused (see `deepfm.runtime.checkpoints`).

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


def plan_for(train: TrainConfig, steps_per_worker: Optional[int] = None,
             resume_step: Optional[int] = None, max_steps: Optional[int] = None) -> lifecycle.Plan:
    """The strategy's `Plan` of a run of `train`: its model directory, checkpoints, seed, batch and steps."""
    return lifecycle.Plan(model_dir=train.model_dir, steps_per_worker=steps_per_worker,
                          per_replica_batch=train.batch_size, save_checkpoints_steps=train.save_checkpoints_steps,
                          log_every_n_steps=train.log_every_n_steps, seed=train.seed, resume_step=resume_step,
                          max_steps=max_steps)


def build_estimator(model: ModelConfig, strategy: strategy_lib.Strategy,
                    model_fn: Optional[context_lib.ModelFn] = None) -> tf.estimator.Estimator:
    """The Estimator of `model_fn` (default: the built-in `model.model`) as a prepared `strategy` trains it.

    Raises:
      strategies.LifecycleError: `strategy` is not prepared (`plan_for`).
    """
    return tf.estimator.Estimator(
        model_fn=strategy.wrap_model_fn(hooks_lib.recording_loss(model_fn or models.get(model.model))),
        config=strategy.run.run_config,
        params=ctr.model_params(model))


def run(job: JobConfig, strategy: Optional[strategy_lib.Strategy] = None,
        console: Optional[console_lib.Console] = None, model_fn: Optional[context_lib.ModelFn] = None,
        dataset: Optional[dataset_lib.Dataset] = None) -> Optional[TrainResult]:
    """Runs this process's part of a training job.

    Args:
      job: the job's configuration, its sections checked together.
      strategy: the distribution strategy adapter of this process, built
        from `job.strategy` (and possibly set up already); None builds it.
      console: where progress and evaluations are printed; None prints
        nothing (library use).
      model_fn: the Estimator model_fn to train (see `strategies.context` for
        what it gets from the strategy); default: the built-in model named
        by `job.model.model`.
      dataset: the dataset the files come from, its metadata read once
        (`Dataset.open`) and handed to the input pipelines; None: each
        pipeline finds the metadata beside its files.

    Returns:
      The result, or None on a process that does not train (a parameter
      server).

    Raises:
      ValueError: bad configuration, found before training starts; a
        `strategy` built from another configuration than `job.strategy`.
    """
    if strategy is None:
        strategy = strategies.get(job.strategy)
    elif strategy.config != job.strategy:
        raise ValueError("the strategy adapter was built from %r, and the job's strategy section is %r: build it "
                         "from the job's (strategies.get(job.strategy)) or leave it out" % (
                             strategy.config, job.strategy))
    train, model, input_config = job.train, job.model, job.input
    topology = strategy.setup()
    model_fn = model_fn or models.get(model.model)
    console = console or console_lib.Console(enabled=False)
    # Every process, a parameter server before it serves, first checks its memory (`preflight.check_memory`).
    exports = preflight.check_memory(train, model, strategy, model_fn, console) if train.check_memory else True
    if topology.role != topology_lib.ROLE_WORKER:
        strategy.serve()
        return None
    feed, path = _start(train, model, input_config, strategy, model_fn, console, dataset)
    max_steps = strategy.run.max_steps
    budget = ("training to global step %d" % max_steps if max_steps is not None else
              "training for %d epoch(s) of channel %s, each ending with its FIFO" % (train.num_epochs, feed.source))
    logging.info("%s; per-replica batch %d; %s", strategy.describe(), train.batch_size, budget)
    console.line("%s; per-replica batch %d; %s" % (
        strategy.describe(), train.batch_size,
        "training to global step %d" % max_steps if max_steps else "training to the end of the channel"))

    estimator = build_estimator(model, strategy, model_fn)
    metrics = metrics_server.MetricsServer(train.metrics_port if topology.is_chief else None, train.model_dir)
    throughput = hooks_lib.ProgressHook(
        feed.examples_per_step, every_n_steps=train.log_every_n_steps,
        listeners=_progress_listeners(train, model, strategy, console, max_steps,
                                      feed.global_steps_per_epoch(max_steps)) + [metrics])
    training = path(train, input_config, strategy, feed, throughput, console)
    start = time.time()
    pipe_mode = input_config.input_mode == pipeline.INPUT_MODE_PIPE
    with interrupt.StopRequest() as stop, checkpoints.save_errors(train.model_dir), \
            watchdog.watch_peers(topology.peers, stopping=lambda: stop.requested), metrics.serving(), \
            _named_stream_errors(feed.source, pipe_mode, train.model_dir):
        hooks = list(strategy.run.train_hooks) + [throughput, stop.hook(_stop_agreement(strategy))]
        if train.trace_steps:
            hooks.append(_trace_hook(train, strategy))
        if pipe_mode:
            hooks.append(hooks_lib.ReleasePipeWaitsHook())
        outcome = training.run(estimator, hooks, lambda: stop.stopped_before(max_steps) is not None)
    console.close()
    interrupted = stop.stopped_before(max_steps) is not None
    if not interrupted:
        strategy.finish_training()
    result = TrainResult(
        examples_per_sec=throughput.examples_per_second, model_dir=train.model_dir,
        strategy=strategy.describe(), train_seconds=time.time() - start,
        global_step=int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP)))
    if interrupted:
        interrupt.stop_training(result, train.metrics_file if topology.is_chief else None, stop)
    _evaluate_after_training(result, outcome, estimator, train, input_config, strategy, feed.dataset)
    if topology.is_chief:
        if train.export_dir and not exports:
            logging.warning("not exported in-process: this host cannot hold the model's weights (the memory check "
                            "at the start said so); export on a host that can with %s", preflight.export_command(train))
        elif train.export_dir:
            result.export_path = export(estimator, train.export_dir, model.field_size,
                                        outcome.checkpoint_path if outcome is not None else None)
        if train.metrics_file:
            write_metrics(train.metrics_file, result)
    return result


def _start(train: TrainConfig, model: ModelConfig, input_config: pipeline.PipelineConfig,
           strategy: strategy_lib.Strategy, model_fn: context_lib.ModelFn, console: console_lib.Console,
           dataset: Optional[dataset_lib.Dataset] = None) -> Tuple[TrainingInput, Type[training_paths.TrainingPath]]:
    """Checks the run, then makes its first writes, then prepares `strategy`; returns the input and the path.

    Every check comes first (`deepfm.runtime.preflight`): the recorded
    configuration, the model directory, the input and its step budget, the
    training path, the data. Only then does the chief write to the model
    directory, so a refused run leaves it as it was. The input then goes on
    where the checkpoint left it, and the plan holds the step the budget ends
    at (`deepfm.runtime.input_position`); a run resumed at its budget trains
    no step (`training_paths.NoStep`).
    """
    is_chief = strategy.topology.is_chief
    record = run_config.resolved(train, model, input_config, strategy.config, _qualified_name(model_fn))
    if is_chief:
        run_config.check_resume(train.model_dir, record)
    checkpoint = preflight.resume_point(train.model_dir, model, model_fn)
    resumed_step = None if checkpoint is None else checkpoints.checkpoint_step(checkpoint)
    feed = TrainingInput.of(train, input_config, strategy, dataset)
    path = training_paths.choose(train, input_config, strategy)
    if train.check_data and input_config.input_mode != pipeline.INPUT_MODE_PIPE:
        preflight.check_data(train, model, input_config, evaluation.file_eval_config(input_config), strategy,
                             feed.context)
    if is_chief:
        preflight.prepare_model_dir(train.model_dir, checkpoint)
        run_config.write(train.model_dir, record)
    if resumed_step is not None:
        resuming = "resuming from the checkpoint in %s at global step %d" % (train.model_dir, resumed_step)
        logging.info("%s", resuming)
        console.line(resuming)
    if feed.steps_per_worker is None:
        # Pipe mode without row counts: each epoch ends with its FIFO.
        strategy.prepare(plan_for(train, None, resumed_step))
        return feed, path
    position = preflight.resume_plan(train, strategy, resumed_step, feed.steps_per_worker,
                                     strategy.input_plan().global_max_steps(feed.steps_per_worker),
                                     feed.builder.batch_size,
                                     feed.batches_per_step)
    feed = feed.resumed_at(position.skip_batches)
    if position.resumed_step:
        logging.info("the steps before global step %d trained %d of the budget's %d examples: this worker's "
                     "input skips their %d batch(es) of its shard", position.resumed_step,
                     position.examples_done, position.examples_budget,
                     position.skip_in_pass(feed.batches_per_pass()))
    strategy.prepare(plan_for(train, feed.steps_per_worker, position.resumed_step, position.max_steps))
    if position.budget_reached and path is training_paths.OnePass:
        message = ("the checkpoint at global step %d already holds the budget's %d examples: no step to train; "
                   "evaluating and exporting it" % (position.resumed_step, position.examples_budget))
        logging.info("%s", message)
        console.line(message)
        path = training_paths.NoStep
    return feed, path


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


def _stop_agreement(strategy: strategy_lib.Strategy):
    """How a stop on a signal is agreed: the maximum of the stop flags of the processes in lockstep; None alone."""
    if not strategy.topology.lockstep:
        return None
    return lambda flag: strategy.agree_max(flag, name=interrupt.STOP_AGREEMENT_NAME)


def _evaluate_after_training(result: TrainResult, outcome, estimator: tf.estimator.Estimator, train: TrainConfig,
                             input_config: pipeline.PipelineConfig, strategy: strategy_lib.Strategy,
                             dataset: Optional[dataset_lib.Dataset]) -> None:
    """Fills `result`'s metrics: from the rounds, or by evaluating the last checkpoint as `strategy` reads it."""
    topology = strategy.topology
    if outcome is not None:
        if outcome.best is not None:
            result.auc, result.logloss, result.best_step = outcome.best.auc, outcome.best.logloss, outcome.best.step
        result.stopped_early = outcome.stopped_early
        result.evaluations = [dataclasses.asdict(e) for e in outcome.evaluations]
        return
    if train.val_channel and input_config.input_mode == pipeline.INPUT_MODE_PIPE:
        if topology.is_chief:
            result.auc, result.logloss, result.global_step = evaluation.evaluate(
                estimator, train.val_channel, evaluation.channel_eval_config(input_config))
    elif topology.evaluates and train.val_files:
        result.auc, result.logloss, result.global_step = evaluation.evaluate(
            estimator, train.val_files, evaluation.file_eval_config(input_config), dataset=dataset,
            strategy=strategy)
    result.best_step = result.global_step


def _progress_listeners(train: TrainConfig, model: ModelConfig, strategy: strategy_lib.Strategy,
                        console: console_lib.Console, max_steps: Optional[int],
                        epoch_steps: Optional[int]) -> List[hooks_lib.Listener]:
    """Where progress goes: the console, the chief's TensorBoard scalars, the progress file."""
    topology = strategy.topology
    listeners: List[hooks_lib.Listener] = [hooks_lib.ConsoleProgress(
        console, max_steps or None, epoch_steps, None if train.max_steps else train.num_epochs)]
    if topology.is_chief:
        listeners.append(hooks_lib.SummaryProgress(
            train.model_dir, strategy.model_context(tf.estimator.ModeKeys.TRAIN).learning_rate(model.learning_rate)))
    if train.progress_file and (topology.is_chief or hooks_lib.TASK_PLACEHOLDER in train.progress_file):
        listeners.append(hooks_lib.ProgressFile(
            train.progress_file.replace(hooks_lib.TASK_PLACEHOLDER, topology.task)))
    return listeners


def _trace_hook(train: TrainConfig, strategy: strategy_lib.Strategy) -> step_trace.StepTraceHook:
    """The hook tracing `train.trace_steps` steps of this process (`deepfm.runtime.step_trace`)."""
    topology = strategy.topology
    return step_trace.StepTraceHook(
        train.trace_dir or os.path.join(train.model_dir, TRACE_DIR), topology.task, train.trace_steps,
        own_job=topology.job_name)


def _qualified_name(model_fn) -> str:
    """`module.name` of a model function, as the run's configuration records it."""
    return "%s.%s" % (getattr(model_fn, "__module__", "?"), getattr(model_fn, "__name__", type(model_fn).__name__))


def export(estimator: tf.estimator.Estimator, export_dir: str, field_size: int,
           checkpoint_path: Optional[str] = None) -> str:
    """Exports a checkpoint (by default the latest) as a SavedModel under `export_dir`.

    An export cut short (a killed process) leaves its `temp-<timestamp>`
    directory, which TensorFlow Serving ignores; it is removed first.

    Returns:
      The timestamped SavedModel directory.
    """
    remove_partial_exports(export_dir)
    checkpoint_path = checkpoint_path or estimator.latest_checkpoint()
    receiver_fn = ctr.serving_input_receiver_fn(field_size)
    if checkpoint_path is None or row_stream.saved_ranks(checkpoint_path) is None:
        path = estimator.export_saved_model(export_dir, receiver_fn, checkpoint_path=checkpoint_path)
        return path.decode() if isinstance(path, bytes) else path
    # A checkpoint of sharded tables: their weights gathered first into a plain one (no slots), then removed.
    weights_dir = tempfile.mkdtemp(prefix=WEIGHTS_DIR_PREFIX, dir=os.path.dirname(checkpoint_path))
    try:
        with tf.Graph().as_default():
            tf.compat.v1.train.get_or_create_global_step()
            receiver = receiver_fn()
            estimator._call_model_fn(receiver.features, None, tf.estimator.ModeKeys.PREDICT,
                                     estimator.config)
            weights = sharded_checkpoint.export_weights(checkpoint_path, tf.compat.v1.global_variables(),
                                                        os.path.join(weights_dir, os.path.basename(checkpoint_path)))
        logging.info("gathered the weights of %s's sharded tables into %s for the export", checkpoint_path, weights)
        path = estimator.export_saved_model(export_dir, receiver_fn, checkpoint_path=weights)
    finally:
        shutil.rmtree(weights_dir, ignore_errors=True)
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
