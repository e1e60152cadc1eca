"""Tests of `python -m deepfm.export`: a training run's checkpoint as a SavedModel, started as a user starts it.

A `single` model directory (whole tables in one bundle) and a 2-rank
`hybrid` one (rank 0's bundle of the dense variables, each rank's rows in
its shard files) are trained, and the export command writes a SavedModel of
each that predicts what the training run's own export predicts. The
`hybrid` job is launched as a user launches it (`python -m deepfm.launch`);
the `single` run is this process's (`trainer.run`, what `python -m
deepfm.train` runs; that command line is tested in tests/deepfm/test_train.py),
which spares a TensorFlow process (about 4 s of CPU).
"""

import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import strategies
from cli import entry
from dataprep import synthetic
from deepfm import config, job_config
from deepfm.models import ctr
from deepfm.runtime import trainer
from input_pipeline import dataset as dataset_lib
from input_pipeline import pipeline, schema
from strategies.sharded import row_stream
from tests import command_line
from tests.jobs.local import launch_testing

ROWS = 2_000
FEATURE_SIZE = 300
BATCH = 64
STEPS = 6
CHECKPOINT_EVERY = 3
SEED = 3
TRAIN_FLAGS = ["--train_data", "data", "--batch_size", str(BATCH), "--max_steps", str(STEPS),
               "--save_checkpoints_steps", str(CHECKPOINT_EVERY), "--embedding_size", "4", "--deep_layers", "8",
               "--dropout", "0", "--seed", str(SEED)]
HYBRID_RANKS = 2
RUN_TIMEOUT_S = 300
EXPORT_TIMEOUT_S = 180
PREDICTED_ROWS = 8
SAVED_MODEL = re.compile(r"^SavedModel: (\S+)$", re.MULTILINE)
# Both exports read the same weights into the same serving graph.
PROB_TOLERANCE = 1e-6


def saved_model_dirs(export_dir):
    """The timestamped SavedModel directories under `export_dir`."""
    return sorted(os.path.dirname(path) for path in glob.glob(os.path.join(export_dir, "*", "saved_model.pb")))


def predictions(saved_model):
    """The serving signature's probabilities on a few fixed rows."""
    rows = np.random.RandomState(7)
    ids = rows.randint(0, FEATURE_SIZE, size=(PREDICTED_ROWS, schema.FIELD_SIZE)).astype(np.int64)
    values = rows.uniform(size=(PREDICTED_ROWS, schema.FIELD_SIZE)).astype(np.float32)
    signature = tf.saved_model.load(saved_model).signatures["serving_default"]
    return signature(feat_ids=tf.constant(ids), feat_vals=tf.constant(values))[ctr.SERVING_SIGNATURE_OUTPUT].numpy()


class ExportCommandTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cwd = tf.compat.v1.test.get_temp_dir()
        synthetic.generate(ROWS, os.path.join(cls.cwd, "data"), feature_size=FEATURE_SIZE, shards=HYBRID_RANKS,
                           seed=5)

    def export(self, model_dir, export_dir):
        """Runs `python -m deepfm.export`; returns the SavedModel directory it printed (absolute)."""
        command = command_line.python_module("deepfm.export", "--model_dir", model_dir, "--export_dir", export_dir)
        result = command_line.run(command, self.cwd, timeout=EXPORT_TIMEOUT_S)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        printed = SAVED_MODEL.search(result.stdout)
        self.assertIsNotNone(printed, result.stdout)
        exported = os.path.join(self.cwd, printed.group(1))
        self.assertEqual([exported], saved_model_dirs(os.path.join(self.cwd, export_dir)))
        return exported

    def assert_same_predictions(self, exported, trained_export_dir):
        [trained] = saved_model_dirs(os.path.join(self.cwd, trained_export_dir))
        expected = predictions(trained)
        self.assertTrue(((expected > 0.0) & (expected < 1.0)).all(), expected)
        self.assertAllClose(expected, predictions(exported), atol=PROB_TOLERANCE)

    def test_a_single_process_checkpoint_exports_as_its_training_run_does(self):
        # The run of `python -m deepfm.train --strategy single --model_dir runs/single --export_dir
        # runs/single/export <TRAIN_FLAGS>`, in this process.
        data = dataset_lib.Dataset.open([os.path.join(self.cwd, "data")])
        model_dir = os.path.join(self.cwd, "runs/single")
        trainer.run(job_config.JobConfig(
            train=config.TrainConfig(model_dir=model_dir, train_files=data.train_files, val_files=data.val_files,
                                     export_dir=os.path.join(model_dir, "export"), batch_size=BATCH,
                                     max_steps=STEPS, save_checkpoints_steps=CHECKPOINT_EVERY, seed=SEED),
            model=config.ModelConfig(feature_size=FEATURE_SIZE, embedding_size=4, deep_layers=(8,), dropout=(0.0,)),
            input=pipeline.PipelineConfig(),
            strategy=strategies.StrategyConfig(name="single")), dataset=data)
        self.assertIsNone(row_stream.saved_ranks(tf.train.latest_checkpoint(model_dir)))
        exported = self.export("runs/single", "exports/single")
        self.assert_same_predictions(exported, "runs/single/export")

    @pytest.mark.slow
    def test_a_sharded_hybrid_checkpoint_exports_as_its_training_run_does(self):
        job = launch_testing.LaunchedJob(
            self, ["--strategy", "hybrid", "--np", str(HYBRID_RANKS), "--horovod_controller", "gloo"],
            "logs/hybrid", ["--model_dir", "runs/hybrid", "--export_dir", "runs/hybrid/export"] + TRAIN_FLAGS,
            cwd=self.cwd)
        returncode, output = job.wait(timeout=RUN_TIMEOUT_S)
        self.assertEqual(0, returncode, output + job.rank_logs("ranks"))
        job.assert_no_process_left()
        checkpoint = tf.train.latest_checkpoint(os.path.join(self.cwd, "runs/hybrid"))
        # The tables are in the ranks' shard files only: the export gathers them.
        self.assertEqual(HYBRID_RANKS, row_stream.saved_ranks(checkpoint))
        self.assertNotIn("deepfm_model/fm_v", dict(tf.train.list_variables(checkpoint)))
        exported = self.export("runs/hybrid", "exports/hybrid")
        self.assert_same_predictions(exported, "runs/hybrid/export")
        # The gathered weights were a temporary checkpoint: nothing of them is left beside the run's own.
        self.assertEqual([], glob.glob(os.path.join(self.cwd, "runs/hybrid", trainer.WEIGHTS_DIR_PREFIX + "*")))

    def test_a_bad_model_dir_is_refused_with_the_value(self):
        command = command_line.python_module("deepfm.export", "--model_dir", "runs/nowhere", "--export_dir", "e")
        result = command_line.run(command, self.cwd, timeout=EXPORT_TIMEOUT_S)
        self.assertEqual(entry.EXIT_USER_ERROR, result.returncode, command_line.describe(command, result))
        self.assertIn("deepfm.export: error: --model_dir 'runs/nowhere' is not a directory", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        # A directory that no training run wrote: no config.json to build the model from.
        os.makedirs(os.path.join(self.cwd, "runs/empty"), exist_ok=True)
        command = command_line.python_module("deepfm.export", "--model_dir", "runs/empty", "--export_dir", "e")
        result = command_line.run(command, self.cwd, timeout=EXPORT_TIMEOUT_S)
        self.assertEqual(entry.EXIT_USER_ERROR, result.returncode, command_line.describe(command, result))
        self.assertIn("deepfm.export: error: runs/empty has no config.json", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "e")))


if __name__ == "__main__":
    tf.test.main()
