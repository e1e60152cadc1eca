"""Tests of `benchmarks.exchange_latency`: its launches, its summary, and one tiny run at two real ranks."""

import json
import os
from unittest import mock

import pytest
import tensorflow as tf

from benchmarks import exchange_latency, exchange_latency_collective_rank, harness
from tests import command_line, paths


class LaunchTest(tf.test.TestCase):

    def test_each_rank_is_pinned_to_its_own_core(self):
        gloo = exchange_latency.launch_argv("gloo", 2, ["--rows=10"])
        self.assertIn("--gloo", gloo)
        self.assertIn("exec taskset -c $HOROVOD_RANK", gloo[-1])
        self.assertTrue(gloo[-1].endswith("-m %s --rows=10" % exchange_latency.RANK_MODULE))
        mpi = exchange_latency.launch_argv("mpi", 3, [])
        self.assertEqual("mpirun", mpi[0])
        self.assertEqual("3", mpi[mpi.index("-np") + 1])
        self.assertIn("exec taskset -c $OMPI_COMM_WORLD_RANK", mpi[-1])
        self.assertNotIn("mpi_yield_when_idle", mpi)
        waits_yield = exchange_latency.launch_argv("mpi_yield", 2, [])
        self.assertEqual(["-mca", "mpi_yield_when_idle", "1"],
                         waits_yield[waits_yield.index("-mca"):waits_yield.index("-mca") + 3])
        self.assertEqual(mpi[-1], waits_yield[-1])

    def test_collective_ranks_are_pinned_and_named_in_their_tf_config(self):
        argv = exchange_latency.collective_rank_argv(1, ["--rows=10"])
        self.assertEqual(["taskset", "-c", "1"], argv[:3])
        self.assertEqual(["-m", exchange_latency.COLLECTIVE_RANK_MODULE, "--rows=10"], argv[-3:])
        config = json.loads(exchange_latency.collective_tf_config(["localhost:1", "localhost:2"], 1))
        self.assertEqual({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                          "task": {"type": "worker", "index": 1}}, config)

    def test_collective_rank_rejects_a_tf_config_without_its_task(self):
        with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1"]},
                                                                   "task": {"type": "worker", "index": 1}})}):
            with self.assertRaisesRegex(ValueError, "index"):
                exchange_latency_collective_rank.cluster_from_env()

    def test_summary_keeps_the_variant_order_and_every_round(self):
        order = list(exchange_latency.VARIANT_ORDER[:4])
        values = {}
        for i, name in enumerate(reversed(order)):
            values.update({name + ".wall_us": [10.0 * i] * 2, name + ".cpu_us": [1.0] * 2,
                           name + ".p90_us": [20.0 * i] * 2})
        results = harness.Results(["gloo_1ms"], {"gloo_1ms": dict(values, **{harness.PEAK_RSS_MB: [5.0, 6.0]})},
                                  {"gloo_1ms": [{}, {}]}, {}, 2)
        summary = exchange_latency.summarize(results, {"gloo_1ms": "gloo, cycle 1 ms"})
        variants = summary["gloo, cycle 1 ms"]
        self.assertEqual(order, list(variants))
        expected = 10.0 * list(reversed(order)).index("session")
        self.assertEqual([expected, expected], variants["session"]["wall_us"])

    def test_a_launch_per_controller_and_cycle_time_and_bad_options_are_named(self):
        config = exchange_latency.ExchangeLatencyConfig(controllers="gloo,mpi,tf", cycle_times="1,5", ranks=1)
        self.assertEqual(["gloo_1ms", "gloo_5ms", "mpi_1ms", "mpi_5ms", "tf"],
                         [launch.name for launch in exchange_latency.launch_variants(config)])
        self.assertEqual("mpi, cycle 5 ms", exchange_latency.launch_variants(config)[3].label)
        with self.assertRaisesRegex(ValueError, "--controllers: 'nccl' is not one of gloo"):
            exchange_latency.ExchangeLatencyConfig(controllers="gloo,nccl", ranks=1)
        with self.assertRaisesRegex(ValueError, "--cycle_times: 'fast' is not a number"):
            exchange_latency.ExchangeLatencyConfig(cycle_times="fast", ranks=1)
        with self.assertRaisesRegex(ValueError, "--ranks 100000: this machine has"):
            exchange_latency.ExchangeLatencyConfig(ranks=100000)


@pytest.mark.slow
class TinyRunTest(tf.test.TestCase):

    def test_two_ranks_report_every_horovod_variant(self):
        if (os.cpu_count() or 1) < 2:
            self.skipTest("one rank per core needs 2 cores; this machine has %d" % (os.cpu_count() or 1))
        results = self.get_temp_dir()
        command = command_line.python_module(
            "benchmarks.exchange_latency", "--runs", "1", "--iterations", "5", "--warmup", "2", "--rows", "50",
            "--cycle_times", "1", "--controllers", "gloo", "--name", "tiny", "--results_dir", results)
        # From the repository's root, where benchmarks/ (not installed) imports, as the docs run it.
        completed = command_line.run(command, paths.REPO_ROOT, timeout=300)
        self.assertEqual(0, completed.returncode, command_line.describe(command, completed))
        with open(os.path.join(results, "tiny.json")) as f:
            summary = json.load(f)["summary"]["gloo, cycle 1 ms"]
        self.assertEqual(sorted(["idle_10ms", "session", "horovod_alltoall_fixed", "horovod_alltoall_variable",
                                 "horovod_allreduce"]), sorted(summary))
        for variant, values in summary.items():
            self.assertGreater(values["wall_us"][0], 0, variant)
        with open(os.path.join(results, "tiny.md")) as f:
            self.assertIn("python -m benchmarks.exchange_latency --runs 1 --iterations 5 --warmup 2 --rows 50",
                          f.read())

    def test_two_ranks_exchange_the_right_values_with_tensorflow_collectives(self):
        if (os.cpu_count() or 1) < 2:
            self.skipTest("one rank per core needs 2 cores; this machine has %d" % (os.cpu_count() or 1))
        results = self.get_temp_dir()
        rows, width = 3, 2
        command = command_line.python_module(
            "benchmarks.exchange_latency", "--runs", "1", "--iterations", "5", "--warmup", "2", "--rows", str(rows),
            "--width", str(width), "--controllers", "tf", "--name", "tiny_tf", "--results_dir", results)
        # From the repository's root, where benchmarks/ (not installed) imports, as the docs run it.
        completed = command_line.run(command, paths.REPO_ROOT, timeout=120)
        self.assertEqual(0, completed.returncode, command_line.describe(command, completed))
        with open(os.path.join(results, "tiny_tf.json")) as f:
            raw = json.load(f)
        launch = exchange_latency.COLLECTIVES_LAUNCH
        summary = raw["summary"][launch]
        self.assertEqual(["session", "tf_collective_alltoall", "tf_collective_gather", "tf_collective_reduce"],
                         list(summary))
        for variant, values in summary.items():
            self.assertGreater(values["wall_us"][0], 0, variant)
            self.assertGreater(values["cpu_us"][0], 0, variant)
        code = exchange_latency_collective_rank.code
        [rank_checks] = raw["checks"][launch]
        self.assertLen(rank_checks, 2)
        for rank, checks in enumerate(rank_checks):
            # Part j of what rank `rank` received: every element is what rank j sent it.
            self.assertEqual([[code(j, rank)] * 2 for j in range(2)], checks["tf_collective_alltoall"])
            self.assertEqual([[code(j, 0)] * 2 for j in range(2)], checks["tf_collective_gather"])
            self.assertEqual([[code(0, i) + code(1, i)] * 2 for i in range(2)], checks["tf_collective_reduce"])
        with open(os.path.join(results, "tiny_tf.md")) as f:
            table = f.read()
        self.assertIn("| %s | `tf_collective_alltoall` |" % launch, table)
