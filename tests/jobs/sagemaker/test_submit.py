"""Tests of `deepfm.sagemaker submit --dry_run`: the CreateTrainingJob and CreateHyperParameterTuningJob requests.

The request is built by the real SageMaker Python SDK and checked by
botocore against the SageMaker API model (botocore's `Stubber` answers it);
nothing is contacted.
"""

import json

import tensorflow as tf
from absl.testing import parameterized

from jobs import spec as spec_lib
from jobs.sagemaker import container as container_lib
from jobs.sagemaker import metrics as sagemaker_metrics
from tests import command_line

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
JOB = "deepfm-dry-run"


def sdk_missing():
    try:
        import sagemaker  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


class SubmitDryRunTest(parameterized.TestCase, tf.test.TestCase):

    def setUp(self):
        super().setUp()
        reason = sdk_missing()
        if reason:
            self.skipTest("the SageMaker Python SDK (the 'sdk' extra) is not installed: %s" % reason)

    def dry_run(self, *args, hyperparameters=("--num_epochs", "2"), with_stderr=False):
        argv = command_line.python_module(
            "deepfm.sagemaker", "submit", "--dry_run", "--job_name", JOB, "--role", ROLE,
            "--output_path", "s3://bucket/jobs", "--channel", "train=s3://bucket/data/train",
            "--channel", "validation=s3://bucket/data/validation", *args, "--", *hyperparameters)
        proc = command_line.run(argv, self.get_temp_dir(), env=command_line.NO_AWS_CREDENTIALS, timeout=180)
        self.assertEqual(0, proc.returncode, command_line.describe(argv, proc))
        return (json.loads(proc.stdout), proc.stderr) if with_stderr else json.loads(proc.stdout)

    @parameterized.named_parameters(
        ("none_file", [], "File", {}),
        ("parameter_server_file", ["--instance_count", "2", "--distribution", "parameter_server"], "File",
         {"sagemaker_parameter_server_enabled": "true"}),
        ("mpi_pipe_sharded", ["--instance_count", "2", "--distribution", "mpi", "--processes_per_host", "2",
                              "--input_mode", "Pipe", "--distribution_type", "ShardedByS3Key",
                              "--custom_mpi_options", "-x HOROVOD_FUSION_THRESHOLD=0"], "Pipe",
         {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "2",
          "sagemaker_mpi_custom_mpi_options": '"-mca mpi_yield_when_idle 1 -x HOROVOD_FUSION_THRESHOLD=0"'}),
    )
    def test_request(self, args, input_mode, distribution_hyperparameters):
        request = self.dry_run("--checkpoint_s3_uri", "s3://bucket/ckpt", *args)
        instances = 2 if "--instance_count" in args else 1
        self.assertEqual(JOB, request["TrainingJobName"])
        self.assertEqual(ROLE, request["RoleArn"])
        self.assertEqual(input_mode, request["AlgorithmSpecification"]["TrainingInputMode"])
        self.assertRegex(request["AlgorithmSpecification"]["TrainingImage"], r"tensorflow-training:2\.14-cpu-py310$")
        self.assertEqual({"InstanceCount": instances, "InstanceType": "ml.c5.xlarge", "VolumeSizeInGB": 30},
                         request["ResourceConfig"])
        self.assertEqual({"S3OutputPath": "s3://bucket/jobs"}, request["OutputDataConfig"])
        self.assertEqual({"LocalPath": "/opt/ml/checkpoints", "S3Uri": "s3://bucket/ckpt"}, request["CheckpointConfig"])
        channels = {channel["ChannelName"]: channel for channel in request["InputDataConfig"]}
        self.assertEqual({"train", "validation"}, set(channels))
        sharded = "ShardedByS3Key" if "ShardedByS3Key" in args else "FullyReplicated"
        self.assertEqual({"S3DataSource": {"S3DataDistributionType": sharded, "S3DataType": "S3Prefix",
                                           "S3Uri": "s3://bucket/data/train"}}, channels["train"]["DataSource"])
        self.assertEqual("FullyReplicated",
                         channels["validation"]["DataSource"]["S3DataSource"]["S3DataDistributionType"])
        self.assertEqual(input_mode, channels["train"]["InputMode"])
        expected = {
            "num_epochs": "2", "model_dir": '"/opt/ml/checkpoints"', "sagemaker_container_log_level": "20",
            "sagemaker_job_name": '"%s"' % JOB, "sagemaker_program": '"sagemaker_entry_point.py"',
            "sagemaker_region": '"us-east-1"',
            "sagemaker_submit_directory": '"s3://bucket/jobs/%s/source/sourcedir.tar.gz"' % JOB,
        }
        expected.update(distribution_hyperparameters)
        self.assertEqual(expected, request["HyperParameters"])
        self.assertNotIn("EnableManagedSpotTraining", request)
        self.assertEqual(list(sagemaker_metrics.METRIC_DEFINITIONS),
                         request["AlgorithmSpecification"]["MetricDefinitions"])

    def test_checkpoints_by_default_under_the_output_path_and_none_when_told(self):
        request, err = self.dry_run(with_stderr=True)
        location = "s3://bucket/jobs/%s/checkpoints" % JOB
        self.assertEqual({"LocalPath": "/opt/ml/checkpoints", "S3Uri": location}, request["CheckpointConfig"])
        self.assertEqual('"/opt/ml/checkpoints"', request["HyperParameters"]["model_dir"])
        self.assertIn("checkpoints: %s (--checkpoint_s3_uri to choose another, --nocheckpoints for none)" % location,
                      err)
        without = self.dry_run("--nocheckpoints")
        self.assertNotIn("CheckpointConfig", without)
        self.assertNotIn("model_dir", without["HyperParameters"])

    def test_a_channel_in_its_own_input_mode(self):
        request = self.dry_run("--input_mode", "Pipe", "--channel_input_mode", "validation=File")
        modes = {channel["ChannelName"]: channel["InputMode"] for channel in request["InputDataConfig"]}
        self.assertEqual({"train": "Pipe", "validation": "File"}, modes)
        self.assertEqual("Pipe", request["AlgorithmSpecification"]["TrainingInputMode"])

    def test_tuning_job_request(self):
        request = self.dry_run("--tune", "learning_rate=0.0001..0.1:log", "--tune", "embedding_size=4..16",
                               "--tune", "deep_layers=64,32|128,64", "--tuning_max_jobs", "6",
                               "--tuning_max_parallel_jobs", "3", hyperparameters=("--num_epochs", "2", "--batch_norm"))
        self.assertEqual(JOB, request["HyperParameterTuningJobName"])
        config = request["HyperParameterTuningJobConfig"]
        self.assertEqual({"MetricName": "validation:auc", "Type": "Maximize"},
                         config["HyperParameterTuningJobObjective"])
        self.assertEqual({"MaxNumberOfTrainingJobs": 6, "MaxParallelTrainingJobs": 3}, config["ResourceLimits"])
        self.assertEqual({
            "ContinuousParameterRanges": [{"Name": "learning_rate", "MinValue": "0.0001", "MaxValue": "0.1",
                                           "ScalingType": "Logarithmic"}],
            "IntegerParameterRanges": [{"Name": "embedding_size", "MinValue": "4", "MaxValue": "16",
                                        "ScalingType": "Auto"}],
            # Categories are JSON-encoded, as the SDK encodes a framework estimator's hyperparameters.
            "CategoricalParameterRanges": [{"Name": "deep_layers", "Values": ['"64,32"', '"128,64"']}],
        }, config["ParameterRanges"])
        definition = request["TrainingJobDefinition"]
        self.assertEqual(list(sagemaker_metrics.METRIC_DEFINITIONS),
                         definition["AlgorithmSpecification"]["MetricDefinitions"])
        static = definition["StaticHyperParameters"]
        self.assertEqual(("2", "true"), (static["num_epochs"], static["batch_norm"]))
        for name in ("learning_rate", "embedding_size", "deep_layers", "model_dir"):
            self.assertNotIn(name, static)
        # The training jobs of a tuning job must not resume from each other's checkpoints.
        self.assertNotIn("CheckpointConfig", definition)
        self.assertEqual(["train", "validation"], [c["ChannelName"] for c in definition["InputDataConfig"]])

    def test_spot_request_and_limits(self):
        request = self.dry_run("--use_spot", "--max_run", "3600", "--max_wait", "7200",
                               "--instance_type", "ml.c5.18xlarge")
        self.assertTrue(request["EnableManagedSpotTraining"])
        self.assertEqual({"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}, request["StoppingCondition"])
        self.assertEqual("ml.c5.18xlarge", request["ResourceConfig"]["InstanceType"])

    def test_same_hyperparameters_as_the_local_job(self):
        request = self.dry_run("--instance_count", "2", "--distribution", "mpi",
                               hyperparameters=("--num_epochs", "2", "--deep_layers", "64,32", "--batch_norm"))
        spec = spec_lib.JobSpec(job_name=JOB, instance_count=2, distribution="mpi",
                                     hyperparameters=spec_lib.parse_hyperparameters(
                                         ["--num_epochs", "2", "--deep_layers", "64,32", "--batch_norm"]))
        local = container_lib.encoded_hyperparameters(spec, "/opt/ml/source/sourcedir.tar.gz",
                                                      container_lib.model_dir_for(spec))
        submitted = dict(request["HyperParameters"])
        self.assertEqual(submitted.pop("sagemaker_submit_directory"),
                         '"s3://bucket/jobs/%s/source/sourcedir.tar.gz"' % JOB)
        local.pop("sagemaker_submit_directory")
        self.assertEqual(local, submitted)

    @parameterized.named_parameters(
        ("local_channel", ["--channel", "test=data/x"], "a submitted job reads its channels from S3"),
        ("role", ["--role", "SageMakerRole"], "--role must be an IAM role ARN"),
        ("spot_without_checkpoints", ["--use_spot", "--nocheckpoints"], "--use_spot needs checkpoints"),
        ("checkpoints_both_ways", ["--checkpoint_s3_uri", "s3://b/c", "--nocheckpoints"], "choose one"),
        ("tuning_range", ["--tune", "learning_rate=0.1..0.01"], "--tune learning_rate: MIN must be below MAX"),
        ("tuning_log_range", ["--tune", "learning_rate=0..0.1:log"], "a logarithmic range must be above 0"),
        ("tuning_not_a_range", ["--tune", "learning_rate"], "must be NAME=MIN..MAX[:log] or NAME=A|B|..."),
        ("tuning_and_hyperparameter", ["--tune", "num_epochs=1..3", "--", "--num_epochs", "2"],
         "num_epochs: given both as a hyperparameter and as a --tune range"),
        ("tuning_with_checkpoints", ["--tune", "num_epochs=1..3", "--checkpoint_s3_uri", "s3://b/c"],
         "would share one checkpoint location"),
        ("tuning_job_name", ["--tune", "num_epochs=1..3", "--job_name", "x" * 33], "takes 1-32 letters"),
        ("tuning_parallel", ["--tune", "num_epochs=1..3", "--tuning_max_jobs", "2", "--tuning_max_parallel_jobs",
                             "3"], "--tuning_max_parallel_jobs must be in [1, --tuning_max_jobs 2]"),
    )
    def test_bad_submissions_are_refused_before_anything_is_built(self, args, message):
        argv = command_line.python_module("deepfm.sagemaker", "submit", "--dry_run", "--role", ROLE,
                                          "--output_path", "s3://bucket/jobs", *args)
        proc = command_line.run(argv, self.get_temp_dir(), env=command_line.NO_AWS_CREDENTIALS, timeout=120)
        self.assertNotEqual(0, proc.returncode)
        self.assertIn(message, proc.stderr)


if __name__ == "__main__":
    tf.test.main()
