"""The DeepFM `model_fn` (Guo et al., 2017) in the TF 1.x Estimator style.

logit = bias + first-order FM + second-order FM + deep part, where for one
example with feature ids `i_1..i_F` and values `x_1..x_F`:

* first order: `sum_f w[i_f] * x_f`;
* second order: `0.5 * sum_k ((sum_f v[i_f, k] x_f)^2 - sum_f (v[i_f, k] x_f)^2)`,
  the O(F k) form of `sum_{f < g} <v[i_f], v[i_g]> x_f x_g`;
* deep: an MLP over the concatenated field embeddings `v[i_f] * x_f`.

The model knows nothing about distribution. A strategy adapter may add to
`params`:

* `optimizer_wrapper`: a callable taking and returning an optimizer
  (Horovod's `DistributedOptimizer`, the tower gradient collector, AMP);
* `embedding_partitioner`: a variable partitioner for the two embedding
  tables (parameter servers).

In EVAL the model_fn puts its metric function in `params[EVAL_METRICS_PARAM]`
(`prediction_metrics`), for a strategy that computes the metrics once over
several model_fn calls (the tower method's whole batch).

Variables live in the `deepfm_model` scope with `reuse=AUTO_REUSE`, so
calling the model_fn once per tower shares one set of variables.
"""

from typing import Dict, Optional, Tuple

import tensorflow as tf

from deepfm.config import ModelConfig
from deepfm.models.optimizers import make_optimizer
from input_pipeline import schema

SCOPE = "deepfm_model"
PREDICTION_KEY = "prob"
SERVING_SIGNATURE_OUTPUT = "prob"
AUC_THRESHOLDS = 2000
LOG_LOSS_EPSILON = 1e-7
# The params key under which the model_fn publishes its metric function.
EVAL_METRICS_PARAM = "eval_metrics"
# In TRAIN the model_fn adds its loss to this graph collection (once per tower
# or replica), where the training progress hook finds it.
TRAIN_LOSS_COLLECTION = "deepfm_train_losses"


def _check_ids(feat_ids: tf.Tensor, feature_size: int) -> tf.Tensor:
    """Returns `feat_ids` guarded by a check that every id is in range.

    TF's CPU gather fails with an unhelpful message on an id out of range, and
    the GPU gather silently returns zeros; this names the id instead.
    """
    max_id = tf.reduce_max(feat_ids)
    min_id = tf.reduce_min(feat_ids)
    in_range = tf.logical_and(max_id < feature_size, min_id >= 0)
    bad_id = tf.where(max_id >= feature_size, max_id, min_id)
    check = tf.debugging.Assert(
        in_range,
        [tf.strings.format(
            "feature id {} is out of range [0, feature_size={}); check --feature_size "
            "or the metadata of the data", (bad_id, feature_size))],
        name="check_feature_ids")
    with tf.control_dependencies([check]):
        return tf.identity(feat_ids)


def _lookup(table, ids: tf.Tensor) -> tf.Tensor:
    """Embedding lookup that also works on a partitioned table ('div' rows)."""
    return tf.compat.v1.nn.embedding_lookup(table, ids, partition_strategy="div")


def unique_ids(ids: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """`(unique, index)` of the flattened `ids`: `ids == reshape(gather(unique, index), shape(ids))`."""
    return tf.unique(tf.reshape(ids, [-1]), out_idx=tf.int32)


def lookup_rows(table, ids: tf.Tensor, unique: Optional[Tuple[tf.Tensor, tf.Tensor]] = None) -> tf.Tensor:
    """`table[ids]`; with `unique` (from `unique_ids(ids)`) each distinct row is looked up once.

    Deduplicated, a step reads each distinct embedding row once (from a
    parameter server: each row crosses the network once) and the gradient
    of the table is an `IndexedSlices` with one row per distinct id, the
    duplicates summed before any strategy exchanges or applies it.

    Args:
      table: an embedding variable, or a partitioned one ('div' rows).
      ids: int [B, F] ids.
      unique: None for the plain lookup, or `unique_ids(ids)`.

    Returns:
      [B, F] + the table's row shape.
    """
    if unique is None:
        return _lookup(table, ids)
    distinct, index = unique
    rows = tf.gather(_lookup(table, distinct), index)
    looked_up = tf.reshape(rows, tf.concat([tf.shape(ids), tf.shape(rows)[1:]], axis=0))
    looked_up.set_shape(ids.shape.concatenate(rows.shape[1:]))
    return looked_up


def _dense(inputs: tf.Tensor, units: int, name: str) -> tf.Tensor:
    """A fully connected layer, [B, n] -> [B, units], with shared variables."""
    kernel = tf.compat.v1.get_variable(
        name + "/kernel", [inputs.shape[-1], units],
        initializer=tf.compat.v1.glorot_normal_initializer())
    bias = tf.compat.v1.get_variable(name + "/bias", [units], initializer=tf.compat.v1.zeros_initializer())
    return tf.compat.v1.nn.xw_plus_b(inputs, kernel, bias)


def deepfm_logits(feat_ids: tf.Tensor, feat_vals: tf.Tensor, config: ModelConfig, training: bool,
                  partitioner=None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Builds the DeepFM network.

    Args:
      feat_ids: int64 [B, F] feature ids, each in [0, feature_size).
      feat_vals: float32 [B, F] feature values.
      config: the model's hyperparameters.
      training: whether dropout and batch-norm updates are active.
      partitioner: optional variable partitioner for the embedding tables.

    Returns:
      logits: float32 [B].
      l2: float32 scalar, the L2 penalty on the FM weights and factors looked
        up for this batch (the rows a step touches), before `l2_reg`.
    """
    field_size = config.field_size
    k = config.embedding_size
    if config.check_ids:
        feat_ids = _check_ids(feat_ids, config.feature_size)
    feat_vals = tf.reshape(feat_vals, [-1, field_size])
    with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE):
        fm_bias = tf.compat.v1.get_variable("fm_bias", [1], initializer=tf.compat.v1.zeros_initializer())
        fm_w = tf.compat.v1.get_variable(
            "fm_w", [config.feature_size], initializer=tf.compat.v1.glorot_normal_initializer(),
            partitioner=partitioner)
        fm_v = tf.compat.v1.get_variable(
            "fm_v", [config.feature_size, k], initializer=tf.compat.v1.glorot_normal_initializer(),
            partitioner=partitioner)

        unique = unique_ids(feat_ids) if config.dedup_lookups else None
        with tf.compat.v1.variable_scope("first_order"):
            weights = lookup_rows(fm_w, feat_ids, unique)                       # [B, F]
            first_order = tf.reduce_sum(weights * feat_vals, axis=1)            # [B]

        with tf.compat.v1.variable_scope("second_order"):
            factors = lookup_rows(fm_v, feat_ids, unique)                       # [B, F, k]
            embeddings = factors * tf.expand_dims(feat_vals, -1)                # [B, F, k]
            sum_square = tf.square(tf.reduce_sum(embeddings, axis=1))           # [B, k]
            square_sum = tf.reduce_sum(tf.square(embeddings), axis=1)           # [B, k]
            second_order = tf.identity(
                0.5 * tf.reduce_sum(sum_square - square_sum, axis=1), name="value")  # [B]

        with tf.compat.v1.variable_scope("deep"):
            hidden = tf.reshape(embeddings, [-1, field_size * k])
            for layer, (width, drop_rate) in enumerate(zip(config.deep_layers, config.dropout)):
                hidden = _dense(hidden, width, "layer_%d" % layer)
                if config.batch_norm:
                    hidden = tf.compat.v1.layers.batch_normalization(
                        hidden, momentum=config.batch_norm_decay, training=training,
                        name="batch_norm_%d" % layer, reuse=tf.compat.v1.AUTO_REUSE)
                hidden = tf.nn.relu(hidden)
                if training and drop_rate > 0:
                    hidden = tf.nn.dropout(hidden, rate=drop_rate)
            deep_out = tf.squeeze(_dense(hidden, 1, "output"), axis=1)         # [B]

        logits = fm_bias + first_order + second_order + deep_out
        l2 = 2.0 * (tf.nn.l2_loss(weights) + tf.nn.l2_loss(factors)) / tf.cast(
            tf.shape(feat_ids)[0], tf.float32)
    return logits, l2


def eval_metrics(labels: tf.Tensor, prob: tf.Tensor) -> Dict[str, Tuple[tf.Tensor, tf.Operation]]:
    """The evaluation metrics of the model, as Estimator `eval_metric_ops`.

    Args:
      labels: float32 [B] click labels in {0, 1}.
      prob: float32 [B] predicted click probabilities.

    Returns:
      {`auc`, `logloss`}: each a (value, update_op) pair of a streaming metric.
    """
    clipped = tf.clip_by_value(prob, LOG_LOSS_EPSILON, 1.0 - LOG_LOSS_EPSILON)
    example_log_loss = -(labels * tf.math.log(clipped) + (1.0 - labels) * tf.math.log(1.0 - clipped))
    return {
        "auc": tf.compat.v1.metrics.auc(
            labels, prob, num_thresholds=AUC_THRESHOLDS, summation_method="careful_interpolation"),
        "logloss": tf.compat.v1.metrics.mean(example_log_loss),
    }


def prediction_metrics(labels: tf.Tensor, predictions: Dict[str, tf.Tensor]
                       ) -> Dict[str, Tuple[tf.Tensor, tf.Operation]]:
    """`eval_metrics` of labels as the model_fn takes them and the model_fn's predictions.

    Args:
      labels: [B] or [B, 1] click labels in {0, 1}.
      predictions: the model_fn's predictions (`PREDICTION_KEY`: float32 [B]).

    Returns:
      The metrics of `eval_metrics`.
    """
    return eval_metrics(_flat_labels(labels), predictions[PREDICTION_KEY])


def _flat_labels(labels: tf.Tensor) -> tf.Tensor:
    return tf.reshape(tf.cast(labels, tf.float32), [-1])


def model_fn(features: Dict[str, tf.Tensor], labels: Optional[tf.Tensor], mode: str,
             params: Dict) -> tf.estimator.EstimatorSpec:
    """The DeepFM Estimator model_fn.

    Args:
      features: {`feat_ids`: int64 [B, F], `feat_vals`: float32 [B, F]}.
      labels: float32 [B] (or [B, 1]) click labels in {0, 1}; None in PREDICT.
      mode: a `tf.estimator.ModeKeys` value.
      params: `model`: a `ModelConfig`; optional `optimizer_wrapper` and
        `embedding_partitioner` (see the module docstring). In EVAL the
        model_fn sets `params[EVAL_METRICS_PARAM]` to `prediction_metrics`.

    Returns:
      The `EstimatorSpec`: predictions `prob` float32 [B]; in TRAIN and EVAL
      the loss (mean sigmoid cross-entropy + l2_reg * L2 of the looked-up FM
      weights), in EVAL the metrics `auc` and `logloss`.
    """
    config: ModelConfig = params["model"]
    training = mode == tf.estimator.ModeKeys.TRAIN
    logits, l2 = deepfm_logits(
        features[schema.FEAT_IDS], features[schema.FEAT_VALS], config, training,
        partitioner=params.get("embedding_partitioner"))
    prob = tf.sigmoid(logits)
    predictions = {PREDICTION_KEY: prob}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(
            mode, predictions=predictions,
            export_outputs={
                tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
                    tf.estimator.export.PredictOutput({SERVING_SIGNATURE_OUTPUT: prob})})

    labels = _flat_labels(labels)
    cross_entropy = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    loss = cross_entropy + config.l2_reg * l2

    if mode == tf.estimator.ModeKeys.EVAL:
        params[EVAL_METRICS_PARAM] = prediction_metrics
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, predictions=predictions, eval_metric_ops=eval_metrics(labels, prob))

    tf.compat.v1.add_to_collection(TRAIN_LOSS_COLLECTION, loss)
    optimizer = make_optimizer(config)
    wrapper = params.get("optimizer_wrapper")
    if wrapper is not None:
        optimizer = wrapper(optimizer)
    update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
    with tf.control_dependencies(update_ops):
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, predictions=predictions, train_op=train_op)


def serving_input_receiver_fn(field_size: int):
    """Returns the serving input function: `feat_ids` and `feat_vals` [None, F]."""
    def receiver():
        inputs = {
            schema.FEAT_IDS: tf.compat.v1.placeholder(tf.int64, [None, field_size], name=schema.FEAT_IDS),
            schema.FEAT_VALS: tf.compat.v1.placeholder(tf.float32, [None, field_size], name=schema.FEAT_VALS),
        }
        return tf.estimator.export.ServingInputReceiver(inputs, inputs)
    return receiver
