"""Tests of the strategy interface: the registry and the shared options."""

import tensorflow as tf

import strategies


class RegistryTest(tf.test.TestCase):

    def test_unknown_name_lists_the_valid_ones(self):
        with self.assertRaisesRegex(ValueError, "--strategy must be one of .*single.* got 'nope'"):
            strategies.get(strategies.StrategyConfig(name="nope"))

    def test_bad_option_is_named(self):
        strategy = strategies.get(strategies.StrategyConfig(name="single", lr_scaling="cubic"))
        with self.assertRaisesRegex(ValueError, "--lr_scaling must be one of none, linear, sqrt, capped, got 'cubic'"):
            strategy.validate()


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
        params = strategy.model_params({})
        with tf.Graph().as_default():
            wrapped = params["optimizer_wrapper"](tf.compat.v1.train.GradientDescentOptimizer(0.1))
        self.assertIn("LossScale", type(wrapped).__name__)


if __name__ == "__main__":
    tf.test.main()
