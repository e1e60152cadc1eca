"""Tests of deepfm.runtime.checkpoints: unreadable checkpoints skipped, other model shapes refused, a full disk."""

import contextlib
import os
import subprocess

import tensorflow as tf

import strategies
from dataprep import synthetic
from deepfm import config, job_config
from deepfm.runtime import checkpoints, trainer
from input_pipeline import files, pipeline

FEATURE_SIZE = 500
BATCH = 32
SAVE_EVERY = 20
FIRST_STEPS = 60
# A tmpfs this small holds one short run's model directory and little more.
TMPFS_SIZE = "4m"
# Space left free on the tmpfs once the first run is done: less than one
# more checkpoint (its .data, .index and .meta files) needs.
LEFT_FREE_BYTES = 96 * 1024


def tiny_model(**overrides):
    values = dict(feature_size=FEATURE_SIZE, embedding_size=4, deep_layers=(8,), dropout=(0.0,),
                  learning_rate=0.01)
    values.update(overrides)
    return config.ModelConfig(**values)


def train(data_dir, model_dir, model, max_steps):
    train_config = config.TrainConfig(
        model_dir=model_dir, train_files=tuple(files.resolve([data_dir], "tfrecord")), batch_size=BATCH,
        max_steps=max_steps, save_checkpoints_steps=SAVE_EVERY, seed=1)
    return trainer.run(job_config.JobConfig(train=train_config, model=model, input=pipeline.PipelineConfig(),
                                            strategy=strategies.StrategyConfig(name="single")))


class CheckpointsTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data_dir = os.path.join(tf.compat.v1.test.get_temp_dir(), "checkpoints_data")
        synthetic.generate(2_000, cls.data_dir, feature_size=FEATURE_SIZE, seed=2, shards=1)

    def trained_dir(self):
        model_dir = self.create_tempdir().full_path
        train(self.data_dir, model_dir, tiny_model(), FIRST_STEPS)
        return model_dir

    def test_truncated_latest_checkpoint_is_skipped_and_training_resumes_from_the_previous(self):
        model_dir = self.trained_dir()
        latest = tf.train.latest_checkpoint(model_dir)
        self.assertEqual(checkpoints.checkpoint_step(latest), FIRST_STEPS)
        data_file = latest + ".data-00000-of-00001"
        with open(data_file, "r+b") as f:
            f.truncate(os.path.getsize(data_file) // 2)
        with self.assertLogs(level="WARNING") as logs:
            step = trainer.check_model_dir(model_dir, tiny_model())
        self.assertEqual(step, FIRST_STEPS - SAVE_EVERY)
        self.assertIn("checkpoint %s is unreadable and is skipped" % latest, "\n".join(logs.output))
        self.assertEqual(tf.train.latest_checkpoint(model_dir),
                         os.path.join(model_dir, "model.ckpt-%d" % (FIRST_STEPS - SAVE_EVERY)))
        result = train(self.data_dir, model_dir, tiny_model(), FIRST_STEPS + SAVE_EVERY)
        self.assertEqual(result.global_step, FIRST_STEPS + SAVE_EVERY)
        self.assertIsNone(checkpoints.unreadable_reason(tf.train.latest_checkpoint(model_dir)))

    def test_unreadable_index_is_skipped(self):
        model_dir = self.trained_dir()
        latest = tf.train.latest_checkpoint(model_dir)
        with open(latest + ".index", "wb") as f:
            f.write(b"not an index")
        self.assertIn("too short", checkpoints.unreadable_reason(latest))
        self.assertEqual(checkpoints.resume_checkpoint(model_dir, repair=False),
                         os.path.join(model_dir, "model.ckpt-%d" % (FIRST_STEPS - SAVE_EVERY)))
        # Without repair the state file still names the unreadable one.
        self.assertEqual(tf.train.latest_checkpoint(model_dir), latest)

    def test_a_model_dir_relative_to_the_working_directory_resumes(self):
        # The state file lists `model.ckpt-N` relative to the directory, which TensorFlow joins with
        # the directory as given: `runs/m/model.ckpt-N`, not `runs/m/runs/m/model.ckpt-N`.
        relative = os.path.relpath(self.trained_dir())
        self.assertFalse(os.path.isabs(relative))
        self.assertEqual(checkpoints.listed_checkpoints(relative)[-1],
                         os.path.join(relative, "model.ckpt-%d" % FIRST_STEPS))
        self.assertEqual(trainer.check_model_dir(relative, tiny_model()), FIRST_STEPS)

    def test_no_readable_checkpoint_is_an_error(self):
        model_dir = self.trained_dir()
        for path in checkpoints.listed_checkpoints(model_dir):
            os.remove(path + ".index")
        with self.assertRaisesRegex(checkpoints.NoReadableCheckpointError, "none of its checkpoints can be read"):
            trainer.check_model_dir(model_dir, tiny_model())

    def test_other_model_shape_is_refused_with_both_shapes(self):
        model_dir = self.trained_dir()
        cases = [
            (tiny_model(embedding_size=6), r"deepfm_model/fm_v: checkpoint \[500, 4\], this model \[500, 6\]"),
            (tiny_model(feature_size=800), r"deepfm_model/fm_w: checkpoint \[500\], this model \[800\]"),
            (tiny_model(deep_layers=(8, 4), dropout=(0.0, 0.0)),
             r"deepfm_model/deep/layer_1/kernel: checkpoint absent, this model \[8, 4\]"),
        ]
        for model, message in cases:
            with self.subTest(model=model):
                with self.assertRaisesRegex(checkpoints.ModelShapeMismatchError, message):
                    trainer.check_model_dir(model_dir, model)
        # The same shape passes.
        self.assertEqual(trainer.check_model_dir(model_dir, tiny_model()), FIRST_STEPS)

    def test_training_with_another_shape_is_refused_before_it_starts(self):
        model_dir = self.trained_dir()
        before = sorted(os.listdir(model_dir))
        with self.assertRaisesRegex(ValueError, r"checkpoint \[500, 4\], this model \[500, 8\]"):
            train(self.data_dir, model_dir, tiny_model(embedding_size=8), FIRST_STEPS * 2)
        self.assertEqual(sorted(os.listdir(model_dir)), before)

    def test_full_disk_during_a_save_is_a_clear_error(self):
        if os.geteuid() != 0:
            self.skipTest("mounting a small tmpfs needs root")
        mount_point = self.create_tempdir().full_path
        with contextlib.ExitStack() as stack:
            mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + TMPFS_SIZE, "tmpfs", mount_point],
                                     capture_output=True, text=True)
            if mounted.returncode != 0:
                self.skipTest("cannot mount a tmpfs here: %s" % mounted.stderr.strip())
            stack.callback(subprocess.run, ["umount", "-l", mount_point], check=False)
            model_dir = os.path.join(mount_point, "model")
            train(self.data_dir, model_dir, tiny_model(), FIRST_STEPS)
            with open(os.path.join(mount_point, "filler"), "wb") as f:
                f.write(b"\0" * max(0, os.statvfs(mount_point).f_bavail * os.statvfs(mount_point).f_frsize
                                    - LEFT_FREE_BYTES))
            with self.assertRaisesRegex(checkpoints.CheckpointSaveError,
                                        r"writing to --model_dir '%s' failed: no space left on its device .*"
                                        r"The latest complete checkpoint is still .*model\.ckpt-%d"
                                        % (model_dir, FIRST_STEPS)):
                train(self.data_dir, model_dir, tiny_model(), FIRST_STEPS * 3)
            latest = tf.train.latest_checkpoint(model_dir)
            self.assertEqual(checkpoints.checkpoint_step(latest), FIRST_STEPS)
            self.assertIsNone(checkpoints.unreadable_reason(latest))


class LargeTensorTest(tf.test.TestCase):

    def _saved(self):
        with tf.Graph().as_default():
            tf.compat.v1.get_variable("table", [1000, 8], initializer=tf.compat.v1.ones_initializer())
            tf.compat.v1.get_variable("bias", [8], initializer=tf.compat.v1.zeros_initializer())
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                return saver.save(session, os.path.join(self.create_tempdir().full_path, "model.ckpt"))

    def test_a_tensor_over_the_bound_is_checked_by_the_data_files_size_not_read(self):
        path = self._saved()
        # 1000 x 8 floats: 32,000 bytes, over a bound of 100 bytes; the bias (32 bytes) is read back.
        self.assertIsNone(checkpoints.unreadable_reason(path, read_whole_bytes=100))
        data_file = path + ".data-00000-of-00001"
        with open(data_file, "r+b") as f:
            f.truncate(os.path.getsize(data_file) - 4)
        self.assertRegex(checkpoints.unreadable_reason(path, read_whole_bytes=100),
                         r"DataLossError: the data files of \S+ hold \d+ bytes, fewer than the 32032 its tensors need")
        # Under the default bound the table is read back, and the read finds it short.
        self.assertIsNotNone(checkpoints.unreadable_reason(path))


if __name__ == "__main__":
    tf.test.main()
