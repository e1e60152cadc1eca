"""The `single` strategy: one process, one device, no distribution."""

from strategies import base
from strategies import strategy_names as names


@base.register(names.SINGLE)
class SingleStrategy(base.Strategy):
    """Trains on one device; the defaults of `base.Strategy` describe it. It has no options of its own."""
