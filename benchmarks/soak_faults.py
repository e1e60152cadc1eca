"""The faults of a soak: a seeded schedule, and their injection into a running `deepfm.launch` job.

A schedule (`schedule`) is drawn from a seed alone: the same seed gives the
same faults, in the same order, at the same points of the job (fractions of
its example budget) and on the same targets, every time. The points are
fractions of the examples, not steps, so that they mean the same in a
`hybrid` job whose steps change size with its ranks.

`Injector` applies one fault at a time to a job started by the launcher
with `--max_restarts`, and waits until the restart it causes is training
again before it arms the next one: a fault never lands in another's restart,
which is what makes a replay tell the same story (the order of events
depends on the schedule only, never on how fast a process dies).

The kinds (`KINDS`):

* `kill_task`: SIGKILL of a random training task (a ps job's chief or
  worker, a Horovod rank).
* `term_task`: SIGTERM of one random training task (it saves its step, or
  the ranks agree to stop and rank 0 saves).
* `kill_in_checkpoint`: SIGKILL of the chief while a checkpoint is being
  written. The window is detected, not hoped for: an inotify watch on the
  model directory sees TensorFlow create `<prefix>-<step>_temp/` (the
  save's files, moved into place once complete); the chief is stopped
  (SIGSTOP) at once, and killed only if the save is then still incomplete
  (the temporary directory is there, the state file does not name the step
  yet). Otherwise it is let go (SIGCONT) and the next save is taken. Each
  fault records that evidence.
* `kill_in_export`: the same for the SavedModel export at the end of the
  job (TensorFlow writes `<export_dir>/temp-<timestamp>/` and renames it to
  `<timestamp>` once complete). Always the last fault of a schedule.
* `lose_ps` (`ps`): SIGKILL of a random parameter server; the training
  tasks notice it (`deepfm.runtime.watchdog`, about 20 s) and the job
  restarts from its latest checkpoint, where its variables were last saved.
* `resize` (`hybrid`): the job's host-discovery file is rewritten to the
  other number of ranks (2 -> 3 -> 2 ...) and one random rank gets SIGTERM:
  the restart starts with the new number of ranks.

Linux only (inotify, /proc).
"""

import ctypes
import ctypes.util
import dataclasses
import glob
import json
import os
import random
import re
import select
import signal
import struct
import time
from typing import Dict, List, Optional, Sequence, Tuple

import psutil

from jobs.local import processes

KILL_TASK = "kill_task"
TERM_TASK = "term_task"
KILL_IN_CHECKPOINT = "kill_in_checkpoint"
KILL_IN_EXPORT = "kill_in_export"
LOSE_PS = "lose_ps"
RESIZE = "resize"
KINDS = (KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT, KILL_IN_EXPORT, LOSE_PS, RESIZE)
# The kinds each strategy's schedule draws from (every one of them comes at least once when the
# schedule is long enough), the export kill aside.
KINDS_OF = {
    "ps": (KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT, LOSE_PS),
    "horovod": (KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT),
    "hybrid": (RESIZE, KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT),
}
# Faults land between these fractions of the example budget, spread evenly with a random jitter.
FIRST_POINT, LAST_POINT = 0.08, 0.92
POLL_S = 0.05
# The ranks a hybrid job alternates between.
HYBRID_SIZES = (2, 3)
CHECKPOINT_TEMP = re.compile(r"^(?P<prefix>.+)-(?P<step>\d+)_temp$")
EXPORT_TEMP = re.compile(r"^temp-(?P<stamp>\d+)$")
STATE_STEP = re.compile(r'^model_checkpoint_path: ".*-(\d+)"$', re.M)
RESTART_LINE = re.compile(r"^restart (\d+) of \d+: task (\S+) failed with (.*?); every task was stopped", re.M)
RESUME_LINE = re.compile(r"resuming from the checkpoint in .* at global step (\d+)")
RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")


class SoakError(RuntimeError):
    """The job did not behave as the schedule says (it ended, failed or hung where it should not)."""


@dataclasses.dataclass(frozen=True)
class Fault:
    """One planned fault.

    Attributes:
      kind: one of `KINDS`.
      point: the fraction of the example budget the job has trained when it
        is armed (`kill_in_export`: 1.0, the end).
      target: which task, as an index into the job's training tasks (or
        parameter servers) at that moment, modulo their number.
      size: `resize`: the number of ranks the restart gets.
    """

    kind: str
    point: float
    target: int = 0
    size: int = 0

    def describe(self) -> str:
        extra = " to %d ranks" % self.size if self.kind == RESIZE else ""
        return "%s%s at %.0f%% of the budget" % (self.kind, extra, 100 * self.point)


def schedule(seed: int, strategy: str, count: int, export_kill: bool = True,
             kinds: Optional[Sequence[str]] = None, last_point: float = LAST_POINT) -> List[Fault]:
    """The seeded schedule of `count` faults for a job of `strategy` (see the module docstring).

    Every kind of the strategy comes once before any comes twice (in an order
    drawn from the seed), or `kinds` gives them in order; `resize` alternates
    the sizes; with `export_kill` the last fault is `kill_in_export`. Faults
    land between `FIRST_POINT` and `last_point` of the budget (one near the
    end can be overtaken by it: the job ends before a signalled rank stops).

    Raises:
      ValueError: an unknown strategy, a count below 1, a kind the
        strategy has not, or `last_point` outside (FIRST_POINT, 1].
    """
    if strategy not in KINDS_OF:
        raise ValueError("no soak schedule for strategy %r (one of %s)" % (strategy, ", ".join(KINDS_OF)))
    if count < 1:
        raise ValueError("--faults must be >= 1, got %d" % count)
    if not FIRST_POINT < last_point <= 1.0:
        raise ValueError("--last_point must be in (%g, 1], got %r" % (FIRST_POINT, last_point))
    rng = random.Random("%s:%d" % (strategy, seed))
    body = count - 1 if export_kill else count
    if kinds is not None:
        wrong = [kind for kind in kinds if kind not in KINDS_OF[strategy]]
        if wrong or len(kinds) != body:
            raise ValueError("strategy %s: kinds %s must be %d of %s" % (
                strategy, ", ".join(kinds), body, ", ".join(KINDS_OF[strategy])))
        kinds = list(kinds)
    else:
        kinds = []
        while len(kinds) < body:
            kinds += rng.sample(KINDS_OF[strategy], len(KINDS_OF[strategy]))
        kinds = kinds[:body]
    spacing = (last_point - FIRST_POINT) / max(1, body)
    faults = []
    size = HYBRID_SIZES[0]
    for index, kind in enumerate(kinds):
        point = FIRST_POINT + spacing * (index + rng.uniform(0.1, 0.9))
        target = rng.randrange(1 << 16)
        if kind == RESIZE:
            size = HYBRID_SIZES[1] if size == HYBRID_SIZES[0] else HYBRID_SIZES[0]
        faults.append(Fault(kind, round(point, 4), target, size if kind == RESIZE else 0))
    if export_kill:
        faults.append(Fault(KILL_IN_EXPORT, 1.0, 0))
    return faults


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

    def resume_step(self, attempt: int) -> Optional[int]:
        """The step attempt `attempt`'s chief resumed from (None: not yet logged, or a new model directory)."""
        directory = self.attempt_dir(attempt)
        paths = ([os.path.join(directory, "chief_0.log")] if self.strategy == "ps"
                 else glob.glob(os.path.join(directory, "ranks", "**", "rank.0", "*"), recursive=True))
        for path in paths:
            try:
                with open(path, errors="replace") as f:
                    match = RESUME_LINE.search(f.read())
            except OSError:
                continue
            if match:
                return int(match.group(1))
        return None

    def track(self) -> None:
        """Records every process of the job (psutil checks pid reuse) and the ports they listen on."""
        try:
            tree = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        for process in tree:
            try:
                key = (process.pid, process.create_time())
                self.seen.setdefault(key, process)
                for connection in process.connections(kind="inet"):
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


@dataclasses.dataclass
class FaultRecord:
    """What happened to one fault of the schedule.

    Attributes:
      fault: the planned fault.
      number: its place in the schedule (1-based).
      target: the process it hit (`chief_0 pid 123`, `rank 1 pid 456`, `ps_1 pid 789`).
      signal: the signal sent.
      time: wall-clock time of the injection; `elapsed`: seconds since the job started.
      step_at_fault: the newest global step any task had reported then.
      checkpoint_at_fault: the step of the latest complete checkpoint then.
      placement: how the fault was placed (the trigger, or the evidence of a window).
      restart: the launcher's restart line it caused; `resume_step`: where the restart resumed.
      steps_lost: `step_at_fault - resume_step`, at least 0.
      restart_seconds: from the injection until the restart trained again.
    """

    fault: Fault
    number: int
    target: str = ""
    signal: str = ""
    time: float = 0.0
    elapsed: float = 0.0
    step_at_fault: int = 0
    checkpoint_at_fault: Optional[int] = None
    placement: str = ""
    restart: str = ""
    resume_step: Optional[int] = None
    steps_lost: Optional[int] = None
    restart_seconds: Optional[float] = None

    def to_dict(self) -> dict:
        record = dataclasses.asdict(self)
        record["fault"] = dataclasses.asdict(self.fault)
        return record


class Injector:
    """Applies a schedule to a running job, one fault at a time (see the module docstring).

    Args:
      view: the job.
      examples_budget: the examples of the whole job (the fault-free run's).
      export_dir: the job's `--export_dir` (it must exist, to be watched).
      slots_file: `resize`: the host-discovery file the launcher reads.
      timeout_s: how long any one wait may take before the soak fails.
      log: where progress lines go.
    """

    def __init__(self, view: JobView, examples_budget: int, export_dir: str, slots_file: Optional[str],
                 timeout_s: float, log=print):
        self.view = view
        self.examples_budget = examples_budget
        self.export_dir = export_dir
        self.slots_file = slots_file
        self.timeout_s = timeout_s
        self.log = log
        self.start_time = time.time()
        self.records: List[FaultRecord] = []
        # When the current attempt was seen training (the next fault counts progress from then).
        self._attempt_since = 0.0

    def run(self, faults: Sequence[Fault]) -> List[FaultRecord]:
        """Applies every fault in order; returns what happened to each.

        Raises:
          SoakError: the job ended or failed before a fault could land, or a
            restart did not come.
        """
        for number, fault in enumerate(faults, 1):
            record = FaultRecord(fault=fault, number=number)
            self.records.append(record)
            self._arm(fault)
            self._inject(fault, record)
            self._await_restart(record)
            self._attempt_since = time.time()
            self.log("fault %d/%d %s: %s; %s; resumed at step %s (%s step(s) lost)" % (
                number, len(faults), fault.kind, record.target, record.placement, record.resume_step,
                record.steps_lost))
        return self.records

    # --- waiting -------------------------------------------------------------------------------------
    def _wait(self, what: str, condition, poll_s: float = POLL_S):
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            self.view.track()
            value = condition()
            if value:
                return value
            if not self.view.running():
                raise SoakError("the job ended while waiting for %s; its output:\n%s"
                                % (what, self.view.output()[-3000:]))
            time.sleep(poll_s)
        raise SoakError("waited %.0f s for %s" % (self.timeout_s, what))

    def _arm(self, fault: Fault) -> None:
        """Waits until the job has trained `fault.point` of its budget in the current attempt."""
        if fault.kind == KILL_IN_EXPORT:
            return
        target = fault.point * self.examples_budget

        def reached():
            record = self.view.progress()
            return record is not None and record["time"] >= self._attempt_since and \
                examples_at(self.view.model_dir, record["global_step"]) >= target
        self._wait("%.0f%% of the example budget" % (100 * fault.point), reached)

    # --- injecting -----------------------------------------------------------------------------------
    def _inject(self, fault: Fault, record: FaultRecord) -> None:
        view = self.view
        view.track()
        record.checkpoint_at_fault = state_step(view.model_dir)
        if fault.kind in (KILL_TASK, TERM_TASK, RESIZE):
            pids = self._wait("the training tasks", view.training_pids)
            index = fault.target % len(pids)
            signum = signal.SIGKILL if fault.kind == KILL_TASK else signal.SIGTERM
            if fault.kind == RESIZE:
                if self.slots_file is None:
                    raise SoakError("a resize needs the job's host-discovery file")
                with open(self.slots_file, "w") as f:
                    f.write("localhost:%d\n" % fault.size)
            record.target = "%s pid %d" % (self._task_name(index), pids[index])
            record.placement = "armed at %.0f%% of the budget" % (100 * fault.point)
            self._send(pids[index], signum, record)
        elif fault.kind == LOSE_PS:
            pids = self._wait("the parameter servers", view.ps_pids)
            index = fault.target % len(pids)
            record.target = "ps_%d pid %d" % (index, pids[index])
            record.placement = "armed at %.0f%% of the budget" % (100 * fault.point)
            self._send(pids[index], signal.SIGKILL, record)
        elif fault.kind == KILL_IN_CHECKPOINT:
            self._kill_in_window(record, view.model_dir, CHECKPOINT_TEMP, self._checkpoint_incomplete,
                                 "a checkpoint")
        elif fault.kind == KILL_IN_EXPORT:
            self._kill_in_window(record, self.export_dir, EXPORT_TEMP, self._export_incomplete, "the export")
        else:
            raise ValueError("unknown fault kind %r" % fault.kind)

    def _task_name(self, index: int) -> str:
        if self.view.strategy == "ps":
            return "chief_0" if index == 0 else "worker_%d" % (index - 1)
        return "rank %d" % index

    def _send(self, pid: int, signum: int, record: FaultRecord) -> None:
        progress = self.view.progress()
        record.step_at_fault = progress["global_step"] if progress else 0
        record.time = time.time()
        record.elapsed = record.time - self.start_time
        record.signal = signal.Signals(signum).name
        try:
            os.kill(pid, signum)
        except ProcessLookupError as e:
            raise SoakError("%s was gone before its fault" % record.target) from e

    def _checkpoint_incomplete(self, name: str) -> Optional[str]:
        """Evidence that the save of `name` (`<prefix>-<step>_temp`) is still under way, else None."""
        match = CHECKPOINT_TEMP.match(name)
        if match is None:
            return None
        step, prefix = int(match.group("step")), match.group("prefix")
        listed = state_step(self.view.model_dir)
        if os.path.isdir(os.path.join(self.view.model_dir, name)) and listed != step \
                and not os.path.exists("%s-%d.index" % (os.path.join(self.view.model_dir, prefix), step)):
            return "%s/ present, no %s-%d.index, the state file at step %s" % (
                name, os.path.basename(prefix), step, listed)
        return None

    def _export_incomplete(self, name: str) -> Optional[str]:
        match = EXPORT_TEMP.match(name)
        if match is None:
            return None
        stamp = match.group("stamp")
        if os.path.isdir(os.path.join(self.export_dir, name)) and not os.path.exists(
                os.path.join(self.export_dir, stamp)):
            return "%s/ present, %s/ not yet" % (name, stamp)
        return None

    def _kill_in_window(self, record: FaultRecord, directory: str, pattern, incomplete, what: str) -> None:
        """Stops the chief when `directory` gets a name of `pattern`, and kills it if `incomplete` says so."""
        chief = self._wait("the chief", lambda: next(iter(self.view.training_pids()), None))
        missed = 0
        with DirectoryWatch(directory) as watch:
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                names = [n for n in watch.names(POLL_S) if pattern.match(n)]
                if not names:
                    if not self.view.running():
                        raise SoakError("the job ended before a write of %s was caught under way (%d write(s) "
                                        "were complete when the chief was stopped)" % (what, missed))
                    continue
                detected = time.perf_counter()
                os.kill(chief, signal.SIGSTOP)
                stopped_ms = 1000 * (time.perf_counter() - detected)
                evidence = incomplete(names[-1])
                if evidence is None:
                    os.kill(chief, signal.SIGCONT)
                    missed += 1
                    continue
                record.target = "chief pid %d" % chief
                record.placement = "inside the write of %s: stopped %.2f ms after %s appeared: %s%s" % (
                    what, stopped_ms, names[-1], evidence,
                    "; %d earlier write(s) completed before the stop and were let go" % missed if missed else "")
                self._send(chief, signal.SIGKILL, record)
                return
        raise SoakError("no write of %s within %.0f s" % (what, self.timeout_s))

    # --- the restart ---------------------------------------------------------------------------------
    def _await_restart(self, record: FaultRecord) -> None:
        number = record.number

        def restarted():
            lines = [r for r in self.view.restarts() if r[0] == number]
            return lines[0] if lines else None
        k, task, how = self._wait("restart %d" % number, restarted)
        if len(self.view.restarts()) != number:
            raise SoakError("fault %d caused %d restarts, expected one: %s"
                            % (number, len(self.view.restarts()) - number + 1, self.view.restarts()))
        record.restart = "restart %d: task %s failed with %s" % (k, task, how)
        record.resume_step = self._wait("the restart's resume step", lambda: self.view.resume_step(number),
                                        poll_s=0.2)

        def training_again():
            progress = self.view.progress()
            return progress is not None and progress["time"] > record.time
        if record.fault.kind != KILL_IN_EXPORT:
            self._wait("restart %d to train" % number, training_again, poll_s=0.2)
        record.restart_seconds = time.time() - record.time
        record.steps_lost = max(0, record.step_at_fault - record.resume_step)
