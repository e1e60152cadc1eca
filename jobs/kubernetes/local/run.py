"""A rendered TFJob, MPIJob or JobSet run on this machine the way its operator runs it.

`run(config)` reads one manifest file (`jobs.kubernetes.manifests`) and does
what the operator (`jobs.kubernetes.local.operator` and one module per
kind) and the kubelet would, on emulated hosts
(`jobs.sagemaker.local.emulated_hosts`, `jobs.local.hosts`):

* one host per pod, named as the operator names the pod, every pod's fully
  qualified names resolvable by the others: TFJob `<job>-<type>-<i>` (its
  Service `<job>-<type>-<i>.<ns>.svc`), MPIJob `<job>-launcher` and
  `<job>-worker-<i>` (`.<job>.<ns>.svc`), JobSet
  `<jobset>-<replicated job>-<job index>-<pod index>` (`.<subdomain>`);
* the environment the operator injects: TFJob's `TF_CONFIG` with the
  operator's roles; MPIJob's hostfile and `discover_hosts.sh` in
  `/etc/mpi`, its Open MPI variables and ssh keys in `/root/.ssh`; a JobSet
  pod's labels and annotations (for the downward API),
  `JOB_COMPLETION_INDEX`, the manifest's ConfigMaps and an ssh key Secret
  (which the user creates on a cluster);
* the container's own command, arguments and environment, run by "the
  image": this machine's Python with this project on `PYTHONPATH`, and an
  image's ssh set-up (`/usr/sbin/sshd -De` for MPI workers);
* the claim as one directory (`volume_dir`) that every pod mounts at the
  manifest's path; each pod gets a private `/tmp`;
* restarts as the operators make them from the real exit codes: TFJob's
  `ExitCode` policy recreates a pod that exited with 128-255 and fails the
  job on 1-127; MPIJob's launcher Job retries any failure; a JobSet applies
  its Jobs' pod failure policies and its own failure policy (restart the
  whole set, or fail it); every kind stops after `backoffLimit` restarts;
* elastic restarts within the manifest's `deepfm/min-replicas` and
  `deepfm/max-replicas`: when a pod's node is lost for good
  (`jobs.kubernetes.local.faults`), every pod is recreated with the training pods that still
  have a node, down to the minimum, and a returned node is used again at the
  next restart;
* the job succeeds when the operator says so (TFJob: the chief; MPIJob: the
  launcher; JobSet: its success policy); the other pods are then stopped;
* each container run gets a memory cgroup of its own (`jobs.local.memory`)
  limited to its container's `resources.limits.memory`, which the kubelet
  would enforce (`--host_memory` instead, for every pod); a pod killed for
  memory exits with 137 as an OOMKilled container does, and its exit (or,
  under mpirun, the launcher's) is reported with the pod killed for memory,
  its peak and its limit.

Every host, namespace and process is removed at the end, whatever the way.
Root is needed (namespaces). This module never imports TensorFlow.
"""

import dataclasses
import os
import re
import shutil
import signal
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from cli import config_flags
from jobs import elastic
from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.kubernetes import manifests
from jobs.kubernetes.local.faults import Fault, FaultSchedule
from jobs.kubernetes.local.jobset import JobSetOperator
from jobs.kubernetes.local.mpijob import MPIJobOperator
from jobs.kubernetes.local.operator import FAILED, RESTART_IN_PLACE, RESTART_JOB, RETRYABLE_BASE, SUCCEEDED, Operator
from jobs.kubernetes.local.pod import Pod
from jobs.kubernetes.local.tfjob import TFJobOperator
from jobs.local import hosts as hosts_lib
from jobs.local import memory as memory_lib
from jobs.local import processes, ssh
from jobs.sagemaker import local as sagemaker_local

LOGS = "logs"
PRIVATE = ".pods"
IMAGE_SSH = "image-ssh"
DEFAULT_STOP_GRACE_S = 30.0
POLL_S = 0.2
EXIT_FAILED = 1
FIELD_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
CHECKPOINT_STATE = "checkpoint"
CHECKPOINT_STEP = re.compile(r'^model_checkpoint_path: ".*-(\d+)"$', re.M)
MEMORY_HINT = ("raise the container's resources.limits.memory (deepfm.kubernetes render --memory) or --host_memory, "
               "or use more pods or a distribution that shards the embedding tables (python -m deepfm.advise "
               "--data DIR --hosts N --cores_per_host C predicts each)")
LIMITS_MEMORY = "resources.limits.memory"
OPERATORS = {manifests.TFJOB: TFJobOperator, manifests.MPIJOB: MPIJobOperator, manifests.JOBSET: JobSetOperator}


class JobFailedError(RuntimeError):
    """The job failed as its operator would declare it; every pod was stopped.

    Attributes:
      pod: the pod whose failure decided it.
      returncode: its exit code.
      log_path: its log.
    """

    def __init__(self, pod: str, returncode: int, log_path: str, reason: str):
        self.pod = pod
        self.returncode = returncode
        self.log_path = log_path
        super().__init__("pod %s %s; last lines of %s:\n%s" % (
            pod, reason, log_path, "\n".join("    " + line for line in processes.log_tail(log_path).splitlines())))


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """How to run a manifest here.

    Attributes:
      manifest: a file written by `deepfm.kubernetes render` (`tfjob.yaml`,
        `mpijob.yaml` or `jobset.yaml`).
      volume_dir: the directory standing for the job's claim.
      output_dir: where the pods' logs and private directories go.
      timeout_s: stop every pod and fail after this many seconds; 0: none.
      stop_grace_s: a stopped pod's grace period (Kubernetes gives 30 s).
      faults: failures to inject.
      host_memory: every pod's memory limit (`jobs.local.memory.parse_size`:
        `6g`) instead of its container's `resources.limits.memory`; "": the
        manifest's (no limit where it sets none).
    """

    manifest: str = dataclasses.field(metadata=config_flags.metadata(
        "local: a rendered tfjob.yaml, mpijob.yaml or jobset.yaml."))
    volume_dir: str = dataclasses.field(metadata=config_flags.metadata(
        "local: the directory standing for the job's claim."))
    output_dir: str = dataclasses.field(metadata=config_flags.metadata(
        "render: where the manifests go; local: where the logs go."))
    timeout_s: float = config_flags.field(0.0, "local: stop every pod and fail after this many seconds (0: none).")
    stop_grace_s: float = config_flags.field(DEFAULT_STOP_GRACE_S, "local: a stopped pod's grace period in seconds.")
    faults: Tuple[Fault, ...] = config_flags.field(
        (), "local: ACTION:POD@STEP: once a checkpoint of that global step is saved, kill the pod (kill) or lose "
        "its node for good (lose); repeatable.", flag="fault", repeated=True, parse=Fault.parse)
    host_memory: str = config_flags.field(
        "", "local: every pod's memory (a memory cgroup; root needed), e.g. 6g, 6GiB, 6500m or bytes, instead of "
        "its container's resources.limits.memory; \"\": the manifest's. A pod killed for memory is reported with "
        "its peak and limit.")

    def __post_init__(self):
        if self.host_memory:
            memory_lib.parse_size(self.host_memory)
        if not os.path.isfile(self.manifest):
            raise ValueError("--manifest %s: no such file" % self.manifest)
        if not os.path.isdir(self.volume_dir):
            raise ValueError("--volume_dir %s: no such directory (it stands for the job's claim)" % self.volume_dir)
        if self.timeout_s < 0:
            raise ValueError("--timeout_s must be >= 0, got %r" % self.timeout_s)


def operator_for(path: str) -> Operator:
    """The operator of the manifest at `path` (its last document is the job).

    Raises:
      ValueError: the file holds no TFJob, MPIJob or JobSet.
    """
    documents = manifests.load(path)
    if not documents or documents[-1].get("kind") not in OPERATORS:
        raise ValueError("--manifest %s: its last document must be a %s (as deepfm.kubernetes render writes them)"
                         % (path, ", ".join(OPERATORS)))
    return OPERATORS[documents[-1]["kind"]](documents)


class LocalRun:
    """The pods of a manifest on emulated hosts; see the module docstring and `run`."""

    def __init__(self, config: LocalConfig, python: str = sys.executable):
        reason = hosts_lib.check_privileges()
        if reason:
            raise hosts_lib.HostSetupError(reason)
        self.config = config
        self.python = python
        self.operator = operator_for(config.manifest)
        self.output_dir = os.path.abspath(config.output_dir)
        self.volume_dir = os.path.abspath(config.volume_dir)
        self.private_dir = os.path.join(self.output_dir, PRIVATE)
        self.range = elastic.ElasticRange(self.operator.min_workers, self.operator.max_workers)
        self.restarts = 0
        self.resizes = 0
        self.attempt = 0
        self.final_workers = 0
        self.events: List[str] = []
        self.faults = FaultSchedule(config.faults)
        self._runs: Dict[str, int] = {}
        limits = [pod_memory_limit(pod) for pod in self.operator.pods(self.operator.max_workers, 0)]
        if config.host_memory or any(limit for limit, _ in limits):
            memory_lib.find_controller()

    def log(self, message: str) -> None:
        """Prints and keeps an event of the run (what `kubectl get events` would show)."""
        self.events.append(message)
        print(message, flush=True)

    def workers_now(self) -> int:
        """Training pods for the next start: the manifest's, less those whose node is gone, within the range.

        Raises:
          JobFailedError: fewer have a node than the minimum.
        """
        available = self.operator.training_pods() - len(self.faults.nodes_down)
        try:
            return self.range.size(available)
        except elastic.BelowMinimumError as e:
            raise JobFailedError(", ".join(sorted(self.faults.nodes_down)), EXIT_FAILED, "",
                                 "lost its node, and the job cannot go on: %s" % e) from e

    def prepare(self) -> None:
        """A new output directory with the image's ssh set-up and the job's ssh keys.

        Raises:
          FileExistsError: the output directory holds an earlier run.
        """
        if os.path.exists(os.path.join(self.output_dir, LOGS)):
            raise FileExistsError("--output_dir %s already holds a run: use a new directory" % self.output_dir)
        os.makedirs(self.private_dir)
        ssh.write_setup(os.path.join(self.private_dir, IMAGE_SSH), self.operator.name,
                                        authorized_keys=".ssh/authorized_keys")
        secret = os.path.join(self.private_dir, "ssh-secret")
        os.makedirs(secret)
        ssh.ssh_keygen(os.path.join(secret, "key"), self.operator.name)

    def run(self) -> None:
        """Runs the job to its end (see `run`)."""
        self.prepare()
        deadline = time.monotonic() + self.config.timeout_s if self.config.timeout_s else None
        while True:
            outcome = self._attempt(self.workers_now(), deadline)
            if outcome is None:
                return
            self.log(outcome)
            self.attempt += 1

    def _attempt(self, workers: int, deadline: Optional[float]) -> Optional[str]:
        """Runs every pod once (recreating single pods where the operator does); None when the job succeeded.

        Returns:
          Why every pod must be recreated (a JobSet restart, an elastic resize).
        """
        pods = self.operator.pods(workers, self.attempt)
        self.final_workers = workers
        self._runs = {}
        by_name = {pod.name: pod for pod in pods}
        # Named as the user gave --output_dir, in messages; absolute for the hosts.
        shown = os.path.join(self.config.output_dir, LOGS, *(["restart_%d" % self.attempt] if self.attempt else []))
        log_dir = os.path.abspath(shown)
        aliases = {pod.name: pod.aliases for pod in pods}
        mounts = sorted({mount["mountPath"] for pod in pods for mount in pod.container.get("volumeMounts", [])})
        with sagemaker_local.emulated_hosts(log_dir, [pod.name for pod in pods], stop_grace_s=self.config.stop_grace_s,
                                            machine_dirs=[ssh.SSHD_PRIVSEP_DIR] + mounts, aliases=aliases,
                                            host_memory=self.config.host_memory,
                                            memory_hint=MEMORY_HINT) as (group, network):
            assert network is not None, "emulated hosts are namespaces"
            running: Dict[str, processes.Task] = {}
            for pod in pods:
                running[pod.name] = self._start(group, network, pod)
            self.log("started %s (%d training pod(s)); logs in %s" % (", ".join(by_name), workers, shown))
            done = set()
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError("the job ran past %.0f s; every pod was stopped (logs in %s)"
                                       % (self.config.timeout_s, shown))
                self._inject_faults(network, [name for name in running if name not in done])
                for name, task in list(running.items()):
                    code = task.poll()
                    if code is None or name in done:
                        continue
                    code = code if code >= 0 else RETRYABLE_BASE - code
                    pod = by_name[name]
                    verdict = self.operator.judge(pod, code)
                    memory = oom_note(group.memory_event(task), task) if code else ""
                    self.log("pod %s exited with code %d%s: %s" % (name, code, memory, verdict))
                    # Whatever follows (a pod recreated, every pod restarted, the end) is decided below, before
                    # the next fault can land.
                    self.faults.settled(name)
                    if verdict == SUCCEEDED:
                        done.add(name)
                        if pod.completes_job and self._completed(pods, done):
                            group.stop()
                            self.log("job %s succeeded" % self.operator.name)
                            return None
                        continue
                    if verdict == FAILED:
                        group.stop()
                        raise JobFailedError(name, code, task.log_path, "failed with exit code %d%s, a permanent "
                                             "failure" % (code, memory))
                    if verdict == RESTART_IN_PLACE and name not in self.faults.nodes_down:
                        running[name] = self._start(group, network, pod, fresh=False)
                        continue
                    if verdict != RESTART_IN_PLACE:
                        self.restarts += 1
                        if self.restarts > self.operator.backoff_limit:
                            group.stop()
                            raise JobFailedError(name, code, task.log_path, "failed with exit code %d%s after %d "
                                                 "restart(s), the backoff limit"
                                                 % (code, memory, self.operator.backoff_limit))
                    size = self.workers_now()
                    if size != workers:
                        self.resizes += 1
                        group.stop()
                        return ("restarting every pod from the latest checkpoint with %d training pod(s) instead "
                                "of %d (%s)" % (size, workers, self._node_summary()))
                    if verdict == RESTART_JOB or name in self.faults.nodes_down:
                        group.stop()
                        return "restarting every pod from the latest checkpoint (%s)" % verdict
                    running[name] = self._start(group, network, pod)
                time.sleep(POLL_S)

    def _node_summary(self) -> str:
        down = self.faults.nodes_down
        return ("nodes gone: %s" % ", ".join(sorted(down))) if down else "every node is up"

    def _completed(self, pods: Sequence[Pod], done: set) -> bool:
        return all(pod.name in done for pod in pods if pod.completes_job)

    def _inject_faults(self, network: hosts_lib.HostNetwork, running: Sequence[str]) -> None:
        """Applies the next faults whose checkpoint step has been reached (`FaultSchedule.apply`)."""

        def kill(pod: str) -> None:
            for pid in network.pids(network.host(pod)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        self.faults.apply(self._checkpoint_step(), running, kill, self.log)

    def _checkpoint_step(self) -> Optional[int]:
        model_dir = self.operator.model_dir()
        if not model_dir:
            return None
        for volume in self._volume_mounts():
            if model_dir.startswith(volume.rstrip("/") + "/"):
                path = os.path.join(self.volume_dir, os.path.relpath(model_dir, volume), CHECKPOINT_STATE)
                try:
                    with open(path) as f:
                        match = CHECKPOINT_STEP.search(f.read())
                except OSError:
                    return None
                return int(match.group(1)) if match else None
        return None

    def _volume_mounts(self) -> List[str]:
        paths = []
        for pod in self.operator.pods(self.operator.training_pods(), 0)[:1]:
            claims = {v["name"] for v in pod.volumes if "persistentVolumeClaim" in v}
            paths += [m["mountPath"] for m in pod.container.get("volumeMounts", []) if m["name"] in claims]
        return paths

    def _start(self, group: processes.ProcessGroup, network: hosts_lib.HostNetwork, pod: Pod,
               fresh: bool = True) -> processes.Task:
        """Starts the pod's container as its host's init: a new pod (`fresh`: a new /tmp), or its container again."""
        run = self._runs.get(pod.name, -1) + 1
        self._runs[pod.name] = run
        host = network.host(pod.name)
        private = os.path.join(self.private_dir, pod.name)
        if fresh:
            shutil.rmtree(private, ignore_errors=True)
            os.makedirs(os.path.join(private, "tmp"))
        etc_ssh = os.path.join(network.etc_dir(host), ssh.SSH)
        if not os.path.isdir(etc_ssh):
            ssh.install_etc_ssh(os.path.join(self.private_dir, IMAGE_SSH), network, host)
        spec = hosts_lib.InitSpec(hostname=pod.name, argv=tuple(self._argv(pod)), env=self._environment(pod),
                                  binds=tuple(self._binds(pod, private)), cwd="/")
        path = spec.write(os.path.join(private, "init-%d.json" % run))
        name = pod.name if not run else "%s.%d" % (pod.name, run)
        limit, text = (None, "") if self.config.host_memory else pod_memory_limit(pod)
        # A cgroup per container run, as the kubelet makes one per container: its peak and OOM kills are its own.
        return group.start(name, network.command(host, path, self.python), host=name, memory_limit=limit,
                           memory_limit_text=text)

    def _argv(self, pod: Pod) -> List[str]:
        argv = list(pod.container.get("command", [])) + list(pod.container.get("args", []))
        if not argv:
            raise ValueError("pod %s: the container has no command (this emulation has no image entry point)"
                             % pod.name)
        return argv

    def _environment(self, pod: Pod) -> Dict[str, str]:
        """The image's environment, then the operator's, then the container's own (downward API resolved)."""
        env = sagemaker_local.container_environment(self.python, spec_lib.DEFAULT_REGION, "/root")
        env.pop("AWS_REGION", None)
        env["PYTHONPATH"] = source_lib.project_root()
        env["HOSTNAME"] = pod.name
        env.update(pod.env)
        for variable in pod.container.get("env", []):
            if "value" in variable:
                env[variable["name"]] = str(variable["value"])
            elif "valueFrom" in variable:
                env[variable["name"]] = self._field(pod, variable["valueFrom"])
        return env

    @staticmethod
    def _field(pod: Pod, source: dict) -> str:
        path = source.get("fieldRef", {}).get("fieldPath", "")
        if path == "metadata.name":
            return pod.name
        match = FIELD_REF.match(path)
        if not match:
            raise ValueError("pod %s: the downward API field %r is not emulated" % (pod.name, path))
        return (pod.labels if match.group(1) == "labels" else pod.annotations).get(match.group(2), "")

    def _binds(self, pod: Pod, private: str) -> List[Tuple[str, str]]:
        # The private /tmp last: the other sources may lie under this machine's /tmp.
        binds = []
        volumes = {volume["name"]: volume for volume in pod.volumes}
        for mount in pod.container.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            if "persistentVolumeClaim" in volume:
                binds.append((self.volume_dir, mount["mountPath"]))
            elif "secret" in volume:
                binds.append((self._secret_dir(private, mount["name"]), mount["mountPath"]))
            elif "configMap" in volume:
                binds.append((self._files_dir(private, mount["name"], pod.files.get(mount["name"], {})),
                              mount["mountPath"]))
            else:
                raise ValueError("pod %s: volume %r of a kind this emulation does not have" % (pod.name,
                                                                                                mount["name"]))
        return binds + [(os.path.join(private, "tmp"), "/tmp")]

    def _files_dir(self, private: str, name: str, files: Dict[str, str]) -> str:
        directory = os.path.join(private, "volumes", name)
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        for file_name, content in files.items():
            path = os.path.join(directory, file_name)
            with open(path, "w") as f:
                f.write(content)
            os.chmod(path, 0o755 if file_name.endswith(".sh") else 0o444)
        return directory

    def _secret_dir(self, private: str, name: str) -> str:
        """The job's ssh key pair as the Secret's files (`id_rsa`, `id_rsa.pub`, `authorized_keys`)."""
        key = os.path.join(self.private_dir, "ssh-secret", "key")
        with open(key) as f:
            private_key = f.read()
        with open(key + ".pub") as f:
            public_key = f.read()
        contents = {"id_rsa": private_key, "id_rsa.pub": public_key, "authorized_keys": public_key}
        directory = self._files_dir(private, name, contents)
        for file_name in contents:
            os.chmod(os.path.join(directory, file_name), manifests.SSH_SECRET_MODE)
        return directory


def pod_memory_limit(pod: Pod) -> Tuple[Optional[int], str]:
    """The pod's container's `resources.limits.memory` in bytes and as written, or (None, "") without one.

    Raises:
      ValueError: not a Kubernetes quantity; the message names the pod.
    """
    text = ((pod.container.get("resources") or {}).get("limits") or {}).get("memory")
    if not text:
        return None, ""
    quantity = memory_lib.parse_kubernetes_quantity(str(text), "pod %s: %s" % (pod.name, LIMITS_MEMORY))
    return quantity, "%s %s" % (LIMITS_MEMORY, text)


def oom_note(event: Optional[memory_lib.MemoryEvent], task: processes.Task) -> str:
    """` (OOMKilled: pod ...'s processes peaked at ...)` for a run killed for memory, else ""."""
    if event is None:
        return ""
    if task.memory is not None and event.host == task.memory.host:
        return " (OOMKilled: %s)" % event.describe()
    return " (after a process of pod %s was killed for memory: %s)" % (event.host, event.describe())


def run(config: LocalConfig, python: str = sys.executable) -> LocalRun:
    """Runs the manifest to its end; returns the run (its events, restarts and the training pods it ended with).

    Raises:
      hosts_lib.HostSetupError: emulated hosts cannot be created here.
      ValueError: the manifest holds no job this emulates.
      FileExistsError: `output_dir` holds an earlier run.
      JobFailedError: the job failed as its operator would decide (every pod was stopped).
      TimeoutError: it ran past `timeout_s` (every pod was stopped).
      processes.Terminated: SIGTERM or SIGHUP (every pod was stopped).
      memory_lib.MemoryLimitError: a memory limit (the manifest's or
        `host_memory`) where memory cgroups cannot be made.
    """
    local_run = LocalRun(config, python)
    local_run.run()
    return local_run
