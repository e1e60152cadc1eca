"""Tests of jobs.sagemaker.container: what SageMaker writes into a training container for a job."""

import json

import tensorflow as tf
from absl.testing import parameterized

from jobs import spec as spec_lib
from jobs.sagemaker import container as container_lib


def spec(**kwargs):
    kwargs.setdefault("job_name", "test-job")
    return spec_lib.JobSpec(**kwargs)


class ContainerFilesTest(parameterized.TestCase):

    def test_encoding_is_the_sdks_json_per_value_and_the_toolkit_decodes_it(self):
        job = spec(distribution="mpi", processes_per_host=2, hyperparameters={"num_epochs": 2, "strategy": "horovod"})
        encoded = container_lib.encoded_hyperparameters(job, "s3://b/src.tar.gz", "/opt/ml/checkpoints")
        self.assertEqual("2", encoded["num_epochs"])
        self.assertEqual('"horovod"', encoded["strategy"])
        self.assertEqual("true", encoded["sagemaker_mpi_enabled"])
        self.assertEqual("2", encoded["sagemaker_mpi_num_of_processes_per_host"])
        self.assertEqual('"sagemaker_entry_point.py"', encoded["sagemaker_program"])
        self.assertEqual('"/opt/ml/checkpoints"', encoded["model_dir"])
        from sagemaker_training import mapping  # the toolkit's own decoding
        decoded = {key: json.loads(value) for key, value in encoded.items()}
        user = {key: value for key, value in decoded.items() if not key.startswith("sagemaker_")}
        self.assertEqual(["--model_dir", "/opt/ml/checkpoints", "--num_epochs", "2", "--strategy", "horovod"],
                         mapping.to_cmd_args(user))

    def test_config_files_as_sagemaker_writes_them(self):
        job = spec(instance_count=3, input_mode="Pipe", channels=(
            spec_lib.Channel("train", "a", spec_lib.SHARDED_BY_S3_KEY), spec_lib.Channel("validation", "b")))
        resource = container_lib.resource_config(job, "algo-2")
        self.assertEqual("algo-2", resource["current_host"])
        self.assertEqual(["algo-1", "algo-2", "algo-3"], resource["hosts"])
        self.assertEqual("eth0", resource["network_interface_name"])
        data = container_lib.input_data_config(job)
        self.assertEqual({"TrainingInputMode": "Pipe", "S3DistributionType": "ShardedByS3Key",
                          "RecordWrapperType": "None"}, data["train"])
        self.assertEqual("FullyReplicated", data["validation"]["S3DistributionType"])

    @parameterized.named_parameters(
        ("none", dict(), {}),
        ("parameter_server", dict(distribution="parameter_server"), {"sagemaker_parameter_server_enabled": True}),
        ("mpi", dict(distribution="mpi", processes_per_host=2, custom_mpi_options="-x A"),
         {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2,
          "sagemaker_mpi_custom_mpi_options": "-mca mpi_yield_when_idle 1 -x A"}),
        # Options that set the waits themselves are passed as they are.
        ("mpi_spinning", dict(distribution="mpi", custom_mpi_options="-mca mpi_yield_when_idle 0"),
         {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1,
          "sagemaker_mpi_custom_mpi_options": "-mca mpi_yield_when_idle 0"}),
        ("mpi_default", dict(distribution="mpi"),
         {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 1,
          "sagemaker_mpi_custom_mpi_options": "-mca mpi_yield_when_idle 1"}),
    )
    def test_the_toolkits_distribution_hyperparameters(self, kwargs, expected):
        self.assertEqual(expected, container_lib.distribution_hyperparameters(spec(**kwargs)))

    def test_checkpoint_files(self):
        self.assertEqual("/opt/ml/checkpoints", container_lib.model_dir_for(spec()))
        self.assertIsNone(container_lib.model_dir_for(spec(checkpoints=False)))
        self.assertEqual({"LocalPath": "/opt/ml/checkpoints", "S3Uri": "s3://b/c"},
                         container_lib.checkpoint_config("s3://b/c"))


if __name__ == "__main__":
    tf.test.main()
