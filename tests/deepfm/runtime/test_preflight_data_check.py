"""Tests of `deepfm.runtime.preflight.check_data` in training runs: the data is read whole once.

A run reads every training and validation file before its first step and
records them beside the data (`input_pipeline.check_record`); a restart of
the same model directory, and a new run on the same data, read none of them
again; a changed file is read again, and its damage refused. Data in
SageMaker channels, or a run that asks for it, is recorded in the model
directory instead: the data is never written, and a restart reads no row.

The runs are this process's (`trainer.run` on the opened dataset, what
`python -m deepfm.train` runs; the channels' variables set in this process's
environment), each with a record read afresh from disk, as a new process
reads it: a process costs about 4 s of CPU more than the run. The last run
of the first test is `python -m deepfm.train`, started as a user starts it,
on the record the runs before it wrote. The command line's own checks (its
flags, its one-line errors, a data check's refusal) are in
tests/deepfm/test_train.py, tests/deepfm/test_job_config.py and
tests/deepfm/runtime/test_bad_input.py.
"""

import os
import re
import time
from unittest import mock

import tensorflow as tf

import strategies
from dataprep import synthetic
from deepfm import config, job_config
from deepfm.runtime import trainer
from input_pipeline import check_record, pipeline, schema
from input_pipeline import dataset as dataset_lib
from tests import command_line

ROWS = 2_000
SHARDS = 2
FEATURE_SIZE = 500
BATCH = 64
STEPS = 4
# The line a check ends with (`input_pipeline.data_check`), one per role.
CHECK_END = re.compile(r"data check: (\d+) (training|validation) file\(s\), [\d,]+ rows in [\d.]+ s: (\d+) read, "
                       r"(\d+) already checked")


def checks_in(text):
    """{role: (files, read, already checked)} of the data checks logged in `text`."""
    return {m.group(2): (int(m.group(1)), int(m.group(3)), int(m.group(4))) for m in CHECK_END.finditer(text)}


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

    def job(self, model_dir, max_steps, **train_options):
        """The job of `python -m deepfm.train --train_data data --model_dir <model_dir> --nocheck_memory` with
        this test's flags, and the dataset it opened."""
        data = dataset_lib.Dataset.open([self.data])
        # Without the memory check (tests/deepfm/runtime/test_preflight.py): it comes before the data check,
        # writes nothing, and builds the model's graph once more (about 0.5 s of CPU a run).
        train = config.TrainConfig(model_dir=os.path.join(self.work, model_dir), train_files=data.train_files,
                                   val_files=data.val_files, batch_size=BATCH, max_steps=max_steps,
                                   check_memory=False, **train_options)
        model = config.ModelConfig(feature_size=FEATURE_SIZE, embedding_size=4, deep_layers=(8,), dropout=(0.0,))
        return job_config.JobConfig(train=train, model=model, input=pipeline.PipelineConfig(),
                                    strategy=strategies.StrategyConfig()), data

    def train(self, model_dir, max_steps, env=None, **train_options):
        """A run in this process (`env` added to its environment); returns its logs and its data checks."""
        job, data = self.job(model_dir, max_steps, **train_options)
        with mock.patch.dict(os.environ, env or {}), self.assertLogs(level="INFO") as logs:
            trainer.run(job, dataset=data)
        text = "\n".join(logs.output)
        return text, checks_in(text)

    def refused(self, model_dir, max_steps):
        """A run in this process that its data check refuses; returns the error's message and its data checks."""
        job, data = self.job(model_dir, max_steps)
        with self.assertRaises(ValueError) as raised, self.assertLogs(level="INFO") as logs:
            trainer.run(job, dataset=data)
        return str(raised.exception), checks_in("\n".join(logs.output))

    def train_command(self, model_dir, max_steps):
        """`python -m deepfm.train` with INFO logs; returns the process and its data checks."""
        proc = command_line.run(command_line.python_module(
            "deepfm.train", "--train_data", "data", "--model_dir", model_dir, "--batch_size", str(BATCH),
            "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0", "--max_steps", str(max_steps),
            "--verbosity", "0"), cwd=self.work, timeout=300)
        return proc, checks_in(proc.stderr)

    def test_a_restart_and_a_new_run_read_no_row_and_a_changed_file_is_read_again(self):
        _, checks = self.train("model", STEPS)
        self.assertEqual({"training": (SHARDS, SHARDS, 0), "validation": (SHARDS, SHARDS, 0)}, checks)
        for split in schema.SPLITS:
            self.assertTrue(os.path.isfile(os.path.join(self.data, split, check_record.RECORD_FILE)))
        # The restart of the model directory: every file already checked.
        logged, checks = self.train("model", 2 * STEPS)
        self.assertEqual({"training": (SHARDS, 0, SHARDS), "validation": (SHARDS, 0, SHARDS)}, checks)
        self.assertRegex(logged, r"resuming from the checkpoint in %s at global step %d"
                         % (re.escape(os.path.join(self.work, "model")), STEPS))
        # A shard cut short: that one is read again, the run refused, and the model directory not written.
        shard = os.path.join(self.data, schema.TRAIN_SPLIT, "part-00001.tfrecord")
        with open(shard, "rb") as f:
            content = f.read()
        os.truncate(shard, len(content) - 100)
        model_files = sorted(os.listdir(os.path.join(self.work, "model")))
        message, checks = self.refused("model", 3 * STEPS)
        self.assertIn("training data: TFRecord file %s could not be read to its end" % shard, message)
        self.assertEqual((SHARDS, 1, 1), checks["training"])
        self.assertEqual(model_files, sorted(os.listdir(os.path.join(self.work, "model"))))
        # The shard written again (another mtime): a new model directory reads it alone, then no file.
        with open(shard, "wb") as f:
            f.write(content)
        old = time.time_ns() - 1800 * 10**9
        os.utime(shard, ns=(old, old))
        _, checks = self.train("other", STEPS)
        self.assertEqual((SHARDS, 1, SHARDS - 1), checks["training"])
        # A new process, as a user starts it, on the record this one wrote.
        proc, checks = self.train_command("third", STEPS)
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
        _, checks = self.train("model", STEPS, env=channels)
        self.assertEqual({"training": (SHARDS, SHARDS, 0), "validation": (SHARDS, SHARDS, 0)}, checks)
        self.assertEqual(before, self.data_listing())
        model_dir = os.path.join(self.work, "model")
        self.assertEqual(self.model_dir_records(model_dir),
                         sorted(name for name in os.listdir(model_dir) if name.startswith("data_check")))
        # The restart of the job on the same model directory.
        _, checks = self.train("model", 2 * STEPS, env=channels)
        self.assertEqual({"training": (SHARDS, 0, SHARDS), "validation": (SHARDS, 0, SHARDS)}, checks)
        # Outside SageMaker, asked for (`--data_check_record model_dir`): the same, in the new model directory.
        _, checks = self.train("other", STEPS, data_check_record="model_dir")
        self.assertEqual({"training": (SHARDS, SHARDS, 0), "validation": (SHARDS, SHARDS, 0)}, checks)
        self.assertEqual(before, self.data_listing())
        other = os.path.join(self.work, "other")
        self.assertEqual(self.model_dir_records(other),
                         sorted(name for name in os.listdir(other) if name.startswith("data_check")))


if __name__ == "__main__":
    tf.test.main()
