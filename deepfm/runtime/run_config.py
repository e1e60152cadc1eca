"""The resolved configuration of a run, written next to its checkpoints and compared on resume.

The chief writes `<model_dir>/config.json` before training starts: every
field of the run's `TrainConfig`, `ModelConfig`, `PipelineConfig` and
`StrategyConfig` (with the adapter's own options and their class), the model
function's name, and this package's version. It is what a later reader needs
to know how the checkpoints were made.

A run that resumes from a model directory compares its own configuration
with the one written there:

* refused (`ConfigMismatchError`), because the checkpoint cannot be resumed
  correctly with it: another built-in model (`ModelConfig.model`), another
  optimizer except between `adam` and `lazy_adam` (which keep the same
  slots), and a large-batch rule turned on or off (`--large_batch_rule`: its
  two optimizers keep their own state). Another model function's name is
  only logged: the same function is `__main__.model_fn` in the script Python
  runs and `my_module.model_fn` imported; what its variables hold is checked
  by the shape check below. A model of another shape (`feature_size`,
  `field_size`, `embedding_size`, `deep_layers`, `cross_layers`) is refused
  by the checkpoint's own shape check (`deepfm.runtime.checkpoints`), which
  names every variable that differs.
* logged as a warning, one line per field: everything else that changed
  (the strategy, the batch size, the learning rate, the data, ...). These are
  legitimate changes between runs: scaling out from one process to Horovod
  ranks resumes the same checkpoint.
"""

import dataclasses
import json
import os
from typing import Dict, List, Mapping, Optional, Tuple

from absl import logging

from strategies import large_batch

CONFIG_FILE = "config.json"
FORMAT_VERSION = 1
# Optimizers whose slot variables are the same, so a checkpoint of one resumes with the other.
SAME_SLOTS = (frozenset(("adam", "lazy_adam")),)
MODEL_FN_KEY = "model_fn"
LARGE_BATCH_RULE_KEY = "strategy.large_batch_rule"


class ConfigMismatchError(ValueError):
    """The model directory's checkpoints were made by a run this one cannot resume."""


def to_dict(value):
    """A JSON-ready view of a config dataclass (nested ones, tuples and named objects included)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: to_dict(getattr(value, field.name)) for field in dataclasses.fields(value)}
        return dict(fields, **{"class": type(value).__name__})
    if isinstance(value, (list, tuple)):
        return [to_dict(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_dict(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    # A registered object (a data format): its name.
    return getattr(value, "name", repr(value))


def resolved(train, model, input_config, strategy_config, model_fn_name: str) -> Dict:
    """The record `write` puts in the model directory."""
    return {"format_version": FORMAT_VERSION, MODEL_FN_KEY: model_fn_name, "train": to_dict(train),
            "model": to_dict(model), "input": to_dict(input_config), "strategy": to_dict(strategy_config)}


def path(model_dir: str) -> str:
    """Where the configuration of `model_dir` is written."""
    return os.path.join(model_dir, CONFIG_FILE)


def read(model_dir: str) -> Optional[Dict]:
    """The configuration written in `model_dir`, or None where there is none.

    Raises:
      ValueError: the file is not a configuration of this package.
    """
    if not os.path.isfile(path(model_dir)):
        return None
    try:
        with open(path(model_dir)) as f:
            record = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError("%s is not valid JSON (%s): move it away to start the record again"
                         % (path(model_dir), e)) from e
    if not isinstance(record, dict) or record.get("format_version") != FORMAT_VERSION:
        raise ValueError("%s is not a run configuration of this package (format_version %d)"
                         % (path(model_dir), FORMAT_VERSION))
    return record


def write(model_dir: str, record: Mapping) -> str:
    """Writes `record` to `model_dir/config.json` atomically; returns the path."""
    target = path(model_dir)
    with open(target + ".tmp", "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(target + ".tmp", target)
    return target


def differences(old, new, prefix: str = "") -> List[Tuple[str, object, object]]:
    """The fields that differ between two records: (dotted name, old value, new value), sorted."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new)):
            found += differences(old.get(key), new.get(key), prefix + key + ".")
        return found
    return [] if old == new else [(prefix.rstrip("."), old, new)]


def _same_slots(old_optimizer, new_optimizer) -> bool:
    return old_optimizer == new_optimizer or any(
        {old_optimizer, new_optimizer} <= group for group in SAME_SLOTS)


def check_resume(model_dir: str, record: Mapping) -> List[Tuple[str, object, object]]:
    """Compares this run's `record` with the one in `model_dir` (see the module docstring).

    Returns:
      The fields that changed (none for a new model directory); each is
      logged as a warning.

    Raises:
      ConfigMismatchError: a change the checkpoint cannot be resumed with;
        the message names the field, both values and the remedy.
    """
    old = read(model_dir)
    if old is None:
        return []
    changed = differences(old, dict(record))
    refused = [(name, before, after) for name, before, after in changed
               if name == "model.model"
               or (name == "model.optimizer" and not _same_slots(before, after))
               # A record written before the option existed had no rule.
               or (name == LARGE_BATCH_RULE_KEY and (before or large_batch.NONE) != after)]
    if refused:
        raise ConfigMismatchError(
            "--model_dir %r holds checkpoints of another model, optimizer or large-batch rule (%s); they cannot "
            "be resumed by this run. Use the settings in %s, or a new --model_dir" % (
                model_dir, "; ".join("%s was %r, now %r" % item for item in refused), path(model_dir)))
    for name, before, after in changed:
        logging.warning("resuming %s with %s changed: %r -> %r", model_dir, name, before, after)
    return changed
