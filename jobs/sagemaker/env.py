"""What a SageMaker training container tells a training script, as `deepfm.train` flags.

The entry point (`sagemaker_entry_point.py` at the root of the source
directory) runs `deepfm.train` with `training_args(os.environ, argv)`. The
toolkit passes every hyperparameter as `--name value`; the container's
environment supplies the rest (what the container has -> the flag):

* the training channels' directories (File mode): `train`, `train_<k>`, or
  the AWS samples' `training`, `training_<k>` -> `--train_data`;
* the validation channel's directory (File mode): `validation`, or `eval`
  -> `--val_data`;
* a `metadata.json` in a File-mode channel (training channels first, then
  validation, then the others) -> `--feature_size`, `--field_size`;
* a `ShardedByS3Key` training channel -> `--s3_sharded` (S3 already split
  the files by host);
* Pipe-mode training channels in `SM_INPUT_DATA_CONFIG` -> `--input_mode
  pipe --train_channels ...` (by `k`);
* a Pipe-mode validation channel -> `--val_channel <name>`;
* `SM_MODEL_DIR` -> `--export_dir` (the SavedModel SageMaker uploads);
* `SM_OUTPUT_DATA_DIR` -> `--metrics_file` (`metrics.json` in it);
* `checkpointconfig.json` (a checkpoint location) -> `--model_dir` (its
  `LocalPath`, so a restarted spot job resumes), unless the hyperparameters
  give a local `model_dir`; without a checkpoint location,
  `<base dir>/checkpoints`, kept in the container only;
* `sagemaker_mpi_enabled` / `sagemaker_parameter_server_enabled` in
  `SM_FRAMEWORK_PARAMS` / `TF_CONFIG` -> `--strategy horovod` / `ps`, the
  strategy its distribution runs by default
  (`strategies.strategy_names.default_of`);
* `SM_NUM_CPUS`, this process's cores, processes per host ->
  `--intra_op_threads`.

A channel's directory is `SM_CHANNEL_<NAME>`; the channels are those of
`SM_INPUT_DATA_CONFIG`, `SM_CHANNELS` and the `SM_CHANNEL_*` variables.
The metadata found in a channel lets a job whose training channel has none
(Pipe mode, or a `ShardedByS3Key` host that did not get the training
folder's `metadata.json`) know the dataset's sizes, e.g. from a File-mode
validation folder. Hyperparameters win over all of these. `--name value` pairs are joined into
`--name=value`, which absl reads the same way for every flag type (`--flag
False` would otherwise set a boolean flag and leave `False` behind).

This module never imports TensorFlow.
"""

import json
import os
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from input_pipeline import schema
from strategies import cluster, strategy_names

DEFAULT_BASE_DIR = "/opt/ml"
BASE_DIR_VARIABLE = "SAGEMAKER_BASE_DIR"
CHECKPOINT_CONFIG = "checkpointconfig.json"
CHECKPOINT_LOCAL_PATH_KEY = "LocalPath"
DEFAULT_CHECKPOINT_PATH = "/opt/ml/checkpoints"
METRICS_FILE = "metrics.json"
# Training channels: train, train_<k>, or the AWS samples' training, training_<k>.
TRAIN_CHANNEL_PATTERN = re.compile(r"^(train|training)(?:_(\d+))?$")
VALIDATION_CHANNELS = ("validation", "eval")
CHANNEL_VARIABLE_PREFIX = "SM_CHANNEL_"
# Without a checkpoint location, the checkpoints stay in the container (under the base directory).
LOCAL_MODEL_SUBDIR = "checkpoints"
SIZE_FLAGS = ("feature_size", "field_size")
PIPE_MODE = "Pipe"
SHARDED_BY_S3_KEY = "ShardedByS3Key"
MPI_ENABLED = "sagemaker_mpi_enabled"
MPI_PROCESSES_PER_HOST = "sagemaker_mpi_num_of_processes_per_host"
PS_ENABLED = "sagemaker_parameter_server_enabled"
S3_SCHEME = "s3://"


class ContractError(ValueError):
    """The container's environment and the hyperparameters do not fit together."""


def normalize_args(args: Sequence[str]) -> List[str]:
    """Joins the toolkit's `--name value` pairs into `--name=value`.

    Arguments already in `--name=value` form, and flags followed by another
    flag, are kept as they are.
    """
    out: List[str] = []
    index = 0
    args = list(args)
    while index < len(args):
        arg = args[index]
        following = args[index + 1] if index + 1 < len(args) else None
        if (arg.startswith("--") and "=" not in arg and following is not None
                and not following.startswith("--")):
            out.append("%s=%s" % (arg, following))
            index += 2
        else:
            out.append(arg)
            index += 1
    return out


def given_flags(args: Sequence[str]) -> Dict[str, str]:
    """`name -> value` of the `--name=value` flags among `args` (after `normalize_args`)."""
    found = {}
    for arg in args:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            found[name] = value
    return found


def _json(environ: Mapping[str, str], name: str, default):
    text = environ.get(name)
    if not text:
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ContractError("%s is not valid JSON (%s): %r" % (name, e, text)) from e


def _names_parameter_servers(tf_config) -> bool:
    """Whether a parsed `TF_CONFIG` lists one parameter server or more in its cluster."""
    jobs = tf_config.get("cluster") if isinstance(tf_config, dict) else None
    return isinstance(jobs, dict) and bool(jobs.get(cluster.PS))


def channel_names(environ: Mapping[str, str], input_data_config: Mapping[str, Mapping]) -> List[str]:
    """Every channel of the job: in `SM_INPUT_DATA_CONFIG`, `SM_CHANNELS` or an `SM_CHANNEL_*` variable."""
    names = set(input_data_config) | set(_json(environ, "SM_CHANNELS", []))
    names |= {key[len(CHANNEL_VARIABLE_PREFIX):].lower() for key in environ
              if key.startswith(CHANNEL_VARIABLE_PREFIX)}
    return sorted(names)


def channel_dir(environ: Mapping[str, str], name: str) -> Optional[str]:
    """The directory of a channel (`SM_CHANNEL_<NAME>`), if the container has one."""
    return environ.get(CHANNEL_VARIABLE_PREFIX + name.upper()) or None


def train_channels(names: Sequence[str]) -> List[str]:
    """The training channels (`train` or `training`, or `..._<k>` ordered by `k`).

    Raises:
      ContractError: both spellings are used.
    """
    found = []
    for name in names:
        match = TRAIN_CHANNEL_PATTERN.match(name)
        if match:
            found.append((match.group(1), int(match.group(2) or 0), name))
    if len({base for base, _, _ in found}) > 1:
        raise ContractError("channels %s: the training data is in channels named train... or training..., "
                            "not both" % ", ".join(sorted(name for _, _, name in found)))
    return [name for _, _, name in sorted(found)]


def validation_channel(names: Sequence[str]) -> Optional[str]:
    """The validation channel (`validation` or `eval`), if any.

    Raises:
      ContractError: both are given.
    """
    found = [name for name in VALIDATION_CHANNELS if name in names]
    if len(found) > 1:
        raise ContractError("channels %s both name the validation data: use one" % " and ".join(found))
    return found[0] if found else None


def dataset_sizes(environ: Mapping[str, str], ordered: Sequence[str]) -> Optional[Tuple[int, int, str]]:
    """`(feature_size, field_size, path)` of the first `metadata.json` among the channels' directories.

    Raises:
      ContractError: two channels hold the metadata of datasets of other sizes.
    """
    found = None
    for name in ordered:
        directory = channel_dir(environ, name)
        path = os.path.join(directory, schema.METADATA_FILE) if directory else None
        if not path or not os.path.isfile(path):
            continue
        try:
            metadata = schema.DatasetMetadata.read(path)
        except ValueError as e:
            raise ContractError("channel %s: %s" % (name, e)) from e
        sizes = (metadata.feature_size, metadata.field_size, path)
        if found is None:
            found = sizes
        elif sizes[:2] != found[:2]:
            raise ContractError("%s (feature_size %d, field_size %d) and %s (feature_size %d, field_size %d) "
                                "describe different datasets: give each channel folders of one dataset"
                                % (found[2], found[0], found[1], path, sizes[0], sizes[1]))
    return found


def checkpoint_path(base_dir: str) -> Optional[str]:
    """The checkpoint location's local path when the job has one configured, else None."""
    path = os.path.join(base_dir, "input", "config", CHECKPOINT_CONFIG)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise ContractError("%s is not valid JSON: %s" % (path, e)) from e
    return config.get(CHECKPOINT_LOCAL_PATH_KEY) or DEFAULT_CHECKPOINT_PATH


def usable_cores(environ: Mapping[str, str]) -> int:
    """Cores this process may use: `SM_NUM_CPUS`, bounded by its CPU affinity."""
    cores = len(os.sched_getaffinity(0))
    declared = environ.get("SM_NUM_CPUS")
    if declared and declared.isdigit() and int(declared) > 0:
        cores = min(cores, int(declared))
    return cores


def training_args(environ: Mapping[str, str], args: Sequence[str]) -> List[str]:
    """The `deepfm.train` command line of a SageMaker training script.

    Args:
      environ: the container's environment.
      args: the hyperparameters as the toolkit passes them.

    Returns:
      Flags derived from the environment, then the hyperparameters (so that
      a hyperparameter wins).

    Raises:
      ContractError: Pipe-mode validation without Pipe-mode training, an
        `s3://` model_dir with no checkpoint location, or bad JSON in the
        environment.
    """
    user = normalize_args(args)
    given = given_flags(user)
    derived: List[str] = []
    base_dir = environ.get(BASE_DIR_VARIABLE, DEFAULT_BASE_DIR)
    data_config = _json(environ, "SM_INPUT_DATA_CONFIG", {})
    framework = _json(environ, "SM_FRAMEWORK_PARAMS", {})

    pipe = {name for name, config in data_config.items() if config.get("TrainingInputMode") == PIPE_MODE}
    names = channel_names(environ, data_config)
    trains = train_channels(names)
    validation = validation_channel(names)
    if trains and all(name in pipe for name in trains):
        derived += ["--input_mode=pipe", "--train_channels=%s" % ",".join(trains)]
        if validation in pipe:
            derived.append("--val_channel=%s" % validation)
        elif validation and channel_dir(environ, validation):
            derived.append("--val_data=%s" % channel_dir(environ, validation))
    else:
        if validation in pipe:
            raise ContractError("channel %r is in Pipe mode but the training channels %s are not: "
                                "use one input mode for both" % (validation, trains))
        train_dirs = [found for found in (channel_dir(environ, name) for name in trains) if found]
        if train_dirs:
            derived.append("--train_data=%s" % ",".join(train_dirs))
        if validation and channel_dir(environ, validation):
            derived.append("--val_data=%s" % channel_dir(environ, validation))
    if any(data_config.get(name, {}).get("S3DistributionType") == SHARDED_BY_S3_KEY for name in trains):
        derived.append("--s3_sharded")
    file_channels = [name for name in trains + [validation] + sorted(set(names) - set(trains) - {validation})
                     if name and name not in pipe]
    sizes = dataset_sizes(environ, file_channels)
    if sizes is not None:
        derived += ["--%s=%d" % (flag, value) for flag, value in zip(SIZE_FLAGS, sizes[:2]) if flag not in given]
    if environ.get("SM_MODEL_DIR"):
        derived.append("--export_dir=%s" % environ["SM_MODEL_DIR"])
    if environ.get("SM_OUTPUT_DATA_DIR"):
        derived.append("--metrics_file=%s" % os.path.join(environ["SM_OUTPUT_DATA_DIR"], METRICS_FILE))

    checkpoints = checkpoint_path(base_dir)
    model_dir = given.get("model_dir")
    if checkpoints and (model_dir is None or model_dir.startswith(S3_SCHEME)):
        user = [arg for arg in user if not arg.startswith("--model_dir=")]
        derived.append("--model_dir=%s" % checkpoints)
    elif model_dir is not None and model_dir.startswith(S3_SCHEME):
        raise ContractError(
            "--model_dir %r is on S3, which TensorFlow 2.14 cannot write without tensorflow-io; "
            "configure a checkpoint location (checkpoint_s3_uri), whose local path "
            "/opt/ml/checkpoints SageMaker syncs with S3" % model_dir)
    elif model_dir is None:
        derived.append("--model_dir=%s" % os.path.join(base_dir, LOCAL_MODEL_SUBDIR))

    if "strategy" not in given:
        if framework.get(MPI_ENABLED) or environ.get("OMPI_COMM_WORLD_SIZE"):
            derived.append("--strategy=%s" % strategy_names.default_of(strategy_names.DISTRIBUTION_MPI))
        elif framework.get(PS_ENABLED) and _names_parameter_servers(_json(environ, cluster.TF_CONFIG_VARIABLE, {})):
            derived.append("--strategy=%s" % strategy_names.default_of(strategy_names.DISTRIBUTION_PS))
    if "intra_op_threads" not in given:
        per_host = int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or framework.get(MPI_PROCESSES_PER_HOST) or 1)
        derived.append("--intra_op_threads=%d" % max(1, usable_cores(environ) // max(1, per_host)))
    return derived + user
