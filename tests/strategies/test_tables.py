"""Tests of the embedding tables a strategy creates: rows looked up by id, with and without dedup."""

import dataclasses

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import tables


class VariableTableTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.parameters(False, True)
    def test_tables_look_up_rows_with_and_without_dedup(self, dedup):
        ids = np.array([[3, 1, 3], [0, 3, 2]], np.int64)
        with tf.Graph().as_default():
            context = dataclasses.replace(strategies.ModelContext(),
                                          embedding_factory=tables.variable_tables(dedup=dedup))
            table = context.embedding("t", 5, [2], initializer=tf.compat.v1.constant_initializer(
                np.arange(10, dtype=np.float32).reshape(5, 2)))
            weights = context.embedding("w", 5)
            rows, scalars = table.lookup(tf.constant(ids)), weights.lookup(tf.constant(ids))
            self.assertEqual([2, 3, 2], rows.shape.as_list())
            self.assertEqual([2, 3], scalars.shape.as_list())
            gradient = tf.gradients(tf.reduce_sum(rows), table.variable)[0]
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                got, grad = session.run([rows, tf.convert_to_tensor(gradient)])
        self.assertAllEqual(np.arange(10).reshape(5, 2)[ids], got)
        # Row 3 appears three times, row 4 never.
        self.assertAllEqual([[1, 1], [1, 1], [1, 1], [3, 3], [0, 0]], grad)

    def test_a_partitioned_table_lists_its_partitions(self):
        with tf.Graph().as_default():
            table = tables.variable_tables(partitioner=tf.compat.v1.fixed_size_partitioner(2))("t", [6, 2])
            self.assertLen(table.variables(), 2)
            self.assertEqual((6, 2), table.shape)


if __name__ == "__main__":
    tf.test.main()
