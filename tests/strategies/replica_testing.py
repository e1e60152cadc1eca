"""Tiny learnable data and Estimators for the tower and mirrored strategy tests.

Rows have `FIELD_SIZE` fields; field f draws its id from its own block of
`IDS_PER_FIELD` ids, and the label is 1 when the sum of planted per-id
weights plus a little noise is positive, so a few hundred steps reach an
AUC far above 0.5.
"""

import shutil
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from deepfm.config import DEFAULT_BATCH_SIZE, ModelConfig, TrainConfig
from deepfm.models import deepfm as model_lib
from deepfm.runtime import trainer
from input_pipeline import schema
from strategies.strategy import Strategy

FIELD_SIZE = 5
IDS_PER_FIELD = 40
FEATURE_SIZE = FIELD_SIZE * IDS_PER_FIELD
LABEL_NOISE = 0.3
SMALL_MODEL = dict(feature_size=FEATURE_SIZE, field_size=FIELD_SIZE, embedding_size=8, deep_layers=(16, 8),
                   dropout=(0.0, 0.0), learning_rate=0.01)

Rows = Tuple[np.ndarray, np.ndarray, np.ndarray]  # ids [n, F] int64, values [n, F] float32, labels [n] float32


def planted_rows(num_rows: int, seed: int = 0) -> Rows:
    """`num_rows` rows labelled by planted id weights (the same for every seed)."""
    weights = np.random.RandomState(0).randn(FEATURE_SIZE)
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, IDS_PER_FIELD, size=(num_rows, FIELD_SIZE)) + IDS_PER_FIELD * np.arange(FIELD_SIZE)
    values = np.ones((num_rows, FIELD_SIZE), np.float32)
    labels = (weights[ids].sum(axis=1) + LABEL_NOISE * rng.randn(num_rows) > 0).astype(np.float32)
    return ids.astype(np.int64), values, labels


def input_fn(rows: Rows, batch_size: int, repeat: bool = False, drop_remainder: bool = False):
    """An Estimator input_fn over `rows` in order; it ignores an input context."""
    ids, values, labels = rows

    def make_dataset(input_context=None):
        del input_context  # One input pipeline.
        dataset = tf.data.Dataset.from_tensor_slices(({schema.FEAT_IDS: ids, schema.FEAT_VALS: values}, labels))
        if repeat:
            dataset = dataset.repeat()
        return dataset.batch(batch_size, drop_remainder=drop_remainder)

    return make_dataset


def model_config(**overrides) -> ModelConfig:
    """The small test model, with `overrides` of its fields."""
    return ModelConfig(**dict(SMALL_MODEL, **overrides))


def build_estimator(strategy: Strategy, model_dir: str, model: Optional[ModelConfig] = None,
                    seed: int = 1, per_replica_batch: int = DEFAULT_BATCH_SIZE) -> tf.estimator.Estimator:
    """The Estimator `deepfm.runtime.trainer` builds for `strategy` at `per_replica_batch`.

    Sets the strategy up and prepares it for a run in `model_dir` (a strategy
    is prepared for one run: build a new one for another directory).
    """
    train = TrainConfig(model_dir=model_dir, train_files=(), seed=seed, log_every_n_steps=100,
                        batch_size=per_replica_batch)
    strategy.setup()
    strategy.prepare(trainer.plan_for(train))
    return trainer.build_estimator(model or model_config(), strategy)


def model_values(model_dir: str) -> Dict[str, np.ndarray]:
    """The `deepfm_model` variables of the latest checkpoint in `model_dir` (no optimizer slots)."""
    checkpoint = tf.train.latest_checkpoint(model_dir)
    return {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)
            if name.startswith(model_lib.SCOPE + "/") and "Adam" not in name}


def train_one_step_from(start_dir: str, model_dir: str, strategy: Strategy, rows: Rows,
                        model: ModelConfig) -> Dict[str, np.ndarray]:
    """Copies the checkpoint of `start_dir` to `model_dir` and trains one step on `rows`.

    The dataset batch is `InputPlan.batch_per_input_pipeline(per-replica
    batch)`, where the per-replica batch is `rows` split evenly over the
    replicas, so the step reads every row once.

    Returns:
      `model_values` after the step.
    """
    shutil.copytree(start_dir, model_dir)
    estimator = build_estimator(strategy, model_dir, model)
    per_replica = len(rows[0]) // strategy.topology.replicas_in_sync
    start_step = estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP)
    batch = strategy.input_plan().batch_per_input_pipeline(per_replica)
    estimator.train(input_fn(rows, batch), max_steps=start_step + 1)
    assert estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP) == start_step + 1
    return model_values(model_dir)


def assert_learns(test_case: tf.test.TestCase, strategy: Strategy, model_dir: str, per_replica_batch: int,
                  train_steps: int, eval_rows: int, eval_batch: int, min_auc: float) -> None:
    """Trains `strategy` for real and checks the loss halves and the AUC passes `min_auc`."""
    estimator = build_estimator(strategy, model_dir, per_replica_batch=per_replica_batch)
    train = input_fn(planted_rows(4096), strategy.input_plan().batch_per_input_pipeline(per_replica_batch),
                     repeat=True, drop_remainder=True)
    evaluate = input_fn(planted_rows(eval_rows, seed=1), eval_batch)

    estimator.train(train, max_steps=1)
    first = estimator.evaluate(evaluate)
    estimator.train(train, max_steps=train_steps)
    last = estimator.evaluate(evaluate)

    test_case.assertEqual(last["global_step"], train_steps)
    test_case.assertLess(last["loss"], 0.5 * first["loss"])
    test_case.assertGreater(last["auc"], min_auc)
