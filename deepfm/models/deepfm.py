"""The DeepFM `model_fn` (Guo et al., 2017) in the TF 1.x Estimator style.

logit = bias + first-order FM + second-order FM + deep part, where for one
example with feature ids `i_1..i_F` and values `x_1..x_F`:

* first order: `sum_f w[i_f] * x_f`;
* second order: `0.5 * sum_k ((sum_f v[i_f, k] x_f)^2 - sum_f (v[i_f, k] x_f)^2)`,
  the O(F k) form of `sum_{f < g} <v[i_f], v[i_g]> x_f x_g`;
* deep: an MLP over the concatenated field embeddings `v[i_f] * x_f`.

The model knows nothing about distribution: its two tables (`fm_w`, one
weight per id, and `fm_v`, k factors per id) are created and looked up
through the strategy's `ModelContext`, which may partition them across
parameter servers or shard their rows across ranks, and it trains and
computes its metrics through the same context (`deepfm.models.ctr`).

Variables live in the `deepfm_model` scope with `reuse=AUTO_REUSE`, so
calling the model_fn once per tower shares one set of variables.
"""

from typing import Optional, Tuple

import tensorflow as tf

import strategies
from deepfm.config import ModelConfig
from deepfm.models import ctr

SCOPE = "deepfm_model"


def deepfm_logits(feat_ids: tf.Tensor, feat_vals: tf.Tensor, config: ModelConfig, training: bool,
                  context: Optional[strategies.ModelContext] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Builds the DeepFM network.

    Args:
      feat_ids: int64 [B, F] feature ids, each in [0, feature_size).
      feat_vals: float32 [B, F] feature values.
      config: the model's hyperparameters.
      training: whether dropout and batch-norm updates are active.
      context: the strategy's context (where the tables live); None: one
        device.

    Returns:
      logits: float32 [B].
      l2: float32 scalar, the L2 penalty on the FM weights and factors looked
        up for this batch (the rows a step touches), before `l2_reg`.
    """
    context = context or strategies.ModelContext()
    field_size = config.field_size
    k = config.embedding_size
    feat_ids, feat_vals = ctr.checked_inputs(feat_ids, feat_vals, config)
    with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE):
        fm_bias = tf.compat.v1.get_variable("fm_bias", [1], initializer=tf.compat.v1.zeros_initializer())
        fm_w = context.embedding("fm_w", config.feature_size)
        fm_v = context.embedding("fm_v", config.feature_size, [k])

        weights, factors = context.lookup([fm_w, fm_v], feat_ids)              # [B, F], [B, F, k]

        with tf.compat.v1.variable_scope("first_order"):
            first_order = tf.reduce_sum(weights * feat_vals, axis=1)            # [B]

        with tf.compat.v1.variable_scope("second_order"):
            embeddings = factors * tf.expand_dims(feat_vals, -1)                # [B, F, k]
            sum_square = tf.square(tf.reduce_sum(embeddings, axis=1))           # [B, k]
            square_sum = tf.reduce_sum(tf.square(embeddings), axis=1)           # [B, k]
            second_order = tf.identity(
                0.5 * tf.reduce_sum(sum_square - square_sum, axis=1), name="value")  # [B]

        with tf.compat.v1.variable_scope("deep"):
            hidden = ctr.mlp(tf.reshape(embeddings, [-1, field_size * k]), config, training)
            deep_out = tf.squeeze(ctr.dense(hidden, 1, "output"), axis=1)      # [B]

        logits = fm_bias + first_order + second_order + deep_out
        l2 = ctr.l2_of_rows([weights, factors], tf.shape(feat_ids)[0])
    return logits, l2


# The Estimator model_fn (`ctr.network_model_fn`).
model_fn = ctr.network_model_fn(deepfm_logits, "deepfm_model_fn")
