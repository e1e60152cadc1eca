"""Supervision of the processes of a job on one machine.

A `ProcessGroup` starts tasks (a parameter server, a worker, `horovodrun`),
each in its own process group with its output in its own log file, and
watches them:

* the job succeeds when every task exits with code 0; *service* tasks (the
  parameter servers) are expected to exit by themselves once the other
  tasks are done, within `service_grace_seconds`;
* as soon as one task fails, every other task is stopped and
  `TaskFailedError` names the failed task, its exit code and the tail of
  its log;
* leaving the group (`with ProcessGroup(...) as group:`), for whatever
  reason (an exception, Ctrl-C, a SIGTERM turned into `Terminated` by
  `signals_raise`), stops every task and every process they started:
  SIGTERM to each process group and to every known descendant, then SIGKILL
  after `stop_grace_seconds`. No process outlives the group;
* the training tasks are stopped first and the services (parameter servers)
  only once those are gone: a chief stopping on SIGTERM saves a checkpoint
  of variables that live on the parameter servers. When a service itself
  failed, that save cannot happen: the training tasks get SIGKILL at once
  instead of a grace period they could only spend waiting on it;
* on Linux a task is also killed by the kernel if the supervising process
  itself dies without cleaning up (SIGKILL);
* with `memories` (`jobs.local.memory.HostMemories`), a task started on a
  host joins that host's memory cgroup before its command runs; when a task
  fails and a host's cgroup counted an OOM kill (the task's own host first,
  else another host of the job: under mpirun a rank killed on one host fails
  the launcher on another), `TaskFailedError` says that host was killed for
  memory, with its peak and limit, instead of a bare exit code. The cgroups
  are removed once every task is stopped.
"""

import contextlib
import ctypes
import ctypes.util
import dataclasses
import errno
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import psutil

from jobs.local import memory as memory_lib

DEFAULT_POLL_SECONDS = 0.2
# Ports for a job's servers are drawn from here up to the kernel's ephemeral range (`free_ports`).
SERVICE_PORT_LOW = 20000
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
# Linux's default, where the file cannot be read.
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
# Where a task's TensorFlow server listens: every address of its machine (gRPC's wildcard, IPv6 with IPv4 where
# the machine has IPv6, else IPv4 alone); `free_ports` checks a port free there.
WILDCARD_ADDRESSES = ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0"))
DEFAULT_STOP_GRACE_SECONDS = 5.0
DEFAULT_SERVICE_GRACE_SECONDS = 60.0
LOG_TAIL_LINES = 20
LOG_TAIL_MAX_BYTES = 64 * 1024
# A line that says why a program failed: a command line's user error (`cli.entry`: "<program>: error:
# ...") or the last line of a Python traceback ("ValueError: ...").
ERROR_LINE = re.compile(r"^\S+: error: |^[A-Za-z_][\w.]*(Error|Exception|Interrupt): ")
# Lines kept from an error line that comes before the tail: it and the one after (the hint, or the
# message's second line).
ERROR_CONTEXT_LINES = 2
SKIPPED = "..."
# Exit status of a process ended by signal N, as shells report it.
SIGNAL_EXIT_BASE = 128
# prctl(2) option: the signal a process gets when its parent dies (Linux).
PR_SET_PDEATHSIG = 1


class TaskFailedError(RuntimeError):
    """A task of the group failed.

    Attributes:
      task: the failed task's name.
      returncode: its exit code (negative: killed by that signal).
      log_path: its log file.
      log_tail: the last lines of its log.
      memory: the host killed for memory that explains the failure (the
        task's own host, or under mpirun another host of the job), or None.
    """

    def __init__(self, task: str, returncode: int, log_path: str, log_tail: str, reason: str = "",
                 memory: Optional[memory_lib.MemoryEvent] = None, task_host: str = ""):
        self.task = task
        self.returncode = returncode
        self.log_path = log_path
        self.log_tail = log_tail
        self.memory = memory
        self._task_host = task_host
        what = reason or self.cause
        super().__init__("task %s %s; last lines of %s:\n%s" % (task, what, log_path, _indent(log_tail)))

    @property
    def cause(self) -> str:
        """`failed with exit code 3`, or `was killed for memory (exit code -9 ...): host ...'s processes ...`."""
        described = describe_returncode(self.returncode)
        if self.memory is None:
            return "failed with %s" % described
        if self.memory.host == self._task_host:
            return "was killed for memory (%s): %s" % (described, self.memory.describe())
        return "failed with %s after a process of host %s was killed for memory: %s" % (
            described, self.memory.host, self.memory.describe())


class Terminated(Exception):
    """This process received a termination signal (see `signals_raise`).

    Attributes:
      signum: the signal number.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__("received %s" % signal.Signals(signum).name)


@dataclasses.dataclass
class Task:
    """A started task.

    Attributes:
      name: its name, unique in the group (e.g. `worker_0`).
      argv: the command line.
      log_path: the file receiving its stdout and stderr.
      pid_path: the file holding its process id.
      process: the running process; it leads its own process group.
      service: whether it is expected to exit by itself once every
        non-service task has finished.
      memory: the memory cgroup of its host, which it joined at start
        (None: none).
    """

    name: str
    argv: Sequence[str]
    log_path: str
    pid_path: str
    process: subprocess.Popen
    service: bool = False
    memory: Optional[memory_lib.HostMemory] = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> Optional[int]:
        """The exit code, or None while it runs."""
        return self.process.poll()


def describe_returncode(returncode: int) -> str:
    """`exit code 3`, or `exit code -9 (killed by SIGKILL)`."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal %d" % -returncode
        return "exit code %d (killed by %s)" % (returncode, name)
    return "exit code %d" % returncode


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a text file ("" when it does not exist), and the error line before them.

    What a supervisor (SageMaker's training toolkit, `horovodrun`) writes
    after its program failed can push the program's own error line (see
    `ERROR_LINE`) out of the last lines: the last such line before them is
    kept, with the line after it, then `...`, then the last lines.
    """
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_MAX_BYTES))
            data = f.read()
    except FileNotFoundError:
        return ""
    found = data.decode("utf-8", errors="replace").splitlines()
    tail = found[-lines:]
    if not any(ERROR_LINE.search(line) for line in tail):
        earlier = [index for index, line in enumerate(found[:-lines]) if ERROR_LINE.search(line)]
        if earlier:
            start = earlier[-1]
            before = found[start:min(start + ERROR_CONTEXT_LINES, len(found) - lines)]
            tail = before + [SKIPPED] + tail
    return "\n".join(tail)


def ephemeral_port_range(path: str = EPHEMERAL_RANGE_FILE) -> Tuple[int, int]:
    """The ports the kernel gives outgoing connections and `bind(port 0)` (Linux's `ip_local_port_range`)."""
    try:
        with open(path) as f:
            low, high = (int(value) for value in f.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE


def free_ports(count: int, host: str = "localhost", seed: Optional[int] = None) -> List[int]:
    """`count` distinct TCP ports free on `host` and on every address of this machine, below the ephemeral range.

    A task binds its port seconds after it was chosen (it imports
    TensorFlow first). A port of the ephemeral range can be taken meanwhile
    by any outgoing connection of the machine, which picks its local port
    there; a port below it only by a program that binds that very port. So
    ports are drawn at random from `[SERVICE_PORT_LOW, ephemeral low)`, and
    only where none is free from the ephemeral range (`bind` to port 0).
    Each is checked free by binding it on `host` and on the wildcard address
    (`WILDCARD_ADDRESSES`): a task's TensorFlow server listens on every
    address of the machine, so a port held on any of them (a listener or a
    connection of another program on another address) would fail its
    server's start, and the task with it. The wildcard sockets stay bound
    until all ports are chosen, so the ports differ.

    Args:
      count: how many ports.
      host: the address the tasks reach each other at.
      seed: the random draw's seed (default: from the system).
    """
    draw = random.Random(seed)
    low, _ = ephemeral_port_range()
    candidates = list(range(SERVICE_PORT_LOW, low)) if low > SERVICE_PORT_LOW else []
    draw.shuffle(candidates)
    sockets: List[socket.socket] = []
    try:
        while len(sockets) < count:
            port = candidates.pop() if candidates else 0
            try:
                sockets.append(_bind_everywhere(host, port))
            except OSError:
                if port == 0:
                    raise
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _bind_everywhere(host: str, port: int) -> socket.socket:
    """A socket bound to `port` (0: one the kernel picks) on the wildcard address, the port checked free on `host`.

    The wildcard is IPv6's, taking IPv4 with it, where this machine has IPv6,
    else IPv4's (`WILDCARD_ADDRESSES`).

    Raises:
      OSError: the port is taken on `host` or on some address of this machine.
    """
    if port:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as check:
            check.bind((host, port))
    for family, address in WILDCARD_ADDRESSES:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # No IPv6 on this machine.
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((address, port))
            return sock
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE or family == socket.AF_INET:
                raise
    raise OSError(errno.EAFNOSUPPORT, "no TCP socket family of %s can be made" % (WILDCARD_ADDRESSES,))


@contextlib.contextmanager
def signals_raise(signums: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Within the block, the given signals raise `Terminated` (Ctrl-C already raises KeyboardInterrupt)."""
    def handle(signum, frame):
        del frame
        raise Terminated(signum)
    previous = {signum: signal.signal(signum, handle) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class ProcessGroup:
    """Starts, watches and stops the tasks of a job; see the module docstring.

    Args:
      log_dir: where `<name>.log` and `<name>.pid` of each task go (created
        if missing).
      poll_seconds: how often `wait` looks at the tasks.
      stop_grace_seconds: how long `stop` waits after SIGTERM before SIGKILL.
      service_grace_seconds: how long service tasks may run on after every
        other task has exited successfully.
      terminate_descendants: whether `stop` also sends SIGTERM to each
        process a task started (False: only to the tasks' process groups,
        for tasks that pass the signal on themselves, such as an emulated
        host's init; the others still get SIGKILL after the grace period).
      memories: the memory cgroups of the job's hosts: a task started with
        a `host` joins that host's; removed when the group is left (None:
        no cgroups).
    """

    def __init__(self, log_dir: str, poll_seconds: float = DEFAULT_POLL_SECONDS,
                 stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS,
                 service_grace_seconds: float = DEFAULT_SERVICE_GRACE_SECONDS,
                 terminate_descendants: bool = True, memories: Optional[memory_lib.HostMemories] = None):
        self.log_dir = log_dir
        self.memories = memories
        self._terminate_descendants = terminate_descendants
        self._poll_seconds = poll_seconds
        self._stop_grace_seconds = stop_grace_seconds
        self._service_grace_seconds = service_grace_seconds
        self._tasks: Dict[str, Task] = {}
        # Task name -> pid -> a process it started.
        self._descendants: Dict[str, Dict[int, psutil.Process]] = {}
        os.makedirs(log_dir, exist_ok=True)

    @property
    def tasks(self) -> List[Task]:
        """The started tasks, in start order."""
        return list(self._tasks.values())

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        try:
            self.stop()
        finally:
            if self.memories is not None:
                self.memories.close()

    def start(self, name: str, argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
              service: bool = False, host: str = "", memory_limit: Optional[int] = None,
              memory_limit_text: str = "") -> Task:
        """Starts a task in its own process group.

        Args:
          name: a unique name, used for its log (`<log_dir>/<name>.log`) and
            in messages.
          argv: the command line.
          env: its whole environment (default: this process's).
          service: whether it exits by itself once the other tasks are done.
          host: the host it runs as: with `memories`, it joins that host's
            memory cgroup before its command runs ("": none).
          memory_limit: that host's limit in bytes, instead of the job's
            (used when the host's cgroup is made).
          memory_limit_text: how that limit was given, for messages.

        Returns:
          The started task.

        Raises:
          ValueError: the name is taken.
          OSError: the command cannot be started.
          memory_lib.MemoryLimitError: the host's memory cgroup cannot be
            made or joined.
        """
        if name in self._tasks:
            raise ValueError("task %r is already started" % name)
        log_path = os.path.join(self.log_dir, name + ".log")
        pid_path = os.path.join(self.log_dir, name + ".pid")
        memory = None
        if host and self.memories is not None:
            memory = self.memories.host(host, memory_limit, memory_limit_text)
        with open(log_path, "wb") as log:
            try:
                process = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=None if env is None else dict(env),
                                           start_new_session=True, preexec_fn=_preexec(memory))
            except subprocess.SubprocessError as e:
                if memory is None:
                    raise
                raise memory_lib.MemoryLimitError("task %s could not join the memory cgroup %s of host %s (%s)"
                                                  % (name, memory.path, host, e)) from e
        with open(pid_path + ".tmp", "w") as f:
            f.write("%d\n" % process.pid)
        os.replace(pid_path + ".tmp", pid_path)
        task = Task(name=name, argv=list(argv), log_path=log_path, pid_path=pid_path, process=process,
                    service=service, memory=memory)
        self._tasks[name] = task
        return task

    def wait(self, timeout: Optional[float] = None) -> None:
        """Returns once every task has exited with code 0.

        Stops every task before raising.

        Args:
          timeout: seconds to wait at most; None waits as long as the tasks run.

        Raises:
          TaskFailedError: a task exited with a non-zero code, or a service
            task outlived the others by more than `service_grace_seconds`.
          TimeoutError: the tasks ran longer than `timeout`.
        """
        start = time.monotonic()
        others_done_at = None
        while True:
            self._remember_descendants()
            running = []
            for task in self._tasks.values():
                code = task.poll()
                if code is None:
                    running.append(task)
                elif code != 0:
                    # A failed service held state the training tasks would save on SIGTERM: they cannot.
                    self.stop(grace_seconds=0.0 if task.service else None)
                    raise TaskFailedError(task.name, code, task.log_path, log_tail(task.log_path),
                                          memory=self.memory_event(task),
                                          task_host=task.memory.host if task.memory is not None else "")
            if not running:
                return
            now = time.monotonic()
            if all(task.service for task in running):
                others_done_at = others_done_at or now
                if now - others_done_at > self._service_grace_seconds:
                    self.stop()
                    task = running[0]
                    raise TaskFailedError(
                        task.name, task.poll() or 0, task.log_path, log_tail(task.log_path),
                        reason="was still running %.0f s after every other task finished"
                        % self._service_grace_seconds)
            if timeout is not None and now - start > timeout:
                self.stop()
                raise TimeoutError("tasks %s still running after %.0f s; stopped them all (logs in %s)"
                                   % (", ".join(task.name for task in running), timeout, self.log_dir))
            time.sleep(self._poll_seconds)

    def memory_event(self, task: Task) -> Optional[memory_lib.MemoryEvent]:
        """The host killed for memory that explains `task`'s failure: its own host's cgroup first, else another's.

        Each OOM kill is reported once: a host whose kills were reported
        before (a restarted pod's earlier run) does not explain a new failure.
        """
        if self.memories is None:
            return None
        own = task.memory.take_event() if task.memory is not None else None
        others = self.memories.take_events()
        return own or (others[0] if others else None)

    def stop(self, grace_seconds: Optional[float] = None) -> None:
        """Stops every task and every process they started; waits until all are gone.

        The training tasks first, then the services: running tasks get
        SIGTERM (their whole process group), as do the processes they
        started; whatever still runs `stop_grace_seconds` later gets SIGKILL.
        Safe to call more than once.

        Args:
          grace_seconds: the training tasks' grace period this time (None:
            `stop_grace_seconds`); the services always get theirs.
        """
        self._remember_descendants()
        training = [task for task in self._tasks.values() if not task.service]
        self._stop_tasks(training, self._stop_grace_seconds if grace_seconds is None else grace_seconds)
        self._stop_tasks([task for task in self._tasks.values() if task.service], self._stop_grace_seconds)

    def _stop_tasks(self, tasks: Sequence[Task], grace_seconds: float) -> None:
        running = [task for task in tasks if task.poll() is None]
        for task in running:
            _signal_group(task.pid, signal.SIGTERM)
        descendants = [p for task in tasks for p in self._descendants.get(task.name, {}).values()
                       if (_send(p, signal.SIGTERM) if self._terminate_descendants else _alive(p))]
        deadline = time.monotonic() + grace_seconds
        for task in running:
            try:
                task.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(task.pid, signal.SIGKILL)
                task.process.wait()
        _, alive = psutil.wait_procs(descendants, timeout=max(0.0, deadline - time.monotonic()))
        for process in alive:
            _send(process, signal.SIGKILL)
        psutil.wait_procs(alive)
        for task in running:
            # Whatever is left in its process group.
            _signal_group(task.pid, signal.SIGKILL)

    def _remember_descendants(self) -> None:
        """Records the processes the tasks started (they may leave the tasks' process groups)."""
        for task in self._tasks.values():
            try:
                children = psutil.Process(task.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            for child in children:
                self._descendants.setdefault(task.name, {}).setdefault(child.pid, child)


def _preexec(memory: Optional[memory_lib.HostMemory]) -> Optional[Callable[[], None]]:
    """The `preexec_fn` of a task: join its host's memory cgroup (if any), then `_die_with_parent`.

    Joining in the child, before exec, leaves no moment in which the task
    or a process it starts runs outside the cgroup.
    """
    die_with_parent = _die_with_parent()
    if memory is None:
        return die_with_parent

    def preexec():
        memory.join()
        if die_with_parent is not None:
            die_with_parent()
    return preexec


def _die_with_parent():
    """A `preexec_fn` that has the kernel kill the child if this process dies (Linux; else None).

    Covers what no handler can: this process killed by SIGKILL.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

    def preexec():
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return preexec


def still_running(processes: Iterable[psutil.Process]) -> List[psutil.Process]:
    """Those of `processes` that still run (a zombie, exited but not yet reaped, does not)."""
    running = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            pass
    return running


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running()
    except psutil.NoSuchProcess:
        return False


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _send(process: psutil.Process, signum: int) -> bool:
    """Signals a process unless it is gone (psutil checks the pid was not reused)."""
    try:
        process.send_signal(signum)
        return True
    except psutil.NoSuchProcess:
        return False


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()) or "    (empty)"
