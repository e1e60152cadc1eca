"""`python -m benchmarks.train_single`: a trial run writes its report where `--results_dir` says."""

import json
import os

import pytest
import tensorflow as tf

from tests import command_line


@pytest.mark.slow
class ResultsDirTest(tf.test.TestCase):

    def test_a_trial_run_leaves_the_committed_results_alone(self):
        # A directory like the project's root, with benchmarks/results/ of its own (the default).
        cwd = command_line.checkout(self.create_tempdir().full_path)
        command = command_line.python_module(
            "benchmarks.train_single", "--runs", "1", "--steps", "2", "--variants", "adam", "--rows", "3000",
            "--data_dir", "data/bench", "--results_dir", "runs/trial")
        result = command_line.run(command, cwd, timeout=600)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        with open(os.path.join(cwd, "runs", "trial", "train_single.json")) as f:
            self.assertLen(json.load(f)["results"]["adam"]["examples_per_sec"], 1)
        self.assertTrue(os.path.exists(os.path.join(cwd, "runs", "trial", "train_single.png")))
        self.assertEqual([], os.listdir(os.path.join(cwd, "benchmarks", "results")))


if __name__ == "__main__":
    tf.test.main()
