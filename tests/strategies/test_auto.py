"""Tests of the `auto` strategy's choice."""

import json

import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import auto


class ChooseTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("horovodrun", {"HOROVOD_SIZE": "4"}, 16, 0, "horovod"),
        ("mpirun", {"OMPI_COMM_WORLD_SIZE": "2"}, 2, 0, "horovod"),
        ("one_rank_is_not_horovod", {"HOROVOD_SIZE": "1"}, 2, 0, "single"),
        ("parameter_servers", {"TF_CONFIG": json.dumps(
            {"cluster": {"chief": ["a:1"], "ps": ["b:2", "c:3"]}, "task": {"type": "ps", "index": 0}})},
         8, 0, "ps"),
        ("several_gpus", {}, 8, 4, "mirrored"),
        ("one_gpu", {}, 8, 1, "single"),
        ("many_cores", {}, 16, 0, "tower"),
        ("two_cores", {}, 2, 0, "single"),
    )
    def test_choice(self, environ, cpu_count, num_gpus, expected):
        name, reason = auto.choose(environ, cpu_count, num_gpus)
        self.assertEqual(expected, name)
        self.assertNotEmpty(reason)

    def test_bad_tf_config_is_named(self):
        with self.assertRaisesRegex(ValueError, "TF_CONFIG is not valid JSON.*'{oops'"):
            auto.choose({"TF_CONFIG": "{oops"}, 2, 0)

    def test_ranks_of_a_host_get_their_share_of_its_vcpus_as_threads(self):
        config = strategies.StrategyConfig(name="horovod")
        shared = auto.with_rank_threads(config, {"HOROVOD_LOCAL_SIZE": "4", "HOROVOD_SIZE": "8"}, 16)
        self.assertEqual((4, 4), (shared.intra_op_threads, shared.inter_op_threads))
        # Threads the user set, one rank per host, and strategies of one process are left alone.
        given = strategies.StrategyConfig(name="hybrid", intra_op_threads=2)
        self.assertEqual(given, auto.with_rank_threads(given, {"HOROVOD_LOCAL_SIZE": "4"}, 16))
        self.assertEqual(config, auto.with_rank_threads(config, {"HOROVOD_LOCAL_SIZE": "1"}, 16))
        single = strategies.StrategyConfig(name="single")
        self.assertEqual(single, auto.with_rank_threads(single, {"HOROVOD_LOCAL_SIZE": "4"}, 16))

    def test_auto_builds_a_registered_adapter(self):
        strategy = strategies.get(strategies.StrategyConfig(name="auto"))
        self.assertIn(strategy.name, strategies.names())
        self.assertNotEqual("auto", strategy.name)


if __name__ == "__main__":
    tf.test.main()
