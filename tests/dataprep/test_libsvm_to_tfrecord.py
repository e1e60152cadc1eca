"""Tests of dataprep.libsvm_to_tfrecord: the one-line conversion the pipeline suggests."""

import os
import tempfile

import numpy as np
import tensorflow as tf

from dataprep import libsvm_to_tfrecord
from tests import command_line
from tests.input_pipeline import dataset_io, example_files


class LibsvmToTFRecordTest(tf.test.TestCase):

    def test_tfrecord_twin_holds_the_same_rows(self):
        directory = tempfile.mkdtemp(dir=self.get_temp_dir())
        rows = example_files.make_rows(20, seed=4)
        path = example_files.write_rows(os.path.join(directory, "part"), rows, "libsvm")
        targets = libsvm_to_tfrecord.convert([os.path.join(directory, "*.libsvm")], example_files.SMALL_FIELD_SIZE)
        self.assertEqual(targets, [path[:-len(".libsvm")] + ".tfrecord"])
        for got, want in zip(dataset_io.read_tfrecord(targets[0], example_files.SMALL_FIELD_SIZE), rows):
            self.assertAllEqual(got, want)
        with self.assertRaisesRegex(FileExistsError, "already exist.*--overwrite"):
            libsvm_to_tfrecord.convert([path], example_files.SMALL_FIELD_SIZE)

    def test_tfrecord_packed_and_back(self):
        directory = tempfile.mkdtemp(dir=self.get_temp_dir())
        rows = example_files.make_rows(300, seed=5)
        path = example_files.write_rows(os.path.join(directory, "part"), rows, "tfrecord")
        packed_dir = os.path.join(directory, "packed")
        (packed,) = libsvm_to_tfrecord.convert([path], example_files.SMALL_FIELD_SIZE, output_dir=packed_dir,
                                               source_format="tfrecord", target_format="tfrecord_packed")
        self.assertEqual(packed, os.path.join(packed_dir, "part.tfrecord-packed"))
        self.assertLen(list(tf.compat.v1.io.tf_record_iterator(packed)), 2)  # 256 + 44 rows
        for got, want in zip(dataset_io.read_tfrecord_packed(packed, example_files.SMALL_FIELD_SIZE), rows):
            self.assertAllEqual(got, want)
        (again,) = libsvm_to_tfrecord.convert([packed], example_files.SMALL_FIELD_SIZE,
                                              output_dir=os.path.join(directory, "again"),
                                              source_format="tfrecord_packed", target_format="tfrecord")
        for got, want in zip(dataset_io.read_tfrecord(again, example_files.SMALL_FIELD_SIZE), rows):
            self.assertAllEqual(got, want)
        with self.assertRaisesRegex(ValueError, "--input_format and --output_format are both 'tfrecord'"):
            libsvm_to_tfrecord.convert([path], example_files.SMALL_FIELD_SIZE, source_format="tfrecord",
                                       target_format="tfrecord")

    def test_command_line_names_a_bad_line(self):
        directory = tempfile.mkdtemp(dir=self.get_temp_dir())
        path = os.path.join(directory, "bad.libsvm")
        with open(path, "w") as f:
            f.write("1 1:1 2:1 3:1 4:1\n0 1:x 2:1 3:1 4:1\n")
        result = command_line.run(command_line.python_module(
            "dataprep.libsvm_to_tfrecord", "--field_size", "4", "--input", "bad.libsvm"), directory, timeout=120)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("bad.libsvm:2: bad LibSVM line", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(directory, "bad.tfrecord")))
        self.assertEqual(np.sort(os.listdir(directory)).tolist(), ["bad.libsvm"])


if __name__ == "__main__":
    tf.test.main()
