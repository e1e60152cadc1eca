"""Tests of `deepfm.runtime.preflight.check_memory`: the memory check before a run writes anything.

In-process, the real strategies and the real model graph are checked
against a given figure of what the process may use; through `python -m
deepfm.train`, a real memory cgroup gives the limit, and the same run
without the check shows what the check prevents: the kernel's OOM kill.
"""

import io
import math
import os
from unittest import mock

import pytest
import tensorflow as tf

import strategies
from dataprep import synthetic
from deepfm import config, job_config, models
from deepfm.models import ctr
from deepfm.runtime import console as console_lib
from deepfm.runtime import preflight, trainer
from input_pipeline import files, pipeline
from strategies import host_memory, memory_estimate, topology
from tests import command_line
from tests.strategies import memory_cgroup, test_ps

FEATURE_SIZE = 100_000
FIELD_SIZE = 39
BATCH = 256
SOURCE = "the figure a test gives"
PLENTY = 10 ** 12
# The run in a memory cgroup: 3M ids x 33 floats x 4 bytes x 3 (lazy_adam) = 1.19 GB of state in 1 GiB.
CGROUP_FEATURE_SIZE = 3_000_000
CGROUP_LIMIT_BYTES = 1024 ** 3
CGROUP_ROWS = 2_000
CGROUP_DATA_FEATURES = 1_000
KILLED = -9
TIMEOUT_S = 300


def a_model(**overrides):
    values = dict(feature_size=FEATURE_SIZE, field_size=FIELD_SIZE, embedding_size=8, deep_layers=(16, 8),
                  dropout=(0.0, 0.0))
    values.update(overrides)
    return config.ModelConfig(**values)


def a_run(model_dir="runs/m", export_dir=None, **overrides):
    return config.TrainConfig(model_dir=model_dir, train_files=("unused",), export_dir=export_dir, batch_size=BATCH,
                              **overrides)


def set_up(name="single"):
    strategy = strategies.get(strategies.StrategyConfig(name=name))
    strategy.setup()
    return strategy


def state_of(model):
    return memory_estimate.model_state(models.get(model.model), ctr.model_params(model), model.field_size)


def a_console():
    stream = io.StringIO()
    return console_lib.Console(stream=stream, live=False), stream


class CheckMemoryTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.model = a_model()
        cls.state = state_of(cls.model)
        cls.ids = BATCH * FIELD_SIZE
        cls.whole = memory_estimate.whole_model(cls.state)

    def check(self, strategy, budget, train=None, console=None):
        return preflight.check_memory(train or a_run(), self.model, strategy, models.get(self.model.model), console,
                                      memory=host_memory.HostMemory(budget, SOURCE))

    def test_a_process_that_fits_passes_and_its_chief_exports(self):
        self.assertTrue(self.check(set_up(), PLENTY, a_run(export_dir="runs/m/export")))

    def test_the_refusal_says_in_one_line_what_is_needed_what_is_available_and_what_fits(self):
        budget = self.whole.needed - 1
        with self.assertRaises(ValueError) as refused:
            self.check(set_up(), budget)
        message = str(refused.exception)
        self.assertNotIn("\n", message)
        self.assertStartsWith(message, "not enough memory for --strategy single, process main: it needs an "
                                       "estimated %s, and %s is available (%s)"
                              % (self.whole.describe(), memory_estimate.format_bytes(budget), SOURCE))
        # The first count of each strategy that fits, counted one by one.
        hybrid = strategies.get(strategies.StrategyConfig(name="hybrid"))
        ps = test_ps.make_strategy(self, "chief")
        for name, strategy, phrase in (("hybrid", hybrid, "at %d rank(s)"), ("ps", ps, "with %d parameter server(s)")):
            count = next(count for count in range(1, memory_estimate.MAX_SCALE + 1)
                         if memory_estimate.largest(strategy.memory(self.state, self.ids).estimates(count)).needed
                         <= budget)
            self.assertGreater(count, 1)
            self.assertIn("%s %s" % (name, phrase % count), message)
        self.assertIn("nothing was written to --model_dir 'runs/m'", message)
        self.assertIn("--check_memory=false", message)

    def test_nothing_fits_when_a_host_holds_less_than_the_runtime(self):
        with self.assertRaisesRegex(ValueError, "no strategy fits in up to %d hosts like this one"
                                    % memory_estimate.MAX_SCALE):
            self.check(set_up(), memory_estimate.RUNTIME_BYTES)

    def test_an_estimate_within_a_tenth_of_the_limit_warns(self):
        console, stream = a_console()
        self.assertTrue(self.check(set_up(), math.ceil(self.whole.needed / 0.95), console=console))
        self.assertIn("within 10% of the limit", stream.getvalue())
        console, stream = a_console()
        self.check(set_up(), math.ceil(self.whole.needed / 0.85), console=console)
        self.assertEqual("", stream.getvalue())

    def test_a_ps_chief_whose_host_cannot_hold_the_weights_leaves_the_export_to_the_export_command(self):
        chief = test_ps.set_up_strategy(self, "chief")
        own = chief.memory(self.state, self.ids).estimates()[topology.ROLE_WORKER]
        export = memory_estimate.export_memory(self.state)
        self.assertLess(own.needed, export.needed)
        console, stream = a_console()
        train = a_run(export_dir="runs/m/export")
        self.assertFalse(self.check(chief, export.needed - 1, train, console))
        self.assertIn("this host cannot hold the model's weights for the export", stream.getvalue())
        self.assertIn("python -m deepfm.export --model_dir runs/m --export_dir runs/m/export", stream.getvalue())
        self.assertTrue(self.check(chief, export.needed, train))
        self.assertTrue(self.check(chief, export.needed - 1, a_run()))

    def test_a_parameter_server_is_refused_before_it_serves(self):
        server = test_ps.set_up_strategy(self, "ps", 1)
        needed = server.memory(self.state, self.ids).estimates()[topology.ROLE_PS].needed
        with self.assertRaisesRegex(ValueError, "not enough memory for --strategy ps, process ps_1"):
            self.check(server, needed - 1)
        self.assertTrue(self.check(server, needed))


class TrainerExportTest(tf.test.TestCase):

    def test_the_trainer_skips_the_export_the_memory_check_left_to_the_export_command(self):
        root = self.get_temp_dir()
        data = os.path.join(root, "data")
        synthetic.generate(CGROUP_ROWS, data, feature_size=CGROUP_DATA_FEATURES, seed=1, shards=1)
        model_dir = os.path.join(root, "model")
        train = config.TrainConfig(model_dir=model_dir, train_files=tuple(files.resolve([data], "tfrecord")),
                                   export_dir=os.path.join(root, "export"), batch_size=BATCH, max_steps=3)
        model = a_model(feature_size=CGROUP_DATA_FEATURES)
        with mock.patch.object(preflight, "check_memory", return_value=False) as check, \
                self.assertLogs(level="WARNING") as logs:
            strategy = set_up()
            result = trainer.run(job_config.JobConfig(train=train, model=model, input=pipeline.PipelineConfig(),
                                                      strategy=strategy.config), strategy)
        check.assert_called_once()
        self.assertIsNone(result.export_path)
        self.assertFalse(os.path.exists(train.export_dir))
        self.assertIn("not exported in-process", "\n".join(logs.output))
        self.assertTrue(tf.train.latest_checkpoint(model_dir))


@pytest.mark.slow
class MemoryCgroupTest(tf.test.TestCase):
    """`python -m deepfm.train` of a model larger than its memory cgroup: refused, or killed without the check."""

    def test_the_refusal_comes_before_anything_is_allocated_or_written(self):
        cwd = self.get_temp_dir()
        synthetic.generate(CGROUP_ROWS, os.path.join(cwd, "data"), feature_size=CGROUP_DATA_FEATURES, seed=1,
                           shards=1)
        os.makedirs(os.path.join(cwd, "checked"))
        os.makedirs(os.path.join(cwd, "unchecked"))

        def train(model_dir, *flags):
            return " ".join(command_line.python_module(
                "deepfm.train", "--train_data", "data", "--model_dir", model_dir, "--feature_size",
                str(CGROUP_FEATURE_SIZE), "--max_steps", "5", *flags))
        with memory_cgroup.limited(self, CGROUP_LIMIT_BYTES) as cgroup:
            refused = command_line.run(cgroup.inside(train("checked")), cwd, timeout=TIMEOUT_S)
            self.assertEqual(1, refused.returncode, command_line.describe(train("checked"), refused))
            self.assertEqual(0, cgroup.oom_kills())
            unchecked = command_line.run(cgroup.inside(train("unchecked", "--check_memory=false")), cwd,
                                         timeout=TIMEOUT_S)
            oom_kills = cgroup.oom_kills()
        self.assertRegex(refused.stderr, r"deepfm\.train: error: not enough memory for --strategy single, process "
                                         r"main: it needs an estimated [\d.]+ GB \(1\.3 x \(variables [\d.]+ MB \+ "
                                         r"slots [\d.]+ MB\) .*\), and 1\.07 GB is available \(the memory cgroup limit "
                                         r"in .*\); what fits in hosts like this one, one process each: .*hybrid at "
                                         r"\d+ rank\(s\)")
        self.assertEqual([], os.listdir(os.path.join(cwd, "checked")))
        # Without the check the same run is killed by the kernel once it allocates the model.
        self.assertEqual(KILLED, unchecked.returncode, command_line.describe("--check_memory=false", unchecked))
        self.assertEqual(1, oom_kills)


if __name__ == "__main__":
    tf.test.main()
