"""Local multi-process jobs: a parameter-server cluster or Horovod ranks on this machine.

The library behind `python -m deepfm.launch` (see there for the command
line). Every process is supervised by `jobs.local.processes.ProcessGroup`.

Restarts (`LaunchConfig.max_restarts`, torchrun's `--max_restarts`): when a
task fails, every task is stopped (the training tasks first, so that a chief
saves a checkpoint at its step on SIGTERM while the parameter servers are
still up) and the whole job starts again, on new ports, from the latest
checkpoint of its `--model_dir`; the step budget is the same global step,
so a restarted job ends where an uninterrupted one would. Attempt 0 logs to
`log_dir`, restart k to `log_dir/restart_<k>`.

Elastic restarts (`min_replicas < max_replicas`, `jobs.elastic`): before
every start, a host-discovery script in Horovod's elastic format says how
many workers are up (`host:slots` lines; on this machine, the slots count);
the job starts with that many training workers (ps: the chief included;
Horovod: ranks), at most `max_replicas`, and fails when fewer than
`min_replicas` are up. A worker that is gone for good so leaves the job
running on the others from the latest checkpoint, and one that is back
joins at the next restart. Each process derives its data shard and
learning-rate scaling from the new size, as at any start.
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Dict, List, Mapping, Optional, Sequence

from cli import config_flags
from jobs import elastic
from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.local import horovod_runner as horovod_runner_lib
from jobs.local import memory as memory_lib
from jobs.local import processes
from planner import cost_model
from strategies import cluster as cluster_lib
from strategies import strategy_names as names

CONTROLLERS = ("auto", "gloo", "mpi")
CONTROLLER_AUTO = CONTROLLERS[0]
# The strategy launched without --strategy: a cluster of parameter servers.
DEFAULT_STRATEGY = names.PS
TRAIN_MODULE = "deepfm.train"
MPIRUN = "mpirun"
# horovodrun's options for mpirun: a rank waiting in MPI yields its core (Open MPI spins otherwise).
MPI_YIELD_ARGS = "--mpi-args=" + spec_lib.MPI_YIELD_OPTIONS
HOROVOD_TASK = "horovodrun_0"
HOROVOD_RANK_LOGS = "ranks"
# Flags the launcher sets itself; they may not follow `--`.
RESERVED_TRAIN_FLAGS = ("strategy",)
# Flags `python -m deepfm.train` requires: checked by the launcher before any task starts (each task
# would otherwise fail on its own, after the others started), and the restarts resume from it.
REQUIRED_TRAIN_FLAGS = ("model_dir",)
# The chief's metrics file, which the launcher reads for its summary; without `--metrics_file` after
# `--`, the launcher asks for one in its log directory.
METRICS_FILE_FLAG = "metrics_file"
DEFAULT_METRICS_FILE = "metrics.json"
EXIT_FAILURE = 1
# Each attempt's tasks keep their temporary files in a directory of their own (`TMPDIR`), removed after it.
TMPDIR_VARIABLE = "TMPDIR"
ATTEMPT_TMP_PREFIX = "deepfm-launch-tmp-"
RESTART_LOG_DIR = "restart_%d"
# A training task stopped by SIGTERM finishes its step and saves a
# checkpoint (`deepfm.runtime.interrupt`) before it exits; it gets this long.
DEFAULT_STOP_GRACE_S = 30.0
# Horovod's stall check: a rank that waits this long in a collective for
# another rank is reported, and after the shutdown time the job fails (so
# that a restart can apply) instead of hanging. Set in the tasks'
# environment unless it already sets them.
HOROVOD_STALL_CHECK_VARIABLE = "HOROVOD_STALL_CHECK_TIME_SECONDS"
HOROVOD_STALL_SHUTDOWN_VARIABLE = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"
HOROVOD_STALL_CHECK_S = 60
HOROVOD_STALL_SHUTDOWN_S = 300


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """What to launch.

    Attributes:
      strategy: `ps`, or a strategy of Horovod ranks (`horovod`, `hybrid`).
      num_ps: parameter servers (ps).
      num_workers: training tasks, the chief included (ps).
      num_processes: Horovod ranks (horovod).
      log_dir: where the task logs go.
      controller: Horovod controller: `gloo`, `mpi`, or `auto` (MPI where
        `mpirun` is installed and Horovod was built with it, else Gloo).
      timeout_s: stop everything and fail after this many seconds (all
        attempts together); 0: no limit.
      host: the host name the tasks use to reach each other.
      max_restarts: restart the whole job from its latest checkpoint after
        a task failed, at most this many times; 0: fail at once.
      stop_grace_s: how long a stopped task may take to save and exit
        before it is killed.
      min_replicas: elastic lower bound of training workers (0: the fixed
        count, `num_workers` or `num_processes`).
      max_replicas: elastic upper bound (0: the fixed count).
      discovery_script: the host-discovery command an elastic job asks
        before each start (Horovod's `--host-discovery-script` format).
      program: a Python script every training task runs instead of
        `python -m deepfm.train` (a user's own training script, e.g.
        `examples/custom_model.py`): it gets `--strategy <strategy>` and the
        training flags; "" runs `deepfm.train`.
      host_memory: the memory limit of the host every task runs on
        (`config.host`: all of them, one machine), as
        `jobs.local.memory.parse_size` reads it (`6g`); "" for none. The
        tasks of an attempt share one memory cgroup with this limit; a task
        killed for memory is reported so (`processes.TaskFailedError`).
    """

    strategy: str = dataclasses.field(metadata=config_flags.metadata(
        "Distributed strategy to launch.", choices=names.MULTI_PROCESS, flag_default=DEFAULT_STRATEGY))
    log_dir: str
    num_ps: int = config_flags.field(1, "ps: parameter servers.")
    num_workers: int = config_flags.field(2, "ps: training tasks, the chief included.")
    num_processes: int = config_flags.field(
        2, "horovod, hybrid: ranks on this host (0: as many as the cost model picks for this host's cores, each "
        "with its share of the vCPUs as threads; the reason is printed).", flag="np")
    controller: str = config_flags.field(
        CONTROLLER_AUTO, "horovod: gloo, mpi, or auto (MPI where mpirun exists, Gloo otherwise). Over MPI a "
        "waiting rank yields its core (-mca mpi_yield_when_idle 1).", flag="horovod_controller", choices=CONTROLLERS)
    timeout_s: float = config_flags.field(0.0, "Stop everything and fail after this many seconds (0: no limit).")
    host: str = "localhost"
    max_restarts: int = config_flags.field(
        0, "Restart the whole job from its latest checkpoint after a task failed, at most this many times "
        "(0: fail at once).")
    stop_grace_s: float = config_flags.field(
        DEFAULT_STOP_GRACE_S, "Seconds a stopped task may take to save a checkpoint and exit before it is killed.")
    min_replicas: int = config_flags.field(
        0, "Elastic: the fewest training workers the job goes on with (0: --num_workers or --np).")
    max_replicas: int = config_flags.field(0, "Elastic: the most training workers (0: --num_workers or --np).")
    discovery_script: str = config_flags.field(
        "", "Elastic: a shell command printing the workers that are up, one host:slots line per host (Horovod's "
        "format), asked before each start.", flag="host_discovery_script")
    program: str = config_flags.field(
        "", "A training script every task runs instead of python -m deepfm.train; it gets --strategy and the "
        "flags after --.")
    host_memory: str = config_flags.field(
        "", "Memory of the host the tasks run on, all of them together (a memory cgroup; root needed): e.g. 6g, "
        "6GiB, 6500m, or bytes; \"\" for no limit. A task killed for memory is reported with its host's peak and "
        "limit.")

    def __post_init__(self):
        if self.host_memory:
            memory_lib.parse_size(self.host_memory)
        if self.program and not os.path.isfile(self.program):
            raise ValueError("--program %r is not a file: give the path of the training script every task runs"
                             % self.program)
        if self.strategy not in names.MULTI_PROCESS:
            raise ValueError("--strategy must be one of %s, got %r" % (", ".join(names.MULTI_PROCESS), self.strategy))
        if self.controller not in CONTROLLERS:
            raise ValueError("--horovod_controller must be one of %s, got %r"
                             % (", ".join(CONTROLLERS), self.controller))
        for flag, value in (("num_ps", self.num_ps), ("num_workers", self.num_workers),
                            ("np", self.num_processes)):
            if value < 1:
                raise ValueError("--%s must be >= 1, got %r" % (flag, value))
        for flag, amount in (("timeout_s", self.timeout_s), ("max_restarts", self.max_restarts),
                             ("stop_grace_s", self.stop_grace_s)):
            if amount < 0:
                raise ValueError("--%s must be >= 0, got %r" % (flag, amount))
        count = self.workers
        bounds = self.elastic_range
        if not bounds.minimum <= count <= bounds.maximum:
            raise ValueError("--%s %d is outside --min_replicas %d .. --max_replicas %d"
                             % (self.workers_flag, count, bounds.minimum, bounds.maximum))
        if bounds.elastic and not self.discovery_script:
            raise ValueError("--min_replicas %d < --max_replicas %d needs --host_discovery_script: the command "
                             "that says how many workers are up before each start"
                             % (bounds.minimum, bounds.maximum))
        if bounds.elastic and not self.max_restarts:
            raise ValueError("--min_replicas %d < --max_replicas %d needs --max_restarts >= 1: the job resizes "
                             "when it restarts" % (bounds.minimum, bounds.maximum))

    @property
    def launch(self) -> names.Launch:
        """How the strategy is launched: a cluster of parameter servers, chief and workers, or Horovod ranks."""
        return names.launch_of(self.strategy)

    @property
    def workers_flag(self) -> str:
        return self.launch.workers_flag

    @property
    def workers(self) -> int:
        """Training workers: cluster tasks that train (the chief included), or Horovod ranks."""
        return self.num_workers if self.launch.kind == names.TF_CLUSTER else self.num_processes

    @property
    def elastic_range(self) -> elastic.ElasticRange:
        return elastic.ElasticRange(self.min_replicas or self.workers, self.max_replicas or self.workers)

    def resized(self, workers: int) -> "LaunchConfig":
        """This job with `workers` training workers."""
        if self.launch.kind == names.TF_CLUSTER:
            return dataclasses.replace(self, num_workers=workers)
        return dataclasses.replace(self, num_processes=workers)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One process to start.

    Attributes:
      name: `<task>_<index>`, e.g. `ps_0`, `chief_0`, `worker_0`.
      argv: the command line.
      env: its whole environment.
      service: whether it exits by itself once the training tasks are done
        (a parameter server).
    """

    name: str
    argv: List[str]
    env: Dict[str, str]
    service: bool = False


def check_train_args(train_args: Sequence[str], program: str = "") -> None:
    """Rejects training flags the launcher sets itself and, for `deepfm.train`, a required flag left out.

    Args:
      train_args: the flags after `--`.
      program: the training script of `--program` (its flags are its own),
        or "" for `python -m deepfm.train`.

    Raises:
      ValueError: a reserved flag (e.g. `--strategy`) follows `--`, or
        `deepfm.train` misses a flag it requires (`--model_dir`).
    """
    given = set()
    for arg in train_args:
        name = arg.lstrip("-").split("=", 1)[0]
        if arg.startswith("-") and name in RESERVED_TRAIN_FLAGS:
            raise ValueError("%r: the launcher sets --%s itself; pass it before --, not after"
                             % (arg, name))
        if arg.startswith("-"):
            given.add(name)
    missing = [name for name in REQUIRED_TRAIN_FLAGS if name not in given] if not program else []
    if missing:
        raise ValueError("--%s is required after --: every task of the job writes and resumes its checkpoints "
                         "there (e.g. -- --train_data data/synthetic --%s runs/job)" % (missing[0], missing[0]))


def flag_value(train_args: Sequence[str], name: str) -> Optional[str]:
    """The value of `--name` (or `--name=value`) among `train_args`, the last one given; None when absent."""
    value = None
    for index, arg in enumerate(train_args):
        if arg in ("-" + name, "--" + name) and index + 1 < len(train_args):
            value = train_args[index + 1]
        elif arg.startswith("--" + name + "=") or arg.startswith("-" + name + "="):
            value = arg.split("=", 1)[1]
    return value


def with_metrics_file(config: LaunchConfig, train_args: Sequence[str]) -> List[str]:
    """`train_args`, with `--metrics_file <log_dir>/metrics.json` added for `deepfm.train` when none is given."""
    if config.program or flag_value(train_args, METRICS_FILE_FLAG):
        return list(train_args)
    return list(train_args) + ["--%s=%s" % (METRICS_FILE_FLAG, os.path.join(config.log_dir, DEFAULT_METRICS_FILE))]


def result_summary(config: LaunchConfig, train_args: Sequence[str], restarts: int) -> str:
    """What a job that completed reports: its chief's metrics file (`with_metrics_file`), or where its logs are."""
    head = "job completed" + (" after %d restart(s)" % restarts if restarts else "")
    path = flag_value(with_metrics_file(config, train_args), METRICS_FILE_FLAG)
    if not path or not os.path.exists(path):
        return "%s; logs in %s" % (head, config.log_dir)
    with open(path) as f:
        metrics = json.load(f)
    auc, logloss = metrics.get("auc"), metrics.get("logloss")
    lines = [head, "strategy:           %s" % metrics.get("strategy", config.strategy)]
    if auc is not None:
        lines.append("validation AUC:     %.4f" % auc)
    if logloss is not None:
        lines.append("validation logloss: %.4f" % logloss)
    lines += ["global step:        %s" % metrics.get("global_step"),
              "model dir:          %s" % (flag_value(train_args, "model_dir") or metrics.get("model_dir")),
              "SavedModel:         %s" % (metrics.get("export_path") or "not exported"),
              "metrics file:       %s" % path,
              "logs:               %s" % config.log_dir]
    return "\n".join(lines)


def train_command(strategy: str, train_args: Sequence[str], python: str = sys.executable,
                  program: str = "") -> List[str]:
    """`python -m deepfm.train --strategy <strategy> <train_args>`, or `python <program> --strategy ...`."""
    start = [python, os.path.abspath(program)] if program else [python, "-m", TRAIN_MODULE]
    return start + ["--strategy", strategy] + list(train_args)


def task_environment(environ: Mapping[str, str]) -> Dict[str, str]:
    """The environment of every task: `environ`, unbuffered, with this package importable.

    A `TF_CONFIG` of `environ` is dropped: the launcher describes the
    cluster itself.
    """
    env = {key: value for key, value in environ.items() if key != cluster_lib.TF_CONFIG_VARIABLE}
    package_root = source_lib.project_root()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, environ.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # Several processes share this machine's GPUs.
    env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    return env


def ps_tasks(config: LaunchConfig, train_args: Sequence[str], ports: Sequence[int],
             environ: Mapping[str, str], python: str = sys.executable) -> List[TaskSpec]:
    """The tasks of a parameter-server job: the ps first, then the chief and the workers.

    Args:
      config: `num_ps`, `num_workers` and `host` are used.
      train_args: flags for `deepfm.train`.
      ports: one free port per task (chief, workers, ps, in that order).
      environ: the base environment.
      python: the interpreter of the tasks.

    Returns:
      One `TaskSpec` per task; the parameter servers are services and see
      no GPU.
    """
    jobs = cluster_lib.local_cluster(config.num_ps, config.num_workers, ports, host=config.host)
    argv = train_command(config.strategy, train_args, python, config.program)
    base_env = task_environment(environ)
    specs = []
    for job in config.launch.roles:
        for index in range(len(jobs.get(job, ()))):
            task = cluster_lib.ClusterInfo(jobs=jobs, task_type=job, task_index=index)
            env = dict(base_env, **{cluster_lib.TF_CONFIG_VARIABLE: task.to_tf_config()})
            if task.is_ps:
                env["CUDA_VISIBLE_DEVICES"] = ""
            specs.append(TaskSpec(name=task.task_name, argv=argv, env=env, service=task.is_ps))
    return specs


def horovod_runner(python: str = sys.executable) -> List[str]:
    """The command that starts Horovod's launcher for `python`'s environment (`jobs.local.horovod_runner`).

    Raises:
      FileNotFoundError: Horovod is not installed there (checked where
        `python` is this interpreter).
    """
    if python == sys.executable and importlib.util.find_spec("horovod") is None:
        raise FileNotFoundError("Horovod is not installed for %s: install it (tools/setup_venv.sh builds it)" % python)
    return horovod_runner_lib.command(python)


def resolved_controller(controller: str) -> str:
    """The controller `controller` names: `auto` is `mpi` where `mpirun` is installed, `gloo` otherwise.

    The launcher always names the controller it starts (`jobs.local.horovod_runner`
    does not check Horovod's build, which would import TensorFlow): a
    Horovod built without it fails in its ranks, naming the other one.
    """
    if controller == CONTROLLER_AUTO:
        return "mpi" if shutil.which(MPIRUN) else "gloo"
    return controller


def horovod_controller_args(controller: str) -> List[str]:
    """horovodrun's controller flag, and over MPI Open MPI's waits that yield their core.

    A rank's threads fill its cores (`planner.layouts`), so an MPI wait that
    spins takes a core from the rank's TensorFlow threads:
    `MPI_YIELD_ARGS` makes it give the core up (docs/levers.md: a `hybrid`
    job of 2 ranks on 2 cores x1.43 examples/sec over MPI).
    """
    if resolved_controller(controller) == "mpi":
        return ["--mpi", MPI_YIELD_ARGS]
    return ["--gloo"]


def horovod_transport(controller: str) -> str:
    """How the ranks `horovod_controller_args(controller)` starts talk: `cost_model.MPI` or `GLOO`."""
    return cost_model.MPI if resolved_controller(controller) == "mpi" else cost_model.GLOO


def horovod_task(config: LaunchConfig, train_args: Sequence[str], environ: Mapping[str, str],
                 python: str = sys.executable) -> TaskSpec:
    """The task of Horovod's launcher (`jobs.local.horovod_runner`) for `config.num_processes` ranks on this host.

    Each rank's output also goes to `<log_dir>/ranks/rank.<rank>/`.
    """
    n = config.num_processes
    argv = (horovod_runner(python) + horovod_controller_args(config.controller)
            + ["-np", str(n), "-H", "%s:%d" % (config.host, n),
               "--output-filename", os.path.join(config.log_dir, HOROVOD_RANK_LOGS)]
            + train_command(config.strategy, train_args, python, config.program))
    env = task_environment(environ)
    env.setdefault(HOROVOD_STALL_CHECK_VARIABLE, str(HOROVOD_STALL_CHECK_S))
    env.setdefault(HOROVOD_STALL_SHUTDOWN_VARIABLE, str(HOROVOD_STALL_SHUTDOWN_S))
    return TaskSpec(name=HOROVOD_TASK, argv=argv, env=env)


def attempt_log_dir(log_dir: str, attempt: int) -> str:
    """Where attempt `attempt` logs: `log_dir` itself for the first, `log_dir/restart_<k>` for restart k."""
    return log_dir if attempt == 0 else os.path.join(log_dir, RESTART_LOG_DIR % attempt)


def launch(config: LaunchConfig, train_args: Sequence[str], environ: Optional[Mapping[str, str]] = None,
           python: str = sys.executable) -> int:
    """Runs the job until every task has finished, restarting it up to `config.max_restarts` times.

    Args:
      config: what to launch.
      train_args: flags for `deepfm.train`, passed through unchanged.
      environ: the base environment of the tasks (default: this process's).
      python: the interpreter of the tasks.

    Returns:
      The number of restarts the job needed.

    Raises:
      ValueError: a reserved flag in `train_args`, or a host-discovery
        script that failed or printed something else.
      processes.TaskFailedError: a task failed and no restart was left;
        every task was stopped.
      TimeoutError: the job ran past `config.timeout_s`; every task was stopped.
      processes.Terminated: SIGTERM or SIGHUP; every task was stopped.
      elastic.BelowMinimumError: an elastic job has fewer workers up than
        `min_replicas` at a (re)start.
      memory_lib.MemoryLimitError: `host_memory` where memory cgroups
        cannot be made (checked before any task starts).
    """
    check_train_args(train_args, config.program)
    if config.host_memory:
        memory_lib.find_controller()
    train_args = with_metrics_file(config, train_args)
    environ = os.environ if environ is None else environ
    deadline = time.monotonic() + config.timeout_s if config.timeout_s else None
    attempt = 0
    with processes.signals_raise():
        while True:
            log_dir = attempt_log_dir(config.log_dir, attempt)
            sized = attempt_size(config)
            if config.elastic_range.elastic:
                print("elastic: starting with %d training worker(s) (--min_replicas %d, --max_replicas %d)"
                      % (sized.workers, config.elastic_range.minimum, config.elastic_range.maximum), flush=True)
            try:
                _run_attempt(dataclasses.replace(sized, log_dir=log_dir), train_args, environ, python, deadline)
                return attempt
            except processes.TaskFailedError as e:
                if attempt >= config.max_restarts:
                    if config.max_restarts:
                        print("no restart left (--max_restarts %d): task %s %s; the job ends" % (
                            config.max_restarts, e.task, e.cause), flush=True)
                    raise
                attempt += 1
                print("restart %d of %d: task %s %s; every task was stopped; restarting the job "
                      "from the latest checkpoint (logs in %s)" % (
                          attempt, config.max_restarts, e.task, e.cause,
                          attempt_log_dir(config.log_dir, attempt)), flush=True)


def attempt_size(config: LaunchConfig) -> LaunchConfig:
    """The job as it starts now: resized to the workers its discovery script reports, when it is elastic.

    Raises:
      ValueError: the script failed or printed something else.
      elastic.BelowMinimumError: fewer workers are up than `min_replicas`.
    """
    bounds = config.elastic_range
    if not bounds.elastic:
        return config
    available = elastic.discover(["/bin/sh", "-c", config.discovery_script])
    return config.resized(bounds.size(available))


def _run_attempt(config: LaunchConfig, train_args: Sequence[str], environ: Mapping[str, str], python: str,
                 deadline: Optional[float]) -> None:
    """Starts every task of the job once and supervises them until they end.

    The tasks' temporary files (`TMPDIR`: a Horovod rank's private model
    directory, Open MPI's session directory, ...) go to a directory of the
    attempt under their environment's `TMPDIR`, removed once every task is
    gone: a task killed by SIGKILL cannot remove its own. Every task runs
    as `config.host` and joins its memory cgroup (`jobs.local.memory`: with
    `host_memory` as its limit; without one, for its peak and OOM kills
    where cgroups can be made), removed with the attempt.
    """
    tmp_dir = tempfile.mkdtemp(prefix=ATTEMPT_TMP_PREFIX, dir=environ.get(TMPDIR_VARIABLE) or None)
    try:
        environ = dict(environ, **{TMPDIR_VARIABLE: tmp_dir})
        if config.launch.kind == names.TF_CLUSTER:
            ports = processes.free_ports(config.num_ps + config.num_workers, host=config.host)
            specs = ps_tasks(config, train_args, ports, environ, python)
        else:
            specs = [horovod_task(config, train_args, environ, python)]
        memories = memory_lib.HostMemories(config.host_memory)
        with processes.ProcessGroup(config.log_dir, stop_grace_seconds=config.stop_grace_s,
                                    memories=memories) as group:
            for spec in specs:
                group.start(spec.name, spec.argv, env=spec.env, service=spec.service, host=config.host)
            print("started %s; logs in %s" % (", ".join(spec.name for spec in specs), config.log_dir), flush=True)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            group.wait(timeout=timeout)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
