"""The `single` strategy: one process, one device, no distribution."""

from strategies import registry, strategy
from strategies import strategy_names as names


@registry.register(names.SINGLE)
class SingleStrategy(strategy.Strategy):
    """Trains on one device; the defaults of `strategy.Strategy` describe it. It has no options of its own."""
