"""`python -m deepfm.kubernetes`: the command line of render and local."""

import os

import pytest
import tensorflow as tf
import yaml

from dataprep import synthetic
from tests import command_line


def kubernetes(*args):
    """`python -m deepfm.kubernetes args...` as a user starts it, from the tests' temporary directory."""
    return command_line.run(command_line.python_module("deepfm.kubernetes", *args),
                            tf.compat.v1.test.get_temp_dir(), timeout=300)


class RenderCommandTest(tf.test.TestCase):

    def test_the_sagemaker_job_arguments(self):
        output = os.path.join(self.create_tempdir().full_path, "out")
        result = kubernetes("render", "--job_name", "ctr", "--instance_count", "3", "--distribution", "mpi",
                            "--processes_per_host", "2", "--custom_mpi_options", "-x NCCL_DEBUG=INFO",
                            "--channel", "train=criteo/train", "--channel", "validation=criteo/val",
                            "--image", "registry.example/deepfm:2", "--namespace", "ml", "--storage_class", "efs",
                            "--cpu", "4", "--memory", "16Gi", "--output_dir", output, "--",
                            "--num_epochs", "3", "--optimizer", "adagrad")
        self.assertEqual(0, result.returncode, result.stderr)
        self.assertEqual(["pvc.yaml", "mpijob.yaml", "jobset.yaml", "Dockerfile"],
                         [os.path.basename(line) for line in result.stdout.split()])
        with open(os.path.join(output, "mpijob.yaml")) as f:
            mpijob = yaml.safe_load(f)
        self.assertEqual(("ctr", "ml", 2), (mpijob["metadata"]["name"], mpijob["metadata"]["namespace"],
                                            mpijob["spec"]["slotsPerWorker"]))
        args = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
        for arg in ("-x", "NCCL_DEBUG=INFO", "--train_data=/mnt/deepfm/criteo/train",
                    "--val_data=/mnt/deepfm/criteo/val", "--num_epochs=3", "--optimizer=adagrad",
                    "--intra_op_threads=2"):
            self.assertIn(arg, args)
        with open(os.path.join(output, "pvc.yaml")) as f:
            self.assertEqual("efs", yaml.safe_load(f)["spec"]["storageClassName"])

    def test_usage_errors_name_the_flag(self):
        output = self.create_tempdir().full_path
        for args, message in (
                (("render", "--output_dir", output), "--image is required"),
                (("render", "--image", "i"), "render needs --output_dir"),
                (("render", "--image", "i", "--output_dir", output, "--input_mode", "Pipe"), "--input_mode Pipe"),
                (("render", "--image", "i", "--output_dir", output, "--channel", "train=/abs"), "inside the volume"),
                (("render", "--image", "i", "--output_dir", output, "--", "--strategy", "ps"),
                 "hyperparameter --strategy"),
                (("local", "--volume_dir", output, "--output_dir", output), "local needs --manifest"),
                (("deploy",), "must be one of render, local")):
            with self.subTest(message):
                result = kubernetes(*args)
                self.assertNotEqual(0, result.returncode)
                self.assertIn(message, result.stderr)

    def test_local_refuses_a_file_that_holds_no_job(self):
        directory = self.create_tempdir().full_path
        path = os.path.join(directory, "pvc.yaml")
        with open(path, "w") as f:
            yaml.safe_dump({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "x"}}, f)
        result = kubernetes("local", "--manifest", path, "--volume_dir", directory, "--output_dir",
                            os.path.join(directory, "run"))
        self.assertEqual(2, result.returncode)
        self.assertIn("must be a TFJob, MPIJob, JobSet", result.stderr)
        for fault, message in (("kill:x", "must be ACTION:POD@STEP"), ("explode:x@1", "one of kill, lose, return")):
            result = kubernetes("local", "--manifest", path, "--volume_dir", directory, "--output_dir",
                                os.path.join(directory, "run"), "--fault", fault)
            self.assertEqual(2, result.returncode)
            self.assertIn(message, result.stderr)


@pytest.mark.slow
class AutoDistributionTest(tf.test.TestCase):

    def test_auto_resolves_before_rendering(self):
        data = self.create_tempdir("data").full_path
        synthetic.generate(4000, data, feature_size=500, seed=3)
        output = os.path.join(self.create_tempdir().full_path, "out")
        result = kubernetes("render", "--job_name", "auto", "--instance_count", "2", "--distribution", "auto",
                            "--auto_data", data, "--cpu", "4", "--channel", "train=data", "--image", "i",
                            "--output_dir", output)
        self.assertEqual(0, result.returncode, result.stderr)
        written = sorted(os.listdir(output))
        self.assertTrue({"tfjob.yaml", "mpijob.yaml"} & set(written), written)
        self.assertIn("jobset.yaml", written)
