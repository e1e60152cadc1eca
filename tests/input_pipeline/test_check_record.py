"""Tests of input_pipeline.check_record: what the data check records of each file, where, and when it is trusted."""

import json
import os
import threading
import time
from unittest import mock

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

    def test_a_model_directory_record_keeps_the_entries_of_files_another_host_sees(self):
        # Hosts sharing a model directory each hold their own part of one channel path (ShardedByS3Key).
        first_host, second_host = (os.path.join(self.data, "part-%d.tfrecord" % i) for i in range(2))
        write(first_host)
        record = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
        add(record, first_host)
        record.save()
        os.rename(first_host, first_host + ".elsewhere")
        write(second_host)
        record = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
        add(record, second_host)
        record.save()
        with open(self.model_record()) as f:
            self.assertEqual(["part-0.tfrecord", "part-1.tfrecord"], sorted(json.load(f)["files"]))

    def model_record(self, directory=None):
        """The record of the dataset directory `directory` (default: the data's) in the model directory."""
        return os.path.join(self.model_dir, check_record.model_dir_record_name(directory or self.data))

    def assert_recorded_in_the_model_directory_only(self, paths, place=check_record.AUTO, environ=None):
        """A check of `paths` writes the model directory's record, leaves the data as it was, and a second start
        reads none of them."""
        before = sorted(os.listdir(self.data))
        record = check_record.CheckRecord(self.model_dir, place=place, environ=environ)
        for path in paths:
            self.assertTrue(add(record, path))
        self.assertEqual([], record.save(model_dir=False), "a refused check leaves the model directory")
        self.assertEqual([], os.listdir(self.model_dir))
        self.assertEqual([self.model_record()], record.save())
        self.assertEqual(before, sorted(os.listdir(self.data)))
        self.assertEqual([os.path.basename(self.model_record())], os.listdir(self.model_dir))
        with open(self.model_record()) as f:
            saved = json.load(f)
        self.assertEqual(sorted(os.path.relpath(path, self.data) for path in paths), sorted(saved["files"]))
        self.assertEqual(os.path.realpath(self.data), saved["dataset_directory"])
        # The second start of the run on the same model directory: every file found, none to read.
        again = check_record.CheckRecord(self.model_dir, place=place, environ=environ)
        self.assertEqual([FOUND] * len(paths), [again.found(path, OPTIONS) for path in paths])
        # Another model directory has no record of them.
        self.assertIsNone(check_record.CheckRecord(self.create_tempdir().full_path).found(paths[0], OPTIONS))

    def test_a_record_that_cannot_be_written_beside_the_data_goes_to_the_model_directory(self):
        path = write(os.path.join(self.data, "part-0.tfrecord"))
        # What stands where the record would go cannot be replaced by a file (as a read-only file system the
        # directory's permissions do not show).
        os.makedirs(os.path.join(self.data, check_record.RECORD_FILE))
        self.assert_recorded_in_the_model_directory_only([path])
        self.assertIsNone(check_record.CheckRecord().found(path, OPTIONS))

    def test_a_read_only_data_folder_is_never_written(self):
        paths = [write(os.path.join(self.data, "part-%d.tfrecord" % i)) for i in range(2)]
        os.chmod(self.data, 0o555)
        self.addCleanup(os.chmod, self.data, 0o755)
        if os.access(self.data, os.W_OK):
            self.skipTest("this process writes a folder of mode 0o555 (it runs as root): "
                          "test_a_folder_of_another_user_is_never_written, test_the_run_may_ask_for_the_model_"
                          "directory and the SageMaker channel tests cover the rule")
        self.assertRegex(check_record.not_beside(self.data), "may not write it")
        self.assert_recorded_in_the_model_directory_only(paths)

    def test_a_folder_of_another_user_is_never_written(self):
        paths = [write(os.path.join(self.data, "part-%d.tfrecord" % i)) for i in range(2)]
        if os.geteuid() != 0:
            self.skipTest("only root can give a folder to another user: test_a_read_only_data_folder_is_never_"
                          "written covers a folder this process may not write")
        other = os.geteuid() + 1000
        os.chown(self.data, other, -1)
        self.assertTrue(os.access(self.data, os.W_OK))
        self.assertEqual("it belongs to user id %d, and this process runs as user id 0" % other,
                         check_record.not_beside(self.data))
        self.assert_recorded_in_the_model_directory_only(paths)

    def test_the_run_may_ask_for_the_model_directory_and_still_reads_a_record_beside_the_data(self):
        prepared, new = (write(os.path.join(self.data, "part-%d.tfrecord" % i)) for i in range(2))
        # A record beside the data, as a dataset prepared once may carry.
        beside = check_record.CheckRecord()
        add(beside, prepared)
        self.assertEqual([os.path.join(self.data, check_record.RECORD_FILE)], beside.save())
        with open(os.path.join(self.data, check_record.RECORD_FILE), "rb") as f:
            prepared_record = f.read()
        self.assertIsNone(check_record.not_beside(self.data, environ={}))
        self.assertRegex(check_record.not_beside(self.data, check_record.MODEL_DIR, environ={}),
                         "asks for the model directory")
        record = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
        self.assertEqual(FOUND, record.found(prepared, OPTIONS))
        self.assertIsNone(record.found(new, OPTIONS))
        add(record, new)
        self.assertEqual([self.model_record()], record.save())
        with open(os.path.join(self.data, check_record.RECORD_FILE), "rb") as f:
            self.assertEqual(prepared_record, f.read(), "the record beside the data is not written")
        again = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
        self.assertEqual([FOUND, FOUND], [again.found(path, OPTIONS) for path in (prepared, new)])
        # Never required: without the record beside the data, the model directory's still holds its files.
        os.remove(os.path.join(self.data, check_record.RECORD_FILE))
        self.assertEqual(FOUND, check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR).found(
            new, OPTIONS))
        with self.assertRaisesRegex(ValueError, r"one of auto, model_dir, got 'beside'"):
            check_record.CheckRecord(self.model_dir, place="beside")

    def test_a_channel_under_the_sagemaker_input_directory_is_never_written(self):
        base_dir = self.create_tempdir().full_path
        self.data = os.path.join(base_dir, "input", "data", "train")
        os.makedirs(self.data)
        paths = [write(os.path.join(self.data, "part-%d.tfrecord" % i)) for i in range(2)]
        environ = {"SAGEMAKER_BASE_DIR": base_dir}
        self.assertRegex(check_record.not_beside(self.data, environ=environ), "SageMaker input channels")
        self.assertIsNone(check_record.not_beside(self.data, environ={}))
        self.assert_recorded_in_the_model_directory_only(paths, environ=environ)

    def test_a_channel_named_by_an_sm_channel_variable_is_never_written(self):
        os.makedirs(os.path.join(self.data, schema.TRAIN_SPLIT))
        schema.DatasetMetadata(feature_size=1000, field_size=4).write(self.data)
        paths = [write(os.path.join(self.data, schema.TRAIN_SPLIT, "part-%05d.tfrecord" % i)) for i in range(2)]
        # The process's own environment, as a SageMaker container sets it.
        with mock.patch.dict(os.environ, {"SM_CHANNEL_TRAINING": self.data}):
            self.assertRegex(check_record.not_beside(self.data), "SageMaker input channels' directory %s" % self.data)
            self.assert_recorded_in_the_model_directory_only(paths)
        with open(self.model_record()) as f:
            self.assertEqual(["train/part-00000.tfrecord", "train/part-00001.tfrecord"], sorted(json.load(f)["files"]))

    def test_datasets_share_a_model_directory_each_with_its_own_record(self):
        other = self.create_tempdir().full_path
        paths = [write(os.path.join(directory, "part-0.tfrecord")) for directory in (self.data, other)]
        record = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
        for path in paths:
            add(record, path)
        self.assertEqual(sorted([self.model_record(), self.model_record(other)]), sorted(record.save()))
        self.assertNotEqual(self.model_record(), self.model_record(other))
        # The same dataset through a link: the same record.
        link = os.path.join(self.create_tempdir().full_path, "link")
        os.symlink(self.data, link)
        self.assertEqual(self.model_record(), self.model_record(link))
        again = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
        self.assertEqual([FOUND, FOUND, FOUND], [again.found(path, OPTIONS) for path in
                                                 paths + [os.path.join(link, "part-0.tfrecord")]])

    def test_ranks_writing_one_model_directory_record_at_the_same_time_keep_each_others_entries(self):
        paths = [write(os.path.join(self.data, "part-%d.tfrecord" % i)) for i in range(12)]
        start = threading.Barrier(len(paths))

        def check(path):
            record = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
            add(record, path)
            start.wait()
            record.save()

        threads = [threading.Thread(target=check, args=(path,)) for path in paths]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        record = check_record.CheckRecord(self.model_dir, place=check_record.MODEL_DIR)
        self.assertEqual([FOUND] * len(paths), [record.found(path, OPTIONS) for path in paths])
        self.assertEqual([os.path.basename(self.model_record())], os.listdir(self.model_dir))
        self.assertEqual(sorted(os.path.basename(path) for path in paths), sorted(os.listdir(self.data)))

if __name__ == "__main__":
    tf.test.main()
