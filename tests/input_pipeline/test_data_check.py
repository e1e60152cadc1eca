"""Tests of input_pipeline.data_check: every row of the input read once, each problem named in one line."""

import os
import re
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from input_pipeline import check_record, data_check, formats, pipeline, schema
from tests.input_pipeline import example_files

FIELDS = example_files.SMALL_FIELD_SIZE
FEATURE_SIZE = example_files.MAX_ID
ROWS = 40
FORMATS = (("tfrecord", formats.TFRECORD), ("packed", formats.TFRECORD_PACKED), ("libsvm", formats.LIBSVM))


def rows(seed=0, num=ROWS):
    labels, ids, values = example_files.make_rows(num, FIELDS, seed=seed)
    return (labels % 2).astype(np.float32), ids, values


def config(data_format):
    return pipeline.PipelineConfig(data_format=data_format, field_size=FIELDS)


class DataCheckTest(tf.test.TestCase, parameterized.TestCase):

    def three_files(self, data_format, middle=None):
        """Three files of the format; the middle one holds `middle` rows where given."""
        directory = self.create_tempdir().full_path
        return [example_files.write_rows(os.path.join(directory, "part-%d" % i),
                                         middle if i == 1 and middle is not None else rows(seed=i), data_format)
                for i in range(3)]

    @parameterized.named_parameters(*FORMATS)
    def test_good_files_are_summarized(self, data_format):
        paths = self.three_files(data_format)
        summary = data_check.check_files(paths, config(data_format), FEATURE_SIZE)
        self.assertEqual(3 * ROWS, summary.rows)
        expected_ids = np.concatenate([rows(seed=i)[1] for i in range(3)])
        self.assertEqual((expected_ids.min(), expected_ids.max()), (summary.min_id, summary.max_id))
        self.assertEqual((0, 0), (summary.bad_values, summary.bad_labels))

    @parameterized.named_parameters(*FORMATS)
    def test_one_pipeline_finds_in_each_file_what_a_pass_of_its_own_finds(self, data_format):
        directory = self.create_tempdir().full_path
        paths = [example_files.write_rows(os.path.join(directory, "part-%d" % i), rows(seed=i, num=ROWS + 7 * i),
                                          data_format) for i in range(4)]
        found = dict(data_check.summaries(paths, config(data_format), workers=2))
        self.assertEqual({i: data_check.summarize([path], config(data_format)) for i, path in enumerate(paths)},
                         found)
        self.assertEqual([ROWS, ROWS + 7, ROWS + 14, ROWS + 21], [found[i].rows for i in range(4)])

    @parameterized.named_parameters(*FORMATS)
    def test_a_truncated_file_in_the_middle_is_named(self, data_format):
        paths = self.three_files(data_format)
        with open(paths[1], "r+b") as f:
            f.truncate(os.path.getsize(paths[1]) - 7)
        message = self.refused(paths, data_format)
        self.assertIn(paths[1], message)
        self.assertNotIn(paths[0], message)

    @parameterized.named_parameters(("tfrecord", formats.TFRECORD), ("packed", formats.TFRECORD_PACKED))
    def test_a_corrupt_record_in_the_middle_is_named(self, data_format):
        paths = self.three_files(data_format)
        with open(paths[1], "r+b") as f:
            f.seek(os.path.getsize(paths[1]) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        message = self.refused(paths, data_format)
        self.assertRegex(message, r"^training data: TFRecord file %s could not be read to its end: read \d+ of %d "
                         r"bytes" % (paths[1], os.path.getsize(paths[1])))

    def test_a_corrupt_libsvm_line_is_named_by_file_and_line(self):
        paths = self.three_files(formats.LIBSVM)
        with open(paths[1]) as f:
            lines = f.read().splitlines()
        lines[9] = lines[9].replace(":", ";", 1)
        with open(paths[1], "w") as f:
            f.write("\n".join(lines) + "\n")
        self.assertIn("%s:10" % paths[1], self.refused(paths, formats.LIBSVM))

    @parameterized.named_parameters(*FORMATS)
    def test_a_row_with_another_number_of_fields_is_named(self, data_format):
        labels, ids, values = rows(seed=1)
        paths = self.three_files(data_format)
        # Row 5 of the middle file has one field less.
        if data_format == formats.LIBSVM:
            extra = {5: example_files.libsvm_line(1.0, ids[0][:-1], values[0][:-1])}
            example_files.write_libsvm(paths[1], (labels[:-1], ids[:-1], values[:-1]), extra_lines=extra)
            expected = "%s:6" % paths[1]
        else:
            records = [example_files.serialize(float(label), i, v) for label, i, v in zip(labels, ids, values)]
            if data_format.packed:
                records = [example_files.serialize_packed(labels[s:s + 3], ids[s:s + 3], values[s:s + 3])
                           for s in range(0, ROWS, 3)]
                records[2] = example_files.serialize_packed(labels[6:9], ids[6:9], values[6:9, :-1])
                expected = ("training data: a packed TFRecord record of %s holds 3 row(s) (labels) with 12 ids and "
                            "9 values" % paths[1])
            else:
                records[5] = example_files.serialize(1.0, ids[5][:-1], values[5][:-1])
                expected = "training file %s, record 5: feature 'ids' holds 3 values, expected 4" % paths[1]
            with tf.io.TFRecordWriter(paths[1]) as writer:
                for record in records:
                    writer.write(record)
        message = self.refused(paths, data_format)
        self.assertIn(expected, message)

    @parameterized.named_parameters(
        ("tfrecord_nan_value", formats.TFRECORD, "value", np.nan),
        ("packed_infinite_label", formats.TFRECORD_PACKED, "label", -np.inf),
        ("libsvm_infinite_value", formats.LIBSVM, "value", np.inf))
    def test_nan_and_infinite_values_and_labels_are_named(self, data_format, kind, bad):
        labels, ids, values = rows(seed=1)
        if kind == "value":
            values[7, 2] = bad
            expected = "value %r of field 2" % float(bad)
        else:
            labels[7] = bad
            expected = "label %r" % float(bad)
        paths = self.three_files(data_format, middle=(labels, ids, values))
        if data_format == formats.LIBSVM:
            # LibSVM has no `inf` (a bad line): a number too large for float32 is one.
            with open(paths[1]) as f:
                text = f.read().replace(" %d:inf " % ids[7, 2], " %d:1e39 " % ids[7, 2], 1)
            with open(paths[1], "w") as f:
                f.write(text)
        where = "line 8" if data_format == formats.LIBSVM else "row 7" if data_format.packed else "record 7"
        self.assertIn("training file %s, %s: %s" % (paths[1], where, expected), self.refused(paths, data_format))

    def test_nan_and_inf_are_no_libsvm_numbers(self):
        labels, ids, values = rows(seed=1)
        labels[7] = np.nan
        paths = self.three_files(formats.LIBSVM, middle=(labels, ids, values))
        self.assertIn("%s:8: bad LibSVM line" % paths[1], self.refused(paths, formats.LIBSVM))

    @parameterized.named_parameters(
        ("tfrecord_negative", formats.TFRECORD, -3),
        ("packed_feature_size", formats.TFRECORD_PACKED, FEATURE_SIZE),
        ("libsvm_above", formats.LIBSVM, FEATURE_SIZE + 5))
    def test_ids_out_of_range_are_named(self, data_format, bad):
        labels, ids, values = rows(seed=1)
        ids[11, 1] = bad
        paths = self.three_files(data_format, middle=(labels, ids, values))
        where = "line 12" if data_format == formats.LIBSVM else "row 11" if data_format.packed else "record 11"
        self.assertIn("training file %s, %s: feature id %d of field 1 is out of range [0, feature_size=%d)"
                      % (paths[1], where, bad, FEATURE_SIZE), self.refused(paths, data_format))

    def test_a_negative_id_in_libsvm_is_a_bad_line(self):
        labels, ids, values = rows(seed=1)
        ids[11, 1] = -3
        paths = self.three_files(formats.LIBSVM, middle=(labels, ids, values))
        self.assertIn("%s:12" % paths[1], self.refused(paths, formats.LIBSVM))

    def test_metadata_that_disagrees_with_its_files_is_named(self):
        root = self.create_tempdir().full_path
        example_files.write_dataset_root(root, {"train": [rows(seed=0), rows(seed=1)]})
        train = [os.path.join(root, "train", schema.shard_stem(i) + ".tfrecord") for i in range(2)]
        data_check.check_files(train, config(formats.TFRECORD), FEATURE_SIZE)
        # A shard rewritten with fewer rows than the metadata says.
        example_files.write_tfrecord(train[1], rows(seed=1, num=ROWS - 3))
        message = self.refused(train, formats.TFRECORD)
        self.assertIn("training file %s holds %d rows, %s says %d" % (
            train[1], ROWS - 3, os.path.join(root, schema.METADATA_FILE), ROWS), message)
        # A file the metadata does not list is counted, as files outside a dataset are.
        stray = os.path.join(root, "train", "part-00099.tfrecord")
        shutil.copy(train[0], stray)
        self.assertEqual(ROWS, data_check.check_files([stray], config(formats.TFRECORD), FEATURE_SIZE).rows)

    def refused(self, paths, data_format):
        with self.assertRaises(data_check.DataCheckError) as raised:
            data_check.check_files(paths, config(data_format), FEATURE_SIZE)
        message = str(raised.exception)
        self.assertNotIn("\n", message)
        return message


class CheckedOnceTest(tf.test.TestCase):
    """A dataset read whole once: its record spares the files unchanged since (`input_pipeline.check_record`).

    The dataset is written, and checked once, for the class; each test has a copy with the files' sizes and
    mtimes (what a record matches), without the record, or with the one that first check wrote
    (`checked_before`: what a test's own first check would write, without its reading).
    """

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.source = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        example_files.write_dataset_root(cls.source, {"train": [rows(seed=i) for i in range(3)]})
        # Written an hour ago: files modified just before their check are not recorded.
        cls.old_ns = time.time_ns() - 3600 * 10**9
        paths = [os.path.join(cls.source, "train", schema.shard_stem(i) + ".tfrecord") for i in range(3)]
        for path in paths:
            os.utime(path, ns=(cls.old_ns, cls.old_ns))
        record = check_record.CheckRecord()
        cls.first_summary = data_check.check_files(paths, config(formats.TFRECORD), FEATURE_SIZE, record=record)
        record.save()
        # Kept outside the dataset: a test's copy has no record unless it asks for this one.
        cls.first_record = cls.source + check_record.RECORD_FILE
        os.replace(os.path.join(cls.source, check_record.RECORD_FILE), cls.first_record)

    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.create_tempdir().full_path, "data")
        shutil.copytree(self.source, self.root)  # copy2: each file's size and mtime kept
        self.paths = [os.path.join(self.root, "train", schema.shard_stem(i) + ".tfrecord") for i in range(3)]

    def checked_before(self):
        """The record of the dataset's first check (every file read), as `check` would have written it; its summary."""
        shutil.copy(self.first_record, os.path.join(self.root, check_record.RECORD_FILE))
        return self.first_summary

    def check(self, feature_size=FEATURE_SIZE, data_format=formats.TFRECORD, **options):
        """`check_files` with a record read afresh and saved; returns the summary and the files read and spared."""
        record = check_record.CheckRecord()
        with self.assertLogs(level="INFO") as logs:
            summary = data_check.check_files(self.paths, pipeline.PipelineConfig(
                data_format=data_format, field_size=FIELDS, **options), feature_size, record=record)
            record.save()
        self.logged = logs.output
        return summary, self.read_and_spared(logs)

    def refused(self, feature_size=FEATURE_SIZE):
        """The message of a check that refuses the files, and the files it read and spared."""
        record = check_record.CheckRecord()
        with self.assertLogs(level="INFO") as logs, self.assertRaises(data_check.DataCheckError) as raised:
            data_check.check_files(self.paths, config(formats.TFRECORD), feature_size, record=record)
        record.save(model_dir=False)
        return str(raised.exception), self.read_and_spared(logs)

    @staticmethod
    def read_and_spared(logs):
        ends = [re.search(r"(\d+) read, (\d+) already checked", line) for line in logs.output]
        return [tuple(int(n) for n in end.groups()) for end in ends if end][-1]

    def damage_keeping_size_and_mtime(self, path):
        """A byte of a record flipped; the file's size and mtime as they were."""
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        os.utime(path, ns=(self.old_ns, self.old_ns))

    def test_an_unchanged_dataset_is_read_once(self):
        first, read = self.check()
        self.assertEqual((3, 0), read)
        self.assertEqual(3 * ROWS, first.rows)
        self.assertTrue(os.path.isfile(os.path.join(self.root, check_record.RECORD_FILE)))
        # Damage the record cannot see (same size, same mtime): the second check reads no row, and says so.
        self.damage_keeping_size_and_mtime(self.paths[1])
        second, read = self.check()
        self.assertEqual((0, 3), read)
        self.assertEqual(first, second)
        # The mtime changed: that file alone is read again, and the damage found.
        os.utime(self.paths[1], ns=(self.old_ns, self.old_ns + 1))
        message, read = self.refused()
        self.assertRegex(message, r"^training data: TFRecord file %s could not be read to its end" % self.paths[1])
        self.assertEqual((1, 2), read)

    def test_a_changed_size_is_read_again(self):
        self.checked_before()
        with open(self.paths[2], "r+b") as f:
            f.truncate(os.path.getsize(self.paths[2]) - 7)
        os.utime(self.paths[2], ns=(self.old_ns, self.old_ns))
        message, read = self.refused()
        self.assertIn(self.paths[2], message)
        self.assertEqual((1, 2), read)

    def test_a_changed_file_is_read_again_and_recorded(self):
        self.checked_before()
        example_files.write_tfrecord(self.paths[0], rows(seed=7))
        os.utime(self.paths[0], ns=(self.old_ns + 5, self.old_ns + 5))
        self.assertEqual((1, 2), self.check()[1])
        self.assertEqual((0, 3), self.check()[1])

    def test_files_read_with_other_options_are_read_again(self):
        self.checked_before()
        self.assertEqual((3, 0), self.check(max_corrupted_records=1)[1])
        self.assertEqual((0, 3), self.check(max_corrupted_records=1)[1])
        # A file has one entry: the options it was read with last.
        self.assertEqual((3, 0), self.check()[1])

    def test_a_corrupt_record_is_ignored(self):
        self.checked_before()
        with open(os.path.join(self.root, check_record.RECORD_FILE), "w") as f:
            f.write('{"version": 1, "files": {"train/part-00000.tfr')
        summary, read = self.check()
        self.assertEqual((3, 0), read)
        self.assertEqual(3 * ROWS, summary.rows)
        self.assertTrue(any(line.startswith("WARNING") and "ignoring the data check's record" in line
                            for line in self.logged), self.logged)
        self.assertEqual((0, 3), self.check()[1])

    def test_another_feature_size_is_judged_again(self):
        summary = self.checked_before()
        # Larger: judged from the record, no row read.
        larger, read = self.check(feature_size=FEATURE_SIZE * 2)
        self.assertEqual((summary, (0, 3)), (larger, read))
        # Smaller than an id the files hold: the file is read again to name the row.
        message, read = self.refused(feature_size=summary.max_id)
        self.assertRegex(message, r"^training file .*, record \d+: feature id %d of field \d is out of range "
                         r"\[0, feature_size=%d\)" % (summary.max_id, summary.max_id))
        self.assertEqual((0, 3), read)

    def test_a_changed_metadata_is_judged_again_without_reading(self):
        self.checked_before()
        metadata = schema.DatasetMetadata.read(self.root)
        metadata.splits["train"].shards["train/" + schema.shard_stem(1)] = ROWS + 1
        metadata.write(self.root)
        message, read = self.refused()
        self.assertIn("training file %s holds %d rows, %s says %d" % (
            self.paths[1], ROWS, os.path.join(self.root, schema.METADATA_FILE), ROWS + 1), message)
        self.assertEqual((0, 3), read)

    def test_a_sagemaker_channel_is_read_once_and_never_written(self):
        model_dir = self.create_tempdir().full_path
        channel = {"SM_CHANNEL_TRAINING": self.root}

        def snapshot():
            """Every path under the channel with its size and mtime, the directories' too."""
            found = {}
            for directory, _, names in os.walk(self.root):
                for path in [directory] + [os.path.join(directory, name) for name in names]:
                    stat = os.stat(path)
                    found[os.path.relpath(path, self.root)] = (stat.st_size, stat.st_mtime_ns)
            return found

        before = snapshot()
        # A start, then its restart on the same model directory: the second reads no row.
        for expected in ((3, 0), (0, 3)):
            record = check_record.CheckRecord(model_dir, environ=channel)
            with self.assertLogs(level="INFO") as logs:
                data_check.check_files(self.paths, config(formats.TFRECORD), FEATURE_SIZE, record=record)
                record.save()
            self.assertEqual(expected, self.read_and_spared(logs))
        self.assertEqual(before, snapshot())
        self.assertEqual([check_record.model_dir_record_name(self.root)], os.listdir(model_dir))

    def test_files_are_read_in_parallel_with_the_same_findings(self):
        one = data_check.check_files(self.paths, config(formats.TFRECORD), FEATURE_SIZE, workers=1)
        several = data_check.check_files(self.paths, config(formats.TFRECORD), FEATURE_SIZE, workers=3)
        self.assertEqual(one, several)
        self.assertEqual(one, data_check.summarize(self.paths, config(formats.TFRECORD)))


if __name__ == "__main__":
    tf.test.main()
