"""A model_fn of your own in a SageMaker job: an entry point of three lines around `examples/sagemaker_entry_point.py`.

The container is emulated as `tests/jobs/sagemaker/test_env.py` does (its
channels, model and output directories in the environment); the source
directory holds the user's entry point beside `sagemaker_entry_point.py` and
the model's module (`examples/custom_model.py`). The entry point itself, with
the built-in model, is tested there and in `tests/jobs/sagemaker/test_local.py`.
"""

import glob
import json
import os
import shutil

import tensorflow as tf

import deepfm
from tests import command_line
from tests.examples import examples_testing

USER_ENTRY_POINT = """\
import custom_model
import sagemaker_entry_point
sagemaker_entry_point.main(model_fn=custom_model.model_fn)
"""
MIN_AUC = 0.65


class CustomModelEntryPointTest(tf.test.TestCase):

    def test_a_job_trains_the_users_model_fn(self):
        data = examples_testing.shared_dataset()
        root = self.create_tempdir().full_path
        # The source directory as the container unpacks it: the user's entry point and model module
        # (examples/custom_model.py, copied alone, as docs/sagemaker.md says) beside the shipped entry point.
        source_dir = self.create_tempdir().full_path
        with open(os.path.join(source_dir, "train_custom.py"), "w") as f:
            f.write(USER_ENTRY_POINT)
        for name in ("custom_model", "sagemaker_entry_point"):
            shutil.copy(examples_testing.example_path(name), source_dir)
        env = dict(SAGEMAKER_BASE_DIR=root, SM_CHANNEL_TRAIN=os.path.join(data, "train"),
                   SM_CHANNEL_VALIDATION=os.path.join(data, "validation"), SM_MODEL_DIR=os.path.join(root, "model"),
                   SM_OUTPUT_DATA_DIR=os.path.join(root, "output"))
        # The hyperparameters as the toolkit passes them.
        command = ["python", "train_custom.py", "--batch_size", "64", "--embedding_size", "4", "--deep_layers", "16",
                   "--dropout", "0", "--learning_rate", "0.01", "--batch_norm", "False"]
        proc = command_line.run(command, source_dir, env=env, timeout=examples_testing.RUN_TIMEOUT_S)
        self.assertEqual(0, proc.returncode, command_line.describe(command, proc))
        with open(os.path.join(root, "output", "metrics.json")) as f:
            metrics = json.load(f)
        self.assertGreater(metrics["auc"], MIN_AUC)
        # The command line's summary, which SageMaker's metric definitions read.
        self.assertIn("validation AUC:", proc.stdout)
        (saved_model,) = glob.glob(os.path.join(root, "model", "*", "saved_model.pb"))
        # The export serves as the built-in models' do.
        rows, _ = deepfm.write_predictions(os.path.dirname(saved_model), [os.path.join(data, "validation")],
                                           "tfrecord", os.path.join(root, "predictions.csv"))
        self.assertEqual(deepfm.Dataset.open(data).metadata.splits["validation"].rows, rows)
        checkpoints = os.path.join(root, "checkpoints")
        with open(os.path.join(checkpoints, "config.json")) as f:
            self.assertEqual("custom_model.model_fn", json.load(f)["model_fn"])
        names = [name for name, _ in tf.train.list_variables(checkpoints)]
        self.assertNotEmpty([name for name in names if name.startswith("wide_mlp/")], names)


if __name__ == "__main__":
    tf.test.main()
