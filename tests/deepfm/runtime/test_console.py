"""Tests of the run's console: progress lines, the live bar, a disabled console."""

import io
import os

import tensorflow as tf

from deepfm.runtime import console


class FormatTest(tf.test.TestCase):

    def test_progress_line_has_every_part(self):
        line = console.format_progress(300, 2634, 88429.4, 0.47123, elapsed=4.2, remaining=31.4, epoch=1,
                                       num_epochs=3)
        self.assertEqual("step 300/2634 | epoch 1/3 | 88429 ex/s | loss 0.4712 | elapsed 0:00:04 | "
                         "left 0:00:31", line)

    def test_unknowns(self):
        line = console.format_progress(5, 10, 1.0, None, elapsed=3700, remaining=None)
        self.assertEqual("step 5/10 | 1 ex/s | loss n/a | elapsed 1:01:40 | left ?", line)
        line = console.format_progress(5, None, 1.0, 0.5, elapsed=3, remaining=None)
        self.assertEqual("step 5/? | 1 ex/s | loss 0.5000 | elapsed 0:00:03 | left ?", line)

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

    def test_live_line_without_an_end_has_no_bar(self):
        out = io.StringIO()
        console.Console(stream=out, live=True).progress("step 1/?", None)
        self.assertEqual("\r\033[Kstep 1/?", out.getvalue())

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
