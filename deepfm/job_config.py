"""One training job's configuration: `JobConfig`, its four sections, and the `config.json` a run writes.

    job = JobConfig(train=TrainConfig(...), model=ModelConfig(...),
                    input=PipelineConfig(...), strategy=StrategyConfig(...))
    job = JobConfig.load("runs/m1/config.json")     # the resolved config of a run

The sections are the dataclasses the library takes (`deepfm.config.TrainConfig`
and `ModelConfig`, `input_pipeline.pipeline.PipelineConfig`,
`strategies.StrategyConfig`); each checks its own values, and `JobConfig`
checks what one section says about another. Their fields made with
`cli.config_flags.field` are the flags of `deepfm.train`, which parses them
into a `JobConfig` (and with `--config_file`, starts from a loaded one).

The trainer writes the resolved config next to the checkpoints
(`deepfm.runtime.run_config`): one JSON object with a key per section, each
section's fields (a data format by name, the strategy's own options as a
nested object), the model function's name and a format version. `load`
reads it back into the same `JobConfig`: a key that is no field of its
section is refused, naming the file and the key.
"""

import dataclasses
import json
import typing
from typing import Any, Dict, Mapping, Optional

from cli import config_flags
from deepfm.config import ModelConfig, TrainConfig
from deepfm.runtime import run_config
from input_pipeline import pipeline
from strategies.config import StrategyConfig

# The sections of a job, as the config file names them.
TRAIN, MODEL, INPUT, STRATEGY = "train", "model", "input", "strategy"
SECTIONS = (TRAIN, MODEL, INPUT, STRATEGY)
# The keys of the config file beside the sections, and a section's own (its class's name).
FORMAT_VERSION_KEY = "format_version"
OTHER_KEYS = (FORMAT_VERSION_KEY, run_config.MODEL_FN_KEY)
CLASS_KEY = "class"
OPTIONS_FIELD = "options"
# Where a run's results go (`TrainConfig` fields): its own, never taken from another run's config file, so
# that starting from one never writes into that run's model directory unasked.
OUTPUT_FIELDS = ("model_dir", "export_dir", "metrics_file", "progress_file", "trace_dir", "metrics_port")


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """The configuration of one training job, in four sections.

    Attributes:
      train: what to train on, for how long, and where results go.
      model: the model's hyperparameters.
      input: how the input pipeline reads the data.
      strategy: the distribution strategy and its options.
    """

    train: TrainConfig
    model: ModelConfig
    input: pipeline.PipelineConfig
    strategy: StrategyConfig

    def __post_init__(self):
        pipe_mode = self.input.input_mode == pipeline.INPUT_MODE_PIPE
        if not pipe_mode:
            # Pipe mode without channels is refused by the strategy (`InputPlan.pipe_channel`); channels must
            # not come without Pipe mode, as strategies tell Pipe mode by them.
            for flag, value in (("train_channels", ",".join(self.strategy.train_channels)),
                                ("val_channel", self.train.val_channel)):
                if value:
                    raise ValueError("--%s %r needs --input_mode %s" % (flag, value, pipeline.INPUT_MODE_PIPE))
            if not self.train.train_files:
                raise ValueError("--train_data is required in File mode")
        if self.input.field_size != self.model.field_size:
            raise ValueError("the input's field_size %d is not the model's %d: give both the same (--field_size "
                             "sets both)" % (self.input.field_size, self.model.field_size))

    def record(self, model_fn_name: str) -> Dict[str, Any]:
        """The config file's content, as the trainer writes it (`run_config.resolved`)."""
        return run_config.resolved(self.train, self.model, self.input, self.strategy, model_fn_name)

    @classmethod
    def from_record(cls, record: Any, source: str) -> "JobConfig":
        """The `JobConfig` a config file's content describes.

        Args:
          record: the parsed JSON.
          source: where it comes from, for the messages (the file's path).

        Raises:
          ValueError: a key that is no field of its section, a missing
            section, another format version, or a bad value; the message
            names `source` and the key.
        """
        if not isinstance(record, dict):
            raise ValueError("%s: a run configuration is a JSON object, got %s" % (source, type(record).__name__))
        unknown = sorted(set(record) - set(SECTIONS) - set(OTHER_KEYS))
        if unknown:
            raise ValueError("%s: unknown key %r (a run configuration has %s)"
                             % (source, unknown[0], ", ".join(SECTIONS + OTHER_KEYS)))
        if record.get(FORMAT_VERSION_KEY) != run_config.FORMAT_VERSION:
            raise ValueError("%s: format_version %r, this package reads %d"
                             % (source, record.get(FORMAT_VERSION_KEY), run_config.FORMAT_VERSION))
        for section in SECTIONS:
            if not isinstance(record.get(section), dict):
                raise ValueError("%s: no %r section (an object of its fields)" % (source, section))
        try:
            train = TrainConfig(**section_values(TrainConfig, record[TRAIN], TRAIN, source))
            model = ModelConfig(**section_values(ModelConfig, record[MODEL], MODEL, source))
            input_config = pipeline.PipelineConfig(**section_values(pipeline.PipelineConfig, record[INPUT], INPUT,
                                                                    source))
            return cls(train=train, model=model, input=input_config,
                       strategy=_strategy_from_record(record[STRATEGY], source))
        except (TypeError, ValueError) as e:  # a TypeError: a value of another type, e.g. a string for a number
            message = str(e)
            raise ValueError(message if message.startswith(source) else "%s: %s" % (source, message)) from e

    @classmethod
    def load(cls, path: str) -> "JobConfig":
        """Reads the config file a run wrote (`<model_dir>/config.json`).

        Raises:
          ValueError: the file is missing, not JSON, or not a run
            configuration (see `from_record`); the message names it.
        """
        try:
            with open(path) as f:
                record = json.load(f)
        except OSError as e:
            raise ValueError("--config_file %s cannot be read: %s" % (path, e.strerror or e)) from e
        except json.JSONDecodeError as e:
            raise ValueError("%s is not valid JSON: %s" % (path, e)) from e
        return cls.from_record(record, path)


def section_values(config_class: type, section: Mapping[str, Any], name: str, source: str) -> Dict[str, Any]:
    """A section's fields as `config_class` takes them (JSON lists as tuples where the field is one).

    Raises:
      ValueError: a key that is no field of `config_class`, or a required
        field missing; the message names `source` and the key (`section.key`).
    """
    fields = {item.name for item in dataclasses.fields(config_class)}
    unknown = sorted(set(section) - fields - {CLASS_KEY})
    if unknown:
        raise ValueError("%s: unknown key %r (the %s section has %s)"
                         % (source, "%s.%s" % (name, unknown[0]), name, ", ".join(sorted(fields))))
    missing = [item.name for item in dataclasses.fields(config_class) if item.name not in section
               and item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError("%s: the %s section lacks %r" % (source, name, "%s.%s" % (name, missing[0])))
    hints = typing.get_type_hints(config_class)
    return {key: _as_field(hints[key], value) for key, value in section.items() if key != CLASS_KEY}


def _as_field(annotation: Any, value: Any) -> Any:
    """A JSON value as a field of `annotation` holds it: a list as a tuple."""
    if isinstance(value, list) and typing.get_origin(config_flags.unwrap_optional(annotation)) is tuple:
        return tuple(value)
    return value


def _strategy_from_record(section: Mapping[str, Any], source: str) -> StrategyConfig:
    """The strategy section as a `StrategyConfig`: its common fields, and the adapter's options it names."""
    import strategies  # registers the adapters
    options = section.get(OPTIONS_FIELD) or {}
    common = section_values(StrategyConfig, {k: v for k, v in section.items() if k != OPTIONS_FIELD}, STRATEGY,
                            source)
    owners = strategies.option_owners()
    unknown = sorted(set(options) - set(owners) - {CLASS_KEY})
    if unknown:
        raise ValueError("%s: unknown key %r (no strategy has that option)"
                         % (source, "%s.%s.%s" % (STRATEGY, OPTIONS_FIELD, unknown[0])))
    name = common.pop("name", StrategyConfig.name)
    return strategies.make_config(name, **common, **{k: v for k, v in options.items() if k != CLASS_KEY})


def fields_of(section: Optional[Any]) -> Dict[str, Any]:
    """A section's fields as keyword arguments (not deep-copied, unlike `dataclasses.asdict`); {} for None."""
    if section is None:
        return {}
    return {item.name: getattr(section, item.name) for item in dataclasses.fields(section)}
