"""benchmarks.harness: interleaved rounds, warm-up discard, ratios, failures, report files, generated flags."""

import dataclasses
import json
import os
import resource
from typing import List, Tuple

import tensorflow as tf
from absl import app, flags

from benchmarks import common, harness
from cli import config_flags
from tests import command_line, paths

LOOP_SIZE = 2_000


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclasses.dataclass
class Loop(harness.Variant):
    """Sums `size * scale` integers; its work is `scale` times the baseline's."""

    name: str
    scale: int
    calls: List[Tuple[str, int]]
    fail_at: int = -10 ** 9

    def measure(self, round_index: int) -> harness.Measurement:
        self.calls.append((self.name, round_index))
        if round_index == self.fail_at:
            raise RuntimeError("loop %s broke in round %d" % (self.name, round_index))
        total = sum(range(LOOP_SIZE * self.scale))
        return harness.Measurement({"work": float(self.scale), "total": float(total)}, peak_rss_mb(),
                                   {"round": round_index})


@dataclasses.dataclass(frozen=True)
class LoopConfig(harness.HarnessConfig):
    rounds: int = config_flags.field(3, "Runs per loop.", flag="runs")
    size: int = config_flags.field(10, "Loop size.")


class RunTest(tf.test.TestCase):

    def test_rounds_interleave_after_discarded_warmup(self):
        calls: List[Tuple[str, int]] = []
        variants = [Loop("a", 1, calls), Loop("b", 2, calls), Loop("c", 3, calls)]
        results = harness.run(variants, rounds=2, warmup_rounds=1, log=lambda line: None)
        self.assertEqual([("a", -1), ("b", -1), ("c", -1), ("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1),
                          ("c", 1)], calls)
        self.assertEqual(2, results.rounds_run)
        self.assertEqual([2.0, 2.0], results.values["b"]["work"])
        self.assertEqual([{"round": 0}, {"round": 1}], results.details["c"])
        self.assertLen(results.values["a"][harness.PEAK_RSS_MB], 2)
        self.assertGreater(results.stats("a", harness.PEAK_RSS_MB).min, 0)

    def test_ratios_are_per_round_against_the_first_variant(self):
        calls: List[Tuple[str, int]] = []
        results = harness.run([Loop("a", 1, calls), Loop("b", 3, calls)], rounds=3, log=lambda line: None)
        self.assertEqual("a", results.baseline)
        ratios = results.ratios("b", "work")
        self.assertEqual([3.0, 3.0, 3.0], ratios.values)
        self.assertEqual({"min": 3.0, "median": 3.0, "max": 3.0}, results.ratio_table()["b"]["work"])
        self.assertEqual(1.0, results.ratios("a", "work").median)

    def test_table_rows_give_each_metric_and_ratio_then_the_peak_memory(self):
        calls: List[Tuple[str, int]] = []
        results = harness.run([Loop("a", 1, calls), Loop("b", 3, calls), Loop("c", 2, calls, fail_at=0)],
                              rounds=2, log=lambda line: None)
        rows = results.table_rows(["work"], spec=".1f")
        self.assertEqual([["a", "1.0 (1.0-1.0)", "1.0 (1.0-1.0)"], ["b", "3.0 (3.0-3.0)", "3.0 (3.0-3.0)"],
                          ["c", "-", "-", "-"]], [row[:3] if row[0] != "c" else row for row in rows])
        peak = max(results.values["b"][harness.PEAK_RSS_MB])
        self.assertEqual("%.0f" % peak, rows[1][3])

    def test_a_failed_variant_is_recorded_and_the_others_go_on(self):
        calls: List[Tuple[str, int]] = []
        results = harness.run([Loop("a", 1, calls), Loop("b", 2, calls, fail_at=1)], rounds=3,
                              log=lambda line: None)
        self.assertIn("round 1", results.failures["b"])
        self.assertIn("loop b broke in round 1", results.failures["b"])
        self.assertEqual([2.0], results.values["b"]["work"])
        self.assertLen(results.values["a"]["work"], 3)
        self.assertNotIn(("b", 2), calls)

    def test_a_passed_deadline_starts_no_further_round(self):
        calls: List[Tuple[str, int]] = []
        results = harness.run([Loop("a", 1, calls)], rounds=5, deadline_s=0.0, log=lambda line: None)
        self.assertLessEqual(results.rounds_run, 1)

    def test_rotated_rounds_start_one_variant_further_on(self):
        calls: List[Tuple[str, int]] = []
        harness.run([Loop("a", 1, calls), Loop("b", 2, calls), Loop("c", 3, calls)], rounds=2, warmup_rounds=1,
                    rotate=True, log=lambda line: None)
        self.assertEqual(["a", "b", "c", "b", "c", "a", "c", "a", "b"], [name for name, _ in calls])

    def test_after_round_sees_every_complete_round(self):
        seen: List[int] = []
        harness.run([Loop("a", 1, []), Loop("b", 2, [])], rounds=3, warmup_rounds=1, log=lambda line: None,
                    after_round=lambda so_far: seen.append(len(so_far.values["b"]["work"])))
        self.assertEqual([1, 2, 3], seen)

    def test_extra_keys_go_into_the_json_beside_the_measurements(self):
        results = harness.run([Loop("a", 1, [])], rounds=1, log=lambda line: None)
        config = LoopConfig(results_dir=self.get_temp_dir())
        harness.write(results, config, "extra", "Extra", "body", {"cores": "2"}, extra={"summary": {"x": 1}})
        with open(os.path.join(self.get_temp_dir(), "extra.json")) as f:
            written = json.load(f)
        self.assertEqual({"x": 1}, written["summary"])
        self.assertEqual([1.0], written["results"]["a"]["work"])

    def test_each_variant_name_once(self):
        with self.assertRaisesRegex(ValueError, "each name once"):
            harness.run([Loop("a", 1, []), Loop("a", 2, [])], rounds=1)


class WriteTest(tf.test.TestCase):

    def test_report_holds_results_machine_command_and_failures(self):
        results_dir = self.create_tempdir().full_path
        calls: List[Tuple[str, int]] = []
        results = harness.run([Loop("a", 1, calls), Loop("b", 2, calls, fail_at=0)], rounds=1,
                              log=lambda line: None)
        config = LoopConfig(rounds=1, results_dir=results_dir)
        drawn = []

        def chart(name, where):
            drawn.append((name, where))
            return os.path.join(where, name + ".png")

        path = harness.write(results, config, "loops", "Loops", "the table", harness.machine_record(), chart)
        self.assertEqual(os.path.join(results_dir, "loops.md"), path)
        self.assertEqual([("loops", results_dir)], drawn)
        with open(path) as f:
            text = f.read()
        self.assertIn("the table", text)
        self.assertIn("loop b broke", text)
        self.assertIn("- command: python -m", text)
        with open(os.path.join(results_dir, "loops.json")) as f:
            report = json.load(f)
        self.assertEqual([1.0], report["results"]["a"]["work"])
        self.assertIn("b", report["failures"])
        self.assertIn("command", report["machine"])
        self.assertEqual(1, report["config"]["rounds"])

    def test_a_report_records_the_results_dir_under_the_project_relative_to_it(self):
        self.assertEqual(os.path.join("benchmarks", "results"), common.project_path(common.RESULTS_DIR))
        elsewhere = self.create_tempdir().full_path
        self.assertEqual(elsewhere, common.project_path(elsewhere))

    def test_the_name_option_renames_the_files(self):
        results_dir = self.create_tempdir().full_path
        results = harness.run([Loop("a", 1, [])], rounds=1, log=lambda line: None)
        harness.write(results, LoopConfig(results_dir=results_dir, name="trial"), "loops", "Loops", "",
                      harness.machine_record())
        self.assertCountEqual(["trial.md", "trial.json"], os.listdir(results_dir))


class FlagsTest(tf.test.TestCase):

    def test_flags_come_from_the_config_fields(self):
        config = harness.parse(LoopConfig, ["prog", "--runs", "4", "--warmup_rounds", "1", "--variants", "b,a",
                                            "--size", "7", "--name", "x"])
        self.assertEqual(LoopConfig(rounds=4, warmup_rounds=1, variants="b,a", size=7, name="x"), config)

    def test_defaults_are_the_fields(self):
        self.assertEqual(LoopConfig(), harness.parse(LoopConfig, ["prog"]))

    def test_a_redefined_flag_replaces_the_shared_one(self):
        with self.assertRaises(flags.UnrecognizedFlagError):
            harness.parse(LoopConfig, ["prog", "--rounds", "2"])

    def test_a_bad_value_is_a_usage_error(self):
        with self.assertRaisesRegex(app.UsageError, "--runs must be >= 1, got 0"):
            harness.parse(LoopConfig, ["prog", "--runs", "0"])


class HelpTest(tf.test.TestCase):
    """`--help` of a benchmark starts with the benchmark's own docstring, a module's or a package's."""

    def test_help_starts_with_the_benchmarks_docstring(self):
        for module, first_line in (
                ("benchmarks.train_single", "Single-device training benchmark"),
                ("benchmarks.strategy_speed", "Every distribution strategy side by side")):
            result = command_line.run(command_line.python_module(module, "--help"), cwd=paths.REPO_ROOT)
            self.assertEqual(result.returncode, 0, command_line.describe(module, result))
            self.assertTrue(result.stdout.startswith(first_line), result.stdout[:300])
            self.assertIn("--variants", result.stdout)


if __name__ == "__main__":
    tf.test.main()
