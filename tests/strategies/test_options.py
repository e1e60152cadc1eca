"""Tests of how adapters declare their options: each value checked once, by the dataclass that holds it."""

import dataclasses

import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import horovod, mirrored, options, ps, tower


class OptionTest(tf.test.TestCase):

    def test_a_field_carries_its_flag_help_and_choices(self):
        @dataclasses.dataclass(frozen=True)
        class Some:
            color: str = options.option("red", "The color.", choices=("red", "blue"))
            size: int = options.option(3, "The size.")

        color, size = dataclasses.fields(Some)
        self.assertEqual(("red", "The color.", ("red", "blue")),
                         (color.default, color.metadata[options.HELP], color.metadata[options.CHOICES]))
        self.assertNotIn(options.CHOICES, size.metadata)

    def test_checks_name_the_flag_and_the_value(self):
        with self.assertRaisesRegex(ValueError, "--color must be one of red, blue, got 'green'"):
            options.check_choice("color", "green", ("red", "blue"))
        with self.assertRaisesRegex(ValueError, "--size must be >= 1, got 0"):
            options.check_at_least("size", 0, 1)
        options.check_at_least("size", 1, 1)


class AdapterOptionChecksTest(tf.test.TestCase, parameterized.TestCase):
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
    )
    def test_bad_value_is_named(self, build, message):
        with self.assertRaisesRegex(ValueError, message):
            build()

    def test_every_option_field_has_help(self):
        for name in strategies.names():
            for field in dataclasses.fields(strategies.options_class(name)):
                self.assertNotEmpty(field.metadata.get(options.HELP), "%s.%s" % (name, field.name))


if __name__ == "__main__":
    tf.test.main()
