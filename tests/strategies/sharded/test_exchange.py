"""Tests of `strategies.sharded.exchange`: grouping by owner, places per owner, the id and row exchanges.

Horovod runs in this process (one rank): every all-to-all returns what it
sends, which is enough to check the shapes, the padding and the gradients.
Real ranks: tests/strategies/sharded/test_table.py and test_pipeline.py.
"""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from strategies.sharded import exchange
from tests.strategies.sharded import ranks_testing


class GroupByOwnerTest(tf.test.TestCase, parameterized.TestCase):
    """The send buffer of an id exchange, without Horovod."""

    def _grouped(self, ids, size, capacity):
        send, splits, positions = self.evaluate(exchange.group_by_owner(tf.constant(ids, tf.int64), size, capacity))
        return send, splits, positions

    @parameterized.parameters((2, None), (3, None), (3, 0), (4, 3))
    def test_group_by_owner(self, size, spare_places):
        """`spare_places`: None for no padding, else the capacity above the largest split."""
        ids = np.random.RandomState(size).permutation(40)[:14]
        counts = np.bincount(ids % size, minlength=size)
        capacity = None if spare_places is None else counts.max() + spare_places
        send, splits, positions = self._grouped(ids, size, capacity)
        places = capacity or 0
        if capacity is None:
            self.assertAllEqual(counts, splits)
            self.assertLen(send, len(ids))
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        else:
            self.assertAllEqual(np.full(size, capacity), splits)
            self.assertLen(send, size * capacity)
            starts = np.arange(size) * places
            unused = np.ones(len(send), bool)
            unused[positions] = False
            self.assertAllEqual(np.full(unused.sum(), exchange.PADDING_ROW), send[unused])
        self.assertAllEqual(ids // size, send[positions])
        owners = ids % size
        self.assertTrue(np.all(positions >= starts[owners]))
        self.assertTrue(np.all(positions < starts[owners] + counts[owners]))
        self.assertLen(set(positions), len(ids))

    def test_group_by_owner_without_ids(self):
        send, splits, positions = self._grouped(np.zeros([0], np.int64), 3, None)
        self.assertAllEqual([0, 0, 0], splits)
        self.assertEqual((0, 0), (len(send), len(positions)))

    def test_a_capacity_overflow_names_the_capacity(self):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "more distinct ids for one rank than the "
                                                                    "places of the padded exchange"):
            self._grouped(np.array([0, 2, 4, 1]), 2, 2)

    def test_a_tensor_capacity_gives_the_same_buffer(self):
        ids = np.array([5, 2, 9, 4, 7])
        fixed = self._grouped(ids, 2, 4)
        dynamic = self._grouped(ids, 2, tf.constant(4))
        for want, got in zip(fixed, dynamic):
            self.assertAllEqual(want, got)


class IdCapacityTest(tf.test.TestCase):
    """The places per owner of a padded exchange: sized from the first batch, grown, never shrunk."""

    def _places(self, capacity, batches):
        counts = tf.compat.v1.placeholder(tf.int32, [None])
        places, update = capacity.fit(counts)
        with self.session() as session:
            session.run(tf.compat.v1.local_variables_initializer())
            return [session.run([places, update], {counts: batch})[0] for batch in batches]

    def test_sized_from_the_first_batch_with_margin_and_quantum_then_grown_only_when_needed(self):
        with tf.Graph().as_default():
            capacity = exchange.IdCapacity("places")
            self.assertEqual(0, capacity.start)
            # 100 x 1.05 = 105 -> 112 (multiple of 8); 110 fits; 130 x 1.05 = 136.5 -> 137 -> 144.
            self.assertEqual([112, 112, 112, 144, 144], self._places(
                capacity, [[100, 90], [110, 3], [0, 0], [7, 130], [140, 1]]))

    def test_a_start_is_kept_until_a_batch_needs_more(self):
        with tf.Graph().as_default():
            self.assertEqual([64, 64, 72], self._places(exchange.IdCapacity("places", start=64), [[1], [64], [65]]))

    def test_capacity_is_a_local_variable(self):
        with tf.Graph().as_default():
            capacity = exchange.IdCapacity("places")
            self.assertIn(capacity.variable, tf.compat.v1.local_variables())
            self.assertNotIn(capacity.variable, tf.compat.v1.global_variables())

    def test_bad_settings_are_named(self):
        with tf.Graph().as_default():
            with self.assertRaisesRegex(ValueError, "start must be >= 0, got -1"):
                exchange.IdCapacity("places", start=-1)
            with self.assertRaisesRegex(ValueError, "margin must be >= 0, got -0.5"):
                exchange.IdCapacity("places", margin=-0.5)


class ExchangeOneRankTest(tf.test.TestCase, parameterized.TestCase):
    """The exchanges with Horovod in this process (one rank)."""

    def setUp(self):
        super().setUp()
        self.hvd = ranks_testing.import_horovod(self)

    @parameterized.named_parameters(("variable", False), ("padded", True))
    def test_route_then_rows_back_in_the_ids_order(self, padded):
        ids = np.array([[4, 1, 4], [9, 1, 0]])
        with tf.Graph().as_default():
            capacity = exchange.IdCapacity("places") if padded else None
            routing = exchange.route_ids(tf.constant(ids), self.hvd.size(), self.hvd, capacity=capacity)
            table = tf.constant(np.arange(10, dtype=np.float32)[:, None] * [1.0, -1.0])
            local_rows = tf.maximum(routing.received_rows, 0)  # padding places serve row 0
            returned = exchange.exchange_rows(tf.gather(table, local_rows), routing, self.hvd)
            rows = exchange.rows_of_batch(returned, routing.batch_positions)
            with self.session() as session:
                ranks_testing.initialize(session)
                got, stats, send_splits = session.run([rows, routing.stats, routing.send_splits])
        self.assertAllEqual(np.arange(10, dtype=np.float32)[ids.reshape(-1)][:, None] * [1.0, -1.0], got)
        self.assertEqual(4, stats.distinct_ids)
        self.assertEqual(4, stats.rows_served)
        self.assertEqual(8 if padded else 0, stats.places_per_owner)  # 4 x 1.05 -> 5 -> 8
        self.assertAllEqual([8 if padded else 4], send_splits)

    def test_rows_of_batch_gradient_is_a_dense_segment_sum(self):
        with tf.Graph().as_default():
            rows = tf.constant([[1.0], [2.0], [3.0]])
            gathered = exchange.rows_of_batch(rows, tf.constant([2, 0, 2, 2]))
            gradient = tf.gradients(tf.reduce_sum(gathered * [[1.0], [10.0], [100.0], [1000.0]]), rows)[0]
            self.assertIsInstance(gradient, tf.Tensor)
            self.assertAllEqual([[10.0], [0.0], [1101.0]], self.evaluate(gradient))

    def test_stale_rows_are_the_earlier_rows_and_their_gradient_reaches_the_served_rows(self):
        with tf.Graph().as_default():
            routing = exchange.route_ids(tf.constant([3, 1]), 1, self.hvd)
            variable = tf.compat.v1.get_variable("table", initializer=tf.constant([[0.5], [1.5], [2.5], [3.5]]))
            served = tf.gather(variable, routing.received_rows)
            earlier = tf.constant([[30.0], [10.0]])
            marker = tf.constant(7.0)
            returned = exchange.stale_rows(served, earlier, routing, self.hvd, after=[marker])
            loss = tf.reduce_sum(returned * [[1.0], [2.0]])
            gradient = tf.gradients(loss, variable)[0]
            self.assertIsInstance(gradient, tf.IndexedSlices)
            # The gradient's exchange waits for what `after` names.
            exchanges = [op for op in tf.compat.v1.get_default_graph().get_operations()
                         if op.type == "HorovodAlltoall" and "stale_grads_to_owners" in op.name]
            self.assertLen(exchanges, 1)
            waits = {op.name for op in exchanges[0].control_inputs}
            waits |= {op.name for t in exchanges[0].inputs for op in t.op.control_inputs}
            self.assertIn(marker.op.name, waits)
            with self.session() as session:
                ranks_testing.initialize(session)
                values, (indices, grads) = session.run([returned, (gradient.indices, gradient.values)])
        self.assertAllEqual([[30.0], [10.0]], values)
        dense = np.zeros([4, 1], np.float32)
        np.add.at(dense, indices, grads)
        self.assertAllEqual([[0.0], [2.0], [0.0], [1.0]], dense)


if __name__ == "__main__":
    tf.test.main()
