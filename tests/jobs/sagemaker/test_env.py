"""Tests of jobs.sagemaker.env and the entry point run as the container runs it, on tiny data."""

import json
import os

import tensorflow as tf
from absl.testing import parameterized

from dataprep import synthetic
from jobs.sagemaker import env as sagemaker_env
from tests import command_line, paths

REPO_ROOT = paths.REPO_ROOT
ENTRY_POINT = os.path.join(REPO_ROOT, "examples/sagemaker_entry_point.py")


def data_config(**modes):
    return json.dumps({name: {"TrainingInputMode": mode, "S3DistributionType": "FullyReplicated"}
                       for name, mode in modes.items()})


class TrainingArgsTest(parameterized.TestCase):

    def test_file_mode_channels_model_and_output(self):
        args = sagemaker_env.training_args({
            "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train", "SM_CHANNEL_VALIDATION": "/opt/ml/input/data/validation",
            "SM_MODEL_DIR": "/opt/ml/model", "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data",
            "SM_INPUT_DATA_CONFIG": data_config(train="File", validation="File"), "SM_NUM_CPUS": "1",
            "SAGEMAKER_BASE_DIR": "/nonexistent"}, ["--num_epochs", "2"])
        self.assertEqual(["--train_data=/opt/ml/input/data/train", "--val_data=/opt/ml/input/data/validation",
                          "--export_dir=/opt/ml/model", "--metrics_file=/opt/ml/output/data/metrics.json",
                          "--model_dir=/nonexistent/checkpoints", "--intra_op_threads=1", "--num_epochs=2"], args)

    def test_the_aws_samples_channel_names_and_numbered_file_channels(self):
        args = sagemaker_env.training_args({
            "SM_CHANNEL_TRAINING_1": "/c/t1", "SM_CHANNEL_TRAINING_0": "/c/t0", "SM_CHANNEL_EVAL": "/c/eval",
            "SM_INPUT_DATA_CONFIG": data_config(training_1="File", training_0="File", eval="File"),
            "SAGEMAKER_BASE_DIR": "/nonexistent"}, [])
        self.assertIn("--train_data=/c/t0,/c/t1", args)
        self.assertIn("--val_data=/c/eval", args)

    @parameterized.named_parameters(
        ("training", {"SM_CHANNEL_TRAIN": "/a", "SM_CHANNEL_TRAINING": "/b"}, "train... or training..., not both"),
        ("validation", {"SM_CHANNEL_VALIDATION": "/a", "SM_CHANNEL_EVAL": "/b"}, "validation and eval both name"),
    )
    def test_two_names_for_one_kind_of_data_are_refused(self, env, message):
        with self.assertRaisesRegex(sagemaker_env.ContractError, message):
            sagemaker_env.training_args(dict(env, SAGEMAKER_BASE_DIR="/nonexistent"), [])

    def test_the_sizes_come_from_metadata_in_any_file_channel_and_hyperparameters_win(self):
        root = self.create_tempdir().full_path
        synthetic.generate(300, root, feature_size=700, seed=1, shards=1)
        env = {"SM_INPUT_DATA_CONFIG": data_config(train="Pipe", validation="File"),
               "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train",
               "SM_CHANNEL_VALIDATION": os.path.join(root, "validation"),
               "SAGEMAKER_BASE_DIR": "/nonexistent"}
        args = sagemaker_env.training_args(env, [])
        self.assertIn("--val_data=%s" % os.path.join(root, "validation"), args)
        self.assertIn("--feature_size=700", args)
        self.assertIn("--field_size=39", args)
        given = sagemaker_env.training_args(env, ["--feature_size", "900"])
        self.assertEqual(["--feature_size=900"], [a for a in given if a.startswith("--feature_size")])
        self.assertIn("--field_size=39", given)

    def test_metadata_of_two_datasets_is_refused(self):
        first, second = self.create_tempdir().full_path, self.create_tempdir().full_path
        synthetic.generate(300, first, feature_size=700, seed=1, shards=1)
        synthetic.generate(300, second, feature_size=800, seed=1, shards=1)
        env = {"SM_CHANNEL_TRAIN": os.path.join(first, "train"),
               "SM_CHANNEL_VALIDATION": os.path.join(second, "validation"), "SAGEMAKER_BASE_DIR": "/nonexistent"}
        with self.assertRaisesRegex(sagemaker_env.ContractError, "feature_size 700.*feature_size 800.*describe "
                                    "different datasets"):
            sagemaker_env.training_args(env, [])

    def test_pipe_mode_channels_by_rank_order(self):
        args = sagemaker_env.training_args({
            "SM_INPUT_DATA_CONFIG": data_config(train_10="Pipe", train_2="Pipe", train_0="Pipe", validation="Pipe"),
            "SAGEMAKER_BASE_DIR": "/nonexistent"}, [])
        self.assertIn("--input_mode=pipe", args)
        self.assertIn("--train_channels=train_0,train_2,train_10", args)
        self.assertIn("--val_channel=validation", args)

    def test_sharded_training_channels_are_not_sharded_again_by_host(self):
        config = json.dumps({"train": {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key"}})
        args = sagemaker_env.training_args({"SM_INPUT_DATA_CONFIG": config, "SM_CHANNEL_TRAIN": "/d",
                                            "SAGEMAKER_BASE_DIR": "/nonexistent"}, [])
        self.assertIn("--s3_sharded", args)

    def test_mixed_input_modes_are_refused(self):
        with self.assertRaisesRegex(sagemaker_env.ContractError, "'validation' is in Pipe mode"):
            sagemaker_env.training_args({"SM_INPUT_DATA_CONFIG": data_config(train="File", validation="Pipe"),
                                         "SAGEMAKER_BASE_DIR": "/nonexistent"}, [])

    def test_toolkit_pairs_become_absl_flags_and_booleans_survive(self):
        self.assertEqual(["--batch_norm=False", "--deep_layers=64,32", "--xla=true", "--seed=3"],
                         sagemaker_env.normalize_args(["--batch_norm", "False", "--deep_layers", "64,32",
                                                       "--xla=true", "--seed", "3"]))

    def test_checkpoint_location_is_the_model_dir_unless_a_local_one_is_given(self):
        base = self.create_tempdir().full_path
        os.makedirs(os.path.join(base, "input", "config"))
        with open(os.path.join(base, "input", "config", "checkpointconfig.json"), "w") as f:
            json.dump({"LocalPath": "/opt/ml/checkpoints", "S3Uri": "s3://b/c"}, f)
        env = {"SAGEMAKER_BASE_DIR": base}
        self.assertIn("--model_dir=/opt/ml/checkpoints", sagemaker_env.training_args(env, []))
        s3 = sagemaker_env.training_args(env, ["--model_dir", "s3://b/model"])
        self.assertEqual(["--model_dir=/opt/ml/checkpoints"], [a for a in s3 if a.startswith("--model_dir")])
        local = sagemaker_env.training_args(env, ["--model_dir", "/data/m"])
        self.assertEqual("--model_dir=/data/m", [a for a in local if a.startswith("--model_dir")][-1])

    def test_s3_model_dir_without_checkpoint_location_is_refused(self):
        with self.assertRaisesRegex(sagemaker_env.ContractError, "'s3://b/m' is on S3"):
            sagemaker_env.training_args({"SAGEMAKER_BASE_DIR": "/nonexistent"}, ["--model_dir", "s3://b/m"])

    @parameterized.named_parameters(
        ("mpi", {"SM_FRAMEWORK_PARAMS": '{"sagemaker_mpi_enabled": true}'}, "--strategy=horovod"),
        ("ps", {"SM_FRAMEWORK_PARAMS": '{"sagemaker_parameter_server_enabled": true}',
                "TF_CONFIG": '{"cluster": {"ps": ["algo-1:2223"]}}'}, "--strategy=ps"),
    )
    def test_strategy_follows_the_distribution(self, env, expected):
        env = dict(env, SAGEMAKER_BASE_DIR="/nonexistent")
        self.assertIn(expected, sagemaker_env.training_args(env, []))
        self.assertNotIn(expected, sagemaker_env.training_args(env, ["--strategy", "single"]))

    def test_only_a_cluster_with_parameter_servers_is_ps(self):
        env = {"SAGEMAKER_BASE_DIR": "/nonexistent",
               "SM_FRAMEWORK_PARAMS": '{"sagemaker_parameter_server_enabled": true}'}
        # "ps" as a job without tasks, or as a host's name, is no parameter server.
        for tf_config in ('{"cluster": {"ps": [], "worker": ["algo-1:2222"]}}', '{"cluster": {"worker": ["ps:2222"]}}'):
            self.assertNotIn("--strategy=ps", sagemaker_env.training_args(dict(env, TF_CONFIG=tf_config), []))
        with self.assertRaisesRegex(sagemaker_env.ContractError, "TF_CONFIG is not valid JSON"):
            sagemaker_env.training_args(dict(env, TF_CONFIG='{"cluster": '), [])

    def test_threads_split_cores_between_the_host_processes(self):
        cores = len(os.sched_getaffinity(0))
        args = sagemaker_env.training_args({"SAGEMAKER_BASE_DIR": "/nonexistent", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                                            "SM_NUM_CPUS": "64"}, [])
        self.assertIn("--intra_op_threads=%d" % max(1, cores // 2), args)


class EntryPointTest(tf.test.TestCase):

    def test_trains_like_a_training_job(self):
        root = self.create_tempdir().full_path
        data = os.path.join(root, "input", "data")
        synthetic.generate(3_000, data, feature_size=500, seed=7, shards=1)
        # The container's variables, named on purpose; the rest is a user's environment.
        env = dict(SAGEMAKER_BASE_DIR=root, SM_CHANNEL_TRAIN=os.path.join(data, "train"),
                   SM_CHANNEL_VALIDATION=os.path.join(data, "validation"),
                   SM_MODEL_DIR=os.path.join(root, "model"), SM_OUTPUT_DATA_DIR=os.path.join(root, "output"))
        command = ["python", ENTRY_POINT, "--model_dir", "checkpoints", "--batch_size", "128",
                   "--embedding_size", "4", "--deep_layers", "8", "--dropout", "0", "--num_epochs", "3",
                   "--learning_rate", "0.01", "--batch_norm", "False"]
        proc = command_line.run(command, root, env=env, timeout=300)
        self.assertEqual(0, proc.returncode, command_line.describe(command, proc))
        with open(os.path.join(root, "output", "metrics.json")) as f:
            metrics = json.load(f)
        self.assertEqual(3 * (2_700 // 128), metrics["global_step"])
        self.assertGreater(metrics["auc"], 0.6)
        self.assertLen(tf.io.gfile.glob(os.path.join(root, "model", "*", "saved_model.pb")), 1)

    def test_contract_errors_end_with_the_message(self):
        proc = command_line.run(["python", ENTRY_POINT, "--model_dir", "s3://bucket/model"], self.get_temp_dir(),
                                env=dict(SAGEMAKER_BASE_DIR=self.get_temp_dir()), timeout=120)
        self.assertNotEqual(0, proc.returncode)
        self.assertIn("'s3://bucket/model' is on S3", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)


if __name__ == "__main__":
    tf.test.main()
