"""Tests of the strategy interface: the registry, the options, and the `ModelContext` a model_fn gets."""

import dataclasses

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import base, horovod, mirrored, ps, tower
from strategies import large_batch as large_batch_lib
from strategies import strategy_names as names


class RegistryTest(tf.test.TestCase):

    def test_unknown_name_lists_the_valid_ones(self):
        with self.assertRaisesRegex(ValueError, "--strategy must be one of .*single.* got 'nope'"):
            strategies.get(strategies.StrategyConfig(name="nope"))

    def test_every_adapter_is_registered_under_its_name(self):
        self.assertContainsSubset([names.SINGLE, names.TOWER, names.MIRRORED, names.PS, names.HOROVOD, names.AUTO],
                                  strategies.names())
        for name in strategies.names():
            self.assertEqual(name, strategies.adapter_class(name).name)

    def test_each_adapter_has_its_own_options(self):
        self.assertIs(strategies.options_class(names.SINGLE), base.NoOptions)
        self.assertIs(strategies.options_class(names.TOWER), tower.TowerOptions)
        self.assertIs(strategies.options_class(names.MIRRORED), mirrored.MirroredOptions)
        self.assertIs(strategies.options_class(names.PS), ps.PSOptions)
        self.assertIs(strategies.options_class(names.HOROVOD), horovod.HorovodOptions)

    def test_options_of_another_adapter_are_refused(self):
        with self.assertRaisesRegex(ValueError, "strategy 'tower' takes TowerOptions options, got PSOptions"):
            strategies.get(strategies.StrategyConfig(name=names.TOWER, options=ps.PSOptions()))

    def test_missing_options_mean_the_defaults(self):
        strategy = strategies.get(strategies.StrategyConfig(name=names.TOWER))
        self.assertEqual(tower.TowerOptions(), strategy.options)


class OptionChecksTest(tf.test.TestCase, parameterized.TestCase):
    """Every value is checked once, by the dataclass that holds it, naming the flag."""

    @parameterized.named_parameters(
        ("lr_scaling", lambda: horovod.HorovodOptions(lr_scaling="cubic"),
         "--lr_scaling must be one of none, linear, sqrt, capped, got 'cubic'"),
        ("lr_scale_cap", lambda: horovod.HorovodOptions(lr_scale_cap=0.5), "--lr_scale_cap must be >= 1, got 0.5"),
        ("compression", lambda: horovod.HorovodOptions(hvd_compression="zip"), "--hvd_compression must be one of"),
        ("ps_lr_factor", lambda: ps.PSOptions(ps_lr_factor=0), "--ps_lr_factor must be > 0, got 0"),
        ("ps_towers", lambda: ps.PSOptions(ps_towers=-1), "--ps_towers must be >= 0, got -1"),
        ("num_devices", lambda: tower.TowerOptions(num_devices=-2), "--num_devices must be >= 0, got -2"),
        ("cross_device_ops", lambda: mirrored.MirroredOptions(cross_device_ops="ring"),
         "--cross_device_ops must be one of reduction_to_one_device, hierarchical_copy, nccl, got 'ring'"),
        ("device_type", lambda: strategies.StrategyConfig(device_type="tpu"), "--device_type must be one of"),
        ("threads", lambda: strategies.StrategyConfig(intra_op_threads=-1), "--intra_op_threads must be >= 0"),
        ("channels", lambda: strategies.StrategyConfig(train_channels=("a", "a")), "lists a channel twice"),
    )
    def test_bad_value_is_named(self, build, message):
        with self.assertRaisesRegex(ValueError, message):
            build()


class MixedPrecisionTest(tf.test.TestCase):

    def test_amp_without_a_gpu_is_refused_at_start(self):
        if tf.config.list_physical_devices("GPU"):
            self.skipTest("a GPU is visible: --amp is allowed here")
        strategy = strategies.get(strategies.StrategyConfig(name="single", amp=True))
        with self.assertRaisesRegex(ValueError, "--amp .* needs a GPU"):
            strategy.validate()

    def test_amp_wraps_the_optimizer_on_a_gpu(self):
        if not tf.config.list_physical_devices("GPU"):
            self.skipTest("needs a GPU: the mixed-precision graph rewrite only acts on GPUs")
        strategy = strategies.get(strategies.StrategyConfig(name="single", amp=True))
        strategy.validate()
        context = strategy.model_context(tf.estimator.ModeKeys.TRAIN)
        with tf.Graph().as_default():
            wrapped = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            for wrap in context.optimizer_wrappers:
                wrapped = wrap(wrapped)
        self.assertIn("LossScale", type(wrapped).__name__)


class ModelContextTest(tf.test.TestCase, parameterized.TestCase):

    def test_a_model_fn_outside_the_library_gets_the_single_device_defaults(self):
        self.assertEqual(strategies.ModelContext(), strategies.ModelContext.of({"model": 1}))
        self.assertEqual(strategies.ModelContext(), strategies.ModelContext.of(None))

    def test_something_else_under_the_key_is_refused(self):
        with self.assertRaisesRegex(TypeError, "must be a ModelContext"):
            strategies.ModelContext.of({base.MODEL_CONTEXT_PARAM: "not a context"})

    def test_the_strategy_context_reaches_the_model_fn(self):
        seen = []

        def model_fn(features, labels, mode, params):
            seen.append(strategies.ModelContext.of(params))
            return None
        strategy = strategies.get(strategies.StrategyConfig(name=names.SINGLE))
        strategy.wrap_model_fn(model_fn)({}, None, tf.estimator.ModeKeys.TRAIN, {"model": 1})
        self.assertEqual(1, len(seen))
        self.assertIsInstance(seen[0], strategies.ModelContext)
        self.assertEqual(1.0, seen[0].learning_rate_factor)

    @parameterized.parameters(False, True)
    def test_tables_look_up_rows_with_and_without_dedup(self, dedup):
        ids = np.array([[3, 1, 3], [0, 3, 2]], np.int64)
        with tf.Graph().as_default():
            context = dataclasses.replace(strategies.ModelContext(),
                                          embedding_factory=base.variable_tables(dedup=dedup))
            table = context.embedding("t", 5, [2], initializer=tf.compat.v1.constant_initializer(
                np.arange(10, dtype=np.float32).reshape(5, 2)))
            weights = context.embedding("w", 5)
            rows, scalars = table.lookup(tf.constant(ids)), weights.lookup(tf.constant(ids))
            self.assertEqual([2, 3, 2], rows.shape.as_list())
            self.assertEqual([2, 3], scalars.shape.as_list())
            gradient = tf.gradients(tf.reduce_sum(rows), table.variable)[0]
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                got, grad = session.run([rows, tf.convert_to_tensor(gradient)])
        self.assertAllEqual(np.arange(10).reshape(5, 2)[ids], got)
        # Row 3 appears three times, row 4 never.
        self.assertAllEqual([[1, 1], [1, 1], [1, 1], [3, 3], [0, 0]], grad)

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
