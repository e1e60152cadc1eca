"""Tests of a strategy's lifecycle: `setup()` then `prepare(plan)`, each once; anything earlier fails, naming the step.

Parameterized over every adapter: each member `lifecycle.STAGE_OF` names is
called before the step it needs and must raise `LifecycleError` naming that
step, for the adapter's own overrides too.
"""

import contextlib
import inspect
import io
import json
import os
import re

import tensorflow as tf
from absl.testing import parameterized

import strategies
from strategies import cluster as cluster_lib
from strategies import horovod_controllers, lifecycle, single
from strategies import strategy_names as names
from tests import paths

TRAIN = tf.estimator.ModeKeys.TRAIN
STRATEGIES_DOC = os.path.join(paths.REPO_ROOT, "docs", "strategies.md")
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
# A cluster nothing listens on: building, setting up and preparing a `ps` task starts no server.
CLUSTER = {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]}
# What each member that takes arguments is called with (the check comes first, so they are never used).
ARGUMENTS = {"_embedding_factory": (TRAIN,), "model_context": (TRAIN,), "_replicate": (None,), "agree_max": (None,),
             "_agree_max_op": (None, "unused"), "wrap_model_fn": (None,)}
STRATEGIES = (
    ("single", names.SINGLE, {}, None),
    ("tower", names.TOWER, dict(num_devices=2, device_type="cpu"), None),
    ("mirrored", names.MIRRORED, dict(num_devices=2, device_type="cpu"), None),
    ("ps_chief", names.PS, {}, "chief"),
    ("ps_towers", names.PS, dict(ps_towers=2), "worker"),
    ("horovod", names.HOROVOD, {}, None),
    ("hybrid", names.HYBRID, {}, None),
)


def _with_tf_config(test_case, task_type):
    """Sets a `TF_CONFIG` of `CLUSTER` for the test (restored afterwards)."""
    previous = os.environ.get(cluster_lib.TF_CONFIG_VARIABLE)
    test_case.addCleanup(lambda: os.environ.pop(cluster_lib.TF_CONFIG_VARIABLE, None) if previous is None
                         else os.environ.__setitem__(cluster_lib.TF_CONFIG_VARIABLE, previous))
    os.environ[cluster_lib.TF_CONFIG_VARIABLE] = json.dumps({"cluster": CLUSTER,
                                                             "task": {"type": task_type, "index": 0}})


def _build(test_case, name, options, task_type):
    if name in (names.HOROVOD, names.HYBRID):
        try:
            horovod_controllers.import_horovod()
        except ImportError as e:
            test_case.skipTest("Horovod is not installed: %s" % e)
    if task_type:
        _with_tf_config(test_case, task_type)
    return strategies.get(strategies.make_config(name, **options))


def _call(strategy, member):
    """Calls (or reads) `member` of `strategy` with `ARGUMENTS`."""
    if isinstance(inspect.getattr_static(type(strategy), member), property):
        return getattr(strategy, member)
    if member == "prepare":
        return strategy.prepare(strategies.Plan(model_dir="unused"))
    return getattr(strategy, member)(*ARGUMENTS.get(member, ()))


class LifecycleTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(*STRATEGIES)
    def test_every_member_fails_before_its_step_naming_it(self, name, options, task_type):
        strategy = _build(self, name, options, task_type)
        for stage in (lifecycle.SET_UP, lifecycle.PREPARED):
            if stage == lifecycle.PREPARED:
                strategy.setup()
            for member, needed in sorted(lifecycle.STAGE_OF.items()):
                if needed != stage:
                    continue
                with self.assertRaises(strategies.LifecycleError, msg=member) as raised:
                    _call(strategy, member)
                self.assertIn(lifecycle.STEP_TO_REACH[stage], str(raised.exception), member)
                self.assertIn(member, str(raised.exception))

    @parameterized.named_parameters(*STRATEGIES)
    def test_setup_then_prepare_makes_every_member_answer(self, name, options, task_type):
        strategy = _build(self, name, options, task_type)
        topology = strategy.setup()
        self.assertIs(topology, strategy.setup(), "setup() again returns the same topology")
        self.assertIs(topology, strategy.topology)
        plan = strategies.Plan(model_dir=self.create_tempdir().full_path, steps_per_worker=10, per_replica_batch=32,
                               save_checkpoints_steps=5, seed=3, resume_step=4)
        strategy.prepare(plan)
        run = strategy.run
        self.assertIs(plan, run.plan)
        self.assertEqual(strategy.input_plan().global_max_steps(10), run.max_steps)
        self.assertEqual(4 if topology.is_chief else 0, run.start_step)
        self.assertEqual(run.checkpoint_dir, run.run_config.model_dir)
        self.assertEqual(5, run.run_config.save_checkpoints_steps)
        self.assertIsInstance(run.train_hooks, tuple)
        self.assertIsInstance(strategy.model_context(TRAIN), strategies.ModelContext)
        self.assertNotEmpty(strategy.describe())

    def test_prepare_again_with_the_same_plan_does_nothing_and_with_another_raises(self):
        strategy = strategies.get(strategies.StrategyConfig())
        strategy.setup()
        plan = strategies.Plan(model_dir=self.create_tempdir().full_path, steps_per_worker=10)
        strategy.prepare(plan)
        strategy.prepare(strategies.Plan(model_dir=plan.model_dir, steps_per_worker=10))
        self.assertIs(plan, strategy.run.plan)
        with self.assertRaisesRegex(ValueError, "prepared for .* already; build a new strategy"):
            strategy.prepare(strategies.Plan(model_dir=plan.model_dir, steps_per_worker=20))

    def test_setup_validates_once(self):
        calls = []

        class Counting(single.SingleStrategy):
            def _validate(self):
                calls.append(1)
                super()._validate()

        strategy = Counting(strategies.StrategyConfig())
        strategy.setup()
        strategy.setup()
        self.assertEqual([1], calls)

    def test_an_adapter_override_is_guarded_too(self):
        class Override(single.SingleStrategy):
            def input_plan(self):
                return "reached"

            def _replicate(self, model_fn):
                return "reached"

        for member in ("input_plan", "_replicate"):
            with self.assertRaisesRegex(strategies.LifecycleError, r"%s\(\) needs the process set up" % member):
                _call(Override(strategies.StrategyConfig()), member)

    def test_the_run_settings_are_the_plan_s(self):
        strategy = strategies.get(strategies.StrategyConfig())
        strategy.setup()
        model_dir = self.create_tempdir().full_path
        strategy.prepare(strategies.Plan(model_dir=model_dir, steps_per_worker=10, keep_checkpoint_max=2))
        run = strategy.run
        self.assertEqual((model_dir, model_dir, 2, 10, 0), (run.checkpoint_dir, run.run_config.model_dir,
                                                           run.run_config.keep_checkpoint_max, run.max_steps,
                                                           run.start_step))


class DocumentedLifecycleTest(tf.test.TestCase):

    def test_the_example_of_docs_strategies_runs(self):
        with open(STRATEGIES_DOC) as f:
            (source,) = [block for block in CODE_BLOCK.findall(f.read()) if "strategy.prepare(" in block]
        output = io.StringIO()
        previous = os.getcwd()
        os.chdir(self.create_tempdir().full_path)
        self.addCleanup(os.chdir, previous)
        with contextlib.redirect_stdout(output):
            exec(compile(source, STRATEGIES_DOC, "exec"), {})
        self.assertEqual(["2 True", "100 runs/lifecycle"], output.getvalue().splitlines())


class PlanTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("no_model_dir", dict(model_dir=""), "a Plan needs the model directory"),
        ("steps", dict(steps_per_worker=0), "Plan.steps_per_worker must be >= 1 or None, got 0"),
        ("batch", dict(per_replica_batch=-1), "Plan.per_replica_batch must be >= 1 or None, got -1"),
        ("checkpoints", dict(save_checkpoints_steps=0), "Plan.save_checkpoints_steps must be >= 1, got 0"),
        ("resume", dict(resume_step=-1), "Plan.resume_step must be >= 0 or None, got -1"),
    )
    def test_bad_value_is_named(self, fields, message):
        with self.assertRaisesRegex(ValueError, message):
            strategies.Plan(**dict(dict(model_dir="m"), **fields))


if __name__ == "__main__":
    tf.test.main()
