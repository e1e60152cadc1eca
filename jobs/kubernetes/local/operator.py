"""An operator: the pods it makes of a manifest for a number of training pods, and what it does when one exits.

`Operator` is the interface the local run (`jobs.kubernetes.local.run`) asks;
`tfjob`, `mpijob` and `jobset` hold one operator each. A pod's exit is judged
as the operators judge it from the real exit codes: TFJob's `ExitCode`
policy recreates a pod that exited with 128-255 and fails the job on 1-127;
MPIJob's launcher Job retries any failure; a JobSet applies its Jobs' pod
failure policies, then its own failure policy (restart the whole set, or
fail it). This module never imports TensorFlow.
"""

from typing import List, Optional, Sequence

from jobs.kubernetes import job as kubernetes_job
from jobs.kubernetes import manifests
from jobs.kubernetes.local.pod import JUDGED_BY_EXIT_CODE, JUDGED_BY_JOB, JUDGED_BY_KUBELET, Pod

# Exit codes from here on are retryable (Kubeflow's ExitCode policy); a signal N exits as this + N.
RETRYABLE_BASE = 128
# What the operator does about a pod that exited.
SUCCEEDED, FAILED = "succeeded", "failed (permanent)"
RESTART_POD, RESTART_JOB, RESTART_IN_PLACE = "recreate the pod", "restart the job", "restart the container"


def replicas(spec: dict) -> int:
    """The replicas of a replica spec (1 where it names none)."""
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
        self.namespace = self.job["metadata"].get("namespace", kubernetes_job.DEFAULT_NAMESPACE)
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

    def judge(self, pod: Pod, code: int) -> str:
        """What the operator does about `pod` having exited with `code`: one of `SUCCEEDED`, `FAILED`, `RESTART_*`."""
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
        for rule in self.job["spec"].get("failurePolicy", {}).get("rules", []):
            if reason in rule.get("onJobFailureReasons", [reason]):
                return FAILED if rule["action"] == "FailJobSet" else RESTART_JOB
        return RESTART_JOB


def _strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def exit_code_matches(requirement: dict, code: int) -> bool:
    """Whether a pod failure policy's `onExitCodes` matches a container's exit code."""
    values = set(requirement.get("values", []))
    return code in values if requirement.get("operator") == "In" else code not in values
