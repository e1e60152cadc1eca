"""`ModelContext`: the one object a model_fn receives from the strategy that trains it.

A strategy builds one for every model_fn call (`Strategy.model_context`) and
puts it in `params`; a model_fn takes it with `ModelContext.of(params)`. It
creates the embedding tables and looks up their rows, builds the train op
with the strategy's optimizer wrapping and learning-rate factor, and
computes the evaluation metrics where the strategy needs them computed (the
tower method's whole batch). A model_fn written against it trains under
every strategy::

    def model_fn(features, labels, mode, params):
        context = strategies.ModelContext.of(params)
        with tf.compat.v1.variable_scope("my_model", reuse=tf.compat.v1.AUTO_REUSE):
            table = context.embedding("embeddings", num_rows, [width])
            rows = table.lookup(features["feat_ids"])
            ...
        train_op = context.minimize(loss, tf.compat.v1.train.AdamOptimizer, learning_rate)

Variables are created with `tf.compat.v1.get_variable` under a scope with
`reuse=AUTO_REUSE`, so that the tower method's copies share them.
"""

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from strategies import large_batch as large_batch_lib
from strategies import tables as tables_lib

# The one params key under which a model_fn finds its `ModelContext`.
MODEL_CONTEXT_PARAM = "strategy_model_context"

ModelFn = Callable[..., tf.estimator.EstimatorSpec]
# Builds the optimizer from a learning rate: a float, or a tensor under a large-batch rule.
OptimizerFn = large_batch_lib.OptimizerFn
OptimizerWrapper = Callable[[tf.compat.v1.train.Optimizer], tf.compat.v1.train.Optimizer]
MetricFn = Callable[[tf.Tensor, Dict[str, tf.Tensor]], Dict[str, Tuple[tf.Tensor, tf.Operation]]]


@dataclasses.dataclass(frozen=True)
class ModelContext:
    """What a model_fn receives from the strategy that trains it.

    A strategy builds one for every model_fn call (`Strategy.model_context`)
    and the trainer puts it in `params`; a model_fn takes it with
    `ModelContext.of(params)`, which gives the single-device defaults to a
    model_fn called outside this library (a plain Estimator).

    Attributes:
      learning_rate_factor: the strategy's factor on the configured
        learning rate (Horovod's scaling with the ranks, the parameter
        servers' lower rate for asynchronous updates).
      optimizer_wrappers: applied in order to the optimizer `minimize`
        builds (Horovod's `DistributedOptimizer`, the tower gradient
        collector, mixed precision).
      embedding_factory: creates the tables of `embedding`: one variable,
        partitions on the parameter servers, or rows sharded across ranks.
      metric_sink: where a strategy records the metric function of
        `eval_metric_ops`: the tower method, to compute it once over the
        whole batch; a padded evaluation across ranks, to know that the
        metrics leave the padding rows out. None elsewhere.
      large_batch: the rule rescaling training for the global batch
        (`--large_batch_rule`); None changes nothing.
      eval_rows: bool [B], the rows of an EVAL batch that count: False for
        the padding rows a strategy added so that the processes evaluating
        together run the same number of batches
        (`strategies.sharded_evaluation`); `eval_metric_ops` leaves them
        out. None: every row counts.
      tables: the tables `embedding` created, in order.
    """

    learning_rate_factor: float = 1.0
    optimizer_wrappers: Tuple[OptimizerWrapper, ...] = ()
    embedding_factory: tables_lib.EmbeddingFactory = dataclasses.field(default_factory=tables_lib.variable_tables)
    metric_sink: Optional[Callable[[MetricFn], None]] = None
    large_batch: Optional[large_batch_lib.LargeBatchRule] = None
    eval_rows: Optional[tf.Tensor] = None
    tables: List[tables_lib.EmbeddingTable] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, params: Optional[Mapping]) -> "ModelContext":
        """The context in a model_fn's `params`, or the single-device defaults when there is none.

        Raises:
          TypeError: `params` holds something else under `MODEL_CONTEXT_PARAM`.
        """
        context = (params or {}).get(MODEL_CONTEXT_PARAM)
        if context is None:
            return cls()
        if not isinstance(context, ModelContext):
            raise TypeError("params[%r] must be a ModelContext, got %r" % (MODEL_CONTEXT_PARAM, context))
        return context

    def learning_rate(self, base: float) -> float:
        """The learning rate to train with: `base` times the strategy's factor."""
        return base * self.learning_rate_factor

    def embedding(self, name: str, num_rows: int, row_shape: Sequence[int] = (),
                  initializer=None) -> tables_lib.EmbeddingTable:
        """Creates (or, under AUTO_REUSE, reuses) the table `name` of `num_rows` rows of `row_shape`.

        Args:
          name: the variable name, in the current variable scope.
          num_rows: rows, e.g. the feature ids' count.
          row_shape: the shape of one row: `[]` for a weight per id,
            `[k]` for a k-dimensional embedding.
          initializer: the rows' initializer; None: Glorot normal.
        """
        table = self.embedding_factory(name, [num_rows] + list(row_shape), initializer)
        if self.large_batch is not None:
            table = tables_lib.LargeBatchTable(table, self.large_batch)
        self.tables.append(table)
        return table

    def lookup(self, tables: Sequence[tables_lib.EmbeddingTable], ids: tf.Tensor) -> List[tf.Tensor]:
        """The rows of the same `ids` in each of `tables` (from `embedding`), in one exchange where the strategy can.

        `context.lookup([weights, factors], ids)` equals
        `[weights.lookup(ids), factors.lookup(ids)]`; under `hybrid` the
        tables' rows travel in one all-to-all instead of one per table.

        Raises:
          ValueError: no tables.
        """
        if not tables:
            raise ValueError("ModelContext.lookup needs at least one table")
        return tables[0].lookup_with(tables[1:], ids)

    def embedding_variables(self) -> List[tf.Variable]:
        """The variables of the tables `embedding` created, each once."""
        variables: Dict[object, tf.Variable] = {}
        for table in self.tables:
            variables.update((variable.ref(), variable) for variable in table.variables())
        return list(variables.values())

    def l2_weight(self, l2_reg: float) -> float:
        """The weight to train with of an L2 penalty on the embedding rows configured as `l2_reg`."""
        return l2_reg if self.large_batch is None else self.large_batch.l2_weight(l2_reg)

    def minimize(self, loss: tf.Tensor, optimizer_fn: OptimizerFn, learning_rate: float) -> tf.Operation:
        """The train op: `loss` minimized by `optimizer_fn(lr)` as the strategy trains.

        The learning rate is `learning_rate(learning_rate)`; under a
        large-batch rule, the rule's optimizer trains the tables and the
        dense variables at their own rates (`LargeBatchRule.optimizer`). The
        optimizer is wrapped by `optimizer_wrappers`; the op runs after the
        graph's `UPDATE_OPS` (batch normalization) and advances the global
        step.

        Args:
          loss: the scalar training loss.
          optimizer_fn: builds a `tf.compat.v1.train.Optimizer` from a
            learning rate (e.g. `tf.compat.v1.train.AdamOptimizer`).
          learning_rate: the configured learning rate, before the strategy's
            factor.
        """
        rate = self.learning_rate(learning_rate)
        if self.large_batch is None:
            optimizer = optimizer_fn(rate)
        else:
            optimizer = self.large_batch.optimizer(optimizer_fn, rate, self.embedding_variables())
        for wrap in self.optimizer_wrappers:
            optimizer = wrap(optimizer)
        update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        with tf.control_dependencies(update_ops):
            return optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())

    def eval_metric_ops(self, metric_fn: MetricFn, labels: tf.Tensor, predictions: Dict[str, tf.Tensor]
                        ) -> Dict[str, Tuple[tf.Tensor, tf.Operation]]:
        """The EVAL metrics: `metric_fn(labels, predictions)`, recorded for the strategy when it needs to.

        With `eval_rows`, `metric_fn` gets only the rows that count: the
        labels and every prediction masked along their first (batch)
        dimension.

        Args:
          metric_fn: computes Estimator `eval_metric_ops` from labels and
            predictions as this model_fn takes and returns them.
          labels: the model_fn's labels.
          predictions: the model_fn's predictions dict, of [B, ...] tensors.
        """
        if self.metric_sink is not None:
            self.metric_sink(metric_fn)
        if self.eval_rows is not None:
            labels = tf.boolean_mask(labels, self.eval_rows)
            predictions = {key: tf.boolean_mask(value, self.eval_rows) for key, value in predictions.items()}
        return metric_fn(labels, predictions)

    def with_params(self, params: Optional[Mapping]) -> Dict:
        """A copy of `params` holding this context (what the trainer passes to the model_fn)."""
        return dict(params or {}, **{MODEL_CONTEXT_PARAM: self})
