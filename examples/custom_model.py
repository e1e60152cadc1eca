"""A model_fn of your own, trained under every strategy: logistic regression plus an MLP.

The strategies train any Estimator model_fn that takes what they give it
through `deepfm.ModelContext` (docs/api.md, "The strategy-model contract").
This one was not written by the library: for an example with feature ids
`i_1..i_F` and values `x_1..x_F`,

    logit = b + sum_f w[i_f] x_f  +  MLP(concat_f e[i_f] x_f)

a logistic regression over the ids (one weight per id) plus a ReLU MLP over
its own per-field embeddings. Its two tables are made and looked up through
the context, so one variable on one device, partitions on parameter
servers, or rows sharded across Horovod ranks (`hybrid`) are all the same to
it; its train op and its metrics go through the context too.

Train it with `examples/train_from_python.py`'s command line (run from the
project root, with the project importable)::

    python examples/custom_model.py data/synthetic --model_dir runs/custom --strategy mirrored --num_devices 2
    python -m deepfm.launch --strategy ps --num_ps 1 --num_workers 2 --program examples/custom_model.py -- \\
        data/synthetic --model_dir runs/custom-ps
"""

import tensorflow as tf

import deepfm
from deepfm.models import ctr
from input_pipeline import schema

SCOPE = "wide_mlp"
# What the runtime reads from every model_fn: the click probability (predictions, and the
# serving signature's output) and the validation metrics it reports.
PROB = ctr.PREDICTION_KEY  # "prob"
SERVING_OUTPUT = ctr.SERVING_SIGNATURE_OUTPUT  # "prob"
AUC_THRESHOLDS = 2000


def metric_fn(labels, predictions):
    """The evaluation metrics, from labels and predictions as model_fn takes and returns them.

    The runtime reports `auc` and `logloss`, so a model_fn provides both.
    The tower strategy calls this once over the whole batch (all towers).
    """
    labels = tf.reshape(tf.cast(labels, tf.float32), [-1])
    prob = predictions[PROB]
    return {
        "auc": tf.compat.v1.metrics.auc(labels, prob, num_thresholds=AUC_THRESHOLDS),
        "logloss": tf.compat.v1.metrics.mean(
            tf.compat.v1.losses.log_loss(labels, prob, reduction=tf.compat.v1.losses.Reduction.NONE)),
    }


def dense(inputs, units, name):
    """A fully connected layer whose variables the tower method's copies share (AUTO_REUSE scope)."""
    kernel = tf.compat.v1.get_variable(name + "/kernel", [inputs.shape[-1], units],
                                       initializer=tf.compat.v1.glorot_normal_initializer())
    bias = tf.compat.v1.get_variable(name + "/bias", [units], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(inputs, kernel) + bias


def model_fn(features, labels, mode, params):
    """An Estimator model_fn: features {feat_ids, feat_vals: [B, F]}, labels [B] or [B, 1]."""
    config = ctr.model_config(params)           # the deepfm.ModelConfig: sizes, layers, learning rate
    context = deepfm.ModelContext.of(params)    # what the strategy gives the model
    ids, values = features[schema.FEAT_IDS], features[schema.FEAT_VALS]  # int64, float32 [B, F]

    # Variables with tf.compat.v1.get_variable under AUTO_REUSE, so that the tower method's
    # copies of this function share one set.
    with tf.compat.v1.variable_scope(SCOPE, reuse=tf.compat.v1.AUTO_REUSE):
        # Tables through the context: it decides where their rows live.
        weights = context.embedding("weights", config.feature_size).lookup(ids)          # [B, F]
        embeddings = context.embedding(
            "embeddings", config.feature_size, [config.embedding_size]).lookup(ids)      # [B, F, k]
        bias = tf.compat.v1.get_variable("bias", [], initializer=tf.compat.v1.zeros_initializer())
        linear = bias + tf.reduce_sum(weights * values, axis=1)                          # [B]
        hidden = tf.reshape(embeddings * tf.expand_dims(values, -1),
                            [-1, config.field_size * config.embedding_size])
        for layer, width in enumerate(config.deep_layers):
            hidden = tf.nn.relu(dense(hidden, width, "hidden_%d" % layer))
        logits = linear + tf.squeeze(dense(hidden, 1, "output"), axis=1)                 # [B]

    prob = tf.sigmoid(logits)
    predictions = {PROB: prob}
    if mode == tf.estimator.ModeKeys.PREDICT:
        # The SavedModel's serving signature: feat_ids, feat_vals -> prob (deepfm.write_predictions).
        serving = tf.estimator.export.PredictOutput({SERVING_OUTPUT: prob})
        return tf.estimator.EstimatorSpec(mode, predictions=predictions, export_outputs={
            tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: serving})

    flat_labels = tf.reshape(tf.cast(labels, tf.float32), [-1])
    # Only the rows this batch looked up are penalized.
    l2 = (tf.nn.l2_loss(weights) + tf.nn.l2_loss(embeddings)) / tf.cast(tf.shape(ids)[0], tf.float32)
    loss = (tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=flat_labels, logits=logits))
            + config.l2_reg * l2)
    if mode == tf.estimator.ModeKeys.EVAL:
        # Through the context: the tower method computes them once over every tower's predictions.
        return tf.estimator.EstimatorSpec(mode, loss=loss, predictions=predictions,
                                          eval_metric_ops=context.eval_metric_ops(metric_fn, labels, predictions))
    # Through the context: the strategy scales the learning rate (Horovod ranks, asynchronous
    # parameter servers) and wraps the optimizer (Horovod's allreduce, the tower gradient sum).
    train_op = context.minimize(loss, tf.compat.v1.train.AdamOptimizer, config.learning_rate)
    return tf.estimator.EstimatorSpec(mode, loss=loss, predictions=predictions, train_op=train_op)


if __name__ == "__main__":
    # The command line of examples/train_from_python.py (the script beside this one), with this model_fn.
    # Imported here, so that a job that imports this module for its model_fn alone needs only this file.
    import train_from_python
    train_from_python.main(model_fn=model_fn)
