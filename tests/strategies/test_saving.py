"""Tests of the no-copy saver: what it saves, its restore's log line, and the checkpoint it does not write twice."""

import os

import tensorflow as tf
from absl import logging

from strategies import saving

STEPS = 3


def _model_fn(features, labels, mode, params):
    del params
    table = tf.compat.v1.get_variable("table", [64, 4], initializer=tf.compat.v1.random_uniform_initializer(seed=1))
    logits = tf.reduce_sum(tf.nn.embedding_lookup(table, features["ids"]), axis=[1, 2])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    train_op = tf.compat.v1.train.AdagradOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    spec = tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
    return saving.with_no_copy_saver(spec, max_to_keep=5)


def _input_fn():
    ids = tf.constant([[1, 5, 9, 63]] * 8, tf.int64)
    labels = tf.constant([1.0, 0.0] * 4)
    return tf.data.Dataset.from_tensors(({"ids": ids}, labels)).repeat()


def _files_of(model_dir, step):
    prefix = os.path.join(model_dir, "model.ckpt-%d" % step)
    return {path: os.stat(path).st_mtime_ns for path in tf.io.gfile.glob(prefix + ".*")}


class NoCopySaverTest(tf.test.TestCase):

    def _estimator(self, model_dir):
        return tf.estimator.Estimator(_model_fn, model_dir, config=tf.estimator.RunConfig(
            save_checkpoints_steps=1000, tf_random_seed=1))

    def test_a_resumed_run_does_not_rewrite_the_checkpoint_it_restored(self):
        model_dir = self.create_tempdir().full_path
        self._estimator(model_dir).train(_input_fn, max_steps=STEPS)
        saved = _files_of(model_dir, STEPS)
        self.assertNotEmpty(saved)
        # The Estimator's saver hook saves at the start of every session: before, the checkpoint of step 3 again.
        os.utime(model_dir)
        for path in saved:
            os.utime(path, ns=(1, 1))
        untouched = _files_of(model_dir, STEPS)
        with self.assertLogs(logging.get_absl_logger(), "INFO") as logs:
            self._estimator(model_dir).train(_input_fn, max_steps=STEPS + 2)
        self.assertEqual(untouched, _files_of(model_dir, STEPS))
        self.assertNotEmpty(_files_of(model_dir, STEPS + 2))
        self.assertEqual(os.path.join(model_dir, "model.ckpt-%d" % (STEPS + 2)), tf.train.latest_checkpoint(model_dir))
        restored = [line for line in logs.output if ":restored " in line]
        self.assertLen(restored, 1, logs.output)
        self.assertRegex(restored[0], r"restored \S*model\.ckpt-3 in \d+\.\d\d s")
        self.assertEqual(tf.train.load_variable(model_dir, "global_step"), STEPS + 2)

    def test_a_save_after_a_step_is_written(self):
        with tf.Graph().as_default():
            step = tf.compat.v1.train.get_or_create_global_step()
            value = tf.compat.v1.get_variable("value", [2], initializer=tf.compat.v1.zeros_initializer())
            advance = tf.group(step.assign_add(1), value.assign_add([1.0, 2.0]))
            saver = saving.no_copy_saver(max_to_keep=5)
            prefix = os.path.join(self.create_tempdir().full_path, "model.ckpt")
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                first = saver.save(session, prefix, global_step=step)
                saver.restore(session, first)
                session.run(advance)
                # The step moved: the same saver writes the new state.
                second = saver.save(session, prefix, global_step=step)
                self.assertEqual(prefix + "-1", second)
                self.assertAllEqual([1.0, 2.0], tf.train.load_variable(second, "value"))
                # A restore then a save at that step returns it unwritten; the next save writes again.
                saver.restore(session, first)
                self.assertEqual(first, saver.save(session, prefix, global_step=0))
                os.remove(first + ".index")
                saver.restore(session, second)
                session.run(advance)
                self.assertEqual(prefix + "-2", saver.save(session, prefix, global_step=step))
                self.assertAllEqual([2.0, 4.0], tf.train.load_variable(prefix + "-2", "value"))


if __name__ == "__main__":
    tf.test.main()
