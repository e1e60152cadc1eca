"""Tests for input_pipeline.format_tfrecord: labels, row counts and first records of TFRecord files."""

import os

import numpy as np
import tensorflow as tf

from input_pipeline import formats, schema
from tests.input_pipeline import example_files
from tests.input_pipeline.format_testing import FIELDS, ROWS, FormatTestCase, decoded


class TFRecordTest(FormatTestCase):

    def test_without_labels(self):
        path = os.path.join(self.dir, "unlabelled.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for ids, values in zip(self.rows[1], self.rows[2]):
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    schema.IDS_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
                    schema.VALUES_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=values)),
                })).SerializeToString())
        self.assertFalse(formats.TFRECORD.has_labels(path))
        self.assertTrue(formats.TFRECORD.has_labels(self.write(formats.TFRECORD)))
        batches = decoded(formats.TFRECORD, [path], labelled=False)
        self.assertAllEqual(np.concatenate([batch[schema.FEAT_VALS] for batch in batches]), self.rows[2])

    def test_truncated_file_is_named_when_counted(self):
        path = self.write(formats.TFRECORD)
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:-3])
        with self.assertRaisesRegex(ValueError, "TFRecord file .*part.tfrecord is truncated or corrupt: "
                                                "record %d" % (ROWS - 1)):
            formats.TFRECORD.count_rows(path)

    def test_no_suggestion(self):
        self.assertIsNone(formats.TFRECORD.suggestion([self.write(formats.TFRECORD)], FIELDS))


class FirstRecordTest(FormatTestCase):

    def test_reads_first_record(self):
        rows = example_files.make_rows(4)
        path = example_files.write_tfrecord(os.path.join(self.dir, "a.tfrecord"), rows)
        # The same Example; the writer may order the features differently from protobuf's map.
        self.assertEqual(tf.train.Example.FromString(formats.TFRECORD.read_first_record(path)),
                         tf.train.Example.FromString(example_files.serialize(float(rows[0][0]), rows[1][0],
                                                                             rows[2][0])))

    def test_truncated_first_record(self):
        path = os.path.join(self.dir, "short.tfrecord")
        with open(path, "wb") as f:
            f.write(b"\x05\x00")
        with self.assertRaisesRegex(ValueError, "short.tfrecord is not a TFRecord file: it ends after 2 bytes"):
            formats.TFRECORD.read_first_record(path)

    def test_missing_feature(self):
        path = os.path.join(self.dir, "other.tfrecord")
        example = tf.train.Example(features=tf.train.Features(feature={
            "y": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))}))
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(example.SerializeToString())
        with self.assertRaisesRegex(ValueError, "other.tfrecord: the first record has no feature 'label' "
                                                "\\(it has \\['y'\\]\\)"):
            formats.TFRECORD.check_first_record(path, FIELDS)

    def test_not_an_example(self):
        path = os.path.join(self.dir, "text.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(b"\xff\xff not a protobuf")
        with self.assertRaisesRegex(ValueError, "text.tfrecord: the first record is not a tf.train.Example"):
            formats.TFRECORD.check_first_record(path, FIELDS)
        with self.assertRaisesRegex(ValueError, "text.tfrecord: the first record is not a tf.train.Example"):
            formats.TFRECORD.has_labels(path)


if __name__ == "__main__":
    tf.test.main()
