"""Runs `python -m deepfm.launch` in tests and makes sure nothing outlives them.

The launcher starts as a user starts it (`tests.command_line`: a minimal
environment, the working directory the test gives); it passes that
environment on to the tasks and ranks it starts, as it does for a user.
"""

import glob
import os
import re
import signal
import subprocess
import time

import psutil

from jobs.local import processes
from tests import command_line, paths

LAUNCH_TIMEOUT_S = 240
POLL_S = 0.2
# How often `wait_for_step` looks for a new checkpoint (a listing of the model directory, well under a
# millisecond): a fault test's kill or signal follows the checkpoint within this, not within POLL_S.
STEP_POLL_S = 0.02
# A complete checkpoint: the chief's (rank 0's) bundle, which a `hybrid` job writes after every rank's
# `.shard-<rank>-of-<ranks>` bundle (strategies/sharded/checkpoint.py).
CHECKPOINT_INDEX = re.compile(r"^model\.ckpt-(\d+)\.index$")
# Where a Horovod rank finds its rank: Gloo's variable, then Open MPI's.
RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")
REPO_ROOT = paths.REPO_ROOT


class LaunchedJob:
    """A launcher process started by a test, with every process it starts tracked.

    The launcher runs in its own process group; a cleanup registered on the
    test case kills it and every process it was seen to start, whatever the
    test's outcome.

    Args:
      test_case: the test; its cleanup stops everything.
      launch_args: the launcher's flags (before `--`).
      log_dir: the launcher's `--log_dir`.
      train_args: the flags after `--`.
      cwd: the launcher's working directory (relative paths in the flags
        are relative to it).
    """

    def __init__(self, test_case, launch_args, log_dir, train_args, cwd=REPO_ROOT):
        self.cwd = cwd
        self.log_dir = os.path.join(cwd, log_dir)
        self.output_path = os.path.join(os.path.dirname(self.log_dir), "launcher_output.txt")
        os.makedirs(os.path.dirname(self.output_path), exist_ok=True)
        self.argv = command_line.python_module("deepfm.launch", *launch_args, "--log_dir", log_dir, "--",
                                               *train_args)
        with open(self.output_path, "wb") as output:
            self.process = command_line.start(self.argv, cwd, stdout=output, stderr=subprocess.STDOUT)
        self._seen = {}
        test_case.addCleanup(self.kill)

    def _track(self):
        """Records the launcher's descendants and tasks (psutil guards against pid reuse)."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for child in children:
            self._seen.setdefault(child.pid, child)
        for pid in self.task_pids().values():
            if pid not in self._seen:
                try:
                    self._seen[pid] = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    pass

    def task_pids(self):
        """Task name -> pid, from the launcher's pid files."""
        pids = {}
        for path in glob.glob(os.path.join(self.log_dir, "*.pid")):
            with open(path) as f:
                text = f.read().strip()
            if text:
                pids[os.path.basename(path)[:-len(".pid")]] = int(text)
        return pids

    def rank_logs(self, rank_dir):
        """Every Horovod rank's output under `<log_dir>/<rank_dir>`, concatenated (Gloo and MPI layouts)."""
        text = []
        for path in sorted(glob.glob(os.path.join(self.log_dir, rank_dir, "**", "*"), recursive=True)):
            if os.path.isfile(path):
                with open(path, errors="replace") as f:
                    text.append(f.read())
        return "".join(text)

    def log(self, task):
        """The log of `task` (e.g. `worker_0`)."""
        with open(os.path.join(self.log_dir, task + ".log"), errors="replace") as f:
            return f.read()

    def output(self):
        with open(self.output_path, errors="replace") as f:
            return f.read()

    def wait_for_log(self, task, pattern, timeout=LAUNCH_TIMEOUT_S):
        """Waits until the log of `task` contains `pattern`; False if the launcher ended first."""
        deadline = time.monotonic() + timeout
        path = os.path.join(self.log_dir, task + ".log")
        while time.monotonic() < deadline and self.process.poll() is None:
            self._track()
            if os.path.exists(path) and pattern in self.log(task):
                return True
            time.sleep(POLL_S)
        return False

    def wait_for_checkpoints(self, model_dir, count=2, timeout=LAUNCH_TIMEOUT_S):
        """Waits until `model_dir` holds `count` checkpoints (the first is the chief's step-0 one).

        Returns:
          True once they are there; False if the launcher ended first.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            self._track()
            if len(glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))) >= count:
                return True
            time.sleep(POLL_S)
        return False

    def wait_for_step(self, model_dir, step, timeout=LAUNCH_TIMEOUT_S):
        """Waits until `model_dir` holds a complete checkpoint at global step `step` or later.

        Returns:
          The step of the latest such checkpoint; None if the launcher ended first or `timeout` passed.
        """
        deadline = time.monotonic() + timeout
        tracked = None
        while time.monotonic() < deadline and self.process.poll() is None:
            if tracked is None or time.monotonic() - tracked >= POLL_S:
                self._track()
                tracked = time.monotonic()
            steps = checkpoint_steps(model_dir)
            if steps and steps[-1] >= step:
                return steps[-1]
            time.sleep(STEP_POLL_S)
        return None

    def rank_pids(self):
        """Horovod rank -> pid of its running `deepfm.train` process (from its rank variable, Gloo or MPI)."""
        self._track()
        ranks = {}
        for process in self._seen.values():
            try:
                cmdline = process.cmdline()
                if cmdline and os.path.basename(cmdline[0]).startswith("python") and "deepfm.train" in cmdline:
                    environ = process.environ()
                    rank = next((environ[v] for v in RANK_VARIABLES if v in environ), None)
                    if rank is not None:
                        ranks[int(rank)] = process.pid
            except psutil.Error:
                continue
        return ranks

    def wait(self, timeout=LAUNCH_TIMEOUT_S):
        """Waits for the launcher; returns (exit code, its output)."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._track()
            time.sleep(POLL_S)
        if self.process.poll() is None:
            self.kill()
            raise AssertionError("the launcher ran past %d s; output:\n%s" % (timeout, self.output()))
        return self.process.returncode, self.output()

    def live_processes(self):
        """Processes the launcher started (tasks, their children) that still run."""
        self._track()
        return processes.still_running(self._seen.values())

    def assert_no_process_left(self):
        alive = self.live_processes()
        if alive:
            raise AssertionError("processes left behind: %s" % ["%d %s" % (p.pid, p.cmdline()) for p in alive])

    def kill(self):
        """Kills the launcher and everything it started (a no-op when all are gone)."""
        self._track()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        for process in self.live_processes():
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


def checkpoint_steps(model_dir):
    """The global steps of the complete checkpoints in `model_dir`, ascending."""
    try:
        names = os.listdir(model_dir)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(CHECKPOINT_INDEX.match, names) if m)
