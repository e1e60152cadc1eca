"""The documented flows, run as a user runs them: a plain shell, the project's `.venv`, relative paths.

Each test starts the commands of README.md and docs/ through
`tests.command_line` (a minimal environment: no `TF2_BEHAVIOR`, no
`TF_CPP_MIN_LOG_LEVEL`, no `PYTHONPATH`) from a working directory of its
own, with the relative paths the docs show:

* train -> predict (`python -m deepfm.predict`, `deepfm-predict`): one
  probability per validation row, whose AUC is the run's evaluation;
* the same on the real Criteo rows (docs/training.md), with early
  stopping;
* the Python API (`deepfm.train_and_evaluate`) with a relative model
  directory: a second call resumes, its export predicts;
* train -> SIGTERM -> the same command resumes (docs/reliability.md);
* `deepfm.launch --max_restarts 1` after a killed task resumes from the
  relative model directory and ends at the budget.
"""

import csv
import glob
import json
import os
import shutil
import signal
import tempfile
import time
import unittest

import numpy as np
import pytest
import tensorflow as tf

from deepfm.runtime import interrupt
from tests import command_line, paths
from tests.jobs.local import launch_testing

# The run's AUC is TensorFlow's streaming AUC (2,000 thresholds); the CSV's is exact.
AUC_TOLERANCE = 1e-3
SYNTHETIC = ["--rows", "3000", "--feature_size", "300", "--shards", "2"]
# A small model that learns the synthetic data in a few dozen steps.
SMALL_MODEL = ["--batch_size", "64", "--embedding_size", "4", "--deep_layers", "16", "--dropout", "0",
               "--learning_rate", "0.01"]
CRITEO_FILE = "criteo_kaggle_train_head8000.txt"
POLL_S = 0.2
WAIT_S = 300


def exact_auc(labels, probs) -> float:
    """The area under the ROC curve of `probs` against 0/1 `labels` (ties share their rank)."""
    labels = np.asarray(labels, np.float64)
    probs = np.asarray(probs, np.float64)
    order = np.argsort(probs, kind="mergesort")
    ranks = np.empty(len(probs), np.float64)
    sorted_probs = probs[order]
    start = 0
    while start < len(probs):
        end = start
        while end + 1 < len(probs) and sorted_probs[end + 1] == sorted_probs[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1
        start = end + 1
    positives = labels.sum()
    negatives = len(labels) - positives
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def read_predictions(path):
    """(probabilities, labels) of a `deepfm.predict` CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["prob", "label"], rows[0]
    return [float(r[0]) for r in rows[1:]], [float(r[1]) for r in rows[1:]]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def validation_rows(cwd, data):
    """The validation rows of the dataset root `data` (relative to `cwd`), from its metadata.json."""
    return read_json(os.path.join(cwd, data, "metadata.json"))["splits"]["validation"]["rows"]


def only_export(cwd, export_dir):
    """The one timestamped SavedModel directory under `export_dir`, relative to `cwd`."""
    found = glob.glob(os.path.join(cwd, export_dir, "*", "saved_model.pb"))
    assert len(found) == 1, found
    return os.path.relpath(os.path.dirname(found[0]), cwd)


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
        """Predicts `data` with `saved_model` into `output`; checks the rows and the AUC against the run's."""
        args = ["--saved_model", saved_model, "--data", data, "--output", output]
        command = [script] + args if script else command_line.python_module("deepfm.predict", *args)
        result = self.run_ok(command)
        self.assertIn("scored %d rows" % expected_rows, result.stdout)
        self.assertNotIn("Traceback", result.stderr)
        probs, labels = read_predictions(os.path.join(self.cwd, output))
        self.assertLen(probs, expected_rows)
        self.assertNear(exact_auc(labels, probs), expected_auc, AUC_TOLERANCE)


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


@pytest.mark.slow
class CriteoFlowTest(FlowTestCase):
    """docs/training.md's flow on the real Criteo rows: convert, train with early stopping, predict.

    Scaled down from the page (a smaller model, a higher learning rate,
    evaluations every 10 steps, patience 1) so early stopping comes within
    a minute; the commands and flags are the page's.
    """

    @classmethod
    def setUpClass(cls):
        source = os.path.join(paths.CRITEO_DIR, CRITEO_FILE)
        if not os.path.exists(source):
            raise unittest.SkipTest("the real Criteo rows are absent (%s; set %s)"
                                    % (source, paths.CRITEO_DIR_VARIABLE))
        super().setUpClass()
        os.makedirs(os.path.join(cls.cwd, "data"))
        cls.run_ok("head -7000 %s > data/criteo_trainval.txt\ntail -1000 %s > data/criteo_test.txt"
                   % (source, source))
        cls.run_ok(command_line.python_module(
            "dataprep.criteo", "--input", "data/criteo_trainval.txt", "--output_dir", "data/criteo",
            "--val_fraction", "0.142857", "--shards", "1"))
        cls.run_ok(command_line.python_module(
            "dataprep.criteo", "--input", "data/criteo_test.txt", "--output_dir", "data/criteo_test",
            "--val_fraction", "0", "--shards", "1", "--vocab", "data/criteo"))
        cls.train = cls.run_ok(command_line.python_module(
            "deepfm.train", "--train_data", "data/criteo", "--model_dir", "runs/criteo/model",
            "--export_dir", "runs/criteo/export", "--metrics_file", "runs/criteo/metrics.json",
            "--num_epochs", "40", "--eval_every_n_steps", "10", "--early_stopping_patience", "1", "--seed", "1",
            "--batch_size", "512", "--embedding_size", "8", "--deep_layers", "32,16", "--dropout", "0.5,0.5",
            "--learning_rate", "0.005"))
        cls.metrics = read_json(os.path.join(cls.cwd, "runs/criteo/metrics.json"))

    def test_early_stopping_exports_the_best_model_which_predicts_its_auc(self):
        self.assertTrue(self.metrics["stopped_early"], self.train.stdout[-3000:])
        self.assertLess(self.metrics["best_step"], self.metrics["global_step"])
        self.assert_predictions_match(
            only_export(self.cwd, "runs/criteo/export"), "data/criteo/validation",
            "runs/criteo/validation_predictions.csv", validation_rows(self.cwd, "data/criteo"), self.metrics["auc"])

    def test_the_test_rows_are_scored(self):
        output = "runs/criteo/test_predictions.csv"
        result = self.run_ok(command_line.python_module(
            "deepfm.predict", "--saved_model", only_export(self.cwd, "runs/criteo/export"),
            "--data", "data/criteo_test/train", "--output", output))
        self.assertIn("scored 1000 rows", result.stdout)
        probs, labels = read_predictions(os.path.join(self.cwd, output))
        self.assertLen(probs, 1000)
        # The page's model scores 0.727 on these rows; this smaller one, trained less, still learns.
        self.assertGreater(exact_auc(labels, probs), 0.62)


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


@pytest.mark.slow
class LaunchRestartFlowTest(FlowTestCase):
    """docs/reliability.md: `deepfm.launch --max_restarts 1` restarts a job whose task was killed."""

    def test_a_killed_worker_restarts_from_the_relative_model_dir(self):
        data = self.synthetic()
        budget = 150  # steps per worker: the global step ends at 2 x 150 (+1 for an asynchronous overshoot)
        job = launch_testing.LaunchedJob(
            self, ["--strategy", "ps", "--num_ps", "1", "--num_workers", "2", "--max_restarts", "1"], "runs/ps/logs",
            ["--train_data", data, "--model_dir", "runs/ps/model", "--metrics_file", "runs/ps/metrics.json",
             "--max_steps", str(budget), "--save_checkpoints_steps", "20", *SMALL_MODEL], cwd=self.cwd)
        self.assertTrue(job.wait_for_checkpoints(os.path.join(self.cwd, "runs/ps/model")), job.output())
        os.kill(job.task_pids()["worker_0"], signal.SIGKILL)
        returncode, output = job.wait()
        self.assertEqual(0, returncode, output)
        self.assertRegex(output, r"restart 1 of 1: task worker_0 failed with exit code -9")
        # The chief's result, as `deepfm.train` prints it.
        self.assertRegex(output, r"job completed after 1 restart\(s\)\n.*\nvalidation AUC: +0\.\d{4}\n")
        global_step = read_json(os.path.join(self.cwd, "runs/ps/metrics.json"))["global_step"]
        self.assertBetween(global_step, 2 * budget, 2 * budget + 2)
        job.assert_no_process_left()
