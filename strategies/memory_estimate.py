"""What one process of a training job holds in memory, estimated before anything is allocated.

A model's training state is measured from its graph (`model_state`): the
model_fn is built once in TRAIN mode in a graph of its own, on placeholders,
and nothing is initialized. A graph holds a variable's shape, not its bytes
(only a session running the initializer allocates them), so measuring a
table of 20M rows costs what building a small model's graph costs. The state
is sorted into the embedding tables (the variables the model created through
`ModelContext.embedding`), the tables' optimizer slots (the variables
colocated with a table), the other trainable ("dense") variables, and the
rest of the state (the dense variables' slots, the optimizer's accumulators,
the global step, batch-norm statistics).

Each strategy says which share of it each of its processes holds
(`Strategy.memory`): by default one process holds the whole
model; a parameter server its partitions of the tables; a `hybrid` rank
1/ranks of each table. A process's peak resident memory is then estimated
(`ProcessMemory.needed`) as

    STATE_FACTOR x (variables + slots) + exchange buffers + RUNTIME_BYTES

`STATE_FACTOR` covers what a step adds around the state (gradients, the
allocator's slack, a checkpoint's save); the exchange buffers are the rows a
step moves between processes (`ModelState.exchange_bytes`); `RUNTIME_BYTES`
is what a training process takes besides its model: the TensorFlow runtime,
the graph, the input pipeline.
"""

import dataclasses
import math
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import tensorflow as tf

from input_pipeline import schema
from strategies import context as context_lib

# The project's bound on a training process's peak resident memory over its share of variables and slots.
STATE_FACTOR = 1.3
# What a training process takes besides its model (TensorFlow, the graph, the input pipeline): a process of a
# tiny model peaks at 672 MB (`/usr/bin/time -v python -m deepfm.train` on 20,000 rows of 1,000 ids, `single`,
# the default model and batch, with its export), rounded up.
RUNTIME_BYTES = 700 * 1000 ** 2
# Copies of a step's looked-up rows an exchange holds at once: the rows received and their gradients sent, and
# the owner's side of both.
EXCHANGE_BUFFER_COPIES = 4
# The largest number of processes `smallest_scale` tries.
MAX_SCALE = 4096
BYTE_UNITS = ((1000 ** 3, "GB"), (1000 ** 2, "MB"), (1000, "kB"))


def format_bytes(count: float) -> str:
    """`count` bytes in decimal units: `7.92 GB`, `600.00 MB`, `12 B`."""
    for size, unit in BYTE_UNITS:
        if abs(count) >= size:
            return "%.2f %s" % (count / size, unit)
    return "%d B" % count


@dataclasses.dataclass(frozen=True)
class TableState:
    """One embedding table of a model: its rows, its bytes and its optimizer slots' bytes.

    Attributes:
      name: the table's variable name.
      rows: rows of the whole table.
      variable_bytes: bytes of the whole table.
      slot_bytes: bytes of its optimizer slots.
    """

    name: str
    rows: int
    variable_bytes: int
    slot_bytes: int

    def share(self, holders: int) -> float:
        """The largest share of the table's rows one of `holders` processes holds (rows split as evenly as can be)."""
        return math.ceil(self.rows / holders) / self.rows if self.rows else 0.0


@dataclasses.dataclass(frozen=True)
class ModelState:
    """A model's training state in bytes, by kind (see the module docstring).

    Attributes:
      tables: the embedding tables.
      dense_bytes: the trainable variables outside the tables.
      dense_slot_bytes: the rest of the state: the dense variables' slots,
        the optimizer's accumulators, the global step, batch-norm
        statistics.
      largest_dense_bytes: the largest single dense variable (a parameter
        server holds whole variables).
    """

    tables: Tuple[TableState, ...]
    dense_bytes: int
    dense_slot_bytes: int
    largest_dense_bytes: int = 0

    @property
    def table_bytes(self) -> int:
        return sum(table.variable_bytes for table in self.tables)

    @property
    def table_slot_bytes(self) -> int:
        return sum(table.slot_bytes for table in self.tables)

    @property
    def variable_bytes(self) -> int:
        """Bytes of the model's weights: every trainable variable."""
        return self.table_bytes + self.dense_bytes

    @property
    def slot_bytes(self) -> int:
        """Bytes of the rest of the training state."""
        return self.table_slot_bytes + self.dense_slot_bytes

    @property
    def row_bytes(self) -> int:
        """Bytes of one id's rows in every table together (what a lookup of one id moves)."""
        return sum(table.variable_bytes // table.rows for table in self.tables if table.rows)

    def exchange_bytes(self, ids_per_step: int) -> int:
        """The buffers of an exchange of the rows of `ids_per_step` ids and their gradients."""
        return ids_per_step * self.row_bytes * EXCHANGE_BUFFER_COPIES

    def tables_held(self, holders: int) -> Tuple[int, int]:
        """`(variable bytes, slot bytes)` of the tables one of `holders` processes splitting their rows holds."""
        shares = [(table, table.share(holders)) for table in self.tables]
        return (math.ceil(sum(table.variable_bytes * share for table, share in shares)),
                math.ceil(sum(table.slot_bytes * share for table, share in shares)))

    def dense_share(self, holders: int) -> float:
        """The largest share of the dense state one of `holders` processes holding whole variables holds.

        Variables placed each on the least loaded of them: at most an even
        share plus the largest variable.
        """
        if not self.dense_bytes:
            return 0.0
        return min(1.0, 1.0 / holders + self.largest_dense_bytes / self.dense_bytes)


@dataclasses.dataclass(frozen=True)
class ProcessMemory:
    """The estimated memory of one process.

    Attributes:
      variables: bytes of the variables it holds.
      slots: bytes of the optimizer slots and other state it holds.
      buffers: bytes of the exchange buffers of a step.
      runtime: what the process takes besides its model (`RUNTIME_BYTES`).
    """

    variables: int
    slots: int = 0
    buffers: int = 0
    runtime: int = RUNTIME_BYTES

    @property
    def state(self) -> int:
        return self.variables + self.slots

    @property
    def needed(self) -> int:
        """The estimated peak resident bytes: `STATE_FACTOR` x state + buffers + runtime."""
        return math.ceil(STATE_FACTOR * self.state) + self.buffers + self.runtime

    def describe(self) -> str:
        """`10.94 GB (1.3 x (variables 2.64 GB + slots 5.28 GB) + exchange buffers 0 B + runtime 700.00 MB)`."""
        return "%s (%g x (variables %s + slots %s) + exchange buffers %s + runtime %s)" % (
            format_bytes(self.needed), STATE_FACTOR, format_bytes(self.variables), format_bytes(self.slots),
            format_bytes(self.buffers), format_bytes(self.runtime))


def whole_model(state: ModelState, buffers: int = 0) -> ProcessMemory:
    """A process holding every variable and slot of the model."""
    return ProcessMemory(variables=state.variable_bytes, slots=state.slot_bytes, buffers=buffers)


def export_memory(state: ModelState) -> ProcessMemory:
    """An export of the model in one process: every weight (trainable variable) whole, no slots."""
    return ProcessMemory(variables=state.variable_bytes)


def largest(estimates: Mapping[str, ProcessMemory]) -> ProcessMemory:
    """The estimate of the process that needs the most."""
    return max(estimates.values(), key=lambda memory: memory.needed)


def smallest_scale(estimates_at: Callable[[int], Mapping[str, ProcessMemory]], budget: int,
                   max_scale: int = MAX_SCALE) -> Optional[int]:
    """The smallest count in [1, max_scale] at which every process of `estimates_at(count)` needs at most `budget`.

    Args:
      estimates_at: a strategy's estimates at a count of processes
        (`MemoryShare.estimates` with `scale`); what a process needs
        must not grow with the count.
      budget: the bytes each process may use.
      max_scale: the largest count tried.

    Returns:
      The count, or None where even `max_scale` does not fit.
    """
    def fits(count: int) -> bool:
        return largest(estimates_at(count)).needed <= budget

    if not fits(max_scale):
        return None
    low, high = 1, max_scale
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _bytes_of(variable: tf.Variable, by_name: Mapping[bytes, tf.Variable]) -> int:
    """Bytes of `variable`; one of a shape known only when it runs (a slot filled by `Fill`): its primary's shape."""
    elements = variable.shape.num_elements()
    if elements is None:
        primaries = [by_name[name] for name in _colocated_with(variable) if name in by_name]
        elements = next((primary.shape.num_elements() for primary in primaries
                         if primary.shape.num_elements() is not None), 0)
    return elements * variable.dtype.base_dtype.size


def _colocated_with(variable: tf.Variable) -> List[bytes]:
    """The op names `variable` is colocated with (a slot: its primary variable), other than its own."""
    prefix = b"loc:@"
    own = variable.op.name.encode()
    return [group[len(prefix):] for group in variable.op.colocation_groups()
            if group.startswith(prefix) and group[len(prefix):] != own]


def model_state(model_fn: context_lib.ModelFn, params: Mapping, field_size: int) -> ModelState:
    """Measures the training state of `model_fn` by building it once in TRAIN mode, allocating nothing.

    The model_fn gets the features the input pipeline gives it
    (`feat_ids` int64 and `feat_vals` float32, [None, field_size]), labels
    float32 [None], and `params` with the single-process `ModelContext`
    (each table one variable), in a graph of its own that no session runs.
    Its `ModelContext.minimize` applies zeros for gradients
    (`_ZeroGradients`): the optimizer makes its slots and accumulators
    as in training, without the gradients' graph, most of what building a
    model's train op costs.

    Args:
      model_fn: an Estimator model_fn written against `ModelContext`.
      params: its params (the model's hyperparameters).
      field_size: ids per example.

    Returns:
      The model's state (see `ModelState`).
    """
    with tf.Graph().as_default() as graph:
        features = {schema.FEAT_IDS: tf.compat.v1.placeholder(tf.int64, [None, field_size], name=schema.FEAT_IDS),
                    schema.FEAT_VALS: tf.compat.v1.placeholder(tf.float32, [None, field_size], name=schema.FEAT_VALS)}
        labels = tf.compat.v1.placeholder(tf.float32, [None], name="labels")
        context = context_lib.ModelContext(
            optimizer_wrappers=(lambda optimizer: _ZeroGradients(optimizer, context.embedding_variables()),))
        model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, context.with_params(params))
        table_variables = {variable.op.name.encode(): variable for variable in context.embedding_variables()}
        trainable = {variable.ref() for variable in graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)}
        slots: Dict[bytes, int] = {name: 0 for name in table_variables}
        dense: List[int] = []
        dense_slots = 0
        every = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
        by_name = {variable.op.name.encode(): variable for variable in every}
        for variable in every:
            if variable.op.name.encode() in table_variables:
                continue
            size = _bytes_of(variable, by_name)
            primary = next((name for name in _colocated_with(variable) if name in table_variables), None)
            if primary is not None:
                slots[primary] += size
            elif variable.ref() in trainable:
                dense.append(size)
            else:
                dense_slots += size
        tables = tuple(TableState(name=name.decode(), rows=int(variable.shape[0]),
                                  variable_bytes=_bytes_of(variable, by_name), slot_bytes=slots[name])
                       for name, variable in table_variables.items())
    return ModelState(tables=tables, dense_bytes=sum(dense), dense_slot_bytes=dense_slots,
                      largest_dense_bytes=max(dense, default=0))


class _ZeroGradients(tf.compat.v1.train.Optimizer):
    """Wraps an optimizer for a graph that is measured and never run: its gradients are zeros, never computed.

    `minimize` applies, through the wrapped optimizer, a zero gradient per
    trainable variable, shaped as training's: no rows for a table (a lookup's
    sparse gradient), a dense zero for the rest. The wrapped optimizer makes
    every slot and accumulator as in training, without the gradients' graph.
    Unlike TF's `compute_gradients`, it also gives a gradient to a trainable
    variable the loss does not reach, whose slots are then counted too (a
    model rarely has one: the estimate errs up).

    Args:
      optimizer: the optimizer the model_fn built.
      tables: the model's embedding tables (`ModelContext.embedding_variables`).
    """

    def __init__(self, optimizer: tf.compat.v1.train.Optimizer, tables: List[tf.Variable]):
        super().__init__(use_locking=False, name=optimizer.get_name())
        self._optimizer = optimizer
        self._tables = {table.ref() for table in tables}

    def compute_gradients(self, loss, var_list=None, **unused_options):
        del loss, unused_options
        if var_list is None:
            var_list = (tf.compat.v1.trainable_variables()
                        + tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_RESOURCE_VARIABLES))
        return [(self._zero_gradient(variable), variable)
                for variable in dict((variable.ref(), variable) for variable in var_list).values()]

    def _zero_gradient(self, variable: tf.Variable):
        dtype = variable.dtype.base_dtype
        if variable.ref() in self._tables:
            return tf.IndexedSlices(tf.zeros([0] + variable.shape[1:].as_list(), dtype), tf.zeros([0], tf.int64),
                                    dense_shape=tf.shape(variable, out_type=tf.int64))
        return tf.zeros_like(variable)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)
