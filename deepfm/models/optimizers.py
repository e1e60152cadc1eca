"""Optimizers of the DeepFM model, including a sparse-row ("lazy") Adam.

TF 1.x's `AdamOptimizer` decays both moment slots of *every* row of an
embedding table at every step, even when a batch touches a few thousand of
its rows: on a 117,581 x 32 table that is most of a step's memory traffic.
`LazyAdamOptimizer` updates only the rows present in the sparse gradient,
which is what `tf.contrib.opt.LazyAdamOptimizer` did before TF 2 removed it.
Dense variables get the ordinary Adam update.
"""

import functools
from typing import Callable, Optional

import tensorflow as tf

from deepfm.config import ModelConfig

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPSILON = 1e-8
ADAGRAD_INITIAL_ACCUMULATOR = 1e-8


class LazyAdamOptimizer(tf.compat.v1.train.AdamOptimizer):
    """Adam whose sparse updates touch only the rows in the gradient.

    The moments of rows absent from a batch keep their values instead of
    decaying, as in `tf.contrib.opt.LazyAdamOptimizer`. The base class sums
    duplicate indices before `_resource_apply_sparse` is called.
    """

    def _resource_apply_sparse(self, grad, var, indices):
        beta1_power, beta2_power = self._get_beta_accumulators()
        dtype = var.dtype.base_dtype
        beta1_power = tf.cast(beta1_power, dtype)
        beta2_power = tf.cast(beta2_power, dtype)
        lr = tf.cast(self._lr_t, dtype)
        beta1 = tf.cast(self._beta1_t, dtype)
        beta2 = tf.cast(self._beta2_t, dtype)
        epsilon = tf.cast(self._epsilon_t, dtype)
        step_size = lr * tf.sqrt(1.0 - beta2_power) / (1.0 - beta1_power)

        m = self.get_slot(var, "m")
        v = self.get_slot(var, "v")
        m_rows = beta1 * tf.gather(m, indices) + (1.0 - beta1) * grad
        v_rows = beta2 * tf.gather(v, indices) + (1.0 - beta2) * tf.square(grad)
        m_update = m.scatter_update(tf.IndexedSlices(m_rows, indices))
        v_update = v.scatter_update(tf.IndexedSlices(v_rows, indices))
        with tf.control_dependencies([m_update, v_update]):
            var_update = var.scatter_sub(
                tf.IndexedSlices(step_size * m_rows / (tf.sqrt(v_rows) + epsilon), indices))
        return tf.group(var_update, m_update, v_update)


def optimizer_fn(config: ModelConfig) -> Callable[[float], tf.compat.v1.train.Optimizer]:
    """`config.optimizer` as a function of the learning rate (what `ModelContext.minimize` takes)."""
    return functools.partial(make_optimizer, config)


def make_optimizer(config: ModelConfig, learning_rate: Optional[float] = None) -> tf.compat.v1.train.Optimizer:
    """Returns the TF 1.x optimizer named by `config.optimizer`.

    Args:
      config: the model's hyperparameters (`optimizer`, `momentum`).
      learning_rate: the rate; default `config.learning_rate`.

    Raises:
      ValueError: an unknown optimizer name (also caught by `ModelConfig`).
    """
    lr = config.learning_rate if learning_rate is None else learning_rate
    name = config.optimizer
    if name == "adam":
        return tf.compat.v1.train.AdamOptimizer(lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON)
    if name == "lazy_adam":
        return LazyAdamOptimizer(lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON)
    if name == "adagrad":
        return tf.compat.v1.train.AdagradOptimizer(lr, initial_accumulator_value=ADAGRAD_INITIAL_ACCUMULATOR)
    if name == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(lr, config.momentum)
    if name == "ftrl":
        return tf.compat.v1.train.FtrlOptimizer(lr)
    if name == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(lr)
    raise ValueError("unknown optimizer %r" % name)
