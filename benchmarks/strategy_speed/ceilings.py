"""The two ceilings, each run as a child process: the input pipeline alone, and the compute alone.

`python -m benchmarks.strategy_speed --child input_ceiling|compute_ceiling`
(`run_child`) runs one and writes its progress points as JSON.
"""

import argparse
import json
import tempfile
import time

from benchmarks.strategy_speed.measure import LOG_EVERY_STEPS, NO_CHECKPOINT_STEPS, Progress
from benchmarks.strategy_speed.variants import BASELINE, KIND_INPUT


class ProgressRecorder:
    """Records (wall time, step) every `LOG_EVERY_STEPS` steps, as the training logs do."""

    def __init__(self):
        self.points: Progress = []
        self._steps = 0

    def step(self) -> None:
        self._steps += 1
        if self._steps % LOG_EVERY_STEPS == 0:
            self.points.append((time.time(), self._steps))


def _builder(data_dir: str, batch_size: int):
    from input_pipeline import files, formats, pipeline, schema
    metadata = schema.DatasetMetadata.read(data_dir)
    train_files = files.resolve([data_dir], formats.TFRECORD, split=schema.TRAIN_SPLIT)
    input_config = pipeline.PipelineConfig(data_format=formats.TFRECORD, field_size=metadata.field_size)
    return metadata, train_files, pipeline.DatasetBuilder(train_files, input_config, batch_size=batch_size,
                                                          num_epochs=None)


def input_ceiling(data_dir: str, batch_size: int, total_steps: int) -> Progress:
    """Iterates the training `DatasetBuilder`'s dataset alone; returns its progress points."""
    _, _, builder = _builder(data_dir, batch_size)
    progress = ProgressRecorder()
    for _ in builder(None).take(total_steps):
        progress.step()
    return progress.points


def compute_ceiling(data_dir: str, batch_size: int, total_steps: int, optimizer: str) -> Progress:
    """Trains the single-device Estimator on one decoded batch, cached and repeated.

    The same `DatasetBuilder`, model_fn and Estimator as training (through
    `deepfm.runtime.trainer.build_estimator`), at the defaults; only the reading
    and decoding of the input, and the training job's logging hooks (the
    throughput log and the step counter, every `LOG_EVERY_STEPS` steps),
    are taken out of the step.

    Returns:
      The progress points of the training steps.
    """
    import tensorflow as tf

    import strategies
    from deepfm import config as config_lib
    from deepfm.runtime import trainer

    metadata, train_files, builder = _builder(data_dir, batch_size)
    strategy = strategies.get(strategies.StrategyConfig(name=BASELINE))
    strategy.setup()
    progress = ProgressRecorder()

    class Hook(tf.estimator.SessionRunHook):
        def after_run(self, run_context, run_values):
            progress.step()

    with tempfile.TemporaryDirectory(prefix="bench-compute-ceiling-") as model_dir:
        train = config_lib.TrainConfig(model_dir=model_dir, train_files=tuple(train_files), batch_size=batch_size,
                                       max_steps=total_steps, save_checkpoints_steps=NO_CHECKPOINT_STEPS,
                                       log_every_n_steps=NO_CHECKPOINT_STEPS)
        model = config_lib.ModelConfig(feature_size=metadata.feature_size, field_size=metadata.field_size,
                                       optimizer=optimizer)
        strategy.prepare(trainer.plan_for(train, total_steps))
        estimator = trainer.build_estimator(model, strategy)
        estimator.train(lambda: builder(None).take(1).cache().repeat(), max_steps=total_steps, hooks=[Hook()])
    return progress.points


def run_child(args: argparse.Namespace) -> None:
    """Runs one ceiling in this process and writes its progress to `--child_output`."""
    total = args.warmup_steps + args.steps
    if args.child == KIND_INPUT:
        points = input_ceiling(args.data_dir, args.batch_size, total)
    else:
        points = compute_ceiling(args.data_dir, args.batch_size, total, args.optimizer)
    with open(args.child_output, "w") as f:
        json.dump({"progress": points}, f)
