"""Tests of `--distribution auto`: the cost model's pick as a SageMaker distribution, and a real dry run."""

import json

import pytest
import tensorflow as tf
from absl.testing import parameterized

from dataprep import synthetic
from jobs import auto_distribution
from jobs import spec as spec_lib
from planner import cost_model
from tests import command_line
from tests.jobs.sagemaker import test_submit as test_sagemaker_submit


class FromAdviceTest(parameterized.TestCase, tf.test.TestCase):

    @parameterized.named_parameters(
        ("horovod", cost_model.HOROVOD, spec_lib.DISTRIBUTION_MPI, 36, {}),
        ("horovod_dense", cost_model.HOROVOD_DENSE, spec_lib.DISTRIBUTION_MPI, 36,
         {auto_distribution.SPARSE_AS_DENSE: True}),
        ("ps", cost_model.PS, spec_lib.DISTRIBUTION_PS, 1, {}),
        ("hybrid", cost_model.HYBRID, spec_lib.DISTRIBUTION_MPI, 36,
         {auto_distribution.STRATEGY: cost_model.HYBRID}),
    )
    def test_pick_becomes_a_distribution(self, pick, distribution, processes_per_host, hyperparameters):
        # An advice without processes per host (an older advise): one rank per core.
        choice = auto_distribution.from_advice({"pick": pick, "reason": "because"}, 2, 36)
        self.assertEqual(distribution, choice.distribution)
        self.assertEqual(processes_per_host, choice.processes_per_host)
        if distribution == spec_lib.DISTRIBUTION_MPI:
            hyperparameters = dict(hyperparameters, intra_op_threads=1, inter_op_threads=1)
        self.assertEqual(hyperparameters, dict(choice.hyperparameters))
        self.assertIn("because", choice.describe())

    def test_the_advised_ranks_per_host_get_the_vcpus_of_their_cores_as_threads(self):
        advice = {"pick": cost_model.HYBRID, "reason": "because", "ranks_per_host": 9, "threads_per_rank": 4}
        choice = auto_distribution.from_advice(advice, 2, 36, vcpus_per_host=72)
        self.assertEqual((spec_lib.DISTRIBUTION_MPI, 9), (choice.distribution, choice.processes_per_host))
        self.assertEqual({auto_distribution.STRATEGY: cost_model.HYBRID, "intra_op_threads": 8,
                          "inter_op_threads": 8}, dict(choice.hyperparameters))
        self.assertIn("with 9 rank(s) per host --strategy hybrid --intra_op_threads 8 --inter_op_threads 8",
                      choice.describe())

    def test_single_on_one_instance_is_one_process(self):
        choice = auto_distribution.from_advice({"pick": cost_model.SINGLE, "reason": "threads"}, 1, 4)
        self.assertEqual((spec_lib.DISTRIBUTION_NONE, 1, {}), (choice.distribution, choice.processes_per_host,
                                                               dict(choice.hyperparameters)))

    def test_single_on_several_instances_is_refused_with_the_reason(self):
        with self.assertRaisesRegex(ValueError, "one process beats every layout of 4 instances \\(too slow\\); use "
                                    "--instance_count 1"):
            auto_distribution.from_advice({"pick": cost_model.SINGLE, "reason": "too slow"}, 4, 2)

    def test_unknown_pick_is_named(self):
        with self.assertRaisesRegex(ValueError, "unknown pick 'mirrored'"):
            auto_distribution.from_advice({"pick": "mirrored", "reason": ""}, 2, 2)

    def test_one_instance_needs_no_measurement(self):
        choice = auto_distribution.choose(None, 1, 36, 25.0)
        self.assertEqual(spec_lib.DISTRIBUTION_NONE, choice.distribution)

    def test_several_instances_need_data(self):
        with self.assertRaisesRegex(ValueError, "on 2 instances needs a local dataset root.*--auto_data"):
            auto_distribution.choose(None, 2, 36, 25.0)

    def test_unknown_instance_shape_lists_the_known(self):
        with self.assertRaisesRegex(ValueError, "'ml.p3.16xlarge'; known: .*ml.c5.18xlarge"):
            cost_model.instance_shape("ml.p3.16xlarge")
        self.assertEqual((36, 25.0), cost_model.instance_shape("ml.c5.18xlarge"))


@pytest.mark.slow
class AutoDryRunTest(tf.test.TestCase):
    """`deepfm.sagemaker submit --dry_run --distribution auto`: advise measures a step, the request follows."""

    def test_request_carries_the_advised_distribution(self):
        reason = test_sagemaker_submit.sdk_missing()
        if reason:
            self.skipTest("the SageMaker Python SDK (the 'sdk' extra) is not installed: %s" % reason)
        data = self.create_tempdir().full_path
        synthetic.generate(3000, data, feature_size=2000, seed=0)
        advice = auto_distribution.advise(data, 2, 36, 25.0, extra_args=["--steps", "3", "--warmup_steps", "2"])
        expected = auto_distribution.from_advice(advice, 2, 36, cost_model.instance_vcpus("ml.c5.18xlarge"))
        argv = command_line.python_module(
            "deepfm.sagemaker", "submit", "--dry_run", "--job_name", "deepfm-auto",
            "--role", test_sagemaker_submit.ROLE, "--output_path", "s3://bucket/jobs", "--nocheckpoints",
            "--channel", "train=s3://bucket/data/train", "--instance_count", "2", "--instance_type", "ml.c5.18xlarge",
            "--distribution", "auto", "--auto_data", data,
            "--", "--num_epochs", "1")
        proc = command_line.run(argv, self.get_temp_dir(), env=command_line.NO_AWS_CREDENTIALS, timeout=300)
        self.assertEqual(0, proc.returncode, command_line.describe(argv, proc))
        self.assertIn("--distribution auto: %s" % expected.distribution, proc.stderr)
        hyperparameters = json.loads(proc.stdout)["HyperParameters"]
        if expected.distribution == spec_lib.DISTRIBUTION_MPI:
            self.assertEqual("true", hyperparameters["sagemaker_mpi_enabled"])
            self.assertEqual(str(expected.processes_per_host),
                             hyperparameters["sagemaker_mpi_num_of_processes_per_host"])
            self.assertEqual(str(72 // expected.processes_per_host), hyperparameters["intra_op_threads"])
        else:
            self.assertEqual("true", hyperparameters["sagemaker_parameter_server_enabled"])
        self.assertEqual(expected.strategy, advice["pick"])
        # Every strategy at every number of processes per host that divides the 36 cores.
        self.assertEqual(set(cost_model.divisors(36)), {p["ranks_per_host"] for p in advice["predictions"]})
        self.assertEqual(advice["ranks_per_host"], expected.processes_per_host if expected.distribution ==
                         spec_lib.DISTRIBUTION_MPI else advice["ranks_per_host"])

    def test_unknown_instance_type_is_refused_before_measuring(self):
        proc = command_line.run(command_line.python_module(
            "deepfm.sagemaker", "submit", "--dry_run", "--role", test_sagemaker_submit.ROLE,
            "--output_path", "s3://bucket/jobs", "--channel", "train=s3://bucket/data/train",
            "--instance_count", "2", "--instance_type", "ml.p3.16xlarge", "--distribution", "auto",
            "--auto_data", "/nonexistent"), self.get_temp_dir(), env=command_line.NO_AWS_CREDENTIALS, timeout=120)
        self.assertNotEqual(0, proc.returncode)
        self.assertIn("no CPU shape known for instance type 'ml.p3.16xlarge'", proc.stderr)


if __name__ == "__main__":
    tf.test.main()
