"""The `hybrid` strategy: embedding tables sharded across Horovod ranks, dense layers data-parallel.

Horovod ranks as for `horovod` (start them with `horovodrun`, `python -m
deepfm.launch --strategy hybrid`, or SageMaker's `mpi` distribution with
the hyperparameter `strategy=hybrid`), with one difference: every table a
model_fn creates through `ModelContext.embedding` is split by rows over the
ranks (`strategies.sharded`). Each rank holds and updates only
its rows (id i on rank i % ranks), looked up with two all-to-alls per step
(the distinct ids to their owners, the rows back); the gradient of a row
flows back to its owner only. The dense variables are replicated and
averaged by `hvd.DistributedOptimizer`, as `horovod` does. So the bytes a
rank sends per step and the rows it applies do not grow with the number of
ranks, and a table is held 1/ranks per host.

Everything else is `horovod`'s (the same steps on every rank, a stop agreed
in the step, every rank evaluating its shard of the validation rows and the
metric state summed over the ranks; the module docstring of
`strategies.horovod` has the rules), plus:

* Checkpoints: every rank saves its own rows of every table and slot
  beside rank 0's checkpoint, and restores its own rows at the start, so no
  process ever holds a whole table
  (`strategies.sharded.checkpoint.ShardedCheckpointSaverHook`); every rank
  saves at the same steps. A job restarted with another number of ranks
  re-shards on restore, each rank reading the old shards in bounded blocks;
  one rank (one process) restores it too. The export gathers the tables'
  weights, without their slots, into a plain checkpoint first
  (`checkpoint.export_weights`), so a hybrid checkpoint resumes under
  `hybrid` only, at any number of ranks, and exports for serving anywhere.
* The broadcast at the start covers the replicated variables only.
* Evaluation looks the rows up all-to-all, so every rank evaluates the same
  number of batches: the largest shard's, the shorter shards padded with
  rows of weight 0 that the metrics leave out (`pads_evaluation`; the
  model_fn computes its metrics with `ModelContext.eval_metric_ops`). The
  export (PREDICT) builds plain tables, so the SavedModel serves on one
  process without Horovod.
* At the end of training each rank logs the distinct ids it looked up and
  the rows it served per step (`LookupStatsHook`).
"""

import dataclasses
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from input_pipeline import schema
from strategies import context as context_lib
from strategies import horovod, memory_estimate, registry
from strategies import large_batch as large_batch_lib
from strategies import options as options_lib
from strategies import strategy_names as names
from strategies import tables as tables_lib
from strategies import topology as topology_lib
from strategies.sharded import checkpoint as checkpoint_lib
from strategies.sharded import exchange
from strategies.sharded import pipeline as pipeline_lib
from strategies.sharded import table as table_lib

# `--id_capacity`: sized from the first batch, or no padding; a positive value is the starting places.
AUTO_ID_CAPACITY = -1
NO_ID_CAPACITY = 0


@dataclasses.dataclass(frozen=True)
class HybridOptions(horovod.RankOptions):
    """Options of the `hybrid` strategy (and those of every Horovod rank).

    Attributes:
      exchange_fp16: send the looked-up rows and their gradients as float16.
      id_capacity: the places per owner of a training step's id exchange,
        a fixed shape that Horovod's response cache holds step after step:
        -1 (`AUTO_ID_CAPACITY`) sizes them from the first batch, a positive
        number starts there; either grows when a batch needs more. 0: no
        padding (shapes of variable size). Evaluation, whose batches are
        larger, exchanges its ids unpadded.
      exchange_pipeline: exchange the next batch's ids while the current
        batch trains (`strategies.sharded.pipeline`); training is unchanged.
      exchange_staleness: 1 also exchanges the next batch's rows while the
        current one trains, so a step trains on rows one update old; 0 (the
        default) keeps training exact.
    """

    exchange_fp16: bool = options_lib.option(False, "hybrid: send embedding rows and their gradients as float16.")
    id_capacity: int = options_lib.option(AUTO_ID_CAPACITY, "hybrid: places per owner of a training step's id exchange "
                                                     "(a fixed shape for Horovod's cache): -1 sized from the first "
                                                     "batch, N starting at N, either grown when a batch needs more; "
                                                     "0: no padding.")
    exchange_pipeline: bool = options_lib.option(True, "hybrid: exchange the next batch's ids while the current batch "
                                                "trains (training unchanged).")
    exchange_staleness: int = options_lib.option(pipeline_lib.EXACT, "hybrid: 1 also exchanges the next batch's rows "
                                                              "during the current step, training on rows one "
                                                              "update old; 0: exact.")

    def __post_init__(self):
        super().__post_init__()
        options_lib.check_at_least("id_capacity", self.id_capacity, AUTO_ID_CAPACITY)
        options_lib.check_choice("exchange_staleness", self.exchange_staleness, pipeline_lib.STALENESS_LEVELS)
        if self.exchange_staleness and not self.exchange_pipeline:
            raise ValueError("--exchange_staleness %d needs --exchange_pipeline (the stale rows travel with the "
                             "next batch's ids)" % self.exchange_staleness)

    def start_capacity(self) -> Optional[int]:
        """The `ShardedEmbedding.id_capacity` of a training step: None for no padding."""
        if self.id_capacity == NO_ID_CAPACITY:
            return None
        return exchange.SIZE_FROM_FIRST_BATCH if self.id_capacity == AUTO_ID_CAPACITY else self.id_capacity


class ShardedTable(tables_lib.EmbeddingTable):
    """A `ModelContext` table whose rows are sharded across the ranks (`ShardedEmbedding`)."""

    def __init__(self, sharded: table_lib.ShardedEmbedding, tables: "_Tables"):
        super().__init__(sharded.name, [sharded.num_rows] + list(sharded.row_shape))
        self.sharded = sharded
        self._tables = tables

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        return self._tables.lookup([self.sharded], ids)[0]

    def lookup_with(self, others: Sequence[tables_lib.EmbeddingTable], ids: tf.Tensor) -> List[tf.Tensor]:
        """One exchange of rows for this table and `others` when they are sharded alike; else one each."""
        group = self._group(others)
        if group is None:
            return super().lookup_with(others, ids)
        return self._tables.lookup(group, ids)

    def lookup_distinct_with(self, others: Sequence[tables_lib.EmbeddingTable], ids: tf.Tensor,
                             transform: large_batch_lib.DistinctRowsTransform) -> Optional[List[tf.Tensor]]:
        """`transform` on the rows of the exchange's places (one per distinct id) when `others` are sharded alike."""
        group = self._group(others)
        if group is None:
            return None
        return self._tables.lookup(group, ids, transform)

    def _group(self, others: Sequence[tables_lib.EmbeddingTable]) -> Optional[List[table_lib.ShardedEmbedding]]:
        """This table's and `others`' shards when they can share one exchange of rows; else None."""
        sharded = [self] + [table for table in others if isinstance(table, ShardedTable)]
        if len(sharded) != len(others) + 1 or not all(
                table._tables is self._tables and table_lib.can_share_exchange(self.sharded, table.sharded)
                for table in sharded):
            return None
        return [table.sharded for table in sharded]

    def variables(self) -> List[tf.Variable]:
        """This rank's shard."""
        return [self.sharded.variable]


class _Tables:
    """The sharded tables of one model_fn call, and the id exchanges they share.

    Tables looked up with the same ids tensor (DeepFM's weights and factors)
    share one id exchange. In TRAIN the exchanges are padded (`--id_capacity`)
    and, with an `ExchangePipeline`, the next batch's exchange runs during the
    step.
    """

    def __init__(self, strategy: "HybridStrategy", mode: str):
        self._strategy = strategy
        self._training = mode == tf.estimator.ModeKeys.TRAIN
        self.sharded: List[table_lib.ShardedEmbedding] = []
        self.pipeline: Optional[pipeline_lib.ExchangePipeline] = None
        self._routes: Dict = {}

    def __call__(self, name: str, shape: Sequence[int], initializer=None) -> ShardedTable:
        hvd = self._strategy.hvd
        options = self._strategy._options
        width = shape[1] if len(shape) > 1 else None
        if len(shape) > 2:
            raise ValueError("strategy hybrid shards tables of rows of one dimension; %r has rows of shape %s"
                             % (name, list(shape[1:])))
        table = table_lib.ShardedEmbedding(
            name, shape[0], width, hvd.rank(), hvd.size(), hvd, initializer=initializer,
            exchange_fp16=options.exchange_fp16,
            id_capacity=options.start_capacity() if self._training else table_lib.NOT_PADDED)
        self.sharded.append(table)
        return ShardedTable(table, self)

    def lookup(self, tables: Sequence[table_lib.ShardedEmbedding], ids: tf.Tensor,
               transform: Optional[large_batch_lib.DistinctRowsTransform] = None) -> List[tf.Tensor]:
        """The rows of `ids` in each of `tables` (which share exchange settings): pipelined where it applies.

        `transform`, where given, is applied to each table's rows of the
        exchange's places before they are spread to the shape of `ids`.
        """
        if self.pipeline is not None:
            rows = self.pipeline.lookup(tables, ids, transform)
            if rows is not None:
                return rows
        key = (ids.ref(),) + tables[0].routing_settings
        if key not in self._routes:
            self._routes[key] = tables[0].route(ids)
        return table_lib.lookup_together(tables, ids, self._routes[key], transform)


class LookupStatsHook(tf.estimator.SessionRunHook):
    """Adds up the distinct ids this rank looked up and the rows it served, and logs their means at the end.

    Args:
      stats: the `LookupStats` of one lookup per id exchange of the step.
      rows_held: the rows of every table this rank holds.
      rank: this rank.
    """

    def __init__(self, stats: Sequence[exchange.LookupStats], rows_held: int, rank: int):
        self._fetches = {"distinct_ids": tf.add_n([s.distinct_ids for s in stats]),
                         "rows_served": tf.add_n([s.rows_served for s in stats]),
                         "places_per_owner": tf.reduce_max(tf.stack([s.places_per_owner for s in stats]))}
        self._rows_held = rows_held
        self._rank = rank
        self.steps = 0
        self.totals = {key: 0 for key in self._fetches}
        self.places: List[int] = []

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        self.steps += 1
        for key, value in run_values.results.items():
            self.totals[key] += int(value)
        places = int(run_values.results["places_per_owner"])
        if not self.places or places != self.places[-1]:
            self.places.append(places)

    def end(self, session):
        if self.steps:
            padding = ("; places per owner %s" % " -> ".join(map(str, self.places))
                       if self.places and self.places[-1] else "")
            logging.info("hybrid rank %d: per step %.0f distinct ids looked up, %.0f rows served; %d rows held%s",
                         self._rank, self.totals["distinct_ids"] / self.steps,
                         self.totals["rows_served"] / self.steps, self._rows_held, padding)


@registry.register(names.HYBRID)
class HybridStrategy(horovod.HorovodStrategy):
    """One Horovod rank of a hybrid-parallel job (see the module docstring)."""

    Options = HybridOptions
    _options: HybridOptions
    # Every evaluation batch is a collective (the lookups' all-to-alls).
    pads_evaluation = True
    _memory_scale = "at %d rank(s)"

    def _memory_estimates(self, state: memory_estimate.ModelState, ids_per_step: int,
                         scale: Optional[int] = None) -> Dict[str, memory_estimate.ProcessMemory]:
        """A rank holds 1/ranks of each table's rows and their slots, every dense variable and its slots, and the
        buffers of the step's exchange of rows. `scale`: ranks (default: this job's)."""
        ranks = scale if scale is not None else self.topology.workers
        table_bytes, table_slot_bytes = state.tables_held(ranks)
        return {topology_lib.ROLE_WORKER: memory_estimate.ProcessMemory(
            variables=table_bytes + state.dense_bytes, slots=table_slot_bytes + state.dense_slot_bytes,
            buffers=state.exchange_bytes(ids_per_step))}

    def _optimizer_wrappers(self):
        """`hvd.DistributedOptimizer`; the shards' gradients stay local (`register_local_var`)."""
        return ()

    def _embedding_factory(self, mode: str) -> tables_lib.EmbeddingFactory:
        """Sharded tables in TRAIN and EVAL; plain ones in PREDICT, so the export needs no Horovod."""
        if mode == tf.estimator.ModeKeys.PREDICT:
            return super()._embedding_factory(mode)
        return _Tables(self, mode)

    def model_context(self, mode: str, per_replica_batch: Optional[int] = None) -> context_lib.ModelContext:
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

    def _pipeline(self, features, labels, mode: str) -> Optional[pipeline_lib.ExchangePipeline]:
        """The exchange pipeline of a training step, or None (off, evaluation, an input that ends)."""
        # An input that ends by itself (a plan without a step budget: `InputPlan.finite_input`) is read without the
        # pipeline's lookahead.
        if (mode != tf.estimator.ModeKeys.TRAIN or not self._options.exchange_pipeline
                or self.run.plan.steps_per_worker is None):
            return None
        if not isinstance(features, dict) or schema.FEAT_IDS not in features:
            logging.info("hybrid: the features hold no %r: the id exchange runs within the step", schema.FEAT_IDS)
            return None
        return pipeline_lib.ExchangePipeline(features, labels, schema.FEAT_IDS, self._options.exchange_staleness)

    def _replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """`model_fn`, with the exchange pipeline, the sharded checkpoint, its saver hook and the lookup statistics."""
        def sharded(features, labels, mode, params):
            tables = context_lib.ModelContext.of(params).embedding_factory
            pipeline = self._pipeline(features, labels, mode) if isinstance(tables, _Tables) else None
            if isinstance(tables, _Tables) and pipeline is not None:
                tables.pipeline = pipeline
                features, labels = pipeline.current()
            spec = model_fn(features, labels, mode, params)
            if not isinstance(tables, _Tables):
                return spec
            if not tables.sharded:
                raise ValueError(
                    "strategy hybrid shards the tables a model_fn creates with ModelContext.embedding; %s created "
                    "none (use --strategy horovod)" % getattr(model_fn, "__name__", model_fn))
            run = self.run
            checkpoint = checkpoint_lib.ShardedCheckpoint(tables.sharded, self.hvd)
            scaffold = checkpoint.scaffold(max_to_keep=run.plan.keep_checkpoint_max)
            if mode != tf.estimator.ModeKeys.TRAIN:
                # Each rank restores the replicated variables from its own checkpoint, its rows from the shards.
                return spec._replace(scaffold=scaffold, evaluation_hooks=list(spec.evaluation_hooks) + [
                    checkpoint.restore_hook(run.plan.model_dir, broadcast_replicated=False)])
            hooks = []
            if pipeline is not None:
                train_op, prime_op = pipeline.finish(spec.train_op)
                spec = spec._replace(train_op=train_op)
                hooks.append(pipeline.prime_hook(prime_op))
            # Every rank saves at rank 0's checkpoint steps (the save is a collective).
            saver = checkpoint_lib.ShardedCheckpointSaverHook(
                run.checkpoint_dir, checkpoint, run.plan.save_checkpoints_steps, scaffold,
                model_dir=run.plan.model_dir, keep=run.plan.keep_checkpoint_max)
            hooks.append(LookupStatsHook([table.lookup_stats for table in _distinct_exchanges(tables.sharded)],
                                         sum(table.shard_rows for table in tables.sharded), self.topology.rank))
            return spec._replace(scaffold=scaffold,
                                 training_chief_hooks=list(spec.training_chief_hooks) + [saver],
                                 training_hooks=list(spec.training_hooks) + hooks)
        return sharded

    def _train_hooks(self) -> List[tf.estimator.SessionRunHook]:
        """None: the sharded checkpoint's saver hook restores the shards and broadcasts the rest."""
        return []

    def _describe_options(self) -> str:
        options = self._options
        capacity = {AUTO_ID_CAPACITY: ", padded exchanges", NO_ID_CAPACITY: ""}.get(
            options.id_capacity, ", padded exchanges from %d ids per owner" % options.id_capacity)
        pipeline = ""
        if options.exchange_pipeline:
            pipeline = ", next batch's ids%s exchanged during the step" % (
                " and rows (one step stale)" if options.exchange_staleness else "")
        return ", tables sharded over %d rank(s)%s%s%s" % (
            self.hvd.size(), ", fp16 rows" if options.exchange_fp16 else "", capacity, pipeline)


def _distinct_exchanges(tables: Sequence[table_lib.ShardedEmbedding]) -> List[table_lib.ShardedEmbedding]:
    """One table per id exchange: tables whose lookups shared an exchange count once."""
    seen, distinct = set(), []
    for table in tables:
        key = table.lookup_stats.distinct_ids.ref()
        if key not in seen:
            seen.add(key)
            distinct.append(table)
    return distinct
