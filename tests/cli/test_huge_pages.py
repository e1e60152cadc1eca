"""Tests of the restart with huge pages: when it happens, and a real one (same pid, huge pages for large arrays)."""

import json
import os
import subprocess
import sys

import tensorflow as tf

from cli import huge_pages

GIB = 1 << 30
GLIBC = (2, 36)
SCRIPT = """
import ctypes, json, os, sys
from cli import huge_pages
first_pid = os.environ.get("TEST_FIRST_PID") or str(os.getpid())
os.environ["TEST_FIRST_PID"] = first_pid
huge_pages.restart_with_huge_pages(int(sys.argv[1]))
# 256 MiB from malloc, as TensorFlow allocates a tensor, touched (numpy would ask for huge pages itself).
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
table = libc.malloc(256 << 20)
ctypes.memset(table, 1, 256 << 20)
with open("/proc/self/smaps_rollup") as f:
    huge = [int(line.split()[1]) for line in f if line.startswith("AnonHugePages:")][0]
print(json.dumps({"first_pid": int(first_pid), "pid": os.getpid(), "argv": sys.argv[1:],
                  "tunables": os.environ.get("GLIBC_TUNABLES"), "huge_kib": huge}))
"""


class WantedTest(tf.test.TestCase):

    def test_only_large_tables_in_madvise_mode_with_a_new_glibc_and_no_tunables_set(self):
        self.assertTrue(huge_pages.wanted(2 * GIB, {}, "madvise", GLIBC))
        self.assertFalse(huge_pages.wanted(GIB // 2, {}, "madvise", GLIBC))
        self.assertFalse(huge_pages.wanted(2 * GIB, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "madvise", GLIBC))
        self.assertFalse(huge_pages.wanted(2 * GIB, {}, "always", GLIBC))
        self.assertFalse(huge_pages.wanted(2 * GIB, {}, "never", GLIBC))
        self.assertFalse(huge_pages.wanted(2 * GIB, {}, None, GLIBC))
        self.assertFalse(huge_pages.wanted(2 * GIB, {}, "madvise", (2, 31)))
        self.assertFalse(huge_pages.wanted(2 * GIB, {}, "madvise", None))

    def test_the_kernels_mode_is_the_bracketed_word(self):
        path = self.create_tempfile(content="always [madvise] never\n").full_path
        self.assertEqual("madvise", huge_pages.thp_mode(path))
        self.assertIsNone(huge_pages.thp_mode(os.path.join(self.get_temp_dir(), "missing")))

    def test_glibc_version_of_this_interpreter(self):
        version = huge_pages.glibc_version()
        if version is not None:
            self.assertGreaterEqual(version, (2, 17))


class RestartTest(tf.test.TestCase):

    def _run(self, table_bytes, **env):
        script = self.create_tempfile("restart.py", content=SCRIPT).full_path
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        environ = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), "PYTHONPATH": root}
        environ.update(env)
        out = subprocess.run([sys.executable, script, str(table_bytes)], env=environ, capture_output=True,
                             text=True, timeout=120, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    def test_large_tables_restart_the_same_process_with_huge_pages_where_the_machine_gives_them(self):
        wanted = huge_pages.wanted(2 * GIB, {}, huge_pages.thp_mode(), huge_pages.glibc_version())
        result = self._run(2 * GIB)
        self.assertEqual(result["first_pid"], result["pid"])
        self.assertEqual([str(2 * GIB)], result["argv"])
        if wanted:
            self.assertEqual(huge_pages.HUGE_PAGES_TUNABLE, result["tunables"])
            self.assertGreater(result["huge_kib"], 64 * 1024, result)
        else:
            self.assertIsNone(result["tunables"])

    def test_small_tables_and_a_set_tunable_keep_the_process_as_it_is(self):
        self.assertIsNone(self._run(GIB // 4)["tunables"])
        kept = self._run(2 * GIB, GLIBC_TUNABLES="glibc.malloc.hugetlb=0")
        self.assertEqual("glibc.malloc.hugetlb=0", kept["tunables"])
        if huge_pages.thp_mode() == huge_pages.THP_MADVISE:
            self.assertEqual(0, kept["huge_kib"])


if __name__ == "__main__":
    tf.test.main()
