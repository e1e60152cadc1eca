"""Tests of `strategies.host_memory`: this host's figure, and a real memory cgroup's limit seen from inside."""

import os

import pytest
import tensorflow as tf

from strategies import host_memory
from tests import command_line, paths
from tests.strategies import memory_cgroup

# A whole number of pages (the kernel rounds a limit down to one).
LIMIT_BYTES = 700 * 1024 ** 2
# Prints what a process sees: the bytes, a tab, the source.
READ_MEMORY = ("python -c 'from strategies import host_memory; memory = host_memory.read(); "
               "print(\"%d\\t%s\" % (memory.available, memory.source))'")


def meminfo_bytes(field):
    with open(host_memory.PROC_MEMINFO) as f:
        for line in f:
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0]) * 1024
    raise AssertionError("no %s in %s" % (field, host_memory.PROC_MEMINFO))


class HostMemoryTest(tf.test.TestCase):

    def test_this_process_gets_a_figure_no_larger_than_the_host(self):
        memory = host_memory.read()
        self.assertIsNotNone(memory)
        self.assertGreater(memory.available, 0)
        self.assertLessEqual(memory.available, meminfo_bytes(host_memory.MEM_TOTAL))
        self.assertTrue(memory.source.startswith(("the memory cgroup limit in ", host_memory.MEM_AVAILABLE)),
                        memory.source)

    def test_available_memory_counts_what_this_process_holds_already(self):
        available = host_memory.meminfo_available()
        self.assertGreater(available, meminfo_bytes(host_memory.MEM_AVAILABLE) // 2)
        self.assertLessEqual(available, meminfo_bytes(host_memory.MEM_TOTAL))

    def test_the_ancestors_of_a_cgroup_end_at_the_root(self):
        self.assertEqual(["a/b/c", "a/b", "a", ""], host_memory._ancestors("/a/b/c"))
        self.assertEqual([""], host_memory._ancestors("/"))

    def test_the_smallest_v2_limit_above_the_process_holds(self):
        # cgroup v2's layout (this machine mounts v1): `0::<path>`, and memory.max in each cgroup directory.
        root = self.create_tempdir().full_path
        for directory, limit in (("job", "5000"), ("job/rank", "max")):
            os.makedirs(os.path.join(root, directory))
            with open(os.path.join(root, directory, host_memory.V2_LIMIT_FILE), "w") as f:
                f.write(limit + "\n")
        with open(os.path.join(root, host_memory.V2_CONTROLLERS_FILE), "w") as f:
            f.write("cpu memory\n")
        proc_cgroup = self.create_tempfile(content="0::/job/rank\n").full_path
        self.assertEqual((5000, os.path.join(root, "job", host_memory.V2_LIMIT_FILE)),
                         host_memory.cgroup_limit(proc_cgroup, root))

    @pytest.mark.slow
    def test_a_process_in_a_limited_cgroup_sees_its_limit(self):
        with memory_cgroup.limited(self, LIMIT_BYTES) as cgroup:
            proc = command_line.run(cgroup.inside(READ_MEMORY), paths.REPO_ROOT, timeout=60)
        self.assertEqual(0, proc.returncode, command_line.describe(READ_MEMORY, proc))
        available, source = proc.stdout.strip().split("\t")
        self.assertEqual(LIMIT_BYTES, int(available))
        self.assertEqual("the memory cgroup limit in %s" % os.path.join(cgroup.path, cgroup.limit_file), source)


if __name__ == "__main__":
    tf.test.main()
