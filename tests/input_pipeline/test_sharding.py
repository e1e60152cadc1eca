"""Tests for input_pipeline.sharding: every row of the sharding tables."""

import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import sharding

# Two hosts with three workers each; the process is worker 1 of host 1.
TWO_BY_THREE = sharding.Topology(num_hosts=2, host_index=1, workers_per_host=3, local_rank=1,
                                 rank=4, size=6)
# Three hosts with one worker each; the process is on host 2.
THREE_HOSTS = sharding.Topology(num_hosts=3, host_index=2, workers_per_host=1, local_rank=0,
                                rank=2, size=3)


class TopologyTest(tf.test.TestCase, parameterized.TestCase):

    def test_from_ranks_fills_hosts_in_order(self):
        topology = sharding.Topology.from_ranks(rank=4, size=6, local_rank=1, workers_per_host=3)
        self.assertEqual(topology, TWO_BY_THREE)

    def test_from_ranks_refuses_uneven_hosts(self):
        with self.assertRaisesRegex(ValueError, "size 7 is not a multiple of workers_per_host 3"):
            sharding.Topology.from_ranks(rank=0, size=7, local_rank=0, workers_per_host=3)

    @parameterized.named_parameters(
        ("size", dict(size=5), "size must be num_hosts \\* workers_per_host = 2 \\* 3, got 5"),
        ("host_index", dict(host_index=2), "host_index must be in \\[0, 2\\), got 2"),
        ("local_rank", dict(local_rank=3), "local_rank must be in \\[0, 3\\), got 3"),
        ("rank", dict(rank=-1), "rank must be in \\[0, 6\\), got -1"),
        ("hosts", dict(num_hosts=0, size=0), "num_hosts and workers_per_host must be >= 1, got 0 and 3"),
    )
    def test_invalid(self, change, message):
        fields = dict(num_hosts=2, host_index=1, workers_per_host=3, local_rank=1, rank=4, size=6)
        fields.update(change)
        with self.assertRaisesRegex(ValueError, message):
            sharding.Topology(**fields)


class FileModeShardTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("one_worker_per_host_by_host", THREE_HOSTS, False, (3, 2)),
        ("one_worker_per_host_s3_sharded", THREE_HOSTS, True, (1, 0)),
        ("ranks_by_rank", TWO_BY_THREE, False, (6, 4)),
        ("ranks_s3_sharded", TWO_BY_THREE, True, (3, 1)),
        ("single_process", sharding.Topology(), False, (1, 0)),
    )
    def test_rule(self, topology, s3_sharded, expected):
        self.assertEqual(sharding.file_mode_shard(topology, s3_sharded), expected)


class PipeModeShardTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("by_host", TWO_BY_THREE, False, (2, 1)),
        ("s3_sharded", TWO_BY_THREE, True, (1, 0)),
        ("one_host", sharding.Topology(workers_per_host=2, local_rank=1, rank=1, size=2), False, (1, 0)),
    )
    def test_rule(self, topology, s3_sharded, expected):
        self.assertEqual(sharding.pipe_mode_shard(topology, s3_sharded), expected)

    def test_host_shard_uses_rank_over_workers_per_host(self):
        # Worker 2 of host 0 and worker 0 of host 1 read different host shards.
        first = sharding.Topology.from_ranks(rank=2, size=6, local_rank=2, workers_per_host=3)
        second = sharding.Topology.from_ranks(rank=3, size=6, local_rank=0, workers_per_host=3)
        self.assertEqual(sharding.pipe_mode_shard(first, False), (2, 0))
        self.assertEqual(sharding.pipe_mode_shard(second, False), (2, 1))


class AssignChannelTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.parameters((0, "train_b"), (1, "train_a"), (2, "train_c"))
    def test_explicit_order_never_sorted(self, local_rank, expected):
        channels = ["train_b", "train_a", "train_c"]
        self.assertEqual(sharding.assign_channel(channels, local_rank, 3), expected)

    def test_extra_channels_are_allowed(self):
        self.assertEqual(sharding.assign_channel(("x", "y", "z"), 1, 2), "y")

    def test_too_few_channels(self):
        with self.assertRaisesRegex(ValueError, r"4 workers per host need 4 channels, got 2: \['a', 'b'\]"):
            sharding.assign_channel(["a", "b"], 0, 4)

    def test_duplicate_channel(self):
        with self.assertRaisesRegex(ValueError, "channel 'a' is listed 2 times.*different channels"):
            sharding.assign_channel(["a", "b", "a"], 0, 3)

    def test_local_rank_out_of_range(self):
        with self.assertRaisesRegex(ValueError, r"local_rank must be in \[0, 2\), got 2"):
            sharding.assign_channel(["a", "b"], 2, 2)


class BalanceTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("files", [5, 3, 4, 4, 2], 2, True, [11, 7]),
        ("records", [5, 3, 4, 4, 2], 2, False, [9, 9]),
        ("records_remainder", [5, 3, 3], 4, False, [3, 3, 3, 2]),
    )
    def test_rows_per_shard(self, rows, num_shards, by_files, expected):
        self.assertEqual(sharding.rows_per_shard(rows, num_shards, by_files), expected)

    @parameterized.named_parameters(
        ("even", [100, 100, 100, 100], 2, True),
        ("odd_file_count", [100, 100, 96], 2, False),
        ("just_balanced", [50, 50, 50, 47], 2, True),
        ("too_few_files", [100], 2, False),
        ("uneven_files_even_shards", [100, 10, 10, 100], 2, True),
        ("skewed", [100, 10, 10, 10], 2, False),
    )
    def test_files_balanced(self, weights, num_shards, expected):
        self.assertEqual(sharding.files_balanced(weights, num_shards), expected)


if __name__ == "__main__":
    tf.test.main()
