"""Runs the SageMaker entry point as the container would, on tiny local data."""

import json
import os
import subprocess
import sys

import tensorflow as tf

from input_pipeline import synthetic

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO_ROOT, "examples"))
import sagemaker_entry_point  # noqa: E402


class SageMakerEntryPointTest(tf.test.TestCase):

    def test_environment_maps_to_flags(self):
        args = sagemaker_entry_point.sagemaker_args({
            "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train", "SM_MODEL_DIR": "/opt/ml/model",
            "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data", "SM_HOSTS": '["algo-1"]'})
        self.assertEqual(["--train_data", "/opt/ml/input/data/train", "--export_dir", "/opt/ml/model",
                          "--metrics_file", "/opt/ml/output/data/metrics.json"], args)

    def test_trains_like_a_training_job(self):
        root = self.create_tempdir().full_path
        data = os.path.join(root, "input", "data")
        synthetic.generate(3_000, data, feature_size=500, seed=7, shards=1)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                   SM_CHANNEL_TRAIN=os.path.join(data, "train"),
                   SM_CHANNEL_VALIDATION=os.path.join(data, "validation"),
                   SM_MODEL_DIR=os.path.join(root, "model"), SM_OUTPUT_DATA_DIR=os.path.join(root, "output"))
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO_ROOT, "examples", "sagemaker_entry_point.py"),
             "--model_dir", os.path.join(root, "checkpoints"), "--batch_size", "128", "--embedding_size", "4",
             "--deep_layers", "8", "--dropout", "0", "--num_epochs", "3", "--learning_rate", "0.01"],
            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        with open(os.path.join(root, "output", "metrics.json")) as f:
            metrics = json.load(f)
        self.assertEqual(3 * (2_700 // 128), metrics["global_step"])
        self.assertGreater(metrics["auc"], 0.6)
        self.assertLen(tf.io.gfile.glob(os.path.join(root, "model", "*", "saved_model.pb")), 1)


if __name__ == "__main__":
    tf.test.main()
