"""The job flags that `deepfm.sagemaker` and `deepfm.kubernetes` share, parsed into a `JobSpec`.

One training job is described by the same arguments wherever it runs:
`--instance_count` hosts, `--distribution` (`none`, `parameter_server`,
`mpi` with `--processes_per_host`, or `auto`), `--channel NAME=PATH`
(repeatable), `--input_mode`, `--distribution_type` and the
hyperparameters after `--`. `define_job_flags` defines them once, those of
`JobSpec`'s fields from the fields themselves; `parse_spec` turns them into
a `jobs.spec.JobSpec`.
"""

import dataclasses
import os
from typing import Optional, Sequence, Tuple

from absl import flags

from cli import config_flags
from jobs import auto_distribution
from jobs import spec as spec_lib

# The flags this module defines belong to the program that asked for them (their key flags, which its
# --help lists), as if it had defined them itself.
flags.disclaim_key_flags()

CHANNEL_SEPARATOR = "="
TRAIN_CHANNEL_PREFIX = "train"


@dataclasses.dataclass(frozen=True)
class ChannelOptions:
    """The job flags a `JobSpec` holds in another form: its channels as typed, and `--auto_data`."""

    channel: Tuple[str, ...] = config_flags.field(
        (), "NAME=PATH; repeatable (where PATH lives depends on the command).", repeated=True)
    channel_input_mode: Tuple[str, ...] = config_flags.field(
        (), "NAME=File|Pipe: that channel's own input mode (e.g. --input_mode Pipe --channel_input_mode "
            "validation=File); repeatable.", repeated=True)
    distribution_type: str = config_flags.field(
        spec_lib.CHANNEL_DISTRIBUTION, "S3 distribution of the training channels (train, train_<k>); others are "
                                       "replicated.", choices=spec_lib.S3_DISTRIBUTIONS)
    auto_data: Optional[str] = config_flags.field(
        None, "--distribution auto: a local dataset root to measure a step on (default: the train channel's "
              "directory, where it is one on this machine).")


def define_job_flags() -> None:
    """Defines the flags of a job (the program's own flags are defined by the program).

    Generated from `JobSpec`'s fields and `ChannelOptions`' (their defaults
    are the fields').
    """
    config_flags.define_flags([spec_lib.JobSpec, ChannelOptions])


def _name_value_pairs(flag: str, values: Sequence[str], what: str) -> dict:
    pairs = {}
    for value in values:
        name, separator, item = value.partition(CHANNEL_SEPARATOR)
        if not separator or not name or not item:
            raise ValueError("--%s %r must be NAME=%s" % (flag, value, what))
        if name in pairs:
            raise ValueError("--%s: channel %s is given more than once" % (flag, name))
        pairs[name] = item
    return pairs


def parse_channels(values: Sequence[str], distribution_type: str,
                   input_modes: Sequence[str] = ()) -> Tuple[spec_lib.Channel, ...]:
    """`--channel NAME=PATH` values as `Channel`s; `distribution_type` applies to training channels.

    Args:
      values: the `--channel` values.
      distribution_type: the S3 distribution of the training channels.
      input_modes: `--channel_input_mode NAME=MODE` values.

    Raises:
      ValueError: a value without `=`, a bad channel name or mode, or an
        input mode for a channel that is not given.
    """
    modes = _name_value_pairs("channel_input_mode", input_modes, "File|Pipe")
    channels = []
    for value in values:
        name, separator, uri = value.partition(CHANNEL_SEPARATOR)
        if not separator or not name or not uri:
            raise ValueError("--channel %r must be NAME=PATH" % value)
        distribution = distribution_type if name.startswith(TRAIN_CHANNEL_PREFIX) else spec_lib.FULLY_REPLICATED
        channels.append(spec_lib.Channel(name=name, uri=uri, distribution=distribution,
                                              input_mode=modes.pop(name, None)))
    if modes:
        raise ValueError("--channel_input_mode names channel(s) %s, which no --channel gives"
                         % ", ".join(sorted(modes)))
    return tuple(channels)


def parse_spec(flag_values, hyperparameter_args: Sequence[str], instance_type: str,
               choice: Optional[auto_distribution.Choice] = None) -> spec_lib.JobSpec:
    """The `JobSpec` of the parsed flags and the arguments after `--`.

    Args:
      flag_values: the parsed flags.
      hyperparameter_args: the arguments after `--`.
      instance_type: the instances' type.
      choice: what `--distribution auto` resolved to (its distribution
        replaces the flag's; its hyperparameters are added unless given).

    Raises:
      ValueError: a bad flag or hyperparameter, named.
    """
    f = flag_values
    hyperparameters = spec_lib.parse_hyperparameters(hyperparameter_args)
    distribution, processes_per_host = f.distribution, f.processes_per_host
    if choice is not None:
        distribution, processes_per_host = choice.distribution, choice.processes_per_host
        hyperparameters = dict(choice.hyperparameters, **hyperparameters)
    values = config_flags.values(spec_lib.JobSpec, f)
    values.update(job_name=f.job_name or spec_lib.default_job_name(), instance_type=instance_type,
                  distribution=distribution, processes_per_host=processes_per_host,
                  channels=parse_channels(f.channel, f.distribution_type, f.channel_input_mode),
                  hyperparameters=hyperparameters)
    return spec_lib.JobSpec(**values)


def auto_choice(flag_values, cores_per_host: int, link_gbps: float, data: Optional[str] = None,
                vcpus_per_host: Optional[int] = None) -> auto_distribution.Choice:
    """Resolves `--distribution auto` for hosts of `cores_per_host` cores and `link_gbps` links.

    Args:
      flag_values: the parsed flags (`instance_count`, `auto_data`,
        `channel`, `processes_per_host` are read).
      cores_per_host: each host's physical cores.
      link_gbps: each host's link in Gbit/s (`cost_model.DEFAULT_UNLIMITED_GBPS`
        for a link that does not limit).
      data: the dataset to measure on when `--auto_data` is unset (default:
        the train channel's directory, if it is one on this machine).
      vcpus_per_host: each host's vCPUs (default: its cores).

    Raises:
      ValueError: as `auto_distribution.choose`, or `--processes_per_host` given.
    """
    f = flag_values
    if f.processes_per_host != 1:
        raise ValueError("--processes_per_host %d and --distribution auto: auto chooses the processes per host"
                         % f.processes_per_host)
    data = f.auto_data or data or local_train_directory(f.channel)
    return auto_distribution.choose(data, f.instance_count, cores_per_host, link_gbps,
                                    vcpus_per_host=vcpus_per_host)


def local_train_directory(channel_values: Sequence[str]) -> Optional[str]:
    """The first training channel's path when it is a directory on this machine, else None."""
    for value in channel_values:
        name, _, uri = value.partition(CHANNEL_SEPARATOR)
        if name.startswith(TRAIN_CHANNEL_PREFIX) and os.path.isdir(uri):
            return uri
    return None
