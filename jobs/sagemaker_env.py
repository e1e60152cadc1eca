"""What a SageMaker training container tells a training script, as `deepfm.train` flags.

The entry point (`sagemaker_entry_point.py` at the root of the source
directory) runs `deepfm.train` with `training_args(os.environ, argv)`. The
toolkit passes every hyperparameter as `--name value`; the container's
environment supplies the rest:

| from the container                       | flag |
|------------------------------------------|------|
| `SM_CHANNEL_TRAIN` (File mode)           | `--train_data` |
| `SM_CHANNEL_VALIDATION` (File mode)      | `--val_data` |
| a `ShardedByS3Key` training channel      | `--s3_sharded` (S3 already split the files by host) |
| Pipe-mode channels in `SM_INPUT_DATA_CONFIG`: `train` or `train_<k>` | `--input_mode pipe --train_channels ...` (by `k`) |
| a Pipe-mode `validation` channel         | `--val_channel validation` |
| `SM_MODEL_DIR`                           | `--export_dir` (the SavedModel SageMaker uploads) |
| `SM_OUTPUT_DATA_DIR`                     | `--metrics_file` (`metrics.json` in it) |
| `checkpointconfig.json` (a checkpoint location) | `--model_dir` (its `LocalPath`, so a restarted spot job resumes), unless the hyperparameters give a local `model_dir` |
| `sagemaker_mpi_enabled` / `sagemaker_parameter_server_enabled` in `SM_FRAMEWORK_PARAMS` / `TF_CONFIG` | `--strategy horovod` / `ps` |
| `SM_NUM_CPUS`, this process's cores, processes per host | `--intra_op_threads` |

Hyperparameters win over all of these. `--name value` pairs are joined into
`--name=value`, which absl reads the same way for every flag type (`--flag
False` would otherwise set a boolean flag and leave `False` behind).

This module never imports TensorFlow.
"""

import json
import os
import re
from typing import Dict, List, Mapping, Optional, Sequence

from strategies import strategy_names as names

DEFAULT_BASE_DIR = "/opt/ml"
BASE_DIR_VARIABLE = "SAGEMAKER_BASE_DIR"
CHECKPOINT_CONFIG = "checkpointconfig.json"
CHECKPOINT_LOCAL_PATH_KEY = "LocalPath"
DEFAULT_CHECKPOINT_PATH = "/opt/ml/checkpoints"
METRICS_FILE = "metrics.json"
TRAIN_CHANNEL = "train"
VALIDATION_CHANNEL = "validation"
TRAIN_CHANNEL_PATTERN = re.compile(r"^train(?:_(\d+))?$")
PIPE_MODE = "Pipe"
SHARDED_BY_S3_KEY = "ShardedByS3Key"
MPI_ENABLED = "sagemaker_mpi_enabled"
MPI_PROCESSES_PER_HOST = "sagemaker_mpi_num_of_processes_per_host"
PS_ENABLED = "sagemaker_parameter_server_enabled"
STRATEGY_HOROVOD = names.HOROVOD
STRATEGY_PS = names.PS
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


def train_channels(input_data_config: Mapping[str, Mapping]) -> List[str]:
    """The training channels (`train`, or `train_<k>` ordered by `k`)."""
    found = []
    for name in input_data_config:
        match = TRAIN_CHANNEL_PATTERN.match(name)
        if match:
            found.append((int(match.group(1) or 0), name))
    return [name for _, name in sorted(found)]


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
    trains = train_channels(data_config)
    if trains and all(name in pipe for name in trains):
        derived += ["--input_mode=pipe", "--train_channels=%s" % ",".join(trains)]
        if VALIDATION_CHANNEL in pipe:
            derived.append("--val_channel=%s" % VALIDATION_CHANNEL)
        elif environ.get("SM_CHANNEL_VALIDATION"):
            derived.append("--val_data=%s" % environ["SM_CHANNEL_VALIDATION"])
    else:
        if VALIDATION_CHANNEL in pipe:
            raise ContractError("channel %r is in Pipe mode but the training channels %s are not: "
                                "use one input mode for both" % (VALIDATION_CHANNEL, trains))
        if environ.get("SM_CHANNEL_TRAIN"):
            derived.append("--train_data=%s" % environ["SM_CHANNEL_TRAIN"])
        if environ.get("SM_CHANNEL_VALIDATION"):
            derived.append("--val_data=%s" % environ["SM_CHANNEL_VALIDATION"])
    if any(data_config[name].get("S3DistributionType") == SHARDED_BY_S3_KEY for name in trains):
        derived.append("--s3_sharded")
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

    if "strategy" not in given:
        if framework.get(MPI_ENABLED) or environ.get("OMPI_COMM_WORLD_SIZE"):
            derived.append("--strategy=%s" % STRATEGY_HOROVOD)
        elif framework.get(PS_ENABLED) and '"ps"' in environ.get("TF_CONFIG", ""):
            derived.append("--strategy=%s" % STRATEGY_PS)
    if "intra_op_threads" not in given:
        per_host = int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or framework.get(MPI_PROCESSES_PER_HOST) or 1)
        derived.append("--intra_op_threads=%d" % max(1, usable_cores(environ) // max(1, per_host)))
    return derived + user
