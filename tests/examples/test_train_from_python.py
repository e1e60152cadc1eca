"""`examples/train_from_python.py` run as a user runs it: the public API on a dataset root, a strategy by name.

Under the strategies of several processes it runs in
`tests/examples/test_custom_model.py` (DCN through this script).
"""

import glob
import json
import os

import tensorflow as tf

from tests.examples import examples_testing

MIN_AUC = 0.65


class TrainFromPythonTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = examples_testing.shared_dataset()

    def test_trains_evaluates_and_exports(self):
        work = self.create_tempdir().full_path
        proc = examples_testing.run_example("train_from_python", [
            self.data, "--model_dir", os.path.join(work, "model"), "--export_dir", os.path.join(work, "export"),
            "--metrics_file", os.path.join(work, "metrics.json"), "--strategy", "tower", "--num_devices", "2",
            "--device_type", "cpu"] + examples_testing.TINY_MODEL_ARGS)
        self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
        with open(os.path.join(work, "metrics.json")) as f:
            metrics = json.load(f)
        self.assertGreater(metrics["auc"], MIN_AUC)
        self.assertIn("tower: 2 tower(s) on /cpu:1,/cpu:2, variables on /cpu:0: validation AUC %.4f after %d steps"
                      % (metrics["auc"], metrics["global_step"]), proc.stdout)
        self.assertLen(glob.glob(os.path.join(work, "export", "*", "saved_model.pb")), 1)
        with open(os.path.join(work, "model", "config.json")) as f:
            record = json.load(f)
        self.assertEqual("tower", record["strategy"]["name"])
        self.assertEqual(2, record["strategy"]["options"]["num_devices"])
        # TensorFlow's deprecation notices are kept out of the script's output (deepfm.configure_logging).
        self.assertNotIn("Instructions for updating", proc.stderr)

    def test_an_option_of_another_strategy_is_refused_naming_it(self):
        proc = examples_testing.run_example("train_from_python", [
            self.data, "--model_dir", self.create_tempdir().full_path, "--strategy", "single", "--num_devices", "2"])
        self.assertEqual(1, proc.returncode)
        self.assertIn("train_from_python: error: --num_devices applies to --strategy", proc.stderr)
        self.assertIn("not single", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)


if __name__ == "__main__":
    tf.test.main()
