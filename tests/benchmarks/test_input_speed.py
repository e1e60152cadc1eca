"""Tests of `benchmarks.input_speed`: its command line, and a short real run.

The run generates a tiny synthetic dataset root, measures a few rows with
`--quick` (each in its own process; the Pipe-mode row through a real FIFO fed
by `PipeFeeder`) and checks the report it writes.
"""

import json
import os

import pytest
import tensorflow as tf
from absl import app

from benchmarks import input_speed as bench
from benchmarks import input_speed_report as report_lib
from benchmarks import input_speed_variants as variants_lib
from dataprep import synthetic

TINY_ROWS = 16_000  # 3,600 train rows per shard: three batches of 1024
SEED = 3
PARSE_ARGS_ROWS = 2_000
# Rows of the short run: each kind of measurement once.
RUN_VARIANTS = ("tfrecord_pipe", "reads_8", "cache_after_repeat", "decode_libsvm")
RUN_BATCHES = 4
RUN_WARMUP = 2
PNG_MAGIC = b"\x89PNG"


class ParseArgsTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.data_dir = os.path.join(self.get_temp_dir(), "data")
        synthetic.generate(PARSE_ARGS_ROWS, self.data_dir, seed=SEED, overwrite=True)

    def test_reference_first_and_quick_defaults(self):
        config = bench.parse_args(["--data_dir", self.data_dir, "--quick", "--variants", "libsvm,tfrecord,libsvm"])
        self.assertEqual(config.names(), (variants_lib.REFERENCE, "libsvm"))
        self.assertEqual((config.rounds, config.batches, config.warmup, config.cache_epochs),
                         (variants_lib.QUICK_RUNS, variants_lib.QUICK_BATCHES, variants_lib.QUICK_WARMUP,
                          variants_lib.QUICK_CACHE_EPOCHS))
        config = bench.parse_args(["--data_dir", self.data_dir, "--runs", "2", "--warmup", "0"])
        self.assertEqual((config.rounds, config.batches, config.warmup), (2, variants_lib.FULL_BATCHES, 0))
        self.assertEqual(config.names(), tuple(variants_lib.VARIANTS_BY_NAME))

    def test_bad_values_are_refused(self):
        for argv in (["--variants", "tfrecord,nope"], ["--runs", "-1"], ["--cache_epochs", "1"],
                     ["--batch_size", "0"]):
            with self.subTest(argv=argv), self.assertRaisesRegex(app.UsageError, argv[0]):
                bench.parse_args(["--data_dir", self.data_dir] + argv)
        with self.assertRaisesRegex(app.UsageError, "is not a dataset root"):
            bench.parse_args(["--data_dir", self.get_temp_dir()])


@pytest.mark.slow
class QuickRunTest(tf.test.TestCase):

    def test_quick_run_writes_the_report(self):
        data_dir = os.path.join(self.get_temp_dir(), "data")
        results_dir = os.path.join(self.get_temp_dir(), "results")
        synthetic.generate(TINY_ROWS, data_dir, seed=SEED)
        self.assertEqual(0, bench.benchmark(bench.parse_args([
            "--quick", "--data_dir", data_dir, "--results_dir", results_dir, "--variants", ",".join(RUN_VARIANTS),
            "--batches", str(RUN_BATCHES), "--warmup", str(RUN_WARMUP)])))

        with open(os.path.join(results_dir, report_lib.NAME + ".json")) as f:
            raw = json.load(f)
        variants = raw["variants"]
        self.assertEqual(set(variants), {variants_lib.REFERENCE, *RUN_VARIANTS})
        for name, values in variants.items():
            self.assertLen(values["examples_per_sec"], variants_lib.QUICK_RUNS)
            self.assertTrue(all(v > 0 for v in values["examples_per_sec"] + values["cpu_us_per_example"]), name)
            if not variants_lib.VARIANTS_BY_NAME[name].per_epoch:
                self.assertEqual(values["timed_batches"], [RUN_BATCHES] * variants_lib.QUICK_RUNS, name)
        # 3,600 rows per shard: 3 batches per epoch; the first epoch is the warm-up.
        cache = variants["cache_after_repeat"]
        self.assertEqual([len(run) for run in cache["rss_mb_per_epoch"]], [variants_lib.QUICK_CACHE_EPOCHS])
        self.assertGreaterEqual(cache["timed_batches"][0], 3 * (variants_lib.QUICK_CACHE_EPOCHS - 1))
        self.assertEqual(raw["machine"]["tensorflow"], tf.__version__)
        self.assertTrue(all(value >= 0 for value in raw["load_average_1min"].values()))

        with open(os.path.join(results_dir, report_lib.NAME + ".md")) as f:
            report = f.read()
        for name in variants:
            self.assertIn("| %s |" % name, report)
        self.assertIn("## Targets", report)
        self.assertIn("| vectorized TFRecord >= 5x scalar LibSVM | - | not measured |", report)
        self.assertIn("## Resident memory per epoch", report)
        with open(os.path.join(results_dir, report_lib.NAME + ".png"), "rb") as f:
            self.assertEqual(f.read(len(PNG_MAGIC)), PNG_MAGIC)
