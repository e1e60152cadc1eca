"""Train click-through-rate models with pluggable TensorFlow distribution strategies.

The public API (each name is loaded on first use, so `import deepfm` is
cheap and imports no TensorFlow)::

    import deepfm

    data = deepfm.Dataset.open("data/synthetic")
    result = deepfm.train_and_evaluate(
        deepfm.TrainConfig(model_dir="runs/m1", train_files=data.train_files, val_files=data.val_files),
        deepfm.ModelConfig(feature_size=data.feature_size, field_size=data.field_size),
        strategy=deepfm.StrategyConfig(name="horovod"), dataset=data)

* `train_and_evaluate`: train, evaluate, export (`deepfm.api`).
* `write_predictions`: score data with an exported SavedModel (`deepfm.predict`).
* The configuration: `TrainConfig`, `ModelConfig` (`deepfm.config`),
  `PipelineConfig` (`input_pipeline.pipeline`), `StrategyConfig`
  (`strategies.config`) and each strategy's own options dataclass; together,
  `JobConfig` (`deepfm.job_config`), which a run writes as its config.json.
* `Dataset`: a dataset root or files, with their metadata
  (`input_pipeline.dataset`); `DatasetBuilder`: the tf.data input pipeline.
* `ModelContext`: what a model_fn of your own gets from its strategy
  (`strategies.context`); `models`: the built-in model_fns (DeepFM, DCN).
* `strategies`: `strategies.get(config)`, `strategies.names()`.
* `TrainResult`: what a run reports.
* `configure_logging`: TensorFlow's and absl's logging as the command lines
  keep it (warnings and errors, without deprecation notices), for a script
  of your own (`cli.entry`).

docs/api.md walks through it.
"""

import importlib
import os

# TensorFlow's oneDNN build keeps large tensors in an allocator of its own that
# does not give freed memory back and does not reuse it for tensors of another
# size: a 20M-id model then peaks at over twice its variables. The system
# allocator returns what is freed. Read once, when TensorFlow is first
# imported, so it is set here, before any module of the package imports it;
# `TF_ONEDNN_USE_SYSTEM_ALLOCATOR=0` in the environment keeps oneDNN's.
# docs/large_tables.md, "Tables larger than a host", has the measurements.
SYSTEM_ALLOCATOR_ENV = "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"
os.environ.setdefault(SYSTEM_ALLOCATOR_ENV, "1")

# Public name -> (module, attribute); None: the module itself.
_EXPORTS = {
    "train_and_evaluate": ("deepfm.api", "train_and_evaluate"),
    "write_predictions": ("deepfm.predict", "write_predictions"),
    "TrainConfig": ("deepfm.config", "TrainConfig"),
    "ModelConfig": ("deepfm.config", "ModelConfig"),
    "PipelineConfig": ("input_pipeline.pipeline", "PipelineConfig"),
    "StrategyConfig": ("strategies.config", "StrategyConfig"),
    "JobConfig": ("deepfm.job_config", "JobConfig"),
    "ModelContext": ("strategies.context", "ModelContext"),
    "Dataset": ("input_pipeline.dataset", "Dataset"),
    "DatasetBuilder": ("input_pipeline.pipeline", "DatasetBuilder"),
    "TrainResult": ("deepfm.runtime.trainer", "TrainResult"),
    "models": ("deepfm.models", None),
    "strategies": ("strategies", None),
    "configure_logging": ("cli.entry", "configure_logging"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError("module 'deepfm' has no attribute %r" % name)
    module_name, attribute = _EXPORTS[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)


def __dir__():
    return sorted(set(globals()) | set(__all__))
