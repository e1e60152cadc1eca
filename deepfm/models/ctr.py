"""What every click-through-rate model_fn of this package shares, and a user's model_fn may use.

The runtime calls a model_fn with `params` holding two things, each taken
with its own accessor:

* the model's hyperparameters, a `deepfm.config.ModelConfig`
  (`model_config(params)`);
* what the strategy gives the model, a `strategies.ModelContext`
  (`strategies.ModelContext.of(params)`).

`estimator_spec` turns a network's logits into the `EstimatorSpec` of every
mode the way the runtime expects it: predictions and the serving signature
output `prob`, the loss (mean sigmoid cross-entropy plus an L2 penalty),
the evaluation metrics `auc` and `logloss`, and the train op, all through the
strategy's context. The serving input is the dataset schema's `feat_ids` and
`feat_vals` ([None, field_size] each; `serving_input_receiver_fn`).
"""

from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

import strategies
from deepfm.config import ModelConfig
from deepfm.models import optimizers
from input_pipeline import schema

# The params key of the model's hyperparameters (`model_config`).
MODEL_CONFIG_PARAM = "model"
PREDICTION_KEY = "prob"
SERVING_SIGNATURE_OUTPUT = "prob"
AUC_THRESHOLDS = 2000
LOG_LOSS_EPSILON = 1e-7
# The unsigned type of each id type (`check_ids` reads ids as unsigned).
UNSIGNED_OF = {tf.int64: tf.uint64, tf.int32: tf.uint32}


def model_config(params: Mapping) -> ModelConfig:
    """The `ModelConfig` in a model_fn's `params`.

    Raises:
      TypeError: `params` holds none, or something else under the key.
    """
    config = (params or {}).get(MODEL_CONFIG_PARAM)
    if not isinstance(config, ModelConfig):
        raise TypeError("params[%r] must be a deepfm.ModelConfig, got %r" % (MODEL_CONFIG_PARAM, config))
    return config


def model_params(config: ModelConfig) -> Dict:
    """The params the runtime passes to a model_fn: the model's hyperparameters."""
    return {MODEL_CONFIG_PARAM: config}


def check_ids(feat_ids: tf.Tensor, feature_size: int) -> tf.Tensor:
    """Returns `feat_ids` guarded by a check that every id is in [0, feature_size).

    TF's CPU gather fails with an unhelpful message on an id out of range, and
    the GPU gather silently returns zeros; this names the id instead. A step
    pays for one reduction: read as unsigned, a negative id is larger than any
    `feature_size`, so the largest unsigned id alone tells whether all are in
    range; the bad id is found and the message formatted only when one is not.
    """
    unsigned = UNSIGNED_OF[feat_ids.dtype]
    in_range = tf.reduce_max(tf.bitcast(feat_ids, unsigned)) < tf.constant(feature_size, unsigned)

    def fail():
        max_id = tf.reduce_max(feat_ids)
        bad_id = tf.where(max_id >= feature_size, max_id, tf.reduce_min(feat_ids))
        failed = tf.debugging.Assert(False, [tf.strings.format(
            "feature id {} is out of range [0, feature_size={}); check --feature_size "
            "or the metadata of the data", (bad_id, feature_size))])
        with tf.control_dependencies([failed]):
            return tf.no_op()

    check = tf.cond(in_range, tf.no_op, fail, name="check_feature_ids")
    with tf.control_dependencies([check]):
        return tf.identity(feat_ids)


def checked_inputs(feat_ids: tf.Tensor, feat_vals: tf.Tensor, config: ModelConfig) -> Tuple[tf.Tensor, tf.Tensor]:
    """The ids (guarded by `check_ids` when `config.check_ids`) and the values as [B, field_size]."""
    if config.check_ids:
        feat_ids = check_ids(feat_ids, config.feature_size)
    return feat_ids, tf.reshape(feat_vals, [-1, config.field_size])


def dense(inputs: tf.Tensor, units: int, name: str) -> tf.Tensor:
    """A fully connected layer, [B, n] -> [B, units], with shared (AUTO_REUSE) variables."""
    kernel = tf.compat.v1.get_variable(
        name + "/kernel", [inputs.shape[-1], units],
        initializer=tf.compat.v1.glorot_normal_initializer())
    bias = tf.compat.v1.get_variable(name + "/bias", [units], initializer=tf.compat.v1.zeros_initializer())
    return tf.compat.v1.nn.xw_plus_b(inputs, kernel, bias)


def mlp(hidden: tf.Tensor, config: ModelConfig, training: bool) -> tf.Tensor:
    """The deep part: `config.deep_layers` ReLU layers with dropout and optional batch norm, [B, n] -> [B, last]."""
    for layer, (width, drop_rate) in enumerate(zip(config.deep_layers, config.dropout)):
        hidden = dense(hidden, width, "layer_%d" % layer)
        if config.batch_norm:
            hidden = tf.compat.v1.layers.batch_normalization(
                hidden, momentum=config.batch_norm_decay, training=training,
                name="batch_norm_%d" % layer, reuse=tf.compat.v1.AUTO_REUSE)
        hidden = tf.nn.relu(hidden)
        if training and drop_rate > 0:
            hidden = tf.nn.dropout(hidden, rate=drop_rate)
    return hidden


def l2_of_rows(rows: Sequence[tf.Tensor], batch_size: tf.Tensor) -> tf.Tensor:
    """The L2 penalty of the embedding rows a batch looked up, per example (before `l2_reg`)."""
    return 2.0 * tf.add_n([tf.nn.l2_loss(r) for r in rows]) / tf.cast(batch_size, tf.float32)


def eval_metrics(labels: tf.Tensor, prob: tf.Tensor) -> Dict[str, Tuple[tf.Tensor, tf.Operation]]:
    """The evaluation metrics, as Estimator `eval_metric_ops`.

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
    """`eval_metrics` of labels as a model_fn takes them and its predictions (`PREDICTION_KEY`: [B])."""
    return eval_metrics(flat_labels(labels), predictions[PREDICTION_KEY])


def flat_labels(labels: tf.Tensor) -> tf.Tensor:
    """Labels given as [B] or [B, 1], as float32 [B]."""
    return tf.reshape(tf.cast(labels, tf.float32), [-1])


def estimator_spec(logits: tf.Tensor, l2: tf.Tensor, labels: Optional[tf.Tensor], mode: str,
                   config: ModelConfig, context: strategies.ModelContext) -> tf.estimator.EstimatorSpec:
    """The `EstimatorSpec` of a CTR network in `mode`.

    Args:
      logits: float32 [B].
      l2: the L2 penalty before `config.l2_reg` (e.g. `l2_of_rows`).
      labels: [B] or [B, 1] click labels; None in PREDICT.
      mode: a `tf.estimator.ModeKeys` value.
      config: the model's hyperparameters (`l2_reg`, the optimizer).
      context: the strategy's `ModelContext`.

    Returns:
      Predictions `prob` float32 [B]; in TRAIN and EVAL the loss (mean
      sigmoid cross-entropy + l2 weighted by `context.l2_weight(l2_reg)`);
      in EVAL the metrics `auc` and
      `logloss`; in TRAIN the train op of `config.optimizer`.
    """
    prob = tf.sigmoid(logits)
    predictions = {PREDICTION_KEY: prob}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(
            mode, predictions=predictions,
            export_outputs={
                tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY:
                    tf.estimator.export.PredictOutput({SERVING_SIGNATURE_OUTPUT: prob})})
    cross_entropy = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=flat_labels(labels),
                                                                           logits=logits))
    loss = cross_entropy + context.l2_weight(config.l2_reg) * l2
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, predictions=predictions,
            eval_metric_ops=context.eval_metric_ops(prediction_metrics, labels, predictions))
    train_op = context.minimize(loss, optimizers.optimizer_fn(config), config.learning_rate)
    return tf.estimator.EstimatorSpec(mode, loss=loss, predictions=predictions, train_op=train_op)


Network = Callable[[tf.Tensor, tf.Tensor, ModelConfig, bool, strategies.ModelContext], Tuple[tf.Tensor, tf.Tensor]]


def network_model_fn(network: Network, name: str) -> Callable:
    """The Estimator model_fn of a network `(feat_ids, feat_vals, config, training, context) -> (logits, l2)`.

    The model_fn takes `features` {`feat_ids`: int64 [B, F], `feat_vals`:
    float32 [B, F]}, labels [B] or [B, 1] (None in PREDICT), the mode, and
    `params` holding the `ModelConfig` and the strategy's `ModelContext`;
    it returns `estimator_spec`'s spec.
    """
    def model_fn(features, labels, mode, params) -> tf.estimator.EstimatorSpec:
        config = model_config(params)
        context = strategies.ModelContext.of(params)
        logits, l2 = network(features[schema.FEAT_IDS], features[schema.FEAT_VALS], config,
                             mode == tf.estimator.ModeKeys.TRAIN, context)
        return estimator_spec(logits, l2, labels, mode, config, context)
    model_fn.__name__ = name
    model_fn.__module__ = network.__module__
    return model_fn


def serving_input_receiver_fn(field_size: int):
    """Returns the serving input function: `feat_ids` int64 and `feat_vals` float32, [None, field_size]."""
    def receiver():
        inputs = {
            schema.FEAT_IDS: tf.compat.v1.placeholder(tf.int64, [None, field_size], name=schema.FEAT_IDS),
            schema.FEAT_VALS: tf.compat.v1.placeholder(tf.float32, [None, field_size], name=schema.FEAT_VALS),
        }
        return tf.estimator.export.ServingInputReceiver(inputs, inputs)
    return receiver
