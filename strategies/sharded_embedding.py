"""Embedding tables split by rows over Horovod ranks and looked up all-to-all.

The building blocks of hybrid parallelism: each embedding table is split
by rows over the ranks, and each rank holds and updates only its rows,
while the dense variables stay replicated and data-parallel.

Ownership is a modulo: id `i` lives on rank `i % size`, at local row
`i // size` of that rank's shard. Criteo ids are numbered by frequency, so
the hot ids (small numbers) spread evenly over the ranks.

A lookup (`ShardedEmbedding.lookup`) runs, on every rank at once:

1. `tf.unique` over the batch's ids;
2. the distinct ids grouped by owner and their local rows sent to the
   owners by `hvd.alltoall` with per-rank splits (`route_ids`);
3. each owner gathers the requested rows of its shard, and a second
   alltoall returns them to the ranks that asked;
4. the rows are scattered back to the batch's shape.

Tables looked up with the same ids share steps 1-2 (one `IdRouting`), and
`lookup_together` moves their rows side by side in one exchange of step 3.

Horovod registers the reverse all-to-all as the gradient of an alltoall, so
the backward pass brings every rank's gradient for a row to the row's owner,
where the gradient of the shard is an `IndexedSlices` over the owner's local
rows only (summed over the ranks). Under `hvd.DistributedOptimizer`,
register each shard with `register_local_var`: its gradient is then not
allgathered, and `scale_local_gradients` (the default) divides it by the
number of ranks, which matches the average of the dense gradients.

Checkpoints (`ShardedCheckpoint`) do not depend on the number of ranks:
rank 0's checkpoint holds every table, and every optimizer slot of it, as the
full unsharded tensor under the single-process name (`deepfm_model/fm_v`,
`deepfm_model/fm_v/Adam`, ...), gathered from every rank while saving. Any
number of ranks, and a plain single-process graph, can restore it.

Every function here that exchanges data is a collective: every rank must
build the same graph and run the same steps, saves and restores. Hence:

* export a SavedModel from a plain single-process graph of the same names
  (rank 0 exports alone, and the sharded saver's save is a collective);
* rank 0 holds one whole table (or slot) in memory while saving, and all
  of them, read from its checkpoint, while `RestoreShardsHook` scatters them;
* ids must be in [0, num_rows): an id out of range fails in the owner's
  gather with its local row (`id // size`) in the message.
"""

import dataclasses
import re
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
# No public API builds a custom `SaveableObject` for `tf.compat.v1.train.Saver`.
from tensorflow.python.training.saving import saveable_object

from strategies import devices

# The shard of table `<scope>/<name>` is the variable `<scope>/<name>/local_shard`;
# its optimizer slots are `<scope>/<name>/local_shard/<slot>`. Non-zero ranks
# save and restore their shards (for evaluation) under these names.
SHARD_SUFFIX = "local_shard"
ROOT_RANK = 0
# Fills the unused places of a padded id exchange (`id_capacity`).
PADDING_ROW = -1
INT32_MAX = 2**31 - 1
ID_DTYPES = (tf.int32, tf.int64)
FAN_MODES = ("fan_in", "fan_out", "fan_avg")
# Distinct ranks draw distinct shards from a seeded initializer.
SEED_STRIDE_PER_RANK = 7919
# `RestoreShardsHook`: what rank 0 tells the other ranks before the scatter.
NOTHING_TO_RESTORE, RESTORE, RESTORE_FAILED = 0, 1, 2


def _check_topology(rank: int, size: int) -> None:
    if size < 1:
        raise ValueError("the number of ranks must be >= 1, got size=%r" % size)
    if not 0 <= rank < size:
        raise ValueError("rank must be in [0, size=%d), got rank=%r" % (size, rank))


def shard_rows(num_rows: int, rank: int, size: int) -> int:
    """The number of rows of a `num_rows` table that `rank` of `size` owns.

    Rank r owns ids r, r + size, r + 2 size, ... below `num_rows`.

    Raises:
      ValueError: `num_rows` < 0, `size` < 1 or `rank` outside [0, size).
    """
    _check_topology(rank, size)
    if num_rows < 0:
        raise ValueError("num_rows must be >= 0, got %r" % num_rows)
    return max(0, (num_rows - rank + size - 1) // size)


def owned_ids(num_rows: int, rank: int, size: int) -> np.ndarray:
    """The ids `rank` owns, in local-row order: int64 [shard_rows(num_rows, rank, size)]."""
    _check_topology(rank, size)
    return np.arange(rank, num_rows, size, dtype=np.int64)


def rank_order(num_rows: int, size: int) -> np.ndarray:
    """Every id, rank 0's first, each rank's in local-row order: the concatenated shards.

    `full_table[rank_order(n, size)]` is the concatenation of every rank's
    shard in rank order: what an all-to-all from rank 0 scatters.
    """
    return np.concatenate([owned_ids(num_rows, rank, size) for rank in range(size)])


def first_rows(num_rows: int, size: int) -> np.ndarray:
    """Where each rank's shard starts in the concatenated shards: int64 [size]."""
    counts = [shard_rows(num_rows, rank, size) for rank in range(size)]
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def id_order_positions(num_rows: int, size: int) -> np.ndarray:
    """The position of each id in the concatenated shards: the inverse of `rank_order`.

    `concatenated_shards[id_order_positions(n, size)]` is the full table.
    """
    ids = np.arange(num_rows, dtype=np.int64)
    return first_rows(num_rows, size)[ids % size] + ids // size


def id_order_positions_tensor(num_rows: int, size: int) -> tf.Tensor:
    """`id_order_positions` computed in the graph (no constant of `num_rows` elements)."""
    ids = tf.range(num_rows, dtype=tf.int64)
    return tf.gather(tf.constant(first_rows(num_rows, size)), ids % size) + ids // size


def owner_of(ids: tf.Tensor, size: int) -> tf.Tensor:
    """The rank owning each id: int32 `ids % size`, the shape of `ids`."""
    ids = tf.convert_to_tensor(ids)
    return tf.cast(ids % tf.cast(size, ids.dtype), tf.int32)


def local_row_of(ids: tf.Tensor, size: int) -> tf.Tensor:
    """Each id's row in its owner's shard: `ids // size`, the dtype and shape of `ids`."""
    ids = tf.convert_to_tensor(ids)
    return ids // tf.cast(size, ids.dtype)


def group_by_owner(distinct_ids: tf.Tensor, size: int, capacity: Optional[int] = None,
                   row_dtype: tf.DType = tf.int32, name: str = "ids") -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The send buffer of an id exchange: local rows grouped by owner.

    Args:
      distinct_ids: int [n] distinct ids.
      size: the number of ranks.
      capacity: None: the buffer holds the n rows, rank 0's first, and
        `splits[r]` of them go to rank r. An int: the buffer holds `capacity`
        places per rank (`size * capacity`, a fixed shape), rank r's rows
        first in places `[r * capacity, (r + 1) * capacity)`, the rest
        `PADDING_ROW`; every split is `capacity`.
      row_dtype: the dtype of the local rows sent.
      name: names the table in the error of an overflowing capacity.

    Returns:
      send: `row_dtype` [n] or [size * capacity]: local rows (`id // size`).
      splits: int32 [size]: how many places go to each rank.
      positions: int32 [n]: where each distinct id's local row is in `send`
        (and where its row comes back after the reverse exchange).

    Raises:
      tf.errors.InvalidArgumentError: at run time, more than `capacity`
        distinct ids for one rank.
    """
    distinct_ids = tf.convert_to_tensor(distinct_ids)
    owners = owner_of(distinct_ids, size)
    rows = tf.cast(local_row_of(distinct_ids, size), row_dtype)
    order = tf.argsort(owners, stable=True)
    positions = tf.math.invert_permutation(order)
    counts = tf.math.bincount(owners, minlength=size, maxlength=size, dtype=tf.int32)
    if capacity is None:
        return tf.gather(rows, order), counts, positions
    fits = tf.debugging.assert_less_equal(
        counts, tf.constant(capacity, tf.int32),
        message="sharded embedding %r: a batch has more distinct ids for one rank than id_capacity=%d "
                "(distinct ids per rank below); raise id_capacity (at most the ids in a batch), or "
                "leave it unset for an exchange of variable size" % (name, capacity))
    starts = tf.cumsum(counts, exclusive=True)
    padded_positions = owners * capacity + positions - tf.gather(starts, owners)
    with tf.control_dependencies([fits]):
        send = tf.tensor_scatter_nd_update(
            tf.fill([size * capacity], tf.constant(PADDING_ROW, row_dtype)),
            tf.expand_dims(padded_positions, 1), rows)
    return send, tf.fill([size], tf.constant(capacity, tf.int32)), padded_positions


@dataclasses.dataclass(frozen=True)
class IdRouting:
    """Where a batch's ids went in an id exchange (`route_ids`); a lookup brings their rows back.

    Attributes:
      size: the number of ranks.
      capacity: the fixed places per rank of a padded exchange, or None.
      row_dtype: the dtype of the local rows exchanged.
      ids_shape: int32 [rank of ids]: the shape of the ids looked up.
      static_ids_shape: their static shape.
      batch_positions: int32 [ids]: for each flattened id, where its row
        arrives in the reverse exchange.
      received_rows: [received]: the local rows other ranks asked this rank
        for, in the order of the reverse exchange (`PADDING_ROW` in unused
        places of a padded exchange).
      received_splits: int32 [size]: how many of them came from each rank.
      distinct_ids: int32 scalar: the distinct ids this rank looked up.
      rows_served: int32 scalar: the rows this rank serves to all ranks
        (itself included).
    """

    size: int
    capacity: Optional[int]
    row_dtype: tf.DType
    ids_shape: tf.Tensor
    static_ids_shape: tf.TensorShape
    batch_positions: tf.Tensor
    received_rows: tf.Tensor
    received_splits: tf.Tensor
    distinct_ids: tf.Tensor
    rows_served: tf.Tensor


def route_ids(ids: tf.Tensor, size: int, hvd, capacity: Optional[int] = None, row_dtype: tf.DType = tf.int32,
              name: str = "ids") -> IdRouting:
    """Sends each distinct id of `ids` to its owner (a collective).

    Tables with the same number of ranks may share one routing, i.e. one
    id exchange, for the same ids (`ShardedEmbedding.lookup(ids, routing)`).

    Args:
      ids: int32 or int64 ids, any shape.
      size: the number of ranks.
      hvd: `horovod.tensorflow`, initialized.
      capacity: None, or the fixed number of distinct ids per rank of a
        padded exchange (`group_by_owner`): a fixed shape for Horovod's
        response cache.
      row_dtype: int32, or int64 for a shard of more than 2**31 - 1 rows.
      name: the name scope, and the table named in errors.

    Raises:
      TypeError: ids of another dtype than int32 or int64.
    """
    ids = tf.convert_to_tensor(ids)
    if ids.dtype not in ID_DTYPES:
        raise TypeError("sharded embedding %r: ids must be int32 or int64, got %s" % (name, ids.dtype.name))
    with tf.name_scope(name + "_route"), tf.device(devices.HOST_DEVICE):
        distinct, batch_index = tf.unique(tf.reshape(ids, [-1]), out_idx=tf.int32)
        send, splits, positions = group_by_owner(distinct, size, capacity, row_dtype, name)
        received, received_splits = hvd.alltoall(send, splits=splits, name="ids_to_owners")
        if capacity is None:
            served = tf.size(received)
        else:
            served = tf.reduce_sum(tf.cast(received >= 0, tf.int32))
        return IdRouting(
            size=size, capacity=capacity, row_dtype=row_dtype, ids_shape=tf.shape(ids),
            static_ids_shape=ids.shape, batch_positions=tf.gather(positions, batch_index),
            received_rows=received, received_splits=received_splits,
            distinct_ids=tf.size(distinct), rows_served=served)


def _rows_of_batch(rows: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """`tf.gather(rows, positions)` whose gradient is a dense segment sum.

    The gradient goes on into the reverse all-to-all, which needs a dense
    tensor: this avoids TensorFlow's conversion of an `IndexedSlices` of
    unknown shape.
    """

    @tf.custom_gradient
    def gather(rows):
        def gradient(upstream):
            return tf.math.unsorted_segment_sum(upstream, positions, tf.shape(rows)[0])
        return tf.gather(rows, positions), gradient

    return gather(rows)


def _fans(shape: Sequence[int]) -> Tuple[int, int]:
    """(fan_in, fan_out) of a shape, as TensorFlow's variance-scaling initializers count them."""
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


def _fan(shape: Sequence[int], mode: str) -> float:
    fan_in, fan_out = _fans(shape)
    return {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[mode]


def shard_initializer(initializer, full_shape: Sequence[int], shard_shape: Sequence[int], rank: int):
    """An initializer that draws a shard as `initializer` would draw the full table.

    A variance-scaling initializer (Glorot, He, ... of `tf.compat.v1` or
    Keras) scales by the fans of the shape it is given; here the scale is
    adjusted so that a shard's values have the full table's distribution,
    and an explicit seed is offset by the rank so that shards differ. Other
    initializers (zeros, constants, fixed normal or uniform) do not depend on
    the shape and are returned as they are.

    Args:
      initializer: an initializer, or None for `get_variable`'s default
        (Glorot uniform).
      full_shape: the unsharded table's shape.
      shard_shape: this rank's shard's shape.
      rank: this rank.
    """
    if initializer is None:
        initializer = tf.compat.v1.glorot_uniform_initializer()
    mode = getattr(initializer, "mode", None)
    if mode not in FAN_MODES or not hasattr(initializer, "scale") or not hasattr(initializer, "distribution"):
        return initializer
    shard_fan = _fan(shard_shape, mode)
    if not shard_fan:
        return initializer
    seed = initializer.seed
    return tf.compat.v1.variance_scaling_initializer(
        scale=initializer.scale * shard_fan / _fan(full_shape, mode), mode=mode,
        distribution=initializer.distribution,
        seed=None if seed is None else seed + SEED_STRIDE_PER_RANK * rank)


class LookupStats(NamedTuple):
    """Per-step counters of one lookup, for reporting (a `session.run` fetch).

    Attributes:
      distinct_ids: int32 scalar: the distinct ids this rank looked up.
      rows_served: int32 scalar: the rows this rank served to all ranks.
    """

    distinct_ids: tf.Tensor
    rows_served: tf.Tensor


class ShardedEmbedding:
    """One embedding table split by rows over the Horovod ranks (see the module docstring).

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
        `shard_initializer`); None: Glorot uniform.
      dtype: the table's dtype.
      exchange_fp16: send the looked-up rows, and their gradients, as
        float16 (half the bytes; rounding errors of about 1e-3 relative).
      id_capacity: None, or the fixed number of distinct ids a batch may send
        to each rank (`group_by_owner`): a fixed shape for Horovod's
        response cache; a batch with more fails with an error naming it.

    Raises:
      ValueError: a bad size, rank, number of rows, width or capacity.
      TypeError: a dtype that is not floating point.
    """

    def __init__(self, name: str, num_rows: int, width: Optional[int], rank: int, size: int, hvd,
                 initializer=None, dtype: tf.DType = tf.float32, exchange_fp16: bool = False,
                 id_capacity: Optional[int] = None):
        _check_topology(rank, size)
        if num_rows < 1:
            raise ValueError("sharded embedding %r: num_rows must be >= 1, got %r" % (name, num_rows))
        if width is not None and width < 1:
            raise ValueError("sharded embedding %r: width must be >= 1 or None, got %r" % (name, width))
        if id_capacity is not None and id_capacity < 1:
            raise ValueError("sharded embedding %r: id_capacity must be >= 1 or None, got %r"
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
        self.row_dtype = tf.int32 if -(-num_rows // size) <= INT32_MAX else tf.int64
        self._hvd = hvd
        self._last_stats: Optional[LookupStats] = None
        shard_shape = [shard_rows(num_rows, rank, size)] + list(self.row_shape)
        self.variable = tf.compat.v1.get_variable(
            name + "/" + SHARD_SUFFIX, shard_shape, dtype=dtype,
            initializer=shard_initializer(initializer, [num_rows] + list(self.row_shape), shard_shape, rank))
        self.full_name = self.variable.op.name[:-len("/" + SHARD_SUFFIX)]

    @property
    def shard_rows(self) -> int:
        """The rows of this rank's shard."""
        return shard_rows(self.num_rows, self.rank, self.size)

    def route(self, ids: tf.Tensor) -> IdRouting:
        """The id exchange of `ids` (`route_ids`) with this table's settings (a collective)."""
        return route_ids(ids, self.size, self._hvd, capacity=self.id_capacity, row_dtype=self.row_dtype,
                         name=self.name)

    def lookup(self, ids: tf.Tensor, routing: Optional[IdRouting] = None) -> tf.Tensor:
        """The rows of `ids`: `tf.gather(full_table, ids)` (a collective).

        Args:
          ids: int32 or int64, any shape, each in [0, num_rows).
          routing: the id exchange of these same `ids` from `route` of a table
            with the same number of ranks, capacity and row dtype (e.g. the
            FM weights and factors share one); None: exchange them here.

        Returns:
          `ids.shape + [width]` (`ids.shape` for a table of scalars).

        Raises:
          ValueError: a routing made for other settings.
        """
        return lookup_together([self], ids, routing)[0]

    def _serve(self, local_rows: tf.Tensor) -> tf.Tensor:
        """The shard's rows asked for; zeros in the unused places of a padded exchange."""
        if self.id_capacity is None:
            return tf.gather(self.variable, local_rows)
        places = tf.where(local_rows >= 0)
        rows = tf.gather(self.variable, tf.gather_nd(local_rows, places))
        return tf.scatter_nd(places, rows, tf.concat(
            [tf.shape(local_rows, out_type=tf.int64), tf.constant(self.row_shape, tf.int64)], axis=0))

    @property
    def lookup_stats(self) -> LookupStats:
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


def _exchange_settings(table: ShardedEmbedding) -> Tuple:
    return table.size, table.id_capacity, table.row_dtype, table.dtype, table.exchange_fp16


def can_share_exchange(table: ShardedEmbedding, other: ShardedEmbedding) -> bool:
    """Whether `lookup_together` can move the rows of both tables in one exchange."""
    return _exchange_settings(table) == _exchange_settings(other)


def lookup_together(tables: Sequence[ShardedEmbedding], ids: tf.Tensor,
                    routing: Optional[IdRouting] = None) -> List[tf.Tensor]:
    """The rows of `ids` in each of `tables`, in one exchange of rows (a collective).

    The tables' rows travel side by side in one all-to-all (and their
    gradients in its reverse), instead of one pair of all-to-alls per table:
    DeepFM's weights and factors of the same ids cost one exchange.

    Args:
      tables: one or more tables with the same number of ranks, id capacity,
        row dtype, dtype and `exchange_fp16`.
      ids: int32 or int64, any shape, each in [0, num_rows) of every table.
      routing: the id exchange of these same `ids` from `route` of a table
        with those settings; None: exchange them here.

    Returns:
      For each table, `ids.shape + row_shape`.

    Raises:
      ValueError: no tables, tables of different settings, or a routing made
        for other settings.
    """
    if not tables:
        raise ValueError("lookup_together needs at least one table")
    first = tables[0]
    for table in tables[1:]:
        if not can_share_exchange(first, table):
            raise ValueError(
                "sharded embeddings %r and %r cannot share an exchange: (ranks, id_capacity, row dtype, dtype, "
                "exchange_fp16) differ: %s against %s; look them up separately"
                % (first.name, table.name, _exchange_settings(first), _exchange_settings(table)))
    if routing is None:
        routing = first.route(ids)
    elif (routing.size, routing.capacity, routing.row_dtype) != (first.size, first.id_capacity, first.row_dtype):
        raise ValueError(
            "sharded embedding %r: the routing was made for size=%d, id_capacity=%r, rows %s; this table "
            "has size=%d, id_capacity=%r, rows %s: route the ids with this table's route()"
            % (first.name, routing.size, routing.capacity, routing.row_dtype.name, first.size,
               first.id_capacity, first.row_dtype.name))
    widths = [table.width or 1 for table in tables]
    with tf.name_scope("_".join(table.name for table in tables) + "_lookup"):
        with tf.device(devices.HOST_DEVICE):
            served = [tf.reshape(table._serve(routing.received_rows), [-1, width])
                      for table, width in zip(tables, widths)]
            rows = served[0] if len(served) == 1 else tf.concat(served, axis=1)
            if first.exchange_fp16:
                rows = tf.cast(rows, tf.float16)
            returned, _ = first._hvd.alltoall(rows, splits=routing.received_splits, name="rows_to_askers")
            returned = tf.cast(returned, first.dtype)
            parts = [returned] if len(tables) == 1 else tf.split(returned, widths, axis=1)
        looked_up = []
        for table, part in zip(tables, parts):
            part = tf.reshape(part, [-1] + list(table.row_shape))
            rows_of_batch = tf.reshape(_rows_of_batch(part, routing.batch_positions),
                                       tf.concat([routing.ids_shape, list(table.row_shape)], axis=0))
            rows_of_batch.set_shape(routing.static_ids_shape.concatenate(table.row_shape))
            table._last_stats = LookupStats(distinct_ids=routing.distinct_ids, rows_served=routing.rows_served)
            looked_up.append(rows_of_batch)
    return looked_up


def _op_name(prefix: str, checkpoint_name: str) -> str:
    """An op name, the same on every rank, for a collective on one checkpoint tensor."""
    return prefix + "_" + re.sub(r"[^A-Za-z0-9_.-]", "_", checkpoint_name)


class _GatheredShardSaveable(saveable_object.SaveableObject):
    """Saves a shard (or a slot of it) as the full table on the root rank.

    Saving is a collective: every rank sends its whole shard to the root
    (an all-to-all whose splits send everything to one rank). The root saves
    the full tensor, in id order, under the unsharded name; the other ranks
    save their own shard under its own name. Restoring is local: the root
    takes its rows out of the full tensor (at any number of ranks), the
    others restore their own shard.
    """

    def __init__(self, table: ShardedEmbedding, variable: tf.Variable, hvd, root_rank: int):
        self._table = table
        self._variable = variable
        self._is_root = table.rank == root_rank
        checkpoint_name = table.checkpoint_name(variable)
        with tf.device(devices.HOST_DEVICE):
            value = variable.read_value()
            splits = tf.one_hot(root_rank, table.size, on_value=table.shard_rows, off_value=0, dtype=tf.int32)
            gathered, _ = hvd.alltoall(value, splits=splits, name=_op_name("gather_to_root", checkpoint_name))
            if self._is_root:
                name = checkpoint_name
                tensor = tf.gather(gathered, id_order_positions_tensor(table.num_rows, table.size))
            else:
                name = variable.op.name
                # Received nothing: appending it keeps the value and makes the
                # save wait for the collective (a control dependency alone is
                # pruned by the graph optimizer).
                tensor = tf.ensure_shape(tf.concat([value, gathered], axis=0), value.shape)
        super().__init__(variable, [saveable_object.SaveSpec(tensor, "", name)], name)

    def restore(self, restored_tensors, restored_shapes):
        del restored_shapes
        restored = restored_tensors[0]
        table = self._table
        if not self._is_root:
            return self._variable.assign(restored, read_value=False)
        full_shape = [table.num_rows] + list(table.row_shape)
        fits = tf.debugging.assert_equal(
            tf.shape(restored), tf.constant(full_shape, tf.int32),
            message="checkpoint tensor %r does not have the shape %s of sharded embedding %r (shape of the "
                    "checkpoint's tensor below): the checkpoint was written for another number of rows or "
                    "width" % (self.name, full_shape, table.name))
        with tf.control_dependencies([fits]):
            rows = tf.gather(restored, tf.range(table.rank, table.num_rows, table.size))
        return self._variable.assign(rows, read_value=False)


class ShardedCheckpoint:
    """Checkpoints of sharded tables whose layout does not depend on the number of ranks.

    * `saver()`: a `tf.compat.v1.train.Saver` for a model_fn's
      `Scaffold(saver=...)`. On rank 0 it saves every table and slot as the
      full tensor under its single-process name; on the other ranks their
      shards under `<full_name>/local_shard[/<slot>]`. Saving is a
      collective: every rank must save at the same steps (by steps, never by
      seconds). Restoring is local to each rank.
    * `RestoreShardsHook` / `ShardedCheckpointSaverHook`: after the session
      starts, rank 0 scatters every rank's rows from its checkpoint, so a job
      restarted at another number of ranks gets its rows back.
    * `replicated_variables()`: the variables to broadcast from rank 0 at the
      start (`hvd.broadcast_variables`), leaving the shards out.

    Build it in the model_fn after the optimizer created its slots.

    Args:
      tables: the sharded tables of the graph (one rank and size for all).
      hvd: `horovod.tensorflow`, initialized.
      root_rank: the rank that writes the real checkpoint.

    Raises:
      ValueError: no tables, tables of different ranks or sizes, or a bad
        root rank.
    """

    def __init__(self, tables: Sequence[ShardedEmbedding], hvd, root_rank: int = ROOT_RANK):
        if not tables:
            raise ValueError("ShardedCheckpoint needs at least one sharded table")
        topologies = {(table.rank, table.size) for table in tables}
        if len(topologies) > 1:
            raise ValueError("sharded tables of different (rank, size): %s" % sorted(topologies))
        (self.rank, self.size), = topologies
        _check_topology(root_rank, self.size)
        self.tables = list(tables)
        self.root_rank = root_rank
        self.hvd = hvd

    @property
    def is_root(self) -> bool:
        """Whether this rank writes the real checkpoint."""
        return self.rank == self.root_rank

    def sharded_variables(self, variables: Optional[Sequence[tf.Variable]] = None
                          ) -> List[Tuple[ShardedEmbedding, tf.Variable]]:
        """(table, variable) of every shard and every optimizer slot of one.

        Args:
          variables: where to look for slots; default: the global variables.
        """
        pairs = []
        for table in self.tables:
            pairs.append((table, table.variable))
            pairs.extend((table, slot) for slot in table.slot_variables(variables))
        return pairs

    def replicated_variables(self, variables: Optional[Sequence[tf.Variable]] = None) -> List[tf.Variable]:
        """The variables that are not shards or their slots (default: of the global variables)."""
        if variables is None:
            variables = tf.compat.v1.global_variables()
        sharded = {variable.ref() for _, variable in self.sharded_variables(variables)}
        return [variable for variable in variables if variable.ref() not in sharded]

    def saveables(self) -> List[saveable_object.SaveableObject]:
        """The saveable of every shard and slot (builds the save-time collectives)."""
        with tf.name_scope("sharded_checkpoint"):
            return [_GatheredShardSaveable(table, variable, self.hvd, self.root_rank)
                    for table, variable in self.sharded_variables()]

    def saver(self, **saver_kwargs) -> tf.compat.v1.train.Saver:
        """A `Saver` of the replicated variables and the sharded tables.

        Args:
          **saver_kwargs: for `tf.compat.v1.train.Saver` (e.g. `max_to_keep`);
            `sharded` and `save_relative_paths` default to True, as the
            Estimator's own saver.
        """
        saver_kwargs.setdefault("sharded", True)
        saver_kwargs.setdefault("save_relative_paths", True)
        return tf.compat.v1.train.Saver(var_list=self.replicated_variables() + self.saveables(), **saver_kwargs)

    def restore_hook(self, checkpoint_dir: Optional[str], broadcast_replicated: bool = True
                     ) -> "RestoreShardsHook":
        """A `RestoreShardsHook` reading rank 0's checkpoints in `checkpoint_dir`."""
        return RestoreShardsHook(self, checkpoint_dir, broadcast_replicated)


@dataclasses.dataclass(frozen=True)
class _Scatter:
    """The ops that scatter one checkpoint tensor from the root to every rank's shard."""

    table: ShardedEmbedding
    checkpoint_name: str
    rows: tf.Tensor
    splits: tf.Tensor
    assign: tf.Operation


class RestoreShardsHook(tf.estimator.SessionRunHook):
    """At session start, every rank takes rank 0's state: its rows from rank 0's checkpoint.

    Run it on every rank (a collective). Rank 0 reads the full tables and
    slots of its latest checkpoint in `checkpoint_dir` and sends each rank
    its rows with an all-to-all; with no checkpoint every rank keeps what the
    session initialized. Rank 0 first broadcasts whether it restores, so a
    missing checkpoint tensor stops every rank with an error. Then, with
    `broadcast_replicated`, rank 0's replicated variables (the global step
    included) are broadcast to every rank: use this instead of Horovod's
    `BroadcastGlobalVariablesHook`, which would broadcast the shards too.

    Put it before any `CheckpointSaverHook`: a save before it would write
    rows the other ranks have not received yet, and ranks whose global steps
    still differ would save at different steps and wait for each other for
    ever. The Estimator runs its own checkpoint saver before the model_fn's
    hooks, so with an Estimator use `ShardedCheckpointSaverHook`, which runs
    this first.

    Args:
      checkpoint: the graph's `ShardedCheckpoint`.
      checkpoint_dir: rank 0's checkpoint directory (ignored on the others).
      broadcast_replicated: also broadcast rank 0's replicated variables.
    """

    def __init__(self, checkpoint: ShardedCheckpoint, checkpoint_dir: Optional[str],
                 broadcast_replicated: bool = True):
        self._checkpoint = checkpoint
        self._checkpoint_dir = checkpoint_dir
        self._broadcast_replicated = broadcast_replicated
        self._scatters: List[_Scatter] = []
        self._decision: Optional[tf.Tensor] = None
        self._decision_input: Optional[tf.Tensor] = None
        self._broadcast: Optional[tf.Operation] = None

    def begin(self):
        checkpoint = self._checkpoint
        hvd = checkpoint.hvd
        with tf.name_scope("restore_shards"), tf.device(devices.HOST_DEVICE):
            self._decision_input = tf.compat.v1.placeholder(tf.int32, [], name="decision")
            self._decision = hvd.broadcast(self._decision_input, checkpoint.root_rank, name="restore_decision")
            self._scatters = []
            for table, variable in checkpoint.sharded_variables():
                name = table.checkpoint_name(variable)
                rows = tf.compat.v1.placeholder(variable.dtype.base_dtype, [None] + list(table.row_shape))
                splits = tf.compat.v1.placeholder(tf.int32, [checkpoint.size])
                received, _ = hvd.alltoall(rows, splits=splits, name=_op_name("scatter_from_root", name))
                self._scatters.append(_Scatter(table, name, rows, splits,
                                               variable.assign(received, read_value=False)))
            replicated = checkpoint.replicated_variables()
            self._broadcast = None
            if self._broadcast_replicated and replicated:
                self._broadcast = hvd.broadcast_variables(replicated, checkpoint.root_rank)

    def after_create_session(self, session, coord):
        del coord
        self.restore(session)
        if self._broadcast is not None:
            session.run(self._broadcast)

    def restore(self, session: tf.compat.v1.Session) -> bool:
        """Scatters rank 0's checkpoint to every rank (a collective); returns whether it did.

        Raises:
          ValueError: rank 0's checkpoint lacks a table or slot, or holds it
            in another shape (every rank raises).
        """
        checkpoint = self._checkpoint
        path, problems = None, []
        if checkpoint.is_root and self._checkpoint_dir:
            path = tf.train.latest_checkpoint(self._checkpoint_dir)
        if path is not None:
            shapes = dict(tf.train.list_variables(path))
            for scatter in self._scatters:
                expected = [scatter.table.num_rows] + list(scatter.table.row_shape)
                found = shapes.get(scatter.checkpoint_name)
                if found != expected:
                    problems.append("%s: %s in the checkpoint, %s expected" % (
                        scatter.checkpoint_name, "missing" if found is None else found, expected))
        decision = RESTORE_FAILED if problems else (NOTHING_TO_RESTORE if path is None else RESTORE)
        decision = session.run(self._decision, {self._decision_input: decision})
        if decision == RESTORE_FAILED:
            raise ValueError(
                "rank %d's checkpoint %s cannot restore the sharded tables: %s. Use a model_dir written "
                "with the same tables and optimizer" % (checkpoint.root_rank, path, "; ".join(problems))
                if problems else "rank %d could not restore the sharded tables from its checkpoint; its "
                "log names the problem" % checkpoint.root_rank)
        if decision == NOTHING_TO_RESTORE:
            return False
        feeds = {}
        reader = tf.train.load_checkpoint(path) if path is not None else None
        for scatter in self._scatters:
            table = scatter.table
            if reader is not None:
                rows = reader.get_tensor(scatter.checkpoint_name)[rank_order(table.num_rows, table.size)]
                splits = [shard_rows(table.num_rows, rank, table.size) for rank in range(table.size)]
            else:
                rows = np.zeros([0] + list(table.row_shape))
                splits = [0] * table.size
            feeds[scatter.rows] = rows.astype(scatter.rows.dtype.as_numpy_dtype)
            feeds[scatter.splits] = splits
        session.run([scatter.assign for scatter in self._scatters], feeds)
        return True


class ShardedCheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """A `CheckpointSaverHook` that first gives every rank rank 0's state (`RestoreShardsHook`).

    Give it to the Estimator in `training_chief_hooks` on every rank (each
    Horovod rank is a chief to its Estimator): it then replaces the
    Estimator's own saver, and the shards are restored and the replicated
    variables broadcast before the first save. It saves by steps only, so
    that every rank saves at the same steps; the ranks must start from the
    same global step, which the broadcast ensures.

    Args:
      checkpoint_dir: this rank's checkpoint directory (rank 0's model_dir,
        a private one on the others).
      checkpoint: the graph's `ShardedCheckpoint`.
      save_steps: save every this many steps, > 0.
      scaffold: the model_fn's `Scaffold`, holding `checkpoint.saver()`.
      broadcast_replicated: also broadcast rank 0's replicated variables at
        the start; leave it on unless a hook that runs before this one does.
      **kwargs: for `CheckpointSaverHook` (`checkpoint_basename`,
        `listeners`, `save_graph_def`).

    Raises:
      ValueError: `save_steps` < 1.
    """

    def __init__(self, checkpoint_dir: str, checkpoint: ShardedCheckpoint, save_steps: int,
                 scaffold: tf.compat.v1.train.Scaffold, broadcast_replicated: bool = True, **kwargs):
        if save_steps is None or save_steps < 1:
            raise ValueError("ShardedCheckpointSaverHook: save_steps must be >= 1, got %r (sharded tables are "
                             "saved by all ranks together, so by steps, never by seconds)" % (save_steps,))
        super().__init__(checkpoint_dir, save_steps=save_steps, scaffold=scaffold, **kwargs)
        self._restore = checkpoint.restore_hook(checkpoint_dir, broadcast_replicated)

    def begin(self):
        self._restore.begin()
        super().begin()

    def after_create_session(self, session, coord):
        self._restore.after_create_session(session, coord)
        super().after_create_session(session, coord)

