"""The all-to-all exchanges of a sharded lookup: ids to their owners, rows back, gradients to the owners.

A lookup of a batch's ids runs, on every rank at once:

1. `tf.unique` over the batch's ids;
2. the distinct ids grouped by owner and their local rows sent to the
   owners by `hvd.alltoall` (`route_ids`, which returns an `IdRouting`);
3. each owner gathers the requested rows of its shard, and a second
   all-to-all returns them to the ranks that asked (`exchange_rows`);
4. the rows are scattered back to the batch's shape (`rows_of_batch`).

Horovod registers the reverse all-to-all as the gradient of an all-to-all, so
the backward pass of step 3 brings every rank's gradient for a row to the
row's owner. `stale_rows` is step 3 with rows received one step earlier (the
exchange of the next batch's rows overlaps the current step) and the same
backward pass.

**Fixed shapes.** Horovod 0.28.1 negotiates every collective in full unless
its response cache holds one of the same name and shape, and the distinct
ids of a batch change in number every step. A padded exchange
(`IdCapacity`) sends every owner the same number of places, so the ids, the
rows and their gradients keep one shape step after step and Horovod's cache
holds them. The number of places is sized from the first batch with a
margin, and a batch that needs more grows it (that step's shapes are new,
once); nothing fails and nothing is dropped. Horovod still exchanges the
split sizes of every all-to-all (`AlltoallOp::PrepareOutputAndParams`): the
places per owner save the negotiation, not that round.

Every function here that exchanges data is a collective: every rank must
build the same graph and run the same steps.
"""

import dataclasses
from typing import NamedTuple, Optional, Sequence

import tensorflow as tf

from strategies import devices
from strategies.sharded import ownership

# Fills the unused places of a padded id exchange.
PADDING_ROW = -1
ID_DTYPES = (tf.int32, tf.int64)
# A padded exchange sizes its places per owner at (1 + margin) x the most a batch needed, in multiples
# of the quantum: a new batch rarely needs more, and a capacity that grows grows by more than one id.
CAPACITY_MARGIN = 0.05
CAPACITY_QUANTUM = 8
# `IdCapacity`'s start that sizes the places from the first batch.
SIZE_FROM_FIRST_BATCH = 0


class LookupStats(NamedTuple):
    """Per-step counters of one id exchange, for reporting (a `session.run` fetch).

    Attributes:
      distinct_ids: int32 scalar: the distinct ids this rank looked up.
      rows_served: int32 scalar: the rows this rank served to all ranks.
      places_per_owner: int32 scalar: the places of a padded exchange per
        owner (0 for an exchange of variable size).
    """

    distinct_ids: tf.Tensor
    rows_served: tf.Tensor
    places_per_owner: tf.Tensor


def owner_counts(distinct_ids: tf.Tensor, size: int) -> tf.Tensor:
    """int32 [size]: how many of `distinct_ids` each rank owns."""
    return tf.math.bincount(ownership.owner_of(distinct_ids, size), minlength=size, maxlength=size,
                            dtype=tf.int32)


class IdCapacity:
    """The places per owner of a padded id exchange, kept in a local variable across steps.

    The variable starts at `start` (`SIZE_FROM_FIRST_BATCH`: sized from the
    first batch). A batch whose distinct ids for some owner exceed it raises
    it to `(1 + margin)` x that number, rounded up to `CAPACITY_QUANTUM`,
    before the batch is exchanged. It is a local variable: never saved, each
    process sizes it anew, and each rank's may differ (the all-to-all sends
    the split sizes).

    Args:
      name: names the variable (in the current name scope).
      start: the places per owner before the first batch, >= 0.
      margin: the share added when it grows, >= 0.
    """

    def __init__(self, name: str, start: int = SIZE_FROM_FIRST_BATCH, margin: float = CAPACITY_MARGIN):
        if start < 0:
            raise ValueError("IdCapacity %r: start must be >= 0, got %r" % (name, start))
        if margin < 0:
            raise ValueError("IdCapacity %r: margin must be >= 0, got %r" % (name, margin))
        self.start = start
        self.margin = margin
        with tf.device(devices.HOST_DEVICE):
            self.variable = tf.compat.v1.Variable(
                start, dtype=tf.int32, name=name, trainable=False,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], use_resource=True)

    def fit(self, counts: tf.Tensor):
        """The places for a batch with `counts` distinct ids per owner, and the op that keeps them.

        Returns:
          (places, update): the int32 places per owner for this batch, and the
          assignment that keeps them for the next batches (run it with the
          exchange).
        """
        need = tf.reduce_max(counts)
        current = self.variable.read_value()
        grown = tf.cast(tf.math.ceil(tf.cast(need, tf.float32) * (1.0 + self.margin)), tf.int32)
        grown = (grown + CAPACITY_QUANTUM - 1) // CAPACITY_QUANTUM * CAPACITY_QUANTUM
        places = tf.where(need > current, tf.maximum(grown, need), current)
        return places, self.variable.assign(places, read_value=False)


def group_by_owner(distinct_ids: tf.Tensor, size: int, capacity=None, row_dtype: tf.DType = tf.int32,
                   name: str = "ids"):
    """The send buffer of an id exchange: local rows grouped by owner.

    Args:
      distinct_ids: int [n] distinct ids.
      size: the number of ranks.
      capacity: None: the buffer holds the n rows, rank 0's first, and
        `splits[r]` of them go to rank r. An int32 scalar (or int): the
        buffer holds `capacity` places per rank (`size * capacity`), rank
        r's rows first in places `[r * capacity, (r + 1) * capacity)`, the
        rest `PADDING_ROW`; every split is `capacity`.
      row_dtype: the dtype of the local rows sent.
      name: names the table in the error of an overflowing capacity.

    Returns:
      send: `row_dtype` [n] or [size * capacity]: local rows (`id // size`).
      splits: int32 [size]: how many places go to each rank.
      positions: int32 [n]: where each distinct id's local row is in `send`
        (and where its row comes back after the reverse exchange).

    Raises:
      tf.errors.InvalidArgumentError: at run time, more than `capacity`
        distinct ids for one rank (an `IdCapacity` grows first, so this
        means a capacity given without one).
    """
    distinct_ids = tf.convert_to_tensor(distinct_ids)
    owners = ownership.owner_of(distinct_ids, size)
    rows = tf.cast(ownership.local_row_of(distinct_ids, size), row_dtype)
    order = tf.argsort(owners, stable=True)
    positions = tf.math.invert_permutation(order)
    counts = tf.math.bincount(owners, minlength=size, maxlength=size, dtype=tf.int32)
    if capacity is None:
        return tf.gather(rows, order), counts, positions
    capacity = tf.convert_to_tensor(capacity, tf.int32)
    fits = tf.debugging.assert_less_equal(
        counts, capacity,
        message="sharded embedding %r: a batch has more distinct ids for one rank than the places of the "
                "padded exchange (distinct ids per rank below)" % name)
    starts = tf.cumsum(counts, exclusive=True)
    padded_positions = owners * capacity + positions - tf.gather(starts, owners)
    with tf.control_dependencies([fits]):
        send = tf.tensor_scatter_nd_update(
            tf.fill([size * capacity], tf.constant(PADDING_ROW, row_dtype)),
            tf.expand_dims(padded_positions, 1), rows)
    return send, tf.fill([size], capacity), padded_positions


@dataclasses.dataclass(frozen=True)
class IdRouting:
    """Where a batch's ids went in an id exchange (`route_ids`); a lookup brings their rows back.

    Attributes:
      size: the number of ranks.
      padded: whether the exchange is padded (`IdCapacity`).
      row_dtype: the dtype of the local rows exchanged.
      ids_shape: int32 [rank of ids]: the shape of the ids looked up.
      static_ids_shape: their static shape.
      batch_positions: int32 [ids]: for each flattened id, where its row
        arrives in the reverse exchange.
      send_splits: int32 [size]: the places this rank sent each owner (the
        rows it receives back from each).
      received_rows: [received]: the local rows other ranks asked this rank
        for, in the order of the reverse exchange (`PADDING_ROW` in unused
        places of a padded exchange).
      received_splits: int32 [size]: how many of them came from each rank.
      stats: the exchange's `LookupStats`.
    """

    size: int
    padded: bool
    row_dtype: tf.DType
    ids_shape: tf.Tensor
    static_ids_shape: tf.TensorShape
    batch_positions: tf.Tensor
    send_splits: tf.Tensor
    received_rows: tf.Tensor
    received_splits: tf.Tensor
    stats: LookupStats

    @property
    def settings(self):
        """What a table must share with the routing to use it: (ranks, padded, row dtype)."""
        return self.size, self.padded, self.row_dtype

    def for_ids(self, ids: tf.Tensor) -> "IdRouting":
        """This routing for `ids` of another shape holding the same ids in the same order."""
        ids = tf.convert_to_tensor(ids)
        return dataclasses.replace(self, ids_shape=tf.shape(ids), static_ids_shape=ids.shape)


def check_ids_dtype(ids: tf.Tensor, name: str) -> tf.Tensor:
    """`ids` as a tensor; TypeError unless int32 or int64."""
    ids = tf.convert_to_tensor(ids)
    if ids.dtype not in ID_DTYPES:
        raise TypeError("sharded embedding %r: ids must be int32 or int64, got %s" % (name, ids.dtype.name))
    return ids


def route_ids(ids: tf.Tensor, size: int, hvd, capacity: Optional[IdCapacity] = None,
              row_dtype: tf.DType = tf.int32, name: str = "ids") -> IdRouting:
    """Sends each distinct id of `ids` to its owner (a collective).

    Tables with the same number of ranks may share one routing, i.e. one
    id exchange, for the same ids (`ShardedEmbedding.lookup(ids, routing)`).

    Args:
      ids: int32 or int64 ids, any shape.
      size: the number of ranks.
      hvd: `horovod.tensorflow`, initialized.
      capacity: None (an exchange of variable size), or the `IdCapacity`
        of a padded exchange, grown first when the batch needs more.
      row_dtype: int32, or int64 for a shard of more than 2**31 - 1 rows.
      name: the name scope, and the table named in errors.

    Raises:
      TypeError: ids of another dtype than int32 or int64.
    """
    ids = check_ids_dtype(ids, name)
    with tf.name_scope(name + "_route"), tf.device(devices.HOST_DEVICE):
        distinct, batch_index = tf.unique(tf.reshape(ids, [-1]), out_idx=tf.int32)
        places, updates = None, []
        if capacity is not None:
            places, update = capacity.fit(owner_counts(distinct, size))
            updates.append(update)
        with tf.control_dependencies(updates):
            send, splits, positions = group_by_owner(distinct, size, places, row_dtype, name)
        received, received_splits = hvd.alltoall(send, splits=splits, name="ids_to_owners")
        if capacity is None:
            served = tf.size(received)
        else:
            served = tf.reduce_sum(tf.cast(received >= 0, tf.int32))
        stats = LookupStats(distinct_ids=tf.size(distinct), rows_served=served,
                            places_per_owner=places if places is not None else tf.constant(0))
        return IdRouting(
            size=size, padded=capacity is not None, row_dtype=row_dtype, ids_shape=tf.shape(ids),
            static_ids_shape=ids.shape, batch_positions=tf.gather(positions, batch_index), send_splits=splits,
            received_rows=received, received_splits=received_splits, stats=stats)


def exchange_rows(served: tf.Tensor, routing: IdRouting, hvd, wire_dtype: Optional[tf.DType] = None,
                  name: str = "rows_to_askers") -> tf.Tensor:
    """The rows a rank asked for in `routing`, from the rows each owner `served` (a collective).

    Args:
      served: [received, width]: this rank's rows for `routing.received_rows`.
      routing: the id exchange.
      hvd: `horovod.tensorflow`.
      wire_dtype: the dtype the rows travel in (e.g. float16); None: theirs.
      name: the all-to-all's name.

    Returns:
      [places sent, width] in `served`'s dtype, in the order of the ids sent;
      differentiable (the gradient goes back to the owners).
    """
    with tf.device(devices.HOST_DEVICE):
        rows = served if wire_dtype is None else tf.cast(served, wire_dtype)
        returned, _ = hvd.alltoall(rows, splits=routing.received_splits, name=name)
        return tf.cast(returned, served.dtype)


def stale_rows(served: tf.Tensor, received: tf.Tensor, routing: IdRouting, hvd,
               wire_dtype: Optional[tf.DType] = None, after: Sequence[tf.Tensor] = (),
               name: str = "stale_grads_to_owners") -> tf.Tensor:
    """`exchange_rows` whose forward value is `received`, rows exchanged one step earlier.

    The value is `received` (what `exchange_rows` returned for these same
    places in an earlier step); the gradient is `exchange_rows`'s: each
    place's gradient goes back to the owner that served it, where it reaches
    `served` (this step's gather of the same rows, which carries it on to the
    shard).

    Args:
      served: [received at this rank, width]: this rank's rows for
        `routing.received_rows`, gathered in this step.
      received: [places sent, width]: the rows returned for `routing` earlier.
      routing: the id exchange of the batch.
      hvd: `horovod.tensorflow`.
      wire_dtype: the dtype the gradients travel in; None: theirs.
      after: what the gradient's exchange waits for (so that an update of
        the shards, which needs the gradient, comes after it: e.g. a read of
        the next rows).
      name: the gradient's all-to-all's name.
    """

    # Every tensor the function uses is an argument (see `rows_of_batch`).
    @tf.custom_gradient
    def exchange(served_rows, received_rows, send_splits):
        def gradient(upstream):
            with tf.device(devices.HOST_DEVICE), tf.control_dependencies(list(after)):
                grads = upstream if wire_dtype is None else tf.cast(upstream, wire_dtype)
                back, _ = hvd.alltoall(grads, splits=send_splits, name=name)
                return tf.cast(back, served_rows.dtype), None, None
        return tf.identity(received_rows), gradient

    return exchange(served, received, routing.send_splits)


def rows_of_batch(rows: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """`tf.gather(rows, positions)` whose gradient is a dense segment sum.

    The gradient goes on into the reverse all-to-all, which needs a dense
    tensor: this avoids TensorFlow's conversion of an `IndexedSlices` of
    unknown shape.
    """

    # Every tensor the function uses is an argument: graph-mode `custom_gradient` looks for the
    # variables behind any other (the positions may be read from a local variable).
    @tf.custom_gradient
    def gather(rows, positions):
        def gradient(upstream):
            return tf.math.unsorted_segment_sum(upstream, positions, tf.shape(rows)[0]), None
        return tf.gather(rows, positions), gradient

    return gather(rows, positions)

