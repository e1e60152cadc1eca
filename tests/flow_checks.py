"""Checks of a documented flow's outputs, shared by the flow tests and the docs' own test.

A flow trains with an export, then scores rows with `deepfm.predict`; what it
wrote is read back here: the run's metrics file, its one SavedModel, and the
predictions CSV, whose exact AUC is checked against the run's evaluation.
"""

import csv
import glob
import json
import os

import numpy as np

from tests import command_line

# The run's AUC is TensorFlow's streaming AUC (2,000 thresholds); the CSV's is exact.
AUC_TOLERANCE = 1e-3


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


def assert_predictions_match(test, cwd, saved_model, data, output, expected_rows, expected_auc, script=None):
    """Predicts `data` with `saved_model` into `output` (paths relative to `cwd`), as a user runs it; checks
    the rows and the AUC against the run's.

    Args:
      test: the test case that asserts.
      cwd: the flow's working directory.
      saved_model: the SavedModel directory.
      data: the files or dataset root to score.
      output: the CSV to write.
      expected_rows: the rows `data` holds.
      expected_auc: the run's evaluated AUC.
      script: the console script to run instead of `python -m deepfm.predict`.
    """
    args = ["--saved_model", saved_model, "--data", data, "--output", output]
    command = [script] + args if script else command_line.python_module("deepfm.predict", *args)
    result = command_line.run(command, cwd)
    test.assertEqual(0, result.returncode, command_line.describe(command, result))
    test.assertIn("scored %d rows" % expected_rows, result.stdout)
    test.assertNotIn("Traceback", result.stderr)
    probs, labels = read_predictions(os.path.join(cwd, output))
    test.assertLen(probs, expected_rows)
    test.assertNear(exact_auc(labels, probs), expected_auc, AUC_TOLERANCE)
