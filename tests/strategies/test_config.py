"""Tests of `StrategyConfig`: the options every adapter reads, each checked where it is held."""

import tensorflow as tf
from absl.testing import parameterized

import strategies


class StrategyConfigTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("device_type", dict(device_type="tpu"), "--device_type must be one of"),
        ("threads", dict(intra_op_threads=-1), "--intra_op_threads must be >= 0"),
        ("channels", dict(train_channels=("a", "a")), "lists a channel twice"),
        ("large_batch_rule", dict(large_batch_rule="lars"), "--large_batch_rule must be one of"),
    )
    def test_bad_value_is_named(self, values, message):
        with self.assertRaisesRegex(ValueError, message):
            strategies.StrategyConfig(**values)

    def test_pipe_mode_is_told_by_the_channels(self):
        self.assertFalse(strategies.StrategyConfig().pipe_mode)
        config = strategies.StrategyConfig(train_channels=["train_0", "train_1"])
        self.assertTrue(config.pipe_mode)
        self.assertEqual(("train_0", "train_1"), config.train_channels)


if __name__ == "__main__":
    tf.test.main()
