"""Tests of `ModelContext`: what a model_fn receives from its strategy, and what it builds with it."""

import dataclasses

import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import context as context_lib
from strategies import large_batch as large_batch_lib


class ModelContextTest(tf.test.TestCase, parameterized.TestCase):

    def test_a_model_fn_outside_the_library_gets_the_single_device_defaults(self):
        self.assertEqual(strategies.ModelContext(), strategies.ModelContext.of({"model": 1}))
        self.assertEqual(strategies.ModelContext(), strategies.ModelContext.of(None))

    def test_something_else_under_the_key_is_refused(self):
        with self.assertRaisesRegex(TypeError, "must be a ModelContext"):
            strategies.ModelContext.of({context_lib.MODEL_CONTEXT_PARAM: "not a context"})

    @parameterized.parameters(False, True)
    def test_context_lookup_equals_each_tables_lookup(self, large_batch):
        with tf.Graph().as_default():
            ids = tf.constant([[3, 1, 3], [0, 3, 2]])
            context = strategies.ModelContext()
            if large_batch:
                context = dataclasses.replace(context, large_batch=large_batch_lib.make_rule(
                    large_batch_lib.COWCLIP, global_batch=8, base_batch=4))
            table, weights = context.embedding("t", 5, [2]), context.embedding("w", 5)
            together = context.lookup([table, weights], ids)
            separate = [table.lookup(ids), weights.lookup(ids)]
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                got, want = session.run([together, separate])
            with self.assertRaisesRegex(ValueError, "at least one table"):
                context.lookup([], ids)
        self.assertEqual([(2, 3, 2), (2, 3)], [rows.shape for rows in got])
        for got_rows, want_rows in zip(got, want):
            self.assertAllEqual(want_rows, got_rows)

    def test_minimize_scales_the_rate_and_applies_the_wrappers_in_order(self):
        calls = []

        def first(optimizer):
            calls.append(("first", optimizer._learning_rate))
            return optimizer

        def second(optimizer):
            calls.append(("second", optimizer._learning_rate))
            return optimizer
        context = strategies.ModelContext(learning_rate_factor=1.5, optimizer_wrappers=(first, second))
        with tf.Graph().as_default():
            variable = tf.compat.v1.get_variable("x", initializer=2.0)
            train_op = context.minimize(tf.square(variable), tf.compat.v1.train.GradientDescentOptimizer, 0.1)
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train_op)
                value, step = session.run([variable, tf.compat.v1.train.get_global_step()])
        self.assertEqual([("first", 0.15), ("second", 0.15)], [(n, round(lr, 6)) for n, lr in calls])
        self.assertAllClose(2.0 - 0.15 * 4.0, value)
        self.assertEqual(1, step)

    def test_eval_metric_ops_reports_the_metric_function_to_the_sink(self):
        recorded = []
        context = strategies.ModelContext(metric_sink=recorded.append)

        def metric_fn(labels, predictions):
            return {"mean": tf.compat.v1.metrics.mean(predictions["p"])}
        with tf.Graph().as_default():
            ops = context.eval_metric_ops(metric_fn, tf.constant([1.0]), {"p": tf.constant([0.5])})
        self.assertEqual([metric_fn], recorded)
        self.assertEqual(["mean"], list(ops))



if __name__ == "__main__":
    tf.test.main()
