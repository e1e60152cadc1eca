"""The training cluster of a between-graph job, as `TF_CONFIG` describes it.

`TF_CONFIG` is the JSON that TensorFlow's distributed runtime reads::

    {"cluster": {"chief": ["host0:2222"],
                 "worker": ["host1:2222"],
                 "ps": ["host0:2223", "host1:2223"]},
     "task": {"type": "worker", "index": 0}}

SageMaker's parameter-server mode names the chief `master`; it is treated as
the chief. Training processes are numbered with the chief first: the chief is
worker 0 and `worker` task i is worker i + 1.
"""

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Tuple

if TYPE_CHECKING:
    import tensorflow as tf


TF_CONFIG_VARIABLE = "TF_CONFIG"
CHIEF = "chief"
MASTER = "master"
WORKER = "worker"
PS = "ps"
CHIEF_JOBS = (CHIEF, MASTER)
JOBS = (CHIEF, MASTER, WORKER, PS)
MAX_PORT = 65535


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """One task's view of the cluster.

    Attributes:
      jobs: job name -> the `host:port` addresses of its tasks, in task order.
      task_type: this task's job: `chief`, `master`, `worker` or `ps`.
      task_index: this task's index within its job.
    """

    jobs: Mapping[str, Tuple[str, ...]]
    task_type: str
    task_index: int

    @property
    def chief_job(self) -> str:
        """The job of the chief: `chief`, or SageMaker's `master`."""
        return MASTER if MASTER in self.jobs else CHIEF

    @property
    def ps_stop_with_their_hosts(self) -> bool:
        """Whether each parameter server stops when its host's training task exits.

        So it is in SageMaker's layout (a `master`): the toolkit runs a ps on
        every host and stops it once the host's training script has exited.
        """
        return self.chief_job == MASTER

    @property
    def num_ps(self) -> int:
        """Parameter-server tasks."""
        return len(self.jobs.get(PS, ()))

    @property
    def num_workers(self) -> int:
        """Training tasks: the chief and the workers."""
        return len(self.jobs.get(self.chief_job, ())) + len(self.jobs.get(WORKER, ()))

    @property
    def training_tasks(self) -> Dict[str, str]:
        """The training tasks, the chief first: `<job>_<index>` -> `host:port`."""
        return {"%s_%d" % (job, index): address
                for job in (self.chief_job, WORKER) for index, address in enumerate(self.jobs.get(job, ()))}

    @property
    def is_chief(self) -> bool:
        """Whether this task is the chief (`chief` or `master`)."""
        return self.task_type in CHIEF_JOBS

    @property
    def is_ps(self) -> bool:
        """Whether this task is a parameter server."""
        return self.task_type == PS

    @property
    def worker_index(self) -> int:
        """This training task's number among all of them, the chief being 0.

        Raises:
          ValueError: this task is a parameter server.
        """
        if self.is_ps:
            raise ValueError("ps task %d is not a training task" % self.task_index)
        return 0 if self.is_chief else self.task_index + 1

    @property
    def task_name(self) -> str:
        """`<job>_<index>`, e.g. `worker_1`."""
        return "%s_%d" % (self.task_type, self.task_index)

    @property
    def task_address(self) -> str:
        """This task's `host:port`."""
        return self.jobs[self.task_type][self.task_index]

    @property
    def task_device(self) -> str:
        """This task's device prefix, e.g. `/job:worker/task:1`."""
        return "/job:%s/task:%d" % (self.task_type, self.task_index)

    def ps_device(self, index: int) -> str:
        """The device prefix of parameter server `index`."""
        return "/job:%s/task:%d" % (PS, index)

    def cluster_spec(self) -> "tf.train.ClusterSpec":
        """The cluster as a `tf.train.ClusterSpec`."""
        import tensorflow as tf  # Only here: the launcher uses this module without TensorFlow.
        return tf.train.ClusterSpec({job: list(addresses) for job, addresses in self.jobs.items()})

    def to_tf_config(self) -> str:
        """The `TF_CONFIG` JSON of this task."""
        return json.dumps({"cluster": {job: list(addresses) for job, addresses in self.jobs.items()},
                           "task": {"type": self.task_type, "index": self.task_index}})


def parse(text: Optional[str]) -> ClusterInfo:
    """Parses and checks a `TF_CONFIG` JSON string.

    Args:
      text: the JSON text (None or empty when the variable is unset).

    Returns:
      The cluster and this task.

    Raises:
      ValueError: the text is missing, not JSON, or describes no valid
        cluster; the message names the bad key and echoes its value.
    """
    if not text or not text.strip():
        raise ValueError("%s is not set: a between-graph job needs it to describe the cluster "
                         "(chief or master, workers, ps) and this task" % TF_CONFIG_VARIABLE)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError("%s is not valid JSON (%s): %r" % (TF_CONFIG_VARIABLE, e, text)) from e
    if not isinstance(config, dict):
        raise ValueError("%s must be a JSON object, got %r" % (TF_CONFIG_VARIABLE, text))
    jobs = _parse_jobs(config.get("cluster"))
    task_type, task_index = _parse_task(config.get("task"), jobs)
    return ClusterInfo(jobs=jobs, task_type=task_type, task_index=task_index)


def from_environment(environ: Optional[Mapping[str, str]] = None) -> ClusterInfo:
    """Parses `TF_CONFIG` from `environ` (default: this process's environment).

    Raises:
      ValueError: as `parse`.
    """
    environ = os.environ if environ is None else environ
    return parse(environ.get(TF_CONFIG_VARIABLE))


def _parse_jobs(cluster) -> Dict[str, Tuple[str, ...]]:
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError('%s["cluster"] must be an object mapping jobs (%s) to lists of "host:port" '
                         "addresses, got %r" % (TF_CONFIG_VARIABLE, ", ".join(JOBS), cluster))
    jobs = {}
    seen: Dict[str, Tuple[str, int]] = {}
    for job, addresses in cluster.items():
        if job not in JOBS:
            raise ValueError('%s["cluster"] has job %r; the jobs are %s'
                             % (TF_CONFIG_VARIABLE, job, ", ".join(JOBS)))
        if not isinstance(addresses, list) or not addresses:
            raise ValueError('%s["cluster"]["%s"] must be a non-empty list of "host:port" addresses, got %r'
                             % (TF_CONFIG_VARIABLE, job, addresses))
        for index, address in enumerate(addresses):
            _check_address(job, index, address)
            if address in seen:
                raise ValueError('%s["cluster"]: %s task %d and %s task %d share the address %r'
                                 % (TF_CONFIG_VARIABLE, seen[address][0], seen[address][1], job, index, address))
            seen[address] = (job, index)
        jobs[job] = tuple(addresses)
    chiefs = [job for job in CHIEF_JOBS if job in jobs]
    if len(chiefs) != 1:
        raise ValueError('%s["cluster"] must have exactly one of the jobs "chief" or "master" (SageMaker\'s '
                         "name for the chief), got jobs %s" % (TF_CONFIG_VARIABLE, sorted(jobs)))
    if len(jobs[chiefs[0]]) != 1:
        raise ValueError('%s["cluster"]["%s"] must list exactly one address, got %r'
                         % (TF_CONFIG_VARIABLE, chiefs[0], list(jobs[chiefs[0]])))
    return jobs


def _check_address(job: str, index: int, address) -> None:
    host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
        raise ValueError('%s["cluster"]["%s"][%d] must be a "host:port" address with a port in 1..%d, got %r'
                         % (TF_CONFIG_VARIABLE, job, index, MAX_PORT, address))


def _parse_task(task, jobs: Mapping[str, Tuple[str, ...]]) -> Tuple[str, int]:
    if not isinstance(task, dict):
        raise ValueError('%s["task"] must be an object {"type": ..., "index": ...}, got %r'
                         % (TF_CONFIG_VARIABLE, task))
    task_type = task.get("type")
    if not isinstance(task_type, str) or task_type not in jobs:
        raise ValueError('%s["task"]["type"] must be one of the cluster\'s jobs %s, got %r'
                         % (TF_CONFIG_VARIABLE, ", ".join(sorted(jobs)), task_type))
    task_index = task.get("index", 0)
    if isinstance(task_index, bool) or not isinstance(task_index, int) or not (
            0 <= task_index < len(jobs[task_type])):
        raise ValueError('%s["task"]["index"] must be an integer in [0, %d) for job %r, got %r'
                         % (TF_CONFIG_VARIABLE, len(jobs[task_type]), task_type, task_index))
    return task_type, task_index


def local_cluster(num_ps: int, num_workers: int, ports, host: str = "localhost") -> Dict[str, Tuple[str, ...]]:
    """The jobs of a cluster on one host: one chief, `num_workers - 1` workers, `num_ps` ps.

    Args:
      num_ps: parameter servers (>= 1).
      num_workers: training tasks, the chief included (>= 1).
      ports: at least `num_workers + num_ps` distinct ports, used in the
        order chief, workers, parameter servers.
      host: the host name of every task.

    Returns:
      Job name -> addresses, as `ClusterInfo.jobs`.

    Raises:
      ValueError: too few tasks or ports.
    """
    if num_ps < 1:
        raise ValueError("num_ps must be >= 1, got %r" % num_ps)
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1 (it counts the chief), got %r" % num_workers)
    ports = list(ports)
    if len(ports) < num_workers + num_ps:
        raise ValueError("%d ports for %d tasks" % (len(ports), num_workers + num_ps))
    addresses = ["%s:%d" % (host, port) for port in ports[:num_workers + num_ps]]
    jobs = {CHIEF: (addresses[0],), PS: tuple(addresses[num_workers:])}
    if num_workers > 1:
        jobs[WORKER] = tuple(addresses[1:num_workers])
    return jobs
