"""Tests of `strategies.sharded.checkpoint`: checkpoints whose layout does not depend on the number of ranks.

The fast tests run Horovod in this process (one rank); the slow one writes a
checkpoint at 2 real ranks and restores it at 3 and in a plain graph.
"""

import os

import pytest
import tensorflow as tf

from strategies.sharded import checkpoint as checkpoint_lib
from strategies.sharded import ownership
from strategies.sharded import table as table_lib
from tests.strategies.sharded import rank_program, ranks_testing


class OneRankTest(tf.test.TestCase):
    """Save and restore with Horovod in this process (one rank)."""

    def setUp(self):
        super().setUp()
        self.hvd = ranks_testing.import_horovod(self)
        self.rank, self.size = self.hvd.rank(), self.hvd.size()

    def _table(self, name="table", width=3, **kwargs):
        with tf.compat.v1.variable_scope("scope", reuse=tf.compat.v1.AUTO_REUSE):
            return table_lib.ShardedEmbedding(name, 10, width, self.rank, self.size, self.hvd, **kwargs)

    def test_checkpoint_holds_full_tables_and_slots_and_restores(self):
        model_dir = ranks_testing.tempdir(self)
        with tf.Graph().as_default():
            table = self._table()
            dense = tf.compat.v1.get_variable("dense", [3])
            loss = tf.reduce_sum(table.lookup(tf.constant([1, 4])) * dense)
            train = rank_program.make_optimizer(rank_program.LAZY_ADAM).minimize(loss)
            checkpoint = checkpoint_lib.ShardedCheckpoint([table], self.hvd)
            self.assertEqual(["dense", "beta1_power", "beta2_power", "dense/Adam", "dense/Adam_1"],
                             [v.op.name for v in checkpoint.replicated_variables()])
            saver = checkpoint.saver()
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train)
                trained = session.run({table.checkpoint_name(v): v for _, v in checkpoint.sharded_variables()})
                path = saver.save(session, os.path.join(model_dir, "model.ckpt"))
        self.assertEqual({"scope/table": [10, 3], "scope/table/Adam": [10, 3], "scope/table/Adam_1": [10, 3],
                          "dense": [3], "dense/Adam": [3], "dense/Adam_1": [3], "beta1_power": [],
                          "beta2_power": []}, dict(tf.train.list_variables(path)))
        for name, value in trained.items():
            self.assertAllEqual(value, tf.train.load_variable(path, name))
        with tf.Graph().as_default():
            table = self._table()
            tf.compat.v1.get_variable("dense", [3])
            rank_program.make_optimizer(rank_program.LAZY_ADAM).minimize(
                tf.reduce_sum(table.lookup(tf.constant([1]))))
            checkpoint = checkpoint_lib.ShardedCheckpoint([table], self.hvd)
            hook = checkpoint.restore_hook(model_dir)
            hook.begin()
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                hook.after_create_session(session, None)
                restored = session.run({table.checkpoint_name(v): v for _, v in checkpoint.sharded_variables()})
        for name, value in trained.items():
            self.assertAllEqual(value, restored[name])

    def test_a_checkpoint_of_another_table_shape_is_refused_on_restore(self):
        model_dir = ranks_testing.tempdir(self)
        with tf.Graph().as_default():
            with tf.compat.v1.variable_scope("scope"):
                tf.compat.v1.get_variable("table", [7, 3])
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                tf.compat.v1.train.Saver().save(session, os.path.join(model_dir, "model.ckpt"))
        with tf.Graph().as_default():
            checkpoint = checkpoint_lib.ShardedCheckpoint([self._table()], self.hvd)
            saver = checkpoint.saver()
            hook = checkpoint.restore_hook(model_dir)
            hook.begin()
            with self.session() as session:
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            "checkpoint tensor .*scope/table.* does not have the shape "
                                            "\\[10, 3\\]"):
                    saver.restore(session, tf.train.latest_checkpoint(model_dir))
                session.run(tf.compat.v1.global_variables_initializer())
                with self.assertRaisesRegex(ValueError, "scope/table: \\[7, 3\\] in the checkpoint, \\[10, 3\\] "
                                                        "expected"):
                    hook.after_create_session(session, None)

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

    def test_checkpoint_written_at_two_ranks_restores_at_three_and_in_a_plain_graph(self):
        model_dir = os.path.join(self.work_dir, "model")
        first_dir = os.path.join(self.work_dir, "first")
        ends = self._estimator(2, model_dir, first_dir, max_steps=4, predict=True)
        path = os.path.join(model_dir, "model.ckpt-4")
        saved = self._checkpoint(path)
        num_rows, width = rank_program.NUM_ROWS, rank_program.WIDTH
        shapes = dict(tf.train.list_variables(path))
        for name in self.SHARDED:
            self.assertEqual([num_rows] + ([width] if name.startswith("model/v") else []), shapes[name], name)
            self.assertAllEqual(ranks_testing.assemble([end[name] for end in ends], num_rows), saved[name])
        self.assertEqual([], [name for name in shapes if table_lib.SHARD_SUFFIX in name])
        self.assertEqual(4, saved["global_step"])

        # Every rank predicted from its own checkpoint (rank 1: its private
        # local shard); a plain single-process graph restores the same model.
        predictions = [r["logits"] for r in self.records(first_dir, "predictions", 2)]
        self.assertAllClose(predictions[0], predictions[1], **ranks_testing.FLOAT32_TOLERANCE)
        self.assertAllClose(predictions[0], self._plain_logits(path), **ranks_testing.FLOAT32_TOLERANCE)

        second_dir = os.path.join(self.work_dir, "second")
        ends = self._estimator(3, model_dir, second_dir, max_steps=6)
        starts = self.records(second_dir, "dump", 3)
        for rank, start in enumerate(starts):
            self.assertEqual(4, start["global_step"])
            for name in self.SHARDED:
                self.assertAllEqual(saved[name][ownership.owned_ids(num_rows, rank, 3)], start[name], name)
        # The save at session start (step 4, gathered from 3 ranks) rewrote the same values.
        rewritten = self._checkpoint(path)
        self.assertEqual(sorted(saved), sorted(rewritten))
        for name, value in saved.items():
            self.assertAllEqual(value, rewritten[name], name)
        final = self._checkpoint(os.path.join(model_dir, "model.ckpt-6"))
        self.assertEqual(6, final["global_step"])
        for name in self.SHARDED:
            self.assertAllEqual(ranks_testing.assemble([end[name] for end in ends], num_rows), final[name])
        self.assertNotAllClose(saved["model/v"], final["model/v"])



if __name__ == "__main__":
    tf.test.main()
