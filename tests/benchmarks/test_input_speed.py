"""Tests of `benchmarks.input_speed`: its helpers, and a short real run.

The slow orders built by the benchmark are checked against the builder's
own on a tiny dataset root. The run generates a tiny synthetic dataset root,
measures a few rows with `--quick` (each in its own process; the Pipe-mode
row through a real FIFO fed by `PipeFeeder`) and checks the report it writes.
"""

import dataclasses
import json
import os

import pytest
import tensorflow as tf
from absl.testing import parameterized

from benchmarks import input_speed as bench
from dataprep import synthetic
from input_pipeline import schema
from tests.input_pipeline import example_files

TINY_ROWS = 16_000  # 3,600 train rows per shard: three batches of 1024
SEED = 3
PARSE_ARGS_ROWS = 2_000
# Rows of the short run: each kind of measurement once.
RUN_VARIANTS = ("tfrecord_pipe", "reads_8", "cache_after_repeat", "decode_libsvm")
RUN_BATCHES = 4
RUN_WARMUP = 2
PNG_MAGIC = b"\x89PNG"
# The slow-order rows: two train shards of SLOW_SHARD_ROWS rows, batches of
# SLOW_BATCH (a divisor, so that no batch straddles two epochs), SLOW_EPOCHS epochs.
SLOW_SHARD_ROWS = 6
SLOW_BATCH = 3
SLOW_EPOCHS = 2
def write_records(path, records):
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    return path


def read_records(paths):
    return [record.numpy() for record in tf.data.TFRecordDataset(list(paths))]


class SplitTfrecordsTest(tf.test.TestCase):

    def test_parts_hold_every_record_in_order(self):
        tmp = self.get_temp_dir()
        first = [b"a" * n for n in range(1, 6)]
        second = [b"record %d" % n for n in range(7)]
        paths = [write_records(os.path.join(tmp, "x.tfrecord"), first),
                 write_records(os.path.join(tmp, "y.tfrecord"), second)]
        parts = bench.split_tfrecords(paths, os.path.join(tmp, "parts"), 2)
        self.assertEqual([os.path.basename(p) for p in parts],
                         ["x-0of2.tfrecord", "x-1of2.tfrecord", "y-0of2.tfrecord", "y-1of2.tfrecord"])
        self.assertEqual([len(read_records([p])) for p in parts], [2, 3, 3, 4])
        self.assertEqual(read_records(parts), first + second)

    def test_truncated_file_is_named(self):
        path = write_records(os.path.join(self.get_temp_dir(), "t.tfrecord"), [b"abc", b"defg"])
        with open(path, "rb+") as f:
            f.truncate(os.path.getsize(path) - 1)
        with self.assertRaisesRegex(ValueError, "t.tfrecord ends inside a record"):
            bench.split_tfrecords([path], os.path.join(self.get_temp_dir(), "parts"), 2)

    def test_too_few_records(self):
        path = write_records(os.path.join(self.get_temp_dir(), "one.tfrecord"), [b"abc"])
        with self.assertRaisesRegex(ValueError, "one.tfrecord has 1 record.*2 parts"):
            bench.split_tfrecords([path], os.path.join(self.get_temp_dir(), "parts"), 2)


def labels_of(dataset) -> list:
    return [float(label) for _, labels in dataset for label in labels.numpy()]


class SlowOrderTest(tf.test.TestCase, parameterized.TestCase):

    def setUp(self):
        super().setUp()
        root = os.path.join(self.get_temp_dir(), "root")
        shards = [example_files.make_rows(SLOW_SHARD_ROWS, field_size=schema.FIELD_SIZE, seed=index,
                                          first_label=index * SLOW_SHARD_ROWS) for index in range(2)]
        example_files.write_dataset_root(root, {"train": shards}, field_size=schema.FIELD_SIZE)
        self.config = bench.BenchConfig(data_dir=root, runs=1, batches=1, warmup=0, batch_size=SLOW_BATCH,
                                        cache_epochs=SLOW_EPOCHS, variants=(bench.REFERENCE,),
                                        results_dir=self.get_temp_dir())

    @parameterized.named_parameters(
        ("tfrecord_scalar_map", "tfrecord_scalar_map", ["map", "unbatch", "batch", "repeat", "prefetch"], 2),
        ("libsvm_scalar_map", "libsvm_scalar_map", ["map", "unbatch", "batch", "repeat", "prefetch"], 2),
        ("tfrecord_no_prefetch", "tfrecord_no_prefetch", ["batch", "map", "repeat"], 2),
        ("cache_after_repeat", "cache_after_repeat", ["repeat", "cache", "batch", "map", "prefetch"], 1),
    )
    def test_slow_order_yields_the_builders_rows(self, name, stages, shards):
        variant = bench.VARIANTS_BY_NAME[name]
        self.assertIn(variant.order, bench.SLOW_ORDERS)
        default = dataclasses.replace(variant, order=bench.ORDER_DEFAULT)
        self.assertEqual(example_files.applied_stages(lambda: bench.build_dataset(variant, self.config, SLOW_EPOCHS)),
                         stages)
        self.assertEqual(example_files.applied_stages(lambda: bench.build_dataset(default, self.config, SLOW_EPOCHS)),
                         ["rebatch", "map", "repeat", "prefetch"])
        expected = labels_of(bench.build_dataset(default, self.config, SLOW_EPOCHS))
        self.assertLen(expected, shards * SLOW_SHARD_ROWS * SLOW_EPOCHS)
        self.assertEqual(sorted(labels_of(bench.build_dataset(variant, self.config, SLOW_EPOCHS))), sorted(expected))

    def test_no_prefetch_order_stops_tf_data_from_adding_one(self):
        dataset = bench.build_dataset(bench.VARIANTS_BY_NAME["tfrecord_no_prefetch"], self.config, SLOW_EPOCHS)
        self.assertFalse(dataset.options().experimental_optimization.inject_prefetch)

    def test_unknown_order_is_refused(self):
        variant = dataclasses.replace(bench.VARIANTS_BY_NAME[bench.REFERENCE], order="map_twice")
        with self.assertRaisesRegex(ValueError, "order must be one of scalar_map, no_prefetch, cache_after_repeat, "
                                                "got 'map_twice'"):
            bench.build_dataset(variant, self.config, SLOW_EPOCHS)


class ParseArgsTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.data_dir = os.path.join(self.get_temp_dir(), "data")
        synthetic.generate(PARSE_ARGS_ROWS, self.data_dir, seed=SEED, overwrite=True)

    def test_reference_first_and_quick_defaults(self):
        config = bench.parse_args(["--data_dir", self.data_dir, "--quick", "--variants", "libsvm,tfrecord,libsvm"])
        self.assertEqual(config.variants, (bench.REFERENCE, "libsvm"))
        self.assertEqual((config.runs, config.batches, config.warmup, config.cache_epochs),
                         (bench.QUICK_RUNS, bench.QUICK_BATCHES, bench.QUICK_WARMUP, bench.QUICK_CACHE_EPOCHS))
        config = bench.parse_args(["--data_dir", self.data_dir, "--runs", "2"])
        self.assertEqual((config.runs, config.batches), (2, bench.FULL_BATCHES))
        self.assertEqual(config.variants, tuple(bench.VARIANTS_BY_NAME))

    def test_bad_values_are_refused(self):
        for argv in (["--variants", "tfrecord,nope"], ["--runs", "0"], ["--cache_epochs", "1"],
                     ["--batch_size", "0"]):
            with self.subTest(argv=argv), self.assertRaises(SystemExit):
                bench.parse_args(["--data_dir", self.data_dir] + argv)
        with self.assertRaises(SystemExit):
            bench.parse_args(["--data_dir", self.get_temp_dir()])


@pytest.mark.slow
class QuickRunTest(tf.test.TestCase):

    def test_quick_run_writes_the_report(self):
        data_dir = os.path.join(self.get_temp_dir(), "data")
        results_dir = os.path.join(self.get_temp_dir(), "results")
        synthetic.generate(TINY_ROWS, data_dir, seed=SEED)
        self.assertEqual(0, bench.main([
            "--quick", "--data_dir", data_dir, "--results_dir", results_dir, "--variants", ",".join(RUN_VARIANTS),
            "--batches", str(RUN_BATCHES), "--warmup", str(RUN_WARMUP)]))

        with open(os.path.join(results_dir, bench.NAME + ".json")) as f:
            raw = json.load(f)
        variants = raw["results"]["variants"]
        self.assertEqual(set(variants), {bench.REFERENCE, *RUN_VARIANTS})
        for name, values in variants.items():
            self.assertLen(values["examples_per_sec"], bench.QUICK_RUNS)
            self.assertTrue(all(v > 0 for v in values["examples_per_sec"] + values["cpu_us_per_example"]), name)
            if not bench.VARIANTS_BY_NAME[name].per_epoch:
                self.assertEqual(values["timed_batches"], [RUN_BATCHES] * bench.QUICK_RUNS, name)
        # 3,600 rows per shard: 3 batches per epoch; the first epoch is the warm-up.
        cache = variants["cache_after_repeat"]
        self.assertEqual([len(run) for run in cache["rss_mb_per_epoch"]], [bench.QUICK_CACHE_EPOCHS])
        self.assertGreaterEqual(cache["timed_batches"][0], 3 * (bench.QUICK_CACHE_EPOCHS - 1))
        self.assertEqual(raw["machine"]["tensorflow"], tf.__version__)
        self.assertTrue(all(value >= 0 for value in raw["results"]["load_average_1min"].values()))

        with open(os.path.join(results_dir, bench.NAME + ".md")) as f:
            report = f.read()
        for name in variants:
            self.assertIn("| %s |" % name, report)
        self.assertIn("## Targets", report)
        self.assertIn("| vectorized TFRecord >= 5x scalar LibSVM | - | not measured |", report)
        self.assertIn("## Resident memory per epoch", report)
        with open(os.path.join(results_dir, bench.NAME + ".png"), "rb") as f:
            self.assertEqual(f.read(len(PNG_MAGIC)), PNG_MAGIC)
