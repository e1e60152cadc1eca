"""Runs a distributed training job on this machine, every process supervised.

Parameter servers: a real TensorFlow gRPC cluster on localhost, one process
per task (1 chief, `num_workers - 1` workers, `num_ps` parameter servers),
each given its `TF_CONFIG`::

    python -m deepfm.launch --strategy ps --num_ps 2 --num_workers 2 --log_dir runs/ps/logs -- \\
        --train_data data/synthetic --model_dir runs/ps/model --metrics_file runs/ps/metrics.json

Horovod: `horovodrun -np N -H localhost:N` (Gloo; MPI where `mpirun` is
installed and Horovod was built with it)::

    python -m deepfm.launch --strategy horovod --np 2 -- --train_data data/synthetic --model_dir runs/hvd

The flags after `--` go unchanged to `python -m deepfm.train --strategy
<strategy>` in every task; the chief (rank 0) writes `--metrics_file` and the
export. Each task logs to `<log_dir>/<task>_<index>.log`. When a task fails,
every other process is stopped, and the launcher names the task, its exit
code and the end of its log, and exits with a non-zero code; so it does on
Ctrl-C or SIGTERM.
"""

import dataclasses
import os
import shutil
import signal
import sys
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence

from absl import app, flags

from deepfm import processes
from strategies import cluster as cluster_lib

STRATEGY_PS = "ps"
STRATEGY_HOROVOD = "horovod"
STRATEGIES = (STRATEGY_PS, STRATEGY_HOROVOD)
CONTROLLERS = ("auto", "gloo", "mpi")
TRAIN_MODULE = "deepfm.train"
HOROVODRUN = "horovodrun"
MPIRUN = "mpirun"
HOROVOD_TASK = "horovodrun_0"
HOROVOD_RANK_LOGS = "ranks"
# Flags the launcher sets itself; they may not follow `--`.
RESERVED_TRAIN_FLAGS = ("strategy",)
EXIT_FAILURE = 1


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """What to launch.

    Attributes:
      strategy: `ps` or `horovod`.
      num_ps: parameter servers (ps).
      num_workers: training tasks, the chief included (ps).
      num_processes: Horovod ranks (horovod).
      log_dir: where the task logs go.
      controller: Horovod controller: `gloo`, `mpi`, or `auto` (MPI where
        `mpirun` is installed and Horovod was built with it, else Gloo).
      timeout_s: stop everything and fail after this many seconds; 0: no
        limit.
      host: the host name the tasks use to reach each other.
    """

    strategy: str
    log_dir: str
    num_ps: int = 1
    num_workers: int = 2
    num_processes: int = 2
    controller: str = "auto"
    timeout_s: float = 0.0
    host: str = "localhost"

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError("--strategy must be one of %s, got %r" % (", ".join(STRATEGIES), self.strategy))
        if self.controller not in CONTROLLERS:
            raise ValueError("--horovod_controller must be one of %s, got %r"
                             % (", ".join(CONTROLLERS), self.controller))
        for flag, value in (("num_ps", self.num_ps), ("num_workers", self.num_workers),
                            ("np", self.num_processes)):
            if value < 1:
                raise ValueError("--%s must be >= 1, got %r" % (flag, value))
        if self.timeout_s < 0:
            raise ValueError("--timeout_s must be >= 0, got %r" % self.timeout_s)


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


def check_train_args(train_args: Sequence[str]) -> None:
    """Rejects training flags the launcher sets itself.

    Raises:
      ValueError: a reserved flag (e.g. `--strategy`) follows `--`.
    """
    for arg in train_args:
        name = arg.lstrip("-").split("=", 1)[0]
        if arg.startswith("-") and name in RESERVED_TRAIN_FLAGS:
            raise ValueError("%r: the launcher sets --%s itself; pass it before --, not after"
                             % (arg, name))


def train_command(strategy: str, train_args: Sequence[str], python: str = sys.executable) -> List[str]:
    """`python -m deepfm.train --strategy <strategy> <train_args>`."""
    return [python, "-m", TRAIN_MODULE, "--strategy", strategy] + list(train_args)


def task_environment(environ: Mapping[str, str]) -> Dict[str, str]:
    """The environment of every task: `environ`, unbuffered, with this package importable.

    A `TF_CONFIG` of `environ` is dropped: the launcher describes the
    cluster itself.
    """
    env = {key: value for key, value in environ.items() if key != cluster_lib.TF_CONFIG_VARIABLE}
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    argv = train_command(STRATEGY_PS, train_args, python)
    base_env = task_environment(environ)
    specs = []
    for job in (cluster_lib.PS, cluster_lib.CHIEF, cluster_lib.WORKER):
        for index in range(len(jobs.get(job, ()))):
            task = cluster_lib.ClusterInfo(jobs=jobs, task_type=job, task_index=index)
            env = dict(base_env, **{cluster_lib.TF_CONFIG_VARIABLE: task.to_tf_config()})
            if task.is_ps:
                env["CUDA_VISIBLE_DEVICES"] = ""
            specs.append(TaskSpec(name=task.task_name, argv=argv, env=env, service=task.is_ps))
    return specs


def find_horovodrun(python: str = sys.executable) -> str:
    """`horovodrun` beside `python` (its virtual environment), else on PATH.

    Raises:
      FileNotFoundError: no horovodrun.
    """
    beside = os.path.join(os.path.dirname(python), HOROVODRUN)
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which(HOROVODRUN)
    if found is None:
        raise FileNotFoundError("%s is neither beside %s nor on PATH: install horovod" % (HOROVODRUN, python))
    return found


def horovod_controller_args(controller: str) -> List[str]:
    """horovodrun's controller flag.

    `auto` leaves the choice to horovodrun (MPI when it was built with MPI)
    where `mpirun` is installed, and asks for Gloo otherwise.
    """
    if controller == "auto":
        return [] if shutil.which(MPIRUN) else ["--gloo"]
    return ["--" + controller]


def horovod_task(config: LaunchConfig, train_args: Sequence[str], environ: Mapping[str, str],
                 python: str = sys.executable) -> TaskSpec:
    """The `horovodrun` task of a Horovod job with `config.num_processes` ranks on this host.

    Each rank's output also goes to `<log_dir>/ranks/rank.<rank>/`.
    """
    n = config.num_processes
    argv = ([find_horovodrun(python)] + horovod_controller_args(config.controller)
            + ["-np", str(n), "-H", "%s:%d" % (config.host, n),
               "--output-filename", os.path.join(config.log_dir, HOROVOD_RANK_LOGS)]
            + train_command(STRATEGY_HOROVOD, train_args, python))
    return TaskSpec(name=HOROVOD_TASK, argv=argv, env=task_environment(environ))


def launch(config: LaunchConfig, train_args: Sequence[str], environ: Optional[Mapping[str, str]] = None,
           python: str = sys.executable) -> None:
    """Runs the job until every task has finished.

    Args:
      config: what to launch.
      train_args: flags for `deepfm.train`, passed through unchanged.
      environ: the base environment of the tasks (default: this process's).
      python: the interpreter of the tasks.

    Raises:
      ValueError: a reserved flag in `train_args`.
      processes.TaskFailedError: a task failed; every task was stopped.
      TimeoutError: the job ran past `config.timeout_s`; every task was stopped.
      processes.Terminated: SIGTERM or SIGHUP; every task was stopped.
    """
    check_train_args(train_args)
    environ = os.environ if environ is None else environ
    if config.strategy == STRATEGY_PS:
        ports = processes.free_ports(config.num_ps + config.num_workers, host=config.host)
        specs = ps_tasks(config, train_args, ports, environ, python)
    else:
        specs = [horovod_task(config, train_args, environ, python)]
    with processes.signals_raise(), processes.ProcessGroup(config.log_dir) as group:
        for spec in specs:
            group.start(spec.name, spec.argv, env=spec.env, service=spec.service)
        print("started %s; logs in %s" % (", ".join(spec.name for spec in specs), config.log_dir), flush=True)
        group.wait(timeout=config.timeout_s or None)


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the launcher's flags (the training flags follow `--`).

    `--log_dir` is absl's own flag (defined by `absl.logging`): the launcher
    writes the task logs there, by default to a new temporary directory.
    """
    flags.DEFINE_enum("strategy", STRATEGY_PS, list(STRATEGIES), "Distributed strategy to launch.")
    flags.DEFINE_integer("num_ps", 1, "ps: parameter servers.")
    flags.DEFINE_integer("num_workers", 2, "ps: training tasks, the chief included.")
    flags.DEFINE_integer("np", 2, "horovod: ranks on this host.")
    flags.DEFINE_enum("horovod_controller", "auto", list(CONTROLLERS),
                      "horovod: gloo, mpi, or auto (MPI where mpirun exists and Horovod has it).")
    flags.DEFINE_float("timeout_s", 0, "Stop everything and fail after this many seconds (0: no limit).")


def parse_flags(flag_values=FLAGS) -> LaunchConfig:
    """The `LaunchConfig` of the parsed flags.

    Raises:
      app.UsageError: a bad flag value; the message names the flag.
    """
    f = flag_values
    try:
        return LaunchConfig(strategy=f.strategy, num_ps=f.num_ps, num_workers=f.num_workers,
                            num_processes=f.np, controller=f.horovod_controller,
                            log_dir=f.log_dir or tempfile.mkdtemp(prefix="deepfm-launch-"),
                            timeout_s=f.timeout_s)
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def main(argv):
    config = parse_flags()
    try:
        launch(config, argv[1:])
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    except (processes.TaskFailedError, TimeoutError, FileNotFoundError) as e:
        print("launch failed: %s" % e, file=sys.stderr)
        sys.exit(EXIT_FAILURE)
    except (processes.Terminated, KeyboardInterrupt) as e:
        signum = getattr(e, "signum", signal.SIGINT)
        print("launch stopped by %s; every task was stopped" % signal.Signals(signum).name, file=sys.stderr)
        sys.exit(processes.SIGNAL_EXIT_BASE + signum)


def run():
    """Console-script entry point."""
    define_flags()
    app.run(main)


if __name__ == "__main__":
    run()
