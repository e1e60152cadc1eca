"""`python -m deepfm.train --config_file runs/m1/config.json`: a job started from the configuration a run wrote.

Run as a user runs it (`tests.command_line`): a minimal environment, a
working directory of the test's own, the relative paths the docs show. The
commands are those of docs/training.md, "Starting from a run's configuration".
"""

import json
import os
import re

import tensorflow as tf

from dataprep import synthetic
from deepfm.runtime import run_config
from tests import command_line, paths

ROWS = 2_000
FEATURE_SIZE = 300
TIMEOUT_S = 300
TRAINING_DOC = os.path.join(paths.REPO_ROOT, "docs", "training.md")
SECTION = "## Starting from a run's configuration"
BASH_BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def documented_commands():
    """The command lines of the section, one per line."""
    with open(TRAINING_DOC) as f:
        section = f.read().split(SECTION, 1)[1].split("\n## ", 1)[0]
    (block,) = BASH_BLOCK.findall(section)
    return [line for line in block.splitlines() if line.strip()]


def train(cwd: str, *args: str):
    return command_line.run(command_line.python_module("deepfm.train", *args), cwd, timeout=TIMEOUT_S)


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


class ConfigFileTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.cwd = os.path.join(tf.compat.v1.test.get_temp_dir(), "config_file")
        os.makedirs(cls.cwd, exist_ok=True)
        synthetic.generate(ROWS, os.path.join(cls.cwd, "data", "synthetic"), feature_size=FEATURE_SIZE, seed=8,
                           shards=1)

    def test_the_documented_run_resumes_from_its_config_file_as_it_was_configured(self):
        first, again = documented_commands()
        result = command_line.run(first, self.cwd, timeout=TIMEOUT_S)
        self.assertEqual(0, result.returncode, command_line.describe(first, result))
        model_dir = os.path.join(self.cwd, "runs", "m1")
        written = read_json(os.path.join(model_dir, run_config.CONFIG_FILE))
        self.assertEqual(4, written["model"]["embedding_size"])
        result = command_line.run(again, self.cwd, timeout=TIMEOUT_S)
        self.assertEqual(0, result.returncode, command_line.describe(again, result))
        # The change is said on the console as a line of the command, not as a log record.
        self.assertEqual("deepfm.train: warning: resuming runs/m1 with train.max_steps changed: 6 -> 12",
                         result.stderr.strip())
        # Resumed at step 6 (a model of the default embedding size would be refused by the checkpoint's shape
        # check) and trained to the new budget.
        self.assertEqual("model.ckpt-12", os.path.basename(tf.train.latest_checkpoint(model_dir)))
        resumed = read_json(os.path.join(model_dir, run_config.CONFIG_FILE))
        self.assertEqual([("train.max_steps", 6, 12)], run_config.differences(written, resumed))
        # Where results go is never taken from the file: a run must name its own model directory.
        unnamed = train(self.cwd, "--config_file", "runs/m1/config.json")
        self.assertEqual(1, unnamed.returncode)
        self.assertIn("deepfm.train: error: --model_dir is required", unnamed.stderr)

    def test_a_bad_key_is_refused_naming_the_key_and_the_file(self):
        os.makedirs(os.path.join(self.cwd, "runs", "bad"), exist_ok=True)
        record = {"format_version": run_config.FORMAT_VERSION, "train": {"batch_sise": 64}, "model": {},
                  "input": {}, "strategy": {}}
        with open(os.path.join(self.cwd, "runs", "bad", "config.json"), "w") as f:
            json.dump(record, f)
        bad = train(self.cwd, "--config_file", "runs/bad/config.json", "--model_dir", "runs/new")
        self.assertEqual(1, bad.returncode)
        self.assertIn("deepfm.train: error: runs/bad/config.json: unknown key 'train.batch_sise'", bad.stderr)
        self.assertNotIn("Traceback", bad.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "runs", "new")))


if __name__ == "__main__":
    tf.test.main()
