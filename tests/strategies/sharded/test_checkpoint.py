"""Tests of `strategies.sharded.checkpoint`: checkpoints whose layout does not depend on the number of ranks.

The fast tests run Horovod in this process (one rank); the slow one writes a
checkpoint at 2 real ranks and restores it at 3 and in a plain graph.
"""

import os
from unittest import mock

import pytest
import tensorflow as tf

from strategies.sharded import checkpoint as checkpoint_lib
from strategies.sharded import ownership, row_stream
from strategies.sharded import table as table_lib
from tests.strategies.sharded import rank_program, ranks_testing


class OneRankTest(tf.test.TestCase):
    """Save and restore with Horovod in this process (one rank)."""

    def setUp(self):
        super().setUp()
        self.hvd = ranks_testing.import_horovod(self)
        self.rank, self.size = self.hvd.rank(), self.hvd.size()

    def _table(self, name="table", width=3, rows=10, **kwargs):
        with tf.compat.v1.variable_scope("scope", reuse=tf.compat.v1.AUTO_REUSE):
            return table_lib.ShardedEmbedding(name, rows, width, self.rank, self.size, self.hvd, **kwargs)

    def _trained_checkpoint(self, model_dir, rows=10, step=3):
        """Trains one step, saves rank 0's bundle and this rank's rows at `step`; returns the path and values."""
        with tf.Graph().as_default():
            table = self._table(rows=rows)
            dense = tf.compat.v1.get_variable("dense", [3])
            global_step = tf.compat.v1.train.get_or_create_global_step()
            loss = tf.reduce_sum(table.lookup(tf.constant([1, 4])) * dense)
            train = rank_program.make_optimizer(rank_program.LAZY_ADAM).minimize(loss)
            checkpoint = checkpoint_lib.ShardedCheckpoint([table], self.hvd)
            self.assertEqual(["dense", "global_step", "beta1_power", "beta2_power", "dense/Adam", "dense/Adam_1"],
                             [v.op.name for v in checkpoint.replicated_variables()])
            saver, shard_saver = checkpoint.saver(), checkpoint.shard_saver()
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train)
                session.run(global_step.assign(step))
                trained = session.run({table.checkpoint_name(v): v for _, v in checkpoint.sharded_variables()})
                path = saver.save(session, os.path.join(model_dir, "model.ckpt"), global_step=step)
                shard_saver.save(session, row_stream.shard_prefix(path, self.rank, self.size),
                                 write_meta_graph=False, write_state=False)
        return path, trained

    def _restore(self, model_dir, restore_bundle=True):
        """A new graph of the same model restores the checkpoint: rank 0's bundle, then its rows (the hook)."""
        with tf.Graph().as_default():
            table = self._table()
            tf.compat.v1.get_variable("dense", [3])
            tf.compat.v1.train.get_or_create_global_step()
            rank_program.make_optimizer(rank_program.LAZY_ADAM).minimize(
                tf.reduce_sum(table.lookup(tf.constant([1]))))
            checkpoint = checkpoint_lib.ShardedCheckpoint([table], self.hvd)
            scaffold = checkpoint.scaffold()
            hook = checkpoint.restore_hook(model_dir)
            hook.begin()
            with self.session() as session:
                if restore_bundle:
                    scaffold.saver.restore(session, tf.train.latest_checkpoint(model_dir))
                    # The shards are not initialized: the scaffold's readiness leaves them to the hook.
                    self.assertEqual([], list(session.run(scaffold.ready_for_local_init_op)))
                else:
                    session.run(tf.compat.v1.global_variables_initializer())
                hook.after_create_session(session, None)
                return hook, session.run({table.checkpoint_name(v): v for _, v in checkpoint.sharded_variables()})

    def test_each_rank_saves_its_rows_beside_the_checkpoint_and_restores_them(self):
        model_dir = ranks_testing.tempdir(self)
        path, trained = self._trained_checkpoint(model_dir)
        self.assertEqual({"dense": [3], "dense/Adam": [3], "dense/Adam_1": [3], "beta1_power": [],
                          "beta2_power": [], "global_step": []}, dict(tf.train.list_variables(path)))
        shard = row_stream.shard_prefix(path, 0, 1)
        self.assertEqual({"scope/table": [10, 3], "scope/table/Adam": [10, 3], "scope/table/Adam_1": [10, 3]},
                         dict(tf.train.list_variables(shard)))
        self.assertEqual(1, row_stream.saved_ranks(path))
        hook, restored = self._restore(model_dir)
        self.assertEqual(path, hook.restored_from)
        for name, value in trained.items():
            self.assertAllEqual(value, tf.train.load_variable(shard, name))
            self.assertAllEqual(value, restored[name])

    def test_rows_are_saved_and_read_back_in_bounded_blocks(self):
        model_dir = ranks_testing.tempdir(self)
        with mock.patch.object(row_stream, "BLOCK_ROWS", 4):
            path, trained = self._trained_checkpoint(model_dir)
            hook, restored = self._restore(model_dir)
        # 10 rows in slices of 4: 3 blocks for the table and its slots together.
        self.assertEqual(3, hook.blocks_read)
        for name, value in trained.items():
            self.assertAllEqual(value, restored[name])

    def test_a_checkpoint_of_another_table_shape_is_refused_on_restore(self):
        model_dir = ranks_testing.tempdir(self)
        self._trained_checkpoint(model_dir, rows=7)
        with self.assertRaisesRegex(ValueError, "scope/table of rank 0 of 1: \\[7, 3\\] in the checkpoint, "
                                                "\\[10, 3\\] expected"):
            self._restore(model_dir)

    def test_a_checkpoint_without_shard_files_is_refused(self):
        model_dir = ranks_testing.tempdir(self)
        path, _ = self._trained_checkpoint(model_dir)
        row_stream.remove_shards(path)
        with self.assertRaisesRegex(ValueError, "model.ckpt-3 has no shard files"):
            self._restore(model_dir)

    def test_a_new_model_dir_keeps_the_initialized_rows(self):
        hook, restored = self._restore(ranks_testing.tempdir(self), restore_bundle=False)
        self.assertIsNone(hook.restored_from)
        self.assertEqual(0, hook.blocks_read)
        self.assertEqual({"scope/table", "scope/table/Adam", "scope/table/Adam_1"}, set(restored))

    def test_saving_by_seconds_is_refused(self):
        with tf.Graph().as_default():
            checkpoint = checkpoint_lib.ShardedCheckpoint([self._table()], self.hvd)
            with self.assertRaisesRegex(ValueError, "save_steps must be >= 1, got None .*never by seconds"):
                checkpoint_lib.ShardedCheckpointSaverHook(ranks_testing.tempdir(self), checkpoint, None,
                                                          tf.compat.v1.train.Scaffold())


@pytest.mark.slow
class CheckpointRanksTest(ranks_testing.RanksTestCase):
    """A checkpoint written at 2 ranks restores at 3 ranks and in a plain graph."""

    SHARDED = ("model/v", "model/v/Adam", "model/v/Adam_1", "model/w", "model/w/Adam", "model/w/Adam_1")

    def _estimator(self, size, model_dir, result_dir, max_steps, predict=False):
        flags = ["--mode=estimator", "--result_dir=" + result_dir, "--model_dir=" + model_dir,
                 "--max_steps=%d" % max_steps, "--save_steps=2"] + (["--predict"] if predict else [])
        self.horovodrun(size, flags, "estimator-%d-ranks" % size)
        return self.records(result_dir, "end", size)

    def _checkpoint(self, path):
        return {name: tf.train.load_variable(path, name) for name, _ in tf.train.list_variables(path)}

    def _plain_logits(self, path):
        with tf.Graph().as_default():
            variables = rank_program.plain_variables()
            ids = rank_program.predict_ids()
            logits = rank_program.logits({spec.name: tf.gather(variables[spec.name], ids)
                                          for spec in rank_program.TABLES},
                                         variables[rank_program.DENSE], variables["bias"])
            with tf.compat.v1.Session() as session:
                tf.compat.v1.train.Saver(list(variables.values())).restore(session, path)
                return session.run(logits)

    def _rows(self, path, ranks):
        """Every table and slot of the checkpoint, assembled from its `ranks` shard files."""
        shards = [self._checkpoint(row_stream.shard_prefix(path, rank, ranks)) for rank in range(ranks)]
        return {name: ranks_testing.assemble([shard[name] for shard in shards], rank_program.NUM_ROWS)
                for name in self.SHARDED}

    def _plain_weights(self, path):
        """A plain checkpoint of the unsharded model's variables, gathered from `path`'s shards."""
        with tf.Graph().as_default():
            variables = rank_program.plain_variables()
            return checkpoint_lib.export_weights(path, list(variables.values()), path + "-weights")

    def test_checkpoint_written_at_two_ranks_restores_at_three_and_in_a_plain_graph(self):
        model_dir = os.path.join(self.work_dir, "model")
        first_dir = os.path.join(self.work_dir, "first")
        ends = self._estimator(2, model_dir, first_dir, max_steps=4, predict=True)
        path = os.path.join(model_dir, "model.ckpt-4")
        saved = self._checkpoint(path)
        self.assertEqual(4, saved["global_step"])
        # Rank 0's bundle holds no table; each rank's shard file holds its rows.
        self.assertEqual([], [name for name in saved if name in self.SHARDED])
        self.assertEqual(2, row_stream.saved_ranks(path))
        rows = self._rows(path, 2)
        for name in self.SHARDED:
            self.assertAllEqual(ranks_testing.assemble([end[name] for end in ends], rank_program.NUM_ROWS),
                                rows[name], name)

        # Every rank predicted after restoring its rows; a plain single-process graph restores the same model.
        predictions = [r["logits"] for r in self.records(first_dir, "predictions", 2)]
        self.assertAllClose(predictions[0], predictions[1], **ranks_testing.FLOAT32_TOLERANCE)
        self.assertAllClose(predictions[0], self._plain_logits(self._plain_weights(path)),
                            **ranks_testing.FLOAT32_TOLERANCE)

        second_dir = os.path.join(self.work_dir, "second")
        ends = self._estimator(3, model_dir, second_dir, max_steps=6)
        starts = self.records(second_dir, "dump", 3)
        for rank, start in enumerate(starts):
            self.assertEqual(4, start["global_step"])
            for name in self.SHARDED:
                self.assertAllEqual(rows[name][ownership.owned_ids(rank_program.NUM_ROWS, rank, 3)], start[name],
                                    name)
        # The session that restored step 4 did not write its rows again: step 4 stays a 2-rank checkpoint.
        self.assertEqual(2, row_stream.saved_ranks(path))
        final_path = os.path.join(model_dir, "model.ckpt-6")
        self.assertEqual(6, self._checkpoint(final_path)["global_step"])
        self.assertEqual(3, row_stream.saved_ranks(final_path))
        final = self._rows(final_path, 3)
        for name in self.SHARDED:
            self.assertAllEqual(ranks_testing.assemble([end[name] for end in ends], rank_program.NUM_ROWS),
                                final[name])
        self.assertNotAllClose(rows["model/v"], final["model/v"])


if __name__ == "__main__":
    tf.test.main()
