"""Tests of `cli.entry`: the verbosity read before parsing, the import filter, user errors."""

import io
import logging as std_logging
import os
import sys

import tensorflow as tf
from absl import app
from absl.testing import parameterized

from cli import entry
from tests import command_line


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
        self.assertEqual(expected, entry.explicit_verbosity(argv))

    def test_detail_from_info_up(self):
        self.assertEqual([False, False, True, True],
                         [entry.wants_detail(v) for v in (None, -1, 0, 1)])

class FilterTest(tf.test.TestCase):

    def test_noise_written_to_the_descriptor_is_dropped_the_rest_kept(self):
        path = os.path.join(self.get_temp_dir(), "stderr.txt")
        with open(path, "wb") as target:
            with entry.filtered_fd(target.fileno(), entry.IMPORT_NOISE):
                os.write(target.fileno(), b"E cuda_dnn.cc:9342] Unable to register cuDNN factory: ...\n")
                os.write(target.fileno(), b"E real_error.cc:1] something broke\n")
                os.write(target.fileno(), b"I cudart_stub.cc:28] Could not find cuda drivers on your machine\n")
        with open(path) as f:
            self.assertEqual("E real_error.cc:1] something broke\n", f.read())

    def test_deprecation_notices_and_the_stale_step_alarm_are_dropped_real_warnings_kept(self):
        logger = std_logging.getLogger("tensorflow.test_console")
        handler_output = io.StringIO()
        handler = std_logging.StreamHandler(handler_output)
        logger.addHandler(handler)
        logger.addFilter(entry.NoticeFilter())
        self.addCleanup(logger.removeHandler, handler)
        logger.warning("From x.py:1: foo (from bar) is deprecated and will be removed in a future version.\n"
                       "Instructions for updating:\nUse tf.keras instead.")
        logger.warning("It seems that global step (tf.train.get_global_step) has not been increased. Current "
                       "value (could be stable): 33 vs previous value: 33. You could increase the global step "
                       "by passing tf.train.get_global_step() to Optimizer.apply_gradients or Optimizer.minimize.")
        logger.warning("the disk is full")
        self.assertEqual("the disk is full\n", handler_output.getvalue())

    def test_a_record_on_the_console_is_a_line_of_the_command(self):
        # (A resumed run's warning: tests/deepfm/test_config_file.py checks it on the command's console.)
        formatter = entry.ConsoleFormatter("deepfm.train")
        record = std_logging.LogRecord("absl", std_logging.WARNING, "run_config.py", 146,
                                       "resuming %s with %s changed: %r -> %r",
                                       ("runs/m1", "train.max_steps", 6, 12), None)
        self.assertEqual("deepfm.train: warning: resuming runs/m1 with train.max_steps changed: 6 -> 12",
                         formatter.format(record))
        try:
            raise OSError("no space left")
        except OSError:
            failed = std_logging.LogRecord("absl", std_logging.ERROR, "x.py", 1, "the save failed", (), sys.exc_info())
        lines = formatter.format(failed).splitlines()
        self.assertEqual("deepfm.train: error: the save failed", lines[0])
        self.assertEqual("OSError: no space left", lines[-1])

class RunMainTest(tf.test.TestCase):

    def _run(self, error, detail):
        """(exit code or None, stderr) of `run_main` around a main raising `error`."""
        def main(argv):
            del argv
            raise error
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            entry.run_main(main, ["prog"], "prog", lambda: detail)
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
        self.assertEqual("id 7 outside [0, 5)", entry.error_message(error))


# A program started through `entry.run` that reports whether `tf.init_scope` inside a `tf.function`
# runs eagerly, as it does in TensorFlow 2 behaviour (and must, for `tf.saved_model.load` of an
# Estimator export).
INIT_SCOPE_PROBE = """\
import sys

from cli import entry


def main(argv):
    import tensorflow as tf
    seen = []

    @tf.function
    def probe():
        with tf.init_scope():
            seen.append(tf.executing_eagerly())
        return 0

    probe()
    print("init_scope eager:", seen[0])


entry.run(main, "probe", None, sys.argv.pop(1))
"""


class StartTest(tf.test.TestCase):
    """How `entry.run` starts a program, started as a user starts one (`tests.command_line`)."""

    def test_tensorflow_starts_in_tf2_behaviour_whenever_the_command_imports_it(self):
        for timing in (entry.TENSORFLOW_AFTER_FLAGS, entry.TENSORFLOW_BEFORE_FLAGS):
            with self.subTest(timing=timing):
                result = command_line.run(["python", "-c", INIT_SCOPE_PROBE, timing], self.get_temp_dir(),
                                          timeout=300)
                self.assertEqual(0, result.returncode, command_line.describe("probe", result))
                self.assertIn("init_scope eager: True", result.stdout)

    def test_help_lists_the_programs_flags_and_exits_0(self):
        script = ("from absl import flags\nfrom cli import entry\n"
                  "flags.DEFINE_integer('rows', 3, 'Rows to write.')\n"
                  "entry.run(lambda argv: print('main ran'), 'prog')\n")
        for flag in ("--help", "-?", "--helpshort", "--helpfull"):
            with self.subTest(flag=flag):
                result = command_line.run(["python", "-c", script, flag, "--rows=bad"], self.get_temp_dir())
                self.assertEqual(0, result.returncode, command_line.describe(flag, result))
                self.assertIn("--rows: Rows to write.", result.stdout)
                self.assertNotIn("main ran", result.stdout)

    def test_help_after_double_dash_belongs_to_the_program(self):
        self.assertIsNone(entry.requested_help(["prog", "--", "--help"]))
        self.assertEqual("help", entry.requested_help(["prog", "local", "--help"]))
        self.assertEqual("helpfull", entry.requested_help(["prog", "--helpfull"]))
        self.assertIsNone(entry.requested_help(["prog", "--help=false"]))
