"""The `tower` strategy: one model copy per local device, gradients averaged.

The tower method of TF 1.x (`tf.contrib.estimator.replicate_model_fn` and
`TowerOptimizer`, removed in TF 2): each training step reads one batch of
`per_replica_batch * towers` examples, splits it along the batch into one
slice per tower, and builds the unchanged model_fn once per tower under
`tf.device(tower)`. The towers share one set of variables (the model's
`AUTO_REUSE` variable scope), placed on `/cpu:0`. Each tower's optimizer is
wrapped so that it hands its gradients over instead of applying them; the
gradients are averaged on `/cpu:0` (embedding gradients stay sparse) and
applied once by the real optimizer, which advances the global step once.

On CPU the towers are the virtual devices `/cpu:1` .. `/cpu:N` (see
`strategies.devices`); on GPUs, `/gpu:0` .. `/gpu:N-1`.

Per mode:

* TRAIN: loss = the mean of the towers' losses, weighted by their rows
  (equal to the loss of one model on the whole batch);
* EVAL: predictions are concatenated in batch order and the model's metrics
  are computed once on the whole batch, by the metric function the model_fn
  hands to `ModelContext.eval_metric_ops` (`metric_fn(labels, predictions)`,
  with the model_fn's labels and predictions);
* PREDICT (and export): one tower, the model_fn itself, so the SavedModel
  names no virtual device.
"""

import collections
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from strategies import context as context_lib
from strategies import devices as devices_lib
from strategies import input_plan as input_plan_lib
from strategies import registry
from strategies import strategy_names as names

# Op types that create variables; the tower device function puts them on the
# parameter device.
VARIABLE_OP_TYPES = frozenset(("Variable", "VariableV2", "VarHandleOp"))
TOWER_SCOPE = "tower_%d"
INPUT_SCOPE = "split_inputs"
AGGREGATION_SCOPE = "tower_aggregation"

GradsAndVars = List[Tuple[Optional[tf.Tensor], tf.Variable]]


def tower_device_fn(tower_device: str, parameter_device: str):
    """A device function: variables on `parameter_device`, other ops on the tower.

    A device already set on an op (by an inner `tf.device`) is kept; an outer
    device function (e.g. a parameter server's `replica_device_setter`) fills
    in what this one leaves open.

    Args:
      tower_device: the tower's device, e.g. `/cpu:1`.
      parameter_device: where variables live, e.g. `/cpu:0`.

    Returns:
      A callable for `tf.compat.v1.device`, taking an op and returning its device string.
    """
    def place(op) -> str:
        op_type = op.type if isinstance(op, tf.Operation) else op.op
        target = parameter_device if op_type in VARIABLE_OP_TYPES else tower_device
        current = tf.DeviceSpec.from_string(op.device or "")
        return tf.DeviceSpec.from_string(target).make_merged_spec(current).to_string()
    return place


class TowerOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps one tower's optimizer: computes gradients, applies nothing.

    `apply_gradients` hands the tower's gradients to a `GradientCollector`
    and returns a no-op; the collector later applies their average once.
    """

    def __init__(self, optimizer: tf.compat.v1.train.Optimizer, collector: "GradientCollector"):
        super().__init__(use_locking=False, name="Tower" + optimizer.get_name())
        self._optimizer = optimizer
        self._collector = collector

    def compute_gradients(self, loss, var_list=None, **kwargs) -> GradsAndVars:
        """The wrapped optimizer's gradients, computed next to the tower's ops."""
        kwargs["colocate_gradients_with_ops"] = True
        return self._optimizer.compute_gradients(loss, var_list=var_list, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None) -> tf.Operation:
        """Records the gradients; the global step is advanced by the collector."""
        del global_step
        self._collector.add(self._optimizer, list(grads_and_vars))
        return tf.no_op(name=name or "collect_gradients")


class GradientCollector:
    """Gathers every tower's gradients and applies their weighted average.

    Attributes:
      optimizers: each tower's real optimizer, in tower order.
      tower_gradients: each tower's (gradient, variable) pairs.
    """

    def __init__(self):
        self.optimizers: List[tf.compat.v1.train.Optimizer] = []
        self.tower_gradients: List[GradsAndVars] = []

    def wrap(self, optimizer: tf.compat.v1.train.Optimizer) -> "TowerOptimizer":
        """The outermost optimizer wrapper of one tower: it hands the gradients to this collector."""
        return TowerOptimizer(optimizer, self)

    def add(self, optimizer: tf.compat.v1.train.Optimizer, grads_and_vars: GradsAndVars) -> None:
        self.optimizers.append(optimizer)
        self.tower_gradients.append(grads_and_vars)

    def apply(self, weights: tf.Tensor, global_step: tf.Variable) -> tf.Operation:
        """Applies sum_i weights[i] * gradient_i with the first tower's optimizer.

        Args:
          weights: float32 [towers], each tower's share of the batch (1/towers
            for equal slices).
          global_step: incremented once.

        Returns:
          The train op.

        Raises:
          ValueError: no tower computed gradients (a model_fn that did not
            call its optimizer).
        """
        if not self.optimizers:
            raise ValueError("no tower computed gradients: the model_fn must build its train op with "
                             "ModelContext.minimize")
        return self.optimizers[0].apply_gradients(
            average_gradients(self.tower_gradients, weights), global_step=global_step)


def average_gradients(tower_gradients: Sequence[GradsAndVars], weights: tf.Tensor) -> GradsAndVars:
    """The weighted sum of the towers' gradients of each shared variable.

    `tf.IndexedSlices` (embedding-table gradients) stay sparse: their values
    are scaled and concatenated with their indices, and the optimizer sums
    duplicate indices when it applies them.

    Args:
      tower_gradients: per tower, (gradient or None, variable) pairs.
      weights: float32 [towers].

    Returns:
      One (gradient, variable) pair per variable with a gradient in any tower.
    """
    by_variable: Dict[Any, Tuple[tf.Variable, List[Tuple[tf.Tensor, tf.Tensor]]]] = collections.OrderedDict()
    for tower, grads_and_vars in enumerate(tower_gradients):
        for grad, var in grads_and_vars:
            if grad is not None:
                by_variable.setdefault(var.ref(), (var, []))[1].append((weights[tower], grad))
    averaged = []
    for var, weighted in by_variable.values():
        if all(isinstance(grad, tf.IndexedSlices) for _, grad in weighted):
            grad = tf.IndexedSlices(
                tf.concat([g.values * w for w, g in weighted], axis=0),
                tf.concat([g.indices for _, g in weighted], axis=0),
                weighted[0][1].dense_shape)
        else:
            grad = tf.add_n([tf.convert_to_tensor(g) * w for w, g in weighted])
        averaged.append((grad, var))
    return averaged


def split_batch(tensors, towers: int) -> Tuple[List, tf.Tensor]:
    """Splits a nest of batch-major tensors into `towers` slices in order.

    Slices differ by at most one row. A batch smaller than `towers` is padded
    with copies of its first row so every tower gets one row; padding rows
    get weight 0.

    Args:
      tensors: a nest (dict, tuple, ...) of tensors with the same batch size
        B along axis 0.
      towers: number of slices.

    Returns:
      slices: `towers` nests like `tensors`, together holding its rows (plus
        padding) in order.
      weights: float32 [towers], the real rows of each slice divided by B
        (they sum to 1).
    """
    flat = tf.nest.flatten(tensors)
    batch = tf.shape(flat[0])[0]
    padded = tf.maximum(batch, towers)
    sizes = padded // towers + tf.cast(tf.range(towers) < padded % towers, tf.int32)
    offsets = tf.cumsum(sizes, exclusive=True)
    weights = tf.cast(tf.clip_by_value(batch - offsets, 0, sizes), tf.float32) / tf.cast(batch, tf.float32)
    padding = tf.zeros([padded - batch], tf.int32)
    parts = [tf.split(tf.concat([t, tf.gather(t, padding)], axis=0), sizes, num=towers) for t in flat]
    slices = [tf.nest.pack_sequence_as(tensors, [p[i] for p in parts]) for i in range(towers)]
    return slices, weights


def _concat_predictions(specs, batch: tf.Tensor) -> Dict[str, tf.Tensor]:
    keys = specs[0].predictions.keys()
    return {key: tf.concat([spec.predictions[key] for spec in specs], axis=0)[:batch] for key in keys}


def replicate_model_fn(model_fn: context_lib.ModelFn, device_list: devices_lib.DeviceList) -> context_lib.ModelFn:
    """Returns a model_fn that trains `model_fn` as towers over `device_list`.

    Args:
      model_fn: a model_fn `(features, labels, mode, params)` whose params
        hold its `ModelContext`, that trains through
        `ModelContext.minimize`, shares its variables across calls
        (`AUTO_REUSE`) and, in EVAL, computes its metrics with
        `ModelContext.eval_metric_ops`.
      device_list: the tower devices and the parameter device.

    Returns:
      The replicated model_fn (see the module docstring for each mode). In
      EVAL it raises ValueError when the model_fn published no metric
      function.
    """
    towers = len(device_list)
    parameter_device = device_list.parameter_device

    def replicated_model_fn(features, labels, mode, params) -> tf.estimator.EstimatorSpec:
        if mode == tf.estimator.ModeKeys.PREDICT:
            return model_fn(features, labels, mode, params)
        with tf.name_scope(INPUT_SCOPE), tf.device(parameter_device):
            batch = tf.shape(tf.nest.flatten(features)[0])[0]
            slices, weights = split_batch((features, labels), towers)
        collector = GradientCollector()
        metric_fns: List[context_lib.MetricFn] = []
        context = context_lib.ModelContext.of(params)
        tower_params = dataclasses.replace(
            context, optimizer_wrappers=context.optimizer_wrappers + (collector.wrap,),
            metric_sink=metric_fns.append).with_params(params)
        specs = []
        for tower, device in enumerate(device_list.devices):
            with tf.name_scope(TOWER_SCOPE % tower), tf.compat.v1.device(
                    tower_device_fn(device, parameter_device)):
                specs.append(model_fn(*slices[tower], mode, tower_params))

        # In EVAL each tower's own metrics (over its slice) are left unused:
        # the metrics below see the whole batch.
        fields = specs[0]._asdict()
        with tf.name_scope(AGGREGATION_SCOPE), tf.device(parameter_device):
            fields["loss"] = tf.reduce_sum(tf.stack([spec.loss for spec in specs]) * weights)
            fields["predictions"] = _concat_predictions(specs, batch)
            if mode == tf.estimator.ModeKeys.EVAL:
                if not metric_fns:
                    raise ValueError(
                        "the tower method computes the metrics once over all towers, with the metric function "
                        "the model_fn passes to ModelContext.eval_metric_ops in EVAL; %s passed none (its own "
                        "metrics would cover one tower's slice only)" % getattr(model_fn, "__name__", model_fn))
                fields["eval_metric_ops"] = metric_fns[-1](labels, fields["predictions"])
                return tf.estimator.EstimatorSpec(**fields)
        # Outside any name scope, so that the optimizer's own variables (Adam's
        # beta powers) have the names a single-device model gives them.
        dependencies = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        with tf.device(parameter_device), tf.control_dependencies(
                dependencies + [spec.train_op for spec in specs]):
            fields["train_op"] = collector.apply(weights, tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(**fields)

    return replicated_model_fn


@dataclasses.dataclass(frozen=True)
class TowerOptions(devices_lib.ReplicaOptions):
    """Options of the `tower` strategy (`num_devices`: towers on this host)."""


@registry.register(names.TOWER)
class TowerStrategy(devices_lib.LocalReplicaStrategy):
    """One process, one model copy per local CPU or GPU device.

    Reads `num_devices` (0: every GPU, or every CPU core but `/cpu:0`) from
    its `TowerOptions` and `device_type` from the `StrategyConfig`.
    """

    Options = TowerOptions
    _options: TowerOptions

    def input_plan(self) -> input_plan_lib.InputPlan:
        """All towers' batches in one dataset batch: `per_replica_batch * towers` examples."""
        return dataclasses.replace(super().input_plan(), replicas_per_batch=len(self.device_list))

    def _replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """One copy of `model_fn` per tower (`replicate_model_fn`)."""
        return replicate_model_fn(model_fn, self.device_list)

    def describe(self) -> str:
        return "tower: %d tower(s) on %s, variables on %s" % (
            len(self.device_list), ",".join(self.device_list.devices), self.device_list.parameter_device)
