"""Tests of deepfm.runtime.interrupt: SIGTERM or SIGINT stops training at a saved step, and a rerun resumes there.

The signals are real: a thread sends one to this process at a random moment
of training.
"""

import glob
import json
import os
import random
import signal
import threading
import time

import tensorflow as tf
from absl.testing import parameterized

import strategies
from dataprep import synthetic
from deepfm import config, job_config
from deepfm.runtime import checkpoints, interrupt, trainer
from input_pipeline import files, pipeline

FEATURE_SIZE = 500
BATCH = 32
MAX_STEPS = 1_500
# The signal comes this long (uniformly drawn) after the first checkpoint.
MAX_DELAY_S = 1.5
WAIT_S = 120


def tiny_model():
    return config.ModelConfig(feature_size=FEATURE_SIZE, embedding_size=4, deep_layers=(8,), dropout=(0.0,),
                              learning_rate=0.01)


def signal_after_first_checkpoint(model_dir, signum, delay_s):
    """Sends `signum` to this process `delay_s` after the chief's first checkpoint appears in `model_dir`."""
    def send():
        deadline = time.monotonic() + WAIT_S
        while not glob.glob(os.path.join(model_dir, "model.ckpt-*.index")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay_s)
        os.kill(os.getpid(), signum)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


class StopRequestTest(tf.test.TestCase):

    def test_handlers_are_installed_and_restored(self):
        before = signal.getsignal(signal.SIGTERM)
        with interrupt.StopRequest() as request:
            self.assertFalse(request.requested)
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + WAIT_S
            while not request.requested and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(request.signum, signal.SIGTERM)
        self.assertIs(signal.getsignal(signal.SIGTERM), before)

    def test_a_second_sigint_is_not_caught(self):
        # The second SIGINT goes to the handler from before: Python's own here, whatever another
        # test run earlier in this process left installed.
        self.addCleanup(signal.signal, signal.SIGINT, signal.signal(signal.SIGINT, signal.default_int_handler))
        with self.assertRaises(KeyboardInterrupt):
            with interrupt.StopRequest() as request:
                os.kill(os.getpid(), signal.SIGINT)
                while not request.requested:
                    time.sleep(0.01)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(WAIT_S)

    def test_interrupted_is_a_system_exit_with_the_documented_code(self):
        error = interrupt.TrainingInterrupted(42, signal.SIGTERM)
        self.assertIsInstance(error, SystemExit)
        self.assertEqual(error.code, interrupt.INTERRUPTED_EXIT_CODE)
        self.assertIn("interrupted by SIGTERM at global step 42", str(error))


class InterruptedTrainingTest(tf.test.TestCase, parameterized.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data_dir = os.path.join(tf.compat.v1.test.get_temp_dir(), "interrupt_data")
        synthetic.generate(2_000, cls.data_dir, feature_size=FEATURE_SIZE, seed=2, shards=1)

    def run_training(self, model_dir, strategy_config):
        train = config.TrainConfig(
            model_dir=model_dir, train_files=tuple(files.resolve([self.data_dir], "tfrecord")),
            batch_size=BATCH, max_steps=MAX_STEPS, metrics_file=os.path.join(model_dir, "metrics.json"), seed=1)
        return trainer.run(job_config.JobConfig(train=train, model=tiny_model(), input=pipeline.PipelineConfig(),
                                                strategy=strategy_config))

    @parameterized.named_parameters(
        ("single_sigterm", strategies.make_config(name="single"), signal.SIGTERM),
        ("single_sigint", strategies.make_config(name="single"), signal.SIGINT),
        ("tower_sigterm", strategies.make_config(name="tower", num_devices=2, device_type="cpu"), signal.SIGTERM),
    )
    def test_signal_saves_the_step_and_a_rerun_resumes_from_it(self, strategy_config, signum):
        model_dir = self.create_tempdir().full_path
        signal_after_first_checkpoint(model_dir, signum, random.uniform(0, MAX_DELAY_S))
        with self.assertRaises(interrupt.TrainingInterrupted) as raised:
            self.run_training(model_dir, strategy_config)
        step = raised.exception.global_step
        self.assertEqual(raised.exception.code, interrupt.INTERRUPTED_EXIT_CODE)
        self.assertBetween(step, 1, MAX_STEPS - 1)
        # The checkpoint is at the step training stopped at: nothing trained is lost.
        self.assertEqual(checkpoints.checkpoint_step(tf.train.latest_checkpoint(model_dir)), step)
        with open(os.path.join(model_dir, "metrics.json")) as f:
            metrics = json.load(f)
        self.assertTrue(metrics["interrupted"])
        self.assertEqual(metrics["global_step"], step)
        self.assertEqual(metrics["signal"], signal.Signals(signum).name)
        self.assertIs(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)

        # The same run again starts at that step and ends at the budget.
        self.assertEqual(trainer.check_model_dir(model_dir, tiny_model()), step)
        result = self.run_training(model_dir, strategy_config)
        self.assertEqual(result.global_step, MAX_STEPS)
        with open(os.path.join(model_dir, "metrics.json")) as f:
            self.assertNotIn("interrupted", json.load(f))


if __name__ == "__main__":
    tf.test.main()
