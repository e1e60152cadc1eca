"""Tests of the shared benchmark helpers that measure real processes."""

import os
import subprocess
import sys
import time

import psutil
import tensorflow as tf

from benchmarks import common
from tests import command_line

SAMPLE_SECONDS = 0.05
# The child burns CPU for this long, holding this much memory.
BUSY_SECONDS = 0.6
HELD_MIB = 64
LABEL_WAIT_SECONDS = 10
# How long the forked child of `test_a_process_with_its_parents_command_line_is_a_fork_of_it` lives.
FORK_SECONDS = 1.0
MIB = 1 << 20
BUSY_CHILD = (
    "import time\n"
    "held = bytearray(%d)\n"
    "end = time.time() + %f\n"
    "while time.time() < end:\n"
    "    pass\n" % (HELD_MIB * MIB, BUSY_SECONDS))

# Starts two children that run the script in its argv[1]: one directly, one through a child of its own (the
# process to exclude, whose pid it prints).
EXCLUDED_PARENT = (
    "import subprocess, sys\n"
    "busy = sys.argv[1]\n"
    "kept = subprocess.Popen([sys.executable, '-c', busy])\n"
    "left = subprocess.Popen([sys.executable, '-c', "
    "'import subprocess, sys; subprocess.run([sys.executable, \"-c\", sys.argv[1]])', busy])\n"
    "print(left.pid, flush=True)\n"
    "kept.wait()\n"
    "left.wait()\n")


class ProcessTreeSamplerTest(tf.test.TestCase):

    def test_measures_cpu_and_peak_memory_of_a_process_and_its_child(self):
        # A parent that starts the busy child and waits: the sampler must find the grandchild.
        parent = subprocess.Popen([sys.executable, "-c",
                                   "import subprocess, sys; subprocess.run([sys.executable, '-c', %r])"
                                   % BUSY_CHILD])
        self.addCleanup(parent.kill)
        with common.ProcessTreeSampler(parent.pid, SAMPLE_SECONDS) as sampler:
            parent.wait(timeout=60)
        self.assertEqual(parent.returncode, 0)
        self.assertLen(sampler.processes, 2)
        self.assertGreater(max(p.peak_rss_bytes for p in sampler.processes), HELD_MIB * MIB)
        first, last = sampler.samples[0][0], sampler.samples[-1][0]
        used = sampler.cpu_seconds_at(last) - sampler.cpu_seconds_at(first)
        # The child was busy for BUSY_SECONDS; on a shared machine it may get less than a core.
        self.assertGreater(used, 0.2 * BUSY_SECONDS)
        self.assertLessEqual(used, (last - first) * (os.cpu_count() or 1) + SAMPLE_SECONDS)
        self.assertTrue(all(p.label for p in sampler.processes))

    def test_an_excluded_process_is_left_out_with_its_descendants(self):
        # A parent of two busy children, one of them excluded (with the grandchild it starts).
        parent = subprocess.Popen([sys.executable, "-c", EXCLUDED_PARENT, BUSY_CHILD], stdout=subprocess.PIPE,
                                  text=True)
        self.addCleanup(parent.kill)
        left = int(parent.stdout.readline())
        with common.ProcessTreeSampler(parent.pid, SAMPLE_SECONDS, exclude=(left,)) as sampler:
            parent.wait(timeout=60)
        self.assertEqual(0, parent.returncode)
        seen = {p.pid for p in sampler.processes}
        self.assertIn(parent.pid, seen)
        self.assertNotIn(left, seen)
        # The parent and its kept child; never the excluded child's own child.
        self.assertLen(seen, 2)

    def test_labels_name_the_module_and_the_task(self):
        env = command_line.environment({"TF_CONFIG": '{"task": {"type": "worker", "index": 1}}'})
        child = subprocess.Popen([sys.executable, "-m", "timeit", "-n", "1", "-r", "1", "import time; time.sleep(30)"],
                                 env=env)
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        process = psutil.Process(child.pid)
        # Before its exec the child shows this process's command line (a fork of it), right after it perhaps
        # none yet (""): the label is the child's own once the kernel shows its command line.
        deadline = time.time() + LABEL_WAIT_SECONDS
        label = common.process_label(process)
        while (not label or label.startswith(common.FORK_OF)) and time.time() < deadline:
            time.sleep(SAMPLE_SECONDS)
            label = common.process_label(process)
        self.assertEqual(label, "timeit (worker_1)")

    def test_a_process_with_its_parents_command_line_is_a_fork_of_it(self):
        env = command_line.environment({"HOROVOD_RANK": "0"})
        parent = subprocess.Popen([sys.executable, "-m", "timeit", "-n", "1", "-r", "1",
                                   "import os, time\npid = os.fork()\ntime.sleep(%r)\n"
                                   "os._exit(0) if pid == 0 else os.waitpid(pid, 0)" % FORK_SECONDS], env=env)
        self.addCleanup(parent.kill)
        with common.ProcessTreeSampler(parent.pid, SAMPLE_SECONDS) as sampler:
            parent.wait(timeout=60)
        self.assertEqual(0, parent.returncode)
        self.assertEqual(["timeit (rank 0)", common.FORK_OF + "timeit (rank 0)"],
                         [p.label for p in sampler.processes])

    def test_interpolation_needs_two_samples(self):
        sampler = common.ProcessTreeSampler(0, SAMPLE_SECONDS)
        with self.assertRaisesRegex(ValueError, "sampled 0 time"):
            sampler.cpu_seconds_at(0.0)


if __name__ == "__main__":
    tf.test.main()
