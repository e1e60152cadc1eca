"""Tests for input_pipeline.format_libsvm: lines, their errors, fixed-width reads and the TFRecord suggestion."""

import os

import numpy as np
import tensorflow as tf

from input_pipeline import encoders, formats, schema
from tests.input_pipeline import example_files
from tests.input_pipeline.format_testing import FIELDS, FormatTestCase, config, decoded


class LibSVMTest(FormatTestCase):

    def test_always_has_labels(self):
        self.assertTrue(formats.LIBSVM.has_labels(self.write(formats.LIBSVM)))

    def test_errors_name_file_and_line(self):
        path = example_files.write_libsvm(os.path.join(self.dir, "bad.libsvm"), self.rows,
                                          extra_lines={2: "1 1:0.5 2:oops 3:1 4:1"})
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "%s:3: bad LibSVM line" % path):
            decoded(formats.LIBSVM, [path])

    def test_last_line_without_newline_counts(self):
        path = os.path.join(self.dir, "d.libsvm")
        with open(path, "w") as f:
            f.write("1 1:1\n0 1:2")
        self.assertEqual(formats.LIBSVM.count_rows(path), 2)

    def test_suggests_the_tfrecord_twins_or_the_conversion_command(self):
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


class FirstRecordTest(FormatTestCase):

    def test_reads_first_record(self):
        rows = example_files.make_rows(4)
        path = example_files.write_libsvm(os.path.join(self.dir, "c.libsvm"), rows)
        self.assertEqual(formats.LIBSVM.read_first_record(path),
                         example_files.libsvm_line(float(rows[0][0]), rows[1][0], rows[2][0]))

    def test_empty_file(self):
        path = os.path.join(self.dir, "empty.libsvm")
        open(path, "w").close()
        with self.assertRaisesRegex(ValueError, "empty.libsvm holds no line"):
            formats.LIBSVM.read_first_record(path)

    def test_garbage(self):
        path = os.path.join(self.dir, "bad.libsvm")
        with open(path, "w") as f:
            f.write("label,I1,I2\n")
        with self.assertRaisesRegex(ValueError, "bad.libsvm:1: bad LibSVM line .*: label,I1,I2"):
            formats.LIBSVM.check_first_record(path, FIELDS)


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


if __name__ == "__main__":
    tf.test.main()
