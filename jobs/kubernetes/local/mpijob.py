"""The MPI operator (v2beta1), as it makes an MPIJob's pods: sshd workers, a launcher Job, the hostfile and keys.

Pods `<job>-launcher` and `<job>-worker-<i>`, resolvable as
`.<job>.<ns>.svc`; the hostfile and `discover_hosts.sh` in `/etc/mpi`, the
Open MPI variables, the ssh keys in `/root/.ssh`. The launcher's Job retries
any failure; the workers restart in place. This module never imports
TensorFlow.
"""

from typing import Dict, List

from jobs.kubernetes import manifests
from jobs.kubernetes.local.operator import Operator, replicas
from jobs.kubernetes.local.pod import JUDGED_BY_JOB, JUDGED_BY_KUBELET, Pod

DISCOVER_HOSTS = "discover_hosts.sh"
MPI_LAUNCHER_ENV = (("K_MPI_JOB_ROLE", "launcher"), ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", ""))
MPI_WORKER_ENV = (("K_MPI_JOB_ROLE", "worker"),)


class MPIJobOperator(Operator):
    """The MPI operator (v2beta1): sshd workers, a launcher Job, the hostfile and keys it writes."""

    def specs(self) -> Dict[str, dict]:
        return self.job["spec"]["mpiReplicaSpecs"]

    def training_pods(self) -> int:
        return replicas(self.specs()[manifests.WORKER])

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
        files: Dict[str, Dict[str, str]] = {"ssh-auth": {}}
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
