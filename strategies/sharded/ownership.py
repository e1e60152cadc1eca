"""Which rank owns which rows of a sharded table, and how a shard is initialized.

Ownership is a modulo: id `i` lives on rank `i % size`, at local row
`i // size` of that rank's shard. Criteo ids are numbered by frequency, so
the hot ids (small numbers) spread evenly over the ranks. Everything here is
arithmetic on ids (numpy for checkpoints, TensorFlow for the step); nothing
exchanges data.
"""

from typing import Sequence, Tuple

import numpy as np
import tensorflow as tf

INT32_MAX = 2**31 - 1
FAN_MODES = ("fan_in", "fan_out", "fan_avg")
# Distinct ranks draw distinct shards from a seeded initializer.
SEED_STRIDE_PER_RANK = 7919


def check_topology(rank: int, size: int) -> None:
    """Raises ValueError unless `size` >= 1 and `rank` is in [0, size)."""
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
    check_topology(rank, size)
    if num_rows < 0:
        raise ValueError("num_rows must be >= 0, got %r" % num_rows)
    return max(0, (num_rows - rank + size - 1) // size)


def owned_ids(num_rows: int, rank: int, size: int) -> np.ndarray:
    """The ids `rank` owns, in local-row order: int64 [shard_rows(num_rows, rank, size)]."""
    check_topology(rank, size)
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


def row_dtype(num_rows: int, size: int) -> tf.DType:
    """The dtype of a shard's local rows: int32, or int64 for a shard of more than 2**31 - 1 rows."""
    return tf.int32 if -(-num_rows // size) <= INT32_MAX else tf.int64
