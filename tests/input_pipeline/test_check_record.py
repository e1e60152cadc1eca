"""Tests of input_pipeline.check_record: what the data check records of each file, where, and when it is trusted."""

import json
import os
import threading
import time

import tensorflow as tf

from input_pipeline import check_record, schema

OPTIONS = {"format": "tfrecord", "field_size": 4, "skip_bad_records": False, "max_corrupted_records": 0}
FOUND = {"rows": 40, "min_id": 1, "max_id": 999, "bad_values": 0, "bad_labels": 0}
HOUR_NS = 3600 * 10**9


def write(path, text="rows"):
    """A file written an hour ago (older than the record's racy window)."""
    with open(path, "w") as f:
        f.write(text)
    old = time.time_ns() - HOUR_NS
    os.utime(path, ns=(old, old))
    return path


def add(record, path):
    """`record.add` of `path` as a check that just read it."""
    return record.add(path, check_record.FileState.of(path), OPTIONS, FOUND, time.time_ns())


class CheckRecordTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.data = self.create_tempdir().full_path
        self.model_dir = self.create_tempdir().full_path

    def test_a_file_is_recorded_beside_its_data_and_found_while_unchanged(self):
        path = write(os.path.join(self.data, "part-0.tfrecord"))
        record = check_record.CheckRecord(self.model_dir)
        self.assertTrue(add(record, path))
        self.assertEqual([os.path.join(self.data, check_record.RECORD_FILE)], record.save())
        self.assertEqual([], os.listdir(self.model_dir))
        with open(os.path.join(self.data, check_record.RECORD_FILE)) as f:
            saved = json.load(f)
        self.assertEqual(check_record.VERSION, saved["version"])
        entry = saved["files"]["part-0.tfrecord"]
        self.assertEqual((os.path.getsize(path), os.stat(path).st_mtime_ns, FOUND, OPTIONS),
                         (entry["size"], entry["mtime_ns"], entry["found"], entry["options"]))
        self.assertEqual(FOUND, check_record.CheckRecord().found(path, OPTIONS))
        # Other options, another mtime, another size: read again.
        self.assertIsNone(check_record.CheckRecord().found(path, dict(OPTIONS, field_size=5)))
        stat = os.stat(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
        self.assertIsNone(check_record.CheckRecord().found(path, OPTIONS))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        self.assertEqual(FOUND, check_record.CheckRecord().found(path, OPTIONS))
        with open(path, "a") as f:
            f.write("more")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        self.assertIsNone(check_record.CheckRecord().found(path, OPTIONS))

    def test_a_dataset_records_its_files_relative_to_the_directory_of_its_metadata(self):
        os.makedirs(os.path.join(self.data, schema.TRAIN_SPLIT))
        schema.DatasetMetadata(feature_size=1000, field_size=4).write(self.data)
        path = write(os.path.join(self.data, schema.TRAIN_SPLIT, "part-00000.tfrecord"))
        record = check_record.CheckRecord()
        add(record, path)
        record.save()
        with open(os.path.join(self.data, check_record.RECORD_FILE)) as f:
            self.assertEqual(["train/part-00000.tfrecord"], list(json.load(f)["files"]))
        # A copy of the dataset that keeps the times keeps its record.
        copy = os.path.join(self.create_tempdir().full_path, "copy")
        os.makedirs(os.path.join(copy, schema.TRAIN_SPLIT))
        for name in (schema.METADATA_FILE, check_record.RECORD_FILE, os.path.join("train", "part-00000.tfrecord")):
            os.link(os.path.join(self.data, name), os.path.join(copy, name))
        self.assertEqual(FOUND, check_record.CheckRecord().found(
            os.path.join(copy, schema.TRAIN_SPLIT, "part-00000.tfrecord"), OPTIONS))

    def test_a_file_modified_just_before_its_check_is_not_recorded(self):
        path = os.path.join(self.data, "part-0.tfrecord")
        with open(path, "w") as f:
            f.write("rows")
        record = check_record.CheckRecord()
        self.assertFalse(add(record, path))
        self.assertEqual([], record.save())
        self.assertFalse(os.path.exists(os.path.join(self.data, check_record.RECORD_FILE)))

    def test_an_unreadable_record_or_one_of_another_version_is_ignored(self):
        path = write(os.path.join(self.data, "part-0.tfrecord"))
        record_path = os.path.join(self.data, check_record.RECORD_FILE)
        record = check_record.CheckRecord()
        add(record, path)
        record.save()
        with open(record_path) as f:
            good = json.load(f)
        entry = good["files"]["part-0.tfrecord"]
        for broken in ("{not json", json.dumps(dict(good, version=check_record.VERSION + 1)), "[]",
                       json.dumps(dict(good, files={"part-0.tfrecord": dict(entry, found={"rows": 40})})),
                       json.dumps(dict(good, files={"part-0.tfrecord": dict(entry, size="40")}))):
            with open(record_path, "w") as f:
                f.write(broken)
            self.assertIsNone(check_record.CheckRecord().found(path, OPTIONS), broken)
            # The next save writes a good record over it.
            again = check_record.CheckRecord()
            add(again, path)
            again.save()
            self.assertEqual(FOUND, check_record.CheckRecord().found(path, OPTIONS), broken)

    def test_writers_at_the_same_time_keep_each_others_entries(self):
        paths = [write(os.path.join(self.data, "part-%d.tfrecord" % i)) for i in range(12)]
        start = threading.Barrier(len(paths))

        def check(path):
            record = check_record.CheckRecord()
            add(record, path)
            start.wait()
            record.save()

        threads = [threading.Thread(target=check, args=(path,)) for path in paths]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        record = check_record.CheckRecord()
        self.assertEqual([FOUND] * len(paths), [record.found(path, OPTIONS) for path in paths])
        self.assertEqual([check_record.RECORD_FILE], [n for n in os.listdir(self.data) if n.startswith(".")])

    def test_entries_of_removed_files_are_dropped(self):
        kept, removed = (write(os.path.join(self.data, "part-%d.tfrecord" % i)) for i in range(2))
        record = check_record.CheckRecord()
        add(record, removed)
        record.save()
        os.remove(removed)
        record = check_record.CheckRecord()
        add(record, kept)
        record.save()
        with open(os.path.join(self.data, check_record.RECORD_FILE)) as f:
            self.assertEqual(["part-0.tfrecord"], list(json.load(f)["files"]))

    def test_a_record_that_cannot_be_written_beside_the_data_goes_to_the_model_directory(self):
        path = write(os.path.join(self.data, "part-0.tfrecord"))
        # What stands where the record would go cannot be replaced by a file (as a read-only directory,
        # which a root user could still write).
        os.makedirs(os.path.join(self.data, check_record.RECORD_FILE))
        record = check_record.CheckRecord(self.model_dir)
        add(record, path)
        self.assertEqual([], record.save(model_dir=False), "a refused check leaves the model directory")
        self.assertEqual([], os.listdir(self.model_dir))
        model_record = os.path.join(self.model_dir, check_record.MODEL_DIR_RECORD_FILE)
        self.assertEqual([model_record], record.save())
        with open(model_record) as f:
            self.assertEqual([path], list(json.load(f)["files"]))
        self.assertEqual(FOUND, check_record.CheckRecord(self.model_dir).found(path, OPTIONS))
        self.assertIsNone(check_record.CheckRecord().found(path, OPTIONS))
        self.assertEqual([check_record.RECORD_FILE, "part-0.tfrecord"], sorted(os.listdir(self.data)))


if __name__ == "__main__":
    tf.test.main()
