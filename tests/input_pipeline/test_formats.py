"""Tests for input_pipeline.formats: the registry, and what every registered format does alike."""

import copy
import os
import pickle
import re

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import format_base, format_libsvm, formats, pipeline, schema
from tests.input_pipeline import example_files
from tests.input_pipeline.format_testing import FIELDS, ROWS, FormatTestCase, config, decoded

EXPECTED_PIPE_SUPPORT = (("tfrecord", True), ("tfrecord_packed", True), ("libsvm", False))


class RegistryTest(tf.test.TestCase, parameterized.TestCase):

    def test_names_in_registration_order(self):
        self.assertEqual(formats.names(), ["tfrecord", "tfrecord_packed", "libsvm"])
        self.assertEqual(formats.extensions(), {"tfrecord": ".tfrecord", "tfrecord_packed": ".tfrecord-packed",
                                                "libsvm": ".libsvm"})

    @parameterized.parameters("tfrecord", "libsvm")
    def test_get_by_name(self, name):
        data_format = formats.get(name)
        self.assertIsInstance(data_format, format_base.DataFormat)
        self.assertEqual(data_format.name, name)
        self.assertIs(formats.as_format(name), data_format)
        self.assertIs(formats.as_format(data_format), data_format)
        self.assertEqual(formats.as_format(data_format).shard_name(3), "part-00003." + name)

    @parameterized.parameters("csv", "TFRecord", "")
    def test_unknown_name_lists_the_valid_ones(self, name):
        with self.assertRaisesRegex(ValueError,
                                    "data_format must be one of tfrecord, tfrecord_packed, libsvm, got %r" % name):
            formats.get(name)

    def test_copies_are_the_registered_format(self):
        self.assertIs(copy.deepcopy(formats.LIBSVM), formats.LIBSVM)
        self.assertIs(pickle.loads(pickle.dumps(formats.TFRECORD)), formats.TFRECORD)
        self.assertIs(pickle.loads(pickle.dumps(formats.TFRECORD_PACKED)), formats.TFRECORD_PACKED)
        self.assertIs(format_libsvm.LibSVMFormat(), formats.LIBSVM)

    def test_a_name_is_registered_once(self):
        with self.assertRaisesRegex(ValueError, "data format 'libsvm' is registered twice"):
            formats.register(format_libsvm.LibSVMFormat())
        self.assertEqual(formats.names(), ["tfrecord", "tfrecord_packed", "libsvm"])


class ReadDecodeTest(FormatTestCase):

    @parameterized.parameters("tfrecord", "tfrecord_packed", "libsvm")
    def test_reads_and_decodes_the_rows_written(self, name):
        data_format = formats.get(name)
        batches = decoded(data_format, [self.write(data_format)])
        labels = np.concatenate([labels for _, labels in batches])
        ids = np.concatenate([features[schema.FEAT_IDS] for features, _ in batches])
        values = np.concatenate([features[schema.FEAT_VALS] for features, _ in batches])
        self.assertAllEqual(labels, self.rows[0])
        self.assertAllEqual(ids, self.rows[1])
        self.assertAllEqual(values, self.rows[2])

    def test_every_format_decodes_to_the_same_features(self):
        rows = {}
        for name in formats.names():
            batches = decoded(formats.get(name), [self.write(formats.get(name))])
            rows[name] = [np.concatenate([labels for _, labels in batches])] + [
                np.concatenate([features[key] for features, _ in batches])
                for key in (schema.FEAT_IDS, schema.FEAT_VALS)]
        self.assertLen(rows["tfrecord"][0], ROWS)
        for name in formats.names():
            for got, expected in zip(rows[name], rows["tfrecord"]):
                self.assertAllEqual(got, expected)

    @parameterized.parameters("tfrecord", "tfrecord_packed", "libsvm")
    def test_features_alone_when_not_labelled(self, name):
        data_format = formats.get(name)
        batches = decoded(data_format, [self.write(data_format)], labelled=False)
        self.assertEqual(set(batches[0]), {schema.FEAT_IDS, schema.FEAT_VALS})
        self.assertAllEqual(np.concatenate([batch[schema.FEAT_IDS] for batch in batches]), self.rows[1])

    @parameterized.parameters("tfrecord", "tfrecord_packed", "libsvm")
    def test_counts_the_rows_written(self, name):
        data_format = formats.get(name)
        self.assertEqual(data_format.count_rows(self.write(data_format)), ROWS)

    @parameterized.parameters("tfrecord", "tfrecord_packed", "libsvm")
    def test_good_first_records_pass(self, name):
        data_format = formats.get(name)
        path = example_files.write_rows(os.path.join(self.dir, "ok"), self.rows, data_format)
        data_format.check_first_record(path, FIELDS)
        with self.assertRaisesRegex(ValueError, "%s.*(4 int64_list values, expected 39|"
                                                "12 int64_list values in 'ids', expected 117|"
                                                "has 4 id:value pairs, field_size is 39)"
                                    % re.escape(os.path.basename(path))):
            data_format.check_first_record(path, schema.FIELD_SIZE)


class CapabilityTest(FormatTestCase):

    @parameterized.parameters(*EXPECTED_PIPE_SUPPORT)
    def test_pipe_mode_capability(self, name, supported):
        self.assertEqual(formats.get(name).supports_pipe_mode, supported)

    def test_pipe_mode_carries_tfrecord(self):
        formats.check_pipe_mode(formats.TFRECORD)
        self.assertEqual(formats.TFRECORD.pipe_record_format, "TFRecord")
        self.assertIs(config("tfrecord", input_mode=pipeline.INPUT_MODE_PIPE).data_format, formats.TFRECORD)

    def test_pipe_mode_refuses_libsvm(self):
        message = "Pipe mode reads TFRecord or packed TFRecord channels only, got data_format='libsvm'"
        with self.assertRaisesRegex(ValueError, message):
            formats.check_pipe_mode(formats.LIBSVM)
        with self.assertRaisesRegex(ValueError, message):
            config("libsvm", input_mode=pipeline.INPUT_MODE_PIPE)

    @parameterized.named_parameters(
        ("tfrecord_skip_bad_records", "tfrecord", dict(skip_bad_records=True),
         "skip_bad_records=True applies to LibSVM only, got data_format='tfrecord'"),
        ("libsvm_max_corrupted_records", "libsvm", dict(max_corrupted_records=3),
         "max_corrupted_records=3 applies to TFRecord only, got data_format='libsvm'"),
        ("negative_max_corrupted_records", "tfrecord", dict(max_corrupted_records=-1),
         "max_corrupted_records must be >= 0, got -1"),
    )
    def test_options_belong_to_their_format(self, name, options, message):
        with self.assertRaisesRegex(ValueError, message):
            config(name, **options)

    @parameterized.parameters(("tfrecord", dict(max_corrupted_records=3)), ("libsvm", dict(skip_bad_records=True)))
    def test_own_options_are_accepted(self, name, options):
        self.assertEqual(config(name, **options).data_format.options, tuple(options))


if __name__ == "__main__":
    tf.test.main()
