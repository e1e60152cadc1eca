"""Tests of the `Strategy` interface: its small public surface, its abstract core, the defaults of one process."""

import inspect

import tensorflow as tf

import strategies
from strategies import strategy as strategy_lib
from strategies import strategy_names as names

# The most public members `Strategy` may have (class members and the attributes an instance sets).
MAX_PUBLIC_MEMBERS = 15
# What every adapter must define.
ABSTRACT_CORE = frozenset(("_set_up", "_embedding_factory", "_replicate", "describe"))


def _prepared(test_case, **config):
    strategy = strategies.get(strategies.StrategyConfig(**config))
    strategy.setup()
    strategy.prepare(strategies.Plan(model_dir=test_case.create_tempdir().full_path, per_replica_batch=16,
                                     save_checkpoints_steps=9, log_every_n_steps=3, seed=5))
    return strategy


def _public_members(strategy: strategy_lib.Strategy):
    """The public names of `Strategy`: its class's and those an instance of `strategy`'s adapter sets itself."""
    own = {name for name in vars(strategy) if not name.startswith("_")}
    return sorted({name for name in dir(strategy_lib.Strategy) if not name.startswith("_")} | own)


class SurfaceTest(tf.test.TestCase):

    def test_the_public_surface_stays_small(self):
        members = _public_members(strategies.get(strategies.StrategyConfig(name=names.SINGLE)))
        self.assertLessEqual(len(members), MAX_PUBLIC_MEMBERS, members)

    def test_the_adapter_s_part_is_abstract(self):
        self.assertTrue(inspect.isabstract(strategy_lib.Strategy))
        self.assertEqual(ABSTRACT_CORE, frozenset(strategy_lib.Strategy.__abstractmethods__))
        with self.assertRaisesRegex(TypeError, "abstract"):
            strategy_lib.Strategy(strategies.StrategyConfig())  # type: ignore[abstract]

    def test_every_registered_adapter_defines_the_core_and_builds(self):
        for name in strategies.names():
            adapter = strategies.adapter_class(name)
            self.assertFalse(inspect.isabstract(adapter), "%s leaves %s undefined" % (
                adapter.__name__, sorted(getattr(adapter, "__abstractmethods__", ()))))
            # Building touches nothing (a `ps` task without TF_CONFIG is refused at setup()).
            self.assertIsInstance(strategies.get(strategies.StrategyConfig(name=name)), adapter)


class DefaultsTest(tf.test.TestCase):

    def test_the_run_config_comes_from_the_plan(self):
        strategy = _prepared(self, intra_op_threads=2)
        run = strategy.run
        run_config = run.run_config
        self.assertEqual((run.plan.model_dir, 9, 3, 3, 5, 5), (
            run_config.model_dir, run_config.save_checkpoints_steps, run_config.save_summary_steps,
            run_config.log_step_count_steps, run_config.tf_random_seed, run_config.keep_checkpoint_max))
        self.assertEqual(2, run_config.session_config.intra_op_parallelism_threads)
        self.assertEqual((), run.train_hooks)

    def test_the_input_plan_of_one_process_reads_every_row(self):
        strategy = strategies.get(strategies.StrategyConfig(train_channels=("train_0", "train_1")))
        strategy.setup()
        plan = strategy.input_plan()
        self.assertEqual((1, 0, 1), (plan.context.num_input_pipelines, plan.context.input_pipeline_id,
                                     plan.context.num_replicas_in_sync))
        self.assertEqual((64, 1, "train_0", 10), (plan.batch_per_input_pipeline(64), plan.batches_per_step,
                                                  plan.pipe_channel(), plan.global_max_steps(10)))
        with self.assertRaisesRegex(ValueError, "--input_mode pipe needs --train_channels"):
            _prepared(self).input_plan().pipe_channel()

    def test_a_process_alone_agrees_with_itself_without_a_graph(self):
        strategy = _prepared(self)
        self.assertFalse(strategy.topology.lockstep)
        self.assertEqual(7, strategy.agree_max(7))
        self.assertEqual((7, 2), strategy.agree_max([7, 2]))
        with tf.Graph().as_default():
            value = tf.constant(3)
            self.assertIs(value, strategy.agree_max(value))

    def test_the_strategy_context_reaches_the_model_fn(self):
        seen = []

        def model_fn(features, labels, mode, params):
            seen.append(strategies.ModelContext.of(params))
            return None
        strategy = _prepared(self)
        strategy.wrap_model_fn(model_fn)({}, None, tf.estimator.ModeKeys.TRAIN, {"model": 1})
        self.assertEqual(1, len(seen))
        self.assertIsInstance(seen[0], strategies.ModelContext)
        self.assertEqual(1.0, seen[0].learning_rate_factor)

    def test_the_plan_gives_a_large_batch_rule_its_batch(self):
        strategy = _prepared(self, large_batch_rule="cowclip")
        self.assertEqual(16, strategy.model_context(tf.estimator.ModeKeys.TRAIN).large_batch.global_batch)

    def test_describes_its_topology(self):
        self.assertEqual("single: 1 replica(s) in sync, 1 worker(s)", _prepared(self).describe())
        self.assertEqual(names.SINGLE, _prepared(self).name)


class MixedPrecisionTest(tf.test.TestCase):

    def test_amp_without_a_gpu_is_refused_at_setup(self):
        if tf.config.list_physical_devices("GPU"):
            self.skipTest("a GPU is visible: --amp is allowed here")
        strategy = strategies.get(strategies.StrategyConfig(name="single", amp=True))
        with self.assertRaisesRegex(ValueError, "--amp .* needs a GPU"):
            strategy.setup()

    def test_amp_wraps_the_optimizer_on_a_gpu(self):
        if not tf.config.list_physical_devices("GPU"):
            self.skipTest("needs a GPU: the mixed-precision graph rewrite only acts on GPUs")
        strategy = strategies.get(strategies.StrategyConfig(name="single", amp=True))
        strategy.setup()
        context = strategy.model_context(tf.estimator.ModeKeys.TRAIN)
        with tf.Graph().as_default():
            wrapped = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            for wrap in context.optimizer_wrappers:
                wrapped = wrap(wrapped)
        self.assertIn("LossScale", type(wrapped).__name__)


if __name__ == "__main__":
    tf.test.main()
