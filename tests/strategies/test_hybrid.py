"""Tests of the `hybrid` strategy adapter: sharded tables through the model contract, real ranks.

The unit tests run Horovod in this process (one rank). The slow tests start
real ranks with `python -m deepfm.launch --strategy hybrid` (Gloo), each job
in its own process group, stopped with every process it started on cleanup.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import strategies
from dataprep import synthetic
from deepfm.config import ModelConfig
from deepfm.models import ctr
from deepfm.models import deepfm as model_lib
from input_pipeline import schema
from strategies import context as context_lib
from strategies import horovod_controllers, hybrid
from strategies import strategy_names as names
from strategies.sharded import pipeline as pipeline_lib
from strategies.sharded import row_stream
from tests import command_line
from tests.jobs.local import launch_testing
from tests.strategies.sharded import ranks_testing

FEATURE_SIZE = 600
ROWS = 12_000
TRAIN_FLAGS = ["--batch_size", "128", "--embedding_size", "8", "--deep_layers", "16,8", "--dropout", "0,0",
               "--learning_rate", "0.003", "--seed", "5", "--save_checkpoints_steps", "25", "--num_epochs", "2"]
# Hybrid at 2 ranks against one process with the same global batch and examples.
AUC_TOLERANCE = 0.01
RUN_TIMEOUT_S = 300
# The sharded tables' weights (their slots are beside them in the shard files).
TABLES = ("deepfm_model/fm_v", "deepfm_model/fm_w")
# A resumed run's few steps at this rate move no weight by more than RESUMED_WEIGHT_TOLERANCE (Adam's step is
# about the rate); the trained weights are of order 0.01 and more away from a fresh initialization.
RESUME_LEARNING_RATE = "1e-9"
RESUMED_STEPS = 3
RESUMED_WEIGHT_TOLERANCE = 1e-6


def _skip_without_horovod(test):
    try:
        horovod_controllers.import_horovod()
    except ImportError as e:
        test.skipTest("Horovod is not installed: %s" % e)


class OptionsTest(tf.test.TestCase):

    def test_registered_with_its_own_options(self):
        self.assertIn(names.HYBRID, strategies.names())
        self.assertIs(hybrid.HybridOptions, strategies.options_class(names.HYBRID))
        config = strategies.make_config(names.HYBRID, lr_scaling="none", id_capacity=64)
        self.assertEqual(hybrid.HybridOptions(lr_scaling="none", id_capacity=64), config.options)

    def test_sparse_as_dense_is_horovods_alone(self):
        with self.assertRaisesRegex(ValueError, "--sparse_as_dense applies to --strategy horovod, not hybrid"):
            strategies.make_config(names.HYBRID, sparse_as_dense=True)

    def test_bad_exchange_options_are_named(self):
        with self.assertRaisesRegex(ValueError, "--id_capacity must be >= -1, got -2"):
            hybrid.HybridOptions(id_capacity=-2)
        with self.assertRaisesRegex(ValueError, "--exchange_staleness must be one of 0, 1, got 2"):
            hybrid.HybridOptions(exchange_staleness=2)
        with self.assertRaisesRegex(ValueError, "--exchange_staleness 1 needs --exchange_pipeline"):
            hybrid.HybridOptions(exchange_staleness=1, exchange_pipeline=False)

    def test_places_per_owner_of_a_training_step(self):
        self.assertEqual(0, hybrid.HybridOptions().start_capacity())  # sized from the first batch
        self.assertEqual(64, hybrid.HybridOptions(id_capacity=64).start_capacity())
        self.assertIsNone(hybrid.HybridOptions(id_capacity=0).start_capacity())

    def test_groups_hold_the_dense_gradients(self):
        # Unlike horovod's, hybrid's groups need no --sparse_as_dense: the shards' gradients stay local.
        self.assertEqual(2, strategies.make_config(names.HYBRID, hvd_groups=2).options.hvd_groups)
        with self.assertRaisesRegex(ValueError, "--hvd_groups must be >= 0, got -1"):
            hybrid.HybridOptions(hvd_groups=-1)


class OneRankTest(tf.test.TestCase):
    """The adapter in this process: Horovod with a single rank."""

    def setUp(self):
        super().setUp()
        _skip_without_horovod(self)
        self.strategy = strategies.get(strategies.make_config(names.HYBRID))
        self.strategy.setup()
        self.model = ModelConfig(feature_size=50, field_size=4, embedding_size=4, deep_layers=(8,), dropout=(0.0,))

    def _spec(self, mode, model_fn=model_lib.model_fn, strategy=None, steps_per_worker=100):
        strategy = strategy or self.strategy
        # A step budget: the exchange pipeline is on (an input that ends by itself turns it off).
        strategy.prepare(strategies.Plan(model_dir=self.get_temp_dir(), steps_per_worker=steps_per_worker,
                                         save_checkpoints_steps=10, per_replica_batch=8))
        with tf.Graph().as_default() as graph:
            tf.compat.v1.train.get_or_create_global_step()
            features = {schema.FEAT_IDS: tf.zeros([8, 4], tf.int64), schema.FEAT_VALS: tf.ones([8, 4])}
            labels = None if mode == tf.estimator.ModeKeys.PREDICT else tf.zeros([8])
            spec = strategy.wrap_model_fn(model_fn)(features, labels, mode, ctr.model_params(self.model))
            names_ = sorted(v.op.name for v in tf.compat.v1.global_variables())
            self.graph_ops = [op.name for op in graph.get_operations()]
        return spec, names_

    def test_id_capacity_pads_training_exchanges_only(self):
        padded = strategies.get(strategies.make_config(names.HYBRID, id_capacity=16))
        padded.setup()
        # A padded exchange checks that a batch's distinct ids fit the capacity.
        self._spec(tf.estimator.ModeKeys.TRAIN, strategy=padded)
        self.assertTrue([name for name in self.graph_ops if "_route/assert_less_equal" in name])
        # Evaluation's batches are larger than training's: its exchange is not padded.
        self._spec(tf.estimator.ModeKeys.EVAL, strategy=padded)
        self.assertTrue([name for name in self.graph_ops if "ids_to_owners" in name])
        self.assertFalse([name for name in self.graph_ops if "_route/assert_less_equal" in name])

    def test_training_shards_the_tables_and_saves_them_by_steps(self):
        spec, variables = self._spec(tf.estimator.ModeKeys.TRAIN)
        self.assertIn("deepfm_model/fm_v/local_shard", variables)
        self.assertNotIn("deepfm_model/fm_v", variables)
        savers = [h for h in spec.training_chief_hooks if isinstance(h, tf.compat.v1.train.CheckpointSaverHook)]
        self.assertLen(savers, 1)
        self.assertIsNotNone(spec.scaffold.saver)
        self.assertEqual((), self.strategy.run.train_hooks)

    def test_the_exchange_pipeline_runs_with_a_step_budget_only(self):
        self._spec(tf.estimator.ModeKeys.TRAIN)
        self.assertTrue([name for name in self.graph_ops if name.startswith(pipeline_lib.SCOPE + "/")])
        ending = strategies.get(strategies.make_config(names.HYBRID))
        ending.setup()
        # No budget: the input ends by itself (`finite_input`), and the pipeline's lookahead would pass its end.
        self._spec(tf.estimator.ModeKeys.TRAIN, strategy=ending, steps_per_worker=None)
        self.assertFalse([name for name in self.graph_ops if name.startswith(pipeline_lib.SCOPE + "/")])

    def test_only_training_with_the_pipeline_primes_it_before_its_first_step(self):
        def primes(spec):
            return [hook for hook in spec.training_hooks if isinstance(hook, pipeline_lib.PrimeHook)]

        spec, _ = self._spec(tf.estimator.ModeKeys.TRAIN)
        self.assertLen(primes(spec), 1)
        spec, _ = self._spec(tf.estimator.ModeKeys.EVAL)
        self.assertEqual([], primes(spec))
        unpipelined = strategies.get(strategies.make_config(names.HYBRID, exchange_pipeline=False))
        unpipelined.setup()
        spec, _ = self._spec(tf.estimator.ModeKeys.TRAIN, strategy=unpipelined)
        self.assertEqual([], primes(spec))
        self.assertFalse([name for name in self.graph_ops if name.startswith(pipeline_lib.SCOPE + "/")])

    def test_cowclip_clips_the_rows_of_the_exchanges_places(self):
        # The gradient reaching the places is summed per id already: the rule clips it there, without the
        # `UniqueWithCounts` and segment sums over every occurrence that spread rows need.
        for pipelined in (True, False):
            clipping = strategies.get(strategies.make_config(names.HYBRID, large_batch_rule="cowclip",
                                                             exchange_pipeline=pipelined))
            clipping.setup()
            self._spec(tf.estimator.ModeKeys.TRAIN, strategy=clipping)
            self.assertEqual(pipelined, any(name.startswith(pipeline_lib.SCOPE + "/") for name in self.graph_ops))
            lookup_ops = [name for name in self.graph_ops if "_lookup/" in name]
            self.assertTrue([name for name in lookup_ops if name.endswith("/Bincount")], lookup_ops)
            self.assertFalse([name for name in self.graph_ops if "UniqueWithCounts" in name])

    def test_export_builds_plain_tables(self):
        _, variables = self._spec(tf.estimator.ModeKeys.PREDICT)
        self.assertIn("deepfm_model/fm_v", variables)
        self.assertFalse([name for name in variables
                          if context_lib.MODEL_CONTEXT_PARAM in name or "local_shard" in name])

    def test_a_model_without_tables_is_refused(self):
        def dense_only(features, labels, mode, params):
            context = strategies.ModelContext.of(params)
            logits = tf.squeeze(ctr.dense(features[schema.FEAT_VALS], 1, "out"), 1)
            return ctr.estimator_spec(logits, tf.constant(0.0), labels, mode, ctr.model_config(params), context)
        with self.assertRaisesRegex(ValueError, "dense_only created none .use --strategy horovod"):
            self._spec(tf.estimator.ModeKeys.TRAIN, dense_only)


def _launch(test, args, train_args, name):
    """Runs `python -m deepfm.launch` to its end; returns the metrics file's record."""
    work = os.path.join(test.work, name)
    os.makedirs(work, exist_ok=True)
    metrics_file = os.path.join(work, "metrics.json")
    job = launch_testing.LaunchedJob(test, args, os.path.join(work, "logs"),
                                     train_args + ["--metrics_file", metrics_file])
    returncode, output = job.wait(timeout=RUN_TIMEOUT_S)
    test.assertEqual(0, returncode, output + job.rank_logs("ranks"))
    job.assert_no_process_left()
    with open(metrics_file) as f:
        return json.load(f)


def _checkpoint_values(path):
    return {name: tf.train.load_variable(path, name) for name, _ in tf.train.list_variables(path)}


def _tables(path, ranks):
    """Every table and slot of a checkpoint, assembled from its `ranks` shard files."""
    shards = [_checkpoint_values(row_stream.shard_prefix(path, rank, ranks)) for rank in range(ranks)]
    return {name: ranks_testing.assemble([shard[name] for shard in shards], FEATURE_SIZE) for name in shards[0]}


@pytest.mark.slow
class RanksTest(tf.test.TestCase):
    """Real ranks: quality against one process, a resume at another rank count, the export."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.work = tf.compat.v1.test.get_temp_dir()
        cls.data = os.path.join(cls.work, "hybrid_data")
        synthetic.generate(ROWS, cls.data, feature_size=FEATURE_SIZE, shards=2, seed=9)

    def setUp(self):
        super().setUp()
        _skip_without_horovod(self)

    def test_two_ranks_learn_as_one_process_resume_at_three_and_export_without_horovod(self):
        model_dir = os.path.join(self.work, "hybrid_model")
        export_dir = os.path.join(self.work, "hybrid_export")
        two = _launch(self, ["--strategy", "hybrid", "--np", "2", "--horovod_controller", "gloo"],
                      ["--train_data", self.data, "--model_dir", model_dir, "--export_dir", export_dir,
                       "--lr_scaling", "none"] + TRAIN_FLAGS, "two")
        # One process with the global batch of the two ranks, over the same examples (a reference: without the
        # preflight checks, which the ranks ran).
        one_metrics = os.path.join(self.work, "one_metrics.json")
        command = command_line.python_module(
            "deepfm.train", "--strategy", "single", "--train_data", self.data,
            "--model_dir", os.path.join(self.work, "one_model"), "--metrics_file", one_metrics,
            "--nocheck_memory", "--nocheck_data", *[f if f != "128" else "256" for f in TRAIN_FLAGS])
        result = command_line.run(command, self.work, timeout=RUN_TIMEOUT_S)
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        with open(one_metrics) as f:
            one = json.load(f)
        self.assertEqual(one["global_step"], two["global_step"])
        self.assertLess(abs(two["auc"] - one["auc"]), AUC_TOLERANCE, (two["auc"], one["auc"]))
        self.assertGreater(two["auc"], 0.6)

        # Rank 0's bundle holds the replicated variables; each rank's shard file its rows of every table and slot.
        checkpoint = tf.train.latest_checkpoint(model_dir)
        step = two["global_step"]
        self.assertEqual("model.ckpt-%d" % step, os.path.basename(checkpoint))
        self.assertEqual(2, row_stream.saved_ranks(checkpoint))
        bundle = _checkpoint_values(checkpoint)
        self.assertFalse([name for name in bundle if name.startswith(TABLES) or "local_shard" in name])
        self.assertIn("deepfm_model/fm_bias", bundle)
        before = _tables(checkpoint, 2)
        self.assertEqual((FEATURE_SIZE, 8), before["deepfm_model/fm_v"].shape)
        self.assertEqual((FEATURE_SIZE,), before["deepfm_model/fm_w"].shape)
        self.assertEqual((FEATURE_SIZE, 8), before["deepfm_model/fm_v/Adam"].shape)

        # Three ranks resume it, each restoring its rows from the two ranks' files. At a learning rate too small
        # to move a weight, their own checkpoint holds the same weights (a table initialized afresh would not).
        resumed_dir = os.path.join(self.work, "resumed_model")
        tf.io.gfile.makedirs(resumed_dir)
        for path in tf.io.gfile.glob(checkpoint + ".*") + [os.path.join(model_dir, "checkpoint")]:
            tf.io.gfile.copy(path, os.path.join(resumed_dir, os.path.basename(path)))
        resume_flags = [RESUME_LEARNING_RATE if flag == "0.003" else flag for flag in TRAIN_FLAGS]
        three = _launch(self, ["--strategy", "hybrid", "--np", "3", "--horovod_controller", "gloo"],
                        ["--train_data", self.data, "--model_dir", resumed_dir, "--lr_scaling", "none",
                         "--val_data=", "--max_steps", str(step + RESUMED_STEPS)] + resume_flags, "three")
        self.assertEqual(step + RESUMED_STEPS, three["global_step"])
        resumed = tf.train.latest_checkpoint(resumed_dir)
        self.assertEqual("model.ckpt-%d" % (step + RESUMED_STEPS), os.path.basename(resumed))
        self.assertEqual(3, row_stream.saved_ranks(resumed))
        # The checkpoint they resumed from stays a two-rank one.
        self.assertEqual(2, row_stream.saved_ranks(os.path.join(resumed_dir, "model.ckpt-%d" % step)))
        after = _tables(resumed, 3)
        self.assertEqual(sorted(before), sorted(after))
        for name in TABLES:
            self.assertAllClose(before[name], after[name], atol=RESUMED_WEIGHT_TOLERANCE, rtol=0, msg=name)
        resumed_bundle = _checkpoint_values(resumed)
        self.assertAllClose(bundle["deepfm_model/fm_bias"], resumed_bundle["deepfm_model/fm_bias"],
                            atol=RESUMED_WEIGHT_TOLERANCE, rtol=0)

        # The export of the two ranks gathered the tables from their shard files.
        # The SavedModel serves in a process that cannot import Horovod.
        export = tf.io.gfile.glob(os.path.join(export_dir, "*"))[0]
        script = ("import sys; sys.modules['horovod'] = None; sys.modules['horovod.tensorflow'] = None\n"
                  "import numpy as np, tensorflow as tf\n"
                  "f = tf.saved_model.load(%r).signatures['serving_default']\n"
                  "p = f(feat_ids=tf.constant(np.arange(78).reshape(2, 39) %% %d, tf.int64),"
                  " feat_vals=tf.ones([2, 39]))['prob'].numpy()\n"
                  "print(float(p.min()), float(p.max()))" % (export, FEATURE_SIZE))
        result = command_line.run(["python", "-c", script], self.work, timeout=120)
        self.assertEqual(0, result.returncode, command_line.describe("serve the export", result))
        low, high = map(float, result.stdout.split())
        self.assertTrue(0.0 < low <= high < 1.0, result.stdout)
        self.assertTrue(np.isfinite([low, high]).all())


if __name__ == "__main__":
    tf.test.main()
