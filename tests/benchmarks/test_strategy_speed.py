"""Tests of the strategy comparison benchmark: its measurement rules and a tiny real run."""

import json
import os

import pytest
import tensorflow as tf
from absl import app
from absl.testing import parameterized

from benchmarks import harness
from benchmarks.strategy_speed import ceilings, cli, measure
from benchmarks.strategy_speed import config as config_lib
from benchmarks.strategy_speed import report as report_lib
from benchmarks.strategy_speed import variants as variants_lib
from dataprep import synthetic
from deepfm.runtime import hooks

ROWS = 3000
FEATURE_SIZE = 2000
BATCH = 128
STEPS = 20
WARMUP = 10


def parse(*argv: str) -> config_lib.BenchmarkConfig:
    """The config of a command line of the benchmark."""
    return harness.parse(config_lib.BenchmarkConfig, [cli.PROGRAM] + list(argv))


def record(when: float, step: int) -> hooks.ProgressRecord:
    return hooks.ProgressRecord(time=when, elapsed=when - 100.0, step=step, global_step=step,
                                examples_per_sec=15753.0, loss=0.5, interval_steps=10)


class ReadProgressTest(tf.test.TestCase):

    def test_reads_time_and_step_of_the_training_progress_file(self):
        path = os.path.join(self.get_temp_dir(), "progress", "rank1.jsonl")
        progress_file = hooks.ProgressFile(path)
        for when, step in ((101.5, 10), (102.25, 20), (102.5, 23)):
            progress_file(record(when, step))
        points = measure.read_progress(path)
        self.assertEqual([step for _, step in points], [10, 20, 23])
        self.assertAlmostEqual(points[1][0] - points[0][0], 0.75, places=5)
        self.assertAlmostEqual(points[0][0], 101.5, places=5)

    def test_every_training_process_writes_its_own_progress_file(self):
        config = parse("--variants", "single,ps,horovod")
        for variant in config.selected():
            argv = measure.command(variant, config, self.get_temp_dir())
            path = argv[argv.index("--progress_file") + 1]
            self.assertIn(hooks.TASK_PLACEHOLDER, path, variant.name)

    def test_a_bad_line_is_named(self):
        path = os.path.join(self.get_temp_dir(), "bad.jsonl")
        with open(path, "w") as f:
            f.write(record(1.0, 10).to_json() + "\n" + "examples/sec: 15753\n")
        with self.assertRaisesRegex(ValueError, "bad.jsonl:2 is not a progress record"):
            measure.read_progress(path)


class JobWindowTest(tf.test.TestCase, parameterized.TestCase):

    def test_one_process_rate_from_warmup_to_its_last_step(self):
        # 100 examples per step; 10 steps per second after warm-up, slow before.
        progress = [[(0.0, 0), (5.0, 10), (6.0, 20), (7.0, 30)]]
        start, end, rate = measure.job_window(progress, [100], warmup_steps=10)
        self.assertEqual((start, end), (5.0, 7.0))
        self.assertAllClose(rate, 1000.0)

    def test_two_processes_count_only_the_time_both_train(self):
        # The chief trains alone at 20 steps/s before the worker joins; both at 10 steps/s together.
        chief = [(0.0, 0), (1.0, 20), (2.0, 30), (3.0, 40), (4.0, 50)]
        worker = [(1.0, 0), (2.0, 10), (3.0, 20), (4.0, 30), (5.0, 40)]
        start, end, rate = measure.job_window([chief, worker], [50, 50], warmup_steps=10)
        self.assertEqual((start, end), (2.0, 4.0))
        self.assertAllClose(rate, 1000.0)

    @parameterized.named_parameters(
        ("too_few_points", [[(0.0, 10), (1.0, 20)]], 20, "1 progress line"),
        ("never_together", [[(0.0, 10), (1.0, 20)], [(2.0, 10), (3.0, 20)]], 10, "never trained"),
    )
    def test_no_window(self, progress, warmup, message):
        with self.assertRaisesRegex(ValueError, message):
            measure.job_window(progress, [1] * len(progress), warmup)


class ConfigTest(tf.test.TestCase, parameterized.TestCase):

    def test_every_variant_keeps_the_global_batch(self):
        for variant in variants_lib.all_variants():
            per_replica = variant.per_replica_batch(variants_lib.GLOBAL_BATCH)
            self.assertLessEqual(variants_lib.GLOBAL_BATCH - per_replica * variant.replicas, variant.replicas - 1,
                                 variant.name)

    def test_comparisons_name_known_variants(self):
        names = {v.name for v in variants_lib.all_variants()}
        for _, variant, reference in variants_lib.LEVER_COMPARISONS:
            self.assertIn(variant, names)
            self.assertIn(reference, names)

    @parameterized.named_parameters(
        ("unknown_variant", ["--variants", "single,warp"], "unknown 'warp'"),
        ("few_steps", ["--steps", "5"], "--steps must be >= 20, got 5"),
        ("batch_below_replicas", ["--batch_size", "2", "--variants", "tower3+lazy_adam"], "--batch_size 2"),
    )
    def test_bad_arguments_are_named(self, argv, message):
        with self.assertRaisesRegex(app.UsageError, message):
            parse(*argv)

    def test_quick_is_one_short_run_under_its_own_name(self):
        config = parse("--quick", "--runs", "5")
        self.assertEqual((config.rounds, config.steps, config.name), (1, config_lib.QUICK_STEPS, config_lib.QUICK_NAME))

    def test_defaults_of_a_full_run(self):
        config = parse()
        self.assertEqual((config.rounds, config.steps, config.warmup_steps, config.name),
                         (config_lib.DEFAULT_RUNS, config_lib.DEFAULT_STEPS, config_lib.DEFAULT_WARMUP_STEPS,
                          config_lib.NAME))
        self.assertEqual([v.name for v in config.selected()], [v.name for v in variants_lib.all_variants()])

    def test_a_ceiling_runs_in_its_own_module_with_the_steps_of_a_training_process(self):
        config = parse("--steps", "40", "--warmup_steps", "10", "--batch_size", "256")
        ceiling = next(v for v in config.selected() if v.kind == variants_lib.KIND_COMPUTE)
        argv = measure.command(ceiling, config, "/w")
        self.assertEqual(argv[1:3], ["-m", measure.CEILING_PROGRAM])
        child = harness.parse(ceilings.CeilingConfig, argv[2:3] + argv[3:])
        self.assertEqual((child.kind, child.total_steps, child.batch_size, child.output),
                         (variants_lib.KIND_COMPUTE, 50, 256, "/w/child.json"))


class ReportTest(tf.test.TestCase):

    def result(self, rate, auc=None, rss=500.0):
        return measure.RunResult(examples_per_sec=rate, cpu_util=0.8, examples_per_cpu_second=rate / 1.6,
                                 window_s=3.0, auc=auc,
                                 processes=[{"label": "deepfm.train", "pid": 1, "peak_rss_mib": rss}])

    def test_ratios_use_the_ceiling_of_the_variants_optimizer(self):
        names = ["single", "tower+lazy_adam", "input_ceiling", "compute_ceiling", "compute_ceiling+lazy_adam"]
        config = parse("--variants", ",".join(names), "--runs", "2")
        results = {
            "single": [self.result(40000.0, 0.71), self.result(60000.0, 0.73)],
            "tower+lazy_adam": [self.result(90000.0, 0.72, rss=1100.0), self.result(90000.0, 0.72)],
            "input_ceiling": [self.result(500000.0)] * 2,
            "compute_ceiling": [self.result(80000.0)] * 2,
            "compute_ceiling+lazy_adam": [self.result(100000.0)] * 2,
        }
        body = report_lib.report_body(config, results, {}, (0.5, 0.7))
        # single: median 50,000 of ceiling min(500k, 80k); tower+lazy_adam: 90,000 of min(500k, 100k).
        self.assertIn("| single | one device | 50,000 (40,000-60,000) | 1.00 | 0.62 | 80% | 31,250 | 500 (1) "
                      "| 0.7200 |", body)
        self.assertIn("| tower+lazy_adam | sparse-row Adam (base of the levers below) | 90,000 (90,000-90,000) "
                      "| 1.80 | 0.90 | 80% | 56,250 | 1100 (1) | 0.7200 |", body)
        self.assertIn("lazy_adam vs adam, compute ceiling: x1.25 examples/sec, x1.25 examples per CPU-second", body)
        self.assertIn("best variant `tower+lazy_adam`: 90,000 examples/sec (target >= 90,000: met); peak RSS "
                      "1100 MiB per process (target < 1024: not met); 90% of the lower ceiling (target >= 90%: met)",
                      body)

    def test_failed_runs_are_reported(self):
        config = parse("--variants", "single,ps")
        body = report_lib.report_body(config, {"single": [self.result(50000.0, 0.7)], "ps": []},
                                      {"ps": "round 0: boom"}, (0.5, 0.5))
        self.assertIn("| ps | 1 ps + 2 async workers (gRPC) | failed in round 0, not run after |", body)


@pytest.mark.slow
class QuickRunTest(tf.test.TestCase):

    def test_single_and_both_ceilings_on_tiny_data(self):
        data = os.path.join(self.get_temp_dir(), "data")
        synthetic.generate(ROWS, data, feature_size=FEATURE_SIZE, seed=0)
        results = os.path.join(self.get_temp_dir(), "results")
        code = cli.run_benchmark(parse("--quick", "--data_dir", data, "--results_dir", results,
                                       "--batch_size", str(BATCH), "--steps", str(STEPS), "--warmup_steps", str(WARMUP),
                                       "--variants", "single,input_ceiling,compute_ceiling"))
        self.assertEqual(code, 0)
        for extension in ("md", "json", "png"):
            self.assertTrue(os.path.isfile(os.path.join(results, "%s.%s" % (config_lib.QUICK_NAME, extension))))
        with open(os.path.join(results, config_lib.QUICK_NAME + ".json")) as f:
            report_json = json.load(f)
        variants = report_json["variants"]
        single = variants["single"]["runs"][0]
        self.assertEqual(report_json["results"]["single"]["examples_per_sec"], [single["examples_per_sec"]])
        self.assertGreater(single["examples_per_sec"], 0)
        self.assertGreater(single["cpu_util"], 0)
        self.assertGreater(single["examples_per_cpu_second"], 0)
        self.assertBetween(single["auc"], 0.0, 1.0)
        self.assertGreater(single["processes"][0]["peak_rss_mib"], 0)
        self.assertGreater(variants["input_ceiling"]["runs"][0]["examples_per_sec"], 0)
        self.assertGreater(variants["compute_ceiling"]["runs"][0]["examples_per_sec"], 0)
        with open(os.path.join(results, config_lib.QUICK_NAME + ".md")) as f:
            report = f.read()
        self.assertIn("| single | one device |", report)
        self.assertIn("AUC after %s examples" % format((STEPS + WARMUP) * BATCH, ","), report)


if __name__ == "__main__":
    tf.test.main()
