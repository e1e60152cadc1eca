"""The `single` strategy: one process, one device, no distribution."""

from strategies import base


@base.register("single")
class SingleStrategy(base.Strategy):
    """Trains on one device; the defaults of `base.Strategy` describe it."""
