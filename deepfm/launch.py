"""Runs a distributed training job on this machine, every process supervised.

Parameter servers: a real TensorFlow gRPC cluster on localhost, one process
per task (1 chief, `num_workers - 1` workers, `num_ps` parameter servers),
each given its `TF_CONFIG`::

    python -m deepfm.launch --strategy ps --num_ps 2 --num_workers 2 --log_dir runs/ps/logs -- \\
        --train_data data/synthetic --model_dir runs/ps/model --metrics_file runs/ps/metrics.json

Horovod: Horovod's own launcher, `horovodrun -np N -H localhost:N` less its
check of the build, which every rank makes instead at no cost
(`jobs.local.horovod_runner`; docs/reliability.md says what it saves),
over MPI where `mpirun` is installed and Gloo otherwise
(`--horovod_controller`)::

    python -m deepfm.launch --strategy horovod --np 2 -- --train_data data/synthetic --model_dir runs/hvd

`--np 0` takes as many ranks as the cost model picks for this host's cores
(`planner.layouts.for_host`), each with its share of the vCPUs as
TensorFlow threads unless the flags after `--` set them, and prints why::

    python -m deepfm.launch --strategy hybrid --np 0 -- --train_data data/synthetic --model_dir runs/hybrid

The flags after `--` go unchanged to `python -m deepfm.train --strategy
<strategy>` in every task; the chief (rank 0) writes `--metrics_file` and the
export. `--program SCRIPT` runs a training script of your own in every task
instead (`python SCRIPT --strategy <strategy> <flags after -->`), e.g. one
that trains its own model_fn through `deepfm.train_and_evaluate`::

    python -m deepfm.launch --strategy ps --program examples/custom_model.py -- data/synthetic --model_dir runs/c

Each task logs to `<log_dir>/<task>_<index>.log`. A job that completes
ends with the chief's summary (validation AUC and logloss, global step,
model directory, SavedModel), read from its `--metrics_file` (the launcher
asks for `<log_dir>/metrics.json` when the flags after `--` name none).
When a task fails, every other process is stopped, and the launcher names
the task, its exit code and the end of its log, and exits with a non-zero
code; so it does on Ctrl-C or SIGTERM. Stopped training tasks finish their step and the chief
saves a checkpoint at it (within `--stop_grace_s`).

With `--max_restarts N`, a failed job is stopped and started again from the
latest checkpoint of its `--model_dir`, up to N times; each restart is
logged with the failed task and its exit code, and restart k logs to
`<log_dir>/restart_<k>/`. The step budget stays the same global step.

With `--min_replicas M --max_replicas N --host_discovery_script CMD`, the job
is elastic: before each start, CMD prints the workers that are up (Horovod's
format, one `host:slots` line per host), and the job starts with that many
training workers (ps: `--num_workers`; Horovod: `--np`), within M..N; a
worker that is gone for good leaves the job running on the others from the
latest checkpoint, and one that is back joins at the next restart.

`--host_memory 6g` gives the host the job runs on (this machine, as
`localhost`: every task of the job) that much memory, as an instance has:
its tasks share one memory cgroup with that limit (root and a writable
cgroup memory controller needed; refused at start otherwise). A task the
kernel kills for memory is reported so: the task, its host's peak and
limit, and what to change, instead of a bare exit code.
"""

import os
import signal
import sys
import tempfile
from typing import List, Optional, Sequence, Tuple

from absl import app, flags

from cli import config_flags, entry
from jobs import elastic
from jobs.local import launcher as local
from jobs.local import memory as memory_lib
from jobs.local import processes
from planner import layouts
from strategies import host_cores
from strategies import strategy_names as names

PROGRAM = "deepfm.launch"
THREAD_FLAGS = ("--intra_op_threads", "--inter_op_threads")
# The log directory of a job without --log_dir: a new one under the temporary directory.
DEFAULT_LOG_DIR_PREFIX = "deepfm-launch-"

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the launcher's flags (the training flags follow `--`).

    `--log_dir` is absl's own flag (defined by `absl.logging`): the launcher
    writes the task logs there, by default to a new temporary directory.
    """
    config_flags.define_flags([local.LaunchConfig])


def parse_flags(flag_values=FLAGS, num_processes: Optional[int] = None) -> local.LaunchConfig:
    """The `LaunchConfig` of the parsed flags (`num_processes`, where given, instead of `--np`).

    Raises:
      app.UsageError: a bad flag value; the message names the flag.
    """
    f = flag_values
    made = "" if f.log_dir else tempfile.mkdtemp(prefix=DEFAULT_LOG_DIR_PREFIX)
    try:
        values = config_flags.values(local.LaunchConfig, f)
        values.update(log_dir=f.log_dir or made, num_processes=num_processes or values["num_processes"])
        return local.LaunchConfig(**values)
    except ValueError as e:
        remove_if_empty(made)
        raise app.UsageError(str(e)) from e


def remove_if_empty(log_dir: Optional[str]) -> None:
    """Removes the log directory made for a job that never started (nothing in it); keeps any other."""
    try:
        if log_dir:
            os.rmdir(log_dir)
    except OSError:
        pass


def ranks_from_cores(strategy: str, train_args: Sequence[str], vcpus: Optional[int] = None,
                     cores: Optional[int] = None, controller: str = "auto") -> Tuple[int, List[str], str]:
    """`--np 0`: the ranks of `strategy` for this host's cores, the training flags with their threads, and why.

    `planner.layouts.for_host` picks the ranks R that divide the
    host's physical cores; each rank gets vCPUs / R TensorFlow threads
    (`--intra_op_threads`, `--inter_op_threads`) unless `train_args` set them.

    Args:
      strategy: the launched strategy (Horovod ranks).
      train_args: the flags after `--`.
      vcpus: the host's vCPUs (default: those this process may use).
      cores: its physical cores (default: theirs, from sysfs).
      controller: `--horovod_controller`: the ranks' transport
        (`jobs.local.launcher.horovod_transport`), which the cost model's
        costs depend on.

    Raises:
      ValueError: a strategy that is not Horovod ranks.
    """
    if names.launch_of(strategy).kind != names.RANKS:
        raise ValueError("--np 0 chooses the Horovod ranks of this host from its cores; --strategy %s takes "
                         "--num_workers" % strategy)
    vcpus = vcpus or len(os.sched_getaffinity(0))
    cores = cores or host_cores.physical_cores()
    layout = layouts.for_host(strategy, vcpus, cores=cores if vcpus % cores == 0 else vcpus,
                                  transport=local.horovod_transport(controller))
    given = any(arg.split("=")[0] in THREAD_FLAGS for arg in train_args)
    return layout.ranks_per_host, list(train_args) + ([] if given else layout.thread_flags()), layout.reason


def main(argv):
    train_args, ranks = argv[1:], None
    if FLAGS.np == 0:
        try:
            ranks, train_args, reason = ranks_from_cores(FLAGS.strategy, train_args,
                                                         controller=FLAGS.horovod_controller)
        except ValueError as e:
            raise app.UsageError(str(e)) from e
        print("--np 0: %d rank(s) (%s)" % (ranks, reason), file=sys.stderr, flush=True)
    config = parse_flags(num_processes=ranks)
    try:
        restarts = local.launch(config, train_args)
    except (ValueError, memory_lib.MemoryLimitError) as e:
        # Refused before any task started: a log directory made for it is left empty.
        if not FLAGS.log_dir:
            remove_if_empty(config.log_dir)
        raise app.UsageError(str(e)) from e
    except (processes.TaskFailedError, TimeoutError, FileNotFoundError, elastic.BelowMinimumError) as e:
        print("launch failed: %s" % e, file=sys.stderr)
        sys.exit(local.EXIT_FAILURE)
    except (processes.Terminated, KeyboardInterrupt) as e:
        signum = getattr(e, "signum", signal.SIGINT)
        print("launch stopped by %s; every task was stopped" % signal.Signals(signum).name, file=sys.stderr)
        sys.exit(processes.SIGNAL_EXIT_BASE + signum)
    print(local.result_summary(config, argv[1:], restarts), flush=True)


def run():
    """Console-script entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
