"""The Deep & Cross Network `model_fn` (Wang et al., 2017, "Deep & Cross Network for Ad Click Predictions").

For one example, x0 is the concatenation of its field embeddings `v[i_f] * x_f`
(F k values). The cross network applies `cross_layers` layers

    x_{l+1} = x0 * (x_l . w_l) + b_l + x_l

(one weight vector and one bias per layer, so it learns feature crosses of
degree l + 1 with O(F k) parameters per layer); the deep network is the same
MLP as DeepFM's over x0. The logit is one dense layer over both networks'
outputs concatenated, plus a first-order weight per id (the linear part of
the paper's stacked form, which keeps it comparable with DeepFM).

Like DeepFM it creates its tables through the strategy's `ModelContext`, so
it trains under every strategy with no change.
"""

from typing import Optional, Tuple

import tensorflow as tf

import strategies
from deepfm.config import ModelConfig
from deepfm.models import ctr

SCOPE = "dcn_model"


def cross_network(x0: tf.Tensor, layers: int) -> tf.Tensor:
    """`layers` cross layers over x0 [B, d]: x_{l+1} = x0 * (x_l . w_l) + b_l + x_l; returns x_L [B, d]."""
    width = x0.shape[-1]
    x = x0
    for layer in range(layers):
        weight = tf.compat.v1.get_variable("cross_%d/weight" % layer, [width, 1],
                                           initializer=tf.compat.v1.glorot_normal_initializer())
        bias = tf.compat.v1.get_variable("cross_%d/bias" % layer, [width], initializer=tf.compat.v1.zeros_initializer())
        x = x0 * tf.matmul(x, weight) + bias + x
    return x


def dcn_logits(feat_ids: tf.Tensor, feat_vals: tf.Tensor, config: ModelConfig, training: bool,
               context: Optional[strategies.ModelContext] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Builds the DCN network.

    Args:
      feat_ids: int64 [B, F] feature ids, each in [0, feature_size).
      feat_vals: float32 [B, F] feature values.
      config: the model's hyperparameters (`cross_layers`, `deep_layers`, ...).
      training: whether dropout and batch-norm updates are active.
      context: the strategy's context; None: one device.

    Returns:
      logits: float32 [B].
      l2: the L2 penalty of the rows looked up, before `l2_reg`.
    """
    context = context or strategies.ModelContext()
    field_size = config.field_size
    k = config.embedding_size
    feat_ids, feat_vals = ctr.checked_inputs(feat_ids, feat_vals, config)
    with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE):
        linear_table = context.embedding("linear", config.feature_size)
        embedding_table = context.embedding("embeddings", config.feature_size, [k])
        weights, factors = context.lookup([linear_table, embedding_table], feat_ids)  # [B, F], [B, F, k]
        x0 = tf.reshape(factors * tf.expand_dims(feat_vals, -1), [-1, field_size * k])
        with tf.compat.v1.variable_scope("cross"):
            crossed = cross_network(x0, config.cross_layers)
        with tf.compat.v1.variable_scope("deep"):
            deep = ctr.mlp(x0, config, training)
        combined = tf.concat([crossed, deep], axis=1)
        logits = (tf.squeeze(ctr.dense(combined, 1, "output"), axis=1)
                  + tf.reduce_sum(weights * feat_vals, axis=1))
        l2 = ctr.l2_of_rows([weights, factors], tf.shape(feat_ids)[0])
    return logits, l2


# The Estimator model_fn (`ctr.network_model_fn`).
model_fn = ctr.network_model_fn(dcn_logits, "dcn_model_fn")
