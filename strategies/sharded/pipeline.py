"""The next batch's id exchange (and, one step stale, its rows) while the current batch trains.

A step of sharded lookups waits on three exchanges in a row: the batch's
distinct ids to their owners, the rows back, and (in the backward pass) the
rows' gradients to their owners. The ids do not depend on the parameters,
so, as TorchRec's `TrainPipelineSparseDist` does with its input
distribution, the ids of batch t+1 can travel while batch t trains.

In graph mode one `session.run` is one step. `ExchangePipeline` keeps batch
t (its features, labels and id routing) in local variables while step t
runs; the step reads them (`current`), and, beside the model, routes the
ids of the batch the input just produced (t+1) and, once the step's train
op has run, stages that batch and its routing for step t+1. The first batch
is staged when the session starts (`prime`, run by every rank after the
sharded checkpoint is restored: the exchange is a collective). Training is
unchanged: every step trains the same batch with the same parameters as
without the pipeline, and the ids exchange is simply no longer on the
step's critical path.

With `staleness=1` the rows of batch t+1 travel during step t too: step
t+1 then trains on rows read before step t's update (one step stale, as in
TorchRec's semi-synchronous pipeline or Persia's asynchronous sparse
updates), and only the gradients' exchange stays on the step's path. The
dense variables stay synchronous.

The pipeline applies to lookups of the ids the input delivers under
`ids_key` (or a value-preserving view of them: identity, reshape, a cast
between int32 and int64): a model that looks up ids it computed itself is
looked up within the step, as without the pipeline. The input must not end
(a budget of steps over a repeating input): the last step reads one batch
ahead.
"""

from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from strategies import devices
from strategies.large_batch import DistinctRowsTransform
from strategies.sharded import exchange
from strategies.sharded.table import ShardedEmbedding, check_group, rows_by_table, serve_rows

STALENESS_LEVELS = (0, 1)
EXACT, ONE_STEP_STALE = STALENESS_LEVELS
# Ops through which looked-up ids keep the values and order of the ids they come from.
_VIEW_OPS = frozenset({"Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "Cast"})
_MAX_VIEW_DEPTH = 16
SCOPE = "exchange_pipeline"


def _local_variable(value: tf.Tensor, name: str) -> tf.Variable:
    """A non-trainable local variable holding a tensor like `value` (any batch size), zeros until assigned."""
    value = tf.convert_to_tensor(value)
    shape = value.shape
    initial = tf.zeros([d if d is not None else 0 for d in shape.as_list()], value.dtype) \
        if shape.rank is not None else tf.zeros([0], value.dtype)
    return tf.compat.v1.Variable(initial, trainable=False, name=name, shape=shape,
                                 collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], use_resource=True)


class _Staged:
    """Local variables holding one step's tensors of a structure, read once per step."""

    def __init__(self, nxt, name: str):
        self.next = nxt
        flat = [tf.convert_to_tensor(t) for t in tf.nest.flatten(nxt)]
        with tf.name_scope(name):
            self.variables = [_local_variable(t, "staged_%d" % i) for i, t in enumerate(flat)]
            reads = []
            for variable, tensor in zip(self.variables, flat):
                read = variable.read_value()
                read.set_shape(tensor.shape)
                reads.append(read)
        self.reads = reads
        self.current = tf.nest.pack_sequence_as(nxt, reads)

    def assignments(self) -> List[tf.Operation]:
        return [variable.assign(value, read_value=False)
                for variable, value in zip(self.variables, tf.nest.flatten(self.next))]


class ExchangePipeline:
    """Stages batch t while step t runs, exchanging batch t+1's ids (and, stale, rows) meanwhile.

    Build it in the model_fn wrapper from the `features` and `labels` the
    input produced, give the model `current()` instead, look the tables up
    through `lookup`, and wrap the model's train op with `finish`.

    Args:
      features: the features dict the input produced in this step (batch t+1).
      labels: its labels.
      ids_key: the features key of the ids the tables are looked up with.
      staleness: `EXACT` (0) or `ONE_STEP_STALE` (1).

    Raises:
      ValueError: features without `ids_key`, or a bad staleness.
    """

    def __init__(self, features: Dict[str, tf.Tensor], labels, ids_key: str, staleness: int = EXACT):
        if staleness not in STALENESS_LEVELS:
            raise ValueError("exchange staleness must be one of %s, got %r" % (STALENESS_LEVELS, staleness))
        if not isinstance(features, dict) or ids_key not in features:
            raise ValueError("the exchange pipeline needs the ids in features[%r]; the features are %r"
                             % (ids_key, sorted(features) if isinstance(features, dict) else features))
        self.staleness = staleness
        self._ids_key = ids_key
        with tf.name_scope(SCOPE), tf.device(devices.HOST_DEVICE):
            self._batch = _Staged((features, labels), "batch")
        self._staged: List[_Staged] = [self._batch]
        self._routings: Dict[Tuple, Tuple[exchange.IdRouting, exchange.IdRouting]] = {}
        self._stale_rows: Dict[Tuple, tf.Tensor] = {}
        self._finished = False

    def current(self):
        """(features, labels) of the batch this step trains."""
        return self._batch.current

    @property
    def staged_ids(self) -> tf.Tensor:
        """The ids of the batch this step trains, as `current()` gives them."""
        return self._batch.current[0][self._ids_key]

    @property
    def next_ids(self) -> tf.Tensor:
        """The ids of the batch the input produced in this step."""
        return self._batch.next[0][self._ids_key]

    def looks_up_staged_ids(self, ids: tf.Tensor) -> bool:
        """Whether `ids` are the staged ids, or a view keeping their values and order."""
        target = self.staged_ids
        tensor = tf.convert_to_tensor(ids)
        for _ in range(_MAX_VIEW_DEPTH):
            if tensor is target:
                return True
            op = tensor.op
            if op.type not in _VIEW_OPS or not op.inputs:
                return False
            if op.type == "Cast" and (op.inputs[0].dtype not in exchange.ID_DTYPES
                                      or tensor.dtype not in exchange.ID_DTYPES):
                return False
            tensor = op.inputs[tensor.value_index if op.type == "IdentityN" else 0]
        return False

    def _routing(self, table: ShardedEmbedding, ids: tf.Tensor) -> exchange.IdRouting:
        """The staged routing of the current batch for `table`'s settings (its next one exchanged here)."""
        key = table.routing_settings
        if key not in self._routings:
            with tf.name_scope(SCOPE):
                nxt = table.route(self.next_ids)
                staged = _Staged((nxt.batch_positions, nxt.send_splits, nxt.received_rows, nxt.received_splits,
                                  tuple(nxt.stats)), "routing_%d" % len(self._routings))
            self._staged.append(staged)
            positions, send_splits, received_rows, received_splits, stats = staged.current
            current = exchange.IdRouting(
                size=nxt.size, padded=nxt.padded, row_dtype=nxt.row_dtype, ids_shape=tf.shape(self.staged_ids),
                static_ids_shape=self.staged_ids.shape, batch_positions=positions, send_splits=send_splits,
                received_rows=received_rows, received_splits=received_splits,
                stats=exchange.LookupStats(*stats))
            self._routings[key] = (current, nxt)
        return self._routings[key][0].for_ids(ids)

    def lookup(self, tables: Sequence[ShardedEmbedding], ids: tf.Tensor,
               transform: Optional[DistinctRowsTransform] = None) -> Optional[List[tf.Tensor]]:
        """The rows of `ids` in each of `tables` through the pipeline; None when `ids` are not the staged ids.

        `transform`: as in `lookup_together`.

        Raises:
          ValueError: tables that cannot share an exchange, or a lookup after
            `finish`.
        """
        if self._finished:
            raise ValueError("ExchangePipeline.lookup after finish(): look the tables up in the model_fn")
        if not self.looks_up_staged_ids(ids):
            logging.info("hybrid: %s looked up with ids that are not the input's %r: their id exchange runs "
                         "within the step", ", ".join(t.name for t in tables), self._ids_key)
            return None
        check_group(tables)
        routing = self._routing(tables[0], ids)
        first = tables[0]
        name = "_".join(table.name for table in tables)
        if self.staleness == EXACT:
            with tf.name_scope(name + "_lookup"):
                returned = exchange.exchange_rows(serve_rows(tables, routing), routing, first.hvd, first.wire_dtype)
                return rows_by_table(tables, returned, routing, transform)
        return self._stale_lookup(tables, routing, name, transform)

    def _stale_lookup(self, tables: Sequence[ShardedEmbedding], routing: exchange.IdRouting, name: str,
                      transform: Optional[DistinctRowsTransform]) -> List[tf.Tensor]:
        """Rows exchanged in the previous step; this step exchanges the next batch's, read before its update."""
        first = tables[0]
        key = tuple(table.full_name for table in tables)
        _, nxt = self._routings[first.routing_settings]
        with tf.name_scope(name + "_stale_lookup"):
            if key not in self._stale_rows:
                with tf.name_scope(SCOPE):
                    next_served = serve_rows(tables, nxt)
                    next_returned = exchange.exchange_rows(next_served, nxt, first.hvd, first.wire_dtype,
                                                           name="next_rows_to_askers")
                    staged = _Staged(next_returned, "rows_%d" % len(self._stale_rows))
                self._staged.append(staged)
                self._stale_rows[key] = (staged.current, next_served)
            received, next_served = self._stale_rows[key]
            # This step's gather of the same places carries the gradient on to the shards; the gradient's
            # exchange waits for the next batch's rows to be read, so the update comes after that read.
            returned = exchange.stale_rows(serve_rows(tables, routing), received, routing, first.hvd,
                                           first.wire_dtype, after=[next_served])
            return rows_by_table(tables, returned, routing, transform)

    def finish(self, train_op: tf.Operation) -> Tuple[tf.Operation, tf.Operation]:
        """The step's train op, staging the next batch after `train_op`; and the op that stages the first.

        Returns:
          (train_op, prime_op): run `prime_op` once per session, on every
          rank, before the first step.
        """
        self._finished = True
        with tf.name_scope(SCOPE):
            reads = [read for staged in self._staged for read in staged.reads]
            with tf.control_dependencies([train_op] + reads):
                stage = tf.group(*[a for staged in self._staged for a in staged.assignments()], name="stage_next")
            prime = tf.group(*[a for staged in self._staged for a in staged.assignments()], name="prime")
        return tf.group(train_op, stage, name="train_and_stage"), prime

    def prime_hook(self, prime_op: tf.Operation) -> "PrimeHook":
        """The hook that runs `prime_op` (from `finish`) before the first step of each session."""
        return PrimeHook(prime_op)

    @property
    def lookup_stats(self) -> List[exchange.LookupStats]:
        """The counters of the current batch's id exchanges, one per routing."""
        return [current.stats for current, _ in self._routings.values()]


class PrimeHook(tf.estimator.SessionRunHook):
    """Stages the first batch of a session (`ExchangePipeline.finish`'s prime op) before its first step.

    It runs in the first `before_run`, after every hook's
    `after_create_session` (the input's iterator is initialized there, and
    the sharded checkpoint restored), at the same point on every rank: the
    first batch's id exchange is a collective.
    """

    def __init__(self, prime_op: tf.Operation):
        self._prime_op = prime_op
        self._primed = False

    def after_create_session(self, session, coord):
        del session, coord
        self._primed = False

    def before_run(self, run_context):
        if not self._primed:
            run_context.session.run(self._prime_op)
            self._primed = True
        return None
