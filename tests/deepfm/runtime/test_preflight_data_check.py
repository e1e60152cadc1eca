"""Tests of `deepfm.runtime.preflight.check_data` through `python -m deepfm.train`: the data is read whole once.

A run reads every training and validation file before its first step and
records them beside the data (`input_pipeline.check_record`); a restart of
the same model directory, and a new run on the same data, read none of them
again; a changed file is read again, and its damage refused. Data in
SageMaker channels, or a run that asks for it, is recorded in the model
directory instead: the data is never written, and a restart reads no row.
"""

import os
import re
import time

import tensorflow as tf

from dataprep import synthetic
from input_pipeline import check_record, schema
from tests import command_line

ROWS = 2_000
SHARDS = 2
FEATURE_SIZE = 500
BATCH = 64
STEPS = 4
# The line a check ends with (`input_pipeline.data_check`), one per role.
CHECK_END = re.compile(r"data check: (\d+) (training|validation) file\(s\), [\d,]+ rows in [\d.]+ s: (\d+) read, "
                       r"(\d+) already checked")


class CheckedOnceTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.work = self.create_tempdir().full_path
        self.data = os.path.join(self.work, "data")
        synthetic.generate(ROWS, self.data, feature_size=FEATURE_SIZE, seed=3, shards=SHARDS)
        # Written an hour ago: a file modified just before its check is not recorded (check_record.RACY_WINDOW_NS).
        old = time.time_ns() - 3600 * 10**9
        for split in schema.SPLITS:
            for name in os.listdir(os.path.join(self.data, split)):
                os.utime(os.path.join(self.data, split, name), ns=(old, old))

    def train(self, model_dir, max_steps, *flags, env=None):
        """`python -m deepfm.train` with INFO logs; returns the process and {role: (files, read, already checked)}."""
        proc = command_line.run(command_line.python_module(
            "deepfm.train", "--train_data", "data", "--model_dir", model_dir, "--batch_size", str(BATCH),
            "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0", "--max_steps", str(max_steps),
            "--verbosity", "0", *flags), cwd=self.work, env=env, timeout=300)
        checks = {m.group(2): (int(m.group(1)), int(m.group(3)), int(m.group(4)))
                  for m in CHECK_END.finditer(proc.stderr)}
        return proc, checks

    def test_a_restart_and_a_new_run_read_no_row_and_a_changed_file_is_read_again(self):
        proc, checks = self.train("model", STEPS)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.assertEqual({"training": (SHARDS, SHARDS, 0), "validation": (SHARDS, SHARDS, 0)}, checks)
        for split in schema.SPLITS:
            self.assertTrue(os.path.isfile(os.path.join(self.data, split, check_record.RECORD_FILE)))
        # The restart of the model directory: every file already checked.
        proc, checks = self.train("model", 2 * STEPS)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.assertEqual({"training": (SHARDS, 0, SHARDS), "validation": (SHARDS, 0, SHARDS)}, checks)
        self.assertRegex(proc.stdout + proc.stderr, r"resuming from the checkpoint in model at global step %d" % STEPS)
        # A shard cut short: that one is read again, the run refused, and the model directory not written.
        shard = os.path.join(self.data, schema.TRAIN_SPLIT, "part-00001.tfrecord")
        with open(shard, "rb") as f:
            content = f.read()
        os.truncate(shard, len(content) - 100)
        model_files = sorted(os.listdir(os.path.join(self.work, "model")))
        proc, checks = self.train("model", 3 * STEPS)
        self.assertNotEqual(0, proc.returncode)
        self.assertIn("training data: TFRecord file %s could not be read to its end" % shard, proc.stderr)
        self.assertEqual((SHARDS, 1, 1), checks["training"])
        self.assertEqual(model_files, sorted(os.listdir(os.path.join(self.work, "model"))))
        # The shard written again (another mtime): a new model directory reads it alone, then no file.
        with open(shard, "wb") as f:
            f.write(content)
        old = time.time_ns() - 1800 * 10**9
        os.utime(shard, ns=(old, old))
        proc, checks = self.train("other", STEPS)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.assertEqual((SHARDS, 1, SHARDS - 1), checks["training"])
        proc, checks = self.train("third", STEPS)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.assertEqual({"training": (SHARDS, 0, SHARDS), "validation": (SHARDS, 0, SHARDS)}, checks)


    def data_listing(self):
        """Every file of the data with its size and mtime, and each directory's mtime."""
        found = {}
        for directory, _, names in os.walk(self.data):
            for path in [directory] + [os.path.join(directory, name) for name in names]:
                found[path] = (os.stat(path).st_size, os.stat(path).st_mtime_ns)
        return found

    def model_dir_records(self, model_dir):
        """The records of the data's splits in `model_dir`, as `check_record` names them."""
        return sorted(check_record.model_dir_record_name(os.path.join(self.data, split)) for split in schema.SPLITS)

    def test_sagemaker_channels_are_never_written_and_a_restart_reads_no_row(self):
        # The splits as a SageMaker container names its File-mode channels.
        channels = {"SM_CHANNEL_TRAIN": os.path.join(self.data, schema.TRAIN_SPLIT),
                    "SM_CHANNEL_VALIDATION": os.path.join(self.data, schema.VALIDATION_SPLIT)}
        before = self.data_listing()
        proc, checks = self.train("model", STEPS, env=channels)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.assertEqual({"training": (SHARDS, SHARDS, 0), "validation": (SHARDS, SHARDS, 0)}, checks)
        self.assertEqual(before, self.data_listing())
        model_dir = os.path.join(self.work, "model")
        self.assertEqual(self.model_dir_records(model_dir),
                         sorted(name for name in os.listdir(model_dir) if name.startswith("data_check")))
        # The restart of the job on the same model directory.
        proc, checks = self.train("model", 2 * STEPS, env=channels)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.assertEqual({"training": (SHARDS, 0, SHARDS), "validation": (SHARDS, 0, SHARDS)}, checks)
        # Outside SageMaker, asked for by the flag: the same, in the new model directory.
        proc, checks = self.train("other", STEPS, "--data_check_record", "model_dir")
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        self.assertEqual({"training": (SHARDS, SHARDS, 0), "validation": (SHARDS, SHARDS, 0)}, checks)
        self.assertEqual(before, self.data_listing())
        other = os.path.join(self.work, "other")
        self.assertEqual(self.model_dir_records(other),
                         sorted(name for name in os.listdir(other) if name.startswith("data_check")))


if __name__ == "__main__":
    tf.test.main()
