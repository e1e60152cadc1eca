"""Tests of the rank-growth benchmark: its variants and configuration, the growth arithmetic, a tiny real run."""

import pytest
import tensorflow as tf

from benchmarks import rank_growth as bench
from benchmarks import scale_out
from benchmarks.scale_out import layout
from dataprep import synthetic
from jobs.local import hosts as hosts_lib
from strategies import strategy_names as names
from tests import command_line

ROWS = 3000
FEATURE_SIZE = 2000
STEPS = 20
WARMUP = 5


def _config(variants, **overrides):
    args = ["--variants", variants, "--runs", "1", "--steps", str(STEPS), "--warmup_steps", str(WARMUP)]
    args += ["--%s=%s" % (key, value) for key, value in overrides.items()]
    return bench.make_config(bench.parse_args(args))


def _run(rate, tx_per_step, cpu_s, steps=(10.0, 10.0)):
    """A run of `len(steps)` ranks: `tx_per_step` bytes per rank and step, `cpu_s` CPU-seconds in a 1 s window."""
    return scale_out.RunResult(examples_per_sec=rate, window_s=1.0, steps=list(steps), cpu_seconds={},
                               tx_bytes=[tx_per_step * s for s in steps], rx_bytes=[0.0] * len(steps),
                               host_cpu_seconds=[cpu_s / len(steps)] * len(steps))


class ConfigTest(tf.test.TestCase):

    def test_ranks_share_two_cores_and_run_the_same_steps_with_one_thread(self):
        config = _config("single,horovod@2,hybrid@8,hybrid@2/mpi,hybrid@2/threads2")
        single, horovod, hybrid, mpi, threads = config.variants
        self.assertEqual((1, 2, 8, 2, 2), tuple(v.processes for v in config.variants))
        self.assertEqual((1, 2, 8, 1, 2), tuple(v.num_hosts for v in config.variants))
        self.assertEqual(8, config.num_hosts)
        # Efficiency: single against its one core, every job against the two.
        self.assertEqual((1, 2, 2, 2, 2), tuple(config.references(v) for v in config.variants))
        for variant in config.variants:
            self.assertEqual(STEPS + WARMUP, config.max_steps(variant))
            plan = layout.plan(variant, [0, 1], config.shared_cores)
            argv = scale_out.host_processes(variant, config, self.get_temp_dir(), 0, plan=plan)[0]["argv"]
            self.assertEqual("2" if variant is threads else "1", command_line.flag_value(argv, "--intra_op_threads"),
                             variant.name)
            self.assertIn("--val_data=", argv)
            # Shared cores: the hosts are pinned, not the processes within them.
            self.assertNotIn(layout.TASKSET, argv)
        self.assertEqual(scale_out.LAUNCH_MPI, mpi.launcher)
        self.assertEqual(names.HYBRID, hybrid.strategy)
        self.assertEqual(names.HOROVOD, horovod.strategy)
        self.assertEqual(names.SINGLE, single.strategy)

    def test_hosts_of_their_own_cores_with_ranks_per_host(self):
        config = _config("single,hybrid@2,hybrid@8", shared_cores=0, cores_per_host=4, ranks_per_host=2)
        single, two, eight = config.variants
        # @N: N ranks, 2 per host, each on 2 of its host's 4 cores with 2 threads; single on the cores of one rank.
        self.assertEqual((1, 1, 4), tuple(v.num_hosts for v in config.variants))
        self.assertEqual((1, 2, 8), tuple(config.references(v) for v in config.variants))
        self.assertEqual(("1x2", "2x2", "8x2"), tuple(v.shape() for v in config.variants))
        order = list(range(16))
        plan = layout.plan(eight, order)
        self.assertEqual(((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)), plan.hosts)
        processes = scale_out.host_processes(eight, config, self.get_temp_dir(), 3, plan=plan)
        self.assertEqual([["taskset", "--cpu-list", "12-13"], ["taskset", "--cpu-list", "14-15"]],
                         [p["argv"][:3] for p in processes])
        for process in processes:
            self.assertEqual("2", command_line.flag_value(process["argv"], "--intra_op_threads"))
            self.assertEqual("2", command_line.flag_value(process["argv"], "--inter_op_threads"))
        self.assertEqual(["6", "7"], [p["env"]["HOROVOD_RANK"] for p in processes])
        self.assertEqual(["3", "3"], [p["env"]["HOROVOD_CROSS_RANK"] for p in processes])
        (process,) = scale_out.host_processes(single, config, self.get_temp_dir(), 0, plan=layout.plan(single, order))
        self.assertEqual(["taskset", "--cpu-list", "0-1"], process["argv"][:3])
        # A layout that needs more vCPUs than there are is named before anything starts.
        with self.assertRaisesRegex(ValueError, "4 host\\(s\\) x 4 core\\(s\\) need 16 vCPUs; this process may use 2"):
            layout.plan(eight, [0, 1])
        self.assertNotIn("hybrid@2/threads2", [v.name for v in bench.all_variants(ranks_per_host=4)])

    def test_hosts_of_several_cores_need_shared_cores_off(self):
        with self.assertRaisesRegex(ValueError, "--cores_per_host 4 / --ranks_per_host 1: hosts of their own cores; "
                                    "with shared cores \\(2\\)"):
            _config("single", cores_per_host=4)

    def test_unknown_variant_is_named(self):
        with self.assertRaisesRegex(ValueError, "unknown 'hybrid@16'"):
            _config("hybrid@16")

    def test_train_flags_reach_every_variant_and_the_report(self):
        config = _config("single,hybrid@8", train_flag="--large_batch_rule=cowclip", batch_size=8192)
        for variant in config.variants:
            argv = scale_out.host_processes(variant, config, self.get_temp_dir(), 0)[0]["argv"]
            self.assertIn("--large_batch_rule=cowclip", argv)
            self.assertIn("--val_data=", argv)
        body = bench.report_body(config, {}, {}, None)
        self.assertIn("per-replica batch 8,192, `--large_batch_rule=cowclip`, no evaluation", body)

    def test_a_train_flag_must_be_a_whole_flag(self):
        with self.assertRaisesRegex(ValueError, "--train_flag 'large_batch_rule=cowclip': give a whole"):
            _config("single", train_flag="large_batch_rule=cowclip")


class GrowthTest(tf.test.TestCase):

    def test_growth_and_the_goals(self):
        config = _config("single,hybrid@2,hybrid@8")
        # Per rank: 1.0 MB per step at 2 ranks, 1.2 at 8 (x1.2); CPU per 1k examples 0.04, 0.06, 0.08.
        results = {"single": [_run(25_000.0, 0.0, 1.0, steps=(10.0,))],
                   "hybrid@2": [_run(25_000.0, 1e6, 1.5)],
                   "hybrid@8": [_run(25_000.0, 1.2e6, 2.0, steps=(10.0,) * 8)]}
        rows = scale_out.summary_rows(config, results)
        self.assertAllClose(1.2, bench.growth(rows, names.HYBRID, "tx_mb_per_step"))
        self.assertAllClose(2.0 / 1.5, bench.growth(rows, names.HYBRID, "cpu_s_per_1k"))
        self.assertIsNone(bench.growth(rows, names.HOROVOD, "tx_mb_per_step"))
        self.assertAllClose(0.5, rows["hybrid@8"]["efficiency"])
        body = bench.report_body(config, results, {}, (0.1, 0.2))
        self.assertIn("bytes per rank within x1.30 from 2 to 8 ranks: met (x1.20)", body)
        self.assertIn("CPU per example at 8 ranks within x1.25 of `single`'s: not met (x2.00)", body)
        self.assertIn("| hybrid@8 |", body)


@pytest.mark.slow
class RealRunTest(tf.test.TestCase):
    """`single` and `hybrid` at 4 ranks on real emulated hosts sharing two cores, a few steps (needs root).

    One rank count: every count runs the same code; `GrowthTest` computes the growth over several.
    """

    def test_bytes_and_cpu_of_each_rank_are_measured(self):
        reason = hosts_lib.check_privileges()
        if reason:
            self.skipTest(reason)
        data = self.create_tempdir().full_path
        synthetic.generate(ROWS, data, feature_size=FEATURE_SIZE, seed=0)
        config = _config("single,hybrid@4", data_dir=data, batch_size=64)
        results, failures, _ = scale_out.measure(config)
        self.assertEqual({"single": [], "hybrid@4": []}, failures)
        (run,) = results["hybrid@4"]
        # Every rank's host sent its share of the exchange, and every rank trained in the window.
        self.assertLen(run.tx_bytes, 4)
        self.assertGreater(min(run.tx_bytes), 0)
        self.assertLen(run.steps, 4)
        self.assertGreater(run.cpu_seconds_per_1k, 0)
        rows = scale_out.summary_rows(config, results)
        # Efficiency against two cores of single's rate in the same round.
        self.assertGreater(rows["hybrid@4"]["efficiency"], 0)
        self.assertIn("| hybrid@4 |", bench.report_body(config, results, failures, None))


if __name__ == "__main__":
    tf.test.main()
