"""Tests of jobs.local.horovod_runner: Horovod's launcher as `deepfm.launch` starts it, on real ranks."""

import os
import shutil

import tensorflow as tf

from jobs.local import horovod_runner
from tests import command_line

RANKS = 2
# Each rank says who it is and which controller started it.
RANK_PROGRAM = "import os; print('rank', os.environ['HOROVOD_RANK'], 'of', os.environ['HOROVOD_SIZE'], " \
               "os.environ['HOROVOD_CONTROLLER'])"
TIMEOUT_S = 120


class HorovodRunnerTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        self.cwd = self.create_tempdir().full_path

    def run_runner(self, *args):
        command = command_line.python_module(horovod_runner.PROGRAM, *args)
        return command, command_line.run(command, self.cwd, env=command_line.environment(), timeout=TIMEOUT_S)

    def test_starts_real_gloo_ranks_of_any_command(self):
        if shutil.which("horovodrun", path=command_line.user_path()) is None:
            self.skipTest("Horovod is not installed in the virtual environment")
        command, result = self.run_runner("--gloo", "-np", str(RANKS), "-H", "localhost:%d" % RANKS,
                                          "python", "-c", RANK_PROGRAM)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        for rank in range(RANKS):
            self.assertIn("[%d]<stdout>:rank %d of %d gloo" % (rank, rank, RANKS), result.stdout)

    def test_a_command_line_without_its_controller_is_refused_before_any_rank_starts(self):
        command, result = self.run_runner("-np", str(RANKS), "python", "-c", "open('started', 'w')")
        self.assertEqual(horovod_runner.EXIT_USAGE, result.returncode, command_line.describe(command, result))
        self.assertEqual("jobs.local.horovod_runner: error: name the controller, --gloo or --mpi (horovodrun would "
                         "choose one by checking the build); got: -np 2 python -c open('started', 'w')\n",
                         result.stderr)
        self.assertEqual("", result.stdout)
        self.assertEqual([], os.listdir(self.cwd))
