"""Checkpoints of sharded tables: every rank saves and restores its own rows, at any number of ranks.

A checkpoint of a `hybrid` job at step S is two kinds of files in the model
directory:

* `model.ckpt-S.*`, rank 0's bundle: the replicated (dense) variables, the
  global step, and the `checkpoint` state file, as any Estimator writes;
* `model.ckpt-S.shard-<rank>-of-<ranks>.*`, one bundle per rank: that rank's
  rows of every sharded table and of each optimizer slot of it, under the
  tables' single-process names, in slices of bounded size
  (`strategies.sharded.row_stream`).

Saving is a collective: every rank writes its shard bundle, the ranks wait
for each other, then rank 0 writes its bundle and points the state file at
it, so the state file only ever names a checkpoint whose shards are all
written (every rank saves at the same steps: by steps, never by seconds).
No rank ever holds more than its own rows.

Restoring (`RestoreShardsHook`, at every session start): rank 0 names the
checkpoint of its global step and the number of ranks it was saved at;
each rank then reads, block by block, the saved shards that hold ids it
owns now and writes those rows into its shard. At the same number of ranks
that is its own file; at another number, re-sharding reads the old shards
in blocks and keeps its rows. So no rank allocates more than its share plus
one block per variable. One process (1 rank) restores it the same way, and
`export_weights` gathers the tables' weights, without their slots, into a
checkpoint a plain single-process graph restores, for the SavedModel.
"""

import os
import re
import time
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf

# No public API builds a custom `SaveableObject` for `tf.compat.v1.train.Saver`.
from tensorflow.python.training.saving import saveable_object

from strategies import devices, saving
from strategies.sharded import ownership, row_stream
from strategies.sharded.table import ShardedEmbedding

ROOT_RANK = 0
CHECKPOINT_BASENAME = "model.ckpt"
# Where `BestCheckpoint` keeps the best checkpoint (deepfm.runtime.early_stopping), looked in after the model dir.
BEST_DIR = "best"
# `RestoreShardsHook`: what rank 0 tells the other ranks before the restore.
NOTHING_TO_RESTORE, RESTORE, RESTORE_FAILED = 0, 1, 2
_STEP = re.compile(r"-(\d+)$")


def _op_name(prefix: str, checkpoint_name: str) -> str:
    """An op name, the same on every rank, for a collective on one checkpoint tensor."""
    return prefix + "_" + re.sub(r"[^A-Za-z0-9_.-]", "_", checkpoint_name)


class _ShardSaveable(saveable_object.SaveableObject):
    """Saves this rank's rows of a table (or of a slot of it) as bounded slices, without copying them.

    Restoring is `RestoreShardsHook`'s: `restore` builds nothing.
    """

    def __init__(self, table: ShardedEmbedding, variable: tf.Variable):
        name = table.checkpoint_name(variable)
        rows = table.shard_rows
        full_shape = [rows] + list(table.row_shape)
        with tf.device(devices.HOST_DEVICE):
            value = saving.read_no_copy(variable)
            # Row slices of a tensor share its buffer where they start at a multiple of 16 floats' rows.
            specs = [saveable_object.SaveSpec(value[start:start + length],
                                              row_stream.slice_spec(full_shape, start, length), name)
                     for start, length in row_stream.blocks(rows)]
        super().__init__(variable, specs, name)

    def restore(self, restored_tensors, restored_shapes):
        del restored_tensors, restored_shapes
        return tf.no_op()


class ShardedCheckpoint:
    """The checkpoint of a graph's sharded tables (see the module docstring).

    * `saver()`: the `Saver` of the replicated variables, for the model_fn's
      `Scaffold` (`scaffold()` builds it, with ready ops that leave the
      shards to `RestoreShardsHook`).
    * `shard_saver()`: the `Saver` of this rank's rows, saved beside each
      checkpoint by `ShardedCheckpointSaverHook`.
    * `replicated_variables()`: the variables to broadcast from rank 0 at the
      start, leaving the shards out.

    Build it in the model_fn after the optimizer created its slots.

    Args:
      tables: the sharded tables of the graph (one rank and size for all).
      hvd: `horovod.tensorflow`, initialized.
      root_rank: the rank that writes the checkpoint's state file.

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
        """Whether this rank writes the checkpoint's state file."""
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

    def saver(self, **saver_kwargs) -> tf.compat.v1.train.Saver:
        """The `Saver` of the replicated variables (read without a copy), for the model_fn's `Scaffold`.

        Args:
          **saver_kwargs: for `tf.compat.v1.train.Saver` (e.g. `max_to_keep`).
        """
        return saving.no_copy_saver(self.replicated_variables(), **saver_kwargs)

    def shard_saver(self) -> tf.compat.v1.train.Saver:
        """The `Saver` of this rank's rows of every table and slot, in bounded slices (builds no restore)."""
        saveables = [_ShardSaveable(table, variable) for table, variable in self.sharded_variables()
                     if table.shard_rows > 0]
        return tf.compat.v1.train.Saver(var_list=saveables, sharded=False, allow_empty=True,
                                        save_relative_paths=True)

    def scaffold(self, **saver_kwargs) -> tf.compat.v1.train.Scaffold:
        """A `Scaffold` with `saver(**saver_kwargs)` whose readiness leaves the shards to `RestoreShardsHook`.

        A session restored from rank 0's bundle has shards that are not
        initialized yet; the hook restores them right after.
        """
        replicated = self.replicated_variables()
        return tf.compat.v1.train.Scaffold(
            saver=self.saver(**saver_kwargs),
            ready_op=tf.compat.v1.report_uninitialized_variables(replicated + tf.compat.v1.local_variables()),
            ready_for_local_init_op=tf.compat.v1.report_uninitialized_variables(replicated))

    def restore_hook(self, model_dir: Optional[str], broadcast_replicated: bool = True) -> "RestoreShardsHook":
        """A `RestoreShardsHook` reading the checkpoints of `model_dir`."""
        return RestoreShardsHook(self, model_dir, broadcast_replicated)


def checkpoint_step(checkpoint_path: str) -> int:
    """The global step of a checkpoint path (`.../model.ckpt-<step>`)."""
    match = _STEP.search(checkpoint_path)
    if match is None:
        raise ValueError("checkpoint path %r does not end in -<global step>" % checkpoint_path)
    return int(match.group(1))


def checkpoint_of_step(model_dir: str, step: int) -> Optional[str]:
    """The checkpoint of `step` with shard files in `model_dir` (or its `best/`), or None."""
    for directory in (model_dir, os.path.join(model_dir, BEST_DIR)):
        path = os.path.join(directory, "%s-%d" % (CHECKPOINT_BASENAME, step))
        if tf.io.gfile.glob(path + ".shard-*"):
            return path
    return None


class RestoreShardsHook(tf.estimator.SessionRunHook):
    """At session start, every rank restores its rows of the checkpoint of rank 0's global step.

    Run it on every rank (a collective). Rank 0 finds the checkpoint of the
    global step its session restored (`model.ckpt-<step>` in the model
    directory, or in its `best/`), the number of ranks it was saved at, and
    checks its shard files; it broadcasts what it found, so a missing or
    misshapen shard stops every rank with an error. Each rank then writes
    its rows into its shards (`row_stream.stream_rows`): shards not
    initialized by the session (it restored rank 0's bundle) are first
    initialized (an assign of zeros would hold the shard twice for a
    moment). With no checkpoint (a new model directory) every rank keeps
    what the session initialized. Then, with `broadcast_replicated`,
    rank 0's replicated variables (the global step included) are broadcast
    to every rank: use this instead of Horovod's
    `BroadcastGlobalVariablesHook`, which would broadcast the shards too.

    Args:
      checkpoint: the graph's `ShardedCheckpoint`.
      model_dir: the job's model directory, where every rank's shards are.
      broadcast_replicated: also broadcast rank 0's replicated variables.
    """

    def __init__(self, checkpoint: ShardedCheckpoint, model_dir: Optional[str], broadcast_replicated: bool = True):
        self._checkpoint = checkpoint
        self._model_dir = model_dir
        self._broadcast_replicated = broadcast_replicated
        self._writers: List[Tuple[ShardedEmbedding, List[row_stream.RowWriter]]] = []
        self._fills: List[Tuple[tf.Tensor, tf.Operation]] = []
        self._decision: Optional[tf.Tensor] = None
        self._decision_input: Optional[tf.Tensor] = None
        self._broadcast: Optional[tf.Operation] = None
        self._step: Optional[tf.Tensor] = None
        self.restored_from: Optional[str] = None
        self.restored_step: Optional[int] = None
        self.blocks_read = 0

    def begin(self):
        checkpoint = self._checkpoint
        hvd = checkpoint.hvd
        with tf.name_scope("restore_shards"), tf.device(devices.HOST_DEVICE):
            self._decision_input = tf.compat.v1.placeholder(tf.int64, [3], name="decision")
            self._decision = hvd.broadcast(self._decision_input, checkpoint.root_rank, name="restore_decision")
            self._step = tf.compat.v1.train.get_global_step()
            self._writers, self._fills = [], []
            for table in checkpoint.tables:
                writers = []
                for variable in [table.variable] + table.slot_variables():
                    writers.append(row_stream.RowWriter(variable, table.checkpoint_name(variable), table.row_shape,
                                                        table.rank, table.size))
                    # Its initializer, not an assign of zeros: an assign copies its value (2x for a moment).
                    self._fills.append((tf.raw_ops.VarIsInitializedOp(resource=variable.handle),
                                        variable.initializer))
                self._writers.append((table, writers))
            replicated = checkpoint.replicated_variables()
            self._broadcast = None
            if self._broadcast_replicated and replicated:
                self._broadcast = hvd.broadcast_variables(replicated, checkpoint.root_rank)

    def after_create_session(self, session, coord):
        del coord
        self.restore(session)
        if self._broadcast is not None:
            session.run(self._broadcast)

    def _decide(self, session) -> Tuple[int, int, int, str]:
        """Rank 0's decision (what, step, ranks saved at) and, where it failed, why."""
        checkpoint = self._checkpoint
        if not checkpoint.is_root or not self._model_dir:
            return NOTHING_TO_RESTORE, 0, 0, ""
        step = int(session.run(self._step)) if self._step is not None else 0
        path = checkpoint_of_step(self._model_dir, step)
        if path is None:
            latest = tf.train.latest_checkpoint(self._model_dir)
            if latest is None or checkpoint_step(latest) != step:
                return NOTHING_TO_RESTORE, step, 0, ""
            return RESTORE_FAILED, step, 0, (
                "checkpoint %s has no shard files (%s.shard-<rank>-of-<ranks>.*): it was not written by strategy "
                "hybrid, or they were not copied with it; resume it with the strategy that wrote it" % (latest, latest))
        try:
            ranks = row_stream.saved_ranks(path)
        except row_stream.ShardLayoutError as e:
            return RESTORE_FAILED, step, 0, str(e)
        assert ranks is not None
        problems = row_stream.check_shapes(path, ranks, [
            (table.checkpoint_name(variable), table.num_rows, table.row_shape)
            for table, variable in checkpoint.sharded_variables()])
        if problems:
            return RESTORE_FAILED, step, ranks, (
                "checkpoint %s cannot restore the sharded tables: %s. Use a model_dir written with the same tables "
                "and optimizer" % (path, "; ".join(problems)))
        return RESTORE, step, ranks, ""

    def restore(self, session: tf.compat.v1.Session) -> bool:
        """Restores this rank's rows of rank 0's checkpoint (a collective); returns whether it did.

        Raises:
          ValueError: rank 0's checkpoint lacks shard files, or a table or
            slot, or holds one in another shape (every rank raises).
        """
        checkpoint = self._checkpoint
        decision, step, ranks, problem = self._decide(session)
        decision, step, ranks = (int(value) for value in session.run(
            self._decision, {self._decision_input: [decision, step, ranks]}))
        if decision == RESTORE_FAILED:
            raise ValueError(problem or "rank %d could not restore the sharded tables of its checkpoint at step %d; "
                             "its log names the problem" % (checkpoint.root_rank, step))
        if decision == NOTHING_TO_RESTORE:
            return False
        path = checkpoint_of_step(self._model_dir or "", step)
        if path is None:
            raise ValueError("rank %d restores the checkpoint of step %d, whose shard files rank %d does not see in "
                             "%s: every rank needs the model directory (a shared file system, or the same files)"
                             % (checkpoint.root_rank, step, checkpoint.rank, self._model_dir))
        started = time.monotonic()
        initialized = session.run([flag for flag, _ in self._fills])
        fills = [fill for (_, fill), done in zip(self._fills, initialized) if not done]
        if fills:
            session.run(fills)
        for table, writers in self._writers:
            self.blocks_read += row_stream.stream_rows(session, writers, path, ranks, table.num_rows, table.rank,
                                                       table.size)
        self.restored_from, self.restored_step = path, step
        tf.compat.v1.logging.info("rank %d of %d restored its rows of %s in %.2f s (saved at %d ranks): %d block(s) "
                                  "read", checkpoint.rank, checkpoint.size, path, time.monotonic() - started, ranks,
                                  self.blocks_read)
        return True


class ShardedCheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """A `CheckpointSaverHook` that restores every rank's rows first and saves them beside each checkpoint.

    Give it to the Estimator in `training_chief_hooks` on every rank (each
    Horovod rank is a chief to its Estimator): it then replaces the
    Estimator's own saver. At session start it restores (`RestoreShardsHook`)
    and broadcasts the replicated variables; a session that restored a
    checkpoint does not write its rows again at the same step. Each save
    writes this rank's rows to `<model_dir>/model.ckpt-<step>.shard-<rank>-of-
    <ranks>`, waits for every rank, then saves the scaffold's saver to this
    rank's checkpoint directory (rank 0's is the model directory). It saves by
    steps only, so that every rank saves at the same steps; the ranks start
    from the same global step, which the broadcast ensures. Each rank keeps
    the shard files of its last `keep` saves.

    Args:
      checkpoint_dir: this rank's checkpoint directory (rank 0's model_dir,
        a private one on the others).
      checkpoint: the graph's `ShardedCheckpoint`.
      save_steps: save every this many steps, > 0.
      scaffold: the model_fn's `Scaffold` (`checkpoint.scaffold()`).
      model_dir: the job's model directory, where every rank saves its rows.
      keep: how many saves' shard files each rank keeps (the Estimator's
        `keep_checkpoint_max`).
      broadcast_replicated: also broadcast rank 0's replicated variables at
        the start; leave it on unless a hook that runs before this one does.
      **kwargs: for `CheckpointSaverHook` (`checkpoint_basename`,
        `listeners`, `save_graph_def`).

    Raises:
      ValueError: `save_steps` < 1.
    """

    def __init__(self, checkpoint_dir: str, checkpoint: ShardedCheckpoint, save_steps: int,
                 scaffold: tf.compat.v1.train.Scaffold, model_dir: Optional[str] = None, keep: int = 5,
                 broadcast_replicated: bool = True, **kwargs):
        if save_steps is None or save_steps < 1:
            raise ValueError("ShardedCheckpointSaverHook: save_steps must be >= 1, got %r (sharded tables are "
                             "saved by all ranks together, so by steps, never by seconds)" % (save_steps,))
        super().__init__(checkpoint_dir, save_steps=save_steps, scaffold=scaffold, **kwargs)
        self._checkpoint = checkpoint
        self._model_dir = model_dir or checkpoint_dir
        self._keep = max(1, keep)
        self._restore = checkpoint.restore_hook(self._model_dir, broadcast_replicated)
        self._shard_saver: Optional[tf.compat.v1.train.Saver] = None
        self._barrier: Optional[tf.Tensor] = None
        self._skip_rows_at: Optional[int] = None

    def begin(self):
        self._restore.begin()
        with tf.name_scope("sharded_checkpoint"):
            self._shard_saver = self._checkpoint.shard_saver()
            with tf.device(devices.HOST_DEVICE):
                self._barrier = self._checkpoint.hvd.allreduce(
                    tf.constant(1, tf.int32), op=self._checkpoint.hvd.Sum, name="sharded_checkpoint_saved")
        super().begin()

    def after_create_session(self, session, coord):
        if self._restore.restore(session):
            # The step rank 0 restored, the same on every rank (the others' sessions start at 0 until the broadcast).
            self._skip_rows_at = self._restore.restored_step
        if self._restore._broadcast is not None:
            session.run(self._restore._broadcast)
        super().after_create_session(session, coord)

    def _save(self, session, step):
        if step != self._skip_rows_at:
            self._save_rows(session, step)
        self._skip_rows_at = None
        return super()._save(session, step)

    def _save_rows(self, session, step: int) -> None:
        """Writes this rank's rows of the checkpoint of `step`, waits for every rank, drops old shard files."""
        checkpoint = self._checkpoint
        path = os.path.join(self._model_dir, "%s-%d" % (CHECKPOINT_BASENAME, step))
        prefix = row_stream.shard_prefix(path, checkpoint.rank, checkpoint.size)
        assert self._shard_saver is not None
        self._shard_saver.save(session, prefix, write_meta_graph=False, write_state=False)
        session.run(self._barrier)
        steps = row_stream.shard_steps(self._model_dir, CHECKPOINT_BASENAME, checkpoint.rank, checkpoint.size)
        for old in steps[:-self._keep]:
            old_prefix = row_stream.shard_prefix(os.path.join(self._model_dir, "%s-%d" % (CHECKPOINT_BASENAME, old)),
                                                 checkpoint.rank, checkpoint.size)
            for stale in tf.io.gfile.glob(old_prefix + ".*"):
                tf.io.gfile.remove(stale)


def export_weights(checkpoint_path: str, variables: Sequence[tf.Variable], output_prefix: str) -> str:
    """Writes a checkpoint of `variables` (a plain single-process graph's) from a sharded checkpoint; returns it.

    Run in the graph of `variables`, in a session of its own: the tables are
    gathered from the shard files block by block into their variables (one
    whole table each: the weights, not the optimizer slots), the other
    variables are restored from rank 0's bundle, and everything is saved to
    `output_prefix`. A checkpoint without shard files is returned as it is.

    Raises:
      ValueError: a variable neither in rank 0's bundle nor in the shards.
    """
    ranks = row_stream.saved_ranks(checkpoint_path)
    if ranks is None:
        return checkpoint_path
    in_shards = row_stream.saved_tables(checkpoint_path, ranks)
    in_bundle = dict(tf.train.list_variables(checkpoint_path))
    plain, tables = [], []
    for variable in variables:
        name = variable.op.name
        if name in in_shards:
            tables.append(variable)
        elif name in in_bundle:
            plain.append(variable)
        else:
            raise ValueError("checkpoint %s holds no %r (neither in %s.index nor in its shard files)"
                             % (checkpoint_path, name, checkpoint_path))
    with tf.name_scope("export_weights"):
        writers = [(variable, row_stream.RowWriter(variable, variable.op.name, variable.shape.as_list()[1:], 0, 1))
                   for variable in tables]
        # Each table's initializer makes its buffer (every row is then written): an assign would copy it.
        fills = [variable.initializer for variable in tables]
        restore = tf.compat.v1.train.Saver(var_list=plain) if plain else None
        save = saving.no_copy_saver(list(variables), sharded=False)
    with tf.compat.v1.Session() as session:
        if restore is not None:
            restore.restore(session, checkpoint_path)
        session.run(fills)
        for variable, writer in writers:
            row_stream.stream_rows(session, [writer], checkpoint_path, ranks, variable.shape.as_list()[0], 0, 1)
        return save.save(session, output_prefix, write_meta_graph=False, write_state=False)
