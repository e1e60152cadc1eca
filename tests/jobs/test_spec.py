"""Tests of jobs.sagemaker_job: the job description shared by local runs and submissions."""

import gzip
import io
import json
import os
import tarfile

from absl.testing import parameterized
import tensorflow as tf

from jobs import sagemaker_job


def spec(**kwargs):
    kwargs.setdefault("job_name", "test-job")
    return sagemaker_job.JobSpec(**kwargs)


class HyperparameterTest(parameterized.TestCase):

    def test_parses_pairs_equals_and_bare_flags_as_json_values(self):
        parsed = sagemaker_job.parse_hyperparameters(
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
            sagemaker_job.parse_hyperparameters(args)

    def test_encoding_is_the_sdks_json_per_value_and_the_toolkit_decodes_it(self):
        job = spec(distribution="mpi", processes_per_host=2, hyperparameters={"num_epochs": 2, "strategy": "horovod"})
        encoded = sagemaker_job.encoded_hyperparameters(job, "s3://b/src.tar.gz", "/opt/ml/checkpoints")
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

    def test_toolkit_reserved_names_are_refused(self):
        with self.assertRaisesRegex(ValueError, "sagemaker_program"):
            spec(hyperparameters={"sagemaker_program": "x.py"})


class SpecTest(parameterized.TestCase):

    @parameterized.named_parameters(
        ("job_name", dict(job_name="bad_name"), "--job_name 'bad_name'"),
        ("instances", dict(instance_count=0), "--instance_count must be >= 1, got 0"),
        ("distribution", dict(distribution="nccl"), "--distribution must be one of none, parameter_server, mpi"),
        ("processes", dict(processes_per_host=2), "--processes_per_host 2 needs --distribution mpi"),
        ("input_mode", dict(input_mode="FastFile"), "--input_mode must be one of File, Pipe, got 'FastFile'"),
        ("duplicate_channel", dict(channels=(sagemaker_job.Channel("train", "a"),
                                             sagemaker_job.Channel("train", "b"))), "channel\\(s\\) train given"),
    )
    def test_bad_specs_are_refused_with_the_value(self, kwargs, message):
        with self.assertRaisesRegex(ValueError, message):
            spec(**kwargs)

    def test_bad_channel_distribution(self):
        with self.assertRaisesRegex(ValueError, "ShardedByS3Key, got 'Sharded'"):
            sagemaker_job.Channel("train", "x", distribution="Sharded")

    def test_config_files_as_sagemaker_writes_them(self):
        job = spec(instance_count=3, input_mode="Pipe", channels=(
            sagemaker_job.Channel("train", "a", sagemaker_job.SHARDED_BY_S3_KEY), sagemaker_job.Channel("validation", "b")))
        resource = sagemaker_job.resource_config(job, "algo-2")
        self.assertEqual("algo-2", resource["current_host"])
        self.assertEqual(["algo-1", "algo-2", "algo-3"], resource["hosts"])
        self.assertEqual("eth0", resource["network_interface_name"])
        data = sagemaker_job.input_data_config(job)
        self.assertEqual({"TrainingInputMode": "Pipe", "S3DistributionType": "ShardedByS3Key",
                          "RecordWrapperType": "None"}, data["train"])
        self.assertEqual("FullyReplicated", data["validation"]["S3DistributionType"])

    def test_default_job_name_is_valid(self):
        name = sagemaker_job.default_job_name(1_800_000_000.123)
        self.assertEqual("deepfm-2027-01-15-08-00-00-123", name)
        spec(job_name=name)


class SourceTarballTest(tf.test.TestCase):

    def test_holds_the_entry_point_and_packages_and_is_reproducible(self):
        root = self.get_temp_dir()
        first = sagemaker_job.write_source_tarball(os.path.join(root, "a.tar.gz"))
        second = sagemaker_job.write_source_tarball(os.path.join(root, "b.tar.gz"))
        with open(first, "rb") as f, open(second, "rb") as g:
            self.assertEqual(f.read(), g.read())
        with open(first, "rb") as f:
            names = tarfile.open(fileobj=io.BytesIO(gzip.decompress(f.read()))).getnames()
        self.assertIn("sagemaker_entry_point.py", names)
        for module in ("deepfm/train.py", "strategies/ps.py", "input_pipeline/pipeline.py", "jobs/sagemaker_env.py"):
            self.assertIn(module, names)
        self.assertFalse([name for name in names if "__pycache__" in name or name.startswith("tests/")])

    def test_a_source_dir_goes_to_the_root_beside_the_packages(self):
        source_dir = self.create_tempdir().full_path
        os.makedirs(os.path.join(source_dir, "mymodels", "__pycache__"))
        for name, text in (("train_mine.py", "import sagemaker_entry_point\n"), ("mymodels/fm.py", "X = 1\n"),
                           ("mymodels/__pycache__/fm.cpython-310.pyc", "")):
            with open(os.path.join(source_dir, name), "w") as f:
                f.write(text)
        path = sagemaker_job.write_source_tarball(os.path.join(self.get_temp_dir(), "user.tar.gz"),
                                                  source_dir=source_dir)
        with open(path, "rb") as f:
            archive = tarfile.open(fileobj=io.BytesIO(gzip.decompress(f.read())))
            names = archive.getnames()
            self.assertEqual(b"X = 1\n", archive.extractfile("mymodels/fm.py").read())
        self.assertContainsSubset(["train_mine.py", "mymodels/fm.py", "sagemaker_entry_point.py", "deepfm/train.py"],
                                  names)
        self.assertFalse([name for name in names if "__pycache__" in name])

    def test_a_source_dir_file_may_not_replace_the_projects(self):
        source_dir = self.create_tempdir().full_path
        os.makedirs(os.path.join(source_dir, "deepfm"))
        open(os.path.join(source_dir, "deepfm", "x.py"), "w").close()
        with self.assertRaisesRegex(ValueError, "deepfm/x.py has the name of one of this project's files"):
            sagemaker_job.source_files(source_dir=source_dir)

    def test_the_entry_point_must_be_a_file_of_the_source_dir(self):
        source_dir = self.create_tempdir().full_path
        with self.assertRaisesRegex(ValueError, "--entry_point 'train_mine.py' is no file of --source_dir"):
            sagemaker_job.JobSpec(job_name="j", source_dir=source_dir, entry_point="train_mine.py")
        with self.assertRaisesRegex(ValueError, "--source_dir '/nonexistent' is not a directory"):
            sagemaker_job.JobSpec(job_name="j", source_dir="/nonexistent")


if __name__ == "__main__":
    tf.test.main()
