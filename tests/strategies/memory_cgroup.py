"""A real memory cgroup with a limit, for tests that run a command inside it.

    with memory_cgroup.limited(test_case, 1000 ** 3) as cgroup:
        command_line.run(cgroup.inside("python -m deepfm.train ..."), cwd)

The cgroup is made under the one this process runs in (so that every limit
on this process still holds inside), v1 (`memory.limit_in_bytes`, and the
memory-plus-swap limit where there is one) or v2 (`memory.max`), and removed
at the end. A test where the memory controller cannot be written (no root,
no controller, v2 without delegation) is skipped, saying why.
"""

import contextlib
import dataclasses
import itertools
import os
import shlex
import time
import unittest
from typing import Iterator, Optional

PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
V1_CONTROLLER = "memory"
V1_LIMITS = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
V1_OOM_FILE = "memory.oom_control"
V2_LIMITS = ("memory.max", "memory.swap.max")
V2_OOM_FILE = "memory.events"
V2_CONTROLLERS_FILE = "cgroup.controllers"
PROCS_FILE = "cgroup.procs"
OOM_KILL = "oom_kill"
REMOVE_TRIES = 50
REMOVE_POLL_S = 0.1
_COUNTER = itertools.count()


@dataclasses.dataclass(frozen=True)
class MemoryCgroup:
    """A memory cgroup made by `limited`.

    Attributes:
      path: its directory.
      limit_file: the file holding its limit.
      oom_file: the file counting its OOM kills (`oom_kill N`).
    """

    path: str
    limit_file: str
    oom_file: str

    def inside(self, command: str) -> str:
        """A shell line that moves the shell into this cgroup, then `exec`s `command` there."""
        return "echo $$ > %s\nexec %s" % (shlex.quote(os.path.join(self.path, PROCS_FILE)), command)

    def oom_kills(self) -> int:
        """The OOM kills the kernel counted in this cgroup."""
        with open(os.path.join(self.path, self.oom_file)) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == OOM_KILL:
                    return int(value)
        return 0


def _own_cgroup() -> Optional[MemoryCgroup]:
    """The memory cgroup this process runs in (its path and files), or None."""
    with open(PROC_CGROUP) as f:
        lines = f.read().splitlines()
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if V1_CONTROLLER in controllers.split(","):
            return MemoryCgroup(os.path.join(CGROUP_ROOT, V1_CONTROLLER, path.lstrip("/")), V1_LIMITS[0], V1_OOM_FILE)
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers and os.path.exists(os.path.join(CGROUP_ROOT, V2_CONTROLLERS_FILE)):
            return MemoryCgroup(os.path.join(CGROUP_ROOT, path.lstrip("/")), V2_LIMITS[0], V2_OOM_FILE)
    return None


@contextlib.contextmanager
def limited(test_case: unittest.TestCase, limit_bytes: int) -> Iterator[MemoryCgroup]:
    """A new memory cgroup limited to `limit_bytes` (with no swap beyond it), removed at the end.

    Raises:
      unittest.SkipTest: no writable memory controller.
    """
    own = _own_cgroup()
    if own is None:
        raise unittest.SkipTest("no memory cgroup controller on this machine")
    path = os.path.join(own.path, "deepfm-test-%d-%d" % (os.getpid(), next(_COUNTER)))
    limits = V1_LIMITS if own.limit_file == V1_LIMITS[0] else V2_LIMITS
    try:
        os.mkdir(path)
    except OSError as e:
        raise unittest.SkipTest("cannot make a memory cgroup under %s: %s" % (own.path, e)) from e
    cgroup = MemoryCgroup(path, own.limit_file, own.oom_file)
    try:
        try:
            with open(os.path.join(path, limits[0]), "w") as f:
                f.write(str(limit_bytes))
        except OSError as e:
            raise unittest.SkipTest("cannot limit the memory cgroup %s: %s" % (path, e)) from e
        swap = os.path.join(path, limits[1])
        if os.path.exists(swap):
            with open(swap, "w") as f:
                f.write(str(limit_bytes) if limits is V1_LIMITS else "0")
        yield cgroup
    finally:
        _remove(test_case, path)


def _remove(test_case: unittest.TestCase, path: str) -> None:
    """Removes the cgroup `path` once the processes the test started in it are gone."""
    for _ in range(REMOVE_TRIES):
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(REMOVE_POLL_S)
    test_case.fail("the memory cgroup %s could not be removed: a process of the test is still in it" % path)
