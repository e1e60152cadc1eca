"""One SageMaker training job, described once for running it locally and for submitting it.

`JobSpec` holds what `python -m deepfm.sagemaker local` and `... submit`
share: instances, distribution, channels, input mode, hyperparameters.
This module turns it into what SageMaker writes into a training container
(`hyperparameters.json` encoded as the SageMaker Python SDK encodes it,
`resourceconfig.json`, `inputdataconfig.json`, `checkpointconfig.json`) and
packs the project into the source tarball the container runs. It never
imports TensorFlow or the SageMaker SDK.
"""

import dataclasses
import gzip
import io
import json
import os
import re
import tarfile
import time
import zipfile
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

DISTRIBUTIONS = ("none", "parameter_server", "mpi")
DISTRIBUTION_NONE, DISTRIBUTION_PS, DISTRIBUTION_MPI = DISTRIBUTIONS
INPUT_MODES = ("File", "Pipe")
FILE_MODE, PIPE_MODE = INPUT_MODES
S3_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
FULLY_REPLICATED, SHARDED_BY_S3_KEY = S3_DISTRIBUTIONS
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9\.\-_]+$")
JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
# The script SageMaker's toolkit runs, at the root of the source it unpacks, and where it lives in
# this project.
ENTRY_POINT = "sagemaker_entry_point.py"
ENTRY_POINT_SOURCE = "examples/sagemaker_entry_point.py"
# The project's packages, the one list of what a job ships: the SageMaker source tarball and the
# Kubernetes image's Dockerfile both copy exactly these (setup.cfg installs the same; a test checks).
SOURCE_PACKAGES = ("deepfm", "strategies", "input_pipeline", "dataprep", "jobs", "cli")
SOURCE_TARBALL = "sourcedir.tar.gz"
TRAINING_MODULE = "sagemaker_tensorflow_container.training:main"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
CONTAINER_LOG_LEVEL = 20
DEFAULT_REGION = "us-east-1"
DEFAULT_INTERFACE = "eth0"
LOCAL_INSTANCE_TYPE = "local"
INSTANCE_GROUP = "homogeneousCluster"
JOB_NAME_PREFIX = "deepfm"
# Reproducible tarballs: every member gets this modification time.
TARBALL_MTIME = 0
SOURCE_ZIP = "deepfm-source.zip"
# Reproducible zip archives: every member gets this time (the earliest zip can hold).
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class Channel:
    """One input channel.

    Attributes:
      name: the channel name (`train`, `train_0`, `validation`, ...).
      uri: local path (local jobs) or `s3://` prefix (submitted jobs).
      distribution: `FullyReplicated` or `ShardedByS3Key` (each host gets
        its own part of the files).
      input_mode: `File` or `Pipe` for this channel; None: the job's (a
        SageMaker channel's own `InputMode`, e.g. Pipe-mode training with
        a small File-mode validation channel).
    """

    name: str
    uri: str
    distribution: str = FULLY_REPLICATED
    input_mode: Optional[str] = None

    def __post_init__(self):
        if not CHANNEL_NAME.match(self.name):
            raise ValueError("channel name %r must match %s" % (self.name, CHANNEL_NAME.pattern))
        if self.distribution not in S3_DISTRIBUTIONS:
            raise ValueError("channel %r: distribution must be one of %s, got %r"
                             % (self.name, ", ".join(S3_DISTRIBUTIONS), self.distribution))
        if self.input_mode is not None and self.input_mode not in INPUT_MODES:
            raise ValueError("channel %r: input mode must be one of %s, got %r"
                             % (self.name, ", ".join(INPUT_MODES), self.input_mode))


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A training job.

    Attributes:
      job_name: the training job's name.
      instance_count: hosts (`algo-1` .. `algo-N`).
      instance_type: the instance type (`local` for emulated hosts).
      distribution: `none`, `parameter_server` or `mpi`.
      processes_per_host: MPI processes per host.
      custom_mpi_options: extra `mpirun` options (MPI only).
      input_mode: `File` or `Pipe`: the job's, for every channel that does
        not set its own.
      channels: the input channels.
      hyperparameters: the script's hyperparameters, as Python values.
      checkpoints: whether a checkpoint location is configured (its local
        path is `/opt/ml/checkpoints`).
      region: the AWS region.
      source_dir: a directory of the user's own files (an entry-point script,
        a model module), shipped at the root of the source beside this
        project's packages; None: none.
      entry_point: the script the toolkit runs, relative to the source's
        root: this project's `sagemaker_entry_point.py`, or a file of
        `source_dir`.
    """

    job_name: str
    instance_count: int = 1
    instance_type: str = LOCAL_INSTANCE_TYPE
    distribution: str = DISTRIBUTION_NONE
    processes_per_host: int = 1
    custom_mpi_options: str = ""
    input_mode: str = FILE_MODE
    channels: Tuple[Channel, ...] = ()
    hyperparameters: Mapping[str, object] = dataclasses.field(default_factory=dict)
    checkpoints: bool = True
    region: str = DEFAULT_REGION
    source_dir: Optional[str] = None
    entry_point: str = ENTRY_POINT

    def __post_init__(self):
        if not JOB_NAME.match(self.job_name):
            raise ValueError("--job_name %r must be 1-63 letters, digits and hyphens, starting with a letter "
                             "or digit" % self.job_name)
        if self.instance_count < 1:
            raise ValueError("--instance_count must be >= 1, got %r" % self.instance_count)
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError("--distribution must be one of %s, got %r"
                             % (", ".join(DISTRIBUTIONS), self.distribution))
        if self.processes_per_host < 1:
            raise ValueError("--processes_per_host must be >= 1, got %r" % self.processes_per_host)
        if self.processes_per_host > 1 and self.distribution != DISTRIBUTION_MPI:
            raise ValueError("--processes_per_host %d needs --distribution mpi (got %r): SageMaker runs one "
                             "training process per host otherwise" % (self.processes_per_host, self.distribution))
        if self.custom_mpi_options and self.distribution != DISTRIBUTION_MPI:
            raise ValueError("--custom_mpi_options needs --distribution mpi, got %r" % self.distribution)
        if self.input_mode not in INPUT_MODES:
            raise ValueError("--input_mode must be one of %s, got %r" % (", ".join(INPUT_MODES), self.input_mode))
        names = [channel.name for channel in self.channels]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError("channel(s) %s given more than once" % ", ".join(duplicates))
        reserved = sorted(key for key in self.hyperparameters if key.startswith("sagemaker_"))
        if reserved:
            raise ValueError("hyperparameter(s) %s: names starting with sagemaker_ are the toolkit's own"
                             % ", ".join(reserved))
        if self.source_dir is not None and not os.path.isdir(self.source_dir):
            raise ValueError("--source_dir %r is not a directory" % self.source_dir)
        if self.entry_point != ENTRY_POINT and not (
                self.source_dir and os.path.isfile(os.path.join(self.source_dir, self.entry_point))):
            raise ValueError("--entry_point %r is no file of --source_dir %r: the toolkit runs a script of the "
                             "shipped source" % (self.entry_point, self.source_dir))

    def channel_mode(self, channel: Channel) -> str:
        """The input mode of `channel`: its own, else the job's."""
        return channel.input_mode or self.input_mode

    def channels_in(self, mode: str) -> List[Channel]:
        """The channels whose input mode is `mode`."""
        return [channel for channel in self.channels if self.channel_mode(channel) == mode]

    @property
    def hosts(self) -> List[str]:
        """The host names SageMaker gives the instances."""
        return host_names(self.instance_count)

    def distribution_hyperparameters(self) -> Dict[str, object]:
        """The toolkit's hyperparameters for the distribution, as the SDK sets them."""
        if self.distribution == DISTRIBUTION_PS:
            return {"sagemaker_parameter_server_enabled": True}
        if self.distribution == DISTRIBUTION_MPI:
            return {"sagemaker_mpi_enabled": True,
                    "sagemaker_mpi_num_of_processes_per_host": self.processes_per_host,
                    "sagemaker_mpi_custom_mpi_options": self.custom_mpi_options}
        return {}

    def sdk_distribution(self) -> Optional[Dict[str, dict]]:
        """The `distribution` argument of the SDK's `TensorFlow` estimator."""
        if self.distribution == DISTRIBUTION_PS:
            return {"parameter_server": {"enabled": True}}
        if self.distribution == DISTRIBUTION_MPI:
            return {"mpi": {"enabled": True, "processes_per_host": self.processes_per_host,
                            "custom_mpi_options": self.custom_mpi_options}}
        return None


def host_names(instance_count: int) -> List[str]:
    """The host names SageMaker gives a job's instances: `algo-1` .. `algo-N`."""
    return ["algo-%d" % (index + 1) for index in range(instance_count)]


def default_job_name(now: Optional[float] = None) -> str:
    """`deepfm-YYYY-MM-DD-HH-MM-SS-mmm`, the SDK's naming scheme."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(now))
    return "%s-%s-%03d" % (JOB_NAME_PREFIX, stamp, int(now * 1000) % 1000)


def parse_hyperparameters(args: Sequence[str]) -> Dict[str, object]:
    """Hyperparameters from command-line style arguments.

    `--name value`, `--name=value`, and a bare `--name` (True). Values are
    read as JSON where they parse (`3` -> 3, `true` -> True, `0.5` -> 0.5),
    else kept as strings.

    Raises:
      ValueError: an argument that is not a `--name`, or a name given twice.
    """
    params: Dict[str, object] = {}
    args = list(args)
    index = 0
    while index < len(args):
        arg = args[index]
        if not arg.startswith("--") or len(arg) == 2:
            raise ValueError("hyperparameter %r: expected --name value or --name=value" % arg)
        name, has_value, value = arg[2:].partition("=")
        if not has_value:
            if index + 1 < len(args) and not args[index + 1].startswith("--"):
                value = args[index + 1]
                index += 1
            else:
                value = "true"
        if name in params:
            raise ValueError("hyperparameter --%s is given twice" % name)
        params[name] = _parse_value(value)
        index += 1
    return params


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def encoded_hyperparameters(spec: JobSpec, submit_directory: str, model_dir: Optional[str]) -> Dict[str, str]:
    """`hyperparameters.json` as SageMaker writes it for the SDK's `TensorFlow` estimator.

    Every value is JSON-encoded (the toolkit decodes each), the user's
    hyperparameters plus the SDK's own: the program, the source directory,
    the job name, the region, the log level, the distribution and
    `model_dir`.

    Args:
      spec: the job.
      submit_directory: where the container fetches the source tarball.
      model_dir: the `model_dir` the SDK passes (None: none).
    """
    values: Dict[str, object] = dict(spec.hyperparameters)
    values.update(spec.distribution_hyperparameters())
    values.update({
        "sagemaker_program": spec.entry_point,
        "sagemaker_submit_directory": submit_directory,
        "sagemaker_container_log_level": CONTAINER_LOG_LEVEL,
        "sagemaker_job_name": spec.job_name,
        "sagemaker_region": spec.region,
    })
    if model_dir is not None:
        values["model_dir"] = model_dir
    return {key: json.dumps(value) for key, value in values.items()}


def model_dir_for(spec: JobSpec) -> Optional[str]:
    """The `model_dir` hyperparameter: the checkpoint location's local path, if any.

    With a checkpoint location, the checkpoints go to `/opt/ml/checkpoints`,
    which SageMaker syncs with S3 and restores on a restarted (spot) job.
    """
    return CHECKPOINT_LOCAL_PATH if spec.checkpoints else None


def resource_config(spec: JobSpec, current_host: str, interface: str = DEFAULT_INTERFACE) -> dict:
    """`resourceconfig.json` of `current_host`."""
    return {
        "current_host": current_host,
        "current_instance_type": spec.instance_type,
        "current_group_name": INSTANCE_GROUP,
        "hosts": spec.hosts,
        "instance_groups": [{"instance_group_name": INSTANCE_GROUP, "instance_type": spec.instance_type,
                             "hosts": spec.hosts}],
        "network_interface_name": interface,
    }


def input_data_config(spec: JobSpec) -> dict:
    """`inputdataconfig.json`: each channel's input mode and S3 distribution."""
    return {channel.name: {"TrainingInputMode": spec.channel_mode(channel),
                           "S3DistributionType": channel.distribution, "RecordWrapperType": "None"}
            for channel in spec.channels}


def checkpoint_config(s3_uri: str) -> dict:
    """`checkpointconfig.json` for a checkpoint location at `s3_uri`."""
    return {"LocalPath": CHECKPOINT_LOCAL_PATH, "S3Uri": s3_uri}


def project_root() -> str:
    """The directory holding this project's packages and entry point."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_files(root: Optional[str] = None, source_dir: Optional[str] = None) -> List[Tuple[str, str]]:
    """The files shipped to the container: (name in the archive, path).

    This project's entry point goes to the archive's root, where the toolkit
    runs it, and the packages' modules keep their paths (relative to
    `root`); the files of the user's `source_dir` (absolute paths) go to the
    root beside them.

    Raises:
      ValueError: a file of `source_dir` has the name of one of the
        project's (it would replace it).
    """
    root = root or project_root()
    found = [(ENTRY_POINT, os.path.join(root, ENTRY_POINT_SOURCE))]
    for package in SOURCE_PACKAGES:
        for directory, subdirs, names in os.walk(os.path.join(root, package)):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            found += sorted((os.path.relpath(path, root), path) for path in (
                os.path.join(directory, name) for name in names if name.endswith(".py")))
    if source_dir:
        taken = {name for name, _ in found} | {name.split("/", 1)[0] for name, _ in found}
        for directory, subdirs, names in os.walk(source_dir):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(n for n in names if not n.startswith(".") and not n.endswith(".pyc")):
                path = os.path.join(directory, name)
                archived = os.path.relpath(path, source_dir)
                if archived in taken or archived.split(os.sep, 1)[0] in taken:
                    raise ValueError("--source_dir %r: %s has the name of one of this project's files or packages; "
                                     "rename it" % (source_dir, archived))
                found.append((archived, path))
    return found


def _source_contents(root: Optional[str], source_dir: Optional[str] = None) -> List[Tuple[str, bytes]]:
    contents = []
    for name, path in source_files(root, source_dir):
        with open(path, "rb") as f:
            contents.append((name, f.read()))
    return contents


def write_source_tarball(path: str, root: Optional[str] = None, source_dir: Optional[str] = None) -> str:
    """Packs `source_files` (with `source_dir`'s) into a gzipped tarball at `path` (byte-identical for the same files).

    Returns:
      `path`.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in _source_contents(root, source_dir):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = TARBALL_MTIME
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=TARBALL_MTIME) as gz:
        gz.write(buffer.getvalue())
    return path


def write_source_zip(path: str, root: Optional[str] = None) -> str:
    """Packs `source_files` into a zip archive at `path` (byte-identical for the same files).

    Python imports the packages straight from it when it is on `PYTHONPATH`
    (how a processing container, which has no toolkit to unpack a tarball,
    runs the project's modules).

    Returns:
      `path`.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in _source_contents(root):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return path
