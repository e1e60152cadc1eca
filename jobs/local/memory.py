"""Memory of emulated hosts: one memory cgroup per host, with the host's limit, its peak and its OOM kills.

A real instance has a fixed amount of memory; an emulated host gets one
through a memory cgroup of its own (`HostMemory`), made by `HostMemories`
under the cgroup this process runs in (so that whatever limit this process
has still applies to the hosts). Every process of a host joins the host's
cgroup: `HostMemory.join` runs in the host's first process between fork and
exec (`ProcessGroup.start` passes it as part of `preexec_fn`), so no
instruction of the host's command, and no process it starts, runs outside
the cgroup. Writing the child's pid after `Popen` returned would race with
the child: a process it forked before the write (`ip netns exec` forking
`unshare`, `horovodrun` starting its ranks) would stay outside.

With a limit, the kernel's OOM killer kills a process of the host when the
host's processes together need more than the limit (there is no swap: the
cgroup's memory plus swap limit is the same limit). The cgroup then counts
the kill (`oom_kills`) and its peak usage (`peak`), which the launchers
report (`MemoryEvent`) instead of a bare `exit code -9`. Without a limit,
the cgroups are still made where the controller is writable, for their peak
and their count of OOM kills (the kernel counts a kill in the victim's
cgroup, also when the whole machine ran out of memory); where it is not,
nothing is claimed about memory.

cgroup v1 (`memory.limit_in_bytes`, `memory.max_usage_in_bytes`,
`memory.oom_control`) and cgroup v2 (`memory.max`, `memory.peak`,
`memory.events`) are read; on v2 the cgroup this process runs in must
delegate the memory controller to its children. A limit asked for where
the controller cannot be written (no root, a read-only or missing
controller) is refused at start with `MemoryLimitError`, never ignored.

Every cgroup is removed on `HostMemories.close()` (processes still in it are
killed first); a cgroup left behind by a process that was killed outright
carries its pid in its name and is removed by the next `HostMemories`.
This module never imports TensorFlow.
"""

import dataclasses
import math
import os
import re
import signal
import time
from typing import Callable, Dict, List, Optional

MOUNTS_FILE = "/proc/self/mounts"
SELF_CGROUP_FILE = "/proc/self/cgroup"
CGROUP_V1 = 1
CGROUP_V2 = 2
CGROUP_V1_FSTYPE = "cgroup"
CGROUP_V2_FSTYPE = "cgroup2"
MEMORY_CONTROLLER = "memory"
PROCS_FILE = "cgroup.procs"
V2_CONTROLLERS_FILE = "cgroup.controllers"
V2_SUBTREE_CONTROL_FILE = "cgroup.subtree_control"
# A host's cgroup: <prefix>-<owner pid>-<object id>-<host>; the owner's pid tells a stale one.
CGROUP_PREFIX = "dfm"
# How long `close` waits for a cgroup's processes to be gone before it kills them, and after.
REMOVE_WAIT_S = 5.0
REMOVE_POLL_S = 0.05
# Below this a Python interpreter cannot even start; docker run --memory has the same minimum.
MINIMUM_BYTES = 6 * 1024 * 1024
UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
SIZE_FORMS = "bytes (1500000000), or a number with k, m, g or t (powers of 1024), e.g. 6g, 6GiB, 6500m, 1.5g"
# Kubernetes quantities (resources.limits.memory): binary and decimal suffixes, and milli.
KUBERNETES_UNITS = {"": 1, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4, "Pi": 1024 ** 5,
                    "Ei": 1024 ** 6, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
                    "E": 10 ** 18, "m": 1e-3}
KUBERNETES_QUANTITY = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")
BINARY_STEP = 1024
SIZE_NAMES = ("B", "KiB", "MiB", "GiB", "TiB")
# What to change when a host ran out of memory.
DEFAULT_HINT = ("raise --host_memory, or use more hosts or a strategy that shards the embedding tables "
                "(python -m deepfm.advise --data DIR --hosts N --cores_per_host C predicts each)")


class MemoryLimitError(RuntimeError):
    """A host memory limit cannot be set here; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Files:
    """The names of a cgroup version's memory files.

    Attributes:
      limit: the limit in bytes.
      swap: the swap limit (None: there is none to set).
      swap_is_total: v1's memory plus swap limit (set to the limit) rather
        than v2's swap alone (set to 0).
      peak: the peak usage in bytes.
      events: the file with the `oom_kill N` line.
    """

    limit: str
    swap: Optional[str]
    swap_is_total: bool
    peak: str
    events: str


V1_FILES = Files(limit="memory.limit_in_bytes", swap="memory.memsw.limit_in_bytes", swap_is_total=True,
                 peak="memory.max_usage_in_bytes", events="memory.oom_control")
V2_FILES = Files(limit="memory.max", swap="memory.swap.max", swap_is_total=False, peak="memory.peak",
                 events="memory.events")
OOM_KILL_KEY = "oom_kill"
# A limit file's value from which on it means no limit (cgroup v1 writes 2**63 less a page; v2 writes `max`).
UNLIMITED_FROM = 1 << 62


def parse_size(text: str, flag: str = "--host_memory") -> int:
    """Bytes of a size such as `6g`, `6GiB`, `6500m`, `1.5g` or `1500000000` (powers of 1024, as docker's).

    Raises:
      ValueError: not a size, or below `MINIMUM_BYTES`; the message echoes
        `text` and gives the accepted forms.
    """
    match = SIZE.match(str(text))
    if not match:
        raise ValueError("%s %r is not a size: give %s" % (flag, text, SIZE_FORMS))
    size = int(float(match.group(1)) * UNITS[match.group(2).lower()])
    if size < MINIMUM_BYTES:
        raise ValueError("%s %r is %d bytes, below the %s a process needs to start: give at least 6m (%s)"
                         % (flag, text, size, format_size(MINIMUM_BYTES), SIZE_FORMS))
    return size


def parse_kubernetes_quantity(text: str, what: str = "resources.limits.memory") -> int:
    """Bytes of a Kubernetes quantity (`8Gi`, `500M`, `129e6`, `1500000000`), rounded up as Kubernetes does.

    Raises:
      ValueError: not a quantity; the message echoes `text` and the forms.
    """
    match = KUBERNETES_QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError("%s %r is not a Kubernetes quantity: give e.g. 8Gi, 512Mi, 500M or a number of bytes"
                         % (what, text))
    value = float(match.group(1)) * 10 ** int(match.group(2) or 0) * KUBERNETES_UNITS[match.group(3) or ""]
    return int(math.ceil(value))


def format_size(size: Optional[int]) -> str:
    """`312 MiB`, `6.0 GiB`, or `unknown` for None."""
    if size is None:
        return "unknown"
    value = float(size)
    for name in SIZE_NAMES:
        if value < BINARY_STEP or name == SIZE_NAMES[-1]:
            return "%d %s" % (value, name) if name in SIZE_NAMES[:3] else "%.1f %s" % (value, name)
        value /= BINARY_STEP
    raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class Controller:
    """Where this process's memory cgroups are made.

    Attributes:
      version: `CGROUP_V1` or `CGROUP_V2`.
      parent: the cgroup directory the hosts' cgroups are made in (the one
        this process runs in).
    """

    version: int
    parent: str

    @property
    def files(self) -> Files:
        return V1_FILES if self.version == CGROUP_V1 else V2_FILES


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _mounts(mounts_file: str) -> List[List[str]]:
    try:
        return [line.split() for line in _read(mounts_file).splitlines() if len(line.split()) >= 4]
    except OSError:
        return []


def _own_path(self_cgroup: str, version: int) -> str:
    """This process's cgroup path in the memory hierarchy of `version` ("/" when unknown)."""
    try:
        lines = _read(self_cgroup).splitlines()
    except OSError:
        return "/"
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if version == CGROUP_V1 and MEMORY_CONTROLLER in parts[1].split(","):
            return parts[2]
        if version == CGROUP_V2 and parts[0] == "0" and parts[1] == "":
            return parts[2]
    return "/"


def find_controller(mounts_file: str = MOUNTS_FILE, self_cgroup: str = SELF_CGROUP_FILE) -> Controller:
    """The memory controller this process can make host cgroups in.

    A cgroup v1 memory hierarchy is preferred (a machine with both has the
    memory controller there); else a cgroup v2 hierarchy that has it. The
    host cgroups are made in the cgroup this process runs in (its root when
    that path is not visible, as in a container).

    Raises:
      MemoryLimitError: no memory controller, not root, not writable, or on
        cgroup v2 not delegated to child cgroups; one line that says so.
    """
    found = None
    for _, mount_point, fstype, options in (m[:4] for m in _mounts(mounts_file)):
        if fstype == CGROUP_V1_FSTYPE and MEMORY_CONTROLLER in options.split(","):
            found = (CGROUP_V1, mount_point)
            break
        if fstype == CGROUP_V2_FSTYPE and found is None:
            try:
                if MEMORY_CONTROLLER in _read(os.path.join(mount_point, V2_CONTROLLERS_FILE)).split():
                    found = (CGROUP_V2, mount_point)
            except OSError:
                pass
    if found is None:
        raise MemoryLimitError("no cgroup memory controller is mounted here (%s lists none): host memory limits "
                               "need one; leave --host_memory out" % mounts_file)
    version, mount_point = found
    parent = os.path.join(mount_point, _own_path(self_cgroup, version).lstrip("/"))
    if not os.path.isdir(parent):
        parent = mount_point
    if os.geteuid() != 0 and not os.access(parent, os.W_OK):
        raise MemoryLimitError("host memory limits are memory cgroups, which need root (%s is not writable by "
                               "uid %d): run as root, or leave --host_memory out" % (parent, os.geteuid()))
    if not os.access(parent, os.W_OK):
        raise MemoryLimitError("the cgroup memory controller at %s is read-only here (mounted read-only, as in "
                               "a container without --privileged): host memory limits need it writable; leave "
                               "--host_memory out" % parent)
    if version == CGROUP_V2:
        _delegate_v2(parent)
    return Controller(version=version, parent=parent)


def _delegate_v2(parent: str) -> None:
    """Enables the memory controller for `parent`'s children (cgroup v2), or says why it cannot."""
    control = os.path.join(parent, V2_SUBTREE_CONTROL_FILE)
    try:
        if MEMORY_CONTROLLER in _read(control).split():
            return
        _write(control, "+" + MEMORY_CONTROLLER)
    except OSError as e:
        raise MemoryLimitError(
            "cgroup v2: the memory controller is not enabled for the children of %s and enabling it failed (%s; "
            "a cgroup with processes of its own cannot delegate it): run in a cgroup that delegates memory "
            "(e.g. systemd-run --scope -p Delegate=yes ...), or leave --host_memory out" % (parent, e)) from e


@dataclasses.dataclass(frozen=True)
class MemoryEvent:
    """A host's processes were killed for memory.

    Attributes:
      host: the host.
      peak: the peak usage of the host's processes together, in bytes
        (None: this kernel does not record it).
      limit: the host's limit in bytes (None: no limit; the machine ran out).
      limit_text: the limit as it was given (`150m`).
      oom_kills: how many processes of the host the OOM killer killed.
      hint: what to change.
    """

    host: str
    peak: Optional[int]
    limit: Optional[int]
    limit_text: str
    oom_kills: int
    hint: str = DEFAULT_HINT

    def describe(self) -> str:
        """`host localhost's processes peaked at 301 MiB against its limit of 150 MiB (150m); raise ...`."""
        if self.limit is None:
            bound = "with no host limit: this machine ran out of memory"
        else:
            bound = "against its limit of %s (%s)" % (format_size(self.limit), self.limit_text)
        kills = "" if self.oom_kills == 1 else " (%d processes killed)" % self.oom_kills
        return "host %s's processes peaked at %s %s%s; %s" % (
            self.host, format_size(self.peak), bound, kills, self.hint)


class HostMemory:
    """The memory cgroup of one host; see the module docstring. Made by `HostMemories.host`.

    Attributes:
      host: the host's name.
      path: the cgroup's directory.
      limit: its limit in bytes (None: no limit, accounting only).
      limit_text: the limit as given.
    """

    def __init__(self, controller: Controller, host: str, path: str, limit: Optional[int], limit_text: str,
                 hint: str):
        self.host = host
        self.path = path
        self.limit = limit
        self.limit_text = limit_text
        self._files = controller.files
        self._hint = hint
        self._reported = 0
        os.mkdir(path)
        if limit is not None:
            _write(self._file(self._files.limit), str(limit))
            swap = self._files.swap
            if swap and os.path.exists(self._file(swap)):
                _write(self._file(swap), str(limit) if self._files.swap_is_total else "0")

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def join(self) -> None:
        """Moves the calling process into the cgroup (its later children inherit it); see the module docstring."""
        fd = os.open(self._file(PROCS_FILE), os.O_WRONLY)
        try:
            os.write(fd, b"%d\n" % os.getpid())
        finally:
            os.close(fd)

    def pids(self) -> List[int]:
        """The processes in the cgroup."""
        try:
            return [int(pid) for pid in _read(self._file(PROCS_FILE)).split()]
        except OSError:
            return []

    def peak(self) -> Optional[int]:
        """The peak memory of the host's processes together, in bytes (None: not recorded by this kernel)."""
        try:
            return int(_read(self._file(self._files.peak)).strip())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """How many of the host's processes the kernel's OOM killer killed (0 where the kernel does not count)."""
        try:
            for line in _read(self._file(self._files.events)).splitlines():
                key, _, value = line.partition(" ")
                if key == OOM_KILL_KEY:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def current_limit(self) -> Optional[int]:
        """The limit in the cgroup now, in bytes (None: none, or unreadable); another program may have lowered it."""
        try:
            value = int(_read(self._file(self._files.limit)).strip())
        except (OSError, ValueError):
            return None
        return value if value < UNLIMITED_FROM else None

    def take_event(self) -> Optional[MemoryEvent]:
        """A `MemoryEvent` when processes were OOM-killed since the last call, else None.

        Its limit is the cgroup's own at that moment: one lowered while the
        host ran (the soak's `memory` fault) is reported as such.
        """
        kills = self.oom_kills()
        if kills <= self._reported:
            return None
        new, self._reported = kills - self._reported, kills
        limit, limit_text = self.current_limit(), self.limit_text
        if limit != self.limit and limit is not None:
            limit_text = "lowered on the cgroup while the host ran"
        return MemoryEvent(host=self.host, peak=self.peak(), limit=limit if limit is not None else self.limit,
                           limit_text=limit_text, oom_kills=new, hint=self._hint)

    def remove(self, wait_s: float = REMOVE_WAIT_S) -> bool:
        """Removes the cgroup once its processes are gone, killing those still there after `wait_s`.

        Returns:
          Whether it was removed.
        """
        for attempt in range(2):
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    os.rmdir(self.path)
                    return True
                except FileNotFoundError:
                    return True
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(REMOVE_POLL_S)
            if attempt == 0:
                # Processes of the host outlived its supervisor's stop: they joined this cgroup, so they are
                # the host's own.
                for pid in self.pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        return False


class HostMemories:
    """The memory cgroups of a job's hosts, made on demand and removed on `close()`.

    Args:
      limit: the limit of every host (`parse_size` forms); "" for none.
      hint: what a report of a host killed for memory says to change.
      controller: where to make the cgroups (default: `find_controller()`).

    Raises:
      ValueError: a bad `limit`; the message echoes it.
      MemoryLimitError: a limit asked for where memory cgroups cannot be
        made (without one, the hosts simply get no cgroup: `enabled` is
        False).
    """

    def __init__(self, limit: str = "", hint: str = DEFAULT_HINT, controller: Optional[Controller] = None):
        self.limit_text = limit
        self.limit = parse_size(limit) if limit else None
        self.hint = hint
        self._hosts: Dict[str, HostMemory] = {}
        self._prefix = "%s-%d-%x" % (CGROUP_PREFIX, os.getpid(), id(self) & 0xffffff)
        try:
            self.controller: Optional[Controller] = controller or find_controller()
        except MemoryLimitError:
            if self.limit is not None:
                raise
            self.controller = None
        if self.controller is not None:
            remove_stale(self.controller)

    @property
    def enabled(self) -> bool:
        """Whether the hosts get memory cgroups here."""
        return self.controller is not None

    def __enter__(self) -> "HostMemories":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.close()

    def host(self, name: str, limit: Optional[int] = None, limit_text: str = "") -> Optional[HostMemory]:
        """The cgroup of host `name` (made on first use), or None where memory cgroups cannot be made.

        Args:
          name: the host (or any unit that gets a cgroup of its own, such
            as a pod's container run).
          limit: this host's limit in bytes, instead of the job's.
          limit_text: how that limit was given.

        Raises:
          MemoryLimitError: the cgroup cannot be made or limited; the
            message has the kernel's reason.
        """
        if name in self._hosts:
            return self._hosts[name]
        if self.controller is None:
            if limit is not None:
                find_controller()
            return None
        path = os.path.join(self.controller.parent, "%s-%s" % (self._prefix, name))
        if limit is None:
            limit, limit_text = self.limit, self.limit_text
        try:
            memory = HostMemory(self.controller, name, path, limit, limit_text or format_size(limit), self.hint)
        except OSError as e:
            _remove_quietly(path)
            raise MemoryLimitError("host %s: cannot make its memory cgroup %s with limit %s: %s"
                                   % (name, path, limit_text or format_size(limit), e)) from e
        self._hosts[name] = memory
        return memory

    @property
    def hosts(self) -> List[HostMemory]:
        """The cgroups made so far, in order."""
        return list(self._hosts.values())

    def take_events(self) -> List[MemoryEvent]:
        """The hosts whose processes were OOM-killed since the last call."""
        return [event for event in (memory.take_event() for memory in self._hosts.values()) if event]

    def close(self) -> None:
        """Removes every cgroup (killing what still runs in one). Safe to call twice."""
        for memory in self._hosts.values():
            memory.remove()
        self._hosts = {}


def _remove_quietly(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def remove_stale(controller: Controller, pid_exists: Optional[Callable[[int], bool]] = None) -> List[str]:
    """Removes the empty host cgroups whose owning process is gone (see the module docstring).

    Returns:
      The removed cgroups' directories.
    """
    exists = pid_exists or _pid_exists
    removed: List[str] = []
    try:
        names = os.listdir(controller.parent)
    except OSError:
        return removed
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or parts[0] != CGROUP_PREFIX or not parts[1].isdigit() or exists(int(parts[1])):
            continue
        path = os.path.join(controller.parent, name)
        if os.path.isdir(path):
            _remove_quietly(path)
            if not os.path.exists(path):
                removed.append(path)
    return removed


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
