"""Tests for input_pipeline.decoders: vectorized TFRecord and LibSVM decoding."""

import os
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import decoders, encoders, schema
from tests import paths
from tests.input_pipeline import example_files

FIELDS = example_files.SMALL_FIELD_SIZE
CRITEO_LIBSVM = "criteo_lambdaji_va.libsvm"
CRITEO_ROWS = 64


def parse_lines_in_python(lines):
    """Plain-Python parse of LibSVM lines, independent of the decoder."""
    labels, ids, values = [], [], []
    for line in lines:
        label, *pairs = line.split()
        labels.append(float(label))
        ids.append([int(pair.split(":")[0]) for pair in pairs])
        values.append([float(pair.split(":")[1]) for pair in pairs])
    return np.array(labels, np.float32), np.array(ids, np.int64), np.array(values, np.float32)


class DecoderTestCase(tf.test.TestCase, parameterized.TestCase):

    def assertDecoded(self, decoded, rows):
        features, labels = decoded
        self.assertAllEqual(labels, rows[0])
        self.assertAllEqual(features[schema.FEAT_IDS], rows[1])
        self.assertAllEqual(features[schema.FEAT_VALS], rows[2])
        self.assertEqual(features[schema.FEAT_IDS].dtype, tf.int64)
        self.assertEqual(features[schema.FEAT_VALS].dtype, tf.float32)
        self.assertEqual(labels.dtype, tf.float32)


class DecodeTest(DecoderTestCase):

    def test_tfrecord(self):
        rows = example_files.make_rows(5)
        records = [example_files.serialize(float(label), i, v) for label, i, v in zip(*rows)]
        self.assertDecoded(decoders.decode_tfrecord(tf.constant(records), FIELDS), rows)

    def test_libsvm_equals_tfrecord_of_same_rows(self):
        rows = example_files.make_rows(7, seed=3)
        records = [example_files.serialize(float(label), i, v) for label, i, v in zip(*rows)]
        lines = [example_files.libsvm_line(float(label), i, v) for label, i, v in zip(*rows)]
        from_tfrecord = decoders.decode_tfrecord(tf.constant(records), FIELDS)
        from_libsvm = tf.function(lambda x: decoders.decode_libsvm(x, FIELDS))(tf.constant(lines))
        self.assertDecoded(from_libsvm, rows)
        self.assertDecoded(from_tfrecord, [from_libsvm[1], from_libsvm[0][schema.FEAT_IDS],
                                           from_libsvm[0][schema.FEAT_VALS]])

    def test_real_criteo_lines_equal_tfrecord_decode(self):
        path = os.path.join(paths.CRITEO_DIR, CRITEO_LIBSVM)
        if not os.path.isfile(path):
            self.skipTest("real Criteo LibSVM rows not found at %s (set %s)" % (path, paths.CRITEO_DIR_VARIABLE))
        with open(path) as f:
            lines = [next(f).rstrip("\n") for _ in range(CRITEO_ROWS)]
        rows = parse_lines_in_python(lines)
        records = [example_files.serialize(float(label), i, v) for label, i, v in zip(*rows)]
        from_libsvm = decoders.decode_libsvm(tf.constant(lines), schema.FIELD_SIZE)
        from_tfrecord = decoders.decode_tfrecord(tf.constant(records), schema.FIELD_SIZE)
        self.assertDecoded(from_libsvm, rows)
        self.assertDecoded(from_tfrecord, rows)

    def test_libsvm_number_forms_and_whitespace(self):
        lines = ["+1 3:1e-2 7:-0.5\r", "0\t4:.25   9:2E1 ", "  1 5:3. 6:-4"]
        features, labels = decoders.decode_libsvm(tf.constant(lines), 2)
        self.assertAllEqual(labels, [1, 0, 1])
        self.assertAllEqual(features[schema.FEAT_IDS], [[3, 7], [4, 9], [5, 6]])
        self.assertAllClose(features[schema.FEAT_VALS], [[0.01, -0.5], [0.25, 20.0], [3.0, -4.0]])

    @parameterized.parameters(False, True)
    def test_empty_batch(self, skip_bad_records):
        features, labels = decoders.decode_libsvm(tf.constant([], tf.string), FIELDS,
                                                  skip_bad_records=skip_bad_records)
        self.assertEqual(features[schema.FEAT_IDS].shape, (0, FIELDS))
        self.assertEqual(labels.shape, (0,))

    def test_static_batch_dimension(self):
        decoded = tf.function(lambda x: decoders.decode_libsvm(x, FIELDS)).get_concrete_function(
            tf.TensorSpec([8], tf.string)).structured_outputs
        self.assertEqual(decoded[0][schema.FEAT_IDS].shape.as_list(), [8, FIELDS])
        self.assertEqual(decoded[1].shape.as_list(), [8])


class BadLineTest(DecoderTestCase):

    GOOD = "1 1:0.5 2:1 3:1 4:2"

    @parameterized.named_parameters(
        ("too_few_pairs", "1 1:0.5 2:1 3:1", "it has 3 id:value pairs, field_size is 4"),
        ("too_many_pairs", GOOD + " 5:1", "it has 5 id:value pairs, field_size is 4"),
        ("non_numeric_value", "1 1:0.5 2:abc 3:1 4:2", "it is not `label id:value ...`"),
        ("non_numeric_label", "yes 1:0.5 2:1 3:1 4:2", "it is not `label id:value ...`"),
        ("missing_colon", "1 1:0.5 2 3:1 4:2", "it is not `label id:value ...`"),
        ("float_id", "1 1.5:0.5 2:1 3:1 4:2", "it is not `label id:value ...`"),
        ("empty", "", "it is not `label id:value ...`"),
    )
    def test_error_names_file_and_line(self, bad, reason):
        lines = tf.constant([self.GOOD, self.GOOD, bad, bad])
        decode = tf.function(lambda x: decoders.decode_libsvm(
            x, FIELDS, file_index=tf.constant([1, 1, 1, 0]),
            line_number=tf.constant([5, 6, 7, 3], tf.int64), file_names=["a.libsvm", "b.libsvm"]))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    "b.libsvm:7: bad LibSVM line \\(%s" % reason):
            decode(lines)

    def test_error_without_file_context_names_the_row(self):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    "row 1 of the batch: bad LibSVM line .*: 1 1:x"):
            decoders.decode_libsvm(tf.constant([self.GOOD, "1 1:x"]), FIELDS)

    def test_skip_bad_records_drops_and_warns(self):
        lines = tf.constant([self.GOOD, "0 1:2", "1 1:x 2:1 3:1 4:2", "0 4:1 3:1 2:1 1:1"])
        log = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), "stderr")
        decode = tf.function(lambda x: decoders.decode_libsvm(
            x, FIELDS, file_index=tf.zeros([4], tf.int32), line_number=tf.constant([1, 2, 3, 4], tf.int64),
            file_names=["data.libsvm"], skip_bad_records=True))
        with example_files.captured_stderr(log):
            features, labels = decode(lines)
        self.assertAllEqual(labels, [1, 0])
        self.assertAllEqual(features[schema.FEAT_IDS], [[1, 2, 3, 4], [4, 3, 2, 1]])
        with open(log) as f:
            warning = f.read()
        self.assertIn("WARNING: skipped 2 bad LibSVM line(s) of a batch; the first: data.libsvm:2: "
                      "bad LibSVM line (it has 1 id:value pairs", warning)

    def test_skip_keeps_rows_aligned_after_longer_bad_lines(self):
        lines = tf.constant([self.GOOD + " 5:1 6:1", "\t0  4:1 3:1\t2:1 1:1\r", "1 1:x 2:1 3:1 4:2 5:5",
                             " 1 9:2 8:2 7:2 6:2 "])
        log = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), "stderr")
        with example_files.captured_stderr(log):
            features, labels = decoders.decode_libsvm(lines, FIELDS, skip_bad_records=True)
        self.assertAllEqual(labels, [0, 1])
        self.assertAllEqual(features[schema.FEAT_IDS], [[4, 3, 2, 1], [9, 8, 7, 6]])
        self.assertAllEqual(features[schema.FEAT_VALS], [[1, 1, 1, 1], [2, 2, 2, 2]])
        with open(log) as f:
            self.assertIn("WARNING: skipped 2 bad LibSVM line(s)", f.read())

    def test_skip_without_bad_lines_is_silent(self):
        log = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), "stderr")
        with example_files.captured_stderr(log):
            _, labels = decoders.decode_libsvm(tf.constant([self.GOOD]), FIELDS, skip_bad_records=True)
        self.assertAllEqual(labels, [1])
        with open(log) as f:
            self.assertNotIn("WARNING", f.read())


def _fixed_and_compact(num_rows, field_size=FIELDS, id_width=6, seed=0):
    """The same random rows as fixed-width and as compact LibSVM lines."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, num_rows)
    ids = rng.integers(0, 10 ** id_width, [num_rows, field_size])
    values = np.round(rng.random([num_rows, field_size]) * 9.999999, 6)
    values[0, :3] = [0.0, 1.0, 9.999999]
    fixed = encoders.encode_libsvm_fixed(labels, ids, values, id_width).decode().splitlines()
    compact = encoders.encode_libsvm(labels, ids, values).decode().splitlines()
    return fixed, compact


class FixedWidthTest(DecoderTestCase):
    """Lines of one length decode by byte arithmetic, exactly like the general path."""

    @parameterized.parameters((4, 1), (4, 6), (39, 8), (3, 9))
    def test_fixed_width_equals_general_decode(self, field_size, id_width):
        fixed, compact = _fixed_and_compact(50, field_size, id_width)
        self.assertLen({len(line) for line in fixed}, 1)
        from_fixed = tf.function(lambda x: decoders.decode_libsvm(x, field_size))(tf.constant(fixed))
        from_compact = decoders.decode_libsvm(tf.constant(compact), field_size)
        self.assertDecoded(from_fixed, [from_compact[1], from_compact[0][schema.FEAT_IDS],
                                        from_compact[0][schema.FEAT_VALS]])
        self.assertDecoded(from_fixed, parse_lines_in_python(fixed))

    def test_real_criteo_rows_in_fixed_layout(self):
        path = os.path.join(paths.CRITEO_DIR, CRITEO_LIBSVM)
        if not os.path.isfile(path):
            self.skipTest("real Criteo LibSVM rows not found at %s (set %s)" % (path, paths.CRITEO_DIR_VARIABLE))
        with open(path) as f:
            rows = parse_lines_in_python([next(f).rstrip("\n") for _ in range(CRITEO_ROWS)])
        width = len(str(int(rows[1].max())))
        fixed = encoders.encode_libsvm_fixed(rows[0], rows[1], rows[2].astype(np.float64), width).decode()
        self.assertDecoded(decoders.decode_libsvm(tf.constant(fixed.splitlines()), schema.FIELD_SIZE),
                           parse_lines_in_python(fixed.splitlines()))

    @parameterized.named_parameters(
        ("letter_in_id", lambda line: line[:3] + "x" + line[4:], "it is not `label id:value ...`"),
        ("colon_moved", lambda line: line.replace(":", "0", 1).replace(" ", ":", 2).replace(":", " ", 1),
         "it is not `label id:value ...`"),
    )
    def test_a_broken_fixed_line_is_reported_by_the_general_path(self, breaks, reason):
        fixed, _ = _fixed_and_compact(3)
        lines = [fixed[0], breaks(fixed[1]), fixed[2]]
        self.assertLen({len(line) for line in lines}, 1, "the broken line keeps the length")
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "row 1 of the batch: bad LibSVM line \\(%s"
                                    % reason):
            decoders.decode_libsvm(tf.constant(lines), FIELDS)

    def test_mixed_layouts_in_one_batch(self):
        fixed, compact = _fixed_and_compact(6)
        mixed = fixed[:3] + compact[3:]
        self.assertDecoded(decoders.decode_libsvm(tf.constant(mixed), FIELDS), parse_lines_in_python(mixed))

    def test_skip_bad_records_with_fixed_lines(self):
        fixed, _ = _fixed_and_compact(4)
        lines = fixed[:2] + [fixed[2][:5] + "?" + fixed[2][6:]] + fixed[3:]
        log = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), "stderr")
        with example_files.captured_stderr(log):
            decoded = decoders.decode_libsvm(tf.constant(lines), FIELDS, skip_bad_records=True)
        self.assertDecoded(decoded, parse_lines_in_python(fixed[:2] + fixed[3:]))

    def test_byte_rows_decode_like_lines(self):
        fixed, _ = _fixed_and_compact(20, id_width=9)
        rows = tf.constant(np.frombuffer("".join(line + "\n" for line in fixed).encode(), np.uint8).reshape(20, -1))
        self.assertEqual(decoders.fixed_width_line_bytes(fixed[0].encode() + b"\n", FIELDS), rows.shape[1])
        self.assertDecoded(decoders.decode_libsvm_rows(rows, FIELDS), parse_lines_in_python(fixed))
        with self.assertRaisesRegex(ValueError, "rows of 10 bytes are not fixed-width LibSVM lines of 4 pairs"):
            decoders.decode_libsvm_rows(rows[:, :10], FIELDS)
        broken = tf.concat([rows[:3], tf.tensor_scatter_nd_update(rows[3:4], [[0, 5]], [ord("-")]), rows[4:]], 0)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "row 3 of the batch: bad LibSVM line"):
            decoders.decode_libsvm_rows(broken, FIELDS)

    def test_layout_checks_of_the_writer(self):
        with self.assertRaisesRegex(ValueError, "values in \\[0, 10\\), got -0.5"):
            encoders.encode_libsvm_fixed(np.zeros(1), np.ones([1, 2], np.int64), np.array([[1.0, -0.5]]), 3)
        with self.assertRaisesRegex(ValueError, "id 1000 has more than id_width=3 digits"):
            encoders.encode_libsvm_fixed(np.zeros(1), np.array([[1, 1000]]), np.ones([1, 2]), 3)
        with self.assertRaisesRegex(ValueError, "labels 0 or 1, got 0.5"):
            encoders.encode_libsvm_fixed(np.array([0.5]), np.ones([1, 2], np.int64), np.ones([1, 2]), 3)


if __name__ == "__main__":
    tf.test.main()
