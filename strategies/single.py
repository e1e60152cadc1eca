"""The `single` strategy: one process, one device, no distribution."""

import dataclasses

from strategies import context as context_lib
from strategies import registry, strategy
from strategies import strategy_names as names
from strategies import tables as tables_lib
from strategies import topology as topology_lib


@dataclasses.dataclass(frozen=True)
class SingleOptions(tables_lib.TablePartitionOptions):
    """Options of the `single` strategy: the tables' partitions in this process."""


@registry.register(names.SINGLE)
class SingleStrategy(strategy.Strategy):
    """Trains on one device; the defaults of `strategy.Strategy` describe it, but for its tables' partitions."""

    Options = SingleOptions
    _options: SingleOptions

    def _set_up(self) -> topology_lib.Topology:
        """One process on one device: the default `Topology`."""
        return topology_lib.Topology()

    def _embedding_factory(self, mode: str) -> tables_lib.EmbeddingFactory:
        """Each table in `--table_partitions` row ranges of this process (one variable at 1)."""
        del mode
        return tables_lib.variable_tables(partitioner=tables_lib.row_partitioner(self._options.table_partitions),
                                          dedup=self.config.dedup_lookups)

    def _replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """`model_fn` itself: one call on the one device."""
        return model_fn

    def describe(self) -> str:
        return strategy.describe_topology(self)

