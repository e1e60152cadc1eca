"""Tests of the DeepFM network, model_fn and optimizers."""

import itertools

import numpy as np
import tensorflow as tf

from deepfm import model, optimizers
from deepfm.config import ModelConfig
from input_pipeline import schema

FEATURE_SIZE = 50
FIELD_SIZE = 6
EMBEDDING_SIZE = 4
BATCH = 8


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


class DeepFMTest(tf.test.TestCase):

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

    def test_out_of_range_id_names_the_id(self):
        ids, vals, _ = _inputs()
        ids[3, 2] = FEATURE_SIZE + 7
        with tf.Graph().as_default():
            logits, _ = model.deepfm_logits(tf.constant(ids), tf.constant(vals), _config(), training=False)
            with self.session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            "feature id %d is out of range .*feature_size=%d"
                                            % (FEATURE_SIZE + 7, FEATURE_SIZE)):
                    sess.run(logits)

    def test_partitioned_tables_give_the_same_logits(self):
        ids, vals, _ = _inputs(2)
        results = []
        for partitioner in (None, tf.compat.v1.fixed_size_partitioner(3)):
            with tf.Graph().as_default():
                tf.compat.v1.set_random_seed(0)
                logits, _ = model.deepfm_logits(tf.constant(ids), tf.constant(vals), _config(),
                                                training=False, partitioner=partitioner)
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

    def test_lazy_adam_updates_only_touched_rows_as_adam_would(self):
        rows, dim, lr = 6, 3, 0.1
        init = np.arange(rows * dim, dtype=np.float32).reshape(rows, dim) / 10.0
        touched = np.array([1, 4, 1])
        grad_values = np.ones((3, dim), dtype=np.float32)
        with tf.Graph().as_default():
            table = tf.compat.v1.get_variable("t", initializer=init)
            loss = tf.reduce_sum(tf.gather(table, touched) * grad_values)
            step = optimizers.LazyAdamOptimizer(lr).minimize(loss)
            with self.session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(step)
                got = sess.run(table)
        # One Adam step from zero moments moves each touched coordinate by -lr * sign(g).
        expected = init.copy()
        expected[[1, 4]] -= lr
        self.assertAllClose(expected, got, rtol=1e-5, atol=1e-5)

    def test_every_optimizer_reduces_the_loss(self):
        ids, vals, labels = _inputs(3)
        for name in ("adam", "lazy_adam", "adagrad", "momentum", "ftrl", "sgd"):
            with self.subTest(optimizer=name), tf.Graph().as_default():
                tf.compat.v1.set_random_seed(1)
                config = _config(optimizer=name, learning_rate=0.05)
                spec = model.model_fn({schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(vals)},
                                      tf.constant(labels), tf.estimator.ModeKeys.TRAIN, {"model": config})
                with self.session() as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    first = sess.run(spec.loss)
                    for _ in range(30):
                        sess.run(spec.train_op)
                    self.assertLess(sess.run(spec.loss), first)

    def test_optimizer_wrapper_from_params_is_used(self):
        ids, vals, labels = _inputs(4)
        wrapped = []

        def wrapper(optimizer):
            wrapped.append(type(optimizer).__name__)
            return optimizer

        with tf.Graph().as_default():
            model.model_fn({schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(vals)},
                           tf.constant(labels), tf.estimator.ModeKeys.TRAIN,
                           {"model": _config(optimizer="adagrad"), "optimizer_wrapper": wrapper})
        self.assertEqual(["AdagradOptimizer"], wrapped)


class ModelConfigTest(tf.test.TestCase):

    def test_bad_values_are_named(self):
        with self.assertRaisesRegex(ValueError, "optimizer must be one of .* got 'rmsprop'"):
            _config(optimizer="rmsprop")
        with self.assertRaisesRegex(ValueError, "one drop rate per deep layer"):
            _config(dropout=(0.5,))
        with self.assertRaisesRegex(ValueError, r"dropout rates must be in \[0, 1\), got \(1.0, 0.0\)"):
            _config(dropout=(1.0, 0.0))


if __name__ == "__main__":
    tf.test.main()
