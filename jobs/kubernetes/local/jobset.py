"""The JobSet and Job controllers, as they make a JobSet's pods: Indexed Jobs, stable host names, the policies.

Pods `<jobset>-<replicated job>-<job index>-<pod index>`, resolvable under
the JobSet's subdomain, with the JobSet's labels and annotations (read
through the downward API), `JOB_COMPLETION_INDEX`, the manifest's ConfigMaps
and the ssh key Secret. An elastic resize patches the cluster in
`DEEPFM_TF_CLUSTER` and the MPI hostfile to the new size. This module never
imports TensorFlow.
"""

import json
import re
from typing import Dict, List

from jobs.kubernetes import entry as kubernetes_entry
from jobs.kubernetes import manifests
from jobs.kubernetes.local.operator import Operator
from jobs.kubernetes.local.pod import JUDGED_BY_JOBSET, Pod

JOBSET_LABELS = ("jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name",
                 "jobset.sigs.k8s.io/job-index", "jobset.sigs.k8s.io/restart-attempt")
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


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
