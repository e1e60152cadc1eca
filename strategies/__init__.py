"""Interchangeable distribution strategies for any Estimator model_fn.

`get(config)` builds an adapter by name and `names()` lists them; both load
every adapter module first (`base.ADAPTER_MODULES`). A model_fn takes what
its strategy gives it with `ModelContext.of(params)` (see `strategies.base`).
The package loads TensorFlow only when one of the names below is used, so
tools that need only `strategies.names`, `strategies.cluster` or
`strategies.cost_model` (the launchers, the job layer) start without it.
"""

import importlib

__all__ = ["EmbeddingTable", "ModelContext", "NoOptions", "Strategy", "StrategyConfig", "adapter_class",
           "get", "make_config", "names", "option_owners", "options_class", "register"]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module("strategies.base"), name)
    raise AttributeError("module 'strategies' has no attribute %r" % name)
