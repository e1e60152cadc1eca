"""The documented flows, run as a user runs them: a plain shell, the project's `.venv`, relative paths.

Each test starts the commands of README.md and docs/ through
`tests.command_line` (a minimal environment: no `TF2_BEHAVIOR`, no
`TF_CPP_MIN_LOG_LEVEL`, no `PYTHONPATH`) from a working directory of its
own, with the relative paths the docs show:

* train -> predict (`python -m deepfm.predict`, `deepfm-predict`): one
  probability per validation row, whose AUC is the run's evaluation;
* the Python API (`deepfm.train_and_evaluate`) with a relative model
  directory: a second call resumes, its export predicts;
* train -> SIGTERM -> the same command resumes (docs/reliability.md).

docs/training.md's flow on the real Criteo rows (convert, train with early
stopping, predict) is checked by the docs' own test (`TrainingTest` in
tests/test_docs_commands.py), which runs the page's commands.
`deepfm.launch --max_restarts 1` after a killed worker, from a work
directory with a relative model directory (docs/reliability.md), is
`RestartTest.test_killed_worker` (tests/jobs/local/test_launcher.py).
"""

import glob
import os
import shutil
import signal
import tempfile
import time

import pytest
import tensorflow as tf

from deepfm.runtime import interrupt
from tests import command_line, flow_checks
from tests.flow_checks import only_export, read_json, validation_rows

SYNTHETIC = ["--rows", "3000", "--feature_size", "300", "--shards", "2"]
# A small model that learns the synthetic data in a few dozen steps.
SMALL_MODEL = ["--batch_size", "64", "--embedding_size", "4", "--deep_layers", "16", "--dropout", "0",
               "--learning_rate", "0.01"]
POLL_S = 0.2
WAIT_S = 300


class FlowTestCase(tf.test.TestCase):
    """A working directory of the test's own; commands run there as a user runs them."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cwd = tempfile.mkdtemp(prefix="flow-", dir=tf.compat.v1.test.get_temp_dir())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.cwd, ignore_errors=True)
        super().tearDownClass()

    @classmethod
    def run_ok(cls, command, timeout=command_line.DEFAULT_TIMEOUT_S, env=None):
        """Runs `command` in the working directory; fails the test unless it exits 0. Returns the result."""
        result = command_line.run(command, cls.cwd, env=env, timeout=timeout)
        assert result.returncode == 0, command_line.describe(command, result)
        return result

    @classmethod
    def synthetic(cls, output_dir="data/synthetic"):
        cls.run_ok(command_line.python_module("dataprep.synthetic", *SYNTHETIC, "--output_dir", output_dir))
        return output_dir

    def assert_predictions_match(self, saved_model, data, output, expected_rows, expected_auc, script=None):
        """`flow_checks.assert_predictions_match` in the working directory."""
        flow_checks.assert_predictions_match(self, self.cwd, saved_model, data, output, expected_rows, expected_auc,
                                             script)


class PredictFlowTest(FlowTestCase):
    """README's and docs/training.md's flow: synthetic data, `deepfm.train` with an export, `deepfm.predict`."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        data = cls.synthetic()
        cls.run_ok(command_line.python_module(
            "deepfm.train", "--strategy", "single", "--train_data", data, "--model_dir", "runs/single/model",
            "--export_dir", "runs/single/export", "--metrics_file", "runs/single/metrics.json",
            "--max_steps", "60", *SMALL_MODEL))
        cls.metrics = read_json(os.path.join(cls.cwd, "runs/single/metrics.json"))
        cls.validation_rows = validation_rows(cls.cwd, data)

    def test_the_module_scores_every_validation_row_with_the_runs_auc(self):
        self.assert_predictions_match(only_export(self.cwd, "runs/single/export"), "data/synthetic/validation",
                                      "runs/single/predictions.csv", self.validation_rows, self.metrics["auc"])

    def test_the_console_script_scores_a_dataset_root_as_its_validation_rows(self):
        self.assert_predictions_match(only_export(self.cwd, "runs/single/export"), "data/synthetic",
                                      "runs/single/predictions-script.csv", self.validation_rows,
                                      self.metrics["auc"], script="deepfm-predict")


API_SCRIPT = """\
import sys

import deepfm

data = deepfm.Dataset.open("data/synthetic")
result = deepfm.train_and_evaluate(
    deepfm.TrainConfig(model_dir="runs/api", export_dir="runs/api/export", train_files=data.train_files,
                       val_files=data.val_files, max_steps=int(sys.argv[1]), batch_size=64,
                       save_checkpoints_steps=20, metrics_file="runs/api/metrics.json"),
    deepfm.ModelConfig(feature_size=data.feature_size, field_size=data.field_size, embedding_size=4,
                       deep_layers=(16,), dropout=(0.0,), learning_rate=0.01))
print("global step", result.global_step)
"""


class ApiFlowTest(FlowTestCase):
    """docs/api.md's flow: `deepfm.train_and_evaluate` with a relative model directory, twice, then predict."""

    def test_a_second_call_resumes_and_its_export_predicts(self):
        self.synthetic()
        with open(os.path.join(self.cwd, "train_api.py"), "w") as f:
            f.write(API_SCRIPT)
        first = self.run_ok(["python", "train_api.py", "20"])
        self.assertIn("global step 20", first.stdout)
        shutil.rmtree(os.path.join(self.cwd, "runs/api/export"))
        second = self.run_ok(["python", "train_api.py", "40"])
        self.assertIn("global step 40", second.stdout)
        # The library's TensorFlow deprecation notices stay out of a script's output (README's snippet).
        self.assertNotIn("Instructions for updating", first.stderr + second.stderr)
        metrics = read_json(os.path.join(self.cwd, "runs/api/metrics.json"))
        self.assertEqual(40, metrics["global_step"])
        self.assert_predictions_match(only_export(self.cwd, "runs/api/export"), "data/synthetic/validation",
                                      "runs/api/predictions.csv", validation_rows(self.cwd, "data/synthetic"),
                                      metrics["auc"])


def wait_for(predicate, process, what, timeout=WAIT_S):
    """Polls `predicate` until it holds; fails if `process` ended first or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process.poll() is not None:
            raise AssertionError("the command ended (exit %s) before %s" % (process.returncode, what))
        time.sleep(POLL_S)
    raise AssertionError("no %s after %d s" % (what, timeout))


@pytest.mark.slow
class ResumeFlowTest(FlowTestCase):
    """docs/reliability.md: SIGTERM stops training at a saved step; the same command again resumes there."""

    def test_sigterm_then_the_same_command_resumes_to_the_budget(self):
        data = self.synthetic()
        budget = 400
        command = command_line.python_module(
            "deepfm.train", "--train_data", data, "--val_data=", "--model_dir", "runs/r",
            "--metrics_file", "runs/r/metrics.json", "--max_steps", str(budget), "--save_checkpoints_steps", "20",
            *SMALL_MODEL)
        with open(os.path.join(self.cwd, "first.log"), "w") as log:
            process = command_line.start(command, self.cwd, stdout=log, stderr=log)
            try:
                wait_for(lambda: glob.glob(os.path.join(self.cwd, "runs/r/model.ckpt-20.index")), process,
                         "a checkpoint at step 20")
                process.send_signal(signal.SIGTERM)
                returncode = process.wait(timeout=WAIT_S)
            finally:
                command_line.kill_group(process)
        with open(os.path.join(self.cwd, "first.log")) as f:
            first_output = f.read()
        self.assertEqual(interrupt.INTERRUPTED_EXIT_CODE, returncode, first_output[-3000:])
        stopped = read_json(os.path.join(self.cwd, "runs/r/metrics.json"))
        self.assertTrue(stopped[interrupt.INTERRUPTED_KEY], stopped)
        stopped_at = stopped["global_step"]
        self.assertLess(stopped_at, budget)
        self.assertEqual(stopped_at, int(tf.train.load_variable(
            tf.train.latest_checkpoint(os.path.join(self.cwd, "runs/r")), "global_step")))
        resumed = self.run_ok(command)
        self.assertNotIn("can be read", resumed.stderr)
        finished = read_json(os.path.join(self.cwd, "runs/r/metrics.json"))
        self.assertEqual(budget, finished["global_step"], resumed.stdout[-2000:])
        self.assertNotIn(interrupt.INTERRUPTED_KEY, finished)
