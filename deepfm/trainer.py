"""The training job: train, evaluate, export, report, through any strategy.

`run` is what `python -m deepfm.train` calls once its flags are parsed; it is
also the library entry point for SageMaker scripts and benchmarks.

The step budget: every worker runs the same number of steps, so that no
Horovod rank waits on another that ran out of data. With `max_steps` unset,
each worker runs `num_epochs * steps_per_epoch` steps, where
`steps_per_epoch` is the number of full batches of the *smallest* input shard
(from the row counts in the dataset's metadata). A strategy maps that to the
global step at which training stops (asynchronous parameter servers add up
every worker's steps).
"""

import dataclasses
import json
import os
import time
from typing import Dict, Optional

import tensorflow as tf
from absl import logging

from deepfm import hooks as hooks_lib
from deepfm import model as model_lib
from deepfm.config import ModelConfig, TrainConfig
from input_pipeline import pipeline
from strategies import base as strategies_base

EVAL_BATCH_SIZE = 4096


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
    """

    auc: Optional[float] = None
    logloss: Optional[float] = None
    examples_per_sec: Optional[float] = None
    global_step: int = 0
    export_path: Optional[str] = None
    model_dir: str = ""
    strategy: str = ""
    train_seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)


def check_model_dir(model_dir: str) -> Optional[int]:
    """Makes sure `model_dir` is usable before training starts.

    Returns:
      The global step of the checkpoint training resumes from, or None for a
      new model directory.

    Raises:
      ValueError: `model_dir` is a file or cannot be written.
    """
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ValueError("--model_dir %r exists and is not a directory" % model_dir)
    try:
        os.makedirs(model_dir, exist_ok=True)
    except OSError as e:
        raise ValueError("--model_dir %r cannot be created: %s" % (model_dir, e)) from e
    if not os.access(model_dir, os.W_OK | os.X_OK):
        raise ValueError("--model_dir %r is not writable" % model_dir)
    checkpoint = tf.train.latest_checkpoint(model_dir)
    if checkpoint is None:
        return None
    return int(tf.train.load_variable(checkpoint, tf.compat.v1.GraphKeys.GLOBAL_STEP))


def _steps_per_worker(train: TrainConfig, builder: pipeline.DatasetBuilder,
                      context: tf.distribute.InputContext, batches_per_step: int) -> int:
    if train.max_steps:
        return train.max_steps
    steps = builder.steps_per_epoch(context)
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
                    ) -> tf.estimator.Estimator:
    """The Estimator of `model` as `strategy` trains it."""
    scaled = dataclasses.replace(model, learning_rate=model.learning_rate * strategy.learning_rate_factor())
    run_config = strategy.run_config(
        model_dir=train.model_dir,
        tf_random_seed=train.seed,
        save_checkpoints_steps=train.save_checkpoints_steps,
        save_checkpoints_secs=None,
        log_step_count_steps=train.log_every_n_steps)
    return tf.estimator.Estimator(
        model_fn=strategy.wrap_model_fn(model_lib.model_fn),
        config=run_config,
        params=strategy.model_params({"model": scaled}))


def run(train: TrainConfig, model: ModelConfig, input_config: pipeline.PipelineConfig,
        strategy: strategies_base.Strategy) -> Optional[TrainResult]:
    """Runs this process's part of a training job.

    Args:
      train: what to train on and where results go.
      model: the model's hyperparameters.
      input_config: how the input pipeline reads the data.
      strategy: the distribution strategy adapter of this process.

    Returns:
      The result, or None on a process that does not train (a parameter
      server).

    Raises:
      ValueError: bad configuration, found before training starts.
    """
    strategy.validate()
    strategy.setup()
    if strategy.role != "worker":
        strategy.serve()
        return None

    resumed_step = check_model_dir(train.model_dir)
    if resumed_step is not None:
        logging.info("resuming from the checkpoint in %s at global step %d", train.model_dir, resumed_step)
    context = strategy.input_context()
    batch = strategy.batch_per_input_pipeline(train.batch_size)
    source = strategy.pipe_channel() if input_config.input_mode == "pipe" else train.train_files
    train_builder = pipeline.DatasetBuilder(source, input_config, batch_size=batch, num_epochs=None)
    per_step = strategy.batches_per_step()
    max_steps = strategy.global_max_steps(_steps_per_worker(train, train_builder, context, per_step))
    logging.info("%s; per-replica batch %d; training to global step %d",
                 strategy.describe(), train.batch_size, max_steps)

    estimator = build_estimator(train, model, strategy)
    throughput = hooks_lib.ExamplesPerSecondHook(batch * per_step, every_n_steps=train.log_every_n_steps)
    start = time.time()
    estimator.train(lambda: train_builder(context), max_steps=max_steps,
                    hooks=strategy.train_hooks() + [throughput])
    result = TrainResult(
        examples_per_sec=throughput.examples_per_second, model_dir=train.model_dir,
        strategy=strategy.describe(), train_seconds=time.time() - start,
        global_step=int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP)))

    if train.val_channel and input_config.input_mode == "pipe":
        if strategy.is_chief:
            result.auc, result.logloss, result.global_step = _evaluate(
                estimator, train.val_channel, dataclasses.replace(input_config, shuffle_buffer=0, cache=None,
                                                                  drop_remainder=False))
    elif strategy.evaluates and train.val_files:
        result.auc, result.logloss, result.global_step = _evaluate(
            estimator, train.val_files, dataclasses.replace(input_config, input_mode="file", shuffle_buffer=0,
                                                            cache=None, drop_remainder=False))
    if strategy.is_chief:
        if train.export_dir:
            result.export_path = export(estimator, train.export_dir, model.field_size)
        if train.metrics_file:
            write_metrics(train.metrics_file, result)
    return result


def _evaluate(estimator, source: pipeline.Source, eval_config: pipeline.PipelineConfig):
    """Evaluates on every row of `source` (files, or a Pipe channel)."""
    builder = pipeline.DatasetBuilder(source, eval_config, batch_size=EVAL_BATCH_SIZE, num_epochs=1)
    metrics = estimator.evaluate(builder.input_fn(), name="validation")
    logging.info("validation: %s", metrics)
    return float(metrics["auc"]), float(metrics["logloss"]), int(metrics["global_step"])


def export(estimator: tf.estimator.Estimator, export_dir: str, field_size: int) -> str:
    """Exports the latest checkpoint as a SavedModel under `export_dir`.

    Returns:
      The timestamped SavedModel directory.
    """
    path = estimator.export_saved_model(export_dir, model_lib.serving_input_receiver_fn(field_size))
    return path.decode() if isinstance(path, bytes) else path


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
        ("model dir", result.model_dir),
        ("SavedModel", result.export_path or "not exported"),
    ] + list((extra or {}).items())
    width = max(len(key) for key, _ in items) + 2
    return "\n".join((key + ":").ljust(width) + value for key, value in items)
