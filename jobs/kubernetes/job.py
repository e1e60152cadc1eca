"""A Kubernetes training job's configuration: `KubernetesJob` (a `jobs.spec.JobSpec` and what a cluster
needs) and each training container's `Resources`, both checked when built.

`jobs.kubernetes.manifests` renders a `KubernetesJob` as manifests; the
command line `python -m deepfm.kubernetes` generates its flags from these
fields. This module never imports TensorFlow.
"""

import dataclasses
import json
import os
import re
from typing import Dict, List

from cli import config_flags
from jobs import spec as spec_lib
from strategies import strategy_names as names

DEFAULT_NAMESPACE = "default"
DEFAULT_MOUNT_PATH = "/mnt/deepfm"
DEFAULT_VOLUME_SIZE = "10Gi"
DEFAULT_BACKOFF_LIMIT = 3
PVC_SUFFIX = "-data"
MODEL_DIR, EXPORT_DIR, METRICS_FILE = "model", "export", "metrics.json"
TRAIN_CHANNEL, VALIDATION_CHANNEL = "train", "validation"
STRATEGY_HYPERPARAMETER = "strategy"
GPU_RESOURCE = "nvidia.com/gpu"
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Pod names are `<job>-<replica>-<i>` (`<job>-worker-0-12` in a JobSet) and must stay DNS labels.
MAX_JOB_NAME = 40
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$")


@dataclasses.dataclass(frozen=True)
class Resources:
    """What each training container requests (and is limited to).

    Attributes:
      cpu: cores, a Kubernetes quantity (`4`, `500m`); "" for none.
      memory: memory, a Kubernetes quantity (`8Gi`); "" for none.
      gpus: GPUs (`nvidia.com/gpu`).
    """

    cpu: str = config_flags.field("", "render: CPU request of each training container (e.g. 4, 500m).")
    memory: str = config_flags.field("", "render: memory request of each training container (e.g. 8Gi).")
    gpus: int = config_flags.field(0, "render: GPUs of each training container.")

    def __post_init__(self):
        for flag, value in (("cpu", self.cpu), ("memory", self.memory)):
            if value and not QUANTITY.match(value):
                raise ValueError("--%s %r is not a Kubernetes quantity (e.g. 4, 500m, 8Gi)" % (flag, value))
        if self.gpus < 0:
            raise ValueError("--gpus must be >= 0, got %r" % self.gpus)

    def cores(self) -> int:
        """Whole cores of the CPU request (0 when none or below one core)."""
        if not self.cpu:
            return 0
        if self.cpu.endswith("m"):
            return int(float(self.cpu[:-1]) // 1000)
        return int(float(self.cpu)) if self.cpu.replace(".", "", 1).isdigit() else 0

    def to_model(self):
        """The container's `V1ResourceRequirements` (None when nothing is requested)."""
        from kubernetes import client
        amounts = {key: value for key, value in (("cpu", self.cpu), ("memory", self.memory)) if value}
        limits = dict(amounts)
        if self.gpus:
            limits[GPU_RESOURCE] = str(self.gpus)
        if not amounts and not limits:
            return None
        return client.V1ResourceRequirements(requests=amounts or None, limits=limits or None)


@dataclasses.dataclass(frozen=True)
class KubernetesJob:
    """A `JobSpec` as a Kubernetes job.

    Attributes:
      spec: the job (its `instance_count` training pods; `distribution`
        `parameter_server`, `mpi` or `none`; channels are paths in the
        volume, relative to `mount_path`).
      image: the container image (built from the rendered `Dockerfile`).
      namespace: the namespace of every object.
      pvc: an existing ReadWriteMany claim to use; "" renders one.
      storage_class: the rendered claim's storage class ("" : the cluster's default).
      volume_size: the rendered claim's size.
      mount_path: where every pod mounts the volume.
      num_ps: parameter servers (`parameter_server`).
      resources: each training container's requests.
      min_replicas: elastic lower bound of training pods (0: `instance_count`).
      max_replicas: elastic upper bound of training pods (0: `instance_count`).
      backoff_limit: restarts of the job after retryable failures.
      metrics_port: the chief's Prometheus port (0: none).
    """

    spec: spec_lib.JobSpec
    image: str = dataclasses.field(metadata=config_flags.metadata(
        "render: the job's container image (built from the rendered Dockerfile)."))
    namespace: str = config_flags.field(DEFAULT_NAMESPACE, "render: the namespace of every object.")
    pvc: str = config_flags.field(
        "", "render: an existing ReadWriteMany claim for data and checkpoints (default: render one).")
    storage_class: str = config_flags.field(
        "", "render: the storage class of the rendered claim (FSx for Lustre, EFS; default: the cluster's).")
    volume_size: str = config_flags.field(DEFAULT_VOLUME_SIZE, "render: the size of the rendered claim.")
    mount_path: str = config_flags.field(
        DEFAULT_MOUNT_PATH, "render: where every pod mounts the volume; channels are paths relative to it.")
    num_ps: int = config_flags.field(1, "render, parameter_server: parameter-server pods.")
    resources: Resources = Resources()
    min_replicas: int = config_flags.field(
        0, "render: elastic lower bound of training pods (0: --instance_count).")
    max_replicas: int = config_flags.field(
        0, "render: elastic upper bound of training pods (0: --instance_count).")
    backoff_limit: int = config_flags.field(
        DEFAULT_BACKOFF_LIMIT, "render: restarts after retryable failures (a stop, a lost ps, a killed pod).")
    metrics_port: int = config_flags.field(0, "render: the chief's Prometheus metrics port (0: none).")

    def __post_init__(self):
        name = self.spec.job_name
        if not DNS_LABEL.match(name) or len(name) > MAX_JOB_NAME:
            raise ValueError("--job_name %r: a Kubernetes job name must be at most %d lowercase letters, digits and "
                             "hyphens, starting with a letter" % (name, MAX_JOB_NAME))
        if not self.image:
            raise ValueError("--image is required: the job's container image (see the rendered Dockerfile)")
        if not DNS_LABEL.match(self.namespace):
            raise ValueError("--namespace %r is not a DNS label" % self.namespace)
        if self.pvc and not DNS_LABEL.match(self.pvc):
            raise ValueError("--pvc %r is not a valid claim name" % self.pvc)
        if self.pvc and self.storage_class:
            raise ValueError("--pvc %s and --storage_class %s: give an existing claim or a storage class for a new "
                             "one, not both" % (self.pvc, self.storage_class))
        if not QUANTITY.match(self.volume_size):
            raise ValueError("--volume_size %r is not a Kubernetes quantity (e.g. 100Gi)" % self.volume_size)
        if not os.path.isabs(self.mount_path):
            raise ValueError("--mount_path %r must be an absolute path" % self.mount_path)
        if self.spec.input_mode != spec_lib.FILE_MODE:
            raise ValueError("--input_mode %s: Kubernetes pods read their channels as files in the volume"
                             % self.spec.input_mode)
        for channel in self.spec.channels:
            if channel.name not in (TRAIN_CHANNEL, VALIDATION_CHANNEL):
                raise ValueError("--channel %s: a Kubernetes job reads the channels %s and %s from the volume"
                                 % (channel.name, TRAIN_CHANNEL, VALIDATION_CHANNEL))
            if os.path.isabs(channel.uri) or channel.uri.split("/")[0] == "..":
                raise ValueError("--channel %s=%s: give a path inside the volume, relative to --mount_path %s"
                                 % (channel.name, channel.uri, self.mount_path))
        if self.spec.source_dir or self.spec.entry_point != spec_lib.ENTRY_POINT:
            raise ValueError("--source_dir/--entry_point: a Kubernetes job runs the code of its image; add your "
                             "files to the image (the rendered Dockerfile) and pass their flags as hyperparameters")
        strategy = self.spec.hyperparameters.get(STRATEGY_HYPERPARAMETER)
        # The strategies a distribution may run instead of its own, chosen by the hyperparameter `strategy`.
        allowed = names.choices_of(self.spec.distribution)
        if strategy is not None and strategy not in allowed:
            raise ValueError("hyperparameter --strategy %s: the manifests set it from --distribution %s%s" % (
                strategy, self.spec.distribution,
                " (which also runs %s)" % " or ".join(allowed) if allowed else ""))
        if self.num_ps < 1:
            raise ValueError("--num_ps must be >= 1, got %r" % self.num_ps)
        if not 1 <= self.min_workers <= self.spec.instance_count <= self.max_workers:
            raise ValueError("--min_replicas %d, --instance_count %d, --max_replicas %d: need 1 <= min <= count <= max"
                             % (self.min_workers, self.spec.instance_count, self.max_workers))
        if self.elastic and self.spec.distribution == spec_lib.DISTRIBUTION_NONE:
            raise ValueError("--min_replicas/--max_replicas need --distribution parameter_server or mpi")
        if self.backoff_limit < 0:
            raise ValueError("--backoff_limit must be >= 0, got %r" % self.backoff_limit)
        if not 0 <= self.metrics_port < 65536:
            raise ValueError("--metrics_port must be a port number, got %r" % self.metrics_port)

    @property
    def name(self) -> str:
        return self.spec.job_name

    @property
    def min_workers(self) -> int:
        return self.min_replicas or self.spec.instance_count

    @property
    def max_workers(self) -> int:
        return self.max_replicas or self.spec.instance_count

    @property
    def elastic(self) -> bool:
        return self.min_workers < self.max_workers

    @property
    def claim_name(self) -> str:
        return self.pvc or self.name + PVC_SUFFIX

    def job_path(self, *parts: str) -> str:
        """A path of this job's outputs in the volume, as the pods see it."""
        return os.path.join(self.mount_path, self.name, *parts)

    def train_args(self) -> List[str]:
        """The `deepfm.train` flags of every training process; hyperparameters win over derived ones."""
        derived: Dict[str, object] = {
            "strategy": names.default_of(self.spec.distribution), "model_dir": self.job_path(MODEL_DIR),
            "export_dir": self.job_path(EXPORT_DIR), "metrics_file": self.job_path(METRICS_FILE)}
        for channel in self.spec.channels:
            flag = "train_data" if channel.name == TRAIN_CHANNEL else "val_data"
            derived[flag] = os.path.normpath(os.path.join(self.mount_path, channel.uri))
        if self.metrics_port:
            derived["metrics_port"] = self.metrics_port
        cores = self.resources.cores()
        if cores:
            derived["intra_op_threads"] = max(1, cores // self.spec.processes_per_host)
        derived.update(self.spec.hyperparameters)
        return [flag_arg(name, value) for name, value in derived.items()]


def flag_arg(name: str, value) -> str:
    """`--name=value`, with booleans and numbers as JSON writes them (`true`, `0.5`)."""
    return "--%s=%s" % (name, value if isinstance(value, str) else json.dumps(value))
