"""Tests of `strategies.sharded.ownership`: which rank owns which rows, and shard initializers."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from strategies.sharded import ownership


class OwnershipTest(tf.test.TestCase, parameterized.TestCase):
    """Ownership, shard sizes and permutations, without Horovod."""

    @parameterized.parameters((0, 1), (1, 3), (2, 3), (10, 3), (12, 4), (301, 2), (301, 3))
    def test_shards_partition_the_ids(self, num_rows, size):
        owned = [ownership.owned_ids(num_rows, rank, size) for rank in range(size)]
        self.assertEqual([len(ids) for ids in owned],
                         [ownership.shard_rows(num_rows, rank, size) for rank in range(size)])
        self.assertAllEqual(np.arange(num_rows), np.sort(np.concatenate(owned)))
        for rank, ids in enumerate(owned):
            self.assertAllEqual(np.full(len(ids), rank), ids % size)
            self.assertAllEqual(np.arange(len(ids)), ids // size)

    @parameterized.parameters((10, 3, [4, 3, 3]), (2, 3, [1, 1, 0]), (9, 3, [3, 3, 3]), (5, 1, [5]))
    def test_shard_rows(self, num_rows, size, expected):
        self.assertEqual(expected, [ownership.shard_rows(num_rows, rank, size) for rank in range(size)])

    @parameterized.named_parameters(
        ("rank_too_large", (5, 3, 3), "rank must be in \\[0, size=3\\), got rank=3"),
        ("negative_rank", (5, -1, 3), "got rank=-1"),
        ("no_ranks", (5, 0, 0), "number of ranks must be >= 1, got size=0"),
        ("negative_rows", (-1, 0, 2), "num_rows must be >= 0, got -1"),
    )
    def test_bad_topology_is_named(self, args, message):
        with self.assertRaisesRegex(ValueError, message):
            ownership.shard_rows(*args)

    @parameterized.parameters((tf.int32, 2), (tf.int64, 3), (tf.int64, 1))
    def test_owner_and_local_row_maps(self, dtype, size):
        ids = np.array([[0, 1, 2], [7, 300, 299]])
        owner, row = self.evaluate([ownership.owner_of(tf.constant(ids, dtype), size),
                                    ownership.local_row_of(tf.constant(ids, dtype), size)])
        self.assertEqual(tf.int32, ownership.owner_of(tf.constant(ids, dtype), size).dtype)
        self.assertAllEqual(ids % size, owner)
        self.assertAllEqual(ids // size, row)
        for rank in range(size):
            mine = owner == rank
            self.assertAllEqual(ids[mine], ownership.owned_ids(301, rank, size)[row[mine]])

    @parameterized.parameters((301, 2), (301, 3), (10, 4), (3, 5))
    def test_rank_order_and_id_positions_are_inverse(self, num_rows, size):
        order = ownership.rank_order(num_rows, size)
        positions = ownership.id_order_positions(num_rows, size)
        self.assertAllEqual(np.arange(num_rows), order[positions])
        self.assertAllEqual(np.arange(num_rows), positions[order])
        self.assertAllEqual(positions, self.evaluate(ownership.id_order_positions_tensor(num_rows, size)))
        full = np.random.RandomState(0).randn(num_rows, 2)
        concatenated = np.concatenate([full[ownership.owned_ids(num_rows, rank, size)] for rank in range(size)])
        self.assertAllEqual(full, concatenated[positions])  # the ranks' rows, back in id order

    def test_variance_scaling_shard_has_the_full_table_spread(self):
        full_shape, shard_shape = [30000, 8], [10000, 8]
        for initializer in (tf.compat.v1.glorot_normal_initializer(seed=1),
                            tf.compat.v1.variance_scaling_initializer(2.0, "fan_in", "uniform", seed=1)):
            full = self.evaluate(initializer(full_shape))
            shard_of = ownership.shard_initializer(initializer, full_shape, shard_shape, rank=1)
            shard = self.evaluate(shard_of(shard_shape))
            unscaled = self.evaluate(initializer(shard_shape))
            self.assertAllClose(full.std(), shard.std(), rtol=0.03)
            self.assertNotAllClose(full.std(), unscaled.std(), rtol=0.1)

    def test_seeded_shards_differ_by_rank(self):
        initializer = tf.compat.v1.glorot_uniform_initializer(seed=4)
        shards = [self.evaluate(ownership.shard_initializer(initializer, [20, 3], [10, 3], rank)([10, 3]))
                  for rank in (0, 1)]
        self.assertNotAllClose(shards[0], shards[1])

    def test_shape_free_initializers_are_kept(self):
        initializer = tf.compat.v1.random_normal_initializer(stddev=0.1)
        self.assertIs(initializer, ownership.shard_initializer(initializer, [20, 3], [10, 3], 0))


    def test_row_dtype_widens_past_int32(self):
        self.assertEqual(tf.int32, ownership.row_dtype(10, 2))
        self.assertEqual(tf.int64, ownership.row_dtype(2 * ownership.INT32_MAX + 4, 2))


if __name__ == "__main__":
    tf.test.main()
