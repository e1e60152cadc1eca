"""Tests of `benchmarks.input_speed_variants`: splitting TFRecord files, and the slow orders of the rows.

The slow orders built by the benchmark are checked against the builder's
own on a tiny dataset root.
"""

import dataclasses
import os

import tensorflow as tf
from absl.testing import parameterized

from benchmarks import input_speed_variants as variants
from input_pipeline import schema
from tests.input_pipeline import example_files

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
        parts = variants.split_tfrecords(paths, os.path.join(tmp, "parts"), 2)
        self.assertEqual([os.path.basename(p) for p in parts],
                         ["x-0of2.tfrecord", "x-1of2.tfrecord", "y-0of2.tfrecord", "y-1of2.tfrecord"])
        self.assertEqual([len(read_records([p])) for p in parts], [2, 3, 3, 4])
        self.assertEqual(read_records(parts), first + second)

    def test_truncated_file_is_named(self):
        path = write_records(os.path.join(self.get_temp_dir(), "t.tfrecord"), [b"abc", b"defg"])
        with open(path, "rb+") as f:
            f.truncate(os.path.getsize(path) - 1)
        with self.assertRaisesRegex(ValueError, "t.tfrecord ends inside a record"):
            variants.split_tfrecords([path], os.path.join(self.get_temp_dir(), "parts"), 2)

    def test_too_few_records(self):
        path = write_records(os.path.join(self.get_temp_dir(), "one.tfrecord"), [b"abc"])
        with self.assertRaisesRegex(ValueError, "one.tfrecord has 1 record.*2 parts"):
            variants.split_tfrecords([path], os.path.join(self.get_temp_dir(), "parts"), 2)


def labels_of(dataset) -> list:
    return [float(label) for _, labels in dataset for label in labels.numpy()]


class SlowOrderTest(tf.test.TestCase, parameterized.TestCase):

    def setUp(self):
        super().setUp()
        root = os.path.join(self.get_temp_dir(), "root")
        shards = [example_files.make_rows(SLOW_SHARD_ROWS, field_size=schema.FIELD_SIZE, seed=index,
                                          first_label=index * SLOW_SHARD_ROWS) for index in range(2)]
        example_files.write_dataset_root(root, {"train": shards}, field_size=schema.FIELD_SIZE)
        self.config = variants.BenchConfig(data_dir=root, rounds=1, batches=1, warmup=0, batch_size=SLOW_BATCH,
                                           cache_epochs=SLOW_EPOCHS, variants=variants.REFERENCE,
                                           results_dir=self.get_temp_dir())

    def dataset_of(self, variant):
        """A function making `variant`'s dataset of `SLOW_EPOCHS` epochs."""
        return lambda: variants.build_dataset(variant, self.config, SLOW_EPOCHS)

    @parameterized.named_parameters(
        ("tfrecord_scalar_map", "tfrecord_scalar_map", ["map", "unbatch", "batch", "repeat", "prefetch"], 2),
        ("libsvm_scalar_map", "libsvm_scalar_map", ["map", "unbatch", "batch", "repeat", "prefetch"], 2),
        ("tfrecord_no_prefetch", "tfrecord_no_prefetch", ["batch", "map", "repeat"], 2),
        ("cache_after_repeat", "cache_after_repeat", ["repeat", "cache", "batch", "map", "prefetch"], 1),
    )
    def test_slow_order_yields_the_builders_rows(self, name, stages, shards):
        variant = variants.VARIANTS_BY_NAME[name]
        self.assertIn(variant.order, variants.SLOW_ORDERS)
        default = dataclasses.replace(variant, order=variants.ORDER_DEFAULT)
        self.assertEqual(example_files.applied_stages(self.dataset_of(variant)), stages)
        self.assertEqual(example_files.applied_stages(self.dataset_of(default)),
                         ["rebatch", "map", "repeat", "prefetch"])
        expected = labels_of(self.dataset_of(default)())
        self.assertLen(expected, shards * SLOW_SHARD_ROWS * SLOW_EPOCHS)
        self.assertEqual(sorted(labels_of(self.dataset_of(variant)())), sorted(expected))

    def test_no_prefetch_order_stops_tf_data_from_adding_one(self):
        dataset = self.dataset_of(variants.VARIANTS_BY_NAME["tfrecord_no_prefetch"])()
        self.assertFalse(dataset.options().experimental_optimization.inject_prefetch)

    def test_unknown_order_is_refused(self):
        variant = dataclasses.replace(variants.VARIANTS_BY_NAME[variants.REFERENCE], order="map_twice")
        with self.assertRaisesRegex(ValueError, "order must be one of scalar_map, no_prefetch, cache_after_repeat, "
                                                "got 'map_twice'"):
            variants.build_dataset(variant, self.config, SLOW_EPOCHS)
