"""A soak: `deepfm.launch --max_restarts` jobs under a seeded schedule of faults, checked to lose nothing.

    python -m benchmarks.soak [--strategies ps,horovod,hybrid] [--faults 20] [--seed 1]
                              [--rows 540000] [--epochs 1] [--references 2] [--name soak_seed1]

(`make soak SOAK_SEED=N` is the long soak; its flags are generated from
`soak_config.SoakConfig` and `SoakCommand`.)

For each strategy, the same job runs twice on the same synthetic data, with
the same seed and flags: once without faults (the reference), once under
`benchmarks.soak_faults.schedule(seed, strategy, faults)`: SIGKILL of a
random training task, SIGTERM of one, a kill inside a checkpoint write and
inside the export (windows detected, see `soak_faults`), a lost parameter
server (`ps`), and restarts with another number of ranks (`hybrid`, 2 -> 3
-> 2 ...). Each fault causes exactly one restart of the launcher, and the
next fault is armed only once that restart trains again, so a schedule
replays the same story every time.

After the faulted job it checks (`check_*`), each check a row of the report:

* the launcher succeeded after exactly one restart per fault;
* the job ended at its budget: the examples trained by its last global step
  (`deepfm.runtime.input_position`) are those of the reference (a `ps` job
  may pass it by a step of each other worker, as the reference may; a
  resized `hybrid` job by less than one step of its last size);
* every checkpoint left in the model directory reads back whole and holds
  this model's variables (`deepfm.runtime.checkpoints`);
* the final validation AUC is within `AUC_TOLERANCE` of the reference's
  (asynchronous `ps`: at most that much below it, see `check_auc`);
* each fault lost at most the steps since the latest checkpoint when it
  landed (the restart resumed at or after that checkpoint);
* nothing is left: no process of the job, no port it listened on, no FIFO,
  no network namespace of its processes, nothing in the job's temporary
  directory (`TMPDIR`), no partial save or export in the model and export
  directories.

"Same examples": a synchronous job (`horovod`, `hybrid` at a fixed size)
resumed from step g skips the batches of the first g steps, so the faulted
job trains on the reference's batches at every step. Asynchronous `ps`
workers each skip an equal share (their own positions are not in the
checkpoint), so the count of examples is exact and the rows those of the
workers' average position; the reference's own asynchronous updates come in
another order from run to run anyway. A `hybrid` restart with another
number of ranks keeps the count of examples (its budget is in examples) and
deals the rest of the pass out again over the new ranks.

Writes `benchmarks/results/<name>.md` and `.json`: the command, the machine
(`lscpu`), every fault with its step, time, placement, restart and steps
lost, and every check.
"""

import dataclasses
import glob
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

import psutil
from absl import app

from benchmarks import common, soak_checks, soak_view
from benchmarks import soak_faults as faults_lib
from benchmarks.soak_config import (  # noqa: F401  (the soak's names, read here by the tests and the docs)
    AUC_TOLERANCE,
    DEFAULT_BATCH,
    DEFAULT_CHECKPOINT_STEPS,
    DEFAULT_EPOCHS,
    DEFAULT_FAULTS,
    DEFAULT_FEATURE_SIZE,
    DEFAULT_PS_WORKERS,
    DEFAULT_ROWS,
    DEFAULT_SEED,
    DEFAULT_WAIT_S,
    LOGLOSS_TOLERANCE,
    NAME,
    STRATEGIES,
    WORK_DIR_MARK,
    SoakCommand,
    SoakConfig,
    epochs_of,
    parse_kinds,
)
from benchmarks.soak_report import lscpu, report, write  # noqa: F401
from cli import config_flags, entry
from input_pipeline import schema
from jobs.local import processes

PROGRAM = "benchmarks.soak"
LOG_EVERY_STEPS = 5
# Rank 0's checkpoint bundle of a step (not a `hybrid` rank's shard file beside it).
CHECKPOINT_INDEX = re.compile(r"^model\.ckpt-(\d+)\.index$")
# Lines of a failed task's log in the report, for a restart no fault caused.
UNEXPECTED_LOG_LINES = 15
# A job's error when the soak was stopped during it.
INTERRUPTED = "the soak was interrupted during this job"
# How long a launcher stopped by the soak (after a failure) may take to stop its tasks.
STOP_WAIT_S = 120
# The model and the optimizer of every job: small enough for two cores, its checkpoint large enough
# (feature_size x (embedding + 1) x 3 floats with Adam's two slots) that a save takes some milliseconds. One pass
# at this learning rate: more passes, or a higher rate, overfit the rare ids (the validation log loss then rises
# above the base rate's while the AUC barely moves).
MODEL_LEARNING_RATE = 0.001
MODEL_L2_REG = 0.0001
MODEL_FLAGS = ("--embedding_size", "8", "--deep_layers", "32,16", "--dropout", "0,0", "--learning_rate",
               str(MODEL_LEARNING_RATE), "--l2_reg", str(MODEL_L2_REG), "--intra_op_threads", "1")
LAUNCH_FLAGS = {
    "ps": ("--strategy", "ps", "--num_ps", "2"),
    "horovod": ("--strategy", "horovod", "--np", "2"),
    "hybrid": ("--strategy", "hybrid", "--np", "2"),
}
PARTIAL_NAMES = (faults_lib.CHECKPOINT_TEMP, faults_lib.EXPORT_TEMP)
NETNS_DIR = "/run/netns"
# The files of a split whose lines begin with their label (`dataprep.writers`).


@dataclasses.dataclass
class JobResult:
    """One launcher job of the soak (the reference or the faulted one)."""

    strategy: str
    faulted: bool
    returncode: Optional[int] = None
    seconds: float = 0.0
    metrics: dict = dataclasses.field(default_factory=dict)
    final_step: Optional[int] = None
    examples: Optional[int] = None
    restarts: int = 0
    unexpected_restarts: List[str] = dataclasses.field(default_factory=list)
    faults: List[dict] = dataclasses.field(default_factory=list)
    leftovers: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    error: str = ""
    dirs: Dict[str, str] = dataclasses.field(default_factory=dict)


def log_line(text: str) -> None:
    print(text, flush=True)


def train_flags(config: SoakConfig, data_dir: str, dirs: Dict[str, str], strategy: str) -> List[str]:
    """The flags after `--` of every job of `strategy` in the soak."""
    return ["--train_data", data_dir, "--model_dir", dirs["model"], "--export_dir", dirs["export"],
            "--metrics_file", dirs["metrics"], "--progress_file", os.path.join(dirs["progress"], "{task}.jsonl"),
            "--batch_size", str(config.batch_size), "--num_epochs", str(epochs_of(config, strategy)),
            "--seed", str(config.seed),
            "--save_checkpoints_steps", str(config.checkpoint_steps), "--log_every_n_steps", str(LOG_EVERY_STEPS)
            ] + list(MODEL_FLAGS)


def launch_command(config: SoakConfig, strategy: str, data_dir: str, dirs: Dict[str, str], restarts: int
                   ) -> List[str]:
    """The launcher's command line of one job: a faulted `hybrid` job is elastic (2 or 3 ranks)."""
    argv = [sys.executable, "-m", "deepfm.launch"] + list(LAUNCH_FLAGS[strategy])
    if strategy == "ps":
        argv += ["--num_workers", str(config.ps_workers)]
    argv += ["--max_restarts", str(restarts), "--log_dir", dirs["logs"]]
    if strategy == "hybrid" and restarts:
        argv += ["--min_replicas", str(min(faults_lib.HYBRID_SIZES)), "--max_replicas",
                 str(max(faults_lib.HYBRID_SIZES)), "--host_discovery_script", "cat %s" % dirs["slots"]]
    return argv + ["--"] + train_flags(config, data_dir, dirs, strategy)


def job_environment(tmp_dir: str) -> Dict[str, str]:
    """A user's environment (PATH, HOME) and the job's own temporary directory."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
            "TMPDIR": tmp_dir, "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_job(config: SoakConfig, strategy: str, data_dir: str, schedule: Sequence[faults_lib.Fault],
            examples_budget: Optional[int], log=log_line, name: str = "") -> JobResult:
    """Runs one job (faulted when `schedule` is not empty) and looks for what it left."""
    faulted = bool(schedule)
    root = os.path.join(config.work_dir, strategy, name or ("faulted" if faulted else "reference"))
    dirs = {name: os.path.join(root, name) for name in ("model", "export", "progress", "logs", "tmp")}
    dirs["metrics"] = os.path.join(root, "metrics.json")
    dirs["slots"] = os.path.join(root, "slots")
    dirs["output"] = os.path.join(root, "launcher_output.txt")
    for name in ("export", "progress", "tmp"):
        os.makedirs(dirs[name])
    with open(dirs["slots"], "w") as f:
        f.write("localhost:%d\n" % faults_lib.HYBRID_SIZES[0])
    result = JobResult(strategy=strategy, faulted=faulted, dirs=dirs)
    argv = launch_command(config, strategy, data_dir, dirs, len(schedule))
    start = time.monotonic()
    with open(dirs["output"], "wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=job_environment(dirs["tmp"]),
                                   cwd=root, start_new_session=True)
    view = soak_view.JobView(process, dirs["output"], dirs["logs"], dirs["model"], dirs["progress"], strategy)
    try:
        if faulted:
            if examples_budget is None:
                raise ValueError("a faulted job needs the examples of its fault-free run")
            injector = faults_lib.Injector(view, examples_budget, dirs["export"], dirs["slots"], config.wait_s, log,
                                           validation_dir=os.path.join(data_dir, schema.VALIDATION_SPLIT))
            try:
                injector.run(schedule)
            finally:
                result.faults = [record.to_dict() for record in injector.records]
        deadline = time.monotonic() + config.wait_s
        while process.poll() is None and time.monotonic() < deadline:
            view.track()
            time.sleep(0.2)
        if process.poll() is None:
            raise faults_lib.SoakError("the launcher ran %.0f s past its last fault" % config.wait_s)
    except faults_lib.SoakError as e:
        result.error = str(e)
    except KeyboardInterrupt:
        # The soak was stopped (Ctrl-C): the job is stopped below, and its faults so far are reported.
        result.error = INTERRUPTED
    finally:
        view.track(force=True)
        if process.poll() is None:
            # The launcher stops every task on SIGTERM; SIGKILL only if it does not.
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        result.seconds = time.monotonic() - start
        result.returncode = process.returncode
        result.leftovers = leftovers(view, dirs)
        for survivor in view.alive():
            survivor.kill()
    result.restarts = len(view.restarts())
    result.unexpected_restarts = unexpected_restarts(view, result.faults)
    if os.path.isfile(dirs["metrics"]):
        with open(dirs["metrics"]) as f:
            result.metrics = json.load(f)
        result.final_step = result.metrics.get("global_step")
        if result.final_step is not None:
            result.examples = soak_view.examples_at(dirs["model"], result.final_step)
    return result


def unexpected_restarts(view: soak_view.JobView, faults: Sequence[dict]) -> List[str]:
    """Each restart of the launcher that no fault caused: its failed task and the end of that task's log.

    The log is the one of the attempt the task failed in (the attempt
    before the restart).
    """
    caused = {fault["restart"].split(":")[0] for fault in faults if fault.get("restart")}
    found = []
    for number, task, how in view.restarts():
        if "restart %d" % number in caused:
            continue
        log = os.path.join(view.attempt_dir(number - 1), task + ".log")
        tail = processes.log_tail(log, lines=UNEXPECTED_LOG_LINES) if os.path.isfile(log) else "(no log)"
        found.append("restart %d no fault caused: task %s %s; its log ends:\n%s" % (
            number, task, how, tail))
    return found


def leftovers(view: soak_view.JobView, dirs: Dict[str, str]) -> Dict[str, List[str]]:
    """What the job left behind, by kind (empty lists: nothing)."""
    found: Dict[str, List[str]] = {"processes": [], "ports": [], "fifos": [], "network namespaces": [],
                                   "temporary files": []}
    ours = {process.pid for process in view.alive()}
    # Processes of the job that left its process tree (re-parented) are found by what they name.
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and _names_the_job(process, dirs):
                ours.add(process.pid)
        except psutil.Error:
            continue
    for pid in sorted(ours):
        try:
            found["processes"].append("%d %s" % (pid, " ".join(psutil.Process(pid).cmdline()[:6])))
        except psutil.Error:
            continue
    # A port is left where one of the job's processes still listens on it; another program may take a
    # port the job used once it is free.
    found["ports"] = ["%d (%s)" % (c.laddr.port, view.listening_ports[c.laddr.port])
                      for c in psutil.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN and c.laddr.port in view.listening_ports and c.pid in ours]
    for directory in (os.path.dirname(dirs["model"]), dirs["tmp"]):
        for parent, _, names in os.walk(directory):
            for name in names:
                path = os.path.join(parent, name)
                if stat.S_ISFIFO(os.lstat(path).st_mode):
                    found["fifos"].append(path)
    found["network namespaces"] = _namespaces_left(view.network_namespaces)
    found["temporary files"] = sorted(os.path.join(dirs["tmp"], name) for name in os.listdir(dirs["tmp"]))
    for directory in (dirs["model"], dirs["export"]):
        if os.path.isdir(directory):
            found["temporary files"] += sorted(
                os.path.join(directory, name) for name in os.listdir(directory)
                if any(p.match(name) for p in PARTIAL_NAMES) or ".tmp" in name)
    return found


def _names_the_job(process: psutil.Process, dirs: Dict[str, str]) -> bool:
    """Whether a process belongs to the job: its command line names the model directory, or its TMPDIR is the job's."""
    if any(dirs["model"] in arg for arg in process.cmdline()):
        return True
    return process.environ().get("TMPDIR", "").startswith(dirs["tmp"])


def _namespaces_left(seen: Dict[str, str]) -> List[str]:
    """The network namespaces the job's processes were in that still exist (a process in it, or a name)."""
    if not seen:
        return []
    alive = set()
    for path in glob.glob("/proc/[0-9]*/ns/net") + glob.glob(os.path.join(NETNS_DIR, "*")):
        try:
            alive.add(os.readlink(path) if path.startswith("/proc") else "net:[%d]" % os.stat(path).st_ino)
        except OSError:
            continue
    return ["%s (%s)" % (namespace, owner) for namespace, owner in sorted(seen.items()) if namespace in alive]


# --- checks -----------------------------------------------------------------------------------------------
def check_job(config: SoakConfig, strategy: str, references: Sequence[JobResult], soak: JobResult,
              planned: int, base_rate: float) -> List[soak_checks.Check]:
    """Every check of a faulted job against its fault-free references (see the module docstring).

    Args:
      planned: the faults of its schedule (each must have landed).
      base_rate: the validation log loss of predicting the positive rate
        (`base_rate_logloss`).
    """
    reference = references[0]
    checks = [soak_checks.Check("the job succeeded after one restart per fault",
                    soak.returncode == 0 and not soak.error and soak.restarts == len(soak.faults) == planned,
                    "exit code %s, %d restart(s) for %d fault(s) of %d planned%s%s" % (
                        soak.returncode, soak.restarts, len(soak.faults), planned,
                        "; " + soak.error if soak.error else "",
                        "".join("; " + text for text in soak.unexpected_restarts)))]
    # Asynchronous workers each finish the step in flight when the budget is reached; a job resized on the way
    # ends on the first step that reaches its budget in examples, less than one step of its last size past it.
    slack = config.batch_size * (config.ps_workers if strategy == "ps" else
                                 max(faults_lib.HYBRID_SIZES) - 1 if strategy == "hybrid" else 0)
    if soak.examples is not None and reference.examples is not None:
        checks.append(soak_checks.Check("it ended at its budget", abs(soak.examples - reference.examples) <= slack,
                            "%d examples by global step %s; the reference %d by step %s (%d examples of slack)" % (
                                soak.examples, soak.final_step, reference.examples, reference.final_step, slack)))
    else:
        checks.append(soak_checks.Check("it ended at its budget", False, "no final step (no metrics file)"))
    checks.append(check_checkpoints(config, soak.dirs["model"]))
    checks.append(soak_checks.check_auc(strategy, references, soak))
    checks.append(soak_checks.check_base_rate(references, base_rate))
    checks.append(soak_checks.check_logloss(strategy, references, soak))
    late = ["fault %d resumed at %s, before the checkpoint at %s" % (
        f["number"], f["resume_step"], f["checkpoint_at_fault"]) for f in soak.faults
        if f["resume_step"] is None or f["resume_step"] < (f["checkpoint_at_fault"] or 0)]
    lost = [f["steps_lost"] or 0 for f in soak.faults]
    checks.append(soak_checks.Check("steps lost at most those since the last checkpoint", not late,
                        "; ".join(late) or "steps lost per fault: %s" % ", ".join(map(str, lost))))
    left: Dict[str, List[str]] = {}
    for job in list(references) + [soak]:
        for kind, items in job.leftovers.items():
            if items:
                left.setdefault("%s: %s" % (os.path.basename(os.path.dirname(job.dirs["model"])), kind), items)
    checks.append(soak_checks.Check("nothing left by any job", not left,
                        json.dumps(left) if left else "no process, port, FIFO, network namespace or temporary file "
                        "after any of the %d job(s)" % (len(references) + 1)))
    return checks


def _checkpoint_step(index_path: str) -> int:
    """The global step of rank 0's checkpoint index `.../model.ckpt-<step>.index`."""
    match = CHECKPOINT_INDEX.match(os.path.basename(index_path))
    assert match is not None, index_path
    return int(match.group(1))


def check_checkpoints(config: SoakConfig, model_dir: str) -> soak_checks.Check:
    """Every checkpoint in `model_dir` reads back whole and holds this model's variables."""
    from deepfm import config as config_lib
    from deepfm import models
    from deepfm.runtime import checkpoints
    model = config_lib.ModelConfig(feature_size=config.feature_size, embedding_size=8, deep_layers=(32, 16),
                                   dropout=(0.0, 0.0), learning_rate=MODEL_LEARNING_RATE,
                                   l2_reg=MODEL_L2_REG)
    # Rank 0's bundles; a `hybrid` checkpoint's shard files (`<prefix>.shard-<rank>-of-<ranks>`) go with theirs.
    paths = sorted((path for path in glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))
                    if CHECKPOINT_INDEX.match(os.path.basename(path))),
                   key=_checkpoint_step)
    bad = []
    for path in paths:
        prefix = path[:-len(".index")]
        reason = checkpoints.unreadable_reason(prefix)
        for shard in sorted(glob.glob(prefix + ".shard-*.index")):
            reason = reason or checkpoints.unreadable_reason(shard[:-len(".index")])
        if reason is None:
            try:
                checkpoints.check_model_shapes(prefix, model, models.get(model.model))
            except ValueError as e:
                reason = str(e).splitlines()[0]
        if reason:
            bad.append("%s: %s" % (os.path.basename(prefix), reason))
    steps = [_checkpoint_step(p) for p in paths]
    return soak_checks.Check("every checkpoint on disk restores", bool(paths) and not bad,
                 "; ".join(bad) or "%d checkpoint(s), steps %s" % (len(paths), ", ".join(map(str, steps))))


# --- the run and its report --------------------------------------------------------------------------------
def soak_strategy(config: SoakConfig, strategy: str, data_dir: str, log=log_line) -> dict:
    """The fault-free references and the faulted job of one strategy, and their checks."""
    schedule = faults_lib.schedule(config.seed, strategy, config.faults, config.export_kill,
                                   config.kinds.get(strategy), config.last_point, config.fault_kinds)
    references = []
    for index in range(config.references):
        log("%s: fault-free job %d of %d" % (strategy, index + 1, config.references))
        reference = run_job(config, strategy, data_dir, [], None, log,
                            name="reference" if not index else "reference_%d" % (index + 1))
        log("%s: fault-free job ended with exit code %s after %.0f s, AUC %s, log loss %s, %s examples" % (
            strategy, reference.returncode, reference.seconds, reference.metrics.get("auc"),
            reference.metrics.get("logloss"), reference.examples))
        references.append(reference)
    base_rate = soak_checks.base_rate_logloss(data_dir)
    result: Dict[str, Any] = {"strategy": strategy, "schedule": [dataclasses.asdict(f) for f in schedule],
                              "references": [dataclasses.asdict(r) for r in references], "faulted": None,
                              "base_rate_logloss": base_rate}
    failed = [r for r in references if r.returncode != 0 or r.examples is None]
    result["interrupted"] = any(r.error == INTERRUPTED for r in references)
    if failed:
        result["checks"] = [dataclasses.asdict(soak_checks.Check("the fault-free jobs succeeded", False, "; ".join(
            "exit code %s %s" % (r.returncode, r.error) for r in failed)))]
        return result
    log("%s: faulted job, schedule: %s" % (strategy, "; ".join(f.describe() for f in schedule)))
    soak = run_job(config, strategy, data_dir, schedule, references[0].examples, log)
    checks = check_job(config, strategy, references, soak, len(schedule), base_rate)
    for check in checks:
        log("%s: %s %s: %s" % (strategy, "PASS" if check.passed else "FAIL", check.name, check.detail))
    result.update(faulted=dataclasses.asdict(soak), checks=[dataclasses.asdict(c) for c in checks],
                  interrupted=soak.error == INTERRUPTED)
    return result


def run(config: SoakConfig, command: SoakCommand) -> int:
    """Soaks `config`'s strategies one after the other, writing the report after each; returns the exit status."""
    recorded = "python -m benchmarks.soak " + " ".join(sys.argv[1:])
    own_work_dir = not config.work_dir
    work_dir = config.work_dir or tempfile.mkdtemp(prefix="deepfm-soak-")
    try:
        config = dataclasses.replace(config, work_dir=os.path.abspath(work_dir), kinds=parse_kinds(command.kinds))
        start = time.monotonic()
        data_dir = os.path.join(config.work_dir, "data")
        common.ensure_data(data_dir, config.rows, config.feature_size, seed=config.seed)
        results = []
        for strategy in config.strategies:
            results.append(soak_strategy(config, strategy, data_dir))
            # Written after each strategy: a soak stopped later keeps what it measured.
            path = write(command, config, recorded, results, time.monotonic() - start)
            print("wrote %s" % path, flush=True)
            if results[-1].get("interrupted"):
                print("interrupted: %s not soaked" % (", ".join(config.strategies[len(results):]) or "nothing else"),
                      file=sys.stderr)
                return 130
        failed = [c["name"] for r in results for c in r["checks"] if not c["passed"]]
        if failed:
            print("FAILED: %s" % "; ".join(failed), file=sys.stderr)
            return 1
        return 0
    finally:
        if own_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


def main() -> None:
    """`python -m benchmarks.soak`: the flags of `SoakConfig` and `SoakCommand`."""
    def start(argv: List[str]) -> int:
        if len(argv) > 1:
            raise app.UsageError("unexpected arguments %s: give flags only" % " ".join(argv[1:]))
        # The checks build the model in this process: TensorFlow's notices stay off the soak's console.
        entry.configure_logging(entry.flags_want_detail())
        try:
            return run(SoakConfig(**config_flags.values(SoakConfig)), SoakCommand(**config_flags.values(SoakCommand)))
        except ValueError as e:
            raise app.UsageError(str(e)) from e

    entry.run(start, PROGRAM, define_flags=lambda: config_flags.define_flags([SoakConfig, SoakCommand]),
              tensorflow=entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    main()
