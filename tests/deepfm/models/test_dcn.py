"""Tests of the DCN model_fn: the cross network's arithmetic, and that it learns."""

import numpy as np
import tensorflow as tf

import strategies
from deepfm.config import ModelConfig
from deepfm.models import ctr, dcn
from input_pipeline import schema
from tests.strategies import replica_testing as rt

WIDTH = 6
LAYERS = 3


class CrossNetworkTest(tf.test.TestCase):

    def test_each_layer_is_x0_times_the_projection_plus_bias_plus_the_input(self):
        x0 = np.random.default_rng(1).normal(size=(4, WIDTH)).astype(np.float32)
        with tf.Graph().as_default():
            out = dcn.cross_network(tf.constant(x0), LAYERS)
            with self.session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
                # Non-zero biases, so that they are checked too.
                for layer in range(LAYERS):
                    session.run(variables["cross_%d/bias" % layer].assign(np.full(WIDTH, 0.1 * (layer + 1))))
                weights = [session.run(variables["cross_%d/weight" % layer]) for layer in range(LAYERS)]
                biases = [session.run(variables["cross_%d/bias" % layer]) for layer in range(LAYERS)]
                got = session.run(out)
        x = x0
        for weight, bias in zip(weights, biases):
            x = x0 * (x @ weight) + bias + x
        self.assertAllClose(x, got, rtol=1e-5, atol=1e-5)


class DCNModelTest(tf.test.TestCase):

    def test_variables_and_every_mode(self):
        config = rt.model_config(model="dcn", cross_layers=2)
        ids, values, labels = rt.planted_rows(16)
        for mode in (tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL, tf.estimator.ModeKeys.PREDICT):
            with self.subTest(mode=mode), tf.Graph().as_default():
                tf.compat.v1.train.get_or_create_global_step()
                features = {schema.FEAT_IDS: tf.constant(ids), schema.FEAT_VALS: tf.constant(values)}
                spec = dcn.model_fn(features, None if mode == tf.estimator.ModeKeys.PREDICT else tf.constant(labels),
                                    mode, ctr.model_params(config))
                shapes = {v.op.name: v.shape.as_list() for v in tf.compat.v1.trainable_variables()}
                self.assertEqual([rt.FEATURE_SIZE, 8], shapes["dcn_model/embeddings"])
                self.assertEqual([rt.FEATURE_SIZE], shapes["dcn_model/linear"])
                self.assertEqual([rt.FIELD_SIZE * 8, 1], shapes["dcn_model/cross/cross_1/weight"])
                self.assertNotIn("dcn_model/cross/cross_2/weight", shapes)
                self.assertEqual([16], spec.predictions[ctr.PREDICTION_KEY].shape.as_list())

    def test_it_learns_the_planted_labels(self):
        strategy = strategies.get(strategies.StrategyConfig())
        estimator = rt.build_estimator(strategy, self.get_temp_dir(), rt.model_config(model="dcn"))
        estimator.train(rt.input_fn(rt.planted_rows(4096), 64, repeat=True), max_steps=300)
        metrics = estimator.evaluate(rt.input_fn(rt.planted_rows(1000, seed=1), 250))
        self.assertGreater(metrics["auc"], 0.9)

    def test_config_checks_the_cross_layers(self):
        with self.assertRaisesRegex(ValueError, "cross_layers must be >= 1, got 0"):
            ModelConfig(feature_size=10, cross_layers=0)
        with self.assertRaisesRegex(ValueError, "model must be one of deepfm, dcn, got 'wide'"):
            ModelConfig(feature_size=10, model="wide")


if __name__ == "__main__":
    tf.test.main()
