"""Tests of evaluation shared by Horovod ranks: sharded rows, padded batches, the metric state summed.

The unit tests build the input and the combine in this process (the
adapters' wrappers with Horovod at one rank). The slow tests train and
evaluate on two real ranks under horovodrun (Gloo), for `horovod` and
`hybrid`, and compare their metrics with one process's evaluation of the
same checkpoint.
"""

import glob
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import strategies
from dataprep import synthetic
from deepfm.config import ModelConfig
from deepfm.models import ctr
from deepfm.models import deepfm as model_lib
from deepfm.runtime import evaluation, trainer
from input_pipeline import pipeline, schema
from strategies import horovod_controllers, sharded_evaluation
from strategies import strategy_names as names
from strategies.sharded import checkpoint as sharded_checkpoint
from strategies.sharded import row_stream
from tests import command_line, paths
from tests.strategies.sharded import ranks_testing

AUC_THRESHOLDS = 200
# The combine is exact up to float32 sums.
SUMMED_TOLERANCE = 1e-6
# The bound: ranks against one process evaluating the same checkpoint.
ONE_PROCESS_TOLERANCE = 1e-4


def _skip_without_horovod(test):
    try:
        horovod_controllers.import_horovod()
    except ImportError as e:
        test.skipTest("Horovod is not installed: %s" % e)


def _tempdir(test: tf.test.TestCase) -> str:
    path = tempfile.mkdtemp(dir=test.get_temp_dir())
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


class MostBatchesTest(tf.test.TestCase):

    def test_the_largest_shard_sets_the_count(self):
        self.assertEqual(2, sharded_evaluation.most_batches([4097, 4096], 4096))
        self.assertEqual(1, sharded_evaluation.most_batches([4096, 4095], 4096))
        self.assertEqual(0, sharded_evaluation.most_batches([0, 0], 8))

    def test_bad_arguments_are_named(self):
        with self.assertRaisesRegex(ValueError, r"got \[\] and 8"):
            sharded_evaluation.most_batches([], 8)
        with self.assertRaisesRegex(ValueError, r"got \[3\] and 0"):
            sharded_evaluation.most_batches([3], 0)


class MarkedBatchesTest(tf.test.TestCase):

    def _batches(self):
        ids = np.arange(10, dtype=np.int64).reshape(5, 2)
        return tf.data.Dataset.from_tensor_slices(({"ids": ids}, np.ones(5, np.float32))).batch(2)

    def test_every_row_read_weighs_one(self):
        out = list(sharded_evaluation.marked_batches(self._batches()).as_numpy_iterator())
        self.assertEqual([[1, 1], [1, 1], [1]], [f[sharded_evaluation.ROW_KEY].tolist() for f, _ in out])
        self.assertAllEqual(np.arange(10).reshape(5, 2), np.concatenate([f["ids"] for f, _ in out]))

    def test_a_short_shard_is_padded_with_rows_of_weight_zero(self):
        out = list(sharded_evaluation.marked_batches(self._batches(), 5).as_numpy_iterator())
        self.assertLen(out, 5)
        self.assertEqual([[1, 1], [1, 1], [1], [0], [0]], [f[sharded_evaluation.ROW_KEY].tolist() for f, _ in out])
        for features, labels in out[3:]:
            self.assertAllEqual(np.zeros([1, 2]), features["ids"])
            self.assertAllEqual(np.zeros([1]), labels)

    def test_a_shard_longer_than_its_count_fails_naming_it(self):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "more than the 2 batch"):
            list(sharded_evaluation.marked_batches(self._batches(), 2).as_numpy_iterator())

    def test_features_without_static_rows_cannot_be_padded(self):
        dataset = tf.data.Dataset.from_generator(
            lambda: iter([({"ids": np.zeros([2, 3], np.int64)}, np.zeros([2], np.float32))]),
            output_signature=({"ids": tf.TensorSpec([None, None], tf.int64)}, tf.TensorSpec([None], tf.float32)))
        with self.assertRaisesRegex(ValueError, "a feature has rows of unknown shape"):
            sharded_evaluation.marked_batches(dataset, 2)


def _shards(rows=301, seed=3):
    """Labels and probabilities of all rows, then split in two unlike shards (the first scored higher)."""
    rng = np.random.RandomState(seed)
    labels = (rng.uniform(size=rows) < 0.3).astype(np.float32)
    prob = np.clip(0.25 * labels + rng.uniform(0.0, 0.6, size=rows), 0.01, 0.99).astype(np.float32)
    half = rows // 2
    prob[:half] = np.clip(prob[:half] + 0.3, 0.01, 0.99)
    return (labels, prob), [(labels[:half], prob[:half]), (labels[half:], prob[half:])]


def _metric_model_fn(features, labels, mode, params):
    """Scores given as the feature `p`; the EVAL metrics AUC and mean log loss, the summing hook as params say."""
    prob = features["p"]
    anchor = tf.compat.v1.get_variable("anchor", [], initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean(prob) + anchor
    if mode == tf.estimator.ModeKeys.TRAIN:
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.compat.v1.assign_add(
            tf.compat.v1.train.get_global_step(), 1))
    example_log_loss = -(labels * tf.math.log(prob) + (1.0 - labels) * tf.math.log(1.0 - prob))
    metrics = {"auc": tf.compat.v1.metrics.auc(labels, prob, num_thresholds=AUC_THRESHOLDS),
               "logloss": tf.compat.v1.metrics.mean(example_log_loss)}
    hooks = []
    if params.get("allreduce_sum") is not None:
        hooks.append(sharded_evaluation.SumMetricStateHook(params["allreduce_sum"], tf.ones_like(labels), metrics))
    return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics, evaluation_hooks=hooks)


class SummedStateTest(tf.test.TestCase):
    """The combine in a real `Estimator.evaluate`: one shard's state plus the other's, as the allreduce adds them."""

    def setUp(self):
        super().setUp()
        self.model_dir = _tempdir(self)
        estimator = self._estimator(None)
        estimator.train(self._input(*_shards()[0]), steps=1)

    def _estimator(self, allreduce_sum):
        return tf.estimator.Estimator(_metric_model_fn, model_dir=self.model_dir,
                                      params={"allreduce_sum": allreduce_sum})

    @staticmethod
    def _input(labels, prob, batch=64):
        return lambda: tf.data.Dataset.from_tensor_slices(({"p": prob}, labels)).batch(batch)

    def test_the_summed_state_gives_the_metrics_of_every_row_and_averaging_would_not(self):
        whole, shards = _shards()
        expected = self._estimator(None).evaluate(self._input(*whole))
        # Shard 0's state, as its rank sends it to the allreduce.
        sent = {}

        def record(tensor, name):
            def keep(value):
                sent[name] = value.copy()
                return value
            return tf.numpy_function(keep, [tensor], tensor.dtype)

        first = self._estimator(record).evaluate(self._input(*shards[0]))
        self.assertNotEmpty(sent)
        second = self._estimator(lambda tensor, name: tensor + tf.constant(sent[name])).evaluate(
            self._input(*shards[1], batch=50))
        for key in ("auc", "logloss"):
            self.assertAllClose(expected[key], second[key], atol=SUMMED_TOLERANCE, msg=key)
        # The metric values of shard 0 alone, and their average with shard 1's own, are another thing.
        alone = self._estimator(None).evaluate(self._input(*shards[1]))
        self.assertGreater(abs(expected["auc"] - first["auc"]), 0.01)
        self.assertGreater(abs(expected["auc"] - (first["auc"] + alone["auc"]) / 2), 0.01)

    def test_one_collective_per_dtype_sums_every_metric_variable(self):
        with tf.Graph().as_default():
            labels, prob = tf.constant([1.0, 0.0]), tf.constant([0.7, 0.2])
            tf.compat.v1.metrics.auc(labels, prob, num_thresholds=AUC_THRESHOLDS)
            tf.compat.v1.metrics.mean(prob)
            calls = []
            variables = sharded_evaluation.metric_variables()
            sharded_evaluation.summed_state(variables, lambda tensor, name: calls.append((name, tensor)) or tensor)
        self.assertLen(variables, 6)  # AUC's four confusion counts, a mean's total and count
        self.assertEqual([sharded_evaluation.SUM_NAME + "_float32"], [name for name, _ in calls])
        self.assertEqual([4 * AUC_THRESHOLDS + 2], calls[0][1].shape.as_list())

    def test_the_state_of_keras_metric_objects_is_summed_too(self):
        with tf.Graph().as_default():
            mean = tf.keras.metrics.Mean()
            mean.update_state([1.0, 3.0])
            tf.compat.v1.metrics.mean(tf.constant([2.0]))
            names = [v.op.name for v in sharded_evaluation.metric_variables({"keras_mean": mean})]
        self.assertLen(names, 4)
        self.assertContainsSubset(["mean/total", "mean/count"], names)


class OneRankTest(tf.test.TestCase):
    """The adapters' evaluation in this process: Horovod with a single rank."""

    def setUp(self):
        super().setUp()
        _skip_without_horovod(self)
        self.model = ModelConfig(feature_size=50, field_size=4, embedding_size=4, deep_layers=(8,), dropout=(0.0,))

    def _strategy(self, name):
        strategy = strategies.get(strategies.make_config(name))
        strategy.setup()
        strategy.prepare(strategies.Plan(model_dir=_tempdir(self), steps_per_worker=10, per_replica_batch=8))
        return strategy

    def _eval_spec(self, strategy, model_fn=model_lib.model_fn, marked=True):
        with tf.Graph().as_default():
            tf.compat.v1.train.get_or_create_global_step()
            features = {schema.FEAT_IDS: tf.zeros([3, 4], tf.int64), schema.FEAT_VALS: tf.ones([3, 4])}
            if marked:
                features[sharded_evaluation.ROW_KEY] = tf.constant([1.0, 1.0, 0.0])
            spec = strategy.wrap_model_fn(model_fn)(features, tf.constant([1.0, 0.0, 1.0]),
                                                    tf.estimator.ModeKeys.EVAL, ctr.model_params(self.model))
            with tf.compat.v1.Session() as session:
                session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
                session.run(spec.eval_metric_ops["logloss"][1])
                # The log loss mean's weight count: the rows its update counted.
                count = [v for v in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.METRIC_VARIABLES)
                         if v.op.name.endswith("/count")]
                rows = session.run(count[0])
        hooks = [h for h in spec.evaluation_hooks if isinstance(h, sharded_evaluation.SumMetricStateHook)]
        return hooks, rows

    def test_horovod_sums_the_state_of_marked_batches_and_counts_every_row(self):
        strategy = self._strategy(names.HOROVOD)
        hooks, rows = self._eval_spec(strategy)
        self.assertLen(hooks, 1)
        self.assertEqual(3, rows)
        # Input from elsewhere (the chief's Pipe-mode channel) is evaluated alone.
        hooks, _ = self._eval_spec(strategy, marked=False)
        self.assertEqual([], hooks)

    def test_hybrid_leaves_the_padding_rows_out_of_the_metrics(self):
        hooks, rows = self._eval_spec(self._strategy(names.HYBRID))
        self.assertLen(hooks, 1)
        self.assertEqual(2, rows)

    def test_hybrid_refuses_metrics_that_would_count_the_padding(self):
        def own_metrics(features, labels, mode, params):
            context = strategies.ModelContext.of(params)
            weights = context.embedding("weights", self.model.feature_size).lookup(features[schema.FEAT_IDS])
            prob = tf.sigmoid(tf.reduce_sum(weights * features[schema.FEAT_VALS], axis=1))
            return tf.estimator.EstimatorSpec(mode, loss=tf.reduce_mean(prob), predictions={"prob": prob},
                                              eval_metric_ops={"auc": tf.compat.v1.metrics.auc(labels, prob)})
        with self.assertRaisesRegex(ValueError, "the EVAL metrics auc did not go through "
                                                "ModelContext.eval_metric_ops"):
            self._eval_spec(self._strategy(names.HYBRID), own_metrics)

    def test_the_evaluation_input_of_a_rank_is_its_marked_shard(self):
        data = os.path.join(_tempdir(self), "data")
        synthetic.generate(400, data, feature_size=100, val_fraction=0.5, shards=1, seed=2)
        files = sorted(glob.glob(os.path.join(data, schema.VALIDATION_SPLIT, "*.tfrecord")))
        builder = pipeline.DatasetBuilder(files, evaluation.file_eval_config(pipeline.PipelineConfig()), batch_size=64)
        for name in (names.HOROVOD, names.HYBRID):
            with tf.Graph().as_default():
                dataset = self._strategy(name).input_plan().evaluation_input_fn(builder)()
                features, labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
                weights = features[sharded_evaluation.ROW_KEY]
                total, batches = 0.0, 0
                with tf.compat.v1.Session() as session:
                    while True:
                        try:
                            total += float(np.sum(session.run(weights)))
                            batches += 1
                        except tf.errors.OutOfRangeError:
                            break
            self.assertEqual((200.0, 4), (total, batches), name)

    def test_a_pipe_mode_channel_is_not_evaluated_together(self):
        strategy = self._strategy(names.HOROVOD)
        builder = pipeline.DatasetBuilder("validation", pipeline.PipelineConfig(input_mode=pipeline.INPUT_MODE_PIPE),
                                          batch_size=8)
        with self.assertRaisesRegex(ValueError, "the Pipe-mode channel 'validation' is evaluated by rank 0 alone"):
            strategy.input_plan().evaluation_input_fn(builder)


# Two ranks over an odd number of validation rows: shards of 4,097 and 4,096 rows, so that rank 0 evaluates two
# batches of `evaluation.EVAL_BATCH_SIZE` rows and rank 1 one (`hybrid` pads it to two).
NUM_RANKS = 2
VALIDATION_ROWS = 2 * evaluation.EVAL_BATCH_SIZE + 1
TRAIN_ROWS = 2_048
FEATURE_SIZE = 500
MODEL_FLAGS = ("--batch_size=64", "--embedding_size=8", "--deep_layers=16,8", "--dropout=0,0",
               "--learning_rate=0.01", "--seed=7", "--max_steps=12", "--save_checkpoints_steps=100",
               "--log_every_n_steps=100",
               # The preflight checks (a model graph, and a pass over the 10,000 rows, on each rank) are not what
               # these tests check; the ranks of test_hybrid.py and test_horovod.py run them.
               "--nocheck_memory", "--nocheck_data")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
RUN_TIMEOUT_S = 300
STALL_SHUTDOWN_S = 120
# The strategies the ranks train and evaluate with, in this order, in one launch (`sharded_evaluation_rank`).
STRATEGIES = (names.HOROVOD, names.HYBRID)
# What `SumMetricStateHook` logs: `<task> evaluated <rows> row(s) in <batches> batch(es)`.
EVALUATED = re.compile(r"(rank\d+) evaluated (\d+) row\(s\) in (\d+) batch\(es\)")


@pytest.mark.slow
class TwoRanksTest(tf.test.TestCase):
    """Two real ranks evaluate their shards; their metrics are one process's of the same checkpoint.

    One launch trains and evaluates with every strategy of STRATEGIES in turn (the first test starts it);
    each test checks its strategy's records and lines.
    """

    launched = None  # (result_dir, output) of `_launch`

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.launched = None
        cls.work = tempfile.mkdtemp(dir=tf.compat.v1.test.get_temp_dir())
        cls.data = os.path.join(cls.work, "data")
        synthetic.generate(TRAIN_ROWS + VALIDATION_ROWS, cls.data, feature_size=FEATURE_SIZE,
                           val_fraction=VALIDATION_ROWS / (TRAIN_ROWS + VALIDATION_ROWS), shards=1, seed=13)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        _skip_without_horovod(self)
        if not os.access(HOROVODRUN, os.X_OK):
            self.skipTest("no horovodrun beside %s" % sys.executable)

    def _ranks(self, strategy):
        """Each rank's record of `strategy` and the ranks' `evaluated` lines for it, from the launch of `_launch`."""
        if type(self).launched is None:
            type(self).launched = self._launch()
        result_dir, output = type(self).launched
        records = []
        for rank in range(NUM_RANKS):
            with open(os.path.join(result_dir, strategy, "rank-%d.json" % rank)) as f:
                records.append(json.load(f))
        # Each rank evaluated once per strategy, in the order of STRATEGIES.
        lines = {}
        for task, rows, count in EVALUATED.findall(output):
            lines.setdefault(task, []).append((int(rows), int(count)))
        self.assertEqual({task: len(STRATEGIES) for task in lines},
                         {task: len(found) for task, found in lines.items()}, output[-3000:])
        return records, {task: found[STRATEGIES.index(strategy)] for task, found in lines.items()}, output

    def _launch(self):
        """Trains and evaluates on two ranks with each of STRATEGIES in turn (one launch for both tests).

        Returns:
          The directory of the records (`<strategy>/rank-<R>.json`) and the ranks' output.
        """
        result_dir = os.path.join(self.work, "results")
        model_dir = os.path.join(self.work, "models")
        command = ranks_testing.HOROVODRUN_COMMAND + [
            "--gloo", "-np", str(NUM_RANKS), "-H", "localhost:%d" % NUM_RANKS,
            "python", "-m", "tests.strategies.sharded_evaluation_rank", "--strategies=" + ",".join(STRATEGIES),
            "--result_dir=" + result_dir, "--train_data=" + self.data, "--model_dir=" + model_dir,
            "--feature_size=%d" % FEATURE_SIZE, "--lr_scaling=none"] + list(MODEL_FLAGS)
        result = command_line.run(command, paths.REPO_ROOT, timeout=RUN_TIMEOUT_S, env=dict(
            PYTHONPATH=paths.REPO_ROOT, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=str(STALL_SHUTDOWN_S)))
        self.assertEqual(0, result.returncode, command_line.describe(command, result))
        return result_dir, result.stdout + result.stderr

    def _one_process(self, checkpoint):
        """AUC and log loss of `checkpoint` evaluated on every validation row by one process."""
        strategy = strategies.get(strategies.make_config(names.SINGLE))
        strategy.setup()
        strategy.prepare(strategies.Plan(model_dir=tempfile.mkdtemp(dir=self.work)))
        model = ModelConfig(feature_size=FEATURE_SIZE, field_size=schema.FIELD_SIZE, embedding_size=8,
                            deep_layers=(16, 8), dropout=(0.0, 0.0))
        files = sorted(glob.glob(os.path.join(self.data, schema.VALIDATION_SPLIT, "*.tfrecord")))
        auc, logloss, _ = evaluation.evaluate(trainer.build_estimator(model, strategy), files,
                                              evaluation.file_eval_config(pipeline.PipelineConfig()),
                                              self._plain(checkpoint, model))
        return auc, logloss

    def _plain(self, checkpoint, model):
        """`checkpoint` as one process restores it: a `hybrid` one's tables gathered from its ranks' shard files."""
        if row_stream.saved_ranks(checkpoint) is None:
            return checkpoint
        with tf.Graph().as_default():
            tf.compat.v1.train.get_or_create_global_step()
            features = ctr.serving_input_receiver_fn(model.field_size)().features
            model_lib.model_fn(features, None, tf.estimator.ModeKeys.PREDICT, ctr.model_params(model))
            return sharded_checkpoint.export_weights(checkpoint, tf.compat.v1.global_variables(),
                                                     os.path.join(tempfile.mkdtemp(dir=self.work), "weights"))

    def _check(self, strategy, batches):
        records, evaluated, output = self._ranks(strategy)
        chief, other = records
        # Every rank reports the metrics of all the rows.
        self.assertEqual((chief["auc"], chief["logloss"]), (other["auc"], other["logloss"]))
        checkpoint = tf.train.latest_checkpoint(chief["checkpoint_dir"])
        # A `hybrid` checkpoint keeps each rank's rows of the tables in its own shard file.
        self.assertEqual(NUM_RANKS if strategy == names.HYBRID else None, row_stream.saved_ranks(checkpoint))
        auc, logloss = self._one_process(checkpoint)
        self.assertGreater(abs(auc - 0.5), 0.01, "an untrained model would make the comparison empty")
        self.assertAllClose([auc, logloss], [chief["auc"], chief["logloss"]], atol=ONE_PROCESS_TOLERANCE)
        # Each rank read its shard alone: 4,097 and 4,096 rows, every row once.
        self.assertEqual({"rank0": (4097, 2), "rank1": (4096, batches)}, evaluated, output[-3000:])

    def test_horovod_ranks_evaluate_their_shards_as_one_process_evaluates_every_row(self):
        self._check(names.HOROVOD, batches=1)

    def test_hybrid_ranks_pad_the_shorter_shard_and_evaluate_as_one_process(self):
        self._check(names.HYBRID, batches=2)


if __name__ == "__main__":
    tf.test.main()
