"""Tests of the soak's `memory` fault on real memory cgroups (root needed; skipped otherwise).

A squeezed cgroup gets a process killed by the kernel for memory, and its
limit back; `deepfm.launch` names memory when a task is killed so, and
`--max_restarts` ends a job whose tasks need more than their host has, with
the reason. The tasks are a few lines of Python (`--program`), no TensorFlow.
"""

import contextlib
import os
import subprocess
import sys
import textwrap

import tensorflow as tf

from benchmarks import soak_memory
from jobs.local import memory as memory_lib

# A process that keeps taking memory, a MiB at a time, far past what a squeezed cgroup leaves it.
GROWING = textwrap.dedent("""
    import time
    chunks = []
    for _ in range(2000):
        chunks.append(bytearray(1024 * 1024))
        time.sleep(0.01)
    time.sleep(60)
""")
# A process whose memory stays put once taken: it needs no new page after the squeeze.
STEADY = textwrap.dedent("""
    import time
    chunk = b"\\1" * (64 * 1024 * 1024)
    print("ready", flush=True)
    time.sleep(600)
""")
# A task that needs GROWING_NEED of memory at once: more than LAUNCH_LIMIT.
NEEDY = "chunks = [bytearray(1024 * 1024) for _ in range(300)]\n"
LAUNCH_LIMIT = "64m"
WAIT_S = 120


def controller_or_skip(test_case):
    try:
        return memory_lib.find_controller()
    except memory_lib.MemoryLimitError as e:
        test_case.skipTest("memory cgroups cannot be made here: %s" % e)


@contextlib.contextmanager
def task_in(host, script):
    """A Python process running `script` in `host`'s cgroup (a STEADY one once ready); killed at the end if alive."""
    process = subprocess.Popen([sys.executable, "-c", script], preexec_fn=host.join, stdout=subprocess.PIPE,
                               text=True)
    try:
        if script == STEADY:
            assert process.stdout.readline().strip() == "ready", "the steady task did not start"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


class SqueezeTest(tf.test.TestCase):

    def test_a_squeezed_cgroup_has_a_process_killed_for_memory_and_gets_its_limit_back(self):
        controller = controller_or_skip(self)
        with memory_lib.HostMemories() as memories:
            host = memories.host("soak")
            with task_in(host, GROWING) as process:
                self.assertEqual(host.path, soak_memory.task_cgroup(process.pid, controller))
                squeeze = soak_memory.Squeeze(host.path, controller)
                original = squeeze.original
                limit = squeeze.tighten()
                self.assertLess(limit, memory_lib.UNLIMITED_FROM)
                self.assertEqual(-9, process.wait(WAIT_S), squeeze.describe())
                self.assertEqual(1, squeeze.killed())
                self.assertIn("lowered to", squeeze.describe())
                # The launcher reads the kill before the soak restores the limit (after the restart line).
                event = host.take_event()
                self.assertIsNotNone(event)
                self.assertIn("lowered on the cgroup while the host ran", event.describe())
                self.assertTrue(squeeze.restore())
                self.assertEqual(original, squeeze._read(controller.files.limit).strip())

    def test_a_press_gets_a_steady_task_killed_not_itself(self):
        controller = controller_or_skip(self)
        with memory_lib.HostMemories() as memories:
            host = memories.host("soak")
            press = None
            with task_in(host, STEADY) as process:
                try:
                    squeeze = soak_memory.Squeeze(host.path, controller)
                    squeeze.tighten()
                    press = soak_memory.Press(host.path)
                    self.assertEqual(-9, process.wait(WAIT_S), squeeze.describe())
                    self.assertEqual(1, squeeze.killed())
                    self.assertIsNone(press.process.poll(), "the press was killed, not the task")
                    self.assertFalse(press.killed_itself())
                    self.assertIn(press.process.pid, host.pids())
                    press.stop()
                    self.assertEqual(-9, press.process.returncode)
                    self.assertTrue(squeeze.restore())
                finally:
                    if press is not None and press.process.poll() is None:
                        press.process.kill()
                        press.process.wait()

    def test_squeezing_until_killed_presses_a_steady_task_and_stops_the_press(self):
        controller = controller_or_skip(self)
        with memory_lib.HostMemories() as memories:
            host = memories.host("soak")
            with task_in(host, STEADY) as process:
                squeeze = soak_memory.Squeeze(host.path, controller)
                self.assertTrue(soak_memory.squeeze_until_killed(squeeze, WAIT_S, lambda: True, 0.5, 0.05))
                self.assertEqual(-9, process.wait(WAIT_S))
                self.assertEqual(1, squeeze.killed())
                self.assertEqual([], host.pids(), "the press outlived the squeeze")
                self.assertTrue(squeeze.restore())

    def test_a_process_outside_the_launchers_cgroups_is_refused(self):
        controller = controller_or_skip(self)
        with self.assertRaisesRegex(soak_memory.SqueezeError, "not in a host cgroup of the launcher"):
            soak_memory.task_cgroup(os.getpid(), controller)


class MaxRestartsTest(tf.test.TestCase):

    def test_a_failure_for_memory_that_repeats_ends_at_max_restarts_with_its_reason(self):
        controller_or_skip(self)
        program = self.create_tempfile("needy.py", content=NEEDY).full_path
        log_dir = self.create_tempdir().full_path
        process = subprocess.run(
            [sys.executable, "-m", "deepfm.launch", "--strategy", "ps", "--num_ps", "1", "--num_workers", "1",
             "--program", program, "--host_memory", LAUNCH_LIMIT, "--max_restarts", "1", "--log_dir", log_dir,
             "--", "--model_dir", log_dir],
            capture_output=True, text=True, timeout=WAIT_S)
        output = process.stdout + process.stderr
        self.assertNotEqual(0, process.returncode, output)
        self.assertRegex(output, r"restart 1 of 1: task \S+ was killed for memory")
        self.assertRegex(output, r"no restart left \(--max_restarts 1\): task \S+ was killed for memory \(exit code "
                                 r"-9.*against its limit of 64 MiB \(64m\)")
        self.assertRegex(output, r"launch failed: task \S+ was killed for memory")
        self.assertNotIn("restart 2", output)


if __name__ == "__main__":
    tf.test.main()
