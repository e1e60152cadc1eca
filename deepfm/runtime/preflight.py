"""What a run checks before it writes anything, its first writes, and where it starts.

The trainer (`deepfm.runtime.trainer`) runs every check first: the model
directory (`resume_point`: readable checkpoints, the model's shapes) and the
input (`check_data`: every file read once, `input_pipeline.data_check`).
Only then does the chief write (`prepare_model_dir`: what saves cut short
left is removed, the state file points at the checkpoint resumed from), so
a refused run leaves the model directory byte for byte as it was. Then
`resume_plan` says where the input starts and the global step training
ends at (`deepfm.runtime.input_position`).

Processes that must train the same steps (Horovod ranks) agree through
`combined`: a collective every one of them makes at the same point.
"""

import dataclasses
import os
import time
from typing import Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from deepfm import models
from deepfm.config import ModelConfig, TrainConfig
from deepfm.runtime import checkpoints, input_position
from input_pipeline import data_check, pipeline
from strategies import context as context_lib
from strategies import strategy as strategy_lib

# The name of the collective of `combined`.
AGREEMENT_NAME = "preflight_agreement"


def resume_point(model_dir: str, model: Optional[ModelConfig] = None,
                 model_fn: Optional[context_lib.ModelFn] = None) -> Optional[str]:
    """The checkpoint training resumes from (None: a new model directory), changing nothing in `model_dir`.

    Unreadable checkpoints are skipped and, with `model`, a checkpoint of
    another model shape is refused (see `deepfm.runtime.checkpoints`). A
    missing `model_dir` is created.

    Raises:
      ValueError: `model_dir` is a file or cannot be written, none of its
        checkpoints is readable, or its checkpoint holds another model shape.
    """
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ValueError("--model_dir %r exists and is not a directory" % model_dir)
    try:
        os.makedirs(model_dir, exist_ok=True)
    except OSError as e:
        raise ValueError("--model_dir %r cannot be created: %s" % (model_dir, e)) from e
    if not os.access(model_dir, os.W_OK | os.X_OK):
        raise ValueError("--model_dir %r is not writable" % model_dir)
    checkpoint = checkpoints.resume_checkpoint(model_dir, repair=False)
    if checkpoint is not None and model is not None:
        checkpoints.check_model_shapes(checkpoint, model, model_fn or models.get(model.model))
    return checkpoint


def prepare_model_dir(model_dir: str, checkpoint: Optional[str]) -> None:
    """The chief's first writes: what saves cut short left is removed, the state file points at `checkpoint`."""
    checkpoints.remove_partial_files(model_dir)
    if checkpoint is not None:
        checkpoints.repair_state(model_dir, checkpoint)


def check_data(train: TrainConfig, model: ModelConfig, input_config: pipeline.PipelineConfig,
               eval_config: pipeline.PipelineConfig, strategy: strategy_lib.Strategy,
               context: tf.distribute.InputContext) -> None:
    """Reads the input whole once before anything is written (`input_pipeline.data_check`).

    Each process checks its share of the training files (the chief also the
    validation files). Horovod ranks then agree (a collective every rank
    makes here), so that all stop when one found a problem; where processes
    do not agree (parameter servers), the chief checks every training file
    itself, as it alone writes to the model directory.

    Raises:
      ValueError: a file's problem, named by `data_check`; or, on the other
        ranks, that another rank found one.
    """
    files = list(train.train_files)
    own = files[context.input_pipeline_id::context.num_input_pipelines]
    start = time.monotonic()
    error = None
    try:
        data_check.check_files(own, input_config, model.feature_size)
        if strategy.topology.is_chief and train.val_files:
            data_check.check_files(train.val_files, eval_config, model.feature_size,
                                   role="validation")
    except data_check.DataCheckError as e:
        error = e
    agreed = combined(strategy, (int(error is not None),))
    if error is None and agreed is None and strategy.topology.is_chief:
        try:
            data_check.check_files([path for path in files if path not in own], input_config, model.feature_size)
        except data_check.DataCheckError as e:
            error = e
    if error is not None:
        raise error
    if agreed is not None and agreed[0]:
        raise ValueError("another process's check of the input found a problem (its log names it); nothing "
                         "was written to --model_dir %r" % train.model_dir)
    logging.info("checked the input in %.1f s (--check_data)", time.monotonic() - start)


def resume_plan(train: TrainConfig, strategy: strategy_lib.Strategy, resumed_step: Optional[int],
                 steps: int, budget: int, batch: int, per_step: int) -> input_position.ResumePlan:
    """Where this run's input starts and the global step it trains to (`deepfm.runtime.input_position`).

    Horovod ranks take rank 0's plan (a collective every rank makes here):
    they must train the same steps on the same position.
    """
    workers = strategy.topology.workers
    per_global_step = batch * per_step * workers * steps // budget
    segments = input_position.read(train.model_dir)
    plan = input_position.plan(segments, resumed_step or 0, per_global_step, budget, workers, batch)
    mine = (plan.resumed_step, plan.max_steps, plan.skip_batches)
    agreed = combined(strategy, mine if strategy.topology.is_chief else (0, 0, 0))
    if agreed is not None and agreed != mine:
        plan = dataclasses.replace(plan, resumed_step=agreed[0], max_steps=agreed[1], skip_batches=agreed[2])
    if strategy.topology.is_chief:
        input_position.record(train.model_dir, segments, plan.resumed_step, per_global_step)
    return plan


def combined(strategy: strategy_lib.Strategy, values: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """Each of `values` (int32) as its largest over the processes in lockstep (`Strategy.agree_max`); None alone."""
    if not strategy.topology.lockstep:
        return None
    with tf.Graph().as_default():
        maximum = strategy.agree_max(tf.constant(list(values), tf.int32), name=AGREEMENT_NAME)
        with tf.compat.v1.Session(config=strategy.session_config()) as session:
            return tuple(int(v) for v in session.run(maximum))
