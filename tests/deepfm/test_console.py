"""Tests of the console: log levels, progress lines, errors, and a real training run's output."""

import io
import logging as std_logging
import os
import re
import subprocess
import sys

import tensorflow as tf
from absl import app
from absl.testing import parameterized

from deepfm import console
from input_pipeline import synthetic

REPO_ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
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


class ExplicitVerbosityTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("absent", ["prog", "--model_dir", "x"], None),
        ("equals", ["prog", "--verbosity=0"], 0),
        ("separate", ["prog", "--verbosity", "1"], 1),
        ("short", ["prog", "-v", "-1"], -1),
        ("after_double_dash_ignored", ["prog", "--", "--verbosity=1"], None),
        ("not_a_number", ["prog", "--verbosity=loud"], None),
    )
    def test_reads_the_flag_before_parsing(self, argv, expected):
        self.assertEqual(expected, console.explicit_verbosity(argv))

    def test_detail_from_info_up(self):
        self.assertEqual([False, False, True, True],
                         [console.wants_detail(v) for v in (None, -1, 0, 1)])


class FormatTest(tf.test.TestCase):

    def test_progress_line_has_every_part(self):
        line = console.format_progress(300, 2634, 88429.4, 0.47123, elapsed=4.2, remaining=31.4, epoch=1,
                                       num_epochs=3)
        self.assertEqual("step 300/2634 | epoch 1/3 | 88,429 ex/s | loss 0.4712 | elapsed 0:00:04 | "
                         "left 0:00:31", line)

    def test_unknowns(self):
        line = console.format_progress(5, 10, 1.0, None, elapsed=3700, remaining=None)
        self.assertEqual("step 5/10 | 1 ex/s | loss n/a | elapsed 1:01:40 | left ?", line)

    def test_bar(self):
        self.assertEqual("[#####.....]  50%", console.progress_bar(0.5, width=10))
        self.assertEqual("[##########] 100%", console.progress_bar(1.7, width=10))


class ConsoleTest(tf.test.TestCase):

    def test_plain_lines_when_not_a_terminal(self):
        out = io.StringIO()
        c = console.Console(stream=out)
        c.progress("step 1/2", 0.5)
        c.progress("step 2/2", 1.0)
        c.line("done")
        self.assertEqual("step 1/2\nstep 2/2\ndone\n", out.getvalue())

    def test_live_bar_rewrites_one_line_then_ends_it(self):
        out = io.StringIO()
        c = console.Console(stream=out, live=True)
        c.progress("step 1/2", 0.5)
        c.progress("step 2/2", 1.0)
        c.line("done")
        text = out.getvalue()
        self.assertEqual(2, text.count("\r"))
        self.assertEqual(1, text.count("step 1/2"))
        self.assertTrue(text.endswith("step 2/2\ndone\n"), text)

    def test_disabled_console_prints_nothing(self):
        out = io.StringIO()
        c = console.Console(enabled=False, stream=out)
        c.progress("step 1/2", 0.5)
        c.line("x")
        c.close()
        self.assertEqual("", out.getvalue())

    def test_a_horovod_rank_is_not_live(self):
        os.environ["HOROVOD_RANK"] = "0"
        self.addCleanup(os.environ.pop, "HOROVOD_RANK")

        class Terminal(io.StringIO):
            def isatty(self):
                return True
        self.assertFalse(console.Console(stream=Terminal()).live)


class FilterTest(tf.test.TestCase):

    def test_noise_written_to_the_descriptor_is_dropped_the_rest_kept(self):
        path = os.path.join(self.get_temp_dir(), "stderr.txt")
        with open(path, "wb") as target:
            with console.filtered_fd(target.fileno(), console.IMPORT_NOISE):
                os.write(target.fileno(), b"E cuda_dnn.cc:9342] Unable to register cuDNN factory: ...\n")
                os.write(target.fileno(), b"E real_error.cc:1] something broke\n")
                os.write(target.fileno(), b"I cudart_stub.cc:28] Could not find cuda drivers on your machine\n")
        with open(path) as f:
            self.assertEqual("E real_error.cc:1] something broke\n", f.read())

    def test_deprecation_notices_are_dropped_real_warnings_kept(self):
        logger = std_logging.getLogger("tensorflow.test_console")
        handler_output = io.StringIO()
        handler = std_logging.StreamHandler(handler_output)
        logger.addHandler(handler)
        logger.addFilter(console.DeprecationFilter())
        self.addCleanup(logger.removeHandler, handler)
        logger.warning("From x.py:1: foo (from bar) is deprecated and will be removed in a future version.\n"
                       "Instructions for updating:\nUse tf.keras instead.")
        logger.warning("the disk is full")
        self.assertEqual("the disk is full\n", handler_output.getvalue())


class RunMainTest(tf.test.TestCase):

    def _run(self, error, detail):
        """(exit code or None, stderr) of `run_main` around a main raising `error`."""
        def main(argv):
            del argv
            raise error
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            console.run_main(main, ["prog"], "prog", lambda: detail)
        except SystemExit as e:
            return e.code, err.getvalue()
        finally:
            sys.stderr = old
        return None, err.getvalue()

    def test_user_errors_end_with_their_message_without_traceback(self):
        for error in (ValueError("bad --x 3"), app.UsageError("bad --x 3"), FileNotFoundError("bad --x 3")):
            with self.subTest(error=type(error).__name__):
                code, err = self._run(error, detail=False)
                self.assertEqual(1, code)
                self.assertIn("prog: error: bad --x 3\n", err)
                self.assertNotIn("Traceback", err)

    def test_detail_keeps_the_exception(self):
        with self.assertRaisesRegex(ValueError, "bad"):
            self._run(ValueError("bad"), detail=True)

    def test_other_errors_propagate(self):
        with self.assertRaises(KeyError):
            self._run(KeyError("bug"), detail=False)

    def test_op_errors_lose_their_graph_trace(self):
        error = tf.errors.InvalidArgumentError(None, None, "id 7 outside [0, 5)\n\t [[{{node check}}]]")
        self.assertEqual("id 7 outside [0, 5)", console.error_message(error))


class EntryPointTest(tf.test.TestCase):
    """`python -m deepfm.train` as a user runs it."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data_dir = os.path.join(tf.compat.v1.test.get_temp_dir(), "console_data")
        if not os.path.exists(os.path.join(cls.data_dir, "metadata.json")):
            synthetic.generate(ROWS, cls.data_dir, feature_size=FEATURE_SIZE, seed=2, shards=1)

    def _train(self, *args):
        env = {k: v for k, v in os.environ.items() if k != console.TF_CPP_LEVEL_ENV}
        return subprocess.run(
            [sys.executable, "-m", "deepfm.train", "--train_data", self.data_dir, "--batch_size", str(BATCH),
             "--embedding_size", "4", "--deep_layers", "16", "--dropout", "0"] + list(args),
            capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=300)

    def test_a_default_run_prints_progress_and_the_summary_and_no_noise(self):
        model_dir = os.path.join(self.get_temp_dir(), "model")
        proc = self._train("--model_dir", model_dir, "--num_epochs", "2", "--log_every_n_steps", str(LOG_EVERY),
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
        not_a_dir = os.path.join(self.get_temp_dir(), "a_file")
        with open(not_a_dir, "w") as f:
            f.write("x")
        quiet = self._train("--model_dir", not_a_dir)
        self.assertEqual(1, quiet.returncode)
        self.assertIn("deepfm.train: error: --model_dir %r exists and is not a directory" % not_a_dir, quiet.stderr)
        self.assertNotIn("Traceback", quiet.stderr)
        detailed = self._train("--model_dir", not_a_dir, "--verbosity", "0")
        self.assertNotEqual(0, detailed.returncode)
        self.assertIn("Traceback", detailed.stderr)
        self.assertIn("exists and is not a directory", detailed.stderr)


if __name__ == "__main__":
    tf.test.main()
