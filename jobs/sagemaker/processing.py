"""SageMaker Processing jobs: run on emulated hosts here, or submitted with the SageMaker Python SDK.

    python -m jobs.sagemaker.processing local --input data/raw --instance_count 2 \\
        --output_dir runs/criteo-processing --min_count 2 --shards 2

    python -m jobs.sagemaker.processing submit --input s3://bucket/criteo/raw --instance_count 8 \\
        --output_path s3://bucket/criteo/converted --role arn:aws:iam::123456789012:role/SageMaker --dry_run

Both run the distributed Criteo conversion of `dataprep.criteo_processing`
as three Processing jobs, one after the other: `count` (N instances, the raw
TSV files `ShardedByS3Key`), `convert` (N instances, the raw files sharded
again plus every instance's counts `FullyReplicated`) and `combine` (one
instance, writes the dataset root's `metadata.json`). Each job's container
runs `python3 -m dataprep.criteo_processing <stage>`; the project's
packages reach it as a zip archive in its `code` input, on `PYTHONPATH`.
The dataset root is output `data`: `<output_dir>/data` here,
`<output_path>/<job_name>/data` on SageMaker.

`local` runs each job as SageMaker Processing would, on the emulated hosts
of `jobs.local.hosts` (root needed), sharing the host machinery of
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
(`<job_dir>/logs/<host>.log`). The jobs' directories are
`<output_dir>/jobs/{count,convert,combine}`; where S3 would hold the
code, the counts and the parts is `<output_dir>/{code,counts,parts}`.

`submit` builds each job with the SDK's `sagemaker.processing.Processor`
(the SageMaker TensorFlow 2.14 training image, or `--image_uri`),
`ProcessingInput` and `ProcessingOutput`, uploads the code archive and runs
the jobs one after the other, each waiting for the one before;
`--dry_run` prints the three `CreateProcessingJob` requests as JSON and
contacts nothing (botocore's `Stubber`, as `jobs.sagemaker.submit` does for
training). The SDK is imported only there.
"""

import dataclasses
import os
import posixpath
import re
import sys
import tempfile
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from absl import app, flags

from cli import entry
from input_pipeline import schema
from dataprep import criteo
from dataprep import criteo_processing as stages
from jobs.local import hosts as hosts_lib
from jobs.local import processes
from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.sagemaker import local as sagemaker_local
from jobs.sagemaker import submit as sagemaker_submit

PROGRAM = "jobs.sagemaker.processing"

COMMANDS = ("local", "submit")
LOCAL, SUBMIT = COMMANDS
BASE_DIR = sagemaker_local.BASE_DIR
PROCESSING_DIR = stages.PROCESSING_DIR
CONFIG_DIR = stages.CONFIG_DIR
PROCESSING_JOB_CONFIG = "processingjobconfig.json"
CODE = "code"
CONTAINER_PYTHON = "python3"
ENTRYPOINT = (CONTAINER_PYTHON, "-m", "dataprep.criteo_processing")
LOCAL_IMAGE_URI = "local"
LOCAL_ROLE = "<no_role>"
JOBS = "jobs"
DEFAULT_INSTANCE_TYPE = "ml.m5.4xlarge"
DEFAULT_VOLUME_SIZE_GB = 30
DEFAULT_MAX_RUN_S = 24 * 60 * 60
DEFAULT_INSTANCE_COUNT = 2
S3_DATA_TYPE = "S3Prefix"
S3_INPUT_MODE = "File"
S3_COMPRESSION = "None"
S3_UPLOAD_MODE = "EndOfJob"
FILE_SCHEME = "file://"
IMAGE_FRAMEWORK = "tensorflow"
IMAGE_SCOPE = "training"
ENVIRONMENT_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
EXIT_FAILURE = 1
EXIT_USAGE = 2

FLAGS = flags.FLAGS


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
            for item in self.spec.outputs:
                os.makedirs(self.on_host(host, item.source))
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


# ---------------------------------------------------------------------------
# The Criteo conversion as three Processing jobs.


@dataclasses.dataclass(frozen=True)
class ConversionConfig:
    """The distributed conversion, run here (`local`) or on SageMaker (`submit`).

    Attributes:
      command: `local` or `submit`.
      input: the raw TSV files: a local file or directory (`local`) or an
        `s3://` prefix (`submit`).
      output: a new local directory (`local`) or an `s3://` prefix under
        which `<job_name>/` goes (`submit`).
      options: the stages' options.
      instance_count: instances of the count and convert jobs.
      job_name: the jobs' common name; each job adds its stage.
      region: the AWS region.
      cpus_per_host: local: cores each host is pinned to (0: not pinned).
      timeout_s: local: each job's time limit (0: none).
      role: submit: the IAM role ARN the jobs run as.
      instance_type: submit: the instance type.
      image_uri: submit: the container image (default: the SageMaker
        TensorFlow 2.14 training image of `region`).
      max_run_s: submit: each job's time limit.
      volume_size_gb: submit: each instance's storage volume (it holds the
        instance's raw files, its counts and its converted part).
      dry_run: submit: print the requests, contact nothing.
    """

    command: str
    input: str
    output: str
    options: stages.StageOptions = stages.StageOptions()
    instance_count: int = DEFAULT_INSTANCE_COUNT
    job_name: str = ""
    region: str = spec_lib.DEFAULT_REGION
    cpus_per_host: int = 0
    timeout_s: float = 0.0
    role: Optional[str] = None
    instance_type: str = DEFAULT_INSTANCE_TYPE
    image_uri: Optional[str] = None
    max_run_s: int = DEFAULT_MAX_RUN_S
    volume_size_gb: int = DEFAULT_VOLUME_SIZE_GB
    dry_run: bool = False

    def __post_init__(self):
        if self.command not in COMMANDS:
            raise ValueError("the command must be one of %s, got %r" % (", ".join(COMMANDS), self.command))
        if not self.job_name:
            object.__setattr__(self, "job_name", spec_lib.default_job_name())
        for name in self.job_names:
            if not spec_lib.JOB_NAME.match(name):
                raise ValueError("--job_name %r: each job adds -<stage>, and %r is not 1-63 letters, digits and "
                                 "hyphens starting with a letter or digit" % (self.job_name, name))
        if self.instance_count < 1:
            raise ValueError("--instance_count must be >= 1, got %r" % self.instance_count)
        output_flag = "output_dir" if self.command == LOCAL else "output_path"
        remote = [(flag, value) for flag, value in (("input", self.input), (output_flag, self.output))
                  if value.startswith(sagemaker_submit.S3_SCHEME)]
        if self.command == LOCAL:
            if remote:
                raise ValueError("local runs here: --%s must be a local path, got %r" % remote[0])
            if not os.path.exists(self.input):
                raise ValueError("--input %s: no such file or directory" % self.input)
            if self.timeout_s < 0:
                raise ValueError("--timeout_s must be >= 0, got %r" % self.timeout_s)
        else:
            if len(remote) != 2:
                raise ValueError("submit reads --input from and writes --output_path to S3: both must be s3:// "
                                 "URIs, got %r and %r" % (self.input, self.output))
            if not (self.role or "").startswith("arn:"):
                raise ValueError("--role must be an IAM role ARN (arn:aws:iam::<account>:role/<name>), got %r"
                                 % self.role)
            if self.volume_size_gb < 1:
                raise ValueError("--volume_size_gb must be >= 1, got %r" % self.volume_size_gb)

    @property
    def job_names(self) -> List[str]:
        """The jobs' names, in the order they run."""
        return ["%s-%s" % (self.job_name, stage) for stage in stages.STAGES]

    def locations(self) -> Dict[str, str]:
        """Where each input and output lives: local paths, or S3 URIs under `<output>/<job_name>/`."""
        base = self.output.rstrip("/")
        if self.command == SUBMIT:
            base = posixpath.join(base, self.job_name)
        where = {name: posixpath.join(base, name) for name in (stages.COUNTS, stages.PARTS, stages.DATA)}
        where[CODE] = posixpath.join(base, CODE, source_lib.SOURCE_ZIP)
        where[stages.RAW] = self.input
        return where


def conversion_jobs(config: ConversionConfig, image_uri: str = LOCAL_IMAGE_URI) -> List[ProcessingJobSpec]:
    """The count, convert and combine jobs, in the order they run."""
    where = config.locations()
    code = Input(CODE, where[CODE], posixpath.join(stages.INPUT_DIR, CODE))
    environment = {"PYTHONPATH": posixpath.join(code.destination, source_lib.SOURCE_ZIP)}
    jobs = []
    for stage, job_name in zip(stages.STAGES, config.job_names):
        inputs = (code,) + tuple(
            Input(name, where[name], posixpath.join(stages.INPUT_DIR, name),
                  spec_lib.SHARDED_BY_S3_KEY if name == stages.RAW else spec_lib.FULLY_REPLICATED)
            for name in stages.STAGE_INPUTS[stage])
        outputs = tuple(Output(name, posixpath.join(stages.OUTPUT_DIR, name), where[name])
                        for name in stages.STAGE_OUTPUTS[stage])
        jobs.append(ProcessingJobSpec(
            job_name=job_name, entrypoint=ENTRYPOINT,
            arguments=tuple(config.options.arguments(stage)), environment=environment, inputs=inputs,
            outputs=outputs, instance_count=1 if stage == stages.COMBINE else config.instance_count,
            instance_type=config.instance_type if config.command == SUBMIT else spec_lib.LOCAL_INSTANCE_TYPE,
            image_uri=image_uri, region=config.region, max_runtime_s=config.max_run_s,
            volume_size_gb=config.volume_size_gb))
    return jobs


def run_conversion(config: ConversionConfig, python: str = sys.executable) -> str:
    """Runs the three jobs here, one after the other; returns the dataset root.

    Raises:
      FileExistsError: the output directory is not empty.
      As `run_job`.
    """
    output = os.path.abspath(config.output)
    if os.path.isdir(output) and os.listdir(output):
        raise FileExistsError("--output_dir %s is not empty: use a new directory" % config.output)
    where = config.locations()
    os.makedirs(os.path.dirname(os.path.abspath(where[CODE])))
    source_lib.write_source_zip(where[CODE])
    for spec, stage in zip(conversion_jobs(config), stages.STAGES):
        start = time.monotonic()
        collected = run_job(spec, os.path.join(output, JOBS, stage), cpus_per_host=config.cpus_per_host,
                            timeout_s=config.timeout_s, python=python)
        print("job %s: %d instance(s) in %.1fs; collected %s" % (
            spec.job_name, spec.instance_count, time.monotonic() - start,
            ", ".join("%s: %d file(s)" % item for item in collected.items())), flush=True)
    return os.path.abspath(where[stages.DATA])


def build_processor(spec: ProcessingJobSpec, role: str, session):
    """The SDK's `Processor` of the job, bound to `session`."""
    from sagemaker import processing  # pylint: disable=import-outside-toplevel
    return processing.Processor(
        role=role, image_uri=spec.image_uri, instance_count=spec.instance_count, instance_type=spec.instance_type,
        entrypoint=list(spec.entrypoint), volume_size_in_gb=spec.volume_size_gb,
        max_runtime_in_seconds=spec.max_runtime_s, env=dict(spec.environment), sagemaker_session=session,
        base_job_name=spec_lib.JOB_NAME_PREFIX)


def sdk_run_arguments(spec: ProcessingJobSpec) -> dict:
    """The `Processor.run` arguments of the job: its `ProcessingInput`s, `ProcessingOutput`s and arguments."""
    from sagemaker import processing  # pylint: disable=import-outside-toplevel
    return dict(
        inputs=[processing.ProcessingInput(source=item.source, destination=item.destination, input_name=item.name,
                                           s3_data_distribution_type=item.distribution) for item in spec.inputs],
        outputs=[processing.ProcessingOutput(source=item.source, destination=item.destination,
                                             output_name=item.name) for item in spec.outputs],
        arguments=list(spec.arguments), job_name=spec.job_name)


def submit_conversion(config: ConversionConfig) -> List[dict]:
    """Submits the three jobs, each after the one before has completed (dry run: only builds them).

    Returns:
      The `CreateProcessingJob` requests as the SDK sent them (dry run), or
      each job's name.

    Raises:
      ImportError: the SDK is not installed.
      Errors of the SDK and AWS on a real submit (a failed job included).
    """
    sagemaker_submit.import_sdk()
    from sagemaker import image_uris  # pylint: disable=import-outside-toplevel
    image_uri = config.image_uri or image_uris.retrieve(
        IMAGE_FRAMEWORK, region=config.region, version=sagemaker_submit.FRAMEWORK_VERSION,
        py_version=sagemaker_submit.PY_VERSION, instance_type=config.instance_type, image_scope=IMAGE_SCOPE)
    jobs = conversion_jobs(config, image_uri)
    sdk = sagemaker_submit.open_session(
        config.region, sagemaker_submit.split_s3(config.output)[0], "CreateProcessingJob", config.dry_run,
        [{"ProcessingJobArn": sagemaker_submit.dry_run_arn(config.region, "processing-job", spec.job_name)}
         for spec in jobs])
    with tempfile.TemporaryDirectory() as tmp:
        sdk.upload(source_lib.write_source_zip(os.path.join(tmp, source_lib.SOURCE_ZIP)),
                   config.locations()[CODE])
    for spec in jobs:
        build_processor(spec, config.role, sdk.session).run(wait=not config.dry_run, logs=False,
                                                            **sdk_run_arguments(spec))
    sdk.finish()
    return sdk.requests if config.dry_run else [{"ProcessingJobName": spec.job_name} for spec in jobs]


# ---------------------------------------------------------------------------
# Command line.


def define_flags() -> None:
    """The flags of both commands (`local` and `submit` each ignore the other's)."""
    defaults = stages.StageOptions()
    flags.DEFINE_string("input", None, "The raw Criteo TSV files: a file or directory (local), an s3:// prefix "
                        "(submit). ShardedByS3Key: at least one file per instance.")
    flags.DEFINE_integer("instance_count", DEFAULT_INSTANCE_COUNT, "Instances of the count and convert jobs.")
    flags.DEFINE_string("job_name", None, "The jobs' common name (default: deepfm-<time>); each adds -<stage>.")
    flags.DEFINE_string("region", spec_lib.DEFAULT_REGION, "AWS region.")
    flags.DEFINE_float("val_fraction", defaults.val_fraction, "Share of lines for the validation split.")
    flags.DEFINE_integer("min_count", defaults.min_count, "Frequency cutoff of the vocabulary, over all parts.")
    flags.DEFINE_integer("shards", defaults.shards, "Shard files per split and format written by each instance.")
    flags.DEFINE_bool("skip_bad_records", defaults.skip_bad_records, "Skip and count malformed lines.")
    flags.DEFINE_integer("workers", defaults.workers, "Conversion processes per instance (0: its cores).")
    flags.DEFINE_float("memory_mb", defaults.memory_mb, "Memory for the value counts per instance.")
    flags.DEFINE_enum("libsvm_layout", defaults.libsvm_layout, criteo.LIBSVM_LAYOUTS, "LibSVM layout.")
    # local
    flags.DEFINE_string("output_dir", None, "local: a new directory; the dataset root is its data/.")
    flags.DEFINE_integer("cpus_per_host", 0, "local: cores each host is pinned to (0: not pinned).")
    flags.DEFINE_float("timeout_s", 0.0, "local: each job's time limit in seconds (0: none).")
    # submit
    flags.DEFINE_string("output_path", None, "submit: s3:// prefix; the jobs write under <output_path>/<job_name>/.")
    flags.DEFINE_string("role", None, "submit: IAM role ARN of the jobs.")
    flags.DEFINE_string("instance_type", DEFAULT_INSTANCE_TYPE, "submit: instance type.")
    flags.DEFINE_string("image_uri", None, "submit: container image (default: SageMaker's TensorFlow 2.14 "
                        "training image).")
    flags.DEFINE_integer("max_run", DEFAULT_MAX_RUN_S, "submit: each job's time limit in seconds.")
    flags.DEFINE_integer("volume_size_gb", DEFAULT_VOLUME_SIZE_GB, "submit: each instance's storage volume.")
    flags.DEFINE_bool("dry_run", False, "submit: print the CreateProcessingJob requests as JSON; contact nothing.")


def config_from_flags(command: str, f=FLAGS) -> ConversionConfig:
    """The `ConversionConfig` of the parsed flags.

    Raises:
      ValueError: a missing or bad flag, named.
    """
    needed = ("input", "output_dir") if command == LOCAL else ("input", "output_path", "role")
    missing = [name for name in needed if not getattr(f, name)]
    if missing:
        raise ValueError("%s needs --%s" % (command, ", --".join(missing)))
    options = stages.StageOptions(val_fraction=f.val_fraction, min_count=f.min_count, shards=f.shards,
                                  skip_bad_records=f.skip_bad_records, workers=f.workers, memory_mb=f.memory_mb,
                                  libsvm_layout=f.libsvm_layout)
    return ConversionConfig(
        command=command, input=f.input, output=f.output_dir if command == LOCAL else f.output_path, options=options,
        instance_count=f.instance_count, job_name=f.job_name or "", region=f.region, cpus_per_host=f.cpus_per_host,
        timeout_s=f.timeout_s, role=f.role, instance_type=f.instance_type, image_uri=f.image_uri,
        max_run_s=f.max_run, volume_size_gb=f.volume_size_gb, dry_run=f.dry_run)


def run_local(config: ConversionConfig) -> int:
    """Runs the conversion here; returns its exit code."""
    try:
        root = run_conversion(config)
    except (ValueError, FileExistsError, hosts_lib.HostSetupError) as e:
        print("%s local: %s" % (PROGRAM, e), file=sys.stderr)
        return EXIT_USAGE
    except (sagemaker_local.JobFailedError, TimeoutError) as e:
        print("%s local: %s failed: %s" % (PROGRAM, config.job_name, e), file=sys.stderr)
        return getattr(e, "returncode", EXIT_FAILURE) or EXIT_FAILURE
    except processes.Terminated as e:
        print("%s local: stopped by %s; every host was stopped" % (PROGRAM, e), file=sys.stderr)
        return processes.SIGNAL_EXIT_BASE + e.signum
    print("conversion %s completed: dataset root %s\n%s" % (config.job_name, root, dataset_summary(root)))
    return 0


def dataset_summary(root: str) -> str:
    """The dataset root's splits, shards and source, for the console."""
    metadata = schema.DatasetMetadata.read(root)
    lines = ["  feature_size %d" % metadata.feature_size]
    lines += ["  %-10s %8d rows in %d shard(s)" % (name, info.rows, len(info.shards))
              for name, info in metadata.splits.items()]
    lines.append("  source: %s" % metadata.source)
    return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    """Runs the conversion here (`local`) or submits it (`submit`) with the parsed flags."""
    if len(argv) != 2 or argv[1] not in COMMANDS:
        raise app.UsageError("expected one command, one of %s; got %r" % (", ".join(COMMANDS), list(argv[1:])))
    try:
        config = config_from_flags(argv[1])
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    if config.command == LOCAL:
        sys.exit(run_local(config))
    print(sagemaker_submit.request_json(submit_conversion(config)))


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
