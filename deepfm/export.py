"""Exports a checkpoint of a training run as a SavedModel, on a host that can hold the model's weights.

    python -m deepfm.export --model_dir runs/hybrid --export_dir runs/hybrid/export

The run's `config.json` (written next to its checkpoints) gives the model;
the latest checkpoint is exported unless `--checkpoint` names one. A
checkpoint of `hybrid`'s sharded tables is read from every rank's shard
files in bounded blocks into the tables' weights (no optimizer slots), so
the export needs the weights plus one block, whatever number of ranks wrote
it (`strategies.sharded.checkpoint.export_weights`). Training jobs whose
chief cannot hold the weights skip their own export and name this command.
"""

import dataclasses
import importlib
import os
from typing import List, Optional

from absl import app, flags

from cli import config_flags, entry

FLAGS = flags.FLAGS
PROGRAM = "deepfm.export"


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """What to export and where.

    Attributes:
      model_dir: the training run's model directory (its `config.json` and
        checkpoints).
      export_dir: where the timestamped SavedModel directory is written.
      checkpoint: the checkpoint to export; default: the latest in
        `model_dir`.
    """

    model_dir: str = dataclasses.field(metadata=config_flags.metadata(
        "The training run's model directory (its config.json and checkpoints)."))
    export_dir: str = dataclasses.field(metadata=config_flags.metadata(
        "Where the timestamped SavedModel directory is written."))
    checkpoint: Optional[str] = config_flags.field(
        None, "The checkpoint to export (a path prefix); default: the latest in --model_dir.")

    def __post_init__(self):
        if not os.path.isdir(self.model_dir):
            raise ValueError("--model_dir %r is not a directory: give the model directory of a training run"
                             % self.model_dir)


def define_flags() -> None:
    """Defines the flags of the entry point."""
    config_flags.define_flags([ExportConfig])


def _model_fn(name: str, model: str):
    """The model function a run recorded (`module.name`), or the built-in one of `model`."""
    from deepfm import models
    module, _, attribute = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError):
        return models.get(model)


def export(config: ExportConfig) -> str:
    """Exports `config.checkpoint` (default: the latest) of `config.model_dir`; returns the SavedModel directory.

    Raises:
      ValueError: no run configuration or no checkpoint in the model
        directory.
    """
    import tensorflow as tf

    import strategies
    from deepfm.job_config import JobConfig
    from deepfm.runtime import run_config, trainer

    record = run_config.read(config.model_dir)
    if record is None:
        raise ValueError("%s has no %s: export the model directory of a training run of this package"
                         % (config.model_dir, run_config.CONFIG_FILE))
    job = JobConfig.from_record(record, run_config.path(config.model_dir))
    checkpoint = config.checkpoint or tf.train.latest_checkpoint(config.model_dir)
    if checkpoint is None:
        raise ValueError("%s holds no checkpoint to export" % config.model_dir)
    train = dataclasses.replace(job.train, model_dir=config.model_dir)
    strategy = strategies.get(strategies.StrategyConfig())
    strategy.setup()
    strategy.prepare(trainer.plan_for(train))
    estimator = trainer.build_estimator(job.model, strategy,
                                        _model_fn(record.get(run_config.MODEL_FN_KEY, ""), job.model.model))
    return trainer.export(estimator, config.export_dir, job.model.field_size, checkpoint)


def _main(argv: List[str]) -> None:
    del argv
    entry.configure_logging(entry.flags_want_detail())
    try:
        config = ExportConfig(**config_flags.values(ExportConfig, FLAGS))
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    print("SavedModel: %s" % export(config))


def run(argv: Optional[List[str]] = None) -> None:
    """Runs the command line."""
    entry.run(_main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS, argv=argv)


if __name__ == "__main__":
    run()
