"""Tests of `Topology`: where a process sits, checked when it is made, and its place among the hosts."""

import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import topology as topology_lib


class TopologyTest(tf.test.TestCase, parameterized.TestCase):

    def test_the_defaults_are_one_process_on_one_device(self):
        topology = strategies.Topology()
        self.assertEqual((topology_lib.ROLE_WORKER, "main", True, True, 1, 1, False),
                         (topology.role, topology.task, topology.is_chief, topology.evaluates,
                          topology.replicas_in_sync, topology.workers, topology.lockstep))
        self.assertEqual((1, 0), (topology.hosts, topology.host_index))

    def test_ranks_fill_hosts_in_order(self):
        topology = strategies.Topology(workers=6, rank=4, workers_per_host=3, local_rank=1)
        self.assertEqual((2, 1), (topology.hosts, topology.host_index))
        placement = topology.placement()
        self.assertEqual((2, 1, 3, 1, 4, 6), (placement.num_hosts, placement.host_index, placement.workers_per_host,
                                              placement.local_rank, placement.rank, placement.size))

    @parameterized.named_parameters(
        ("role", dict(role="evaluator"), "role must be one of worker, ps, got 'evaluator'"),
        ("replicas", dict(replicas_in_sync=0), "replicas_in_sync must be >= 1, got 0"),
        ("uneven_hosts", dict(workers=5, workers_per_host=2), "5 training processes do not fill hosts of 2 each"),
        ("rank", dict(workers=2, rank=2), r"rank must be in \[0, 2\), got 2"),
        ("local_rank", dict(workers=4, workers_per_host=2, local_rank=2), r"local_rank must be in \[0, 2\), got 2"),
    )
    def test_an_impossible_place_is_refused(self, fields, message):
        with self.assertRaisesRegex(ValueError, message):
            strategies.Topology(**fields)


if __name__ == "__main__":
    tf.test.main()
