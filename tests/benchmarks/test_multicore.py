"""Tests of the prepared many-core command: its plan from the machine's cores, its arguments, its tables, a tiny run."""

import json
import os

import pytest
import tensorflow as tf

from benchmarks import multicore
from benchmarks import topology as topology_lib
from benchmarks.scale_out import runner
from benchmarks.scale_out.measure import RunResult
from dataprep import synthetic
from tests import command_line, paths

SIXTEEN_KEYS = [
    "1024/single 1x4", "1024/hybrid 2 hosts", "1024/horovod 2 hosts", "1024/hybrid 2 hosts, MPI",
    "1024/hybrid 4 hosts", "1024/horovod 4 hosts", "1024/hybrid 4 hosts, MPI",
    "8192/single 1x4", "8192/hybrid 2 hosts", "8192/horovod 2 hosts", "8192/hybrid 2 hosts, MPI",
    "8192/hybrid 4 hosts", "8192/horovod 4 hosts", "8192/hybrid 4 hosts, MPI",
    "1024/single 1x1", "1024/hybrid 2 hosts of 1", "1024/single 1x4, 4 partitions", "1024/single 1x16",
    "1024/single 1x16, 16 partitions", "1024/hybrid 2x8 on 1 host", "1024/hybrid 4x4 on 1 host",
    "1024/hybrid 8x2 on 1 host", "1024/hybrid 16x1 on 1 host"]


def _plan(args=(), available=16):
    return multicore.make_plan(multicore.parse_args(list(args)), available)


def _run(rate, round_index, step_ms=10.0):
    return RunResult(examples_per_sec=rate, window_s=1.0, steps=[1000.0 / step_ms], cpu_seconds={}, tx_bytes=[0.0],
                     rx_bytes=[0.0], host_cpu_seconds=[1.0], round=round_index)


class PlanTest(tf.test.TestCase):

    def test_sixteen_vcpus_make_the_issues_table(self):
        plan = _plan()
        self.assertEqual(SIXTEEN_KEYS, [entry.key for entry in plan.entries])
        self.assertEqual((16, 4), (plan.cores, plan.cores_per_host))
        self.assertEqual("1024/single 1x1", plan.one_core)
        by_key = {entry.key: entry for entry in plan.entries}
        # Each job's efficiency divides by single on the cores of one of its ranks at its batch.
        self.assertEqual("8192/single 1x4", by_key["8192/horovod 4 hosts"].reference)
        self.assertEqual("1024/single 1x1", by_key["1024/hybrid 2 hosts of 1"].reference)
        self.assertEqual((2, 1), (by_key["1024/hybrid 2 hosts of 1"].variant.num_hosts,
                                  by_key["1024/hybrid 2 hosts of 1"].variant.cores_per_host))
        # CowClip from batch 8,192 on; every run a rate measurement at its batch's steps.
        self.assertIn("--large_batch_rule=cowclip", by_key["8192/hybrid 4 hosts"].config.train_flags)
        self.assertNotIn("--large_batch_rule=cowclip", by_key["1024/hybrid 4 hosts"].config.train_flags)
        self.assertEqual((10, 30), (by_key["8192/single 1x4"].config.warmup_steps,
                                    by_key["8192/single 1x4"].config.steps))
        self.assertIn("--val_data=", by_key["1024/single 1x1"].config.train_flags)
        four = by_key["1024/hybrid 4x4 on 1 host"].variant
        self.assertEqual((1, 16, 4, "4x4"), (four.num_hosts, four.cores_per_host, four.ranks_per_host, four.shape()))
        self.assertEqual("4x4", by_key["1024/hybrid 4 hosts"].variant.shape())
        # The same job over MPI, its ranks started by mpirun over ssh on each of its hosts, against the same single.
        over_mpi = by_key["1024/hybrid 4 hosts, MPI"]
        self.assertEqual(("1024/single 1x4", True, 4), (over_mpi.reference, over_mpi.variant.over_ssh,
                                                       over_mpi.variant.num_hosts))
        self.assertEqual(4, by_key["1024/hybrid 4 hosts"].variant.num_hosts)
        # Every layout fits 16 vCPUs.
        cores = multicore.check_plan(plan, list(range(16)))
        self.assertEqual(tuple((i,) for i in range(16)), cores["1024/hybrid 16x1 on 1 host"].processes[0])

    def test_the_development_machine_gets_hosts_of_one_core(self):
        plan = _plan(available=2)
        self.assertEqual(["1024/single 1x1", "1024/hybrid 2 hosts", "1024/horovod 2 hosts", "1024/hybrid 2 hosts, MPI",
                          "8192/single 1x1", "8192/hybrid 2 hosts", "8192/horovod 2 hosts", "8192/hybrid 2 hosts, MPI",
                          "1024/single 1x2", "1024/single 1x2, 2 partitions", "1024/hybrid 2x1 on 1 host"],
                         [entry.key for entry in plan.entries])
        self.assertNotIn("1024/hybrid 2 hosts, MPI", [e.key for e in _plan(["--mpi_hosts", ""], 2).entries])
        # The partitions run is single with --table_partitions, on the same vCPUs.
        partitioned = plan.entries[9].variant
        self.assertEqual((("--table_partitions", "2"), 2), (partitioned.train_flags, partitioned.cores_per_host))
        self.assertEqual(["1024/single 1x2"], [entry.key for entry in _plan(["--table_partitions", ""], 2).entries
                                               if "1x2" in entry.key and "single" in entry.key])
        self.assertIn("1024/single 1x2, 3 partitions",
                      [entry.key for entry in _plan(["--table_partitions", "3,1"], 2).entries])
        # single 1x1 is the hosts table's reference and the one-host table's one core.
        self.assertEqual(("1024/single 1x1", "1024/single 1x1"), (plan.entries[1].reference, plan.one_core))

    def test_defaults_follow_the_machine(self):
        self.assertEqual((1, 1, 2, 4, 4), tuple(multicore.default_cores_per_host(n) for n in (1, 2, 4, 8, 72)))
        self.assertEqual((2, 4, 8, 16), multicore.default_layouts(16))
        self.assertEqual((2, 4, 36), multicore.default_layouts(36))
        self.assertEqual((), multicore.default_layouts(1))
        plan = _plan(["--cores", "8", "--batches", "2048", "--steps", "40", "--warmup_steps", "0"])
        self.assertEqual((8, 4), (plan.cores, plan.cores_per_host))
        self.assertEqual((40, 0), (plan.entries[0].config.steps, plan.entries[0].config.warmup_steps))
        self.assertEqual(["2048/single 1x4", "2048/hybrid 2 hosts", "2048/horovod 2 hosts", "2048/hybrid 2 hosts, MPI",
                          "2048/single 1x1",
                          "2048/hybrid 2 hosts of 1", "2048/single 1x4, 4 partitions", "2048/single 1x8",
                          "2048/single 1x8, 8 partitions", "2048/hybrid 2x4 on 1 host", "2048/hybrid 4x2 on 1 host",
                          "2048/hybrid 8x1 on 1 host"], [entry.key for entry in plan.entries])

    def test_bad_arguments_are_named(self):
        for args, message in (
                (["--steps", "100,30,10"], "--steps 100,30,10: give one value, or one per batch of --batches \\(2\\)"),
                (["--steps", "10"], "--steps 10: at least 20"),
                (["--layouts", "3"], "--layouts 3: 3 ranks do not divide 16 vCPUs"),
                (["--hosts", "8"], "--hosts 8 x --cores_per_host 4 need 32 vCPUs; 16 are used"),
                (["--strategies", "ps"], "--strategies: unknown 'ps'; one or more of horovod, hybrid"),
                (["--cores", "32"], "--cores 32: this process may use 16 vCPUs"),
                (["--batches", "1024,x"], "--batches '1024,x': give comma-separated whole numbers"),
                (["--table_partitions", "four"], "--table_partitions 'four': give comma-separated whole numbers"),
                (["--runs", "0"], "--runs must be >= 1, got 0"),
                (["--train_flag", "exchange_fp16"], "--train_flag 'exchange_fp16': give a whole deepfm.train flag")):
            with self.assertRaisesRegex(ValueError, message):
                _plan(args)


class CommandLineTest(tf.test.TestCase):

    def _main(self, *args):
        # From the repository's root, where benchmarks/ (not installed) imports, as the docs run it.
        return command_line.run(command_line.python_module("benchmarks.multicore", *args), paths.REPO_ROOT,
                                timeout=300)

    def test_plan_only_prints_every_run_and_exits(self):
        done = self._main("--plan_only", "--batches", "512", "--steps", "20")
        self.assertEqual(0, done.returncode, done.stderr)
        self.assertIn("512/single 1x1", done.stderr)
        self.assertIn("runs a round", done.stderr)
        self.assertIn("topology:", done.stderr)

    def test_a_bad_argument_exits_1_naming_it(self):
        # As every command line of the project reports a user error (`cli.entry`).
        done = self._main("--plan_only", "--layouts", "0")
        self.assertEqual(1, done.returncode)
        self.assertIn("benchmarks.multicore: error: --layouts '0': give one or more numbers >= 1", done.stderr)


class ReportTest(tf.test.TestCase):

    def test_tables_and_goals_from_rounds(self):
        plan = _plan()
        rounds = runner.Rounds({entry.key: [] for entry in plan.entries}, {entry.key: [] for entry in plan.entries},
                               {entry.key: [] for entry in plan.entries})
        # Two rounds; the machine twice as fast in round 1: per round the ratios are the same.
        for round_index, speed in ((0, 1.0), (1, 2.0)):
            rounds.results["1024/single 1x4"].append(_run(70_000 * speed, round_index))
            rounds.results["1024/hybrid 2 hosts"].append(_run(2 * 70_000 * 0.9 * speed, round_index))
            rounds.results["1024/single 1x1"].append(_run(30_000 * speed, round_index))
            rounds.results["1024/hybrid 8x2 on 1 host"].append(_run(30_000 * 8.5 * speed, round_index))
        rounds.skipped["1024/horovod 4 hosts"] = [1]
        rounds.failures["8192/hybrid 2 hosts"] = ["boom"]
        body = multicore.report_body(plan, rounds, topology_lib.Topology.parse(
            "CPU CORE\n" + "".join("%d %d\n" % (i, i) for i in range(16))), list(range(16)), "emulated", 12.0)
        self.assertIn("| hybrid | 2x4 | 1,024 | 189,000 (126,000-252,000) | 0.90 (0.90-0.90) | >= 0.85: met | 0.57 |",
                      body)
        self.assertIn("| single | 1x4 | 1,024 | 105,000 (70,000-140,000) | 1 |", body)
        self.assertIn("(1 skipped)", body)
        # The one-host table shows single on 4 vCPUs, the hosts table's run, against one vCPU.
        self.assertIn("| single 1x4 | 1x4 | 105,000 (70,000-140,000) | 2.33 (2.33-2.33) | 2.36 |", body)
        self.assertIn("8,192 `--large_batch_rule=cowclip` | n/a (1 failed)", body)
        self.assertIn("- best layout of 16 vCPUs: `1024/hybrid 8x2 on 1 host`, 8.50x one vCPU (goal >= 8x: met)", body)
        self.assertIn("- `single` on 4 vCPUs (`1024/single 1x4`): 2.33x one vCPU (goal >= 3x: not met)", body)
        self.assertIn("- `1024/hybrid 8x2 on 1 host` (8x2): algo-1: 0-15 (processes on 0-1,", body)


@pytest.mark.slow
class RealRunTest(tf.test.TestCase):
    """The whole command, scaled down: hosts of one core without namespaces, one batch, one layout."""

    def test_every_run_is_measured_and_written(self):
        data = self.create_tempdir().full_path
        synthetic.generate(2000, data, feature_size=1000, seed=0)
        results = self.create_tempdir().full_path
        done = command_line.run(command_line.python_module(
            "benchmarks.multicore", "--results_dir", results, "--data_dir", data, "--hosts_mode", "local",
            "--cores_per_host", "1", "--hosts", "2", "--strategies", "hybrid", "--batches", "64", "--steps", "20",
            "--warmup_steps", "2", "--layouts", "2", "--table_partitions", "", "--runs", "1", "--budget_s", "500"),
            paths.REPO_ROOT,
            timeout=600)
        self.assertEqual(0, done.returncode, done.stderr[-3000:])
        with open(os.path.join(results, "multicore.json")) as f:
            written = json.load(f)
        entries = written["results"]["entries"]
        self.assertCountEqual(["64/single 1x1", "64/hybrid 2 hosts", "64/single 1x2", "64/hybrid 2x1 on 1 host"],
                              list(entries))
        for key, entry in entries.items():
            self.assertLen(entry["runs"], 1, key)
            self.assertGreater(entry["runs"][0]["examples_per_sec"], 0)
        self.assertEqual("local", written["results"]["setup"]["hosts_mode"])
        self.assertIn("CORE", written["results"]["setup"]["topology"]["lscpu_e"])
        with open(os.path.join(results, "lscpu-e.txt")) as f:
            self.assertIn("CORE", f.read())
        with open(os.path.join(results, "multicore.md")) as f:
            report = f.read()
        self.assertIn("| hybrid | 2x1 | 64 |", report)
        self.assertIn("best layout of 2 vCPUs", report)


if __name__ == "__main__":
    tf.test.main()
