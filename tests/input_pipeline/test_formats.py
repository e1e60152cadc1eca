"""Tests for input_pipeline.formats: the registry and what each format does."""

import copy
import os
import pickle
import re

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import encoders, formats, pipeline, schema
from tests.input_pipeline import example_files

FIELDS = example_files.SMALL_FIELD_SIZE
ROWS = 5
EXPECTED_PIPE_SUPPORT = (("tfrecord", True), ("libsvm", False))


def config(data_format, **kwargs) -> pipeline.PipelineConfig:
    return pipeline.PipelineConfig(data_format=data_format, field_size=FIELDS, **kwargs)


def decoded(data_format: formats.DataFormat, paths, labelled=True):
    """Every batch of `paths` read and decoded by the format, batches of 2 rows."""
    read_config = config(data_format, num_parallel_reads=1)

    def decode(*batch):
        return data_format.decode_batch(batch, read_config, file_names=paths, labelled=labelled)

    return list(data_format.records(paths, read_config).batch(2).map(decode))


class RegistryTest(tf.test.TestCase, parameterized.TestCase):

    def test_names_in_registration_order(self):
        self.assertEqual(formats.names(), ["tfrecord", "tfrecord_packed", "libsvm"])
        self.assertEqual(formats.extensions(), {"tfrecord": ".tfrecord", "tfrecord_packed": ".tfrecord-packed",
                                                "libsvm": ".libsvm"})

    @parameterized.parameters("tfrecord", "libsvm")
    def test_get_by_name(self, name):
        data_format = formats.get(name)
        self.assertIsInstance(data_format, formats.DataFormat)
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

    def test_a_name_is_registered_once(self):
        with self.assertRaisesRegex(ValueError, "data format 'libsvm' is registered twice"):
            formats.register(formats.LibSVMFormat())
        self.assertEqual(formats.names(), ["tfrecord", "tfrecord_packed", "libsvm"])


class FormatTestCase(tf.test.TestCase, parameterized.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.create_tempdir().full_path
        self.rows = example_files.make_rows(ROWS)

    def write(self, data_format: formats.DataFormat, stem: str = "part") -> str:
        """`self.rows` in `data_format`, encoded by the library's writers."""
        path = os.path.join(self.dir, stem + data_format.extension)
        with open(path, "wb") as f:
            f.write(data_format.encode(*self.rows))
        return path


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

    def test_tfrecord_without_labels(self):
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

    def test_libsvm_always_has_labels(self):
        self.assertTrue(formats.LIBSVM.has_labels(self.write(formats.LIBSVM)))

    def test_libsvm_errors_name_file_and_line(self):
        path = example_files.write_libsvm(os.path.join(self.dir, "bad.libsvm"), self.rows,
                                          extra_lines={2: "1 1:0.5 2:oops 3:1 4:1"})
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "%s:3: bad LibSVM line" % path):
            decoded(formats.LIBSVM, [path])


class FixedWidthReadTest(FormatTestCase):
    """Fixed-width LibSVM files are read in blocks of lines as byte rows, like line by line."""

    ID_WIDTH = 6

    def fixed_rows(self, num_rows, seed=0):
        rng = np.random.default_rng(seed)
        return (rng.integers(0, 2, num_rows).astype(np.float32),
                rng.integers(0, 10 ** self.ID_WIDTH, [num_rows, FIELDS]),
                np.round(rng.random([num_rows, FIELDS]) * 9, 6))

    def write_fixed(self, stem, rows, id_width=ID_WIDTH, replace=None):
        """`rows` as fixed-width lines; `replace` maps 0-based line indices to other lines."""
        lines = encoders.encode_libsvm_fixed(*rows, id_width).decode().splitlines()
        for index, line in (replace or {}).items():
            lines[index] = line
        path = os.path.join(self.dir, stem + ".libsvm")
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        return path

    def read(self, paths, **options):
        read_config = config(formats.LIBSVM, **options)
        records = formats.LIBSVM.records(paths, read_config)
        batches = records.batch(100).map(
            lambda *batch: formats.LIBSVM.decode_batch(batch, read_config, file_names=paths))
        labels, ids, values = zip(*[(labels, features[schema.FEAT_IDS], features[schema.FEAT_VALS])
                                    for features, labels in batches])
        return records.element_spec[0], (np.concatenate(labels), np.concatenate(ids), np.concatenate(values))

    def assertRows(self, got, rows):
        for got_part, part in zip(got, rows):
            self.assertAllEqual(got_part, np.asarray(part, got_part.dtype))

    def test_rows_and_order_as_read_line_by_line(self):
        # 600 lines: two whole blocks of 256 and 88 left; 300: one block and 44 left.
        rows = [self.fixed_rows(600, seed=1), self.fixed_rows(300, seed=2)]
        paths = [self.write_fixed("a", rows[0]), self.write_fixed("b", rows[1])]
        width = encoders.fixed_libsvm_line_bytes(FIELDS, self.ID_WIDTH)
        self.assertEqual(formats.LIBSVM.fixed_width_line_bytes(paths, [os.path.getsize(p) for p in paths], FIELDS),
                         width)
        spec, by_rows = self.read(paths)
        self.assertEqual(spec, tf.TensorSpec([width], tf.uint8))
        spec, by_lines = self.read(paths, skip_bad_records=True)
        self.assertEqual(spec, tf.TensorSpec([], tf.string))
        self.assertRows(by_rows, by_lines)
        self.assertRows(self.read(paths[:1])[1], rows[0])

    def test_a_bad_line_is_named_by_file_and_line(self):
        rows = self.fixed_rows(600)
        line = encoders.encode_libsvm_fixed(*[part[519:520] for part in rows], self.ID_WIDTH).decode().rstrip("\n")
        path = self.write_fixed("bad", rows, replace={519: line[:4] + "x" + line[5:]})
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "%s:520: bad LibSVM line \\(it is not" % path):
            self.read([path])

    def test_a_line_of_another_length_stops_the_fixed_width_read(self):
        rows = self.fixed_rows(600)
        lines = encoders.encode_libsvm_fixed(*rows, self.ID_WIDTH).decode().splitlines()
        # Line 300 a byte shorter, line 301 a byte longer: valid LibSVM, and the size stays a multiple.
        shorter, longer = lines[299][:-1], lines[300].replace(" ", " 0", 1)
        path = self.write_fixed("shifted", rows, replace={299: shorter, 300: longer})
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    "%s:300: bad LibSVM line \\(its file is read as fixed-width LibSVM" % path):
            self.read([path])
        # Read line by line, both lines are good.
        expected = list(rows)
        expected[2] = rows[2].copy()
        expected[2][299, -1] = float(shorter.rsplit(":", 1)[1])
        self.assertRows(self.read([path], skip_bad_records=True)[1], expected)

    def test_other_files_are_read_line_by_line(self):
        rows = self.fixed_rows(10)
        fixed = self.write_fixed("fixed", rows)
        wider = self.write_fixed("wider", rows, id_width=self.ID_WIDTH + 1)
        compact = os.path.join(self.dir, "compact.libsvm")
        with open(compact, "wb") as f:
            f.write(encoders.encode_libsvm(*rows))
        cut = os.path.join(self.dir, "cut.libsvm")
        with open(fixed) as f, open(cut, "w") as out:
            out.write(f.read()[:-1])  # no newline after the last line
        for paths in ([fixed, wider], [fixed, compact], [cut]):
            sizes = [os.path.getsize(path) for path in paths]
            self.assertIsNone(formats.LIBSVM.fixed_width_line_bytes(paths, sizes, FIELDS), paths)
            spec, got = self.read(paths)
            self.assertEqual(spec, tf.TensorSpec([], tf.string))
            self.assertRows(got, [np.concatenate([part] * len(paths)) for part in rows] if len(paths) == 2 else rows)
        self.assertIsNone(formats.LIBSVM.fixed_width_line_bytes([fixed], [os.path.getsize(fixed)], FIELDS + 1))


class RowCountTest(FormatTestCase):

    @parameterized.parameters("tfrecord", "tfrecord_packed", "libsvm")
    def test_counts_the_rows_written(self, name):
        data_format = formats.get(name)
        self.assertEqual(data_format.count_rows(self.write(data_format)), ROWS)

    def test_libsvm_last_line_without_newline_counts(self):
        path = os.path.join(self.dir, "d.libsvm")
        with open(path, "w") as f:
            f.write("1 1:1\n0 1:2")
        self.assertEqual(formats.LIBSVM.count_rows(path), 2)

    def test_truncated_tfrecord_names_the_file(self):
        path = self.write(formats.TFRECORD)
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:-3])
        with self.assertRaisesRegex(ValueError, "TFRecord file .*part.tfrecord is truncated or corrupt: "
                                                "record %d" % (ROWS - 1)):
            formats.TFRECORD.count_rows(path)


class FirstRecordTest(FormatTestCase):

    def test_reads_first_record(self):
        rows = example_files.make_rows(4)
        tfrecord = example_files.write_tfrecord(os.path.join(self.dir, "a.tfrecord"), rows)
        libsvm = example_files.write_libsvm(os.path.join(self.dir, "c.libsvm"), rows)
        # The same Example; the writer may order the features differently from protobuf's map.
        self.assertEqual(tf.train.Example.FromString(formats.TFRECORD.read_first_record(tfrecord)),
                         tf.train.Example.FromString(example_files.serialize(float(rows[0][0]), rows[1][0],
                                                                             rows[2][0])))
        self.assertEqual(formats.LIBSVM.read_first_record(libsvm),
                         example_files.libsvm_line(float(rows[0][0]), rows[1][0], rows[2][0]))

    def test_truncated_first_record(self):
        path = os.path.join(self.dir, "short.tfrecord")
        with open(path, "wb") as f:
            f.write(b"\x05\x00")
        with self.assertRaisesRegex(ValueError, "short.tfrecord is not a TFRecord file: it ends after 2 bytes"):
            formats.TFRECORD.read_first_record(path)

    def test_empty_libsvm_file(self):
        path = os.path.join(self.dir, "empty.libsvm")
        open(path, "w").close()
        with self.assertRaisesRegex(ValueError, "empty.libsvm holds no line"):
            formats.LIBSVM.read_first_record(path)

    @parameterized.parameters("tfrecord", "tfrecord_packed", "libsvm")
    def test_good_files_pass(self, name):
        data_format = formats.get(name)
        path = example_files.write_rows(os.path.join(self.dir, "ok"), self.rows, data_format)
        data_format.check_first_record(path, FIELDS)
        with self.assertRaisesRegex(ValueError, "%s.*(4 int64_list values, expected 39|"
                                                "12 int64_list values in 'ids', expected 117|"
                                                "has 4 id:value pairs, field_size is 39)"
                                    % re.escape(os.path.basename(path))):
            data_format.check_first_record(path, schema.FIELD_SIZE)

    def test_libsvm_garbage(self):
        path = os.path.join(self.dir, "bad.libsvm")
        with open(path, "w") as f:
            f.write("label,I1,I2\n")
        with self.assertRaisesRegex(ValueError, "bad.libsvm:1: bad LibSVM line .*: label,I1,I2"):
            formats.LIBSVM.check_first_record(path, FIELDS)

    def test_tfrecord_missing_feature(self):
        path = os.path.join(self.dir, "other.tfrecord")
        example = tf.train.Example(features=tf.train.Features(feature={
            "y": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))}))
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(example.SerializeToString())
        with self.assertRaisesRegex(ValueError, "other.tfrecord: the first record has no feature 'label' "
                                                "\\(it has \\['y'\\]\\)"):
            formats.TFRECORD.check_first_record(path, FIELDS)

    def test_tfrecord_not_an_example(self):
        path = os.path.join(self.dir, "text.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(b"\xff\xff not a protobuf")
        with self.assertRaisesRegex(ValueError, "text.tfrecord: the first record is not a tf.train.Example"):
            formats.TFRECORD.check_first_record(path, FIELDS)
        with self.assertRaisesRegex(ValueError, "text.tfrecord: the first record is not a tf.train.Example"):
            formats.TFRECORD.has_labels(path)


class CapabilityTest(FormatTestCase):

    @parameterized.parameters(*EXPECTED_PIPE_SUPPORT)
    def test_pipe_mode_capability(self, name, supported):
        self.assertEqual(formats.get(name).supports_pipe_mode, supported)

    def test_pipe_mode_carries_tfrecord(self):
        formats.TFRECORD.check_pipe_mode()
        self.assertEqual(formats.TFRECORD.pipe_record_format, "TFRecord")
        self.assertIs(config("tfrecord", input_mode=pipeline.INPUT_MODE_PIPE).data_format, formats.TFRECORD)

    def test_pipe_mode_refuses_libsvm(self):
        message = "Pipe mode reads TFRecord or packed TFRecord channels only, got data_format='libsvm'"
        with self.assertRaisesRegex(ValueError, message):
            formats.LIBSVM.check_pipe_mode()
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

    def test_libsvm_suggests_the_tfrecord_twins_or_the_conversion_command(self):
        paths = [os.path.join(self.dir, "part-%d.libsvm" % i) for i in range(2)]
        for path in paths:
            open(path, "w").close()
        text = formats.LIBSVM.suggestion(paths, 39)
        self.assertIn("python -m dataprep.libsvm_to_tfrecord --field_size 39 --input '%s/*.libsvm'"
                      % self.dir, text)
        for path in paths:
            open(path[:-len(".libsvm")] + ".tfrecord", "w").close()
        self.assertIn("pass --data_format tfrecord", formats.LIBSVM.suggestion(paths, 39))
        self.assertNotIn("libsvm_to_tfrecord", formats.LIBSVM.suggestion(paths, 39))

    def test_tfrecord_has_no_suggestion(self):
        self.assertIsNone(formats.TFRECORD.suggestion([self.write(formats.TFRECORD)], FIELDS))


if __name__ == "__main__":
    tf.test.main()
