"""Interchangeable distribution strategies for the DeepFM model_fn.

Importing this package registers every adapter; `get(config)` builds one by
name and `names()` lists them.
"""

from strategies.base import Strategy, StrategyConfig, get, names, register

__all__ = ["Strategy", "StrategyConfig", "get", "names", "register"]

# Adapter modules register themselves on import, one per line.
from strategies import single  # noqa: F401
from strategies import auto  # noqa: F401
from strategies import horovod  # noqa: F401
from strategies import tower  # noqa: F401
from strategies import mirrored  # noqa: F401
from strategies import ps  # noqa: F401
