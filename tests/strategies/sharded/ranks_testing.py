"""What the tests of `strategies.sharded` share: Horovod in this process, and real ranks under horovodrun.

`RanksTestCase` runs `tests.strategies.sharded.rank_program` under
Horovod's launcher as `deepfm.launch` starts it (Gloo; `jobs.local.horovod_runner`)
in its own process group, stopped with every process it started on cleanup,
and reads back what the ranks recorded.
"""

import os
import shutil
import sys
import tempfile
from typing import Dict, List

import numpy as np
import tensorflow as tf

from jobs.local import horovod_runner, processes
from tests import command_line, paths

HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
# Horovod's launcher as `deepfm.launch` starts it (horovodrun less its forked check of the build): the command
# line that starts the ranks, followed by horovodrun's arguments.
HOROVODRUN_COMMAND = horovod_runner.command(sys.executable)
RANK_PROGRAM = "tests.strategies.sharded.rank_program"
RUN_TIMEOUT_SECS = 300
STALL_SHUTDOWN_SECS = 120
STALL_WARNING = "subset of ranks"
ERROR_LINE = "Error"
ERROR_LINES_SHOWN = 10
FLOAT32_TOLERANCE = dict(rtol=1e-5, atol=1e-5)
# float16 rows: about 3 significant digits on values of order 1.
FP16_TOLERANCE = dict(rtol=0.0, atol=1e-2)


def tempdir(test: tf.test.TestCase) -> str:
    """A fresh directory removed after the test."""
    path = tempfile.mkdtemp(dir=test.get_temp_dir())
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


def import_horovod(test: tf.test.TestCase):
    """`horovod.tensorflow`, initialized in this process (one rank); skips the test without Horovod."""
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        test.skipTest("Horovod is not installed: %s" % e)
    hvd.init()
    return hvd


def assemble(shards: List[np.ndarray], num_rows: int) -> np.ndarray:
    """The full table from every rank's shard (rank r holds ids r, r + size, ...)."""
    size = len(shards)
    full = np.zeros((num_rows,) + shards[0].shape[1:], shards[0].dtype)
    for rank, shard in enumerate(shards):
        full[rank::size] = shard
    return full


def initialize(session: tf.compat.v1.Session) -> None:
    """Initializes the global and the local variables (the exchanges' places per owner are local)."""
    session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])


class RanksTestCase(tf.test.TestCase):
    """Runs the rank program under horovodrun in its own process group."""

    def setUp(self):
        super().setUp()
        import_horovod(self)
        if not os.access(HOROVODRUN, os.X_OK):
            self.skipTest("no horovodrun beside %s" % sys.executable)
        self.work_dir = tempdir(self)
        self.rank_tmp = os.path.join(self.work_dir, "tmp")
        self.log_dir = os.path.join(self.work_dir, "logs")
        os.makedirs(self.rank_tmp)

    def horovodrun(self, size: int, flags: List[str], name: str) -> None:
        """Runs the rank program at `size` ranks with `flags`; fails the test with the ranks' error lines."""
        # A user's environment (`tests.command_line`) and what the test sets on purpose: a private
        # TMPDIR (no rank may leave files there), Horovod's stall shutdown, and for the rank program
        # of tests/ (which the virtual environment does not install) the repository on PYTHONPATH.
        env = command_line.environment(dict(TMPDIR=self.rank_tmp,
                                            HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=str(STALL_SHUTDOWN_SECS),
                                            PYTHONPATH=paths.REPO_ROOT))
        argv = HOROVODRUN_COMMAND + ["--gloo", "-np", str(size), "-H", "localhost:%d" % size,
                "python", "-m", RANK_PROGRAM] + flags
        group = processes.ProcessGroup(self.log_dir)
        self.addCleanup(group.stop)
        task = group.start(name, argv, env=env)
        try:
            group.wait(timeout=RUN_TIMEOUT_SECS)
        except (processes.TaskFailedError, TimeoutError) as e:
            with open(task.log_path) as f:
                errors = [line for line in f if ERROR_LINE in line]
            self.fail("%s\nerror lines of %s:\n%s" % (e, task.log_path, "".join(errors[-ERROR_LINES_SHOWN:])))
        with open(task.log_path) as f:
            self.assertNotIn(STALL_WARNING, f.read())
        self.assertEqual([], command_line.left_in(self.rank_tmp), "a rank left its private directory behind")

    @staticmethod
    def records(result_dir: str, prefix: str, size: int) -> List[Dict[str, np.ndarray]]:
        """What each rank wrote to `<result_dir>/<prefix>-rank-<r>.npz`."""
        records = []
        for rank in range(size):
            with np.load(os.path.join(result_dir, "%s-rank-%d.npz" % (prefix, rank))) as record:
                records.append(dict(record))
        return records
