"""Tests of the `single` strategy's one option: its tables in partitions of this process."""

import os

import numpy as np
import tensorflow as tf

import strategies
from strategies import strategy_names as names
from strategies import tables

ROWS, WIDTH = 10, 3


def _single(**options):
    strategy = strategies.get(strategies.make_config(names.SINGLE, **options))
    strategy.setup()
    return strategy


class TablePartitionsTest(tf.test.TestCase):

    def test_tables_in_partitions_look_up_and_train_every_row(self):
        strategy = _single(table_partitions=3)
        with tf.Graph().as_default():
            table = strategy.model_context(tf.estimator.ModeKeys.TRAIN).embedding_factory("t", [ROWS, WIDTH])
            self.assertLen(table.variables(), 3)
            self.assertEqual(ROWS, sum(v.shape[0] for v in table.variables()))
            ids = tf.constant([[0, 9, 4], [9, 5, 1]], tf.int64)
            rows = table.lookup(ids)
            gradients = tf.gradients(tf.reduce_sum(rows), table.variables())
            whole = tf.concat(table.variables(), axis=0)
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                got, every_row = session.run([rows, whole])
                counts = np.concatenate([session.run(tf.math.unsorted_segment_sum(
                    tf.ones_like(g.values[:, 0]), g.indices, g.dense_shape[0])) for g in gradients])
        self.assertAllClose(every_row[[[0, 9, 4], [9, 5, 1]]], got)
        # Each partition's gradient holds its own rows: row 9 twice, rows 0, 1, 4, 5 once.
        self.assertAllEqual([1, 1, 0, 0, 1, 1, 0, 0, 0, 2], counts)

    def test_one_partition_is_one_variable(self):
        with tf.Graph().as_default():
            table = _single().model_context(tf.estimator.ModeKeys.TRAIN).embedding_factory("t", [ROWS, WIDTH])
            self.assertLen(table.variables(), 1)

    def test_a_checkpoint_restores_at_any_number_of_partitions(self):
        path = os.path.join(self.get_temp_dir(), "model.ckpt")
        with tf.Graph().as_default():
            context = _single(table_partitions=4).model_context(tf.estimator.ModeKeys.TRAIN)
            table = context.embedding_factory("t", [ROWS, WIDTH])
            saver = tf.compat.v1.train.Saver()
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                saved = session.run(tf.concat(table.variables(), axis=0))
                saver.save(session, path)
        for parts in (1, 2):
            with tf.Graph().as_default():
                table = _single(table_partitions=parts).model_context(tf.estimator.ModeKeys.TRAIN).embedding_factory(
                    "t", [ROWS, WIDTH])
                with self.session() as session:
                    tf.compat.v1.train.Saver().restore(session, path)
                    self.assertAllEqual(saved, session.run(tf.concat(table.variables(), axis=0)))

    def test_bad_partitions_and_other_strategies_are_named(self):
        with self.assertRaisesRegex(ValueError, "--table_partitions must be >= 1, got 0"):
            strategies.make_config(names.SINGLE, table_partitions=0)
        with self.assertRaisesRegex(ValueError, "--table_partitions applies to --strategy single, not hybrid"):
            strategies.make_config(names.HYBRID, table_partitions=2)
        self.assertIsNone(tables.row_partitioner(1))


if __name__ == "__main__":
    tf.test.main()
