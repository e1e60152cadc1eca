"""The two ceilings, each run as a child process: the input pipeline alone, and the compute alone.

`python -m benchmarks.strategy_speed.ceilings --kind input_ceiling|compute_ceiling
--output FILE ...` (`main`) runs one and writes its progress points as JSON.
"""

import dataclasses
import json
import tempfile
import time
from typing import List, Tuple

from benchmarks import common, harness
from benchmarks.strategy_speed.config import LOG_EVERY_STEPS
from benchmarks.strategy_speed.variants import BASELINE, CHILD_KINDS, GLOBAL_BATCH, KIND_INPUT
from cli import config_flags

# A checkpoint interval no run reaches: only the final checkpoint is saved.
NO_CHECKPOINT_STEPS = 10 ** 9

Progress = List[Tuple[float, int]]


@dataclasses.dataclass(frozen=True)
class CeilingConfig:
    """One ceiling's run, as the benchmark starts it in a child process."""

    kind: str = config_flags.field(KIND_INPUT, "Which ceiling.", choices=CHILD_KINDS)
    output: str = config_flags.field("", "Where its progress points go (JSON).")
    data_dir: str = config_flags.field(common.DEFAULT_DATA_DIR, "The dataset root.")
    batch_size: int = config_flags.field(GLOBAL_BATCH, "Examples per step.")
    total_steps: int = config_flags.field(2 * LOG_EVERY_STEPS, "Steps, warm-up included.")
    optimizer: str = config_flags.field("adam", "The compute ceiling's optimizer.")

    def __post_init__(self):
        if not self.output:
            raise ValueError("--output is required: the JSON file the progress points go to")
        if self.total_steps < 1:
            raise ValueError("--total_steps must be >= 1, got %d" % self.total_steps)


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


def run(config: CeilingConfig) -> int:
    """Runs one ceiling in this process and writes its progress to `config.output`; returns 0."""
    if config.kind == KIND_INPUT:
        points = input_ceiling(config.data_dir, config.batch_size, config.total_steps)
    else:
        points = compute_ceiling(config.data_dir, config.batch_size, config.total_steps, config.optimizer)
    with open(config.output, "w") as f:
        json.dump({"progress": points}, f)
    return 0


if __name__ == "__main__":
    harness.main(CeilingConfig, run)
