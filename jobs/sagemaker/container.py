"""What SageMaker writes into a training container for a `JobSpec`.

`hyperparameters.json` (encoded as the SageMaker Python SDK encodes it, with
the toolkit's own entries for the distribution), `resourceconfig.json`,
`inputdataconfig.json` and `checkpointconfig.json`: what `jobs.sagemaker.local`
writes on each emulated host and what SageMaker writes for a submitted job.
This module never imports TensorFlow or the SageMaker SDK.
"""

import json
from typing import Dict, Optional

from jobs.spec import DISTRIBUTION_MPI, DISTRIBUTION_PS, JobSpec

TRAINING_MODULE = "sagemaker_tensorflow_container.training:main"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
CONTAINER_LOG_LEVEL = 20
DEFAULT_INTERFACE = "eth0"
INSTANCE_GROUP = "homogeneousCluster"


def distribution_hyperparameters(spec: JobSpec) -> Dict[str, object]:
    """The toolkit's hyperparameters for the job's distribution, as the SDK sets them."""
    if spec.distribution == DISTRIBUTION_PS:
        return {"sagemaker_parameter_server_enabled": True}
    if spec.distribution == DISTRIBUTION_MPI:
        return {"sagemaker_mpi_enabled": True,
                "sagemaker_mpi_num_of_processes_per_host": spec.processes_per_host,
                "sagemaker_mpi_custom_mpi_options": spec.mpi_options()}
    return {}


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
    values.update(distribution_hyperparameters(spec))
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
