"""Tests of the large-table benchmark: its configuration, measurements from run files, report and a tiny run."""

import json
import os

import pytest
import tensorflow as tf
from absl import app
from absl.testing import parameterized

from benchmarks import large_tables, large_tables_report
from benchmarks.large_tables_report import RESTART, START, Row, RunMeasure, Variant
from tests import command_line

FEATURE_SIZE = 20_000
# The command line's run: a small dataset and batch (what it checks depends on the table size, not on them).
ROWS = 4_000
BATCH = 64
STEPS = 20
WARMUP = 5
RESTART_STEPS = 5
GB = 1000 ** 3


def config(**changes) -> large_tables.BenchmarkConfig:
    values = dict(feature_sizes=str(FEATURE_SIZE), strategies="single", max_steps=STEPS,
                  warmup_steps=WARMUP, work_dir="/work", results_dir="/results")
    values.update(changes)
    return large_tables.BenchmarkConfig(**values)


class ConfigTest(tf.test.TestCase, parameterized.TestCase):

    def test_single_once_and_each_launched_strategy_at_each_count(self):
        variants = large_tables.variants_of(["hybrid", "single", "ps"], [2, 4])
        self.assertEqual([v.name for v in variants], ["hybrid x2", "hybrid x4", "single", "ps x2", "ps x4"])

    def test_the_default_sizes_are_the_issues(self):
        made = large_tables.parse_args([])
        self.assertEqual(made.sizes(), (117_581, 2_000_000, 20_000_000))
        self.assertLen(made.table_variants(), 5)

    @parameterized.named_parameters(
        ("unknown_strategy", ["--strategies", "single,mirrored"], "unknown 'mirrored'"),
        ("no_count", ["--processes", ""], "at least one entry"),
        ("bad_size", ["--feature_sizes", "2M"], "--feature_sizes: expected comma-separated integers, got '2M'"),
        ("warmup_eats_the_steps", ["--max_steps", "20", "--warmup_steps", "19"], "--warmup_steps 19"),
        ("no_restart", ["--restart_steps", "0"], "--restart_steps must be >= 1, got 0"),
    )
    def test_bad_arguments_are_named(self, argv, message):
        with self.assertRaisesRegex(app.UsageError, message):
            large_tables.parse_args(argv)

    def test_commands_of_start_and_restart(self):
        made = config(host_memory="6g")
        hybrid = Variant("hybrid", 2)
        start = large_tables.command(hybrid, made, "/data", "/run", START)
        self.assertEqual(start[1:6], ["-m", "deepfm.launch", "--strategy", "hybrid", "--log_dir"])
        self.assertIn("--host_memory", start)
        self.assertEqual(start[start.index("--np") + 1], "2")
        self.assertEqual(start[start.index("--max_steps") + 1], str(STEPS))
        self.assertIn("--export_dir", start)
        self.assertIn("{task}", start[start.index("--progress_file") + 1])
        restart = large_tables.command(hybrid, made, "/data", "/run", RESTART)
        self.assertEqual(restart[restart.index("--max_steps") + 1], str(STEPS + made.restart_steps))
        self.assertNotIn("--export_dir", restart)
        self.assertIn("--val_data=", restart)
        ps = large_tables.command(Variant("ps", 4), made, "/data", "/run", START)
        self.assertEqual(ps[ps.index("--num_ps") + 1], ps[ps.index("--num_workers") + 1])
        single = large_tables.command(Variant("single"), made, "/data", "/run", START)
        self.assertEqual(single[1:5], ["-m", "deepfm.train", "--strategy", "single"])
        self.assertNotIn("--host_memory", single)


class MeasureFromTest(tf.test.TestCase):

    def test_first_step_waits_for_every_training_process(self):
        # Started at 100; rank 1 steps first at 110, rank 0 at 112; both then 10 steps/s of 1,000 examples.
        progress = {"rank0": [(112.0 + 0.1 * i, i + 1) for i in range(20)],
                    "rank1": [(110.0 + 0.1 * i, i + 1) for i in range(40)]}
        processes = [{"label": "deepfm.launch", "pid": 1, "peak_rss_bytes": 50 << 20},
                     {"label": "deepfm.train (rank 0)", "pid": 2, "peak_rss_bytes": 3 * GB}]
        measured = large_tables.measure_from(100.0, 130.0, progress, processes, {"examples_per_sec": 9000.0},
                                             metrics_written=118.4, batch_size=1000, warmup_steps=WARMUP)
        self.assertAllClose(measured.time_to_first_step_s, 12.0)
        self.assertAllClose(measured.first_step_s["rank1"], 10.0)
        self.assertAllClose(measured.examples_per_sec, 20000.0)
        self.assertAllClose(measured.end_s, 4.5)
        self.assertEqual(measured.wall_s, 30.0)
        self.assertEqual(measured.largest["label"], "deepfm.train (rank 0)")

    def test_too_few_steps_leave_examples_per_sec_out_saying_why(self):
        measured = large_tables.measure_from(0.0, 5.0, {"chief": [(1.0, 1), (2.0, 2)]}, [], {}, None, 10, WARMUP)
        self.assertIsNone(measured.examples_per_sec)
        self.assertIn("after 5 warm-up steps", measured.window_error)
        self.assertIsNone(measured.end_s)

    def test_a_missing_progress_file_is_named(self):
        phase = self.create_tempdir().full_path
        os.makedirs(os.path.join(phase, large_tables.PROGRESS_DIR))
        with open(os.path.join(phase, large_tables.PROGRESS_DIR, "rank0.jsonl"), "w") as f:
            f.write('{"time": 1.0, "step": 1}\n')
        with self.assertRaisesRegex(RuntimeError, "progress of 1 training process.*expected 2"):
            large_tables.progress_of(phase, 2)


class ReportTest(tf.test.TestCase):

    def run_measure(self, peak: int, first: float, end: float, restore=None, evaluation=None
                    ) -> RunMeasure:
        return RunMeasure(
            wall_s=60.0, time_to_first_step_s=first, first_step_s={"rank0": first}, end_s=end, examples_per_sec=5000.0,
            restore_s=restore, evaluation_s=evaluation,
            processes=[{"label": "deepfm.train (rank 0)", "pid": 2, "peak_rss_bytes": peak},
                       {"label": "deepfm.launch", "pid": 1, "peak_rss_bytes": GB // 10}])

    def test_a_row_per_variant_with_ratio_and_seconds_per_gb(self):
        row = Row(Variant("hybrid", 2), 20_000_000, state_bytes=8 * GB,
                               share_bytes=4 * GB, start=self.run_measure(6 * GB, 30.0, 20.0, evaluation=3.5),
                               restart=self.run_measure(5 * GB, 25.0, 8.0, restore=6.0))
        failed = Row(Variant("single"), 20_000_000, state_bytes=8 * GB, share_bytes=8 * GB,
                                  error="start: task job failed with exit code 1; last lines of job.log:\n  ...\n"
                                        "  launch failed: task rank_0 was killed for memory (exit code -9)\n")
        body = large_tables.report_body(config(), [row, failed], ["--feature_sizes", "20000000"])
        self.assertIn("Command: `python -m benchmarks.large_tables --feature_sizes 20000000`", body)
        self.assertIn("| hybrid x2 | 20,000,000 | 8.00 | 4.00 | 6.00 (deepfm.train (rank 0)) | 1.50 | 30.0 | 25.0 "
                      "| 5,000 | 60.0 | 20.0 | 3.5 | 8.0 (1.0 s/GB) | 6.0 (1.5 s/GB) |  |", body)
        self.assertIn("| single | 20,000,000 | 8.00 | 8.00 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a "
                      "| failed: "
                      "start: task job failed with exit code 1; last lines of job.log: ... launch failed: task rank_0 "
                      "was killed for memory (exit code -9) |", body)
        self.assertIn("- hybrid x2, 20,000,000 ids, restart: deepfm.train (rank 0) 5.00 GB; deepfm.launch 0.10 GB",
                      body)
        raw = large_tables.raw_results(config(), [row, failed], [])
        json.dumps(raw)
        self.assertEqual(raw["rows"][0]["peak_rss_bytes"], 6 * GB)
        self.assertIsNone(raw["rows"][1]["start"])


class LogSecondsTest(tf.test.TestCase):

    def test_the_slowest_process_and_the_sum_of_its_restores(self):
        rank0 = ("I1128 13:00:01.1 1 saving.py:150] restored /m/model.ckpt-300 in 1.25 s\n"
                 "I1128 13:00:04.2 1 checkpoint.py:311] rank 0 of 2 restored its rows of /m/model.ckpt-300 in 3.50 s "
                 "(saved at 2 ranks): 4 block(s) read\n"
                 "I1128 13:01:00.0 1 evaluation.py:269] Inference Time : 7.12500s\n")
        rank1 = "rank 1 of 2 restored its rows of /m/model.ckpt-300 in 4.00 s (saved at 2 ranks): 4 block(s) read\n"
        self.assertEqual((4.75, 7.125), large_tables_report.slowest([rank0, rank1, "no such line\n"]))
        self.assertEqual((None, None), large_tables_report.slowest(["not saving /m/model.ckpt-300 again\n"]))

    def test_logs_of_a_run_are_its_own_and_its_tasks(self):
        phase = self.create_tempdir().full_path
        os.makedirs(os.path.join(phase, "tasks"))
        for name, text in (("job.log", "a"), (os.path.join("tasks", "rank_0.log"), "b"), ("metrics.json", "c")):
            with open(os.path.join(phase, name), "w") as f:
                f.write(text)
        self.assertEqual(["a", "b"], large_tables.logs_of(phase))


@pytest.mark.slow
class CommandLineTest(tf.test.TestCase):

    def test_single_and_hybrid_on_a_tiny_table(self):
        cwd = command_line.checkout(self.create_tempdir().full_path)
        command = command_line.python_module(
            "benchmarks.large_tables", "--feature_sizes", str(FEATURE_SIZE), "--rows", str(ROWS),
            "--strategies", "single,hybrid", "--processes", "2", "--max_steps", str(STEPS), "--batch_size",
            str(BATCH), "--warmup_steps", str(WARMUP), "--restart_steps", str(RESTART_STEPS),
            "--work_dir", "runs/large", "--results_dir", "runs/results")
        result = command_line.run(command, cwd, timeout=1500)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        with open(os.path.join(cwd, "runs", "results", large_tables.NAME + ".json")) as f:
            report = json.load(f)
        self.assertIn("cpu", report["machine"])
        self.assertEqual({}, report["failures"])
        self.assertEqual(["single@20000", "hybridx2@20000"], sorted(report["results"], reverse=True))
        rows = {row["variant"]: row for row in report["rows"]}
        self.assertEqual(sorted(rows), ["hybrid x2", "single"])
        for name, row in rows.items():
            self.assertEqual(row["error"], "", name)
            self.assertGreater(row["state_bytes"], FEATURE_SIZE * 33 * 4 * 3, name)
            for phase in (START, RESTART):
                run = row[phase]
                self.assertGreater(run["time_to_first_step_s"], 0, name)
                trained = [p for p in run["processes"] if p["label"].startswith("deepfm.train")]
                self.assertLen(trained, row["processes"], name)
                self.assertTrue(all(p["peak_rss_bytes"] > 0 for p in run["processes"]), run["processes"])
            self.assertGreater(row[START]["examples_per_sec"], 0, name)
            # The start evaluates; the restart restores the start's checkpoint (every line of each found in the logs).
            self.assertGreater(row[START]["evaluation_s"], 0, name)
            self.assertGreater(row[RESTART]["restore_s"], 0, name)
        self.assertLess(rows["hybrid x2"]["share_bytes"], rows["single"]["share_bytes"])
        ranks = sorted(p["label"] for p in rows["hybrid x2"][START]["processes"]
                       if p["label"].startswith("deepfm.train"))
        self.assertEqual(ranks, ["deepfm.train (rank 0)", "deepfm.train (rank 1)"])
        # The models and exports are gone; the reports of the runs stay.
        runs = os.path.join(cwd, "runs", "large", "runs")
        for run_dir in os.listdir(runs):
            self.assertEqual(sorted(os.listdir(os.path.join(runs, run_dir))),
                             [RESTART, START])
        self.assertEqual([], os.listdir(os.path.join(cwd, "benchmarks", "results")))
        with open(os.path.join(cwd, "runs", "results", large_tables.NAME + ".md")) as f:
            self.assertIn("| hybrid x2 | 20,000 |", f.read())


if __name__ == "__main__":
    tf.test.main()
