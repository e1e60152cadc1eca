"""Evaluation of a checkpoint on the validation data: every row once, the metrics the runtime reports.

The trainer evaluates after training, and a training path in rounds after
each round (`deepfm.runtime.training_paths`); both read the validation data
as `file_eval_config` says and require the model_fn's EVAL metrics to hold
`REPORTED_METRICS`. Validation files are read as the strategy says
(`InputPlan.evaluation_input_fn`): by one process, or, where processes
evaluate together (Horovod ranks), a shard by each, their metric state
summed, so that every row counts once and each process reports the metrics
of all the rows.
"""

import dataclasses
from typing import Optional, Tuple

from absl import logging

from input_pipeline import dataset as dataset_lib
from input_pipeline import pipeline
from strategies import strategy as strategy_lib

EVAL_BATCH_SIZE = 4096
# The EVAL metrics a model_fn must return: the result, the best checkpoint and early stopping use them.
REPORTED_METRICS = ("auc", "logloss")


def file_eval_config(input_config: pipeline.PipelineConfig) -> pipeline.PipelineConfig:
    """How evaluation reads validation files: every row once, in order."""
    return dataclasses.replace(input_config, input_mode=pipeline.INPUT_MODE_FILE, shuffle_buffer=0, cache=None,
                               drop_remainder=False)


def channel_eval_config(input_config: pipeline.PipelineConfig) -> pipeline.PipelineConfig:
    """How evaluation reads a Pipe-mode validation channel: every row once, in order."""
    return dataclasses.replace(input_config, shuffle_buffer=0, cache=None, drop_remainder=False)


def evaluate(estimator, source: pipeline.Source, eval_config: pipeline.PipelineConfig,
             checkpoint_path: Optional[str] = None,
             dataset: Optional[dataset_lib.Dataset] = None,
             strategy: Optional[strategy_lib.Strategy] = None) -> Tuple[float, float, int]:
    """Evaluates on every row of `source` (files, or a Pipe channel); returns (AUC, log loss, global step).

    `dataset` (the files' `Dataset`, its metadata read already) hands the
    row counts and metadata down to the input pipeline; None: it finds them.
    `strategy`, the one `estimator` trains with, says which rows this
    process reads (`InputPlan.evaluation_input_fn`); every process that
    evaluates with it must call this at the same point. None: this process
    reads every row alone (a Pipe-mode channel, on the chief).

    Raises:
      ValueError: the model_fn's EVAL metrics lack one of `REPORTED_METRICS`.
    """
    known = dataset.pipeline_args(source) if dataset is not None and not isinstance(source, str) else {}
    builder = pipeline.DatasetBuilder(source, eval_config, batch_size=EVAL_BATCH_SIZE, num_epochs=1, **known)
    input_fn = strategy.input_plan().evaluation_input_fn(builder) if strategy is not None else builder.input_fn()
    metrics = estimator.evaluate(input_fn, name="validation", checkpoint_path=checkpoint_path)
    logging.info("validation: %s", metrics)
    missing = [name for name in REPORTED_METRICS if name not in metrics]
    if missing:
        raise ValueError("the model_fn's EVAL metrics lack %s (it returned %s): the runtime reports, tracks and "
                         "exports by them; deepfm.models.ctr.prediction_metrics computes both"
                         % (" and ".join(missing), ", ".join(sorted(metrics))))
    return float(metrics["auc"]), float(metrics["logloss"]), int(metrics["global_step"])
