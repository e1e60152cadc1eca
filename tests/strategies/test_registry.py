"""Tests of the registry: every strategy by name, `auto` resolved before anything is built, configs from flat values."""

import tensorflow as tf

import strategies
from strategies import auto, horovod, mirrored, options, ps, registry, single, tower
from strategies import strategy_names as names


class RegistryTest(tf.test.TestCase):

    def test_unknown_name_lists_the_valid_ones(self):
        with self.assertRaisesRegex(ValueError, "--strategy must be one of .*single.* got 'nope'"):
            strategies.get(strategies.StrategyConfig(name="nope"))

    def test_every_name_is_registered_once(self):
        self.assertEqual(sorted(names.ALL), strategies.names())
        with self.assertRaisesRegex(ValueError, "strategy 'single' is registered twice"):
            registry.register(names.SINGLE)(type("Again", (strategies.Strategy,), {}))
        with self.assertRaisesRegex(ValueError, "strategy 'auto' is registered twice"):
            registry.register_choice(names.AUTO)(lambda: (names.SINGLE, "again"))

    def test_every_adapter_runs_under_its_own_name(self):
        for name in strategies.names():
            self.assertEqual(strategies.resolve(name), strategies.adapter_class(name).name)
            if name != names.AUTO:
                self.assertEqual(name, strategies.resolve(name))

    def test_each_adapter_has_its_own_options(self):
        self.assertIs(strategies.options_class(names.SINGLE), single.SingleOptions)
        self.assertIs(strategies.options_class(names.AUTO), options.NoOptions)
        self.assertIs(strategies.options_class(names.TOWER), tower.TowerOptions)
        self.assertIs(strategies.options_class(names.MIRRORED), mirrored.MirroredOptions)
        self.assertIs(strategies.options_class(names.PS), ps.PSOptions)
        self.assertIs(strategies.options_class(names.HOROVOD), horovod.HorovodOptions)

    def test_options_of_another_adapter_are_refused(self):
        with self.assertRaisesRegex(ValueError, "strategy 'tower' takes TowerOptions options, got PSOptions"):
            strategies.get(strategies.StrategyConfig(name=names.TOWER, options=ps.PSOptions()))

    def test_missing_options_mean_the_defaults(self):
        strategy = strategies.get(strategies.StrategyConfig(name=names.TOWER))
        self.assertEqual(tower.TowerOptions(), strategy._options)

    def test_make_config_sorts_the_values_and_names_the_owners_of_others(self):
        config = strategies.make_config(names.TOWER, num_devices=2, device_type="cpu")
        self.assertEqual((names.TOWER, "cpu", tower.TowerOptions(num_devices=2)),
                         (config.name, config.device_type, config.options))
        with self.assertRaisesRegex(ValueError, "--ps_towers applies to --strategy ps, not single"):
            strategies.make_config(names.SINGLE, ps_towers=2)
        with self.assertRaisesRegex(ValueError, "'bogus' is no option of any strategy"):
            strategies.make_config(names.SINGLE, bogus=1)

    def test_building_touches_nothing(self):
        for name in strategies.names():
            if name in (names.PS,):  # needs a TF_CONFIG, which it reads only (tests/strategies/test_ps.py)
                continue
            strategy = strategies.get(strategies.StrategyConfig(name=name))
            with self.assertRaises(strategies.LifecycleError, msg=name):
                strategy.input_plan()


class AutoTest(tf.test.TestCase):
    """`auto` is resolved in the registry: `get` builds the adapter it picks, and no class stands in for it."""

    def test_get_builds_the_adapter_auto_picks(self):
        picked, _ = auto.pick()
        strategy = strategies.get(strategies.StrategyConfig(name=names.AUTO))
        self.assertIs(strategies.adapter_class(picked), type(strategy))
        self.assertEqual(picked, strategy.name)
        self.assertEqual(picked, strategy.config.name)

    def test_options_go_to_the_picked_adapter(self):
        picked, _ = auto.pick()
        own = [field for field in strategies.options_class(picked).__dataclass_fields__]
        config = strategies.make_config(names.AUTO, device_type="cpu")
        self.assertEqual(names.AUTO, config.name)
        self.assertIsInstance(config.options, strategies.options_class(picked))
        self.assertEqual(own, list(type(config.options).__dataclass_fields__))


if __name__ == "__main__":
    tf.test.main()
