"""Tests of the vectorized LibSVM / TFRecord / packed TFRecord encoders and the sharded writer."""

import os
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from dataprep import writers
from input_pipeline import encoders, schema
from tests.input_pipeline import dataset_io

FIELDS = 5


def _rows(n, seed=0, max_id=2**40):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n).astype(np.float32)
    ids = rng.integers(0, max_id, (n, FIELDS))
    values = rng.normal(0.0, 3.0, (n, FIELDS))
    return labels, ids, values


def _reference_example(label, ids, values):
    return tf.train.Example(features=tf.train.Features(feature={
        schema.LABEL_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=np.atleast_1d(label))),
        schema.IDS_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
        schema.VALUES_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=values)),
    })).SerializeToString(deterministic=True)


class _TempDirTestCase(tf.test.TestCase):

    def new_dir(self) -> str:
        """A fresh, empty directory inside the test's temp dir."""
        return tempfile.mkdtemp(dir=self.get_temp_dir())


class EncodeTest(_TempDirTestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("small_ids", 10),
        ("one_byte_varint_edge", 128),
        ("large_ids", 2**40),
        ("int64_max", 2**63 - 1),
    )
    def test_examples_equal_protobuf_serialization(self, max_id):
        labels, ids, values = _rows(300, max_id=max_id)
        ids[0] = 0
        ids[1] = max_id - 1
        values[2] = 0.0
        records = encoders.encode_examples(labels, ids, values)
        self.assertLen(records, 300)
        for i, record in enumerate(records):
            expected = _reference_example(labels[i], ids[i], encoders.quantize_values(values[i]))
            self.assertEqual(record, expected, "row %d differs" % i)

    @parameterized.parameters((7, 3), (6, 3), (2, 5), (1, 1))
    def test_packed_examples_equal_protobuf_serialization(self, num_rows, rows_per_record):
        labels, ids, values = _rows(num_rows, seed=num_rows)
        data = encoders.encode_tfrecord_packed(labels, ids, values, rows_per_record)
        path = os.path.join(self.new_dir(), "p.tfrecord-packed")
        with open(path, "wb") as f:
            f.write(data)
        records = list(tf.compat.v1.io.tf_record_iterator(path))
        self.assertLen(records, -(-num_rows // rows_per_record))
        for k, record in enumerate(records):
            part = slice(k * rows_per_record, (k + 1) * rows_per_record)
            expected = _reference_example(labels[part], ids[part].ravel(),
                                          encoders.quantize_values(values[part]).ravel())
            self.assertEqual(record, expected, "record %d differs" % k)
        with self.assertRaisesRegex(ValueError, "rows_per_record must be >= 1, got 0"):
            encoders.encode_tfrecord_packed(labels, ids, values, 0)

    def test_libsvm_text(self):
        labels = np.array([1.0, 0.0])
        ids = np.array([[1, 20, 300], [4000, 0, 7]])
        values = np.array([[1.0, 0.5, 0.0166666], [-2.25, 0.0, 123.0000004]])
        text = encoders.encode_libsvm(labels, ids, values).decode()
        self.assertEqual(text, "1 1:1 20:0.5 300:0.016667\n0 4000:-2.25 0:0 7:123\n")

    def test_libsvm_and_tfrecord_parse_to_the_same_float32(self):
        labels, ids, values = _rows(500, seed=3)
        tmp = self.new_dir()
        with writers.SplitWriter(tmp, schema.TRAIN_SPLIT, 1) as writer:
            writer.write(labels, ids, values)
        stem = os.path.join(tmp, schema.TRAIN_SPLIT, "part-00000")
        text = dataset_io.read_libsvm(stem + ".libsvm")
        record = dataset_io.read_tfrecord(stem + ".tfrecord", field_size=FIELDS)
        for got_text, got_record, want in zip(text, record, (labels, ids, encoders.quantize_values(values))):
            self.assertAllEqual(got_text, want)
            self.assertAllEqual(got_record, want)

    def test_rejects_negative_ids_and_bad_shapes(self):
        labels, ids, values = _rows(3)
        ids[1, 2] = -7
        with self.assertRaisesRegex(ValueError, "-7"):
            encoders.encode_examples(labels, ids, values)
        with self.assertRaisesRegex(ValueError, "shapes"):
            encoders.encode_libsvm(labels[:2], np.abs(ids), values)


class SplitWriterTest(_TempDirTestCase):

    def test_round_robin_over_shards_across_batches(self):
        labels, ids, values = _rows(11)
        ids = np.abs(ids)
        ids[:, 0] = np.arange(11)  # row number, to follow the rows
        tmp = self.new_dir()
        with writers.SplitWriter(tmp, schema.VALIDATION_SPLIT, 3) as writer:
            writer.write(labels[:4], ids[:4], values[:4])
            writer.write(labels[4:], ids[4:], values[4:])
        info = writer.split_info()
        self.assertEqual(info.rows, 11)
        self.assertEqual(info.shards, {"validation/part-00000": 4, "validation/part-00001": 4,
                                       "validation/part-00002": 3})
        self.assertEqual(writer.positives, int(labels.sum()))
        for shard in range(3):
            stem = os.path.join(tmp, "validation", "part-%05d" % shard)
            _, text_ids, _ = dataset_io.read_libsvm(stem + ".libsvm")
            _, record_ids, _ = dataset_io.read_tfrecord(stem + ".tfrecord", field_size=FIELDS)
            _, packed_ids, _ = dataset_io.read_tfrecord_packed(stem + ".tfrecord-packed", field_size=FIELDS)
            self.assertAllEqual(text_ids[:, 0], np.arange(shard, 11, 3))
            self.assertAllEqual(record_ids, text_ids)
            self.assertAllEqual(packed_ids, text_ids)


class OutputDirTest(_TempDirTestCase):

    def test_refuses_existing_dataset_and_overwrite_removes_stale_files(self):
        root = self.new_dir()
        schema.DatasetMetadata(feature_size=5).write(root)
        split = os.path.join(root, schema.TRAIN_SPLIT)
        os.makedirs(split)
        stale = os.path.join(split, "part-00007.tfrecord")
        unrelated = os.path.join(root, "notes.txt")
        for path in (stale, unrelated):
            with open(path, "w") as f:
                f.write("x")
        with self.assertRaisesRegex(FileExistsError, "metadata.json.*--overwrite"):
            writers.prepare_output_dir(root)
        self.assertTrue(os.path.exists(stale))
        writers.prepare_output_dir(root, overwrite=True)
        self.assertFalse(os.path.exists(stale))
        self.assertFalse(os.path.exists(os.path.join(root, schema.METADATA_FILE)))
        self.assertTrue(os.path.exists(unrelated))

    def test_leftover_shards_without_metadata_are_refused(self):
        root = self.new_dir()
        os.makedirs(os.path.join(root, schema.VALIDATION_SPLIT))
        with open(os.path.join(root, schema.VALIDATION_SPLIT, "part-00000.libsvm"), "w") as f:
            f.write("1 1:1\n")
        with self.assertRaisesRegex(FileExistsError, "part-00000.libsvm"):
            writers.check_output_dir(root)

    def test_output_dir_that_is_a_file(self):
        path = os.path.join(self.new_dir(), "file")
        open(path, "w").close()
        with self.assertRaisesRegex(FileExistsError, "not a directory"):
            writers.check_output_dir(path)


if __name__ == "__main__":
    tf.test.main()
