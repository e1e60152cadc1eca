"""Evaluation shared by processes that evaluate together: each reads a shard of the rows, the metric state is summed.

Horovod ranks (`horovod`, `hybrid`) evaluate together: rank r of n reads
shard r of the validation rows (the input pipeline's sharding, by files or by
records, so the shards hold every row exactly once), and the evaluation's
result is computed from the SUM over the ranks of every metric's state. The
state of the streaming metrics of `tf.compat.v1.metrics` adds up: AUC's four
confusion-count vectors (one count per threshold), a mean's weighted total
and weight count, the counts of accuracy, precision and recall. So AUC and
log loss computed from the summed state are those of all the rows, as one
process evaluating every row would find them; averaging each rank's AUC
would not be.

The parts:

* `marked_batches`: the evaluation input of a rank. Every batch carries
  `ROW_KEY`, each row's weight (1); where the ranks must run the same number
  of batches (`hybrid`: every embedding lookup is an all-to-all, a
  collective), the shorter shards are padded with batches of one row of
  weight 0 up to the largest shard's batch count (`most_batches`).
* `summed_state`: the op that replaces every metric variable by its sum over
  the ranks, in one allreduce per dtype.
* `SumMetricStateHook`: an evaluation hook that runs that op once, when the
  last batch has been evaluated. `Estimator.evaluate` computes the metric
  values once, after the last batch, in a `FinalOpsHook` that TensorFlow's
  evaluation loop (`evaluation._evaluate_once`) appends after the spec's
  evaluation hooks; a session's hooks end in order, so the values are read
  from the summed state. The hook also counts the rows this rank evaluated,
  and logs them (`<task> evaluated <rows> row(s) in <batches> batch(es)`).

The strategy's model_fn wrapper takes `ROW_KEY` out of the features; a
padded evaluation gives the model a context whose `eval_metric_ops` leaves
the padding rows out (`ModelContext.eval_rows`). The Estimator's own `loss`
metric, a mean of the batches' losses, is summed too; it counts a padding
batch as a batch.
"""

import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import tensorflow as tf
from absl import logging

# The feature a rank's evaluation input adds: float32 [B], 1 for a validation row, 0 for a padding row.
ROW_KEY = "_evaluated_row_weight"
# Rows of a padding batch.
PADDING_ROWS = 1
# The name of the collectives of `summed_state`, one per dtype.
SUM_NAME = "summed_metric_state"

# Sums a tensor over the processes that evaluate together: `(tensor, name) -> sum`.
AllreduceSum = Callable[[tf.Tensor, str], tf.Tensor]


def most_batches(rows_per_shard: Sequence[int], batch_size: int) -> int:
    """The batches of the largest shard, the count every shard is padded to: max of ceil(rows / batch_size).

    Raises:
      ValueError: no shards, or a batch size below 1.
    """
    if not rows_per_shard or batch_size < 1:
        raise ValueError("most_batches needs shards and a batch size >= 1, got %r and %r"
                         % (list(rows_per_shard), batch_size))
    return max(int(math.ceil(rows / float(batch_size))) for rows in rows_per_shard)


def marked_batches(dataset: tf.data.Dataset, batches: Optional[int] = None) -> tf.data.Dataset:
    """`(features, labels)` batches with `features[ROW_KEY]`, each row's weight: 1 for every row read.

    Args:
      dataset: a shard's evaluation batches; the features a dict of
        [B, ...] tensors of static inner dimensions, the labels [B, ...].
      batches: None: the batches as they are. Otherwise exactly this many:
        the shard's batches, then batches of `PADDING_ROWS` zero rows of
        weight 0 (zero features and labels).

    Returns:
      The marked batches. With `batches`, a shard that yields more than
      `batches` batches fails with an error naming both counts (its rows
      are more than the row counts of the files said).

    Raises:
      ValueError: features that are not a dict, or a feature whose inner
        dimensions are unknown (a padding row could not be built).
    """
    features_spec, labels_spec = dataset.element_spec
    if not isinstance(features_spec, dict):
        raise ValueError("evaluation shared by ranks marks each row in a features dict; the input yields %r"
                         % (features_spec,))

    def mark(features, labels, weights, is_real):
        return dict(features, **{ROW_KEY: weights}), labels, is_real

    real = dataset.map(tf.autograph.experimental.do_not_convert(lambda features, labels: mark(
        features, labels, tf.ones(tf.shape(labels)[:1], tf.float32), True)))
    if batches is None:
        return real.map(tf.autograph.experimental.do_not_convert(lambda features, labels, is_real: (features, labels)))
    padding_row = (tf.nest.map_structure(_zero_rows, features_spec), _zero_rows(labels_spec, "labels"))
    padding = tf.data.Dataset.from_tensors(mark(*padding_row, tf.zeros([PADDING_ROWS], tf.float32), False))
    planned = tf.constant(batches, tf.int64)

    @tf.autograph.experimental.do_not_convert
    def within_plan(index, element):
        features, labels, is_real = element
        check = tf.debugging.assert_less(
            index, planned, message="an evaluation shard yielded more than the %d batch(es) its rows were "
            "counted to (the row counts of the validation files are short of their rows: fix the dataset's "
            "metadata.json, or remove it to have the rows counted)" % batches)
        with tf.control_dependencies([check]):
            return tf.nest.map_structure(tf.identity, (features, labels))

    # Pads up to `batches`; a real batch past them is kept, so that the check sees it and fails.
    return (real.concatenate(padding.repeat()).enumerate()
            .take_while(tf.autograph.experimental.do_not_convert(
                lambda index, element: tf.logical_or(index < planned, element[2])))
            .map(within_plan))


def _zero_rows(spec: tf.TensorSpec, name: str = "a feature") -> tf.Tensor:
    """`PADDING_ROWS` zero rows of a batch of `spec`."""
    inner = spec.shape[1:]
    if not inner.is_fully_defined():
        raise ValueError("%s has rows of unknown shape %s: a padding row of the evaluation input cannot be "
                         "built; give the decoder's output a static shape" % (name, inner))
    return tf.zeros([PADDING_ROWS] + inner.as_list(), spec.dtype)


def metric_variables(eval_metric_ops: Optional[Mapping] = None) -> List[tf.Variable]:
    """The state of every metric in the default graph, each once, ordered by name.

    The variables of `tf.compat.v1.metrics` (the `METRIC_VARIABLES`
    collection, the Estimator's `loss` metric among them), and those of the
    Keras metric objects in `eval_metric_ops`.
    """
    found: Dict[object, tf.Variable] = {}
    for variable in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.METRIC_VARIABLES):
        found.setdefault(variable.ref(), variable)
    for metric in (eval_metric_ops or {}).values():
        if isinstance(metric, tf.keras.metrics.Metric):
            for variable in metric.variables:
                found.setdefault(variable.ref(), variable)
    return sorted(found.values(), key=lambda variable: variable.name)


def summed_state(variables: Sequence[tf.Variable], allreduce_sum: AllreduceSum) -> tf.Operation:
    """The op assigning each of `variables` its sum over the processes that evaluate together.

    One collective per dtype: the variables of a dtype are flattened into one
    vector, summed by `allreduce_sum(vector, name)` (named `SUM_NAME` and the
    dtype; every process must run it once, with the same variables in the
    same order), and split back.
    """
    by_dtype: Dict[tf.DType, List[tf.Variable]] = {}
    for variable in variables:
        by_dtype.setdefault(variable.dtype.base_dtype, []).append(variable)
    assignments = []
    with tf.name_scope(SUM_NAME):
        for dtype, group in sorted(by_dtype.items(), key=lambda item: item[0].name):
            flat = tf.concat([tf.reshape(variable.read_value(), [-1]) for variable in group], axis=0)
            summed = allreduce_sum(flat, "%s_%s" % (SUM_NAME, dtype.name))
            sizes = [_size(variable) for variable in group]
            for variable, part in zip(group, tf.split(summed, sizes)):
                assignments.append(variable.assign(tf.reshape(part, tf.shape(variable))))
    return tf.group(*assignments, name=SUM_NAME)


def _size(variable: tf.Variable) -> int:
    """Elements of a variable of static shape (every metric variable has one)."""
    if not variable.shape.is_fully_defined():
        raise ValueError("metric variable %s has no static shape (%s): its state cannot be summed over the "
                         "ranks" % (variable.name, variable.shape))
    return variable.shape.num_elements()


class SumMetricStateHook(tf.estimator.SessionRunHook):
    """Counts the rows this process evaluates; after the last batch, sums the metric state over the processes.

    Add it to the `evaluation_hooks` of an EVAL spec: `Estimator.evaluate`
    reads the metric values in a hook that ends after it.

    Args:
      allreduce_sum: the sum over the processes (`AllreduceSum`).
      row_weights: the batch's `ROW_KEY` weights.
      eval_metric_ops: the spec's metrics (for the variables of Keras
        metric objects).
      task: this process, for the log.
    """

    def __init__(self, allreduce_sum: AllreduceSum, row_weights: tf.Tensor,
                 eval_metric_ops: Optional[Mapping] = None, task: str = ""):
        self._allreduce_sum = allreduce_sum
        self._rows = tf.math.count_nonzero(row_weights > 0, dtype=tf.int64)
        self._eval_metric_ops = dict(eval_metric_ops or {})
        self._task = task
        self._sum: Optional[tf.Operation] = None
        self.rows = 0
        self.batches = 0

    def begin(self):
        # After the model_fn: the Estimator's `loss` metric exists now.
        self._sum = summed_state(metric_variables(self._eval_metric_ops), self._allreduce_sum)

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._rows)

    def after_run(self, run_context, run_values):
        self.rows += int(run_values.results)
        self.batches += 1

    def end(self, session):
        logging.info("%s evaluated %d row(s) in %d batch(es); summing the metric state over the ranks",
                     self._task or "this process", self.rows, self.batches)
        session.run(self._sum)

