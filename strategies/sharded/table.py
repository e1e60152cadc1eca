"""One embedding table split by rows over the Horovod ranks, and lookups of several tables in one exchange.

`ShardedEmbedding` holds this rank's shard (`strategies.sharded.ownership`
says which rows) and looks ids up with the exchanges of
`strategies.sharded.exchange`. Tables looked up with the same ids share one
id exchange (one `IdRouting`), and `lookup_together` moves their rows side
by side in one exchange of rows (and their gradients in its reverse).

Under `hvd.DistributedOptimizer`, register each shard with
`register_local_var`: its gradient, an `IndexedSlices` over the owner's
local rows summed over the ranks, is then not allgathered, and
`scale_local_gradients` (the default) divides it by the number of ranks,
which matches the average of the dense gradients.
"""

from typing import List, Optional, Sequence, Tuple

import tensorflow as tf

from strategies import devices
from strategies.large_batch import DistinctRowsTransform
from strategies.sharded import exchange, ownership

# The shard of table `<scope>/<name>` is the variable `<scope>/<name>/local_shard`;
# its optimizer slots are `<scope>/<name>/local_shard/<slot>`. Non-zero ranks
# save and restore their shards (for evaluation) under these names.
SHARD_SUFFIX = "local_shard"
# An `id_capacity` of None: exchanges of variable size.
NOT_PADDED = None


class ShardedEmbedding:
    """One embedding table split by rows over the Horovod ranks.

    Creating it creates this rank's shard, `<scope>/<name>/local_shard`
    ([shard_rows, width]), with `tf.compat.v1.get_variable` in the current
    variable scope, so that `AUTO_REUSE` scopes share it.

    Args:
      name: the table's name in its variable scope, e.g. `fm_v`.
      num_rows: the rows of the whole table (ids are in [0, num_rows)).
      width: the row width, or None for a table of scalars ([num_rows],
        e.g. the FM first-order weights).
      rank: this rank.
      size: the number of ranks.
      hvd: `horovod.tensorflow`, initialized.
      initializer: the initializer of the whole table (see
        `ownership.shard_initializer`); None: Glorot uniform.
      dtype: the table's dtype.
      exchange_fp16: send the looked-up rows, and their gradients, as
        float16 (half the bytes; rounding errors of about 1e-3 relative).
      id_capacity: None for exchanges of variable size; else a padded
        exchange (`exchange.IdCapacity`) starting at this many places per
        owner (`exchange.SIZE_FROM_FIRST_BATCH`: sized from the first
        batch), grown when a batch needs more.

    Raises:
      ValueError: a bad size, rank, number of rows, width or capacity.
      TypeError: a dtype that is not floating point.
    """

    def __init__(self, name: str, num_rows: int, width: Optional[int], rank: int, size: int, hvd,
                 initializer=None, dtype: tf.DType = tf.float32, exchange_fp16: bool = False,
                 id_capacity: Optional[int] = NOT_PADDED):
        ownership.check_topology(rank, size)
        if num_rows < 1:
            raise ValueError("sharded embedding %r: num_rows must be >= 1, got %r" % (name, num_rows))
        if width is not None and width < 1:
            raise ValueError("sharded embedding %r: width must be >= 1 or None, got %r" % (name, width))
        if id_capacity is not None and id_capacity < 0:
            raise ValueError("sharded embedding %r: id_capacity must be >= 0 or None, got %r"
                             % (name, id_capacity))
        dtype = tf.as_dtype(dtype)
        if not dtype.is_floating:
            raise TypeError("sharded embedding %r: dtype must be floating point, got %s" % (name, dtype.name))
        self.name = name
        self.num_rows = num_rows
        self.width = width
        self.rank = rank
        self.size = size
        self.dtype = dtype
        self.exchange_fp16 = exchange_fp16
        self.id_capacity = id_capacity
        self.row_shape: Tuple[int, ...] = () if width is None else (width,)
        self.row_dtype = ownership.row_dtype(num_rows, size)
        self.hvd = hvd
        self._last_stats: Optional[exchange.LookupStats] = None
        shard_shape = [ownership.shard_rows(num_rows, rank, size)] + list(self.row_shape)
        self.variable = tf.compat.v1.get_variable(
            name + "/" + SHARD_SUFFIX, shard_shape, dtype=dtype,
            initializer=ownership.shard_initializer(initializer, [num_rows] + list(self.row_shape), shard_shape,
                                                    rank))
        self.full_name = self.variable.op.name[:-len("/" + SHARD_SUFFIX)]

    @property
    def shard_rows(self) -> int:
        """The rows of this rank's shard."""
        return ownership.shard_rows(self.num_rows, self.rank, self.size)

    @property
    def padded(self) -> bool:
        """Whether this table's id exchanges are padded to fixed places per owner."""
        return self.id_capacity is not None

    @property
    def routing_settings(self) -> Tuple:
        """What a routing must match to serve this table: (ranks, padded, row dtype)."""
        return self.size, self.padded, self.row_dtype

    @property
    def exchange_settings(self) -> Tuple:
        """What tables must share to move their rows in one exchange."""
        return self.routing_settings + (self.dtype, self.exchange_fp16)

    @property
    def wire_dtype(self) -> Optional[tf.DType]:
        """The dtype rows and gradients travel in (None: the table's)."""
        return tf.float16 if self.exchange_fp16 else None

    def route(self, ids: tf.Tensor) -> exchange.IdRouting:
        """The id exchange of `ids` (`exchange.route_ids`) with this table's settings (a collective)."""
        capacity = None
        if self.id_capacity is not None:
            capacity = exchange.IdCapacity(self.name + "_places_per_owner", start=self.id_capacity)
        return exchange.route_ids(ids, self.size, self.hvd, capacity=capacity, row_dtype=self.row_dtype,
                                  name=self.name)

    def lookup(self, ids: tf.Tensor, routing: Optional[exchange.IdRouting] = None) -> tf.Tensor:
        """The rows of `ids`: `tf.gather(full_table, ids)` (a collective).

        Args:
          ids: int32 or int64, any shape, each in [0, num_rows).
          routing: the id exchange of these same `ids` from `route` of a table
            with the same `routing_settings` (e.g. the FM weights and factors
            share one); None: exchange them here.

        Returns:
          `ids.shape + [width]` (`ids.shape` for a table of scalars).

        Raises:
          ValueError: a routing made for other settings.
        """
        return lookup_together([self], ids, routing)[0]

    def serve(self, local_rows: tf.Tensor) -> tf.Tensor:
        """The shard's rows asked for; zeros in the unused places of a padded exchange.

        A local row past the shard (an id >= num_rows) fails with the id and
        the table's size in the message.
        """
        checks = [tf.debugging.assert_less(
            local_rows, tf.cast(self.shard_rows, local_rows.dtype),
            message="sharded embedding %r: an id is >= its %d rows (the owner's local rows asked for, below: "
                    "id = local row x %d + %d); check --feature_size or the data"
                    % (self.name, self.num_rows, self.size, self.rank), summarize=8)]
        with tf.control_dependencies(checks):
            if not self.padded:
                return tf.gather(self.variable, local_rows)
            places = tf.where(local_rows >= 0)
            rows = tf.gather(self.variable, tf.gather_nd(local_rows, places))
            return tf.scatter_nd(places, rows, tf.concat(
                [tf.shape(local_rows, out_type=tf.int64), tf.constant(self.row_shape, tf.int64)], axis=0))

    @property
    def lookup_stats(self) -> exchange.LookupStats:
        """The counters of the latest `lookup`.

        Raises:
          ValueError: nothing was looked up yet.
        """
        if self._last_stats is None:
            raise ValueError("sharded embedding %r: no lookup yet" % self.name)
        return self._last_stats

    def slot_variables(self, variables: Optional[Sequence[tf.Variable]] = None) -> List[tf.Variable]:
        """The optimizer slots of the shard: the variables named `<shard name>/...`.

        Args:
          variables: where to look; default: the graph's global variables.

        Raises:
          ValueError: a slot whose shape is not the shard's (a slot that is
            not one value per row, which cannot be split by rows).
        """
        if variables is None:
            variables = tf.compat.v1.global_variables()
        prefix = self.variable.op.name + "/"
        slots = [v for v in variables if v.op.name.startswith(prefix)]
        for slot in slots:
            if slot.shape != self.variable.shape:
                raise ValueError(
                    "sharded embedding %r: optimizer slot %s has shape %s, the shard %s: only optimizers "
                    "with one slot value per table value (Adam, LazyAdam, Adagrad, momentum, FTRL) can "
                    "train a sharded table" % (self.name, slot.op.name, slot.shape, self.variable.shape))
        return slots

    def checkpoint_name(self, variable: tf.Variable) -> str:
        """The unsharded name of the shard or one of its slots: `<full_name>[/<slot>]`."""
        return self.full_name + variable.op.name[len(self.variable.op.name):]


def can_share_exchange(table: ShardedEmbedding, other: ShardedEmbedding) -> bool:
    """Whether `lookup_together` can move the rows of both tables in one exchange."""
    return table.exchange_settings == other.exchange_settings


def check_group(tables: Sequence[ShardedEmbedding], routing: Optional[exchange.IdRouting] = None) -> None:
    """Raises ValueError unless `tables` can share one exchange of rows (and `routing`, if given)."""
    if not tables:
        raise ValueError("a lookup needs at least one table")
    first = tables[0]
    for table in tables[1:]:
        if not can_share_exchange(first, table):
            raise ValueError(
                "sharded embeddings %r and %r cannot share an exchange: (ranks, padded, row dtype, dtype, "
                "exchange_fp16) differ: %s against %s; look them up separately"
                % (first.name, table.name, first.exchange_settings, table.exchange_settings))
    if routing is not None and routing.settings != first.routing_settings:
        raise ValueError(
            "sharded embedding %r: the routing was made for (ranks, padded, row dtype) = %s; this table has %s: "
            "route the ids with this table's route()" % (first.name, routing.settings, first.routing_settings))


def widths(tables: Sequence[ShardedEmbedding]) -> List[int]:
    """Each table's columns in a row of the shared exchange."""
    return [table.width or 1 for table in tables]


def serve_rows(tables: Sequence[ShardedEmbedding], routing: exchange.IdRouting) -> tf.Tensor:
    """This rank's rows of every table for `routing.received_rows`, side by side: [received, sum of widths]."""
    with tf.device(devices.HOST_DEVICE):
        served = [tf.reshape(table.serve(routing.received_rows), [-1, width])
                  for table, width in zip(tables, widths(tables))]
        return served[0] if len(served) == 1 else tf.concat(served, axis=1)


def rows_by_table(tables: Sequence[ShardedEmbedding], returned: tf.Tensor, routing: exchange.IdRouting,
                  transform: Optional[DistinctRowsTransform] = None) -> List[tf.Tensor]:
    """The rows returned by an exchange of `tables` (side by side), each table's in the ids' shape.

    `transform`, where given, is applied to each table's rows of the
    exchange's places (one per distinct id, and the unused places of a
    padded exchange, whose count is 0) before they are spread.
    """
    parts = [returned] if len(tables) == 1 else tf.split(returned, widths(tables), axis=1)
    counts = None
    if transform is not None:
        places = tf.shape(returned)[0]
        counts = tf.math.bincount(routing.batch_positions, minlength=places, maxlength=places, dtype=tf.int32)
    looked_up = []
    for table, part in zip(tables, parts):
        part = tf.reshape(part, [-1] + list(table.row_shape))
        if transform is not None:
            part = transform(part, counts)
        rows = tf.reshape(exchange.rows_of_batch(part, routing.batch_positions),
                          tf.concat([routing.ids_shape, list(table.row_shape)], axis=0))
        rows.set_shape(routing.static_ids_shape.concatenate(table.row_shape))
        table._last_stats = routing.stats
        looked_up.append(rows)
    return looked_up


def lookup_together(tables: Sequence[ShardedEmbedding], ids: tf.Tensor,
                    routing: Optional[exchange.IdRouting] = None,
                    transform: Optional[DistinctRowsTransform] = None) -> List[tf.Tensor]:
    """The rows of `ids` in each of `tables`, in one exchange of rows (a collective).

    The tables' rows travel side by side in one all-to-all (and their
    gradients in its reverse), instead of one pair of all-to-alls per table:
    DeepFM's weights and factors of the same ids cost one exchange.

    Args:
      tables: one or more tables with the same `exchange_settings`.
      ids: int32 or int64, any shape, each in [0, num_rows) of every table.
      routing: the id exchange of these same `ids` from `route` of a table
        with those settings; None: exchange them here.
      transform: `(rows, counts) -> rows` applied to each table's rows of
        the exchange's places and their int32 occurrences in `ids`, before
        they are spread (a large-batch rule's `distinct_rows`); None: none.

    Returns:
      For each table, `ids.shape + row_shape`.

    Raises:
      ValueError: no tables, tables of different settings, or a routing made
        for other settings.
    """
    check_group(tables, routing)
    first = tables[0]
    if routing is None:
        routing = first.route(ids)
    with tf.name_scope("_".join(table.name for table in tables) + "_lookup"):
        returned = exchange.exchange_rows(serve_rows(tables, routing), routing, first.hvd, first.wire_dtype)
        return rows_by_table(tables, returned, routing, transform)
