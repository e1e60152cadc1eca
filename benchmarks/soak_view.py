"""What the soak sees of a running `deepfm.launch` job from outside: its output, logs, tasks, progress, checkpoints.

`JobView` reads the launcher's output (its restart lines), each attempt's
task logs and pid files, the tasks' progress files and the model
directory; `DirectoryWatch` sees names appear in a directory (inotify).
Nothing here changes the job. Linux only (inotify, /proc).
"""

import ctypes
import ctypes.util
import glob
import json
import os
import re
import select
import struct
import time
from typing import Dict, List, Optional, Tuple

import psutil

from jobs.local import processes

STATE_STEP = re.compile(r'^model_checkpoint_path: ".*-(\d+)"$', re.M)
# A restart line of the launcher: its number, the failed task, and why (`failed with exit code -9 ...`, or
# `was killed for memory (...): ...`).
RESTART_LINE = re.compile(r"^restart (\d+) of \d+: task (\S+) (.*?); every task was stopped", re.M)
RESUME_LINE = re.compile(r"resuming from the checkpoint in .* at global step (\d+)")
RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")
# The least time between two walks of the job's process tree (`JobView.track`): a walk reads every
# process's sockets, and the fault windows poll their conditions every few milliseconds.
TRACK_INTERVAL_S = 0.1


class DirectoryWatch:
    """The names created in (or moved into) one directory, from inotify.

    Args:
      path: an existing directory.
    """

    IN_MOVED_TO = 0x00000080
    IN_CREATE = 0x00000100
    IN_NONBLOCK = 0o4000
    IN_CLOEXEC = 0o2000000
    EVENT = struct.Struct("iIII")

    def __init__(self, path: str):
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fd = self._libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if self._libc.inotify_add_watch(self._fd, os.fsencode(path), self.IN_CREATE | self.IN_MOVED_TO) < 0:
            error = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(error, "inotify_add_watch %s failed" % path)

    def names(self, timeout: float) -> List[str]:
        """The names created since the last call, waiting up to `timeout` seconds for the first."""
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return []
        names = []
        offset = 0
        while offset < len(data):
            _, _, _, length = self.EVENT.unpack_from(data, offset)
            offset += self.EVENT.size
            names.append(data[offset:offset + length].rstrip(b"\0").decode())
            offset += length
        return names

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> "DirectoryWatch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def network_namespace(pid) -> Optional[str]:
    """`net:[<inode>]` of a process (None: gone)."""
    try:
        return os.readlink("/proc/%s/ns/net" % pid)
    except OSError:
        return None


OWN_NETWORK_NAMESPACE = network_namespace("self")


def state_step(model_dir: str) -> Optional[int]:
    """The step of the latest checkpoint the state file names (None: none)."""
    try:
        with open(os.path.join(model_dir, "checkpoint")) as f:
            match = STATE_STEP.search(f.read())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def examples_at(model_dir: str, step: int) -> int:
    """The examples the job trained by global step `step`, from its `input_position.json` record."""
    with open(os.path.join(model_dir, "input_position.json")) as f:
        segments = sorted(json.load(f)["segments"], key=lambda s: s["from_step"])
    total, edge = 0, step
    for segment in reversed([s for s in segments if s["from_step"] < step]):
        total += (edge - segment["from_step"]) * segment["examples_per_step"]
        edge = segment["from_step"]
    return total


class JobView:
    """What can be seen of a running launcher job from outside: its output, tasks, progress and checkpoints.

    Args:
      process: the launcher (`subprocess.Popen`), in its own process group.
      output_path: the file its output goes to.
      log_dir: its `--log_dir`.
      model_dir: the job's `--model_dir`.
      progress_dir: where every task writes its `--progress_file`.
      strategy: `ps`, `horovod` or `hybrid`.
    """

    def __init__(self, process, output_path: str, log_dir: str, model_dir: str, progress_dir: str, strategy: str):
        self.process = process
        self.output_path = output_path
        self.log_dir = log_dir
        self.model_dir = model_dir
        self.progress_dir = progress_dir
        self.strategy = strategy
        self.seen: Dict[Tuple[int, float], psutil.Process] = {}
        self.listening_ports: Dict[int, str] = {}
        # Network namespaces the job's processes were in other than this process's own.
        self.network_namespaces: Dict[str, str] = {}
        self._offsets: Dict[str, int] = {}
        self.last_progress: Optional[dict] = None
        self._tracked_at: Optional[float] = None

    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        with open(self.output_path, errors="replace") as f:
            return f.read()

    def restarts(self) -> List[Tuple[int, str, str]]:
        """(k, failed task, how it failed) of every restart the launcher logged."""
        return [(int(k), task, how) for k, task, how in RESTART_LINE.findall(self.output())]

    def attempt_dir(self, attempt: int) -> str:
        return self.log_dir if attempt == 0 else os.path.join(self.log_dir, "restart_%d" % attempt)

    def chief_log(self, attempt: int) -> str:
        """The log of attempt `attempt`'s chief (a `ps` job's chief_0, a Horovod job's rank 0); "" before any."""
        directory = self.attempt_dir(attempt)
        paths = ([os.path.join(directory, "chief_0.log")] if self.strategy == "ps"
                 else glob.glob(os.path.join(directory, "ranks", "**", "rank.0", "*"), recursive=True))
        text = ""
        for path in paths:
            try:
                with open(path, errors="replace") as f:
                    text += f.read()
            except OSError:
                continue
        return text

    def resume_step(self, attempt: int) -> Optional[int]:
        """The step attempt `attempt`'s chief resumed from (None: not yet logged, or a new model directory)."""
        match = RESUME_LINE.search(self.chief_log(attempt))
        return int(match.group(1)) if match else None

    def track(self, force: bool = False) -> None:
        """Records every process of the job (psutil checks pid reuse) and the ports they listen on.

        Args:
          force: walk the tree even if the last walk was less than
            `TRACK_INTERVAL_S` ago (the last walk, as the job ends).
        """
        now = time.monotonic()
        if not force and self._tracked_at is not None and now - self._tracked_at < TRACK_INTERVAL_S:
            return
        self._tracked_at = now
        try:
            tree = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        for process in tree:
            try:
                key = (process.pid, process.create_time())
                self.seen.setdefault(key, process)
                for connection in process.connections(kind="tcp"):  # only TCP sockets listen
                    if connection.status == psutil.CONN_LISTEN:
                        self.listening_ports.setdefault(connection.laddr.port, " ".join(process.cmdline()[:4]))
                namespace = network_namespace(process.pid)
                if namespace and namespace != OWN_NETWORK_NAMESPACE:
                    self.network_namespaces.setdefault(namespace, " ".join(process.cmdline()[:4]))
            except (psutil.Error, OSError):
                continue

    def alive(self) -> List[psutil.Process]:
        """Processes of the job still running."""
        return processes.still_running(self.seen.values())

    def progress(self) -> Optional[dict]:
        """The newest progress record of any task (read incrementally)."""
        for path in glob.glob(os.path.join(self.progress_dir, "*.jsonl")):
            offset = self._offsets.get(path, 0)
            with open(path) as f:
                f.seek(offset)
                data = f.read()
            complete = data[:data.rfind("\n") + 1]
            self._offsets[path] = offset + len(complete.encode())
            for line in complete.splitlines():
                if line.strip():
                    record = json.loads(line)
                    if self.last_progress is None or record["time"] >= self.last_progress["time"]:
                        self.last_progress = record
        return self.last_progress

    def training_pids(self) -> List[int]:
        """The training processes of the current attempt: the chief first, then workers or ranks by rank."""
        if self.strategy == "ps":
            pids = self._task_pids()
            return [pids[name] for name in sorted(pids, key=lambda n: (not n.startswith("chief"), n))
                    if not name.startswith("ps_")]
        ranks = {}
        for process in list(self.seen.values()):
            try:
                cmdline = process.cmdline()
                if process.is_running() and "deepfm.train" in cmdline:
                    env = process.environ()
                    rank = next((env[v] for v in RANK_VARIABLES if v in env), None)
                    if rank is not None:
                        ranks[int(rank)] = process.pid
            except psutil.Error:
                continue
        return [ranks[rank] for rank in sorted(ranks)]

    def ps_pids(self) -> List[int]:
        pids = self._task_pids()
        return [pids[name] for name in sorted(pids) if name.startswith("ps_")]

    def _task_pids(self) -> Dict[str, int]:
        directory = self.attempt_dir(len(self.restarts()))
        pids = {}
        for path in glob.glob(os.path.join(directory, "*.pid")):
            with open(path) as f:
                text = f.read().strip()
            if text:
                pids[os.path.basename(path)[:-len(".pid")]] = int(text)
        return pids


def open_files(pid: int) -> List[str]:
    """The files process `pid` has open ([] when it is gone)."""
    directory = "/proc/%d/fd" % pid
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        try:
            found.append(os.readlink(os.path.join(directory, name)))
        except OSError:
            continue
    return found
