"""Tests of jobs.local.memory: sizes, the controller, and real memory cgroups (root needed; skipped otherwise).

The cgroup tests run real processes under real limits: a process that
allocates twice its host's limit is killed by the kernel and reported as
killed for memory; one under its limit is unaffected; every cgroup made is
removed (its directory is gone). The allocations are at most 300 MiB and the
limits 150 MiB, so a test never holds more than that.
"""

import os
import subprocess
import sys
import textwrap

from absl.testing import absltest, parameterized

from jobs.local import memory, processes

MIB = 1024 * 1024
LIMIT = "150m"
# Twice the limit: the kernel kills the allocating process at the limit.
OVER_LIMIT_MIB = 300
UNDER_LIMIT_MIB = 20
WAIT_S = 60
ALLOCATE = "import time\nb = bytearray(%d * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('allocated')"


def python(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def controller_or_skip(test_case):
    try:
        return memory.find_controller()
    except memory.MemoryLimitError as e:
        test_case.skipTest("memory cgroups cannot be made here: %s" % e)


class SizeTest(parameterized.TestCase):

    @parameterized.parameters(("6g", 6 * 1024 ** 3), ("6GiB", 6 * 1024 ** 3), ("6gb", 6 * 1024 ** 3),
                              ("6500m", 6500 * MIB), ("150M", 150 * MIB), ("1.5g", int(1.5 * 1024 ** 3)),
                              ("512k", None), ("1500000000", 1500000000))
    def test_accepted_forms(self, text, expected):
        if expected is None:
            with self.assertRaisesRegex(ValueError, r"--host_memory '512k' is 524288 bytes, below the 6 MiB"):
                memory.parse_size(text)
            return
        self.assertEqual(expected, memory.parse_size(text))

    @parameterized.parameters("abc", "-1g", "6x", "6 gigs", "")
    def test_bad_sizes_are_refused_with_the_value_and_the_forms(self, text):
        with self.assertRaisesRegex(ValueError, r"--host_memory %r is not a size: give bytes .*6g, 6GiB, 6500m"
                                    % text):
            memory.parse_size(text)

    @parameterized.parameters(("8Gi", 8 * 1024 ** 3), ("500M", 500 * 10 ** 6), ("129e6", 129 * 10 ** 6),
                              ("128974848", 128974848), ("1.5Gi", int(1.5 * 1024 ** 3)), ("6500m", 7))
    def test_kubernetes_quantities(self, text, expected):
        self.assertEqual(expected, memory.parse_kubernetes_quantity(text))

    def test_a_bad_kubernetes_quantity_names_where_it_is(self):
        with self.assertRaisesRegex(ValueError, r"pod p: resources.limits.memory '8 GB' is not a Kubernetes "
                                    r"quantity: give e.g. 8Gi"):
            memory.parse_kubernetes_quantity("8 GB", "pod p: resources.limits.memory")

    def test_format_size(self):
        self.assertEqual(["unknown", "512 B", "150 MiB", "6.0 GiB"],
                         [memory.format_size(size) for size in (None, 512, 150 * MIB, 6 * 1024 ** 3)])


class ControllerTest(parameterized.TestCase):

    def write(self, name, text):
        path = os.path.join(self.create_tempdir().full_path, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_no_memory_controller_is_refused_in_one_line(self):
        mounts = self.write("mounts", "proc /proc proc rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
        with self.assertRaises(memory.MemoryLimitError) as raised:
            memory.find_controller(mounts_file=mounts)
        self.assertRegex(str(raised.exception), r"^no cgroup memory controller is mounted here .*leave "
                         r"--host_memory out$")
        self.assertNotIn("\n", str(raised.exception))

    def test_a_v1_hierarchy_nests_in_this_process_cgroup(self):
        root = self.create_tempdir().full_path
        os.makedirs(os.path.join(root, "outer", "inner"))
        mounts = self.write("mounts", "cgroup2 /nowhere cgroup2 rw 0 0\ncgroup %s cgroup rw,memory 0 0\n" % root)
        own = self.write("cgroup", "5:cpu:/\n4:memory:/outer/inner\n0::/\n")
        controller = memory.find_controller(mounts_file=mounts, self_cgroup=own)
        self.assertEqual(memory.Controller(memory.CGROUP_V1, os.path.join(root, "outer", "inner")), controller)
        self.assertEqual("memory.limit_in_bytes", controller.files.limit)
        # A path this mount does not show (another cgroup namespace): its root.
        own = self.write("cgroup", "4:memory:/elsewhere\n")
        self.assertEqual(root, memory.find_controller(mounts_file=mounts, self_cgroup=own).parent)

    def test_a_v2_hierarchy_with_the_memory_controller_delegated(self):
        root = self.create_tempdir().full_path
        os.makedirs(os.path.join(root, "job"))
        for directory, controllers in ((root, "cpu io memory pids"), (os.path.join(root, "job"), "memory")):
            with open(os.path.join(directory, memory.V2_CONTROLLERS_FILE), "w") as f:
                f.write(controllers + "\n")
        with open(os.path.join(root, "job", memory.V2_SUBTREE_CONTROL_FILE), "w") as f:
            f.write("memory\n")
        mounts = self.write("mounts", "cgroup2 %s cgroup2 rw 0 0\n" % root)
        own = self.write("cgroup", "0::/job\n")
        controller = memory.find_controller(mounts_file=mounts, self_cgroup=own)
        self.assertEqual(memory.Controller(memory.CGROUP_V2, os.path.join(root, "job")), controller)
        self.assertEqual(("memory.max", "memory.peak", "memory.events"),
                         (controller.files.limit, controller.files.peak, controller.files.events))

    def test_a_v2_hierarchy_without_the_memory_controller_is_not_one(self):
        root = self.create_tempdir().full_path
        with open(os.path.join(root, memory.V2_CONTROLLERS_FILE), "w") as f:
            f.write("cpu io pids\n")
        mounts = self.write("mounts", "cgroup2 %s cgroup2 rw 0 0\n" % root)
        with self.assertRaisesRegex(memory.MemoryLimitError, "no cgroup memory controller is mounted"):
            memory.find_controller(mounts_file=mounts)


class HostMemoryTest(parameterized.TestCase):
    """Real cgroups under this process's own, with real processes in them."""

    def setUp(self):
        super().setUp()
        self.controller = controller_or_skip(self)

    def group(self, limit=LIMIT):
        memories = memory.HostMemories(limit, controller=self.controller)
        group = processes.ProcessGroup(self.create_tempdir().full_path, poll_seconds=0.05, stop_grace_seconds=1.0,
                                       memories=memories)
        self.addCleanup(group.__exit__, None, None, None)
        return group, memories

    def assertRemoved(self, memories, paths):
        memories.close()
        for path in paths:
            self.assertFalse(os.path.exists(path), "cgroup %s is still there" % path)

    def test_a_task_over_its_hosts_limit_is_killed_and_reported_as_killed_for_memory(self):
        group, memories = self.group()
        task = group.start("worker_0", python(ALLOCATE % OVER_LIMIT_MIB), host="localhost")
        path = task.memory.path
        self.assertEqual(150 * MIB, int(open(os.path.join(path, self.controller.files.limit)).read()))
        with self.assertRaises(processes.TaskFailedError) as raised:
            group.wait(timeout=WAIT_S)
        error = raised.exception
        self.assertEqual(("worker_0", -9), (error.task, error.returncode))
        self.assertIsNotNone(error.memory)
        self.assertEqual(("localhost", 150 * MIB, 1), (error.memory.host, error.memory.limit, error.memory.oom_kills))
        self.assertGreater(error.memory.peak, 100 * MIB)
        self.assertRegex(str(error), r"^task worker_0 was killed for memory \(exit code -9 \(killed by SIGKILL\)\): "
                         r"host localhost's processes peaked at 1\d\d MiB against its limit of 150 MiB \(150m\); "
                         r"raise --host_memory, or use more hosts or a strategy that shards the embedding tables "
                         r"\(python -m deepfm.advise ")
        self.assertNotIn("allocated", error.log_tail)
        self.assertRemoved(memories, [path])

    def test_a_task_under_its_limit_is_unaffected_and_its_cgroup_removed(self):
        group, memories = self.group()
        task = group.start("worker_0", python(ALLOCATE % UNDER_LIMIT_MIB), host="localhost")
        group.wait(timeout=WAIT_S)
        self.assertEqual(0, task.poll())
        self.assertIn("allocated", processes.log_tail(task.log_path))
        self.assertEqual(0, task.memory.oom_kills())
        self.assertGreater(task.memory.peak(), UNDER_LIMIT_MIB * MIB)
        self.assertIsNone(group.memory_event(task))
        self.assertRemoved(memories, [task.memory.path])

    def test_tasks_of_one_host_share_its_cgroup_and_their_children_join_it(self):
        group, memories = self.group()
        first = group.start("ps_0", python("import subprocess, sys\n"
                                           "subprocess.run([sys.executable, '-c', 'import time; time.sleep(1)'])"),
                            host="localhost")
        second = group.start("worker_0", python("import time; time.sleep(0.5)"), host="localhost")
        self.assertIs(first.memory, second.memory)
        members = set(first.memory.pids())
        self.assertTrue({first.pid, second.pid} <= members, members)
        group.wait(timeout=WAIT_S)
        self.assertRemoved(memories, [first.memory.path])

    def test_a_failure_after_another_host_was_killed_for_memory_names_that_host(self):
        # As under mpirun: a rank of algo-2 is killed, and the launcher on algo-1 fails.
        done = os.path.join(self.create_tempdir().full_path, "rank-gone")
        group, memories = self.group()
        killed = group.start("algo-2", ["/bin/sh", "-c", "%s -c '%s'; touch %s; sleep 60" % (
            sys.executable, ALLOCATE % OVER_LIMIT_MIB, done)], host="algo-2")
        group.start("algo-1", python("""
            import os, sys, time
            while not os.path.exists(%r):
                time.sleep(0.05)
            sys.exit(1)
        """ % done), host="algo-1")
        with self.assertRaises(processes.TaskFailedError) as raised:
            group.wait(timeout=WAIT_S)
        self.assertEqual(("algo-1", 1, "algo-2"), (raised.exception.task, raised.exception.returncode,
                                                   raised.exception.memory.host))
        self.assertRegex(str(raised.exception), r"^task algo-1 failed with exit code 1 after a process of host "
                         r"algo-2 was killed for memory: host algo-2's processes peaked at .* against its limit "
                         r"of 150 MiB")
        self.assertRemoved(memories, [killed.memory.path, group.tasks[1].memory.path])

    def test_without_a_limit_the_cgroup_only_counts(self):
        group, memories = self.group(limit="")
        task = group.start("worker_0", python(ALLOCATE % UNDER_LIMIT_MIB), host="localhost")
        limit = int(open(os.path.join(task.memory.path, self.controller.files.limit)).read())
        group.wait(timeout=WAIT_S)
        self.assertIsNone(task.memory.limit)
        self.assertGreater(limit, 1024 ** 4)
        self.assertGreater(task.memory.peak(), UNDER_LIMIT_MIB * MIB)
        self.assertRemoved(memories, [task.memory.path])

    def test_a_killed_task_of_an_unlimited_host_is_not_claimed_as_memory(self):
        group, _ = self.group(limit="")
        task = group.start("worker_0", python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
                           host="localhost")
        with self.assertRaisesRegex(processes.TaskFailedError, r"^task worker_0 failed with exit code -9 \(killed "
                                    r"by SIGKILL\); last lines"):
            group.wait(timeout=WAIT_S)
        self.assertEqual(0, task.memory.oom_kills())

    def test_a_stale_cgroup_of_a_dead_owner_is_removed(self):
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        stale = os.path.join(self.controller.parent, "%s-%d-1-algo-1" % (memory.CGROUP_PREFIX, gone.pid))
        os.mkdir(stale)
        self.addCleanup(lambda: os.path.isdir(stale) and os.rmdir(stale))
        first = memory.HostMemories("", controller=self.controller)
        own = first.host("algo-1")
        # The next job's cgroups: the dead owner's are removed, a live owner's stay.
        second = memory.HostMemories("", controller=self.controller)
        self.assertFalse(os.path.exists(stale))
        self.assertTrue(os.path.isdir(own.path))
        self.assertEqual([], memory.remove_stale(self.controller))
        second.close()
        self.assertRemoved(first, [own.path])


if __name__ == "__main__":
    absltest.main()
