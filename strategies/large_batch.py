"""Large-batch training rules: how a model tuned at one batch trains at a larger global batch.

A larger global batch amortizes each step's fixed cost (the exchange of a
distributed step), but a CTR model trained at it with its small-batch
hyperparameters loses AUC. `--large_batch_rule` picks a rule that rescales
the training for the ratio `k = global batch / --large_batch_base`:

* `none` (the default): nothing changes.
* `cowclip`: CowClip (Zheng et al., "CowClip: Reducing CTR Prediction Model
  Training Time from 12 hours to 10 minutes on 1 GPU", AAAI 2023; reference
  implementation: the bytedance/LargeBatchCTR repository):

  - the embedding tables keep the configured learning rate;
  - the dense variables train at `sqrt(k)` times it, warmed up linearly
    over the first `--large_batch_warmup_examples` examples (as many global
    steps as that makes at the global batch, so that the warm-up covers
    the same data at any number of replicas), or over
    `--large_batch_warmup_steps` global steps where that is given;
  - the L2 weight on the embedding rows is multiplied by `k`
    (`ModelContext.l2_weight`);
  - the gradient of each id's embedding vector is clipped: the sum, over
    the id's occurrences in the batch, of their gradients (of the batch's
    mean loss) is scaled down to a norm of at most

        count(id) * max(CLIP_RATIO * ||w_id||, CLIP_FLOOR * sqrt(width))

    where `w_id` is the id's vector, `count(id)` its occurrences in the batch
    and `width` the vector's length. The paper writes the table as a matrix
    whose columns are the ids' vectors, hence "column-wise". As in the
    reference implementation, the floor is per coordinate (`sqrt(width)`
    times `CLIP_FLOOR`), and tables of one weight per id (the FM first-order
    weights) are not clipped; they do train at the embedding learning rate,
    with the scaled L2.

Where the clipping happens: on the rows a replica looked up, in the
backward pass, before any exchange or averaging of gradients
(`clip_gradient_by_id`), so it works the same under every strategy
(sharded, partitioned, deduplicated or plain tables). A table that looks up
each distinct id once and spreads its row to the occurrences (`hybrid`,
`--dedup_lookups`) clips there instead (`clip_distinct_gradient`): the
backward pass has already summed each id's gradient, the row and the count
are at hand, and the clip costs a few ops over the distinct ids instead of a
`UniqueWithCounts` and segment sums over every occurrence. The clipped sum
is the same either way (scaling each occurrence's gradient by the id's
factor and summing is scaling the sum). Each replica clips its
own share of the step's gradient with the counts of its own batch; one
replica (`single`, `ps` without towers) is exactly the paper's rule, and
with several, each id's update is bounded by the sum of the replicas'
bounds, which is the paper's bound with the id's count over the global
batch. `gradient_share` converts a replica's gradient to its share of the
step's mean gradient (1 / replicas where the replicas' gradients are
averaged).

The two learning rates come from one optimizer, `SplitOptimizer`, which
the strategy wraps as it wraps any optimizer (Horovod's
`DistributedOptimizer`, the tower collector, mixed precision), so gradients
are computed once and exchanged as usual.
"""

import abc
import dataclasses
import math
from typing import Callable, Iterable, List, Optional, Sequence

import tensorflow as tf

# What a rule does to the rows of distinct ids before a table spreads them: (rows, int32 counts) -> rows
# (`LargeBatchRule.distinct_rows`).
DistinctRowsTransform = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]

NONE = "none"
COWCLIP = "cowclip"
RULES = (NONE, COWCLIP)
# The batch the model's hyperparameters are tuned at (the paper's base batch, 1K).
DEFAULT_BASE_BATCH = 1024
# Examples over which the dense learning rate rises linearly to its scaled value. The paper
# warms up over one epoch of Criteo (about 5,000 steps at batch 8K); this default is about one
# epoch of the 1M-row synthetic set's training split, 100 steps at batch 8,192
# (docs/large_batch.md). Counted in examples, the warm-up covers the same data whatever the
# global batch, so adding replicas does not stretch it over more of the data.
DEFAULT_WARMUP_EXAMPLES = 819_200
# CowClip's constants, as the paper and the reference implementation train DeepFM on Criteo
# at every batch from 1K to 128K: the clip ratio r, and the floor zeta per coordinate.
CLIP_RATIO = 1.0
CLIP_FLOOR = 1e-5

OptimizerFn = Callable[[object], tf.compat.v1.train.Optimizer]


def check_options(rule: str, base_batch: int, warmup_steps: Optional[int] = None,
                  warmup_examples: Optional[int] = None) -> None:
    """Checks `--large_batch_rule`, `--large_batch_base` and the warm-up's length.

    Args:
      rule: one of `RULES`.
      base_batch: the batch the hyperparameters are tuned at.
      warmup_steps: `--large_batch_warmup_steps`, or None where not given.
      warmup_examples: `--large_batch_warmup_examples`, or None where not
        given.

    Raises:
      ValueError: naming the flag, the bad value and what is allowed.
    """
    if rule not in RULES:
        raise ValueError("--large_batch_rule must be one of %s, got %r" % (", ".join(RULES), rule))
    if base_batch < 1:
        raise ValueError("--large_batch_base must be >= 1 (the batch the hyperparameters are tuned at), got %r"
                         % base_batch)
    _check_warmup(warmup_steps, warmup_examples)


def _check_warmup(warmup_steps: Optional[int], warmup_examples: Optional[int]) -> None:
    """Checks the warm-up's two lengths: not both given, neither negative."""
    if warmup_steps is not None and warmup_examples is not None:
        raise ValueError(
            "--large_batch_warmup_steps %r and --large_batch_warmup_examples %r both given: give one (steps: "
            "global steps whatever the global batch; examples: the same data at any number of replicas)"
            % (warmup_steps, warmup_examples))
    if warmup_steps is not None and warmup_steps < 0:
        raise ValueError("--large_batch_warmup_steps must be >= 0 (0: no warm-up), got %r" % warmup_steps)
    if warmup_examples is not None and warmup_examples < 0:
        raise ValueError("--large_batch_warmup_examples must be >= 0 (0: no warm-up), got %r" % warmup_examples)


def warmup_steps_for(global_batch: int, warmup_steps: Optional[int] = None,
                     warmup_examples: Optional[int] = None) -> int:
    """The warm-up's global steps at `global_batch`.

    Args:
      global_batch: examples per global step, all replicas together.
      warmup_steps: global steps, where given: the answer.
      warmup_examples: examples (`DEFAULT_WARMUP_EXAMPLES` where neither is
        given), turned into the global steps that hold them, rounded up.

    Raises:
      ValueError: both given, or a negative length.
    """
    _check_warmup(warmup_steps, warmup_examples)
    if warmup_steps is not None:
        return warmup_steps
    if warmup_examples is None:
        warmup_examples = DEFAULT_WARMUP_EXAMPLES
    return -(-warmup_examples // global_batch)


class LargeBatchRule(abc.ABC):
    """How a model's training is rescaled for its global batch; what `ModelContext` applies."""

    @abc.abstractmethod
    def l2_weight(self, l2_reg: float) -> float:
        """The L2 weight on the embedding rows to train with, for the configured `l2_reg`."""

    @abc.abstractmethod
    def lookup_rows(self, rows: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
        """The rows a table looked up for `ids`, as the model should see them (e.g. with a clipped gradient).

        Args:
          rows: `ids.shape + row_shape`, from `EmbeddingTable.lookup(ids)`.
          ids: the ids looked up.
        """

    @abc.abstractmethod
    def distinct_rows(self, rows: tf.Tensor, counts: tf.Tensor) -> tf.Tensor:
        """`lookup_rows` for a table that looks each distinct id up once: the rows before they are spread.

        The table then gathers the result to the batch's shape, so the
        gradient reaching it is already summed per id. The model sees the
        same rows and trains the same as with `lookup_rows` on the spread rows.

        Args:
          rows: `[distinct] + row_shape`: one row per distinct id (places of
            no id, e.g. an exchange's padding, may be among them with a count
            of 0).
          counts: int32 `[distinct]`: each row's occurrences in the batch.
        """

    @abc.abstractmethod
    def optimizer(self, optimizer_fn: OptimizerFn, learning_rate: float,
                  embedding_variables: Sequence[tf.Variable]) -> tf.compat.v1.train.Optimizer:
        """The optimizer of the train op, before the strategy wraps it.

        Args:
          optimizer_fn: builds an optimizer from a learning rate (a float or
            a scalar tensor).
          learning_rate: the configured rate, times the strategy's factor.
          embedding_variables: the variables of the model's embedding tables.
        """

    @abc.abstractmethod
    def describe(self) -> str:
        """One line for the logs."""


@dataclasses.dataclass(frozen=True)
class CowClip(LargeBatchRule):
    """The CowClip rule at one global batch (see the module docstring).

    Attributes:
      global_batch: examples per global step, all replicas together.
      base_batch: the batch the hyperparameters are tuned at.
      warmup_steps: global steps of the dense learning rate's linear warm-up
        (0: none); None: those holding `DEFAULT_WARMUP_EXAMPLES` examples.
      gradient_share: the factor that turns the gradient of one replica's
        loss into its share of the step's mean gradient.
      clip_ratio: r, the bound's factor on an id's vector norm.
      clip_floor: zeta, the bound's floor per coordinate.
    """

    global_batch: int
    base_batch: int = DEFAULT_BASE_BATCH
    warmup_steps: Optional[int] = None
    gradient_share: float = 1.0
    clip_ratio: float = CLIP_RATIO
    clip_floor: float = CLIP_FLOOR

    def __post_init__(self):
        check_options(COWCLIP, self.base_batch, self.warmup_steps)
        if self.global_batch < 1:
            raise ValueError("the global batch must be >= 1, got %r" % self.global_batch)
        object.__setattr__(self, "warmup_steps", warmup_steps_for(self.global_batch, self.warmup_steps))
        if not 0 < self.gradient_share <= 1:
            raise ValueError("gradient_share must be in (0, 1], got %r" % self.gradient_share)

    @property
    def ratio(self) -> float:
        """k: the global batch over the base batch."""
        return self.global_batch / self.base_batch

    @property
    def dense_learning_rate_factor(self) -> float:
        """sqrt(k), the dense variables' factor after the warm-up."""
        return math.sqrt(self.ratio)

    def l2_weight(self, l2_reg: float) -> float:
        """`l2_reg * k`."""
        return l2_reg * self.ratio

    def warmup(self, global_step: tf.Tensor) -> tf.Tensor:
        """The warm-up's factor at `global_step`: (step + 1) / warmup_steps, at most 1; float32 scalar."""
        if not self.warmup_steps:
            return tf.constant(1.0)
        step = tf.cast(global_step, tf.float32)
        return tf.minimum(1.0, (step + 1.0) / float(self.warmup_steps))

    def dense_learning_rate(self, learning_rate: float, global_step: tf.Tensor) -> tf.Tensor:
        """The dense variables' rate at `global_step`: `learning_rate * sqrt(k) * warmup(global_step)`."""
        return learning_rate * self.dense_learning_rate_factor * self.warmup(global_step)

    def lookup_rows(self, rows: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
        """`rows` whose gradient is clipped per id (`clip_gradient_by_id`); rows of scalars as they are."""
        if rows.shape.rank == ids.shape.rank:
            return rows
        return with_clipped_gradient(rows, ids, self.clip_ratio, self.clip_floor, self.gradient_share)

    def distinct_rows(self, rows: tf.Tensor, counts: tf.Tensor) -> tf.Tensor:
        """`rows` of distinct ids whose summed gradient is clipped (`clip_distinct_gradient`); scalars as they are."""
        if rows.shape.rank == 1:
            return rows
        return with_clipped_distinct_gradient(rows, counts, self.clip_ratio, self.clip_floor, self.gradient_share)

    def optimizer(self, optimizer_fn: OptimizerFn, learning_rate: float,
                  embedding_variables: Sequence[tf.Variable]) -> tf.compat.v1.train.Optimizer:
        """A `SplitOptimizer`: the tables at `learning_rate`, the rest at `dense_learning_rate`."""
        global_step = tf.compat.v1.train.get_or_create_global_step()
        return SplitOptimizer(optimizer_fn(learning_rate),
                              optimizer_fn(self.dense_learning_rate(learning_rate, global_step)),
                              embedding_variables)

    def describe(self) -> str:
        return ("large-batch rule cowclip: global batch %d = %g x %d; dense learning rate x%.3g after a %d-step "
                "warm-up, embedding L2 x%g, embedding gradients clipped per id (r=%g, zeta=%g)" % (
                    self.global_batch, self.ratio, self.base_batch, self.dense_learning_rate_factor,
                    self.warmup_steps or 0, self.ratio, self.clip_ratio, self.clip_floor))


def make_rule(name: str, global_batch: int, base_batch: int = DEFAULT_BASE_BATCH,
              warmup_steps: Optional[int] = None, gradient_share: float = 1.0,
              warmup_examples: Optional[int] = None) -> Optional[LargeBatchRule]:
    """The rule `name` at `global_batch`; None for `none`.

    Args:
      name: one of `RULES`.
      global_batch: examples per global step, all replicas together.
      base_batch: the batch the hyperparameters are tuned at.
      warmup_steps: the warm-up's global steps, or None: from `warmup_examples`.
      gradient_share: see `CowClip.gradient_share`.
      warmup_examples: the warm-up's examples (`DEFAULT_WARMUP_EXAMPLES`
        where neither length is given).

    Raises:
      ValueError: an unknown rule or a bad value.
    """
    check_options(name, base_batch, warmup_steps, warmup_examples)
    if name == NONE:
        return None
    return CowClip(global_batch=global_batch, base_batch=base_batch,
                   warmup_steps=warmup_steps_for(global_batch, warmup_steps, warmup_examples),
                   gradient_share=gradient_share)


def clip_gradient_by_id(gradient: tf.Tensor, rows: tf.Tensor, ids: tf.Tensor, ratio: float, floor: float,
                        share: float = 1.0) -> tf.Tensor:
    """CowClip: the gradient of looked-up rows, scaled so that each id's summed gradient is within its bound.

    For each distinct id, g = the sum of the gradients of its occurrences,
    and the bound is `count * max(ratio * ||w||, floor * sqrt(width)) /
    share`; every occurrence's gradient is multiplied by `min(1, bound /
    ||g||)`, so that g, which the backward pass sums, is clipped to the bound.

    Args:
      gradient: `ids.shape + row_shape`: the gradient of the rows.
      rows: the rows looked up (`w` of each occurrence), the same shape.
      ids: the ids of the rows, any integer shape.
      ratio: r.
      floor: zeta, per coordinate of a row.
      share: the factor that turns `gradient` into its share of the step's
        mean gradient (the bound is for that share).

    Returns:
      The clipped gradient, the shape of `gradient`.
    """
    width = rows.shape[ids.shape.rank:].num_elements()
    flat_ids = tf.reshape(ids, [-1])
    flat_gradient = tf.reshape(gradient, [-1, width])
    distinct, index, counts = tf.unique_with_counts(flat_ids, out_idx=tf.int32)
    num_distinct = tf.size(distinct)
    summed = tf.math.unsorted_segment_sum(flat_gradient, index, num_distinct)
    first = tf.math.unsorted_segment_min(tf.range(tf.size(flat_ids)), index, num_distinct)
    factor = _clip_factor(summed, tf.gather(tf.reshape(rows, [-1, width]), first), counts, ratio, floor, share)
    return tf.reshape(flat_gradient * tf.expand_dims(tf.gather(factor, index), 1), tf.shape(gradient))


def _clip_factor(summed: tf.Tensor, rows: tf.Tensor, counts: tf.Tensor, ratio: float, floor: float,
                 share: float) -> tf.Tensor:
    """Each distinct id's factor `min(1, bound / ||summed||)` (`clip_gradient_by_id`); [distinct].

    Args:
      summed: [distinct, width]: each id's gradient summed over its occurrences.
      rows: [distinct, width]: each id's row.
      counts: int32 [distinct]: its occurrences (0: bound 0 and factor 1, as
        the gradient of a place of no id is 0).
    """
    width = rows.shape[1:].num_elements()
    row_norms = tf.norm(rows, axis=1)
    bound = (tf.cast(counts, rows.dtype) * tf.maximum(ratio * row_norms, floor * math.sqrt(width))
             / tf.cast(share, rows.dtype))
    norms = tf.norm(summed, axis=1)
    # Where norms > bound, norms > 0; the other branch's quotient is not used.
    return tf.where(norms > bound, bound / norms, tf.ones_like(norms))


def clip_distinct_gradient(gradient: tf.Tensor, rows: tf.Tensor, counts: tf.Tensor, ratio: float, floor: float,
                           share: float = 1.0) -> tf.Tensor:
    """CowClip on the gradient of distinct ids' rows, each already summed over the id's occurrences.

    The same bound and factor as `clip_gradient_by_id`, applied to the sums:
    what `clip_gradient_by_id` gives, summed per id.

    Args:
      gradient: `[distinct] + row_shape`: each id's summed gradient.
      rows: the ids' rows, the same shape.
      counts: int32 [distinct]: each id's occurrences in the batch.
      ratio: r.
      floor: zeta, per coordinate of a row.
      share: as in `clip_gradient_by_id`.

    Returns:
      The clipped gradient, the shape of `gradient`.
    """
    width = rows.shape[1:].num_elements()
    flat_gradient = tf.reshape(gradient, [-1, width])
    factor = _clip_factor(flat_gradient, tf.reshape(rows, [-1, width]), counts, ratio, floor, share)
    return tf.reshape(flat_gradient * tf.expand_dims(factor, 1), tf.shape(gradient))


def with_clipped_gradient(rows: tf.Tensor, ids: tf.Tensor, ratio: float, floor: float,
                          share: float = 1.0) -> tf.Tensor:
    """`rows`, unchanged, whose gradient passes through `clip_gradient_by_id` on its way back."""

    @tf.custom_gradient
    def clipped(values):
        def gradient(upstream):
            return clip_gradient_by_id(upstream, values, ids, ratio, floor, share)
        return tf.identity(values), gradient

    return clipped(rows)


def with_clipped_distinct_gradient(rows: tf.Tensor, counts: tf.Tensor, ratio: float, floor: float,
                                   share: float = 1.0) -> tf.Tensor:
    """`rows` of distinct ids, unchanged, whose summed gradient passes through `clip_distinct_gradient`."""

    # Every tensor the function uses is an argument: graph-mode `custom_gradient` looks for the variables
    # behind any other.
    @tf.custom_gradient
    def clipped(values, occurrences):
        def gradient(upstream):
            return clip_distinct_gradient(upstream, values, occurrences, ratio, floor, share), None
        return tf.identity(values), gradient

    return clipped(rows, counts)


class SplitOptimizer(tf.compat.v1.train.Optimizer):
    """Two optimizers as one: the embedding tables' and the dense variables'.

    Gradients are computed once, for every variable; `apply_gradients` gives
    the tables' to `embedding_optimizer` and the rest to `dense_optimizer`,
    which advances the global step.

    Args:
      embedding_optimizer: applies the tables' gradients.
      dense_optimizer: applies every other gradient.
      embedding_variables: the tables' variables (partitions and shards
        included).
    """

    def __init__(self, embedding_optimizer: tf.compat.v1.train.Optimizer,
                 dense_optimizer: tf.compat.v1.train.Optimizer, embedding_variables: Iterable[tf.Variable],
                 name: str = "SplitOptimizer"):
        super().__init__(use_locking=False, name=name)
        self.embedding_optimizer = embedding_optimizer
        self.dense_optimizer = dense_optimizer
        self._embedding_refs = {variable.ref() for variable in embedding_variables}

    def is_embedding(self, variable: tf.Variable) -> bool:
        """Whether `variable` belongs to an embedding table."""
        return variable.ref() in self._embedding_refs

    def apply_gradients(self, grads_and_vars, global_step=None, name=None, **kwargs) -> tf.Operation:
        """Applies the tables' gradients and the others, each with its optimizer; the last advances `global_step`.

        Raises:
          ValueError: no variable has a gradient.
        """
        grads_and_vars = list(grads_and_vars)
        groups = [(self.embedding_optimizer, [(g, v) for g, v in grads_and_vars if self.is_embedding(v)]),
                  (self.dense_optimizer, [(g, v) for g, v in grads_and_vars if not self.is_embedding(v)])]
        groups = [(optimizer, pairs) for optimizer, pairs in groups if any(g is not None for g, _ in pairs)]
        if not groups:
            raise ValueError("no gradients for any of the variables %s" % [v.name for _, v in grads_and_vars])
        updates = [optimizer.apply_gradients(pairs, global_step=global_step if last else None, **kwargs)
                   for (optimizer, pairs), last in zip(groups, [False] * (len(groups) - 1) + [True])]
        return tf.group(*updates, name=name or self.get_name())

    def get_slot(self, var, name):
        return (self.embedding_optimizer if self.is_embedding(var) else self.dense_optimizer).get_slot(var, name)

    def get_slot_names(self) -> List[str]:
        return sorted(set(self.embedding_optimizer.get_slot_names()) | set(self.dense_optimizer.get_slot_names()))

    def variables(self) -> List[tf.Variable]:
        return self.embedding_optimizer.variables() + self.dense_optimizer.variables()
