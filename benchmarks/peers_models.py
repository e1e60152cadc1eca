"""The models of `benchmarks.peers` that are not the library's: the bare recipe and a lever's network.

* `bare_model_fn` and `bare_input_fn`: DeepFM as a plain TF 1.x Estimator
  recipe, written without the library on purpose: it is the peer the
  library's `single` strategy is measured against (`bare+adam`).
* `one_gather_logits`: the library's DeepFM with its two tables in one,
  written against the library's model contract (a lever of the benchmark).

The sizes are the SageMaker sample's, which every variant of the benchmark
trains at.
"""

from typing import Sequence

BATCH_SIZE = 1024
EMBEDDING_SIZE = 32
DEEP_LAYERS = (128, 64, 32)
DROPOUT = 0.5
LEARNING_RATE = 0.0005
L2_REG = 0.0001


def bare_model_fn(features, labels, mode, params):
    """DeepFM as a plain TF 1.x Estimator model_fn: the library's model, without the library.

    `params`: `feature_size`, `field_size`. The same network and loss as
    `deepfm.models.deepfm` (first- and second-order FM, an MLP over the
    field embeddings with dropout, mean cross-entropy plus L2 on the rows
    looked up), trained with Adam.
    """
    import tensorflow as tf

    from deepfm.models import ctr
    from input_pipeline import schema

    field_size = params["field_size"]
    ids = features[schema.FEAT_IDS]
    values = tf.reshape(features[schema.FEAT_VALS], [-1, field_size])
    training = mode == tf.estimator.ModeKeys.TRAIN
    init = tf.compat.v1.glorot_normal_initializer()
    bias = tf.compat.v1.get_variable("fm_bias", [1], initializer=tf.compat.v1.zeros_initializer())
    fm_w = tf.compat.v1.get_variable("fm_w", [params["feature_size"]], initializer=init)
    fm_v = tf.compat.v1.get_variable("fm_v", [params["feature_size"], EMBEDDING_SIZE], initializer=init)
    weights = tf.nn.embedding_lookup(fm_w, ids)
    factors = tf.nn.embedding_lookup(fm_v, ids)
    embeddings = factors * tf.expand_dims(values, -1)
    first = tf.reduce_sum(weights * values, axis=1)
    second = 0.5 * tf.reduce_sum(tf.square(tf.reduce_sum(embeddings, 1)) - tf.reduce_sum(tf.square(embeddings), 1), 1)
    hidden = tf.reshape(embeddings, [-1, field_size * EMBEDDING_SIZE])
    for width in DEEP_LAYERS:
        hidden = tf.compat.v1.layers.dense(hidden, width, tf.nn.relu, kernel_initializer=init)
        hidden = tf.compat.v1.layers.dropout(hidden, DROPOUT, training=training)
    deep = tf.squeeze(tf.compat.v1.layers.dense(hidden, 1, kernel_initializer=init), 1)
    logits = bias + first + second + deep
    prob = tf.sigmoid(logits)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={ctr.PREDICTION_KEY: prob})
    labels = tf.reshape(labels, [-1])
    l2 = (tf.reduce_sum(tf.square(weights)) + tf.reduce_sum(tf.square(factors))) / tf.cast(tf.shape(ids)[0],
                                                                                           tf.float32)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)) + L2_REG * l2
    train_op = tf.compat.v1.train.AdamOptimizer(LEARNING_RATE).minimize(
        loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def one_gather_logits(feat_ids, feat_vals, config, training, context):
    """The library's DeepFM network with its two tables in one: `[feature_size, 1 + k]`, looked up once.

    Column 0 of a row is the id's first-order weight, the other `k` its
    factors. Written against the library's model contract
    (`deepfm.models.ctr.network_model_fn`): the table is created and looked
    up through the strategy's context.
    """
    import tensorflow as tf

    from deepfm.models import ctr

    k = config.embedding_size
    feat_ids, feat_vals = ctr.checked_inputs(feat_ids, feat_vals, config)
    with tf.compat.v1.variable_scope("deepfm_model", reuse=tf.compat.v1.AUTO_REUSE):
        bias = tf.compat.v1.get_variable("fm_bias", [1], initializer=tf.compat.v1.zeros_initializer())
        rows = context.embedding("fm_wv", config.feature_size, [1 + k]).lookup(feat_ids)    # [B, F, 1 + k]
        weights, factors = tf.split(rows, [1, k], axis=2)
        first = tf.reduce_sum(tf.squeeze(weights, 2) * feat_vals, axis=1)
        embeddings = factors * tf.expand_dims(feat_vals, -1)
        second = 0.5 * tf.reduce_sum(
            tf.square(tf.reduce_sum(embeddings, 1)) - tf.reduce_sum(tf.square(embeddings), 1), 1)
        with tf.compat.v1.variable_scope("deep"):
            hidden = ctr.mlp(tf.reshape(embeddings, [-1, config.field_size * k]), config, training)
            deep = tf.squeeze(ctr.dense(hidden, 1, "output"), axis=1)
        logits = bias + first + second + deep
        l2 = ctr.l2_of_rows([rows], tf.shape(feat_ids)[0])
    return logits, l2


def one_gather_model_fn(features, labels, mode, params):
    """The Estimator model_fn of `one_gather_logits`."""
    from deepfm.models import ctr
    return ctr.network_model_fn(one_gather_logits, "one_gather_model_fn")(features, labels, mode, params)


def bare_input_fn(paths: Sequence[str], field_size: int, compute_only: bool):
    """TFRecordDataset -> repeat -> batch -> parse_example -> prefetch (`compute_only`: one batch, cached, repeated)."""
    import tensorflow as tf

    from input_pipeline import decoders, schema

    spec = decoders.tfrecord_feature_spec(field_size)

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        return {schema.FEAT_IDS: parsed[schema.IDS_KEY], schema.FEAT_VALS: parsed[schema.VALUES_KEY]}, \
            parsed[schema.LABEL_KEY]

    def input_fn():
        dataset = tf.data.TFRecordDataset(list(paths)).repeat().batch(BATCH_SIZE, drop_remainder=True).map(parse)
        if compute_only:
            dataset = dataset.take(1).cache().repeat()
        return dataset.prefetch(tf.data.AUTOTUNE)
    return input_fn
