"""The embedding tables a strategy creates for a model_fn: rows looked up by id.

`EmbeddingTable` is the interface (`lookup`, `lookup_with`, `variables`);
`VariableTable` holds a table in one variable or in partitions on parameter
servers; `LargeBatchTable` passes looked-up rows through a large-batch rule.
A strategy hands a model_fn an `EmbeddingFactory` (through its
`ModelContext`) that decides which kind it gets; `hybrid` has its own,
sharded across ranks (`strategies.hybrid.ShardedTable`).
"""

import abc
import dataclasses
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from strategies import large_batch as large_batch_lib
from strategies import options as options_lib

# `--table_partitions`: each table one variable.
ONE_PARTITION = 1


class EmbeddingTable(abc.ABC):
    """An embedding table as a strategy holds it: rows looked up by id.

    Attributes:
      name: the table's variable name under the model's scope.
      shape: the whole table's shape, `[num_rows] + row_shape`, whatever
        part of it this process holds.
    """

    def __init__(self, name: str, shape: Sequence[int]):
        self.name = name
        self.shape = tuple(shape)

    @abc.abstractmethod
    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """The rows of `ids` (any integer shape): `ids.shape + row_shape`, differentiable."""

    @abc.abstractmethod
    def variables(self) -> List[tf.Variable]:
        """The trainable variables holding this process's rows (partitions, or this rank's shard)."""

    def lookup_with(self, others: Sequence["EmbeddingTable"], ids: tf.Tensor) -> List[tf.Tensor]:
        """The rows of `ids` in this table and in each of `others`, in that order.

        A strategy that moves rows between processes moves them in one
        exchange where it can (`hybrid`); this default looks each table up
        on its own.
        """
        return [table.lookup(ids) for table in (self,) + tuple(others)]

    def lookup_distinct_with(self, others: Sequence["EmbeddingTable"], ids: tf.Tensor,
                             transform: large_batch_lib.DistinctRowsTransform) -> Optional[List[tf.Tensor]]:
        """`lookup_with`, with `transform` applied to each table's rows of the distinct ids before they are spread.

        For a table that looks each distinct id up once (a large-batch rule
        then works on the distinct rows: `LargeBatchRule.distinct_rows`).

        Args:
          others: as in `lookup_with`.
          ids: as in `lookup_with`.
          transform: `(rows, counts) -> rows`: `[distinct] + row_shape` rows
            and their int32 `[distinct]` occurrences in `ids`.

        Returns:
          As `lookup_with`; None where these tables do not look distinct ids
          up (the caller then works on the spread rows): this default.
        """
        del others, ids, transform
        return None


class VariableTable(EmbeddingTable):
    """A table in one variable of this process, or partitioned across parameter servers.

    Args:
      name: the variable's name (in the current variable scope).
      shape: `[num_rows] + row_shape`.
      initializer: the rows' initializer; None: Glorot normal.
      partitioner: a variable partitioner (parameter servers), or None.
      dedup: look up each distinct id once (see `StrategyConfig.dedup_lookups`).
    """

    def __init__(self, name: str, shape: Sequence[int], initializer=None, partitioner=None, dedup: bool = False):
        super().__init__(name, shape)
        self._dedup = dedup
        self._partitioned = partitioner is not None
        self.variable = tf.compat.v1.get_variable(
            name, list(shape), initializer=initializer or tf.compat.v1.glorot_normal_initializer(),
            partitioner=partitioner)

    def variables(self) -> List[tf.Variable]:
        """The variable, or its partitions."""
        return list(self.variable) if self._partitioned else [self.variable]

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        if not self._dedup:
            return _gather(self.variable, ids)
        distinct, index = tf.unique(tf.reshape(ids, [-1]), out_idx=tf.int32)
        return _spread(_gather(self.variable, distinct), index, ids)

    def lookup_distinct_with(self, others: Sequence[EmbeddingTable], ids: tf.Tensor,
                             transform: large_batch_lib.DistinctRowsTransform) -> Optional[List[tf.Tensor]]:
        """With `dedup`, and `others` deduplicated tables too: one `Unique` for all of them; else None."""
        tables = (self,) + tuple(others)
        variables = [table.variable for table in tables if isinstance(table, VariableTable) and table._dedup]
        if len(variables) != len(tables):
            return None
        distinct, index, counts = tf.unique_with_counts(tf.reshape(ids, [-1]), out_idx=tf.int32)
        return [_spread(transform(_gather(variable, distinct), counts), index, ids) for variable in variables]


class LargeBatchTable(EmbeddingTable):
    """A table whose looked-up rows pass through a large-batch rule.

    Where the inner tables look each distinct id up once
    (`lookup_distinct_with`), the rule works on the distinct rows
    (`LargeBatchRule.distinct_rows`); else on the rows of every occurrence
    (`LargeBatchRule.lookup_rows`).
    """

    def __init__(self, table: EmbeddingTable, rule: large_batch_lib.LargeBatchRule):
        super().__init__(table.name, table.shape)
        self.table = table
        self._rule = rule

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        return self.lookup_with([], ids)[0]

    def lookup_with(self, others: Sequence[EmbeddingTable], ids: tf.Tensor) -> List[tf.Tensor]:
        """The inner tables looked up together, the rule applied to each table's distinct or spread rows."""
        inner = [other.table if isinstance(other, LargeBatchTable) else other for other in others]
        rows = self.table.lookup_distinct_with(inner, ids, self._rule.distinct_rows)
        if rows is not None:
            return rows
        return [self._rule.lookup_rows(rows, ids) for rows in self.table.lookup_with(inner, ids)]

    def variables(self) -> List[tf.Variable]:
        return self.table.variables()


def _spread(rows: tf.Tensor, index: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
    """The rows of distinct ids, gathered to the shape of `ids` (`index`: each id's distinct row)."""
    spread = tf.gather(rows, index)
    looked_up = tf.reshape(spread, tf.concat([tf.shape(ids), tf.shape(spread)[1:]], axis=0))
    looked_up.set_shape(ids.shape.concatenate(spread.shape[1:]))
    return looked_up


def _gather(table, ids: tf.Tensor) -> tf.Tensor:
    """`table[ids]`, also for a partitioned table ('div' rows)."""
    return tf.compat.v1.nn.embedding_lookup(table, ids, partition_strategy="div")


EmbeddingFactory = Callable[[str, Sequence[int], Optional[object]], EmbeddingTable]


@dataclasses.dataclass(frozen=True)
class VariableTables:
    """Creates `VariableTable`s with `partitioner` and `dedup` (an `EmbeddingFactory`)."""

    partitioner: Optional[Callable] = None
    dedup: bool = False

    def __call__(self, name: str, shape: Sequence[int], initializer=None) -> VariableTable:
        return VariableTable(name, shape, initializer, partitioner=self.partitioner, dedup=self.dedup)


def variable_tables(partitioner=None, dedup: bool = False) -> EmbeddingFactory:
    """The factory of `VariableTable`s with `partitioner` and `dedup`."""
    return VariableTables(partitioner, dedup)


@dataclasses.dataclass(frozen=True)
class TablePartitionOptions:
    """The option of an adapter whose tables live whole in each process: how many row ranges each is split into.

    Attributes:
      table_partitions: each embedding table as this many variables of
        contiguous rows in this process (1: one variable). The lookups, the
        duplicate-gradient sums and the sparse optimizer updates of the
        partitions are independent ops that the session's inter-op threads
        run side by side: more of a host's cores for one process, where
        one table's chain of gathers and scatters is otherwise serial.
        Checkpoints hold each table whole (as slices), so a model directory
        resumes at any number of partitions.
    """

    table_partitions: int = options_lib.option(
        ONE_PARTITION, "Each embedding table as this many row ranges in this process, whose lookups and sparse "
        "updates run side by side on the session's inter-op threads (1: one variable).")

    def __post_init__(self):
        options_lib.check_at_least("table_partitions", self.table_partitions, ONE_PARTITION)


def row_partitioner(partitions: int) -> Optional[Callable]:
    """A partitioner of a table into `partitions` contiguous row ranges ('div' lookups), or None for one variable."""
    if partitions <= ONE_PARTITION:
        return None
    return tf.compat.v1.fixed_size_partitioner(num_shards=partitions)
