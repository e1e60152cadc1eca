"""Tests of jobs.spec: the job, neutral of where it runs, shared by SageMaker and Kubernetes."""


import tensorflow as tf
from absl.testing import parameterized

from jobs import spec as spec_lib


def spec(**kwargs):
    kwargs.setdefault("job_name", "test-job")
    return spec_lib.JobSpec(**kwargs)


class HyperparameterTest(parameterized.TestCase):

    def test_parses_pairs_equals_and_bare_flags_as_json_values(self):
        parsed = spec_lib.parse_hyperparameters(
            ["--num_epochs", "2", "--learning_rate=0.01", "--batch_norm", "--deep_layers", "64,32",
             "--strategy", "horovod", "--flag=false"])
        self.assertEqual({"num_epochs": 2, "learning_rate": 0.01, "batch_norm": True, "deep_layers": "64,32",
                          "strategy": "horovod", "flag": False}, parsed)

    @parameterized.named_parameters(
        ("positional", ["value"], "expected --name value"),
        ("twice", ["--a", "1", "--a", "2"], "--a is given twice"),
        ("dashes_only", ["--"], "expected --name value"),
    )
    def test_bad_arguments_are_named(self, args, message):
        with self.assertRaisesRegex(ValueError, message):
            spec_lib.parse_hyperparameters(args)

    def test_toolkit_reserved_names_are_refused(self):
        with self.assertRaisesRegex(ValueError, "sagemaker_program"):
            spec(hyperparameters={"sagemaker_program": "x.py"})


class SpecTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("job_name", dict(job_name="bad_name"), "--job_name 'bad_name'"),
        ("instances", dict(instance_count=0), "--instance_count must be >= 1, got 0"),
        ("distribution", dict(distribution="nccl"), "--distribution must be one of none, parameter_server, mpi"),
        ("processes", dict(processes_per_host=2), "--processes_per_host 2 needs --distribution mpi"),
        ("input_mode", dict(input_mode="FastFile"), "--input_mode must be one of File, Pipe, got 'FastFile'"),
        ("duplicate_channel", dict(channels=(spec_lib.Channel("train", "a"),
                                             spec_lib.Channel("train", "b"))), "channel\\(s\\) train given"),
    )
    def test_bad_specs_are_refused_with_the_value(self, kwargs, message):
        with self.assertRaisesRegex(ValueError, message):
            spec(**kwargs)

    def test_bad_channel_distribution(self):
        with self.assertRaisesRegex(ValueError, "ShardedByS3Key, got 'Sharded'"):
            spec_lib.Channel("train", "x", distribution="Sharded")

    def test_mpi_jobs_wait_yielding_the_core_unless_their_options_say_otherwise(self):
        def options(**kwargs):
            return spec_lib.JobSpec(job_name="j", instance_count=2, **kwargs).mpi_options()
        self.assertEqual("-mca mpi_yield_when_idle 1", options(distribution="mpi"))
        self.assertEqual("-mca mpi_yield_when_idle 1 -x A=1", options(distribution="mpi", custom_mpi_options="-x A=1"))
        self.assertEqual("-mca mpi_yield_when_idle 0", options(distribution="mpi",
                                                                custom_mpi_options="-mca mpi_yield_when_idle 0"))
        self.assertEqual("", options(distribution="parameter_server"))

    def test_default_job_name_is_valid(self):
        name = spec_lib.default_job_name(1_800_000_000.123)
        self.assertEqual("deepfm-2027-01-15-08-00-00-123", name)
        spec(job_name=name)

    def test_the_entry_point_must_be_a_file_of_the_source_dir(self):
        source_dir = self.create_tempdir().full_path
        with self.assertRaisesRegex(ValueError, "--entry_point 'train_mine.py' is no file of --source_dir"):
            spec_lib.JobSpec(job_name="j", source_dir=source_dir, entry_point="train_mine.py")
        with self.assertRaisesRegex(ValueError, "--source_dir '/nonexistent' is not a directory"):
            spec_lib.JobSpec(job_name="j", source_dir="/nonexistent")


if __name__ == "__main__":
    tf.test.main()
