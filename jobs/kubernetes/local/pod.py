"""A pod as an operator creates it from a manifest, and who judges its exit.

The operators (`jobs.kubernetes.local.tfjob`, `mpijob`, `jobset`) make
`Pod`s; `jobs.kubernetes.local.run` starts each on its own emulated host.
This module never imports TensorFlow.
"""

import dataclasses
from typing import Dict, List, Optional, Tuple

# Who decides about a failed pod: TFJob's ExitCode policy, a batch Job's retries, the kubelet
# (restartPolicy OnFailure), a JobSet's Job pod failure policy and its own failure policy.
JUDGED_BY_EXIT_CODE, JUDGED_BY_JOB, JUDGED_BY_KUBELET, JUDGED_BY_JOBSET = "exit_code", "job", "in_place", "jobset"


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
