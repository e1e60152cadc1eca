"""Tests of the critical path of a traced step: the longest chain's arithmetic and a real session's metadata."""

import tensorflow as tf

from deepfm.runtime import critical_path

LOCAL = "/job:localhost/replica:0/task:0/device:CPU:0"
OTHER = "/job:ps/replica:0/task:0/device:CPU:0"


class LongestChainTest(tf.test.TestCase):

    def test_the_longest_weighted_chain_wins_over_the_longest_in_ops(self):
        # a -> b -> c (1 + 1 + 1 ms) against a -> d (1 + 5 ms), both into e (1 ms).
        inputs = {"a": [], "b": ["a"], "c": ["b:0"], "d": ["a:1"], "e": ["c", "^d"]}
        durations = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 5.0, "e": 1.0}
        path = critical_path.longest_chain(inputs, durations, {"d": "MatMul"})
        self.assertEqual(7.0, path.critical_path_ms)
        self.assertEqual(9.0, path.work_ms)
        self.assertEqual(["a", "d", "e"], [op.name for op in path.ops])
        self.assertEqual("MatMul", path.ops[1].op)
        self.assertAlmostEqual(9.0 / 7.0, path.parallelism)

    def test_speedup_bound_is_work_over_the_larger_floor(self):
        path = critical_path.CriticalPath(work_ms=24.0, critical_path_ms=10.0, ops=())
        self.assertEqual(1.0, path.speedup_bound(1))
        self.assertEqual(2.0, path.speedup_bound(2))  # work / 2 = 12 > 10
        self.assertEqual(2.4, path.speedup_bound(4))  # the critical path: 10
        with self.assertRaisesRegex(ValueError, "threads must be >= 1, got 0"):
            path.speedup_bound(0)

    def test_inputs_of_another_process_start_a_chain(self):
        path = critical_path.longest_chain({"recv": ["remote_send"], "add": ["recv"]}, {"recv": 3.0, "add": 1.0})
        self.assertEqual(4.0, path.critical_path_ms)

    def test_a_cycle_is_named(self):
        with self.assertRaisesRegex(ValueError, "cycle through"):
            critical_path.longest_chain({"a": ["b"], "b": ["a"]}, {"a": 1.0, "b": 1.0})

    def test_summary_names_the_longest_ops(self):
        inputs = {str(i): [str(i - 1)] if i else [] for i in range(8)}
        durations = {str(i): float(i) for i in range(8)}
        summary = critical_path.longest_chain(inputs, durations).summary()
        self.assertEqual(28.0, summary["critical_path_ms"])
        self.assertEqual(["7", "6", "5", "4", "3"], [op["name"] for op in summary["critical_ops"]])
        self.assertEqual(1.0, summary["parallelism"])


class OfStepTest(tf.test.TestCase):

    def _metadata(self):
        """A real session's traced step: two independent matmul chains joined by an add."""
        graph = tf.Graph()
        with graph.as_default():
            # Products large enough that every op of both branches takes measurable time.
            # The right branch reads its own input: a matmul equal to l1 would be merged into it by grappler.
            x = tf.random.uniform([384, 384], seed=1)
            y = tf.random.uniform([384, 384], seed=2)
            left = tf.matmul(tf.matmul(x, x, name="l1"), x, name="l2")
            right = tf.matmul(y, y, name="r1")
            total = tf.add(left, right, name="total")
        with tf.compat.v1.Session(graph=graph) as session:
            metadata = tf.compat.v1.RunMetadata()
            session.run(total, options=tf.compat.v1.RunOptions(
                trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True),
                run_metadata=metadata)
        return metadata

    def test_a_real_step_chains_through_the_longer_branch(self):
        path = critical_path.of_step(self._metadata())
        names = [op.name for op in path.ops]
        self.assertIn("total", names)
        self.assertLess(path.critical_path_ms, path.work_ms)
        self.assertGreater(path.parallelism, 1.0)

    def test_devices_of_other_processes_are_left_out(self):
        metadata = self._metadata()
        local = critical_path.of_step(metadata, [LOCAL])
        self.assertEqual(critical_path.of_step(metadata).work_ms, local.work_ms)
        self.assertEqual(0.0, critical_path.of_step(metadata, [OTHER]).work_ms)

    def test_metadata_without_graphs_is_an_error_saying_what_to_ask_for(self):
        with self.assertRaisesRegex(ValueError, "output_partition_graphs=True"):
            critical_path.of_step(tf.compat.v1.RunMetadata())


if __name__ == "__main__":
    tf.test.main()
