"""`examples/submit_with_sdk.py`: the SageMaker SDK builds the job; botocore checks the request, nothing is sent.

The SDK's SageMaker client is stubbed by botocore's `Stubber`, which
validates the `CreateTrainingJob` request against the SageMaker API model
before it answers (`jobs.sagemaker.submit.open_session`).
"""

import json

import tensorflow as tf

from jobs import source as source_lib
from jobs import spec as spec_lib
from jobs.sagemaker import container as container_lib
from jobs.sagemaker import metrics as sagemaker_metrics
from tests import command_line
from tests.examples import examples_testing
from tests.jobs.sagemaker import test_submit as test_sagemaker_submit

JOB = "example-job"


class SubmitWithSdkTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        reason = test_sagemaker_submit.sdk_missing()
        if reason:
            self.skipTest("the SageMaker Python SDK (the 'sdk' extra) is not installed: %s" % reason)

    def run_example(self, *args):
        return examples_testing.run_example("submit_with_sdk", ["--job_name", JOB] + list(args), timeout=180,
                                            **command_line.NO_AWS_CREDENTIALS)

    def test_the_dry_run_prints_the_request_the_sdk_built(self):
        proc = self.run_example("--bucket", "data-bucket", "--instance_count", "3")
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        request = json.loads(proc.stdout)
        self.assertEqual(JOB, request["TrainingJobName"])
        self.assertRegex(request["AlgorithmSpecification"]["TrainingImage"], r"tensorflow-training:2\.14-cpu-py310$")
        self.assertEqual(list(sagemaker_metrics.METRIC_DEFINITIONS),
                         request["AlgorithmSpecification"]["MetricDefinitions"])
        self.assertEqual(3, request["ResourceConfig"]["InstanceCount"])
        hyperparameters = request["HyperParameters"]
        self.assertEqual('"%s"' % spec_lib.ENTRY_POINT, hyperparameters["sagemaker_program"])
        self.assertEqual('"s3://data-bucket/deepfm/%s/source/%s"' % (JOB, source_lib.SOURCE_TARBALL),
                         hyperparameters["sagemaker_submit_directory"])
        self.assertEqual("true", hyperparameters["sagemaker_mpi_enabled"])
        self.assertEqual("1", hyperparameters["sagemaker_mpi_num_of_processes_per_host"])
        self.assertEqual('"%s"' % container_lib.CHECKPOINT_LOCAL_PATH, hyperparameters["model_dir"])
        self.assertEqual("2", hyperparameters["num_epochs"])
        self.assertEqual({"LocalPath": container_lib.CHECKPOINT_LOCAL_PATH,
                          "S3Uri": "s3://data-bucket/deepfm/%s/checkpoints" % JOB}, request["CheckpointConfig"])
        channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in request["InputDataConfig"]}
        self.assertEqual({"train": "s3://data-bucket/deepfm/data/train",
                          "validation": "s3://data-bucket/deepfm/data/validation"}, channels)

    def test_a_real_submission_needs_your_own_role_and_bucket(self):
        proc = self.run_example("--submit")
        self.assertNotEqual(0, proc.returncode)
        self.assertIn("--submit needs your own --role and --bucket", proc.stderr)
        self.assertEqual("", proc.stdout)


if __name__ == "__main__":
    tf.test.main()
