"""Tests of deepfm.processes: supervision of real child processes."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import tensorflow as tf
from absl.testing import parameterized

from jobs.local import processes
from tests import paths

GRACE_S = 1.0
WAIT_S = 30
SLEEP_FOREVER = "import time\nwhile True: time.sleep(1)"


def python(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


class ProcessGroupTest(tf.test.TestCase, parameterized.TestCase):

    def group(self, **options):
        options.setdefault("stop_grace_seconds", GRACE_S)
        options.setdefault("poll_seconds", 0.05)
        group = processes.ProcessGroup(self.create_tempdir().full_path, **options)
        self.addCleanup(group.stop)
        return group

    def assertGone(self, pids):
        for pid in pids:
            self.assertFalse(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE,
                             "process %d is still running" % pid)

    def test_success_logs_and_pid_files(self):
        group = self.group()
        first = group.start("a_0", python("print('hello from a')"))
        group.start("b_0", python("import sys; print('to stderr', file=sys.stderr)"))
        group.wait(timeout=WAIT_S)
        self.assertEqual([t.name for t in group.tasks], ["a_0", "b_0"])
        self.assertEqual([t.poll() for t in group.tasks], [0, 0])
        self.assertIn("hello from a", processes.log_tail(first.log_path))
        self.assertIn("to stderr", processes.log_tail(os.path.join(group.log_dir, "b_0.log")))
        with open(first.pid_path) as f:
            self.assertEqual(int(f.read()), first.pid)

    def test_failure_stops_the_others_and_names_the_task(self):
        group = self.group()
        sleeper = group.start("ps_0", python(SLEEP_FOREVER))
        group.start("worker_0", python("""
            import sys
            for i in range(30):
                print('line', i)
            sys.exit(3)
        """))
        start = time.monotonic()
        with self.assertRaises(processes.TaskFailedError) as raised:
            group.wait(timeout=WAIT_S)
        error = raised.exception
        self.assertEqual((error.task, error.returncode), ("worker_0", 3))
        self.assertRegex(str(error), r"task worker_0 failed with exit code 3; last lines of .*worker_0\.log")
        self.assertIn("line 29", str(error))
        self.assertLen(error.log_tail.splitlines(), processes.LOG_TAIL_LINES)
        self.assertLess(time.monotonic() - start, WAIT_S)
        self.assertGone([sleeper.pid])

    def test_killed_task(self):
        group = self.group()
        victim = group.start("worker_0", python(SLEEP_FOREVER))
        other = group.start("worker_1", python(SLEEP_FOREVER))
        os.kill(victim.pid, signal.SIGKILL)
        with self.assertRaisesRegex(processes.TaskFailedError,
                                    r"task worker_0 failed with exit code -9 \(killed by SIGKILL\)"):
            group.wait(timeout=WAIT_S)
        self.assertGone([other.pid])

    def test_stop_reaches_descendants_in_other_sessions_and_stubborn_ones(self):
        pid_file = os.path.join(self.create_tempdir().full_path, "grandchild.pid")
        group = self.group()
        task = group.start("launcher_0", python("""
            import os, signal, subprocess, sys, time
            code = 'import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\nwhile True: time.sleep(1)'
            child = subprocess.Popen([sys.executable, '-c', code], start_new_session=True)
            with open(%r + '.tmp', 'w') as f:
                f.write(str(child.pid))
            os.replace(%r + '.tmp', %r)
            while True: time.sleep(1)
        """ % (pid_file, pid_file, pid_file)))
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(pid_file) as f:
            grandchild = int(f.read())
        self.assertNotEqual(os.getpgid(grandchild), os.getpgid(task.pid))
        with self.assertRaises(TimeoutError):
            group.wait(timeout=0.5)
        self.assertGone([task.pid, grandchild])

    def test_service_exits_after_the_others(self):
        group = self.group()
        group.start("ps_0", python("import time; time.sleep(1.0)"), service=True)
        group.start("chief_0", python("pass"))
        group.wait(timeout=WAIT_S)
        self.assertEqual([t.poll() for t in group.tasks], [0, 0])

    def test_a_failed_service_stops_the_training_tasks_without_their_grace(self):
        # A training task that would spend its grace on a save needing the failed service (it ignores SIGTERM).
        group = self.group(stop_grace_seconds=WAIT_S)
        chief = group.start("chief_0", python("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                              "print('ready', flush=True)\nwhile True: time.sleep(1)"))
        service = group.start("ps_0", python(SLEEP_FOREVER), service=True)
        deadline = time.monotonic() + WAIT_S
        while "ready" not in processes.log_tail(chief.log_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(service.pid, signal.SIGKILL)
        start = time.monotonic()
        with self.assertRaisesRegex(processes.TaskFailedError, r"task ps_0 failed with exit code -9"):
            group.wait(timeout=WAIT_S)
        self.assertLess(time.monotonic() - start, WAIT_S / 2)
        self.assertGone([chief.pid])

    def test_a_failed_training_task_leaves_the_others_their_grace(self):
        group = self.group(stop_grace_seconds=GRACE_S)
        stubborn = group.start("chief_0", python("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                                 "print('ready', flush=True)\nwhile True: time.sleep(1)"))
        group.start("ps_0", python(SLEEP_FOREVER), service=True)
        deadline = time.monotonic() + WAIT_S
        while "ready" not in processes.log_tail(stubborn.log_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        group.start("worker_0", python("import sys; sys.exit(2)"))
        start = time.monotonic()
        with self.assertRaisesRegex(processes.TaskFailedError, r"task worker_0 failed with exit code 2"):
            group.wait(timeout=WAIT_S)
        self.assertGreaterEqual(time.monotonic() - start, GRACE_S)
        self.assertGone([stubborn.pid])

    def test_service_that_never_exits_fails(self):
        group = self.group(service_grace_seconds=0.5)
        service = group.start("ps_0", python(SLEEP_FOREVER), service=True)
        group.start("chief_0", python("pass"))
        with self.assertRaisesRegex(processes.TaskFailedError,
                                    r"task ps_0 was still running 0 s after every other task finished"):
            group.wait(timeout=WAIT_S)
        self.assertGone([service.pid])

    def test_timeout_names_the_running_tasks(self):
        group = self.group()
        task = group.start("worker_0", python(SLEEP_FOREVER))
        group.start("chief_0", python("pass"))
        # chief_0 may still be starting on a loaded machine: then it is named too.
        with self.assertRaisesRegex(TimeoutError, r"tasks (chief_0, )?worker_0 still running after 0 s"):
            group.wait(timeout=0.3)
        self.assertGone([task.pid])

    def test_leaving_the_block_stops_everything(self):
        with self.assertRaisesRegex(RuntimeError, "boom"):
            with processes.ProcessGroup(self.create_tempdir().full_path, stop_grace_seconds=GRACE_S) as group:
                task = group.start("worker_0", python(SLEEP_FOREVER))
                raise RuntimeError("boom")
        self.assertGone([task.pid])

    def test_tasks_die_with_a_killed_supervisor(self):
        pid_file = os.path.join(self.create_tempdir().full_path, "task.pid")
        supervisor = subprocess.Popen(python("""
            import os, sys, time
            from jobs.local import processes
            group = processes.ProcessGroup(%r)
            task = group.start("worker_0", [sys.executable, "-c", %r])
            with open(%r + ".tmp", "w") as f:
                f.write(str(task.pid))
            os.replace(%r + ".tmp", %r)
            time.sleep(60)
        """ % (self.create_tempdir().full_path, SLEEP_FOREVER, pid_file, pid_file, pid_file)),
            cwd=paths.REPO_ROOT)
        self.addCleanup(supervisor.kill)
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(pid_file) as f:
            task = psutil.Process(int(f.read()))
        self.addCleanup(lambda: task.kill() if task.is_running() else None)
        supervisor.kill()
        supervisor.wait()
        task.wait(WAIT_S)
        self.assertFalse(task.is_running())

    def test_duplicate_name(self):
        group = self.group()
        group.start("worker_0", python("pass"))
        with self.assertRaisesRegex(ValueError, "task 'worker_0' is already started"):
            group.start("worker_0", python("pass"))


class HelpersTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.parameters((0, "exit code 0"), (3, "exit code 3"),
                              (-9, "exit code -9 (killed by SIGKILL)"), (-15, "exit code -15 (killed by SIGTERM)"))
    def test_describe_returncode(self, code, text):
        self.assertEqual(processes.describe_returncode(code), text)

    def test_log_tail(self):
        path = self.create_tempfile(content="".join("line %d\n" % i for i in range(100))).full_path
        self.assertEqual(processes.log_tail(path, lines=2), "line 98\nline 99")
        self.assertEqual(processes.log_tail(os.path.join(self.get_temp_dir(), "missing.log")), "")

    def test_log_tail_keeps_the_programs_error_line_a_supervisor_pushed_out(self):
        # SageMaker's training toolkit reports a failure in lines of its own after the script's error.
        lines = ["start", "deepfm.train: error: --deep_layers must be a list of integers, got '8,x'",
                 "(--help lists the flags; --verbosity 0 shows the details)"]
        lines += ["sagemaker-training-toolkit ERROR    line %d" % i for i in range(30)]
        path = self.create_tempfile(content="\n".join(lines) + "\n").full_path
        self.assertEqual(lines[1:3] + [processes.SKIPPED] + lines[-5:], processes.log_tail(path, lines=5).splitlines())
        # An error line within the tail, or none at all: the tail alone.
        self.assertEqual(lines[-40:], processes.log_tail(path, lines=40).splitlines())
        traceback_end = self.create_tempfile(content="Traceback\nValueError: bad\nbye\n").full_path
        self.assertEqual("ValueError: bad\nbye", processes.log_tail(traceback_end, lines=2))

    def test_free_ports_are_distinct_and_bindable(self):
        ports = processes.free_ports(4)
        self.assertLen(set(ports), 4)
        for port in ports:
            with socket.socket() as sock:
                sock.bind(("localhost", port))

    def test_free_ports_are_below_the_ephemeral_range_and_skip_a_taken_one(self):
        low, _ = processes.ephemeral_port_range()
        first = processes.free_ports(3, seed=5)
        self.assertTrue(all(processes.SERVICE_PORT_LOW <= port < low for port in first), (first, low))
        with socket.socket() as taken:
            taken.bind(("localhost", first[0]))
            again = processes.free_ports(3, seed=5)
        self.assertNotIn(first[0], again)
        self.assertEqual(first[1:], again[:2])

    def test_the_ephemeral_range_is_read_or_linux_default(self):
        path = self.create_tempfile(content="40000\t50000\n").full_path
        self.assertEqual((40000, 50000), processes.ephemeral_port_range(path))
        self.assertEqual(processes.DEFAULT_EPHEMERAL_RANGE, processes.ephemeral_port_range(path + ".missing"))

    def test_signals_raise(self):
        before = signal.getsignal(signal.SIGTERM)
        with self.assertRaises(processes.Terminated) as raised:
            with processes.signals_raise():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(WAIT_S)
        self.assertEqual(raised.exception.signum, signal.SIGTERM)
        self.assertEqual(str(raised.exception), "received SIGTERM")
        self.assertIs(signal.getsignal(signal.SIGTERM), before)


if __name__ == "__main__":
    tf.test.main()
