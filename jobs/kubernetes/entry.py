"""The entry point of the job's training containers on Kubernetes.

    python -m jobs.kubernetes.entry -- python -m deepfm.train --strategy=ps ...

Runs the command after `--` as a child and, like a container's init, passes
SIGTERM, SIGINT and SIGHUP on to it, so that training saves a checkpoint
when the pod is stopped. Two things the operators need from a pod:

* `TF_CONFIG` in a JobSet, which writes none: where `DEEPFM_TF_CLUSTER`
  (the cluster, from the pods' stable host names) is set and `TF_CONFIG` is
  not, this task's `TF_CONFIG` is built from it, the task type in
  `DEEPFM_TF_TASK_TYPE` (the pod's replicated job, through the downward
  API) and the index in `JOB_COMPLETION_INDEX` (set by the Job controller
  for Indexed Jobs).
* Exit codes the restart policies can act on. Kubeflow's `restartPolicy:
  ExitCode` retries exit codes 128-255 and treats 1-127 as permanent, so
  the retryable exits of training, a stop after a checkpoint
  (`INTERRUPTED_EXIT_CODE`, 75) and a lost parameter server
  (`PEER_LOST_EXIT_CODE`, 69), leave the pod as `128 + code`; a child
  killed by signal N leaves it as `128 + N`, as a shell reports it; every
  other code (1: a bad flag or bad data) is kept, and is permanent.

This module never imports TensorFlow.
"""

import json
import os
import signal
import subprocess
import sys
from typing import List, Mapping, Optional, Sequence

CLUSTER_VARIABLE = "DEEPFM_TF_CLUSTER"
TASK_TYPE_VARIABLE = "DEEPFM_TF_TASK_TYPE"
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
TF_CONFIG_VARIABLE = "TF_CONFIG"
# deepfm.runtime.interrupt.INTERRUPTED_EXIT_CODE and deepfm.runtime.watchdog.PEER_LOST_EXIT_CODE (those import
# TensorFlow; tests/jobs/kubernetes/test_entry.py checks they are equal).
INTERRUPTED_EXIT_CODE = 75
PEER_LOST_EXIT_CODE = 69
RETRYABLE_EXIT_CODES = (INTERRUPTED_EXIT_CODE, PEER_LOST_EXIT_CODE)
# The first exit code Kubeflow's ExitCode policy retries; also the shells' base for "killed by signal N".
RETRYABLE_BASE = 128
# What a pod leaves with when it should be retried: the retryable codes moved into the retryable
# range, and the signals that stop or kill a pod (SIGTERM on a stop or eviction, SIGKILL after
# the grace period or on running out of memory).
RETRYABLE_POD_EXIT_CODES = tuple(sorted({RETRYABLE_BASE + code for code in RETRYABLE_EXIT_CODES}
                                        | {RETRYABLE_BASE + signal.SIGTERM, RETRYABLE_BASE + signal.SIGKILL}))
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXIT_USAGE = 2


def pod_exit_code(returncode: int) -> int:
    """The pod's exit code for a child that ended with `returncode` (negative: killed by that signal)."""
    if returncode < 0:
        return RETRYABLE_BASE - returncode
    if returncode in RETRYABLE_EXIT_CODES:
        return RETRYABLE_BASE + returncode
    return returncode


def tf_config(environ: Mapping[str, str]) -> Optional[str]:
    """This task's `TF_CONFIG` built from a JobSet pod's environment, or None where it is not one.

    Raises:
      ValueError: the cluster is not JSON, or the task type or index is
        missing or outside the cluster; the message names the variable.
    """
    if TF_CONFIG_VARIABLE in environ or CLUSTER_VARIABLE not in environ:
        return None
    try:
        cluster = json.loads(environ[CLUSTER_VARIABLE])
    except json.JSONDecodeError as e:
        raise ValueError("%s is not JSON (%s): %r" % (CLUSTER_VARIABLE, e, environ[CLUSTER_VARIABLE])) from e
    task_type = environ.get(TASK_TYPE_VARIABLE, "")
    if task_type not in cluster:
        raise ValueError("%s=%r is not a job of %s (%s)" % (TASK_TYPE_VARIABLE, task_type, CLUSTER_VARIABLE,
                                                             ", ".join(sorted(cluster))))
    index = environ.get(INDEX_VARIABLE, "")
    if not index.isdigit() or int(index) >= len(cluster[task_type]):
        raise ValueError("%s=%r: job %s has %d task(s)" % (INDEX_VARIABLE, index, task_type, len(cluster[task_type])))
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": int(index)}})


def run(command: Sequence[str], environ: Mapping[str, str]) -> int:
    """Runs `command` with signals passed on; returns the pod's exit code."""
    env = dict(environ)
    config = tf_config(environ)
    if config is not None:
        env[TF_CONFIG_VARIABLE] = config
    child = subprocess.Popen(list(command), env=env)

    def forward(signum, frame):
        del frame
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    return pod_exit_code(child.wait())


def main(argv: List[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: python -m jobs.kubernetes.entry -- COMMAND [ARG...]", file=sys.stderr)
        return EXIT_USAGE
    command = argv[argv.index("--") + 1:]
    try:
        return run(command, os.environ)
    except ValueError as e:
        print("jobs.kubernetes.entry: %s" % e, file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main(sys.argv))
