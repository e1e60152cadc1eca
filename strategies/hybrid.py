"""The `hybrid` strategy: embedding tables sharded across Horovod ranks, dense layers data-parallel.

Horovod ranks as for `horovod` (start them with `horovodrun`, `python -m
deepfm.launch --strategy hybrid`, or SageMaker's `mpi` distribution with
the hyperparameter `strategy=hybrid`), with one difference: every table a
model_fn creates through `ModelContext.embedding` is split by rows over the
ranks (`strategies.sharded_embedding`). Each rank holds and updates only
its rows (id i on rank i % ranks), looked up with two all-to-alls per step
(the distinct ids to their owners, the rows back); the gradient of a row
flows back to its owner only. The dense variables are replicated and
averaged by `hvd.DistributedOptimizer`, as `horovod` does. So the bytes a
rank sends per step and the rows it applies do not grow with the number of
ranks, and a table is held 1/ranks per host.

Everything else is `horovod`'s (the same steps on every rank, a stop agreed
in the step, every rank evaluating the whole validation set; the module
docstring of `strategies.horovod` has the rules), plus:

* Checkpoints hold every row, and every optimizer slot row, exactly once,
  as the full table under its single-process name: rank 0 gathers every
  rank's rows while it saves, so every rank saves at the same steps
  (`sharded_embedding.ShardedCheckpointSaverHook`; the other ranks write
  their own shards to their private directories). The layout does not
  depend on the number of ranks: a job restarted with another number of
  ranks re-shards on restore (rank 0 sends each rank its rows), and the
  checkpoint resumes under any other strategy too.
* The broadcast at the start covers the replicated variables only.
* Evaluation (every rank, the same batches) looks the rows up all-to-all;
  the export (PREDICT) builds plain tables, so the SavedModel serves on one
  process without Horovod.
* At the end of training each rank logs the distinct ids it looked up and
  the rows it served per step (`LookupStatsHook`).
"""

import dataclasses
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from strategies import base
from strategies import horovod
from strategies import sharded_embedding
from strategies import strategy_names as names

# The Estimator's default number of checkpoints kept.
DEFAULT_KEEP_CHECKPOINT_MAX = 5
NO_ID_CAPACITY = 0


@dataclasses.dataclass(frozen=True)
class HybridOptions(horovod.RankOptions):
    """Options of the `hybrid` strategy (and those of every Horovod rank).

    Attributes:
      exchange_fp16: send the looked-up rows and their gradients as float16.
      id_capacity: pad each rank's distinct ids sent to each owner in a
        training step to this many places, a fixed shape for Horovod's
        response cache (a training batch with more fails, naming it); 0: no
        padding. Evaluation, whose batches are larger, exchanges its ids
        unpadded.
    """

    exchange_fp16: bool = base.option(False, "hybrid: send embedding rows and their gradients as float16.")
    id_capacity: int = base.option(NO_ID_CAPACITY, "hybrid: pad the ids each rank sends each owner per training "
                                                   "step to this many (a fixed shape); 0: no padding.")

    def __post_init__(self):
        super().__post_init__()
        base.check_at_least("id_capacity", self.id_capacity, 0)


class ShardedTable(base.EmbeddingTable):
    """A `ModelContext` table whose rows are sharded across the ranks (`ShardedEmbedding`)."""

    def __init__(self, sharded: sharded_embedding.ShardedEmbedding, tables: "_Tables"):
        super().__init__(sharded.name, [sharded.num_rows] + list(sharded.row_shape))
        self.sharded = sharded
        self._tables = tables

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        return self.sharded.lookup(ids, self._tables.routing(self.sharded, ids))

    def lookup_with(self, others: Sequence[base.EmbeddingTable], ids: tf.Tensor) -> List[tf.Tensor]:
        """One exchange of rows for this table and `others` when they are sharded alike; else one each."""
        tables = [self] + list(others)
        if not all(isinstance(table, ShardedTable) and table._tables is self._tables
                   and sharded_embedding.can_share_exchange(self.sharded, table.sharded) for table in tables):
            return super().lookup_with(others, ids)
        return sharded_embedding.lookup_together([table.sharded for table in tables], ids,
                                                 self._tables.routing(self.sharded, ids))

    def variables(self) -> List[tf.Variable]:
        """This rank's shard."""
        return [self.sharded.variable]


class _Tables:
    """The sharded tables of one model_fn call, and the id exchanges they share.

    Tables looked up with the same ids tensor (DeepFM's weights and factors)
    share one id exchange. The id capacity applies in TRAIN only.
    """

    def __init__(self, strategy: "HybridStrategy", mode: str):
        self._strategy = strategy
        self._padded = mode == tf.estimator.ModeKeys.TRAIN
        self.sharded: List[sharded_embedding.ShardedEmbedding] = []
        self._routes: Dict = {}

    def __call__(self, name: str, shape: Sequence[int], initializer=None) -> ShardedTable:
        hvd = self._strategy.hvd
        options = self._strategy.options
        width = shape[1] if len(shape) > 1 else None
        if len(shape) > 2:
            raise ValueError("strategy hybrid shards tables of rows of one dimension; %r has rows of shape %s"
                             % (name, list(shape[1:])))
        table = sharded_embedding.ShardedEmbedding(
            name, shape[0], width, hvd.rank(), hvd.size(), hvd, initializer=initializer,
            exchange_fp16=options.exchange_fp16,
            id_capacity=options.id_capacity if self._padded and options.id_capacity else None)
        self.sharded.append(table)
        return ShardedTable(table, self)

    def routing(self, table: sharded_embedding.ShardedEmbedding, ids: tf.Tensor) -> sharded_embedding.IdRouting:
        key = (ids.ref(), table.row_dtype)
        if key not in self._routes:
            self._routes[key] = table.route(ids)
        return self._routes[key]


class LookupStatsHook(tf.estimator.SessionRunHook):
    """Adds up the distinct ids this rank looked up and the rows it served, and logs their means at the end.

    Args:
      stats: the `LookupStats` of one lookup per id exchange of the step.
      rows_held: the rows of every table this rank holds.
      rank: this rank.
    """

    def __init__(self, stats: Sequence[sharded_embedding.LookupStats], rows_held: int, rank: int):
        self._fetches = {"distinct_ids": tf.add_n([s.distinct_ids for s in stats]),
                         "rows_served": tf.add_n([s.rows_served for s in stats])}
        self._rows_held = rows_held
        self._rank = rank
        self.steps = 0
        self.totals = {key: 0 for key in self._fetches}

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        self.steps += 1
        for key, value in run_values.results.items():
            self.totals[key] += int(value)

    def end(self, session):
        if self.steps:
            logging.info("hybrid rank %d: per step %.0f distinct ids looked up, %.0f rows served; %d rows held",
                         self._rank, self.totals["distinct_ids"] / self.steps,
                         self.totals["rows_served"] / self.steps, self._rows_held)


@base.register(names.HYBRID)
class HybridStrategy(horovod.HorovodStrategy):
    """One Horovod rank of a hybrid-parallel job (see the module docstring)."""

    Options = HybridOptions

    def __init__(self, config: base.StrategyConfig):
        super().__init__(config)
        self._save_steps: Optional[int] = None
        self._keep_checkpoint_max = DEFAULT_KEEP_CHECKPOINT_MAX

    def run_config(self, **kwargs) -> tf.estimator.RunConfig:
        """Horovod's `RunConfig`; every rank saves at rank 0's checkpoint steps (the save is a collective)."""
        self._save_steps = kwargs.get("save_checkpoints_steps")
        self._keep_checkpoint_max = kwargs.get("keep_checkpoint_max", DEFAULT_KEEP_CHECKPOINT_MAX)
        return super().run_config(**kwargs)

    def optimizer_wrappers(self):
        """`hvd.DistributedOptimizer`; the shards' gradients stay local (`register_local_var`)."""
        return ()

    def embedding_factory(self, mode: str) -> base.EmbeddingFactory:
        """Sharded tables in TRAIN and EVAL; plain ones in PREDICT, so the export needs no Horovod."""
        if mode == tf.estimator.ModeKeys.PREDICT:
            return super().embedding_factory(mode)
        return _Tables(self, mode)

    def model_context(self, mode: str, per_replica_batch: Optional[int] = None) -> base.ModelContext:
        context = super().model_context(mode, per_replica_batch)
        tables = context.embedding_factory
        if not isinstance(tables, _Tables):
            return context

        def distributed(optimizer):
            wrapped = self.distributed_optimizer(optimizer)
            for table in tables.sharded:
                wrapped.register_local_var(table.variable)
            return wrapped
        return dataclasses.replace(context, optimizer_wrappers=(distributed,) + context.optimizer_wrappers)

    def replicate(self, model_fn: base.ModelFn) -> base.ModelFn:
        """`model_fn`, with the sharded checkpoint, its saver hook and the lookup statistics in TRAIN and EVAL."""
        def sharded(features, labels, mode, params):
            spec = model_fn(features, labels, mode, params)
            tables = base.ModelContext.of(params).embedding_factory
            if not isinstance(tables, _Tables):
                return spec
            if not tables.sharded:
                raise ValueError(
                    "strategy hybrid shards the tables a model_fn creates with ModelContext.embedding; %s created "
                    "none (use --strategy horovod)" % getattr(model_fn, "__name__", model_fn))
            checkpoint = sharded_embedding.ShardedCheckpoint(tables.sharded, self.hvd)
            scaffold = tf.compat.v1.train.Scaffold(saver=checkpoint.saver(max_to_keep=self._keep_checkpoint_max))
            if mode != tf.estimator.ModeKeys.TRAIN:
                return spec._replace(scaffold=scaffold)
            if self._save_steps is None or self.checkpoint_dir is None:
                raise ValueError("strategy hybrid: build the Estimator with the strategy's run_config "
                                 "(save_checkpoints_steps), which its checkpoints need")
            saver = sharded_embedding.ShardedCheckpointSaverHook(
                self.checkpoint_dir, checkpoint, self._save_steps, scaffold)
            stats = LookupStatsHook([table.lookup_stats for table in _distinct_exchanges(tables.sharded)],
                                    sum(table.shard_rows for table in tables.sharded), self.rank)
            return spec._replace(scaffold=scaffold,
                                 training_chief_hooks=list(spec.training_chief_hooks) + [saver],
                                 training_hooks=list(spec.training_hooks) + [stats])
        return sharded

    def train_hooks(self) -> List[tf.estimator.SessionRunHook]:
        """None: the sharded checkpoint's saver hook restores the shards and broadcasts the rest."""
        return []

    def _describe_options(self) -> str:
        options = self.options
        return ", tables sharded over %d rank(s)%s%s" % (
            self.hvd.size(), ", fp16 rows" if options.exchange_fp16 else "",
            ", %d ids per owner" % options.id_capacity if options.id_capacity else "")


def _distinct_exchanges(tables: Sequence[sharded_embedding.ShardedEmbedding]
                        ) -> List[sharded_embedding.ShardedEmbedding]:
    """One table per id exchange: tables whose lookups shared an exchange count once."""
    seen, distinct = set(), []
    for table in tables:
        key = table.lookup_stats.distinct_ids.ref()
        if key not in seen:
            seen.add(key)
            distinct.append(table)
    return distinct
