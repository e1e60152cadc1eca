"""Interchangeable distribution strategies for the DeepFM model_fn.

`get(config)` builds an adapter by name and `names()` lists them; both load
every adapter module first (`base.ADAPTER_MODULES`). The package loads
TensorFlow only when one of its names below is used, so tools that need only
`strategies.cluster` (the local launcher) start without it.
"""

import importlib

__all__ = ["Strategy", "StrategyConfig", "get", "names", "register"]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module("strategies.base"), name)
    raise AttributeError("module 'strategies' has no attribute %r" % name)
