"""A model_fn the library did not write trains under every strategy, and the built-in DCN under two.

The model_fn of `examples/custom_model.py` (logistic regression plus an MLP)
and DCN (`--model dcn` of `examples/train_from_python.py`) train on the same
small planted dataset under each strategy, through the same adapters:
`single`, `tower` and `mirrored` (2 CPU replicas) in this process through
`deepfm.train_and_evaluate`; `ps` (a real gRPC cluster: 1 parameter server,
a chief and a worker), `horovod` and `hybrid` (2 real ranks, Gloo) started by
`python -m deepfm.launch --program <example>`, which runs the example script
in every process. Each reaches an AUC floor, and its checkpoint holds that
model's variables. DCN trains under `single` and `hybrid` only: the
built-in models reach a strategy through one wrapper
(`ctr.network_model_fn`), whose DeepFM the tests of every strategy train
(tests/strategies), and `hybrid` is the one that swaps a model's tables for
sharded ones.
"""

import json
import os

import pytest
import tensorflow as tf
from absl.testing import parameterized

import deepfm
from tests.examples import examples_testing
from tests.jobs.local import launch_testing

CUSTOM = "custom"
DCN = "dcn"
MODELS = (CUSTOM, DCN)
# The example script that trains each model, its flags beyond the data and the tiny model's,
# and the variable scope of its checkpoint.
MODEL_SCRIPTS = {CUSTOM: "custom_model", DCN: "train_from_python"}
MODEL_ARGS = {CUSTOM: [], DCN: ["--model", "dcn"]}
MODEL_SCOPES = {CUSTOM: "wide_mlp", DCN: "dcn_model"}
TWO_CPU_REPLICAS = ["--num_devices", "2", "--device_type", "cpu"]
# The strategies of one process, trained here: their options (flags of the example).
IN_PROCESS = {"single": [], "tower": TWO_CPU_REPLICAS, "mirrored": TWO_CPU_REPLICAS}
# The strategies of several processes, started by deepfm.launch: its flags.
TWO_RANKS = ["--np", "2", "--horovod_controller", "gloo"]
LAUNCHED = {"ps": ["--num_ps", "1", "--num_workers", "2"], "horovod": TWO_RANKS, "hybrid": TWO_RANKS}
# The strategies each model trains under (the module's docstring says why DCN's are two).
IN_PROCESS_OF = {CUSTOM: tuple(IN_PROCESS), DCN: ("single",)}
LAUNCHED_OF = {CUSTOM: tuple(LAUNCHED), DCN: ("hybrid",)}
# Measured on the shared dataset (one epoch: 84 steps of 64 examples, or 42 of two replicas'):
# 0.70 to 0.72 for both models under every strategy; the planted model's own AUC is 0.81.
MIN_AUC = 0.65


def cases(strategies_of):
    """Named (model, strategy) cases: each model under each of its strategies in `strategies_of`."""
    return [("%s_%s" % (model, strategy), model, strategy)
            for model in MODELS for strategy in sorted(strategies_of[model])]


def train_args(data, work, model):
    """The example's flags: the data, where results go, the tiny model."""
    return ([data, "--model_dir", os.path.join(work, "model"), "--metrics_file", os.path.join(work, "metrics.json")]
            + examples_testing.TINY_MODEL_ARGS + MODEL_ARGS[model])


class StrategyTestCase(tf.test.TestCase, parameterized.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = examples_testing.shared_dataset()

    def assert_trained(self, model, work):
        """The run's chief reported an AUC above the floor and checkpointed `model`'s variables."""
        with open(os.path.join(work, "metrics.json")) as f:
            metrics = json.load(f)
        self.assertGreater(metrics["auc"], MIN_AUC, metrics)
        self.assertGreater(metrics["global_step"], 0)
        names = [name for name, _ in tf.train.list_variables(os.path.join(work, "model"))]
        self.assertNotEmpty([name for name in names if name.startswith(MODEL_SCOPES[model] + "/")], names)
        for other in set(MODELS) - {model}:
            self.assertEmpty([name for name in names if name.startswith(MODEL_SCOPES[other] + "/")])
        return metrics


class EveryStrategyTest(tf.test.TestCase):

    def test_every_strategy_is_covered(self):
        self.assertEqual(set(deepfm.strategies.names()) - {"auto"}, set(IN_PROCESS) | set(LAUNCHED))


class InProcessStrategyTest(StrategyTestCase):
    """The strategies of one process, through the public API in this process."""

    @parameterized.named_parameters(cases(IN_PROCESS_OF))
    def test_trains(self, model, strategy):
        work = self.create_tempdir().full_path
        example = examples_testing.import_example("train_from_python")
        args = example.parse_args(train_args(self.data, work, model) + ["--strategy", strategy] + IN_PROCESS[strategy])
        train, model_config, strategy_config = example.configs(args)
        model_fn = examples_testing.import_example("custom_model").model_fn if model == CUSTOM else None
        result = deepfm.train_and_evaluate(train, model_config, strategy=strategy_config, model_fn=model_fn)
        metrics = self.assert_trained(model, work)
        self.assertEqual(metrics["auc"], result.auc)
        self.assertStartsWith(result.strategy, strategy + ":")


@pytest.mark.slow
class LaunchedStrategyTest(StrategyTestCase):
    """The strategies of several processes: `deepfm.launch --program examples/<script>.py`."""

    @parameterized.named_parameters(cases(LAUNCHED_OF))
    def test_trains(self, model, strategy):
        work = self.create_tempdir().full_path
        program = examples_testing.example_path(MODEL_SCRIPTS[model])
        job = launch_testing.LaunchedJob(
            self, ["--strategy", strategy, "--program", program] + LAUNCHED[strategy], os.path.join(work, "logs"),
            train_args(self.data, work, model))
        returncode, output = job.wait()
        self.assertEqual(0, returncode, output)
        job.assert_no_process_left()
        metrics = self.assert_trained(model, work)
        self.assertStartsWith(metrics["strategy"], strategy + ":")


if __name__ == "__main__":
    tf.test.main()
