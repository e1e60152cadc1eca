"""Checkpoints of sharded tables whose layout does not depend on the number of ranks.

Rank 0's checkpoint holds every table, and every optimizer slot of it, as the
full unsharded tensor under the single-process name (`deepfm_model/fm_v`,
`deepfm_model/fm_v/Adam`, ...), gathered from every rank while saving. Any
number of ranks, and a plain single-process graph, can restore it: a job
restarted with another number of ranks re-shards on restore (rank 0 sends
each rank its rows).

Saving and restoring are collectives: every rank must save at the same
steps (by steps, never by seconds). Rank 0 holds one whole table (or slot)
in memory while saving, and all of them, read from its checkpoint, while
`RestoreShardsHook` scatters them. Export a SavedModel from a plain
single-process graph of the same names (rank 0 exports alone).
"""

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

# No public API builds a custom `SaveableObject` for `tf.compat.v1.train.Saver`.
from tensorflow.python.training.saving import saveable_object

from strategies import devices
from strategies.sharded import ownership
from strategies.sharded.table import ShardedEmbedding

ROOT_RANK = 0
# `RestoreShardsHook`: what rank 0 tells the other ranks before the scatter.
NOTHING_TO_RESTORE, RESTORE, RESTORE_FAILED = 0, 1, 2


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
                tensor = tf.gather(gathered, ownership.id_order_positions_tensor(table.num_rows, table.size))
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
        ownership.check_topology(root_rank, self.size)
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
                rows = reader.get_tensor(scatter.checkpoint_name)[ownership.rank_order(table.num_rows, table.size)]
                splits = [ownership.shard_rows(table.num_rows, rank, table.size) for rank in range(table.size)]
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

