"""Tests of the DeepFM network, model_fn and optimizers."""

import itertools

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

import strategies
from deepfm.config import ModelConfig
from deepfm.models import ctr, optimizers
from deepfm.models import deepfm as model
from input_pipeline import schema
from strategies import tables as tables_lib

FEATURE_SIZE = 50
FIELD_SIZE = 6
EMBEDDING_SIZE = 4
BATCH = 8
# The lazy Adam test: a table of TABLE_ROWS rows, one step per batch of row
# ids. Rows 1 and 4 are only in the first batch (row 1 twice); rows 0 and 2
# are in every later batch; rows 3 and 5 in none.
TABLE_ROWS = 6
SPARSE_LR = 0.1
SPARSE_BATCHES = ([0, 1, 4, 1], [0, 2], [2, 0, 0], [0, 2])
ABSENT_LATER = [1, 4]
MATCH_ADAM = [0, 2, 3, 5]


def _config(**overrides):
    values = dict(feature_size=FEATURE_SIZE, field_size=FIELD_SIZE, embedding_size=EMBEDDING_SIZE,
                  deep_layers=(8, 4), dropout=(0.0, 0.0))
    values.update(overrides)
    return ModelConfig(**values)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, FEATURE_SIZE, (BATCH, FIELD_SIZE)).astype(np.int64)
    vals = rng.normal(size=(BATCH, FIELD_SIZE)).astype(np.float32)
    labels = (rng.random(BATCH) < 0.5).astype(np.float32)
    return ids, vals, labels


class DeepFMTest(tf.test.TestCase, parameterized.TestCase):

    def test_second_order_equals_explicit_pairwise_sum(self):
        ids, vals, _ = _inputs()
        with tf.Graph().as_default():
            config = _config()
            model.deepfm_logits(tf.constant(ids), tf.constant(vals), config, training=False)
            graph = tf.compat.v1.get_default_graph()
            second_order = graph.get_tensor_by_name("deepfm_model/second_order/value:0")
            with self.session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                fm_v = sess.run(tf.compat.v1.get_collection(
                    tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, scope="deepfm_model/fm_v")[0])
                got = sess.run(second_order)
        expected = np.zeros(BATCH)
        for b in range(BATCH):
            for f, g in itertools.combinations(range(FIELD_SIZE), 2):
                expected[b] += fm_v[ids[b, f]] @ fm_v[ids[b, g]] * vals[b, f] * vals[b, g]
        self.assertAllClose(expected, got, rtol=1e-4, atol=1e-5)

    def test_logits_are_sum_of_parts(self):
        ids, vals, _ = _inputs(1)
        with tf.Graph().as_default():
            config = _config()
            logits, _ = model.deepfm_logits(tf.constant(ids), tf.constant(vals), config, training=False)
            with self.session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                values = {v.op.name: v for v in tf.compat.v1.global_variables()}
                fm_w, fm_v, bias = sess.run([values["deepfm_model/fm_w"], values["deepfm_model/fm_v"],
                                             values["deepfm_model/fm_bias"]])
                got = sess.run(logits)
                kernels = sess.run([values["deepfm_model/deep/layer_%d/kernel" % i] for i in range(2)]
                                   + [values["deepfm_model/deep/output/kernel"]])
                biases = sess.run([values["deepfm_model/deep/layer_%d/bias" % i] for i in range(2)]
                                  + [values["deepfm_model/deep/output/bias"]])
        emb = fm_v[ids] * vals[..., None]
        first = (fm_w[ids] * vals).sum(1)
        second = 0.5 * ((emb.sum(1) ** 2) - (emb ** 2).sum(1)).sum(1)
        hidden = emb.reshape(BATCH, -1)
        for kernel, b in zip(kernels[:-1], biases[:-1]):
            hidden = np.maximum(hidden @ kernel + b, 0)
        deep = (hidden @ kernels[-1] + biases[-1])[:, 0]
        self.assertAllClose(bias[0] + first + second + deep, got, rtol=1e-4, atol=1e-4)

    @parameterized.parameters(FEATURE_SIZE + 7, FEATURE_SIZE, -3)
    def test_out_of_range_id_names_the_id(self, bad_id):
        ids, vals, _ = _inputs()
        ids[3, 2] = bad_id
        with tf.Graph().as_default():
            logits, _ = model.deepfm_logits(tf.constant(ids), tf.constant(vals), _config(), training=False)
            with self.session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            "feature id %d is out of range .*feature_size=%d"
                                            % (bad_id, FEATURE_SIZE)):
                    sess.run(logits)

    def test_partitioned_tables_give_the_same_logits(self):
        ids, vals, _ = _inputs(2)
        results = []
        for partitioner in (None, tf.compat.v1.fixed_size_partitioner(3)):
            with tf.Graph().as_default():
                tf.compat.v1.set_random_seed(0)
                context = strategies.ModelContext(embedding_factory=tables_lib.variable_tables(partitioner))
                logits, _ = model.deepfm_logits(tf.constant(ids), tf.constant(vals), _config(),
                                                training=False, context=context)
                with self.session() as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
                    # Give both graphs the same table values, whatever the partitioning.
                    table = np.arange(FEATURE_SIZE * EMBEDDING_SIZE, dtype=np.float32).reshape(
                        FEATURE_SIZE, EMBEDDING_SIZE) / 1000.0
                    weights = np.linspace(-1, 1, FEATURE_SIZE).astype(np.float32)
                    self._assign_table(sess, variables, "deepfm_model/fm_v", table)
                    self._assign_table(sess, variables, "deepfm_model/fm_w", weights)
                    for name, var in variables.items():
                        if "/deep/" in name:
                            sess.run(var.assign(tf.ones_like(var) * 0.01))
                    results.append(sess.run(logits))
        self.assertAllClose(results[0], results[1], rtol=1e-5)

    def test_eval_publishes_its_metric_function(self):
        ids, vals, labels = _inputs(6)
        recorded = []
        params = strategies.ModelContext(metric_sink=recorded.append).with_params(ctr.model_params(_config()))
        with tf.Graph().as_default():
            spec = model.model_fn({schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(vals)},
                                  tf.constant(labels), tf.estimator.ModeKeys.EVAL, params)
            self.assertEqual([ctr.prediction_metrics], recorded)
            # Labels as [B, 1], as an input_fn may give them.
            published = ctr.prediction_metrics(tf.constant(labels[:, None]), spec.predictions)
            with self.session() as sess:
                sess.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
                sess.run([update for _, update in spec.eval_metric_ops.values()]
                         + [update for _, update in published.values()])
                own = sess.run({key: value for key, (value, _) in spec.eval_metric_ops.items()})
                got = sess.run({key: value for key, (value, _) in published.items()})
        self.assertEqual(sorted(got), ["auc", "logloss"])
        self.assertAllClose(got, own)
        self.assertGreater(got["logloss"], 0.0)

    @staticmethod
    def _assign_table(sess, variables, name, value):
        if name in variables:
            sess.run(variables[name].assign(value))
            return
        parts = sorted(n for n in variables if n.startswith(name + "/part_"))
        start = 0
        for part in parts:
            rows = variables[part].shape[0]
            sess.run(variables[part].assign(value[start:start + rows]))
            start += rows
        assert start == len(value), (name, start, len(value))


class OptimizerTest(tf.test.TestCase):

    def _embedding_steps(self, optimizer_name):
        """Trains an embedding table one step per batch of `SPARSE_BATCHES`.

        Returns:
          {`table`, `m`, `v`}, each a list of the values after every step.
        """
        init = np.arange(TABLE_ROWS * EMBEDDING_SIZE, dtype=np.float32).reshape(TABLE_ROWS, EMBEDDING_SIZE) / 10.0
        rng = np.random.default_rng(5)
        after = {"table": [], "m": [], "v": []}
        with tf.Graph().as_default():
            table = tf.compat.v1.get_variable("table", initializer=init)
            ids = tf.compat.v1.placeholder(tf.int32, [None])
            coefficients = tf.compat.v1.placeholder(tf.float32, [None, EMBEDDING_SIZE])
            loss = tf.reduce_sum(tf.gather(table, ids) * coefficients)
            optimizer = optimizers.make_optimizer(_config(optimizer=optimizer_name, learning_rate=SPARSE_LR))
            step = optimizer.minimize(loss)
            slots = [optimizer.get_slot(table, "m"), optimizer.get_slot(table, "v")]
            with self.session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                for batch in SPARSE_BATCHES:
                    sess.run(step, {ids: batch, coefficients: rng.normal(size=(len(batch), EMBEDDING_SIZE))})
                    values, (m, v) = sess.run(table), sess.run(slots)
                    after["table"].append(values)
                    after["m"].append(m)
                    after["v"].append(v)
        return after

    def test_lazy_adam_keeps_the_moments_of_rows_absent_from_later_batches(self):
        lazy = self._embedding_steps("lazy_adam")
        adam = self._embedding_steps("adam")
        later_steps = len(SPARSE_BATCHES) - 1
        for key in ("table", "m", "v"):
            # Rows absent from the later batches keep what the first step gave them.
            self.assertAllEqual(lazy[key][-1][ABSENT_LATER], lazy[key][0][ABSENT_LATER], msg=key)
            # Rows in every later batch, and rows never touched, end as Adam leaves them.
            self.assertAllClose(lazy[key][-1][MATCH_ADAM], adam[key][-1][MATCH_ADAM], rtol=1e-5, atol=1e-6,
                                msg=key)
        # The first step is Adam's everywhere, and it gave the absent rows non-zero moments.
        for key in ("table", "m", "v"):
            self.assertAllClose(lazy[key][0], adam[key][0], rtol=1e-5, atol=1e-6, msg=key)
        self.assertTrue(np.all(lazy["m"][0][ABSENT_LATER] != 0))
        self.assertTrue(np.all(lazy["v"][0][ABSENT_LATER] > 0))
        # TF 1.x Adam decays the moments of the absent rows at every step and keeps moving them.
        for key, beta in (("m", optimizers.ADAM_BETA1), ("v", optimizers.ADAM_BETA2)):
            self.assertAllClose(adam[key][-1][ABSENT_LATER], beta ** later_steps * adam[key][0][ABSENT_LATER],
                                rtol=1e-5, msg=key)
        self.assertTrue(np.all(adam["table"][-1][ABSENT_LATER] != adam["table"][0][ABSENT_LATER]))

    def test_every_optimizer_reduces_the_loss(self):
        ids, vals, labels = _inputs(3)
        for name in ("adam", "lazy_adam", "adagrad", "momentum", "ftrl", "sgd"):
            with self.subTest(optimizer=name), tf.Graph().as_default():
                tf.compat.v1.set_random_seed(1)
                config = _config(optimizer=name, learning_rate=0.05)
                spec = model.model_fn({schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(vals)},
                                      tf.constant(labels), tf.estimator.ModeKeys.TRAIN, ctr.model_params(config))
                with self.session() as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    first = sess.run(spec.loss)
                    for _ in range(30):
                        sess.run(spec.train_op)
                    self.assertLess(sess.run(spec.loss), first)

    def test_the_strategy_wrappers_of_the_context_are_used(self):
        ids, vals, labels = _inputs(4)
        wrapped = []

        def wrapper(optimizer):
            wrapped.append(type(optimizer).__name__)
            return optimizer

        params = strategies.ModelContext(optimizer_wrappers=(wrapper,)).with_params(
            ctr.model_params(_config(optimizer="adagrad")))
        with tf.Graph().as_default():
            model.model_fn({schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(vals)},
                           tf.constant(labels), tf.estimator.ModeKeys.TRAIN, params)
        self.assertEqual(["AdagradOptimizer"], wrapped)


class ModelConfigTest(tf.test.TestCase):

    def test_bad_values_are_named(self):
        with self.assertRaisesRegex(ValueError, "optimizer must be one of .* got 'rmsprop'"):
            _config(optimizer="rmsprop")
        with self.assertRaisesRegex(ValueError, "one drop rate per deep layer"):
            _config(dropout=(0.5,))
        with self.assertRaisesRegex(ValueError, r"dropout rates must be in \[0, 1\), got \(1.0, 0.0\)"):
            _config(dropout=(1.0, 0.0))


# Ids with duplicates within and across examples, as Zipf-distributed ids have.
DUPLICATE_IDS = [[3, 7, 3], [7, 7, 0], [3, 9, 1]]


class DedupLookupTest(tf.test.TestCase):
    """`StrategyConfig.dedup_lookups`: each distinct id looked up once, the same values and gradients."""

    def _lookup_and_gradient(self, shape, ids, dedup, partitioner=None):
        with tf.compat.v1.variable_scope("dedup" if dedup else "plain"):
            table = tables_lib.VariableTable("table", shape, tf.compat.v1.random_normal_initializer(seed=1),
                                       partitioner=partitioner, dedup=dedup)
        rows = table.lookup(ids)
        weights = tf.reshape(tf.range(tf.size(rows), dtype=tf.float32), tf.shape(rows))
        variables = list(table.variable) if partitioner else [table.variable]
        return rows, tf.gradients(tf.reduce_sum(rows * weights), variables)

    def test_lookup_and_gradient_equal_the_plain_ones(self):
        for shape, partitions in itertools.product(((10,), (10, 4)), (1, 2)):
            with self.subTest(shape=shape, partitions=partitions), tf.Graph().as_default():
                partitioner = tf.compat.v1.fixed_size_partitioner(partitions) if partitions > 1 else None
                ids = tf.constant(DUPLICATE_IDS, tf.int64)
                plain_rows, plain_grads = self._lookup_and_gradient(shape, ids, False, partitioner)
                dedup_rows, dedup_grads = self._lookup_and_gradient(shape, ids, True, partitioner)
                with tf.compat.v1.Session() as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    self.assertEqual(plain_rows.shape, dedup_rows.shape)
                    self.assertAllClose(*sess.run([plain_rows, dedup_rows]))
                    for plain, dedup in zip(plain_grads, dedup_grads):
                        self.assertAllClose(sess.run(tf.convert_to_tensor(plain)),
                                            sess.run(tf.convert_to_tensor(dedup)))

    def test_gradient_has_one_row_per_distinct_id(self):
        with tf.Graph().as_default():
            ids = tf.constant(DUPLICATE_IDS, tf.int64)
            (plain,) = self._lookup_and_gradient([10, 4], ids, dedup=False)[1]
            (dedup,) = self._lookup_and_gradient([10, 4], ids, dedup=True)[1]
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                plain_indices, dedup_indices = sess.run([plain.indices, dedup.indices])
        distinct = sorted(set(np.ravel(DUPLICATE_IDS)))
        self.assertLen(plain_indices, np.size(DUPLICATE_IDS))
        self.assertEqual(distinct, sorted(dedup_indices))

    def test_model_logits_and_gradients_equal_the_plain_ones(self):
        ids, vals, labels = _inputs(5)
        with tf.Graph().as_default():
            tf.compat.v1.set_random_seed(0)
            outputs = {}
            for dedup in (False, True):
                # The same variables (AUTO_REUSE), looked up both ways.
                context = strategies.ModelContext(embedding_factory=tables_lib.variable_tables(dedup=dedup))
                logits, l2 = model.deepfm_logits(tf.constant(ids), tf.constant(vals), _config(),
                                                 training=True, context=context)
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                    labels=tf.constant(labels), logits=logits)) + 0.1 * l2
                variables = tf.compat.v1.trainable_variables()
                grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, variables)]
                outputs[dedup] = (logits, l2, grads)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                plain, dedup = sess.run([outputs[False], outputs[True]])
        self.assertAllClose(plain[0], dedup[0])
        self.assertAllClose(plain[1], dedup[1])
        self.assertLen(dedup[2], len(plain[2]))
        for plain_grad, dedup_grad in zip(plain[2], dedup[2]):
            self.assertAllClose(plain_grad, dedup_grad, atol=1e-6)


if __name__ == "__main__":
    tf.test.main()
