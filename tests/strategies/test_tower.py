"""Tests of the tower strategy: splitting, averaging, placement, training, eval."""

import os

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized

import strategies
from deepfm.models import ctr
from deepfm.models import deepfm as model_lib
from input_pipeline import schema
from strategies import devices as devices_lib
from strategies import tower
from tests import command_line
from tests.strategies import replica_testing as rt

TOWERS = 2
PER_TOWER_BATCH = 64
TRAIN_STEPS = 150
MIN_AUC = 0.9
# Rows of the evaluation set: 4 batches of EVAL_BATCH, the last one a single
# row, fewer than the towers.
EVAL_BATCH = 300
EVAL_ROWS = 3 * EVAL_BATCH + 1
CPU_TOWERS = devices_lib.DeviceList(devices_lib.CPU, ("/cpu:1", "/cpu:2"))
# Imports every strategy adapter and prints the modules of the model package it loaded.
IMPORT_SCRIPT = """
import sys
import strategies
strategies.names()
print(sorted(name for name in sys.modules if name == "deepfm" or name.startswith("deepfm.")))
"""


def tower_strategy(num_devices=TOWERS, device_type="cpu", **kwargs) -> strategies.Strategy:
    strategy = strategies.get(strategies.make_config(
        name="tower", num_devices=num_devices, device_type=device_type, **kwargs))
    strategy.setup()
    return strategy


def single_strategy() -> strategies.Strategy:
    return strategies.get(strategies.make_config(name="single"))


def ancestors(op: tf.Operation) -> set:
    """Every op `op` depends on, through data or control edges."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


class SplitBatchTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("even", 8, 2, [4, 4]),
        ("uneven", 7, 3, [3, 2, 2]),
        ("smaller_than_towers", 2, 3, [1, 1, 1]),
        ("one_row", 1, 2, [1, 1]),
    )
    def test_slices_hold_the_rows_in_order(self, rows, towers, sizes):
        features = {"x": tf.reshape(tf.range(rows * 2), [rows, 2])}
        labels = tf.range(rows, dtype=tf.float32)
        slices, weights = tower.split_batch((features, labels), towers)
        real_rows = np.minimum(np.maximum(rows - np.cumsum([0] + sizes[:-1]), 0), sizes)

        self.assertLen(slices, towers)
        self.assertEqual([int(self.evaluate(tf.shape(labels)[0])) for _, labels in slices], sizes)
        joined = self.evaluate(tf.concat([labels for _, labels in slices], axis=0))[:rows]
        self.assertAllEqual(joined, np.arange(rows))
        joined_x = self.evaluate(tf.concat([f["x"] for f, _ in slices], axis=0))[:rows]
        self.assertAllEqual(joined_x, np.arange(rows * 2).reshape(rows, 2))
        self.assertAllClose(self.evaluate(weights), real_rows / rows)


class AverageGradientsTest(tf.test.TestCase):

    def test_dense_and_sparse_gradients_are_weighted_means(self):
        dense_var = tf.Variable(tf.zeros([2, 3]))
        table = tf.Variable(tf.zeros([5, 2]))
        dense = [tf.ones([2, 3]), 3.0 * tf.ones([2, 3])]
        sparse = [tf.IndexedSlices(tf.constant([[1.0, 1.0]]), tf.constant([0]), tf.constant([5, 2])),
                  tf.IndexedSlices(tf.constant([[2.0, 2.0], [4.0, 4.0]]), tf.constant([0, 3]), tf.constant([5, 2]))]
        weights = tf.constant([0.25, 0.75])

        averaged = tower.average_gradients(
            [[(dense[0], dense_var), (sparse[0], table), (None, dense_var)],
             [(dense[1], dense_var), (sparse[1], table)]], weights)

        self.assertLen(averaged, 2)
        (dense_grad, var_a), (sparse_grad, var_b) = averaged
        self.assertIs(var_a, dense_var)
        self.assertIs(var_b, table)
        self.assertAllClose(self.evaluate(dense_grad), 2.5 * np.ones([2, 3]))
        self.assertIsInstance(sparse_grad, tf.IndexedSlices)
        expected = np.zeros([5, 2])
        expected[0] = 0.25 * 1.0 + 0.75 * 2.0
        expected[3] = 0.75 * 4.0
        self.assertAllClose(self.evaluate(tf.convert_to_tensor(sparse_grad)), expected)


class TowerGraphTest(tf.test.TestCase):
    """The graph the replicated model_fn builds, without running it."""

    def build_train_graph(self, model):
        graph = tf.Graph()
        with graph.as_default():
            ids, values, labels = rt.planted_rows(TOWERS * PER_TOWER_BATCH)
            tf.compat.v1.train.get_or_create_global_step()
            features = {schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(values)}
            replicated = tower.replicate_model_fn(model_lib.model_fn, CPU_TOWERS)
            spec = replicated(features, tf.constant(labels), tf.estimator.ModeKeys.TRAIN, ctr.model_params(model))
        return graph, spec

    def test_variables_on_cpu0_towers_on_their_devices(self):
        graph, _ = self.build_train_graph(rt.model_config())
        with graph.as_default():
            variables = [v for v in tf.compat.v1.global_variables()
                         if v.op.name != tf.compat.v1.GraphKeys.GLOBAL_STEP]
        self.assertNotEmpty(variables)
        for variable in variables:
            self.assertEqual(variable.device, "/device:CPU:0", variable.name)
        for index in range(TOWERS):
            tower_ops = [op for op in graph.get_operations()
                         if op.name.startswith(tower.TOWER_SCOPE % index + "/") and op.type == "MatMul"]
            self.assertNotEmpty(tower_ops)
            for op in tower_ops:
                self.assertEqual(op.device, "/device:CPU:%d" % (index + 1), op.name)

    def test_one_set_of_variables(self):
        graph, _ = self.build_train_graph(rt.model_config())
        single_graph = tf.Graph()
        with single_graph.as_default():
            ids, values, labels = rt.planted_rows(PER_TOWER_BATCH)
            tf.compat.v1.train.get_or_create_global_step()
            model_lib.model_fn({schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(values)},
                               tf.constant(labels), tf.estimator.ModeKeys.TRAIN, ctr.model_params(rt.model_config()))
        with graph.as_default():
            tower_names = sorted(v.name for v in tf.compat.v1.trainable_variables())
        with single_graph.as_default():
            single_names = sorted(v.name for v in tf.compat.v1.trainable_variables())
        self.assertNotEmpty(single_names)
        self.assertEqual(tower_names, single_names)

    def test_eval_computes_the_model_fns_metric_function_once_over_the_whole_batch(self):
        computed = []

        def metric_fn(labels, predictions):
            computed.append(predictions[ctr.PREDICTION_KEY])
            return ctr.prediction_metrics(labels, predictions)

        def model_fn(features, labels, mode, params):
            context = strategies.ModelContext.of(params)
            config = ctr.model_config(params)
            logits, l2 = model_lib.deepfm_logits(features[schema.FEAT_IDS], features[schema.FEAT_VALS], config,
                                                 False, context)
            spec = ctr.estimator_spec(logits, l2, labels, mode, config, context)
            return spec._replace(eval_metric_ops=context.eval_metric_ops(metric_fn, labels, spec.predictions))

        with tf.Graph().as_default():
            ids, values, labels = rt.planted_rows(2 * TOWERS + 1)
            features = {schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(values)}
            spec = tower.replicate_model_fn(model_fn, CPU_TOWERS)(
                features, tf.constant(labels), tf.estimator.ModeKeys.EVAL, ctr.model_params(rt.model_config()))
        # Once per tower (their own metrics, unused), then once over the whole batch.
        self.assertLen(computed, TOWERS + 1)
        self.assertIs(computed[-1], spec.predictions[ctr.PREDICTION_KEY])
        self.assertEqual(sorted(spec.eval_metric_ops), ["auc", "logloss"])

    def test_eval_without_metrics_through_the_context_is_refused(self):
        def own_metrics_model_fn(features, labels, mode, params):
            spec = model_lib.model_fn(features, labels, mode, {ctr.MODEL_CONFIG_PARAM: ctr.model_config(params)})
            return spec

        with tf.Graph().as_default():
            ids, values, labels = rt.planted_rows(2 * TOWERS)
            features = {schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(values)}
            replicated = tower.replicate_model_fn(own_metrics_model_fn, CPU_TOWERS)
            with self.assertRaisesRegex(ValueError, r"passes to ModelContext.eval_metric_ops in EVAL; "
                                                    r"own_metrics_model_fn passed none"):
                replicated(features, tf.constant(labels), tf.estimator.ModeKeys.EVAL,
                           ctr.model_params(rt.model_config()))

    def test_every_towers_update_ops_run_before_the_step(self):
        graph, spec = self.build_train_graph(rt.model_config(batch_norm=True))
        with graph.as_default():
            update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        layers = len(rt.SMALL_MODEL["deep_layers"])
        moving_statistics = 2  # mean and variance
        self.assertLen(update_ops, TOWERS * layers * moving_statistics)
        before_step = ancestors(spec.train_op)
        for op in update_ops:
            self.assertIn(op, before_step, op.name)


class TowerTrainingTest(tf.test.TestCase):

    def test_trains_two_cpu_towers(self):
        strategy = tower_strategy()
        self.assertEqual(strategy.topology.replicas_in_sync, TOWERS)
        self.assertEqual(strategy.input_plan().batch_per_input_pipeline(PER_TOWER_BATCH), TOWERS * PER_TOWER_BATCH)
        rt.assert_learns(self, strategy, self.get_temp_dir(), PER_TOWER_BATCH, TRAIN_STEPS, EVAL_ROWS,
                         EVAL_BATCH, MIN_AUC)
        self.assertEqual(strategy.run.run_config.session_config.device_count["CPU"], TOWERS + 1)

    def test_one_sgd_step_of_towers_equals_one_step_of_single(self):
        model = rt.model_config(optimizer="sgd", learning_rate=0.5)
        batch = rt.planted_rows(TOWERS * PER_TOWER_BATCH)
        start_dir = os.path.join(self.get_temp_dir(), "start")
        rt.build_estimator(single_strategy(), start_dir, model).train(rt.input_fn(batch, len(batch[0])), max_steps=1)
        start = rt.model_values(start_dir)
        single = rt.train_one_step_from(start_dir, os.path.join(self.get_temp_dir(), "single"), single_strategy(),
                                        batch, model)
        towers = rt.train_one_step_from(start_dir, os.path.join(self.get_temp_dir(), "tower"), tower_strategy(),
                                        batch, model)

        self.assertEqual(sorted(towers), sorted(single))
        for name, value in single.items():
            self.assertGreater(np.abs(value - start[name]).max(), 0.0, name)
            self.assertAllClose(towers[name], value, rtol=1e-5, atol=1e-6, msg=name)

    def test_eval_and_predict_match_single_on_the_same_checkpoint(self):
        model_dir = self.get_temp_dir()
        strategy = tower_strategy()
        towers = rt.build_estimator(strategy, model_dir)
        batch = strategy.input_plan().batch_per_input_pipeline(PER_TOWER_BATCH)
        towers.train(rt.input_fn(rt.planted_rows(1024), batch, repeat=True, drop_remainder=True), max_steps=20)
        single = rt.build_estimator(single_strategy(), model_dir)
        evaluate = rt.input_fn(rt.planted_rows(EVAL_ROWS, seed=1), EVAL_BATCH)

        tower_metrics = towers.evaluate(evaluate)
        single_metrics = single.evaluate(evaluate)
        for key in ("auc", "logloss", "loss"):
            self.assertAllClose(tower_metrics[key], single_metrics[key], rtol=1e-5, msg=key)

        tower_probs = [p[ctr.PREDICTION_KEY] for p in towers.predict(evaluate)]
        single_probs = [p[ctr.PREDICTION_KEY] for p in single.predict(evaluate)]
        self.assertLen(tower_probs, EVAL_ROWS)
        self.assertAllClose(tower_probs, single_probs, rtol=1e-5)

    def test_checkpoint_names_match_single(self):
        model_dir = os.path.join(self.get_temp_dir(), "tower")
        single_dir = os.path.join(self.get_temp_dir(), "single")
        batch = rt.planted_rows(TOWERS * PER_TOWER_BATCH)
        for strategy, directory in ((tower_strategy(), model_dir), (single_strategy(), single_dir)):
            rt.build_estimator(strategy, directory).train(rt.input_fn(batch, TOWERS * PER_TOWER_BATCH), max_steps=1)
        self.assertEqual(
            sorted(tf.train.list_variables(model_dir)), sorted(tf.train.list_variables(single_dir)))


class TowerConfigTest(tf.test.TestCase):

    def test_is_registered(self):
        self.assertIn("tower", strategies.names())

    def test_strategies_never_import_the_model_package(self):
        result = command_line.run(["python", "-c", IMPORT_SCRIPT], self.get_temp_dir(), timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertEqual(result.stdout.strip().splitlines()[-1], "[]")

    def test_describes_its_devices(self):
        self.assertIn("/cpu:1,/cpu:2", tower_strategy().describe())

    def test_gpu_without_gpus_is_refused(self):
        if devices_lib.visible_gpus():
            self.skipTest("a GPU is visible; the refusal needs a host without one")
        with self.assertRaisesRegex(ValueError, "--device_type gpu"):
            tower_strategy(device_type="gpu")


@pytest.mark.gpu
class TowerGpuTest(tf.test.TestCase):

    def test_trains_on_every_gpu(self):
        gpus = devices_lib.visible_gpus()
        if not gpus:
            self.skipTest("no GPU is visible to TensorFlow")
        strategy = tower_strategy(num_devices=0, device_type="auto")
        self.assertEqual(strategy.device_list.devices, tuple("/gpu:%d" % i for i in range(gpus)))
        estimator = rt.build_estimator(strategy, self.get_temp_dir())
        batch = strategy.input_plan().batch_per_input_pipeline(PER_TOWER_BATCH)
        estimator.train(rt.input_fn(rt.planted_rows(4096), batch, repeat=True, drop_remainder=True),
                        max_steps=TRAIN_STEPS)
        metrics = estimator.evaluate(rt.input_fn(rt.planted_rows(EVAL_ROWS, seed=1), EVAL_BATCH))
        self.assertGreater(metrics["auc"], MIN_AUC)


if __name__ == "__main__":
    tf.test.main()
