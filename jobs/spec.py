"""The job, neutral of where it runs: instances, distribution, channels, hyperparameters.

`JobSpec` holds what every launcher of a multi-host training job shares:
`python -m deepfm.sagemaker local` and `... submit` (`jobs.sagemaker`) and
`python -m deepfm.kubernetes render` (`jobs.kubernetes`, which wraps it
with what a cluster needs). The distribution names are SageMaker's (`none`,
`parameter_server`, `mpi`), the one vocabulary both speak; what a SageMaker
container gets from a spec is `jobs.sagemaker.container`, the source it
runs `jobs.source`. This module never imports TensorFlow or the SageMaker SDK.
"""

import dataclasses
import json
import os
import re
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from cli import config_flags
from strategies import strategy_names

# SageMaker's distributions, which every strategy's launch declaration names (`strategies.strategy_names`).
DISTRIBUTIONS = strategy_names.DISTRIBUTIONS
DISTRIBUTION_NONE, DISTRIBUTION_PS, DISTRIBUTION_MPI = DISTRIBUTIONS
# Not a distribution of its own: the launchers resolve it to the one predicted fastest (`jobs.auto_distribution`).
DISTRIBUTION_AUTO = "auto"
INPUT_MODES = ("File", "Pipe")
FILE_MODE, PIPE_MODE = INPUT_MODES
S3_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
FULLY_REPLICATED, SHARDED_BY_S3_KEY = S3_DISTRIBUTIONS
# A channel's S3 distribution unless it says otherwise: each host gets every file.
CHANNEL_DISTRIBUTION = FULLY_REPLICATED
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9\.\-_]+$")
JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
# The script the container runs, at the root of the shipped source (`jobs.source`).
ENTRY_POINT = "sagemaker_entry_point.py"
DEFAULT_REGION = "us-east-1"
LOCAL_INSTANCE_TYPE = "local"
JOB_NAME_PREFIX = "deepfm"
# Open MPI's parameter that makes a rank waiting for its peers yield its core, and the option setting it, which
# an MPI job passes before the user's own (docs/levers.md: Horovod over MPI spins on the cores TensorFlow's
# threads fill; a `hybrid` job of 2 hosts of 1 core ran x1.37 faster with it).
MPI_YIELD_PARAMETER = "mpi_yield_when_idle"
MPI_YIELD_OPTIONS = "-mca %s 1" % MPI_YIELD_PARAMETER


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
    distribution: str = CHANNEL_DISTRIBUTION
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
      custom_mpi_options: extra `mpirun` options (MPI only); what the job
        passes is `mpi_options`.
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

    job_name: str = dataclasses.field(metadata=config_flags.metadata(
        "Training job name (default: %s-<time>)." % JOB_NAME_PREFIX))
    instance_count: int = config_flags.field(
        1, "Hosts (SageMaker: algo-1 .. algo-N; Kubernetes: training pods).")
    instance_type: str = LOCAL_INSTANCE_TYPE
    distribution: str = config_flags.field(
        DISTRIBUTION_NONE, "none, parameter_server, mpi (Horovod), or auto: the one deepfm.advise predicts "
        "fastest for the instances (measured on --auto_data).", choices=DISTRIBUTIONS + (DISTRIBUTION_AUTO,))
    processes_per_host: int = config_flags.field(1, "mpi: processes per host.")
    custom_mpi_options: str = config_flags.field(
        "", "mpi: extra mpirun options, after '%s' (waits that yield the core), which is left out where they "
        "set %s." % (MPI_YIELD_OPTIONS, MPI_YIELD_PARAMETER))
    input_mode: str = config_flags.field(
        FILE_MODE, "File or Pipe, for every channel without its own --channel_input_mode.", choices=INPUT_MODES)
    channels: Tuple[Channel, ...] = ()
    hyperparameters: Mapping[str, object] = dataclasses.field(default_factory=dict)
    checkpoints: bool = config_flags.field(
        True, "Configure a checkpoint location that a restarted job resumes from.")
    region: str = config_flags.field(DEFAULT_REGION, "AWS region.")
    source_dir: Optional[str] = config_flags.field(
        None, "A directory of your own files (an entry-point script, a model module) shipped at the root of "
        "the job's source, beside this project's packages.")
    entry_point: str = config_flags.field(
        ENTRY_POINT, "The script the container runs: this project's entry point, or a file of --source_dir "
        "(e.g. one that calls sagemaker_entry_point.main(model_fn=...)).")

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

    def mpi_options(self) -> str:
        """The `mpirun` options the job passes (MPI only, else ""): `custom_mpi_options` after `MPI_YIELD_OPTIONS`.

        The yielding waits are left out where `custom_mpi_options` sets
        `mpi_yield_when_idle` itself (`-mca mpi_yield_when_idle 0` turns
        them off).
        """
        if self.distribution != DISTRIBUTION_MPI:
            return ""
        if MPI_YIELD_PARAMETER in self.custom_mpi_options:
            return self.custom_mpi_options
        return " ".join(part for part in (MPI_YIELD_OPTIONS, self.custom_mpi_options) if part)

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
