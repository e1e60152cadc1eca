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

import dataclasses
import os
import random
import re
import signal
import time
from typing import List, Optional, Sequence

from benchmarks import soak_memory
from benchmarks.soak_view import RESUME_LINE, DirectoryWatch, JobView, examples_at, open_files, state_step
from jobs.local import memory as memory_lib

KILL_TASK = "kill_task"
TERM_TASK = "term_task"
KILL_IN_CHECKPOINT = "kill_in_checkpoint"
KILL_IN_EXPORT = "kill_in_export"
KILL_IN_RESTORE = "kill_in_restore"
KILL_IN_EVALUATION = "kill_in_evaluation"
MEMORY = "memory"
LOSE_PS = "lose_ps"
RESIZE = "resize"
KINDS = (KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT, KILL_IN_EXPORT, KILL_IN_RESTORE, KILL_IN_EVALUATION, MEMORY,
         LOSE_PS, RESIZE)
# The kinds each strategy's schedule draws from (every one of them comes at least once when the
# schedule is long enough), the export kill aside.
KINDS_OF = {
    "ps": (KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT, LOSE_PS, KILL_IN_RESTORE, KILL_IN_EVALUATION, MEMORY),
    "horovod": (KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT, KILL_IN_RESTORE, KILL_IN_EVALUATION, MEMORY),
    "hybrid": (RESIZE, KILL_TASK, TERM_TASK, KILL_IN_CHECKPOINT, KILL_IN_RESTORE, KILL_IN_EVALUATION, MEMORY),
}
# Kinds that land in the restart of the fault before them (never first), and those that land at the job's end
# (after every fault that lands in training, in the order drawn, before the export kill).
AFTER_A_RESTART = (KILL_IN_RESTORE,)
AT_THE_END = (KILL_IN_EVALUATION,)
# Faults land between these fractions of the example budget, spread evenly with a random jitter.
FIRST_POINT, LAST_POINT = 0.08, 0.92
POLL_S = 0.05
# How often the log of a restart (`kill_in_restore`) and the chief's open files (`kill_in_evaluation`) are read.
WINDOW_POLL_S = 0.01
EVALUATION_POLL_S = 0.002
# How long a squeezed cgroup (`memory`) is given to need more than its limit before it is squeezed again and
# pressed (`soak_memory.Press`): a steady step may take no new page for many seconds, while the job trains on
# (a 2 s interval without the press let a memory fault land 17-20 s late, past half of a job's budget).
SQUEEZE_INTERVAL_S = 0.5
# The chief's log: where its training ends, and a restart at its budget (`deepfm.runtime.trainer`).
TRAINING_TO_LINE = re.compile(r"training to global step (\d+)")
BUDGET_HELD_LINE = re.compile(r"already holds the budget's \d+ examples: no step to train")
# The ranks a hybrid job alternates between.
HYBRID_SIZES = (2, 3)
CHECKPOINT_TEMP = re.compile(r"^(?P<prefix>.+)-(?P<step>\d+)_temp$")
EXPORT_TEMP = re.compile(r"^temp-(?P<stamp>\d+)$")


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
        if self.kind in AFTER_A_RESTART:
            return "%s in the restart of the fault before" % self.kind
        if self.kind in AT_THE_END + (KILL_IN_EXPORT,):
            return "%s at the end" % self.kind
        extra = " to %d ranks" % self.size if self.kind == RESIZE else ""
        return "%s%s at %.0f%% of the budget" % (self.kind, extra, 100 * self.point)


def schedule(seed: int, strategy: str, count: int, export_kill: bool = True,
             kinds: Optional[Sequence[str]] = None, last_point: float = LAST_POINT,
             only: Sequence[str] = ()) -> List[Fault]:
    """The seeded schedule of `count` faults for a job of `strategy` (see the module docstring).

    Every kind of the strategy comes once before any comes twice (in an order
    drawn from the seed), or `kinds` gives them in order; `resize` alternates
    the sizes; with `export_kill` the last fault is `kill_in_export`. Faults
    land between `FIRST_POINT` and `last_point` of the budget (one near the
    end can be overtaken by it: the job ends before a signalled rank stops).
    Drawn kinds are then arranged: `kill_in_evaluation` faults go to the end
    (before the export kill), a `kill_in_restore` first changes places with
    the first fault that lands in training (`kill_task` where there is none),
    and in a `hybrid` schedule one `kill_in_restore` follows a `resize`, so
    that it lands while the ranks re-shard. A `kill_in_restore` takes the
    point of the fault before it (it lands in that fault's restart); a
    `kill_in_evaluation` has point 1.0, as the export kill. `only`, when
    given, restricts the kinds drawn to those of it the strategy has.

    Raises:
      ValueError: an unknown strategy, a count below 1, a kind the
        strategy has not, given kinds out of that order (a `kill_in_restore`
        first, a `kill_in_evaluation` before a fault that lands in
        training), or `last_point` outside (FIRST_POINT, 1].
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
        if kinds and kinds[0] in AFTER_A_RESTART:
            raise ValueError("strategy %s: kinds %s: %s lands in the restart of the fault before it; put another "
                             "fault first" % (strategy, ", ".join(kinds), kinds[0]))
        ends = [index for index, kind in enumerate(kinds) if kind in AT_THE_END]
        if ends and ends[-1] - ends[0] + 1 != len(ends) or ends and ends[-1] != len(kinds) - 1:
            raise ValueError("strategy %s: kinds %s: %s lands at the job's end; put it after every other fault"
                             % (strategy, ", ".join(kinds), " and ".join(AT_THE_END)))
    else:
        pool = [kind for kind in KINDS_OF[strategy] if not only or kind in only]
        if not pool:
            raise ValueError("strategy %s has none of the kinds %s (its kinds: %s)" % (
                strategy, ", ".join(only), ", ".join(KINDS_OF[strategy])))
        kinds = []
        while len(kinds) < body:
            kinds += rng.sample(pool, len(pool))
        kinds = arrange(kinds[:body])
    training = [kind for kind in kinds if kind not in AT_THE_END]
    spacing = (last_point - FIRST_POINT) / max(1, len(training))
    faults: List[Fault] = []
    size = HYBRID_SIZES[0]
    for index, kind in enumerate(kinds):
        point = FIRST_POINT + spacing * (index + rng.uniform(0.1, 0.9))
        target = rng.randrange(1 << 16)
        if kind in AT_THE_END:
            point = 1.0
        elif kind in AFTER_A_RESTART:
            point = faults[-1].point
        if kind == RESIZE:
            size = HYBRID_SIZES[1] if size == HYBRID_SIZES[0] else HYBRID_SIZES[0]
        faults.append(Fault(kind, round(point, 4), target, size if kind == RESIZE else 0))
    if export_kill:
        faults.append(Fault(KILL_IN_EXPORT, 1.0, 0))
    return faults


def arrange(kinds: Sequence[str]) -> List[str]:
    """Drawn kinds in an order a job can take (see `schedule`): deterministic, from the drawn order alone."""
    ordered = [kind for kind in kinds if kind not in AT_THE_END] + [kind for kind in kinds if kind in AT_THE_END]
    last = len([kind for kind in ordered if kind not in AT_THE_END])
    restores = [index for index in range(last) if ordered[index] in AFTER_A_RESTART]
    resizes = [index for index in range(last - 1) if ordered[index] == RESIZE]
    if restores and resizes and not any(ordered[index + 1] in AFTER_A_RESTART for index in resizes):
        restore = ordered.pop(restores[0])
        ordered.insert(resizes[0] + (1 if restores[0] > resizes[0] else 0), restore)
    if ordered and ordered[0] in AFTER_A_RESTART:
        others = [index for index in range(last) if ordered[index] not in AFTER_A_RESTART]
        if others:
            ordered[0], ordered[others[0]] = ordered[others[0]], ordered[0]
        else:
            ordered[0] = KILL_TASK
    return ordered


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
      validation_dir: the validation split the job evaluates on
        (`kill_in_evaluation` looks for its files open in the chief).
    """

    def __init__(self, view: JobView, examples_budget: int, export_dir: str, slots_file: Optional[str],
                 timeout_s: float, log=print, validation_dir: str = ""):
        self.view = view
        self.validation_dir = os.path.realpath(validation_dir) if validation_dir else ""
        self.examples_budget = examples_budget
        self.export_dir = export_dir
        self.slots_file = slots_file
        self.timeout_s = timeout_s
        self.log = log
        self.start_time = time.time()
        self.records: List[FaultRecord] = []
        # When the current attempt was seen training (the next fault counts progress from then).
        self._attempt_since = 0.0
        # The cgroup a `memory` fault squeezed, its limit restored once the restart is logged.
        self._squeeze: Optional[soak_memory.Squeeze] = None

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
            following = faults[number].kind if number < len(faults) else None
            # The restart of a fault at the job's end trains no step; one a `kill_in_restore` lands in, not yet.
            train_again = fault.kind not in (KILL_IN_EXPORT, KILL_IN_EVALUATION) and following not in AFTER_A_RESTART
            self._await_restart(record, train_again, window_follows=following is not None and not train_again)
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
        if fault.kind in (KILL_IN_EXPORT, KILL_IN_EVALUATION) + AFTER_A_RESTART:
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
        elif fault.kind == KILL_IN_RESTORE:
            self._kill_in_restore(record)
        elif fault.kind == KILL_IN_EVALUATION:
            self._kill_in_evaluation(record)
        elif fault.kind == MEMORY:
            self._squeeze_memory(record)
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
    def _kill_in_restore(self, record: FaultRecord) -> None:
        """SIGKILL of the chief of the restart the fault before caused, between its resume line and its first step.

        The chief's log says it resumes from a checkpoint (`RESUME_LINE`: it
        found the checkpoint and goes on to build its graph, restore the
        variables, and in a `hybrid` job re-shard the tables it reads at
        another number of ranks); no task of the restart has reported a step
        yet. The chief is stopped (SIGSTOP) at once, and killed if still no
        step is reported; otherwise the window was missed and the soak fails.
        """
        attempt = len(self.view.restarts())
        if attempt == 0:
            raise SoakError("fault %d (%s) lands in a restart, and the job has not restarted" % (
                record.number, record.fault.kind))

        def window():
            line = RESUME_LINE.search(self.view.chief_log(attempt))
            if line is None:
                return None
            pids = self.view.training_pids()
            return (line.group(0), pids[0]) if pids else None
        seen, chief = self._wait("restart %d's chief to resume from its checkpoint" % attempt, window,
                                 poll_s=WINDOW_POLL_S)
        detected = time.perf_counter()
        os.kill(chief, signal.SIGSTOP)
        stopped_ms = 1000 * (time.perf_counter() - detected)
        if self._trained_since_restart():
            os.kill(chief, signal.SIGCONT)
            raise SoakError("fault %d: restart %d reported a step before its chief was stopped in its restore"
                            % (record.number, attempt))
        checkpoint_files = sorted({os.path.basename(path) for path in open_files(chief)
                                   if path.startswith(self.view.model_dir + os.sep) and ".ckpt-" in path})
        record.target = "chief pid %d" % chief
        record.placement = "inside restart %d's restore: its log said \"%s\", no step of the restart reported; " \
            "stopped %.2f ms after the soak saw it%s" % (attempt, seen, stopped_ms,
                                    "; open: " + ", ".join(checkpoint_files) if checkpoint_files else "")
        self._send(chief, signal.SIGKILL, record)

    def _trained_since_restart(self) -> bool:
        progress = self.view.progress()
        return progress is not None and progress["time"] >= self._attempt_since

    def _kill_in_evaluation(self, record: FaultRecord) -> None:
        """SIGKILL of the chief while it reads the validation rows of the final evaluation.

        The window opens once the attempt has trained its last step (the
        chief's progress reached the step its log says training goes to) or
        its log says the restored checkpoint holds the budget already; then
        the chief's open files are watched until one of the validation split
        is open. The chief is stopped (SIGSTOP) and killed while there is no
        metrics file and no export under way yet.
        """
        if not self.validation_dir:
            raise SoakError("%s needs the job's validation directory" % KILL_IN_EVALUATION)
        attempt = len(self.view.restarts())

        def trained():
            log = self.view.chief_log(attempt)
            if BUDGET_HELD_LINE.search(log):
                return "its log says the checkpoint holds the budget"
            final = TRAINING_TO_LINE.search(log)
            progress = self.view.progress()
            if final and progress is not None and progress["time"] >= self._attempt_since \
                    and progress["global_step"] >= int(final.group(1)):
                return "training reached global step %d" % progress["global_step"]
            return None
        ended = self._wait("the end of training", trained, poll_s=WINDOW_POLL_S)
        chief = self._wait("the chief", lambda: next(iter(self.view.training_pids()), None))

        def reading():
            return next((path for path in open_files(chief)
                         if path.startswith(self.validation_dir + os.sep)), None)
        path = self._wait("the chief to read the validation rows", reading, poll_s=EVALUATION_POLL_S)
        detected = time.perf_counter()
        os.kill(chief, signal.SIGSTOP)
        stopped_ms = 1000 * (time.perf_counter() - detected)
        exports = [name for name in os.listdir(self.export_dir) if EXPORT_TEMP.match(name)]
        if exports:
            os.kill(chief, signal.SIGCONT)
            raise SoakError("fault %d: the export had begun (%s) when the chief was stopped in its evaluation"
                            % (record.number, ", ".join(exports)))
        record.target = "chief pid %d" % chief
        record.placement = "inside the final evaluation: %s; stopped %.2f ms after %s was open in the chief; no " \
            "export begun" % (ended, stopped_ms, os.path.relpath(path, os.path.dirname(self.validation_dir)))
        self._send(chief, signal.SIGKILL, record)

    def _squeeze_memory(self, record: FaultRecord) -> None:
        """Lowers the memory limit of the tasks' host cgroup below their need until the kernel kills one."""
        pids = self._wait("the training tasks", self.view.training_pids)
        try:
            controller = memory_lib.find_controller()
            squeeze = soak_memory.Squeeze(soak_memory.task_cgroup(pids[0], controller), controller)
        except (memory_lib.MemoryLimitError, soak_memory.SqueezeError) as e:
            raise SoakError("fault %d (%s): %s" % (record.number, MEMORY, e)) from e
        progress = self.view.progress()
        record.step_at_fault = progress["global_step"] if progress else 0
        record.time = time.time()
        record.elapsed = record.time - self.start_time
        record.signal = "OOM kill"
        try:
            pressed = soak_memory.squeeze_until_killed(squeeze, self.timeout_s, self.view.running, SQUEEZE_INTERVAL_S,
                                                       POLL_S)
        except soak_memory.SqueezeError as e:
            squeeze.restore()
            raise SoakError("fault %d (%s): %s" % (record.number, MEMORY, e)) from e
        except BaseException:
            squeeze.restore()
            raise
        # The fault landed at the kill: the steps it may cost are those trained until then.
        progress = self.view.progress()
        record.step_at_fault = progress["global_step"] if progress else record.step_at_fault
        record.target = "host cgroup %s (%d process(es) killed)" % (os.path.basename(squeeze.path), squeeze.killed())
        record.placement = "armed at %.0f%% of the budget; %s%s; killed %.1f s after the injection" % (
            100 * record.fault.point, squeeze.describe(),
            "; no task took a page within %.1f s, so a pressing process in the host's cgroup took memory from "
            "then" % SQUEEZE_INTERVAL_S if pressed else "", time.time() - record.time)
        self._squeeze = squeeze

    def _await_restart(self, record: FaultRecord, train_again: bool = True, window_follows: bool = True) -> None:
        """Waits for the restart `record`'s fault caused, its resume step and (`train_again`) its first step.

        `window_follows`: the next fault's window may open as this restart
        resumes (a `kill_in_restore` in it, a kill in the evaluation or export
        of a restart that trains no step), so its resume line is read at once
        (`WINDOW_POLL_S`); otherwise the wait for its first step (0.2 s) sets
        the pace, or nothing waits on it.
        """
        number = record.number

        def restarted():
            lines = [r for r in self.view.restarts() if r[0] == number]
            return lines[0] if lines else None
        k, task, how = self._wait("restart %d" % number, restarted)
        if len(self.view.restarts()) != number:
            raise SoakError("fault %d caused %d restarts, expected one: %s"
                            % (number, len(self.view.restarts()) - number + 1, self.view.restarts()))
        record.restart = "restart %d: task %s %s" % (k, task, how)
        squeeze, self._squeeze = self._squeeze, None
        if squeeze is not None:
            restored = squeeze.restore()
            record.placement += "; after the restart line its limit %s" % (
                "was restored" if restored else "went with its attempt (the restart has a cgroup of its own)")
        record.resume_step = self._wait("the restart's resume step", lambda: self.view.resume_step(number),
                                        poll_s=WINDOW_POLL_S if window_follows else POLL_S)

        def training_again():
            progress = self.view.progress()
            return progress is not None and progress["time"] > record.time
        if train_again:
            self._wait("restart %d to train" % number, training_again, poll_s=0.2)
        record.restart_seconds = time.time() - record.time
        record.steps_lost = max(0, record.step_at_fault - record.resume_step)
