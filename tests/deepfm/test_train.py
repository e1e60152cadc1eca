"""Tests of `python -m deepfm.train`'s console: a real run's output, and a user error's."""

import os
import re

import tensorflow as tf

from dataprep import synthetic
from tests import command_line

ROWS = 3_000
FEATURE_SIZE = 500
BATCH = 128
LOG_EVERY = 10
# What a default run must not print: TensorFlow's deprecation notices, the CUDA
# plugin-registration errors and GPU discovery lines, Estimator's INFO lines.
NOISE = (
    re.compile(r"Instructions for updating"),
    re.compile(r"Unable to register"),
    re.compile(r"cuda", re.IGNORECASE),
    re.compile(r"^I\d{4} ", re.MULTILINE),
    re.compile(r"^INFO:", re.MULTILINE),
    re.compile(r"Traceback"),
)
PROGRESS_LINE = re.compile(r"^step (\d+)/(\d+) \| epoch \d+/\d+ \| [\d,]+ ex/s \| loss [\d.]+ \| "
                           r"elapsed \d+:\d\d:\d\d \| left \d+:\d\d:\d\d$", re.MULTILINE)
# A short run's console: the topology line, progress, evaluations, the summary.
MAX_LINES_BESIDES_PROGRESS = 25


class EntryPointTest(tf.test.TestCase):
    """`python -m deepfm.train` as a user runs it."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data_dir = os.path.join(tf.compat.v1.test.get_temp_dir(), "console_data")
        if not os.path.exists(os.path.join(cls.data_dir, "metadata.json")):
            synthetic.generate(ROWS, cls.data_dir, feature_size=FEATURE_SIZE, seed=2, shards=1)

    def _train(self, *args):
        """`python -m deepfm.train` from the test's temporary directory, the data named relative to it."""
        cwd = self.get_temp_dir()
        return command_line.run(command_line.python_module(
            "deepfm.train", "--train_data", os.path.relpath(self.data_dir, cwd), "--batch_size", str(BATCH),
            "--embedding_size", "4", "--deep_layers", "16", "--dropout", "0", *args), cwd, timeout=300)

    def test_a_default_run_prints_progress_and_the_summary_and_no_noise(self):
        proc = self._train("--model_dir", "model", "--num_epochs", "2", "--log_every_n_steps", str(LOG_EVERY),
                           "--eval_every_n_steps", "20")
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        output = proc.stdout + proc.stderr
        for pattern in NOISE:
            self.assertIsNone(pattern.search(output), "%s in:\n%s" % (pattern.pattern, output))
        total = 2 * ((ROWS * 9 // 10) // BATCH)
        steps = [int(m.group(1)) for m in PROGRESS_LINE.finditer(proc.stdout)]
        self.assertEqual(total, steps[-1])
        self.assertEqual(list(range(LOG_EVERY, total, LOG_EVERY)), [s for s in steps if s % LOG_EVERY == 0])
        self.assertTrue(all(m.group(2) == str(total) for m in PROGRESS_LINE.finditer(proc.stdout)))
        self.assertRegex(proc.stdout, r"validation at step 20: AUC 0\.\d{4}, logloss \d\.\d{4}")
        for key in ("strategy:", "validation AUC:", "examples/sec:", "global step:", "best checkpoint:"):
            self.assertIn(key, proc.stdout)
        other_lines = [line for line in proc.stdout.splitlines() if not PROGRESS_LINE.fullmatch(line)]
        self.assertLessEqual(len(other_lines), MAX_LINES_BESIDES_PROGRESS, proc.stdout)
        self.assertEqual("", proc.stderr.strip())

    def test_a_user_error_ends_with_its_message_and_verbosity_brings_the_traceback(self):
        not_a_dir = "a_file"
        with open(os.path.join(self.get_temp_dir(), not_a_dir), "w") as f:
            f.write("x")
        quiet = self._train("--model_dir", not_a_dir)
        self.assertEqual(1, quiet.returncode)
        self.assertIn("deepfm.train: error: --model_dir %r exists and is not a directory" % not_a_dir, quiet.stderr)
        self.assertNotIn("Traceback", quiet.stderr)
        detailed = self._train("--model_dir", not_a_dir, "--verbosity", "0")
        self.assertNotEqual(0, detailed.returncode)
        self.assertIn("Traceback", detailed.stderr)
        self.assertIn("exists and is not a directory", detailed.stderr)

    def test_an_option_of_another_strategy_is_refused(self):
        proc = self._train("--model_dir", "m", "--strategy", "single",
                           "--ps_towers", "2")
        self.assertEqual(1, proc.returncode)
        self.assertIn("deepfm.train: error: --ps_towers applies to --strategy ps, not single", proc.stderr)

    def test_dcn_trains_and_a_resume_with_another_model_is_refused_naming_both(self):
        model_dir = "dcn"
        first = self._train("--model_dir", model_dir, "--model", "dcn", "--max_steps", "5")
        self.assertEqual(0, first.returncode, first.stderr[-3000:])
        self.assertIn("validation AUC:", first.stdout)
        again = self._train("--model_dir", model_dir, "--model", "deepfm", "--max_steps", "10")
        self.assertEqual(1, again.returncode)
        self.assertRegex(again.stderr, "holds checkpoints of another model, optimizer or large-batch rule "
                                       r"\(model.model was 'dcn', now 'deepfm'")


if __name__ == "__main__":
    tf.test.main()
