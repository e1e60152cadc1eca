"""Optimizers of the DeepFM model, including a sparse-row ("lazy") Adam.

TF 1.x's `AdamOptimizer` decays both moment slots of *every* row of an
embedding table at every step, even when a batch touches a few thousand of
its rows: on a 117,581 x 32 table that is most of a step's memory traffic.
`LazyAdamOptimizer` updates only the rows present in the sparse gradient,
which is what `tf.contrib.opt.LazyAdamOptimizer` did before TF 2 removed it.
Dense variables get the ordinary Adam update.

Every optimizer here creates its slots filled by an op the graph cannot fold
into a constant (`OwnedSlots`). TF's own slot initializers (`zeros`, a
constant accumulator) become constants of the slot's whole size; the slot's
variable then shares that constant's buffer, and its first sparse update
copies the slot while the constant stays: one more copy of every slot for
the life of the session (docs/large_tables.md, "Tables larger than a host").
"""

import functools
from typing import Callable, Optional

import tensorflow as tf

from deepfm.config import ModelConfig

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPSILON = 1e-8
ADAGRAD_INITIAL_ACCUMULATOR = 1e-8


class UnfoldedFill:
    """An initializer of one value whose shape reaches `Fill` through a placeholder, so it is never a constant.

    `tf.zeros` or `tf.constant_initializer` of a fully defined shape is folded
    into a constant tensor that the graph keeps; a variable initialized from
    it shares the constant's buffer until its first sparse update copies it.
    A `Fill` whose shape is a `placeholder_with_default` is computed when the
    initializer runs, and the variable takes its buffer.

    Args:
      value: the value of every element.
    """

    def __init__(self, value: float = 0.0):
        self.value = value

    def __call__(self, shape, dtype=tf.float32, partition_info=None):
        del partition_info
        dims = tf.constant(list(tf.TensorShape(shape).as_list()), tf.int64)
        shape_at_run = tf.compat.v1.placeholder_with_default(dims, dims.shape, name="unfolded_shape")
        filled = tf.fill(shape_at_run, tf.cast(self.value, tf.as_dtype(dtype).base_dtype))
        # The static shape, for the variable made from it (EnsureShape passes the buffer on).
        return tf.ensure_shape(filled, tf.TensorShape(shape))


class OwnedSlots(tf.compat.v1.train.Optimizer):
    """Optimizer slots initialized by `UnfoldedFill`: each slot variable owns its buffer.

    Mix in before a `tf.compat.v1.train.Optimizer` class. Slots of variables
    whose shape is not fully defined keep TF's own initializers.
    """

    def _zeros_slot(self, var, slot_name, op_name):
        if not var.get_shape().is_fully_defined():
            return super()._zeros_slot(var, slot_name, op_name)
        return self._get_or_make_slot_with_initializer(var, UnfoldedFill(0.0), var.get_shape(),
                                                       var.dtype.base_dtype, slot_name, op_name)

    def _get_or_make_slot_with_initializer(self, var, initializer, shape, dtype, slot_name, op_name):
        value = _constant_value(initializer)
        if value is not None and tf.TensorShape(shape).is_fully_defined():
            initializer = UnfoldedFill(value)
        return super()._get_or_make_slot_with_initializer(
            var, initializer, shape, dtype, slot_name, op_name)


def _constant_value(initializer) -> Optional[float]:
    """The value of a constant or zeros initializer of TF's, else None."""
    if isinstance(initializer, UnfoldedFill):
        return None
    if isinstance(initializer, tf.compat.v1.zeros_initializer):
        return 0.0
    if isinstance(initializer, tf.compat.v1.constant_initializer) and isinstance(initializer.value, (int, float)):
        return float(initializer.value)
    return None


class AdamOptimizer(OwnedSlots, tf.compat.v1.train.AdamOptimizer):
    """TF 1.x's Adam, its slots owning their buffers (`OwnedSlots`)."""


class AdagradOptimizer(OwnedSlots, tf.compat.v1.train.AdagradOptimizer):
    """TF 1.x's Adagrad, its slots owning their buffers (`OwnedSlots`)."""


class MomentumOptimizer(OwnedSlots, tf.compat.v1.train.MomentumOptimizer):
    """TF 1.x's Momentum, its slots owning their buffers (`OwnedSlots`)."""


class FtrlOptimizer(OwnedSlots, tf.compat.v1.train.FtrlOptimizer):
    """TF 1.x's FTRL, its slots owning their buffers (`OwnedSlots`)."""


class LazyAdamOptimizer(AdamOptimizer):
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
        return AdamOptimizer(lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON)
    if name == "lazy_adam":
        return LazyAdamOptimizer(lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON)
    if name == "adagrad":
        return AdagradOptimizer(lr, initial_accumulator_value=ADAGRAD_INITIAL_ACCUMULATOR)
    if name == "momentum":
        return MomentumOptimizer(lr, config.momentum)
    if name == "ftrl":
        return FtrlOptimizer(lr)
    if name == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(lr)
    raise ValueError("unknown optimizer %r" % name)
