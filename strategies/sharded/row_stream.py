"""The rows of a sharded table's checkpoint, read back in bounded blocks.

Every rank of a `hybrid` job saves its own rows (`strategies.sharded.checkpoint`)
next to rank 0's checkpoint `<path>` as the bundle
`<path>.shard-<rank>-of-<ranks>`: each table and each optimizer slot of it
under its single-process name (`deepfm_model/fm_v`, `deepfm_model/fm_v/Adam`),
shaped `[rows of the shard, *row shape]` and saved as slices of
`BLOCK_ROWS` rows. Row `k` of rank `s`'s shard is id `s + k * ranks`.

`RowWriter` reads one saved slice (`RestoreV2` with that slice's spec
allocates only the slice) and writes the rows this process holds into its
variable; `stream_rows` runs it over every block of every saved shard that
holds one of its ids. So a process restoring, or a process gathering a
whole table for an export, holds its variable plus one block per variable,
at any number of ranks before and after.
"""

import math
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from strategies.sharded import ownership

# Rows per saved slice: 64 MiB of a table of 32-float rows.
BLOCK_ROWS = 1 << 19
SHARD_SUFFIX = ".shard-%d-of-%d"
_SHARD_INDEX = re.compile(r"\.shard-(?P<rank>\d+)-of-(?P<ranks>\d+)\.index$")


class ShardLayoutError(ValueError):
    """A checkpoint's shard files are missing, of two layouts, or of other shapes; the message names them."""


def shard_prefix(checkpoint_path: str, rank: int, ranks: int) -> str:
    """The bundle prefix of rank `rank`'s rows of the checkpoint `checkpoint_path` saved at `ranks` ranks."""
    return checkpoint_path + SHARD_SUFFIX % (rank, ranks)


def blocks(rows: int, block_rows: Optional[int] = None) -> List[Tuple[int, int]]:
    """(first row, rows) of each saved slice of a shard of `rows` rows (`BLOCK_ROWS` rows a slice by default)."""
    block_rows = block_rows or BLOCK_ROWS
    return [(start, min(block_rows, rows - start)) for start in range(0, rows, block_rows)]


def slice_spec(full_shape: Sequence[int], start: int, length: int) -> str:
    """The checkpoint slice spec of rows [start, start + length) of a tensor of `full_shape`."""
    dims = " ".join(str(int(d)) for d in full_shape)
    slices = ":".join(["%d,%d" % (start, length)] + ["-"] * (len(full_shape) - 1))
    return "%s %s" % (dims, slices)


def saved_ranks(checkpoint_path: str) -> Optional[int]:
    """The number of ranks whose shard files the checkpoint `checkpoint_path` has; None: it has none.

    Shard files of another number of ranks that lack a rank's file (a save
    at the same step cut short) are left aside.

    Raises:
      ShardLayoutError: no number of ranks with every rank's file, or two.
    """
    found: Dict[int, set] = {}
    for path in tf.io.gfile.glob(checkpoint_path + ".shard-*-of-*.index"):
        match = _SHARD_INDEX.search(path)
        if match and path[:match.start()] == checkpoint_path:
            found.setdefault(int(match.group("ranks")), set()).add(int(match.group("rank")))
    if not found:
        return None
    complete = sorted(ranks for ranks, present in found.items() if present == set(range(ranks)))
    if len(complete) == 1:
        return complete[0]
    if complete:
        raise ShardLayoutError("checkpoint %s has the shard files of every rank at %s ranks: remove one layout's "
                               "files (%s.shard-*-of-<ranks>.*)" % (checkpoint_path, complete, checkpoint_path))
    ranks, present = max(found.items())
    missing = sorted(set(range(ranks)) - present)
    raise ShardLayoutError("checkpoint %s was saved at %d ranks but the shard files of rank(s) %s are missing (%s): "
                           "copy them beside it, or resume from an earlier checkpoint"
                           % (checkpoint_path, ranks, missing, shard_prefix(checkpoint_path, missing[0], ranks)
                              + ".index"))


def check_shapes(checkpoint_path: str, ranks: int, tables: Sequence[Tuple[str, int, Sequence[int]]]) -> List[str]:
    """What is wrong with the saved shards of `tables` ((name, rows, row shape) each); empty: nothing."""
    problems = []
    for rank in range(ranks):
        saved = dict(tf.train.list_variables(shard_prefix(checkpoint_path, rank, ranks)))
        for name, num_rows, row_shape in tables:
            expected = [ownership.shard_rows(num_rows, rank, ranks)] + list(row_shape)
            if expected[0] == 0:
                continue
            if saved.get(name) != expected:
                problems.append("%s of rank %d of %d: %s in the checkpoint, %s expected" % (
                    name, rank, ranks, "missing" if name not in saved else saved[name], expected))
    return problems


def saved_tables(checkpoint_path: str, ranks: int) -> Dict[str, List[int]]:
    """The names and shard shapes rank 0's shard file of the checkpoint holds."""
    return {name: shape for name, shape in tf.train.list_variables(shard_prefix(checkpoint_path, 0, ranks))}


class RowWriter:
    """Graph ops writing one saved block of a table's rows into a variable that holds ids `rank` mod `ranks`.

    Build it in the graph of `variable`; feed `prefix` (the shard bundle),
    `spec` (the block's slice), `first_id` (the id of the block's first row)
    and `stride` (the ranks the checkpoint was saved at), and run `write`.

    Args:
      variable: the resource variable to write into: a shard of a table or
        slot (`rank`, `ranks` of the job), or the whole table (0, 1).
      saved_name: the table's (or slot's) name in the checkpoint.
      row_shape: the shape of one row.
      rank: which ids `variable` holds: those equal to `rank` mod `ranks`.
      ranks: see `rank`.
    """

    def __init__(self, variable: tf.Variable, saved_name: str, row_shape: Sequence[int], rank: int, ranks: int):
        self.saved_name = saved_name
        self.row_shape = list(row_shape)
        with tf.name_scope("row_writer"):
            self.prefix = tf.compat.v1.placeholder(tf.string, [], name="prefix")
            self.spec = tf.compat.v1.placeholder(tf.string, [], name="spec")
            self.first_id = tf.compat.v1.placeholder(tf.int64, [], name="first_id")
            self.stride = tf.compat.v1.placeholder(tf.int64, [], name="stride")
            rows, = tf.raw_ops.RestoreV2(prefix=self.prefix, tensor_names=[saved_name],
                                         shape_and_slices=[self.spec], dtypes=[variable.dtype.base_dtype])
            rows = tf.reshape(rows, [-1] + self.row_shape)
            ids = self.first_id + self.stride * tf.range(tf.shape(rows, out_type=tf.int64)[0], dtype=tf.int64)
            keep = tf.reshape(tf.where(tf.equal(ids % ranks, rank)), [-1])
            self.write = tf.raw_ops.ResourceScatterUpdate(resource=variable.handle,
                                                          indices=tf.gather(ids, keep) // ranks,
                                                          updates=tf.gather(rows, keep))


def stream_rows(session: tf.compat.v1.Session, writers: Sequence[RowWriter], checkpoint_path: str,
                saved_at: int, num_rows: int, rank: int, ranks: int) -> int:
    """Writes every row of one table that ids `rank` mod `ranks` own, block by block; returns the blocks read.

    `writers` are the table's and its slots' (same rows, same `rank` and
    `ranks`). A saved shard that holds none of those ids is not read.
    """
    together = math.gcd(saved_at, ranks)
    read = 0
    for old_rank in range(saved_at):
        if (old_rank - rank) % together:
            continue
        rows = ownership.shard_rows(num_rows, old_rank, saved_at)
        prefix = shard_prefix(checkpoint_path, old_rank, saved_at)
        for start, length in blocks(rows):
            feeds: Dict[tf.Tensor, object] = {}
            for writer in writers:
                feeds[writer.prefix] = prefix
                feeds[writer.spec] = slice_spec([rows] + writer.row_shape, start, length)
                feeds[writer.first_id] = old_rank + saved_at * start
                feeds[writer.stride] = saved_at
            session.run([writer.write for writer in writers], feeds)
            read += 1
    return read


def remove_shards(checkpoint_path: str) -> List[str]:
    """Removes every shard file of the checkpoint `checkpoint_path`; returns them."""
    removed = sorted(tf.io.gfile.glob(checkpoint_path + ".shard-*-of-*.*"))
    for path in removed:
        tf.io.gfile.remove(path)
    return removed


def shard_steps(model_dir: str, basename: str, rank: int, ranks: int) -> List[int]:
    """The steps of which `model_dir` holds rank `rank` of `ranks`'s shard index."""
    suffix = SHARD_SUFFIX % (rank, ranks)
    pattern = re.compile(r"^%s-(?P<step>\d+)%s\.index$" % (re.escape(basename), re.escape(suffix)))
    steps = []
    for path in tf.io.gfile.glob(os.path.join(model_dir, basename + "-*" + SHARD_SUFFIX % (rank, ranks) + ".index")):
        match = pattern.match(os.path.basename(path))
        if match:
            steps.append(int(match.group("step")))
    return sorted(steps)
