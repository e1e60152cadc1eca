"""Trains, evaluates and exports a CTR model (DeepFM or DCN) with a chosen distribution strategy.

    python -m deepfm.train --train_data data/synthetic --model_dir runs/m1 \\
        --strategy single --export_dir runs/m1/export --metrics_file runs/m1/metrics.json

`--train_data` takes files, globs or directories; a dataset root (a directory
with metadata.json, as written by `dataprep.criteo` or `dataprep.synthetic`)
means its `train/` files, and `--val_data` then defaults to its
`validation/` files. `--feature_size` and `--field_size` default to the
dataset's metadata.

The flags are made from the fields of the configuration dataclasses
(`flag_classes`, `cli.config_flags`): their names, defaults and help are
stated once, in the fields. They are parsed once, here, into a
`deepfm.job_config.JobConfig` (`parse_job`), whose sections check their own
values and which checks what one section says about another; the library
never reads flags. Each strategy's own options are flags too, made from its
options dataclass (`strategies.options_class`): a flag of another strategy's
options is refused, naming the strategies it applies to.

`--config_file runs/m1/config.json` starts from the configuration a run
wrote next to its checkpoints: its data, model, input and strategy, with
the flags given on the command line overriding them. Where results go
(`--model_dir`, `--export_dir`, `--metrics_file`, ...) is never taken from
the file (`job_config.OUTPUT_FIELDS`): give the same `--model_dir` to resume
that run, another to train a new model as it was trained.

`--eval_every_n_steps N [--early_stopping_patience K]` evaluates during
training, exports the best checkpoint and may stop early. The console shows
a progress line per `--log_every_n_steps` and a summary; `--verbosity 0`
brings back TensorFlow's own logging (`cli.entry`).
"""

import dataclasses
import functools
from typing import Callable, Dict, List, Optional, Tuple

from absl import app, flags

from cli import config_flags, entry, huge_pages
from deepfm import api
from deepfm.config import ModelConfig, TrainConfig
from input_pipeline import schema

PROGRAM = "deepfm.train"
# Bytes of a float32 table entry: the tables' size, for huge pages (`cli.huge_pages`).
FLOAT_BYTES = 4

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Sources:
    """Where a run's data and configuration come from: flags of the entry point, resolved into the `JobConfig`.

    Attributes:
      train_data: training files, globs or directories
        (`input_pipeline.dataset.Dataset.open`); its files become
        `TrainConfig.train_files`.
      val_data: validation specs; None: the dataset root's `validation/`
        files; empty: none.
      config_file: a `config.json` a run wrote, to start from
        (`JobConfig.load`); the flags given override it.
    """

    train_data: Optional[Tuple[str, ...]] = config_flags.field(
        None, "Training files, globs or directories (a dataset root: its train/ files).")
    val_data: Optional[Tuple[str, ...]] = config_flags.field(
        None, "Validation files, globs or directories; default: the dataset root's validation/ files. Pass an "
        "empty value for none.")
    config_file: Optional[str] = config_flags.field(
        None, "Start from the config.json a run wrote next to its checkpoints; the flags given override it.")


def flag_classes() -> List[type]:
    """The dataclasses whose fields are the flags: the sources, the job's sections, every strategy's options."""
    import strategies  # registers the adapters, whose options are flags too
    from input_pipeline import pipeline
    return ([Sources, TrainConfig, ModelConfig, pipeline.PipelineConfig, strategies.StrategyConfig]
            + [strategies.options_class(name) for name in strategies.names()])


def define_flags() -> None:
    """Defines the flags of the entry point (and of nothing else), one per flag field of `flag_classes`."""
    config_flags.define_flags(flag_classes())


def _given_options(flag_values) -> Dict[str, object]:
    """The strategies' own options given on the command line."""
    import strategies
    return {flag: flag_values[flag].value for flag in strategies.option_owners() if flag_values[flag].present}


def strategy_config(flag_values, base=None):
    """The `StrategyConfig` of the parsed flags: the common options, and the adapter options given.

    Args:
      flag_values: the parsed flags.
      base: the `StrategyConfig` of a config file, which the flags given
        override (its adapter options only while `--strategy` keeps its name).

    Raises:
      ValueError: a flag of other strategies' options only, or a bad value.
    """
    import strategies
    from deepfm import job_config as job_config_lib
    values = job_config_lib.fields_of(base)
    options = values.pop(job_config_lib.OPTIONS_FIELD, None)
    values.update(config_flags.values(strategies.StrategyConfig, flag_values, given_only=base is not None))
    if base is not None and values["name"] == base.name and options is not None:
        values.update(job_config_lib.fields_of(options))
    values.update(_given_options(flag_values))
    return strategies.make_config(**values)


def parse_job(flag_values=FLAGS):
    """Turns parsed flags (and the `--config_file` they name) into a `JobConfig` and the `Dataset` or None.

    The dataset's metadata is read once, here (`Dataset.open`), and handed
    down to training (`deepfm.train_and_evaluate(..., dataset=)`).

    Raises:
      app.UsageError: a flag, or a key of the config file, is invalid; the
        message names it.
    """
    # TensorFlow is imported by the entry point first, with its start-up noise filtered (`cli.entry`).
    from deepfm import job_config as job_config_lib
    from input_pipeline import dataset as dataset_lib
    from input_pipeline import pipeline

    f = flag_values
    try:
        base = job_config_lib.JobConfig.load(f.config_file) if f.config_file else None
        given_only = base is not None

        def merged(section, config_class) -> dict:
            values = job_config_lib.fields_of(section)
            values.update(config_flags.values(config_class, f, given_only=given_only))
            return values

        train = merged(base and base.train, TrainConfig)
        if base is not None:
            every = config_flags.values(TrainConfig, f)
            train.update({name: every[name] for name in job_config_lib.OUTPUT_FIELDS})
        if not train.get("model_dir"):
            raise ValueError("--model_dir is required: the checkpoint directory (an existing one is resumed from)")
        model = merged(base and base.model, ModelConfig)
        input_values = merged(base and base.input, pipeline.PipelineConfig)
        train_specs = f.train_data if f["train_data"].present or base is None else list(base.train.train_files)
        val_specs = f.val_data if f["val_data"].present or base is None else list(base.train.val_files)
        data: Optional[dataset_lib.Dataset] = None
        if train_specs or val_specs:
            data = dataset_lib.Dataset.open(train_specs or [], val_specs, input_values["data_format"])
        train.update(train_files=data.train_files if data else (), val_files=data.val_files if data else ())
        metadata = data.metadata if data is not None else None
        if model.get("feature_size") is None:
            if metadata is None:
                raise ValueError("--feature_size is required: %s" % (
                    "no metadata.json was found beside --train_data" if data else
                    "no --train_data (a dataset root's metadata.json has the sizes)"))
            model["feature_size"] = metadata.feature_size
        if model.get("field_size") is None:
            model["field_size"] = metadata.field_size if metadata else schema.FIELD_SIZE
        input_values["field_size"] = model["field_size"]
        job = job_config_lib.JobConfig(
            train=TrainConfig(**train), model=ModelConfig(**model), input=pipeline.PipelineConfig(**input_values),
            strategy=strategy_config(f, base and base.strategy))
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    return job, data


def _main(argv, model_fn=None):
    del argv
    import strategies
    from deepfm.runtime import trainer
    from strategies import topology as topology_lib

    entry.configure_logging(entry.flags_want_detail())
    job, data = parse_job(FLAGS)
    # Before anything this process would not do twice: it may start again, with huge pages for its tables.
    huge_pages.restart_with_huge_pages(job.model.feature_size * (job.model.embedding_size + 1) * FLOAT_BYTES)
    try:
        strategy = strategies.get(job.strategy)
        topology = strategy.setup()
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    multi_process = topology.role != topology_lib.ROLE_WORKER or topology.workers > 1
    entry.configure_logging(entry.flags_want_detail(), task_logs=multi_process)
    result = api.train_and_evaluate(job.train, job.model, job.input, strategy, model_fn=model_fn, console=True,
                                    dataset=data)
    if result is not None and topology.is_chief:
        extra = {}
        metadata = data.metadata if data is not None else None
        if metadata is not None and metadata.planted_auc is not None:
            extra["planted AUC (ceiling)"] = "%.4f" % metadata.planted_auc
        print(trainer.summary(result, extra))


def run(argv: Optional[List[str]] = None, model_fn: Optional[Callable] = None) -> None:
    """Runs the command line: the console script, and an entry-point script that trains with these flags.

    The flags are parsed into the configuration dataclasses, which go to
    `deepfm.train_and_evaluate`.

    Args:
      argv: the program's name, then its flags; default `sys.argv`.
      model_fn: a model_fn of your own to train instead of the built-in
        model that `--model` names (docs/api.md says what it receives and
        must return); the SageMaker entry point passes one through
        (`examples/sagemaker_entry_point.py`).
    """
    entry.run(functools.partial(_main, model_fn=model_fn), PROGRAM, define_flags, entry.TENSORFLOW_BEFORE_FLAGS,
              argv=argv)


if __name__ == "__main__":
    run()
