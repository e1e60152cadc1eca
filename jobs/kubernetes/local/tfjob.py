"""Kubeflow's training operator for a TFJob, as it makes the pods: a pod and a Service per replica, each with TF_CONFIG.

Pods `<job>-<type>-<i>`, resolvable as `<job>-<type>-<i>.<ns>.svc`; a
replica whose `restartPolicy` is `ExitCode` is judged by its exit code, any
other restarts in place. This module never imports TensorFlow.
"""

import json
from typing import Dict, List

from jobs.kubernetes import manifests
from jobs.kubernetes.local.operator import Operator, replicas
from jobs.kubernetes.local.pod import JUDGED_BY_EXIT_CODE, JUDGED_BY_KUBELET, Pod

TF_CONFIG_ENVIRONMENT = "cloud"


class TFJobOperator(Operator):
    """Kubeflow's training operator for a TFJob: a pod and a Service per replica, `TF_CONFIG` for each."""

    def specs(self) -> Dict[str, dict]:
        return self.job["spec"]["tfReplicaSpecs"]

    def training_pods(self) -> int:
        return sum(replicas(spec) for kind, spec in self.specs().items() if kind != manifests.PS)

    @property
    def backoff_limit(self) -> int:
        return int(self.job["spec"].get("runPolicy", {}).get("backoffLimit", 0))

    def pods(self, workers: int, restart_attempt: int) -> List[Pod]:
        counts = {kind: replicas(spec) for kind, spec in self.specs().items()}
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
