"""One SageMaker Processing job: its spec, the files SageMaker writes for it, and a run on emulated hosts here.

`ProcessingJobSpec` describes a job once for running it here (`run_job`) and
for submitting it (`jobs.sagemaker.processing`, with the SDK).
`run_job` runs it as SageMaker Processing would, on the emulated hosts of
`jobs.local.hosts` (root needed), sharing the host machinery of
`jobs.sagemaker.local`: `algo-1` .. `algo-N`, each with its own network,
PID, mount and UTS namespaces and a private `/tmp`; each host's `/opt/ml` is
`<job_dir>/<host>/`, holding `config/resourceconfig.json` and
`config/processingjobconfig.json` as SageMaker writes them, every input at
its `/opt/ml/processing/input/<name>` (`ShardedByS3Key`: this host's part
of the files, `FullyReplicated`: all) and the outputs' directories. The
container's `python3` is this machine's interpreter. When every host's
command exits with 0, each output's files of every host are collected into
its destination, the local stand-in for its S3 prefix (a file two hosts
both wrote fails the job, as it would overwrite in S3); when one fails,
every host is stopped and `JobFailedError` names it and its log
(`<job_dir>/logs/<host>.log`). This module never imports TensorFlow or the
SageMaker SDK.
"""

import dataclasses
import os
import re
import sys
from typing import Dict, List, Mapping, Tuple

from dataprep import criteo_processing as stages
from jobs import spec as spec_lib
from jobs.local import hosts as hosts_lib
from jobs.sagemaker import local as sagemaker_local
from jobs.sagemaker import submit as sagemaker_submit

BASE_DIR = sagemaker_local.BASE_DIR
PROCESSING_DIR = stages.PROCESSING_DIR
CONFIG_DIR = stages.CONFIG_DIR
PROCESSING_JOB_CONFIG = "processingjobconfig.json"
CONTAINER_PYTHON = "python3"
LOCAL_IMAGE_URI = "local"
LOCAL_ROLE = "<no_role>"
DEFAULT_VOLUME_SIZE_GB = 30
DEFAULT_MAX_RUN_S = 24 * 60 * 60
S3_DATA_TYPE = "S3Prefix"
S3_INPUT_MODE = "File"
S3_COMPRESSION = "None"
S3_UPLOAD_MODE = "EndOfJob"
FILE_SCHEME = "file://"
ENVIRONMENT_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class Input:
    """A `ProcessingInput`.

    Attributes:
      name: its `InputName`.
      source: a local file or directory (local jobs) or an `s3://` prefix.
      destination: where the container sees it, under `/opt/ml/processing/`.
      distribution: `FullyReplicated`, or `ShardedByS3Key` (each instance
        gets its own part of the files).
    """

    name: str
    source: str
    destination: str
    distribution: str = spec_lib.FULLY_REPLICATED


@dataclasses.dataclass(frozen=True)
class Output:
    """A `ProcessingOutput`.

    Attributes:
      name: its `OutputName`.
      source: the container's directory, under `/opt/ml/processing/`.
      destination: a local directory (local jobs) or an `s3://` prefix.
    """

    name: str
    source: str
    destination: str


@dataclasses.dataclass(frozen=True)
class ProcessingJobSpec:
    """A Processing job, described once for running it here and for submitting it.

    Attributes:
      job_name: the job's name.
      entrypoint: the container's entry point.
      arguments: its arguments.
      environment: variables set in the container.
      inputs: the inputs.
      outputs: the outputs.
      instance_count: instances (`algo-1` .. `algo-N`).
      instance_type: e.g. `ml.m5.4xlarge` (`local` for emulated hosts).
      image_uri: the container image (`local`: this machine's Python).
      region: the AWS region.
      max_runtime_s: the job's time limit.
      volume_size_gb: each instance's storage volume.
    """

    job_name: str
    entrypoint: Tuple[str, ...]
    arguments: Tuple[str, ...] = ()
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    inputs: Tuple[Input, ...] = ()
    outputs: Tuple[Output, ...] = ()
    instance_count: int = 1
    instance_type: str = spec_lib.LOCAL_INSTANCE_TYPE
    image_uri: str = LOCAL_IMAGE_URI
    region: str = spec_lib.DEFAULT_REGION
    max_runtime_s: int = DEFAULT_MAX_RUN_S
    volume_size_gb: int = DEFAULT_VOLUME_SIZE_GB

    def __post_init__(self):
        if not spec_lib.JOB_NAME.match(self.job_name):
            raise ValueError("job name %r must be 1-63 letters, digits and hyphens, starting with a letter or digit"
                             % self.job_name)
        if self.instance_count < 1:
            raise ValueError("--instance_count must be >= 1, got %r" % self.instance_count)
        if not self.entrypoint:
            raise ValueError("job %s: the entrypoint is empty" % self.job_name)
        if self.max_runtime_s < 1:
            raise ValueError("--max_run must be >= 1 second, got %r" % self.max_runtime_s)
        for kind, names in (("input", [i.name for i in self.inputs]), ("output", [o.name for o in self.outputs])):
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise ValueError("job %s: %s(s) %s given more than once" % (self.job_name, kind, ", ".join(duplicates)))
        for item in self.inputs:
            if item.distribution not in spec_lib.S3_DISTRIBUTIONS:
                raise ValueError("input %s: distribution must be one of %s, got %r"
                                 % (item.name, ", ".join(spec_lib.S3_DISTRIBUTIONS), item.distribution))
        for kind, name, path in ([("input", i.name, i.destination) for i in self.inputs]
                                 + [("output", o.name, o.source) for o in self.outputs]):
            if not path.startswith(PROCESSING_DIR + "/"):
                raise ValueError("%s %s: its container path must begin with %s/ (SageMaker's rule), got %r"
                                 % (kind, name, PROCESSING_DIR, path))
        bad_keys = sorted(key for key in self.environment if not ENVIRONMENT_KEY.match(key))
        if bad_keys:
            raise ValueError("job %s: environment variable name(s) %s must match %s"
                             % (self.job_name, ", ".join(bad_keys), ENVIRONMENT_KEY.pattern))

    @property
    def hosts(self) -> List[str]:
        """The host names SageMaker gives the instances."""
        return spec_lib.host_names(self.instance_count)


def _uri(location: str) -> str:
    return location if location.startswith(sagemaker_submit.S3_SCHEME) else FILE_SCHEME + os.path.abspath(location)


def processing_inputs(spec: ProcessingJobSpec) -> List[dict]:
    """`ProcessingInputs` as the SDK's `ProcessingInput` sends them (local sources as `file://`)."""
    return [{"InputName": item.name, "AppManaged": False,
             "S3Input": {"S3Uri": _uri(item.source), "LocalPath": item.destination, "S3DataType": S3_DATA_TYPE,
                         "S3InputMode": S3_INPUT_MODE, "S3DataDistributionType": item.distribution,
                         "S3CompressionType": S3_COMPRESSION}}
            for item in spec.inputs]


def processing_output_config(spec: ProcessingJobSpec) -> dict:
    """`ProcessingOutputConfig` as the SDK's `ProcessingOutput` sends it."""
    return {"Outputs": [{"OutputName": item.name, "AppManaged": False,
                         "S3Output": {"S3Uri": _uri(item.destination), "LocalPath": item.source,
                                      "S3UploadMode": S3_UPLOAD_MODE}}
                        for item in spec.outputs]}


def processing_job_config(spec: ProcessingJobSpec, role: str = LOCAL_ROLE) -> dict:
    """`/opt/ml/config/processingjobconfig.json`: the job's `CreateProcessingJob` request and its ARN."""
    return {
        "ProcessingJobArn": sagemaker_submit.dry_run_arn(spec.region, "processing-job", spec.job_name),
        "ProcessingJobName": spec.job_name,
        "AppSpecification": {"ImageUri": spec.image_uri, "ContainerEntrypoint": list(spec.entrypoint),
                             "ContainerArguments": list(spec.arguments)},
        "Environment": dict(spec.environment),
        "ProcessingInputs": processing_inputs(spec),
        "ProcessingOutputConfig": processing_output_config(spec),
        "ProcessingResources": {"ClusterConfig": {"InstanceCount": spec.instance_count,
                                                  "InstanceType": spec.instance_type,
                                                  "VolumeSizeInGB": spec.volume_size_gb}},
        "RoleArn": role,
        "StoppingCondition": {"MaxRuntimeInSeconds": spec.max_runtime_s},
    }


def resource_config(spec: ProcessingJobSpec, current_host: str) -> dict:
    """`/opt/ml/config/resourceconfig.json` of `current_host`, as SageMaker Processing documents it."""
    return {"current_host": current_host, "hosts": spec.hosts}


class LocalProcessingJob:
    """The directories, hosts and outputs of one Processing job run here; see `run_job`.

    It provides what `sagemaker_local.run_on_hosts` needs of a job.
    """

    use_namespaces = True

    def __init__(self, spec: ProcessingJobSpec, job_dir: str, python: str = sys.executable):
        reason = hosts_lib.check_privileges()
        if reason:
            raise hosts_lib.HostSetupError("a Processing container sees %s only in a mount namespace of its own: %s"
                                           % (PROCESSING_DIR, reason))
        hosts_lib.check_interpreter(python)
        for item in spec.inputs:
            if not os.path.exists(item.source):
                raise ValueError("input %s=%s: no such file or directory" % (item.name, item.source))
        self.spec = spec
        self.python = python
        self.job_dir = os.path.abspath(job_dir)
        self.log_dir = os.path.join(self.job_dir, sagemaker_local.LOGS)
        self.private_dir = os.path.join(self.job_dir, sagemaker_local.PRIVATE)

    def host_dir(self, host: str) -> str:
        """What `host` sees as `/opt/ml`."""
        return os.path.join(self.job_dir, host)

    def on_host(self, host: str, container_path: str) -> str:
        """Where a path of `host`'s container lies on this machine."""
        return os.path.join(self.host_dir(host), os.path.relpath(container_path, BASE_DIR))

    def shares(self) -> Dict[str, List[List[str]]]:
        """Per input, per host, the files (relative to the input) the host receives.

        Raises:
          ValueError: a sharded input with fewer files than hosts, named.
        """
        shares = {}
        for item in self.spec.inputs:
            files = sagemaker_local.channel_files(item.source)
            try:
                shares[item.name] = [sagemaker_local.host_share(files, item.distribution, index,
                                                                self.spec.instance_count)
                                     for index in range(self.spec.instance_count)]
            except ValueError as e:
                raise ValueError("input %s=%s: %s" % (item.name, item.source, e)) from e
        return shares

    def prepare(self) -> None:
        """Lays out every host's `/opt/ml`: the config files, its inputs, its outputs' directories.

        Raises:
          FileExistsError: `job_dir` is not empty.
          ValueError: as `shares`.
        """
        if os.path.isdir(self.job_dir) and os.listdir(self.job_dir):
            raise FileExistsError("job %s: %s is not empty (an earlier run?): use a new directory"
                                  % (self.spec.job_name, self.job_dir))
        shares = self.shares()
        config = processing_job_config(self.spec)
        os.makedirs(self.log_dir)
        for index, host in enumerate(self.spec.hosts):
            sagemaker_local.write_json(os.path.join(self.on_host(host, CONFIG_DIR), stages.RESOURCE_CONFIG),
                                       resource_config(self.spec, host))
            sagemaker_local.write_json(os.path.join(self.on_host(host, CONFIG_DIR), PROCESSING_JOB_CONFIG), config)
            for item in self.spec.inputs:
                target = self.on_host(host, item.destination)
                os.makedirs(target)
                for name in shares[item.name][index]:
                    source = item.source if os.path.isfile(item.source) else os.path.join(item.source, name)
                    sagemaker_local.place_file(source, os.path.join(target, name))
            for output in self.spec.outputs:
                os.makedirs(self.on_host(host, output.source))
            os.makedirs(os.path.join(self.private_dir, host, "tmp"))

    def entry_command(self) -> List[str]:
        """The container's entry point and arguments; its `python3` is this machine's interpreter."""
        entrypoint = list(self.spec.entrypoint)
        if entrypoint[0] == CONTAINER_PYTHON:
            entrypoint[0] = self.python
        return entrypoint + list(self.spec.arguments)

    def environment(self, host: str) -> Dict[str, str]:
        """The container's environment: the image's (here: this machine's Python) and the job's."""
        del host
        env = sagemaker_local.container_environment(self.python, self.spec.region, "/tmp")
        env.update(self.spec.environment)
        return env

    def init_spec(self, host: hosts_lib.Host) -> hosts_lib.InitSpec:
        """What `jobs.local.host_init` sets up in `host`: its `/opt/ml` and private `/tmp`."""
        binds = ((self.host_dir(host.name), BASE_DIR), (os.path.join(self.private_dir, host.name, "tmp"), "/tmp"))
        return hosts_lib.InitSpec(hostname=host.name, argv=tuple(self.entry_command()),
                                  env=self.environment(host.name), binds=binds, cpus=host.cpus, cwd="/")

    def write_etc(self, network: hosts_lib.HostNetwork, host: hosts_lib.Host) -> None:
        """Nothing: a Processing container needs none of the machine's `/etc` files but the hosts'."""
        del network, host

    def collect_outputs(self) -> Dict[str, int]:
        """Copies every host's outputs into their destinations (hard links where possible), as the upload does.

        Returns:
          Files collected per output.

        Raises:
          FileExistsError: a file exists in a destination already, or two
            hosts wrote the same file; nothing is collected then.
        """
        placed: Dict[str, Tuple[str, str]] = {}  # target -> (source, host)
        for item in self.spec.outputs:
            destination = os.path.abspath(item.destination)
            for host in self.spec.hosts:
                root = self.on_host(host, item.source)
                for directory, _, names in os.walk(root):
                    for name in names:
                        source = os.path.join(directory, name)
                        target = os.path.join(destination, os.path.relpath(source, root))
                        if target in placed or os.path.lexists(target):
                            earlier = "%s's" % placed[target][1] if target in placed else "the existing file"
                            raise FileExistsError("output %s: %s of %s would overwrite %s %s" % (
                                item.name, os.path.relpath(source, root), host, earlier, target))
                        placed[target] = (source, host)
        for target, (source, _) in placed.items():
            sagemaker_local.place_file(source, target)
        counts = {}
        for item in self.spec.outputs:
            destination = os.path.abspath(item.destination)
            os.makedirs(destination, exist_ok=True)
            counts[item.name] = sum(target.startswith(destination + os.sep) for target in placed)
        return counts


def run_job(spec: ProcessingJobSpec, job_dir: str, cpus_per_host: int = 0, timeout_s: float = 0.0,
            stop_grace_s: float = sagemaker_local.DEFAULT_STOP_GRACE_S, python: str = sys.executable) -> Dict[str, int]:
    """Runs a Processing job on emulated hosts to its end and collects its outputs; see the module docstring.

    Args:
      spec: the job (local sources and destinations).
      job_dir: the hosts' `/opt/ml` directories and logs go here; must be
        empty or absent.
      cpus_per_host: cores each host is pinned to; 0 pins nothing.
      timeout_s: stop every host and fail after this many seconds; 0: none.
      stop_grace_s: how long every host has between SIGTERM and SIGKILL.
      python: the interpreter standing in for the image's `python3`.

    Returns:
      Files collected per output.

    Raises:
      hosts_lib.HostSetupError: emulated hosts cannot be created here.
      FileExistsError: `job_dir` is not empty, or an output would
        overwrite a file.
      ValueError: a missing input, or a sharded one with fewer files than
        hosts.
      sagemaker_local.JobFailedError: a host failed (every host was stopped).
      TimeoutError: the job ran past `timeout_s`.
      processes.Terminated: SIGTERM or SIGHUP (every host was stopped).
    """
    job = LocalProcessingJob(spec, job_dir, python)
    cpus = hosts_lib.assign_cpus(spec.instance_count, cpus_per_host)
    job.prepare()
    sagemaker_local.run_on_hosts(job, spec.hosts, cpus, link_gbps=0.0, timeout_s=timeout_s,
                                 stop_grace_s=stop_grace_s, python=python)
    return job.collect_outputs()
