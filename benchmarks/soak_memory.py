"""The soak's `memory` fault: the memory cgroup of a job's host squeezed below its tasks' need while it runs.

`deepfm.launch` puts every task of an attempt in one memory cgroup of its
host (`jobs.local.memory`; without `--host_memory` it has no limit, for the
host's peak and its OOM kills). `Squeeze` lowers that cgroup's limit to the
lowest value the kernel takes:

* cgroup v2 (`memory.max`): half the cgroup's anonymous memory; the kernel
  reclaims what it can and then kills a process of the cgroup for memory.
* cgroup v1 (`memory.limit_in_bytes`): the kernel refuses a limit it cannot
  reclaim down to (EBUSY) rather than killing, so the limit goes down to
  the cgroup's anonymous memory plus a margin of `MARGINS`, the smallest the
  kernel takes: nothing reclaimable is left, and the tasks' next pages take
  the kernel's OOM killer.

Either way the kernel, not the soak, kills a task, and counts it in the
cgroup (`oom_kill`), which the launcher reports as a task killed for memory.
`restore` writes the limit back. A task in a steady step reuses the pages it
freed and may not need a new one for many seconds after the squeeze, while
its job trains on past the points of the faults after it; `Press` then
starts a process in the cgroup that takes memory a chunk at a time, so the
limit is reached within a second. The kernel's OOM killer kills the process
of the cgroup that holds the most memory: a task of the host, not the press,
which holds a few MiB past the limit's margin then. This module never
imports TensorFlow.
"""

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Callable, List, Optional

from jobs.local import memory as memory_lib

PROC_CGROUP = "/proc/%d/cgroup"
MIB = 1024 * 1024
# Above the anonymous memory, the margins tried from the largest down (v1): the smallest the kernel takes stays.
MARGINS = (256 * MIB, 64 * MIB, 16 * MIB, 4 * MIB, MIB, 0)
# cgroup v2: the limit as a fraction of the cgroup's anonymous memory.
V2_FRACTION = 0.5
# The anonymous memory of a cgroup, in its `memory.stat`.
V1_ANONYMOUS = ("total_rss", "total_rss_huge")
V2_ANONYMOUS = ("anon",)
STAT_FILE = "memory.stat"
V1_USAGE_FILE = "memory.usage_in_bytes"
V2_USAGE_FILE = "memory.current"
# The pressing process: takes CHUNK bytes (every page written) every INTERVAL seconds, at most COUNT times.
PRESS_SOURCE = textwrap.dedent("""
    import sys, time
    count, chunk, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    chunks = []
    for _ in range(count):
        chunks.append(b"\\1" * chunk)
        time.sleep(interval)
    time.sleep(3600)
""")
PRESS_CHUNK = 4 * MIB
PRESS_INTERVAL_S = 0.01
# 4 GiB in all: far past any margin a squeeze leaves.
PRESS_CHUNKS = 1024
PRESS_STOP_WAIT_S = 10.0


class SqueezeError(RuntimeError):
    """The host's memory cgroup cannot be found or limited; the message says why."""


def task_cgroup(pid: int, controller: memory_lib.Controller, proc_cgroup: str = PROC_CGROUP) -> str:
    """The directory of the host memory cgroup process `pid` runs in (one the launcher made).

    Raises:
      SqueezeError: the process is gone, or not in a host cgroup of a
        launcher (`jobs.local.memory.CGROUP_PREFIX`).
    """
    try:
        with open(proc_cgroup % pid) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise SqueezeError("process %d is gone: %s" % (pid, e)) from e
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        ours = (memory_lib.MEMORY_CONTROLLER in controllers.split(",") if controller.version == memory_lib.CGROUP_V1
                else number == "0" and controllers == "")
        if not ours:
            continue
        name = os.path.basename(path.rstrip("/"))
        directory = os.path.join(controller.parent, name)
        if name.startswith(memory_lib.CGROUP_PREFIX + "-") and os.path.isdir(directory):
            return directory
        raise SqueezeError("process %d is in memory cgroup %s, not in a host cgroup of the launcher (%s-*) under %s"
                           % (pid, path, memory_lib.CGROUP_PREFIX, controller.parent))
    raise SqueezeError("process %d has no memory cgroup in %s" % (pid, proc_cgroup % pid))


class Squeeze:
    """Lowers one host cgroup's limit below its processes' need (see the module docstring), and restores it.

    Args:
      path: the cgroup's directory (`task_cgroup`).
      controller: its memory controller.
    """

    def __init__(self, path: str, controller: memory_lib.Controller):
        self.path = path
        self.controller = controller
        self.files = controller.files
        self.original = self._read(self.files.limit).strip()
        self.kills_before = self.oom_kills()
        self.limit: Optional[int] = None
        self.anonymous_at_squeeze: Optional[int] = None
        self.usage_at_squeeze: Optional[int] = None

    def _read(self, name: str) -> str:
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def anonymous(self) -> int:
        """The anonymous memory of the cgroup's processes in bytes (what no reclaim frees without swap)."""
        keys = V1_ANONYMOUS if self.controller.version == memory_lib.CGROUP_V1 else V2_ANONYMOUS
        total = 0
        for line in self._read(STAT_FILE).splitlines():
            key, _, value = line.partition(" ")
            if key in keys:
                total += int(value)
        return total

    def usage(self) -> int:
        name = V1_USAGE_FILE if self.controller.version == memory_lib.CGROUP_V1 else V2_USAGE_FILE
        return int(self._read(name).strip())

    def oom_kills(self) -> int:
        """The cgroup's count of processes the kernel killed for memory."""
        for line in self._read(self.files.events).splitlines():
            key, _, value = line.partition(" ")
            if key == memory_lib.OOM_KILL_KEY:
                return int(value)
        return 0

    def killed(self) -> int:
        """Processes killed for memory since the squeeze began (0 where the cgroup is gone)."""
        try:
            return self.oom_kills() - self.kills_before
        except OSError:
            return 0

    def tighten(self) -> int:
        """Sets the lowest limit the kernel takes (see the module docstring); returns it.

        Raises:
          SqueezeError: the kernel took no limit at all.
        """
        self.anonymous_at_squeeze, self.usage_at_squeeze = self.anonymous(), self.usage()
        if self.controller.version == memory_lib.CGROUP_V2:
            candidates: List[int] = [max(memory_lib.MINIMUM_BYTES, int(V2_FRACTION * self.anonymous_at_squeeze))]
        else:
            candidates = [max(memory_lib.MINIMUM_BYTES, self.anonymous_at_squeeze + margin) for margin in MARGINS]
        taken = None
        for limit in candidates:
            if self.limit is not None and limit >= self.limit:
                continue
            try:
                self._write(self.files.limit, str(limit))
            except OSError as e:
                if e.errno in (errno.EBUSY, errno.EINVAL):
                    break
                raise SqueezeError("cannot limit memory cgroup %s to %d bytes: %s" % (self.path, limit, e)) from e
            taken = self.limit = limit
        if taken is None and self.limit is None:
            raise SqueezeError("memory cgroup %s took no limit down to its anonymous memory (%s); usage %s" % (
                self.path, memory_lib.format_size(self.anonymous_at_squeeze),
                memory_lib.format_size(self.usage_at_squeeze)))
        assert self.limit is not None
        return self.limit

    def restore(self) -> bool:
        """Writes the limit the cgroup had back; False where the cgroup is gone (its attempt ended)."""
        try:
            self._write(self.files.limit, self.original)
        except FileNotFoundError:
            return False
        except OSError:
            if not os.path.isdir(self.path):
                return False
            raise
        return True

    def describe(self) -> str:
        return "limit of %s lowered to %s (its anonymous memory then %s, usage %s)" % (
            os.path.basename(self.path), memory_lib.format_size(self.limit),
            memory_lib.format_size(self.anonymous_at_squeeze), memory_lib.format_size(self.usage_at_squeeze))


class Press:
    """A process in a squeezed cgroup that takes memory until the kernel kills one of the cgroup's tasks.

    It joins the cgroup before it starts. The kernel kills the process of
    most memory, a task of the host (`killed_itself` tells if the press was
    the one). Stop it (`stop`) once a process was killed.

    Args:
      path: the cgroup's directory.
    """

    def __init__(self, path: str):
        def enter() -> None:
            with open(os.path.join(path, memory_lib.PROCS_FILE), "w") as f:
                f.write(str(os.getpid()))

        self.path = path
        self.process = subprocess.Popen(
            [sys.executable, "-c", PRESS_SOURCE, str(PRESS_CHUNKS), str(PRESS_CHUNK), str(PRESS_INTERVAL_S)],
            preexec_fn=enter, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def killed_itself(self) -> bool:
        """Whether the kernel killed the press rather than a task."""
        return self.process.poll() == -signal.SIGKILL

    def stop(self) -> None:
        """Ends the pressing process (its memory goes with it)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(PRESS_STOP_WAIT_S)


def squeeze_until_killed(squeeze: Squeeze, timeout_s: float, running: Callable[[], bool], interval_s: float,
                         poll_s: float) -> bool:
    """Tightens `squeeze` until the kernel kills a process of its cgroup; returns whether a `Press` was needed.

    The limit is tightened again every `interval_s`; after the first interval
    without a kill a `Press` takes memory in the cgroup (stopped before this
    returns). The limit stays lowered (`Squeeze.restore` writes it back).

    Raises:
      SqueezeError: no kill within `timeout_s`, the job ended first
        (`running()` false), the kernel took no limit, or it killed the
        press instead of a task.
    """
    deadline = time.monotonic() + timeout_s
    press: Optional[Press] = None
    try:
        while not squeeze.killed():
            if time.monotonic() > deadline or not running():
                raise SqueezeError("no process was killed for memory within %.0f s: %s" % (timeout_s,
                                                                                           squeeze.describe()))
            try:
                squeeze.tighten()
            except SqueezeError:
                if squeeze.killed():
                    break
                raise
            wait_until = time.monotonic() + interval_s
            while not squeeze.killed() and time.monotonic() < wait_until:
                time.sleep(poll_s)
            if press is None and not squeeze.killed():
                # The tasks took no new page within the interval (a steady step reuses what it freed).
                press = Press(squeeze.path)
        if press is not None and press.killed_itself():
            raise SqueezeError("the kernel killed the pressing process, not a task of the host: %s"
                               % squeeze.describe())
        return press is not None
    finally:
        if press is not None:
            press.stop()

