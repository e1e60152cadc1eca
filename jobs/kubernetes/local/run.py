"""A rendered TFJob, MPIJob or JobSet run on this machine the way its operator runs it.

`run(config)` reads one manifest file (`jobs.kubernetes_manifests`) and does
what the operator and the kubelet would, on emulated hosts
(`jobs.sagemaker_local.emulated_hosts`, `jobs.hosts`):

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
  (`Fault.LOSE`), every pod is recreated with the training pods that still
  have a node, down to the minimum, and a returned node is used again at the
  next restart;
* the job succeeds when the operator says so (TFJob: the chief; MPIJob: the
  launcher; JobSet: its success policy); the other pods are then stopped.

Every host, namespace and process is removed at the end, whatever the way.
Root is needed (namespaces). This module never imports TensorFlow.
"""

import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from jobs import elastic
from jobs import hosts as hosts_lib
from jobs import kubernetes_manifests as manifests
from jobs import processes
from jobs import sagemaker_job
from jobs import sagemaker_local

LOGS = "logs"
PRIVATE = ".pods"
IMAGE_SSH = "image-ssh"
DEFAULT_STOP_GRACE_S = 30.0
POLL_S = 0.2
SSHD_PRIVSEP_DIR = "/run/sshd"
DISCOVER_HOSTS = "discover_hosts.sh"
TF_CONFIG_ENVIRONMENT = "cloud"
MPI_LAUNCHER_ENV = (("K_MPI_JOB_ROLE", "launcher"), ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", ""))
MPI_WORKER_ENV = (("K_MPI_JOB_ROLE", "worker"),)
RETRYABLE_BASE = 128
EXIT_FAILED = 1
# Who decides about a failed pod: TFJob's ExitCode policy, a batch Job's retries, the kubelet
# (restartPolicy OnFailure), a JobSet's Job pod failure policy and its own failure policy.
JUDGED_BY_EXIT_CODE, JUDGED_BY_JOB, JUDGED_BY_KUBELET, JUDGED_BY_JOBSET = "exit_code", "job", "in_place", "jobset"
# What the operator does about a pod that exited.
SUCCEEDED, FAILED = "succeeded", "failed (permanent)"
RESTART_POD, RESTART_JOB, RESTART_IN_PLACE = "recreate the pod", "restart the job", "restart the container"
JOBSET_LABELS = ("jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name",
                 "jobset.sigs.k8s.io/job-index", "jobset.sigs.k8s.io/restart-attempt")
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
FIELD_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
CHECKPOINT_STATE = "checkpoint"
CHECKPOINT_STEP = re.compile(r'^model_checkpoint_path: ".*-(\d+)"$', re.M)


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
class Fault:
    """A failure to inject once the job's latest checkpoint reaches `after_step` (what a test or a rehearsal does).

    Attributes:
      action: `kill` (the pod's processes get SIGKILL, its node stays),
        `lose` (also its node goes away until a `return`) or `return` (the
        node of the pod of that name comes back).
      pod: the pod's name.
      after_step: the global step of a saved checkpoint that triggers it.
    """

    KILL = "kill"
    LOSE = "lose"
    RETURN = "return"
    ACTIONS = (KILL, LOSE, RETURN)

    action: str
    pod: str
    after_step: int = 1

    def __post_init__(self):
        if self.action not in self.ACTIONS:
            raise ValueError("--fault %s: the action must be one of %s" % (self.action, ", ".join(self.ACTIONS)))

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """`ACTION:POD@STEP` (e.g. `lose:ps-job-worker-0@20`).

        Raises:
          ValueError: another form; the message shows the expected one.
        """
        match = re.match(r"^(\w+):([-a-z0-9.]+)@(\d+)$", text)
        if not match:
            raise ValueError("--fault %r must be ACTION:POD@STEP, e.g. kill:job-worker-0@20" % text)
        return cls(action=match.group(1), pod=match.group(2), after_step=int(match.group(3)))


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
    """

    manifest: str
    volume_dir: str
    output_dir: str
    timeout_s: float = 0.0
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    faults: Tuple[Fault, ...] = ()

    def __post_init__(self):
        if not os.path.isfile(self.manifest):
            raise ValueError("--manifest %s: no such file" % self.manifest)
        if not os.path.isdir(self.volume_dir):
            raise ValueError("--volume_dir %s: no such directory (it stands for the job's claim)" % self.volume_dir)
        if self.timeout_s < 0:
            raise ValueError("--timeout_s must be >= 0, got %r" % self.timeout_s)


@dataclasses.dataclass
class Pod:
    """One pod as the operator creates it.

    Attributes:
      name: its name, which is also its host name.
      aliases: its other names that the other pods resolve.
      role: its replica type (TFJob, MPIJob) or replicated job (JobSet).
      index: its index among its role's pods.
      container: the container of the manifest.
      volumes: the pod's volumes.
      env: what the operator injects, before the container's own.
      labels: its labels (JobSet's are readable through the downward API).
      annotations: its annotations.
      files: volume name -> file name -> content, for ConfigMaps and Secrets.
      judged_by: how a failure is judged: `exit_code` (TFJob's ExitCode),
        `job` (a batch Job's retries), `in_place` (the kubelet restarts it),
        `jobset` (the Job's pod failure policy, then the JobSet's); the
        `JUDGED_BY_*` constants.
      completes_job: its success completes the job.
      pod_failure_policy: a JobSet pod's Job's `podFailurePolicy`.
    """

    name: str
    aliases: Tuple[str, ...]
    role: str
    index: int
    container: dict
    volumes: List[dict]
    env: Dict[str, str]
    labels: Dict[str, str]
    annotations: Dict[str, str]
    files: Dict[str, Dict[str, str]]
    judged_by: str
    completes_job: bool
    pod_failure_policy: Optional[dict] = None


def _replicas(spec: dict) -> int:
    return int(spec.get("replicas", 1))


class Operator:
    """What an operator makes of a manifest: its pods for a number of training pods, and its limits.

    Args:
      documents: the manifest file's documents (the job last).
    """

    def __init__(self, documents: Sequence[dict]):
        self.documents = list(documents)
        self.job = self.documents[-1]
        self.name = self.job["metadata"]["name"]
        self.namespace = self.job["metadata"].get("namespace", manifests.DEFAULT_NAMESPACE)
        annotations = self.job["metadata"].get("annotations") or {}
        count = self.training_pods()
        self.min_workers = int(annotations.get(manifests.MIN_REPLICAS_ANNOTATION, count))
        self.max_workers = int(annotations.get(manifests.MAX_REPLICAS_ANNOTATION, count))

    def training_pods(self) -> int:
        """The training pods the manifest asks for."""
        raise NotImplementedError

    @property
    def backoff_limit(self) -> int:
        raise NotImplementedError

    def pods(self, workers: int, restart_attempt: int) -> List[Pod]:
        """The pods with `workers` training pods, in the order the operator starts them."""
        raise NotImplementedError

    def model_dir(self) -> Optional[str]:
        """The training processes' `--model_dir` as the pods see it (where checkpoints appear)."""
        for document in self.documents:
            for value in _strings(document):
                if value.startswith("--model_dir="):
                    return value.split("=", 1)[1]
        return None


def _strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


class TFJobOperator(Operator):
    """Kubeflow's training operator for a TFJob: a pod and a Service per replica, `TF_CONFIG` for each."""

    def specs(self) -> Dict[str, dict]:
        return self.job["spec"]["tfReplicaSpecs"]

    def training_pods(self) -> int:
        return sum(_replicas(spec) for kind, spec in self.specs().items() if kind != manifests.PS)

    @property
    def backoff_limit(self) -> int:
        return int(self.job["spec"].get("runPolicy", {}).get("backoffLimit", 0))

    def pods(self, workers: int, restart_attempt: int) -> List[Pod]:
        counts = {kind: _replicas(spec) for kind, spec in self.specs().items()}
        if manifests.WORKER in counts or workers > counts.get(manifests.CHIEF, 0):
            counts[manifests.WORKER] = workers - counts.get(manifests.CHIEF, 0)
        if not counts.get(manifests.WORKER):
            counts.pop(manifests.WORKER, None)
        cluster = {kind.lower(): ["%s.%s.svc:%d" % (manifests.pod_name(self.name, kind, i), self.namespace,
                                                    self._port(kind)) for i in range(count)]
                   for kind, count in counts.items()}
        pods = []
        for kind, count in counts.items():
            spec = self.specs()[kind]
            template = spec["template"]
            for index in range(count):
                name = manifests.pod_name(self.name, kind, index)
                config = {"cluster": cluster, "task": {"type": kind.lower(), "index": index},
                          "environment": TF_CONFIG_ENVIRONMENT}
                pods.append(Pod(
                    name=name, aliases=("%s.%s.svc" % (name, self.namespace),), role=kind, index=index,
                    container=template["spec"]["containers"][0], volumes=template["spec"].get("volumes", []),
                    env={"TF_CONFIG": json.dumps(config)}, labels=dict(template["metadata"].get("labels", {})),
                    annotations=dict(template["metadata"].get("annotations") or {}), files={},
                    judged_by=(JUDGED_BY_EXIT_CODE if spec.get("restartPolicy") == manifests.RESTART_EXIT_CODE
                               else JUDGED_BY_KUBELET),
                    completes_job=kind == (manifests.CHIEF if manifests.CHIEF in counts else manifests.WORKER)
                    and index == 0))
        return pods

    def _port(self, kind: str) -> int:
        for container in self.specs()[kind]["template"]["spec"]["containers"]:
            if container["name"] == manifests.TF_CONTAINER:
                for port in container.get("ports", []):
                    if port.get("name") == manifests.TF_PORT_NAME:
                        return int(port["containerPort"])
        return manifests.TF_PORT


class MPIJobOperator(Operator):
    """The MPI operator (v2beta1): sshd workers, a launcher Job, the hostfile and keys it writes."""

    def specs(self) -> Dict[str, dict]:
        return self.job["spec"]["mpiReplicaSpecs"]

    def training_pods(self) -> int:
        return _replicas(self.specs()[manifests.WORKER])

    @property
    def backoff_limit(self) -> int:
        return int(self.job["spec"].get("runPolicy", {}).get("backoffLimit", 6))

    def pods(self, workers: int, restart_attempt: int) -> List[Pod]:
        slots = int(self.job["spec"].get("slotsPerWorker", 1))
        names = [manifests.pod_name(self.name, manifests.WORKER, i) for i in range(workers)]
        fqdn = ["%s.%s.%s.svc" % (name, self.name, self.namespace) for name in names]
        config = {manifests.HOSTFILE: manifests.hostfile(fqdn, slots),
                  DISCOVER_HOSTS: "#!/bin/sh\n" + "".join("echo %s\n" % host for host in fqdn)}
        ssh_path = self.job["spec"].get("sshAuthMountPath", manifests.SSH_PATH)
        pods = []
        for index, name in enumerate(names):
            template = self.specs()[manifests.WORKER]["template"]
            container = dict(template["spec"]["containers"][0])
            if not container.get("command") and not container.get("args"):
                container["command"] = list(manifests.SSHD_COMMAND)
            pods.append(self._pod(name, fqdn[index], manifests.WORKER, index, container, template,
                                  dict(MPI_WORKER_ENV), ssh_path, None, JUDGED_BY_KUBELET, False))
        template = self.specs()[manifests.LAUNCHER]["template"]
        env = dict(MPI_LAUNCHER_ENV)
        env.update(manifests.OPEN_MPI_ENV)
        env[manifests.OPEN_MPI_SLOTS_ENV] = str(slots)
        launcher = "%s-launcher" % self.name
        pods.append(self._pod(launcher, "%s.%s.%s.svc" % (launcher, self.name, self.namespace), manifests.LAUNCHER,
                              0, template["spec"]["containers"][0], template, env, ssh_path, config, JUDGED_BY_JOB,
                              True))
        return pods

    @staticmethod
    def _pod(name, fqdn, role, index, container, template, env, ssh_path, config, judged_by, completes):
        container = dict(container)
        mounts = list(container.get("volumeMounts", []))
        volumes = list(template["spec"].get("volumes", []))
        files = {"ssh-auth": {}}
        volumes.append({"name": "ssh-auth", "secret": {"secretName": "ssh"}})
        mounts.append({"name": "ssh-auth", "mountPath": ssh_path})
        if config is not None:
            volumes.append({"name": "mpi-job-config", "configMap": {"name": "config"}})
            mounts.append({"name": "mpi-job-config", "mountPath": manifests.MPI_CONFIG_PATH})
            files["mpi-job-config"] = config
        container["volumeMounts"] = mounts
        return Pod(name=name, aliases=(fqdn,), role=role, index=index, container=container, volumes=volumes,
                   env=env, labels=dict(template["metadata"].get("labels", {})),
                   annotations=dict(template["metadata"].get("annotations") or {}), files=files,
                   judged_by=judged_by, completes_job=completes)


class JobSetOperator(Operator):
    """The JobSet controller and the Job controller: Indexed Jobs, stable host names, failure and success policies."""

    def replicated(self) -> List[dict]:
        return self.job["spec"]["replicatedJobs"]

    def _mpi(self) -> bool:
        return any(r["name"] == manifests.JOBSET_LAUNCHER for r in self.replicated())

    def training_pods(self) -> int:
        names = (manifests.JOBSET_WORKER,) if self._mpi() else (manifests.JOBSET_CHIEF, manifests.JOBSET_WORKER)
        return sum(int(r["template"]["spec"].get("completions", 1)) * int(r.get("replicas", 1))
                   for r in self.replicated() if r["name"] in names)

    @property
    def backoff_limit(self) -> int:
        return int(self.job["spec"].get("failurePolicy", {}).get("maxRestarts", 0))

    def pods(self, workers: int, restart_attempt: int) -> List[Pod]:
        subdomain = self.job["spec"].get("network", {}).get("subdomain", self.name)
        counts = {r["name"]: int(r["template"]["spec"].get("completions", 1)) for r in self.replicated()}
        if self._mpi():
            counts[manifests.JOBSET_WORKER] = workers
        else:
            counts[manifests.JOBSET_WORKER] = workers - counts.get(manifests.JOBSET_CHIEF, 0)
        config_maps = {d["metadata"]["name"]: dict(d.get("data", {})) for d in self.documents
                       if d.get("kind") == "ConfigMap"}
        hosts = {name: ["%s-%s-0-%d.%s" % (self.name, name, i, subdomain) for i in range(count)]
                 for name, count in counts.items()}
        success = self.job["spec"].get("successPolicy", {}).get("targetReplicatedJobs") or list(counts)
        pods = []
        for replicated in self.replicated():
            name = replicated["name"]
            job_spec = replicated["template"]["spec"]
            template = job_spec["template"]
            for index in range(counts[name]):
                pod_name = "%s-%s-0-%d" % (self.name, name, index)
                labels = dict(template["metadata"].get("labels", {}))
                labels.update(zip(JOBSET_LABELS, (self.name, name, "0", str(restart_attempt))))
                annotations = dict(template["metadata"].get("annotations") or {})
                annotations.update(labels)
                annotations[COMPLETION_INDEX_ANNOTATION] = str(index)
                container = self._resized(template["spec"]["containers"][0], hosts)
                files = {}
                for volume in template["spec"].get("volumes", []):
                    if "configMap" in volume:
                        files[volume["name"]] = self._resized_config(config_maps.get(
                            volume["configMap"]["name"], {}), hosts)
                    elif "secret" in volume:
                        files[volume["name"]] = {}
                pods.append(Pod(
                    name=pod_name, aliases=(hosts[name][index],), role=name, index=index, container=container,
                    volumes=template["spec"].get("volumes", []), env={"JOB_COMPLETION_INDEX": str(index)},
                    labels=labels, annotations=annotations, files=files, judged_by=JUDGED_BY_JOBSET,
                    completes_job=name in success, pod_failure_policy=job_spec.get("podFailurePolicy")))
        return pods

    def _resized(self, container: dict, hosts: Dict[str, List[str]]) -> dict:
        """The container with `DEEPFM_TF_CLUSTER` listing the pods of this size (an elastic resize's patch)."""
        from jobs import kubernetes_entry  # pylint: disable=import-outside-toplevel
        container = dict(container)
        env = []
        for variable in container.get("env", []):
            if variable["name"] == kubernetes_entry.CLUSTER_VARIABLE:
                cluster = json.loads(variable["value"])
                port = int(cluster[next(iter(cluster))][0].rsplit(":", 1)[1])
                cluster = {job: ["%s:%d" % (host, port) for host in hosts[job]] for job in cluster if hosts.get(job)}
                variable = dict(variable, value=json.dumps(cluster, sort_keys=True))
            env.append(variable)
        container["env"] = env
        return container

    def _resized_config(self, data: Dict[str, str], hosts: Dict[str, List[str]]) -> Dict[str, str]:
        """The MPI hostfile listing the workers of this size (an elastic resize's patch)."""
        data = dict(data)
        if manifests.HOSTFILE in data:
            slots = re.search(r"slots=(\d+)", data[manifests.HOSTFILE])
            data[manifests.HOSTFILE] = manifests.hostfile(hosts[manifests.JOBSET_WORKER],
                                                          int(slots.group(1)) if slots else 1)
        return data


OPERATORS = {manifests.TFJOB: TFJobOperator, manifests.MPIJOB: MPIJobOperator, manifests.JOBSET: JobSetOperator}


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


def exit_code_matches(requirement: dict, code: int) -> bool:
    """Whether a pod failure policy's `onExitCodes` matches a container's exit code."""
    values = set(requirement.get("values", []))
    return code in values if requirement.get("operator") == "In" else code not in values


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
        self._pending_faults = list(config.faults)
        self._runs: Dict[str, int] = {}
        # The pods whose nodes are gone (until a `return` fault brings one back).
        self._nodes_down: set = set()

    def log(self, message: str) -> None:
        """Prints and keeps an event of the run (what `kubectl get events` would show)."""
        self.events.append(message)
        print(message, flush=True)

    def workers_now(self) -> int:
        """Training pods for the next start: the manifest's, less those whose node is gone, within the range.

        Raises:
          JobFailedError: fewer have a node than the minimum.
        """
        available = self.operator.training_pods() - len(self._nodes_down)
        try:
            return self.range.size(available)
        except elastic.BelowMinimumError as e:
            raise JobFailedError(", ".join(sorted(self._nodes_down)), EXIT_FAILED, "",
                                 "lost its node, and the job cannot go on: %s" % e) from e

    def prepare(self) -> None:
        """A new output directory with the image's ssh set-up and the job's ssh keys.

        Raises:
          FileExistsError: the output directory holds an earlier run.
        """
        if os.path.exists(os.path.join(self.output_dir, LOGS)):
            raise FileExistsError("--output_dir %s already holds a run: use a new directory" % self.output_dir)
        os.makedirs(self.private_dir)
        sagemaker_local.write_ssh_setup(os.path.join(self.private_dir, IMAGE_SSH), self.operator.name,
                                        authorized_keys=".ssh/authorized_keys")
        secret = os.path.join(self.private_dir, "ssh-secret")
        os.makedirs(secret)
        sagemaker_local.ssh_keygen(os.path.join(secret, "key"), self.operator.name)

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
                                            machine_dirs=[SSHD_PRIVSEP_DIR] + mounts,
                                            aliases=aliases) as (group, network):
            running: Dict[str, processes.Task] = {}
            for pod in pods:
                running[pod.name] = self._start(group, network, pod)
            self.log("started %s (%d training pod(s)); logs in %s" % (", ".join(by_name), workers, shown))
            done = set()
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError("the job ran past %.0f s; every pod was stopped (logs in %s)"
                                       % (self.config.timeout_s, shown))
                self._inject_faults(network, running)
                for name, task in list(running.items()):
                    code = task.poll()
                    if code is None or name in done:
                        continue
                    code = code if code >= 0 else RETRYABLE_BASE - code
                    pod = by_name[name]
                    verdict = self._judge(pod, code)
                    self.log("pod %s exited with code %d: %s" % (name, code, verdict))
                    if verdict == SUCCEEDED:
                        done.add(name)
                        if pod.completes_job and self._completed(pods, done):
                            group.stop()
                            self.log("job %s succeeded" % self.operator.name)
                            return None
                        continue
                    if verdict == FAILED:
                        group.stop()
                        raise JobFailedError(name, code, task.log_path, "failed with exit code %d, a permanent "
                                             "failure" % code)
                    if verdict == RESTART_IN_PLACE and name not in self._nodes_down:
                        running[name] = self._start(group, network, pod, fresh=False)
                        continue
                    if verdict != RESTART_IN_PLACE:
                        self.restarts += 1
                        if self.restarts > self.operator.backoff_limit:
                            group.stop()
                            raise JobFailedError(name, code, task.log_path, "failed with exit code %d after %d "
                                                 "restart(s), the backoff limit" % (code, self.operator.backoff_limit))
                    size = self.workers_now()
                    if size != workers:
                        self.resizes += 1
                        group.stop()
                        return ("restarting every pod from the latest checkpoint with %d training pod(s) instead "
                                "of %d (%s)" % (size, workers, self._node_summary()))
                    if verdict == RESTART_JOB or name in self._nodes_down:
                        group.stop()
                        return "restarting every pod from the latest checkpoint (%s)" % verdict
                    running[name] = self._start(group, network, pod)
                time.sleep(POLL_S)

    def _node_summary(self) -> str:
        return ("nodes gone: %s" % ", ".join(sorted(self._nodes_down))) if self._nodes_down else "every node is up"

    def _completed(self, pods: Sequence[Pod], done: set) -> bool:
        return all(pod.name in done for pod in pods if pod.completes_job)

    def _judge(self, pod: Pod, code: int) -> str:
        """What the operator does about a pod that exited with `code`."""
        if code == 0:
            return SUCCEEDED
        if pod.judged_by == JUDGED_BY_EXIT_CODE:
            return RESTART_POD if code >= RETRYABLE_BASE else FAILED
        if pod.judged_by == JUDGED_BY_JOB:
            return RESTART_POD
        if pod.judged_by == JUDGED_BY_KUBELET:
            return RESTART_IN_PLACE
        for rule in (pod.pod_failure_policy or {}).get("rules", []):
            requirement = rule.get("onExitCodes")
            if requirement and requirement.get("containerName", pod.container["name"]) == pod.container["name"] \
                    and exit_code_matches(requirement, code):
                if rule["action"] == "FailJob":
                    return self._jobset_failure(manifests.POD_FAILURE_POLICY_REASON)
                if rule["action"] == "Ignore":
                    return RESTART_POD
                break
        return self._jobset_failure("BackoffLimitExceeded")

    def _jobset_failure(self, reason: str) -> str:
        for rule in self.operator.job["spec"].get("failurePolicy", {}).get("rules", []):
            if reason in rule.get("onJobFailureReasons", [reason]):
                return FAILED if rule["action"] == "FailJobSet" else RESTART_JOB
        return RESTART_JOB

    def _inject_faults(self, network: hosts_lib.HostNetwork, running: Dict[str, processes.Task]) -> None:
        """Applies the faults whose checkpoint step has been reached."""
        step = self._checkpoint_step()
        for fault in list(self._pending_faults):
            if step is None or step < fault.after_step:
                continue
            if fault.action == Fault.RETURN:
                self._pending_faults.remove(fault)
                self._nodes_down.discard(fault.pod)
                self.log("fault: the node of pod %s is back (checkpoint at step %d)" % (fault.pod, step))
                continue
            if fault.pod not in running:
                continue
            self._pending_faults.remove(fault)
            self.log("fault: %s pod %s (checkpoint at step %d)" % (
                "killing" if fault.action == Fault.KILL else "losing the node of", fault.pod, step))
            if fault.action == Fault.LOSE:
                self._nodes_down.add(fault.pod)
            for pid in network.pids(network.host(fault.pod)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

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
        etc_ssh = os.path.join(network.etc_dir(host), sagemaker_local.SSH)
        if not os.path.isdir(etc_ssh):
            sagemaker_local.install_etc_ssh(os.path.join(self.private_dir, IMAGE_SSH), network, host)
        spec = hosts_lib.InitSpec(hostname=pod.name, argv=tuple(self._argv(pod)), env=self._environment(pod),
                                  binds=tuple(self._binds(pod, private)), cwd="/")
        path = spec.write(os.path.join(private, "init-%d.json" % run))
        name = pod.name if not run else "%s.%d" % (pod.name, run)
        return group.start(name, network.command(host, path, self.python))

    def _argv(self, pod: Pod) -> List[str]:
        argv = list(pod.container.get("command", [])) + list(pod.container.get("args", []))
        if not argv:
            raise ValueError("pod %s: the container has no command (this emulation has no image entry point)"
                             % pod.name)
        return argv

    def _environment(self, pod: Pod) -> Dict[str, str]:
        """The image's environment, then the operator's, then the container's own (downward API resolved)."""
        env = sagemaker_local.container_environment(self.python, sagemaker_job.DEFAULT_REGION, "/root")
        env.pop("AWS_REGION", None)
        env["PYTHONPATH"] = sagemaker_job.project_root()
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


def run(config: LocalConfig, python: str = sys.executable) -> LocalRun:
    """Runs the manifest to its end; returns the run (its events, restarts and the training pods it ended with).

    Raises:
      hosts_lib.HostSetupError: emulated hosts cannot be created here.
      ValueError: the manifest holds no job this emulates.
      FileExistsError: `output_dir` holds an earlier run.
      JobFailedError: the job failed as its operator would decide (every pod was stopped).
      TimeoutError: it ran past `timeout_s` (every pod was stopped).
      processes.Terminated: SIGTERM or SIGHUP (every pod was stopped).
    """
    local_run = LocalRun(config, python)
    local_run.run()
    return local_run
