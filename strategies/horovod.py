"""The `horovod` strategy: synchronous data parallelism over processes.

Start one process per device with `horovodrun` (or `python -m
deepfm.launch --strategy horovod`); each process trains a full copy of the
model on its own part of the data, and `hvd.DistributedOptimizer`
allreduces (averages) the gradients of every step, so all ranks apply the
same update. `hvd.BroadcastGlobalVariablesHook(0)` copies rank 0's variables
to every rank when the session starts, so the copies start equal (also when
rank 0 resumes from a checkpoint) and stay equal.

What each rank does:

* Data: File mode shards by `(size, rank)`, or by `(workers_per_host,
  local_rank)` when S3 already split the files by host
  (`input_pipeline.sharding`). Pipe mode (`--train_channels` set:
  `StrategyConfig.pipe_mode`) gives each worker of a host its own channel by
  local rank and shards by `sharding.pipe_mode_shard`, the channels of a
  host being mapped to different S3 paths.
* Devices: with GPUs, each process sees only the GPU of its local rank.
* Learning rate: `learning_rate_factor` (`none`, `linear`, `sqrt`, `capped`).
  The per-rank batch is not scaled.
* Saving: rank 0 (`is_chief`) writes checkpoints, summaries, the metrics
  file and the SavedModel to `model_dir`. The other ranks' Estimators work in
  a private temporary directory, removed when the process exits, and save
  there only a checkpoint at the start and at the end of training (the end
  one is what they evaluate).

No rank ever waits in a collective for a rank busy with something else
(Horovod's "tensors were submitted ... by subset of ranks" stall):

* Every rank runs the same number of steps: the trainer's step budget comes
  from the smallest shard's rows, and the training input repeats, so no rank
  runs out of data first.
* The only collectives are the gradient allreduces of training steps, the
  broadcast at session start, the trainer's agreements before training (on
  its input check, and on rank 0's resume step and input position:
  `deepfm.runtime.preflight`), one agreement on rank 0's resume step in
  `prepare` (a maximum over the ranks, the others giving 0), each made once
  by every rank; with evaluation during training, one agreement per round on
  whether to stop early; and one sum of the metric state at the end of each
  evaluation, run by every rank. The export runs after the last step and
  contains no collective.
* A stop on SIGTERM or SIGINT (`deepfm.runtime.interrupt`) is agreed in the step
  itself: an allreduce of a stop flag (`Strategy.agree_max`) is fetched with every
  training step, so all ranks stop after the same step.
* Evaluation runs on every rank (`evaluates`), each on its shard of the
  validation rows (`InputPlan.evaluation_input_fn`: rank r of n reads shard r, the
  shards holding every row once), so each rank reads 1/n of the rows.
  After its last batch every rank sums the state of the metrics over
  the ranks (AUC's confusion counts, log loss's sum and count: one
  allreduce, `strategies.sharded_evaluation`), and computes the metrics of
  all the rows from it: every rank reports the same metrics, those one
  process evaluating every row would report. The ranks' batch counts may
  differ by the shards' sizes; `hybrid` pads them equal (`pads_evaluation`).
  A Pipe-mode validation channel is evaluated by rank 0 alone.
* A model directory whose checkpoint already reached the step budget (a
  job stopped during its final evaluation or export) gets a training session
  of no step on every rank, then the evaluation and the export
  (`deepfm.runtime.trainer`).
* Rank 0's periodic checkpoints and summaries are the only work it does
  alone during training; they are local and short.
"""

import atexit
import dataclasses
import functools
import math
import os
import shutil
import tempfile
from typing import Callable, ClassVar, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from input_pipeline import pipeline, sharding
from strategies import context as context_lib
from strategies import devices, large_batch, lifecycle, registry, sharded_evaluation, strategy
from strategies import horovod_controllers as controllers
from strategies import input_plan as input_plan_lib
from strategies import strategy_names as names
from strategies import tables as tables_lib
from strategies import topology as topology_lib
from strategies.config import StrategyConfig
from strategies.options import check_at_least, check_choice, option

LR_SCALINGS = ("none", "linear", "sqrt", "capped")
LR_NONE, LR_LINEAR, LR_SQRT, LR_CAPPED = LR_SCALINGS
DEFAULT_LR_SCALE_CAP = 1.5
# The best-practice text: raise the learning rate with the workers, but not by their number
# (0.001 to 0.0015 even with four or more). Measured: at 2 ranks it keeps Horovod's AUC within
# 0.005 of one process's after the same examples, unscaled it does not (docs/levers.md).
DEFAULT_LR_SCALING = LR_CAPPED
MIN_LR_SCALE_CAP = 1.0
HVD_COMPRESSIONS = ("none", "fp16")
ROOT_RANK = 0
# Non-chief ranks save a checkpoint at the start and the end of training
# only: their periodic interval is never reached.
FINAL_CHECKPOINT_ONLY_STEPS = 2**62
PRIVATE_KEEP_CHECKPOINT_MAX = 1
NO_SUMMARIES = 0
COMPRESSION_FP16 = "fp16"
# `hvd_groups` of no explicit groups.
NO_GROUPS = 0
# Set from --hvd_fusion_threshold_bytes and --hvd_cycle_time_ms before `hvd.init()`.
FUSION_THRESHOLD_ENV = "HOROVOD_FUSION_THRESHOLD"
CYCLE_TIME_ENV = "HOROVOD_CYCLE_TIME"
# The feature `_finite_input` adds: whether another batch follows this one.
MORE_KEY = "_another_batch_follows"
def learning_rate_factor(policy: str, size: int, cap: float = DEFAULT_LR_SCALE_CAP) -> float:
    """The factor on the learning rate for `size` ranks under `policy`.

    Args:
      policy: one of `LR_SCALINGS`: `none` (1), `linear` (size),
        `sqrt` (sqrt(size)), `capped` (min(size, cap)).
      size: ranks in the job, >= 1.
      cap: the largest factor of `capped`; the best-practice value 1.5 turns
        0.001 into 0.0015 for any number of ranks from 2 up.

    Raises:
      ValueError: an unknown policy or size < 1.
    """
    check_choice("lr_scaling", policy, LR_SCALINGS)
    if size < 1:
        raise ValueError("the number of ranks must be >= 1, got %r" % size)
    if policy == LR_LINEAR:
        return float(size)
    if policy == LR_SQRT:
        return math.sqrt(size)
    if policy == LR_CAPPED:
        return float(min(size, cap))
    return 1.0


def pinned_gpu(device_type: str, num_gpus: int, local_rank: int, local_size: int) -> Optional[int]:
    """The GPU a rank is pinned to, or None to train on the CPU.

    Args:
      device_type: `auto` (the local rank's GPU when GPUs are visible),
        `gpu` or `cpu`.
      num_gpus: GPUs visible on this host.
      local_rank: the rank on its host.
      local_size: ranks on this host.

    Raises:
      ValueError: `gpu` with no GPU, or fewer GPUs than ranks on the host.
    """
    if device_type == devices.CPU or (device_type == devices.AUTO and not num_gpus):
        return None
    if not num_gpus:
        raise ValueError("--device_type gpu: no GPU is visible to TensorFlow on this host")
    if num_gpus < local_size:
        raise ValueError(
            "%d horovod ranks on this host but only %d visible GPU(s): start at most %d process(es) "
            "per host (horovodrun -np / processes_per_host) or pass --device_type cpu"
            % (local_size, num_gpus, num_gpus))
    return local_rank


def with_more_marker(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`(features, labels)` batches with `features[MORE_KEY]`: whether another batch follows.

    Reads one batch ahead. The features must be a dict and every batch the
    same shape (the pipeline drops the remainder).
    """
    features_spec, labels_spec = dataset.element_spec
    zeros = tf.nest.map_structure(lambda spec: tf.zeros(spec.shape, spec.dtype), (features_spec, labels_spec))
    marked = dataset.map(tf.autograph.experimental.do_not_convert(lambda features, labels: ((features, labels), True)))
    end = tf.data.Dataset.from_tensors((zeros, False))

    @tf.autograph.experimental.do_not_convert
    def step(state, element):
        previous, has_previous = state
        current, is_real = element
        return (current, True), (previous, has_previous, is_real)

    pairs = marked.concatenate(end).scan((zeros, False), step)
    emitted = pairs.filter(tf.autograph.experimental.do_not_convert(
        lambda previous, has_previous, is_real: has_previous))
    return emitted.map(tf.autograph.experimental.do_not_convert(lambda previous, has_previous, is_real: (
        dict(previous[0], **{MORE_KEY: is_real}), previous[1])))


class StopWhenAnyRankEndsHook(tf.estimator.SessionRunHook):
    """Stops training after the step in which some rank trained its last batch.

    Args:
      every_rank_has_more: the minimum over the ranks of "another batch
        follows" (an allreduce the model_fn wrapper built), fetched every step.
    """

    def __init__(self, every_rank_has_more: tf.Tensor):
        self._every_rank_has_more = every_rank_has_more

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._every_rank_has_more)

    def after_run(self, run_context, run_values):
        if not run_values.results:
            logging.info("a horovod rank trained its last batch; every rank stops after this step")
            run_context.request_stop()


@dataclasses.dataclass(frozen=True)
class RankOptions:
    """Options of every strategy whose processes are Horovod ranks.

    Attributes:
      lr_scaling: the learning rate's scaling with the ranks (`LR_SCALINGS`):
        `none`, `linear` (x ranks), `sqrt` (x sqrt(ranks)), `capped`
        (x min(ranks, lr_scale_cap); the default).
      lr_scale_cap: the largest factor of `capped`.
      hvd_compression: compression of dense allreduces (`HVD_COMPRESSIONS`);
        Horovod never compresses the allgathers of sparse gradients.
      hvd_fusion_threshold_bytes: `HOROVOD_FUSION_THRESHOLD` (-1: Horovod's
        default, 128 MiB).
      hvd_cycle_time_ms: `HOROVOD_CYCLE_TIME` in ms (-1: Horovod's default,
        1 ms).
      hvd_groups: reduce the gradients in this many explicit groups, each
        submitted as one collective when all of its gradients are ready
        (`hvd.DistributedOptimizer(groups=...)`); 0: no groups (each
        gradient on its own, fused by Horovod within a cycle).
    """

    lr_scaling: str = option(DEFAULT_LR_SCALING, "Horovod learning-rate scaling with the ranks: none, linear "
                             "(x ranks), sqrt, capped (x min(ranks, --lr_scale_cap)).", choices=LR_SCALINGS)
    lr_scale_cap: float = option(DEFAULT_LR_SCALE_CAP, "Largest learning-rate factor of --lr_scaling=capped.")
    hvd_compression: str = option("none", "Horovod: compression of dense allreduces.", choices=HVD_COMPRESSIONS)
    hvd_fusion_threshold_bytes: int = option(-1, "Horovod: HOROVOD_FUSION_THRESHOLD (-1: Horovod's default, "
                                                 "128 MiB).")
    hvd_cycle_time_ms: float = option(-1.0, "Horovod: HOROVOD_CYCLE_TIME in ms (-1: Horovod's default, 1 ms).")
    hvd_groups: int = option(NO_GROUPS, "Horovod: reduce the gradients in this many explicit groups, one "
                             "collective each (DistributedOptimizer(groups=N)); 0: none.")

    def __post_init__(self):
        check_choice("lr_scaling", self.lr_scaling, LR_SCALINGS)
        check_at_least("lr_scale_cap", self.lr_scale_cap, MIN_LR_SCALE_CAP)
        check_choice("hvd_compression", self.hvd_compression, HVD_COMPRESSIONS)
        check_at_least("hvd_groups", self.hvd_groups, NO_GROUPS)


@dataclasses.dataclass(frozen=True)
class HorovodOptions(RankOptions):
    """Options of the `horovod` strategy.

    Attributes:
      sparse_as_dense: allreduce embedding gradients densely instead of
        allgathering their rows.
    """

    sparse_as_dense: bool = option(False, "Horovod: allreduce embedding gradients densely.")

    def __post_init__(self):
        super().__post_init__()
        if self.hvd_groups != NO_GROUPS and not self.sparse_as_dense:
            raise ValueError(
                "--hvd_groups %d with --strategy horovod needs --sparse_as_dense: Horovod 0.28.1's grouped allreduce "
                "fails on a group of sparse (embedding) and dense gradients. Add --sparse_as_dense, or use "
                "--strategy hybrid, whose groups hold the dense gradients only" % self.hvd_groups)


@registry.register(names.HOROVOD)
class HorovodStrategy(strategy.Strategy):
    """One Horovod rank of a synchronous data-parallel job.

    `setup` initializes Horovod and pins the GPU; every member that needs a
    rank needs it done (`strategies.lifecycle`).
    """

    Options: ClassVar[type] = HorovodOptions
    # `hybrid` ranks (a subclass) have options of their own: the fields of every rank are typed here.
    _options: RankOptions
    # Every rank evaluates the same number of batches, the shorter shards padded with rows of weight 0: needed
    # where evaluating a batch is a collective (`hybrid`'s lookups). Here only the final sum is one.
    pads_evaluation: ClassVar[bool] = False

    def __init__(self, config: StrategyConfig):
        super().__init__(config)
        self._hvd = None
        self._gpu: Optional[int] = None
        self._private_dir: Optional[str] = None

    # --- the lifecycle -----------------------------------------------------------------------------
    def _set_up(self) -> topology_lib.Topology:
        """Initializes Horovod, pins the GPU and checks the Pipe channels.

        Raises:
          ImportError: Horovod is not installed.
          ValueError: fewer GPUs or Pipe channels than ranks on this host,
            ranks that do not fill every host equally, or a rank started for
            a controller its Horovod was built without
            (`strategies.horovod_controllers`).
        """
        for variable, value in ((FUSION_THRESHOLD_ENV, self._options.hvd_fusion_threshold_bytes),
                                (CYCLE_TIME_ENV, self._options.hvd_cycle_time_ms)):
            if value >= 0:
                os.environ[variable] = "%g" % value
        hvd = controllers.checked_horovod(os.environ)
        hvd.init()
        self._hvd = hvd
        gpus = tf.config.list_physical_devices(devices.GPU.upper())
        self._gpu = pinned_gpu(self.config.device_type, len(gpus), hvd.local_rank(), hvd.local_size())
        if self._gpu is not None:
            # Eager work must see the same single GPU as the sessions
            # (`_session_config`), or TensorFlow maps GPU:0 to two GPUs.
            try:
                tf.config.set_visible_devices(gpus[self._gpu], devices.GPU.upper())
            except RuntimeError as e:
                raise RuntimeError(
                    "horovod rank %d cannot be pinned to GPU %d: TensorFlow initialized its GPUs before "
                    "the strategy's setup(); run setup() before any TensorFlow op (%s)"
                    % (hvd.rank(), self._gpu, e)) from e
        topology = topology_lib.Topology(
            task="rank%d" % hvd.rank(), is_chief=hvd.rank() == ROOT_RANK, evaluates=True,
            replicas_in_sync=hvd.size(), workers=hvd.size(), rank=hvd.rank(), workers_per_host=hvd.local_size(),
            local_rank=hvd.local_rank(), lockstep=True)
        if self.config.pipe_mode:
            self._channel(topology)
        return topology

    @property
    def hvd(self):
        """The initialized `horovod.tensorflow` module."""
        lifecycle.require(self, "hvd", lifecycle.SET_UP)
        return self._hvd

    def _checkpoint_dir(self, plan: lifecycle.Plan) -> str:
        """Rank 0's is the plan's model directory; the others' a private temporary one."""
        if self.topology.is_chief:
            return plan.model_dir
        if self._private_dir is None:
            self._private_dir = tempfile.mkdtemp(prefix="horovod-rank%d-" % self.topology.rank)
            atexit.register(shutil.rmtree, self._private_dir, ignore_errors=True)
        return self._private_dir

    # --- the input ---------------------------------------------------------------------------------
    def input_plan(self) -> input_plan_lib.InputPlan:
        """This rank's shard of the input and Pipe channel, its last batch marked, its shard of the validation rows.

        File mode: `(size, rank)`, or `(workers_per_host, local_rank)` with
        `--s3_sharded`. Pipe mode: `sharding.pipe_mode_shard`. The channel
        is the one of this rank's local rank (in Pipe mode `setup` checked
        there is one; elsewhere `pipe_channel` says why there is none).
        A training input that ends by itself marks each batch with whether
        another one follows (`_finite_input`); evaluation reads this rank's
        shard of the validation rows (`_evaluation_input_fn`).
        """
        topology = self.topology
        placement = topology.placement()
        if self.config.pipe_mode:
            num_shards, index = sharding.pipe_mode_shard(placement, self.config.s3_sharded)
        else:
            num_shards, index = sharding.file_mode_shard(placement, self.config.s3_sharded)
        channel, channel_error = None, input_plan_lib.NO_CHANNEL
        try:
            channel = self._channel(topology)
        except ValueError as e:
            channel_error = str(e)
        return input_plan_lib.InputPlan(
            context=tf.distribute.InputContext(num_input_pipelines=num_shards, input_pipeline_id=index,
                                               num_replicas_in_sync=topology.replicas_in_sync),
            channel=channel, channel_error=channel_error, finite_input=self._finite_input,
            evaluation_input_fn=self._evaluation_input_fn)

    def _evaluation_input_fn(self, builder: pipeline.DatasetBuilder) -> Callable[..., tf.data.Dataset]:
        """Shard `rank` of `size` of the validation rows, each row marked (`sharded_evaluation.ROW_KEY`).

        The shards hold every row exactly once (whole files dealt out, or
        every `size`-th record, as `DatasetBuilder` shards), provided every
        rank reads the same validation files. The model_fn wrapper sums the
        ranks' metric state once the last batch is evaluated. With
        `pads_evaluation` every rank reads the largest shard's batch count,
        the shorter shards padded with rows of weight 0.

        Raises:
          ValueError: a Pipe-mode channel (rank 0 alone evaluates one), or,
            with `pads_evaluation`, files of unknown row counts.
        """
        if builder.channel is not None:
            raise ValueError("Horovod ranks evaluate File-mode validation files together; the Pipe-mode channel "
                             "%r is evaluated by rank 0 alone, without a strategy" % builder.channel)
        topology = self.topology
        shard = tf.distribute.InputContext(num_input_pipelines=topology.workers, input_pipeline_id=topology.rank,
                                           num_replicas_in_sync=topology.replicas_in_sync)
        rows = builder.shard_plan(shard).rows_per_shard
        batches = None
        if self.pads_evaluation:
            if rows is None:
                raise ValueError("strategy %s evaluates the same number of batches on every rank and needs the "
                                 "validation files' row counts (%s): give them in the dataset's metadata.json"
                                 % (self.name, ", ".join(builder.files)))
            batches = sharded_evaluation.most_batches(rows, builder.batch_size)
        logging.info("rank %d evaluates shard %d of %d of the validation rows (%s rows)%s", topology.rank,
                     topology.rank, topology.workers, "unknown" if rows is None else rows[topology.rank],
                     "" if batches is None else ", in %d batch(es) like every rank" % batches)

        def input_fn(params=None, input_context=None):
            del params, input_context  # This rank's shard is fixed above.
            return sharded_evaluation.marked_batches(builder(shard), batches)
        return input_fn

    def _channel(self, topology: topology_lib.Topology) -> str:
        """The channel of this rank's local rank.

        Raises:
          ValueError: fewer `--train_channels` than ranks on this host, or a
            channel listed twice.
        """
        try:
            return sharding.assign_channel(self.config.train_channels, topology.local_rank,
                                           topology.workers_per_host)
        except ValueError as e:
            raise ValueError("--train_channels %r: %s" % (",".join(self.config.train_channels), e)) from e

    # --- the graph --------------------------------------------------------
    def _session_config(self) -> tf.compat.v1.ConfigProto:
        """The base configuration, showing only this local rank's GPU.

        With `--device_type cpu` the session sees no GPU.
        """
        config = super()._session_config()
        if self._gpu is not None:
            config.gpu_options.visible_device_list = str(self._gpu)
        elif self.config.device_type == devices.CPU:
            config.device_count[devices.GPU.upper()] = 0
        return config

    def _run_config_kwargs(self, plan: lifecycle.Plan, checkpoint_dir: str) -> dict:
        """The plan's, on rank 0; the other ranks save to their private directory, a final checkpoint only.

        They write no summaries. The graph seed, when set, is offset by the
        rank so the ranks draw different dropout masks (initial values come
        from rank 0 anyway).
        """
        kwargs = super()._run_config_kwargs(plan, checkpoint_dir)
        if kwargs["tf_random_seed"] is not None:
            kwargs["tf_random_seed"] += self.topology.rank
        if not self.topology.is_chief:
            kwargs.update(
                save_checkpoints_steps=FINAL_CHECKPOINT_ONLY_STEPS,
                save_checkpoints_secs=None,
                save_summary_steps=NO_SUMMARIES,
                keep_checkpoint_max=PRIVATE_KEEP_CHECKPOINT_MAX)
        return kwargs

    def _learning_rate_factor(self) -> float:
        """`--lr_scaling`'s factor; 1 under a large-batch rule, whose rates follow the global batch (all ranks)."""
        if self.config.large_batch_rule != large_batch.NONE:
            return 1.0
        return learning_rate_factor(self._options.lr_scaling, self.topology.workers, self._options.lr_scale_cap)

    def _optimizer_wrappers(self) -> Tuple[context_lib.OptimizerWrapper, ...]:
        """Wraps the optimizer in `hvd.DistributedOptimizer`.

        With `--sparse_as_dense` the embedding gradients are made dense and
        allreduced, instead of allgathering their rows and indices.
        """
        return (functools.partial(self.distributed_optimizer, sparse_as_dense=self._sparse_as_dense()),)

    def distributed_optimizer(self, optimizer: tf.compat.v1.train.Optimizer, **kwargs
                              ) -> tf.compat.v1.train.Optimizer:
        """`optimizer` in `hvd.DistributedOptimizer` with the configured compression and groups; `kwargs` go to it."""
        hvd = self.hvd
        compression = (hvd.Compression.fp16 if self._options.hvd_compression == COMPRESSION_FP16
                       else hvd.Compression.none)
        groups = self._options.hvd_groups if self._options.hvd_groups != NO_GROUPS else None
        return hvd.DistributedOptimizer(optimizer, compression=compression, groups=groups, **kwargs)

    def _embedding_factory(self, mode: str) -> tables_lib.EmbeddingFactory:
        """One variable per table on every rank, its gradients reduced by `hvd.DistributedOptimizer`."""
        del mode
        return strategy.plain_tables(self)

    def _replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """`model_fn` itself: one call per rank."""
        return model_fn

    def _finite_input(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Marks each batch with whether another one follows (`MORE_KEY` in the features).

        Ranks whose Pipe channels hold different numbers of records must stop
        at the same step, or one would wait for ever in an allreduce. One
        batch of lookahead tells each rank, as it trains a batch, whether it
        has another; the model_fn wrapper takes the minimum over the ranks,
        and every rank stops after the step in which one trained its last
        batch (Horovod's `join` semantics, without training a padding batch).
        """
        return with_more_marker(dataset)

    def wrap_model_fn(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """Runs `model_fn` as `_replicate` says, with this strategy's context, and adds what the input asks for.

        For training inputs from `InputPlan.finite_input`: the agreement to
        stop when any rank runs out. For evaluation inputs from
        `InputPlan.evaluation_input_fn`: the sum of the metric state over the
        ranks (`_evaluated_together`).
        """
        hvd = self.hvd
        replicated = self._replicate(model_fn)

        def wrapped(features, labels, mode, params):
            features, more = _taken(features, MORE_KEY)
            features, row_weights = _taken(features, sharded_evaluation.ROW_KEY)
            if row_weights is not None and mode == tf.estimator.ModeKeys.EVAL:
                return self._evaluated_together(replicated, features, labels, mode, params, row_weights)
            spec = replicated(features, labels, mode, self.model_context(mode).with_params(params))
            if more is None or mode != tf.estimator.ModeKeys.TRAIN:
                return spec
            with tf.device(devices.HOST_DEVICE):
                every_rank_has_more = hvd.allreduce(tf.cast(more, tf.int32), op=hvd.Min,
                                                    name="every_rank_has_more")
            hook = StopWhenAnyRankEndsHook(every_rank_has_more)
            return spec._replace(training_hooks=list(spec.training_hooks) + [hook])
        return wrapped

    def _evaluated_together(self, replicated: context_lib.ModelFn, features, labels, mode: str, params,
                            row_weights: tf.Tensor) -> tf.estimator.EstimatorSpec:
        """The EVAL spec of a batch of this rank's shard, with the hook that sums the metric state over the ranks.

        With `pads_evaluation`, the model's context leaves the padding rows
        (weight 0) out of `eval_metric_ops`.

        Raises:
          ValueError: with `pads_evaluation`, a model_fn whose EVAL metrics
            did not go through `ModelContext.eval_metric_ops` (they would
            count the padding rows).
        """
        context = self.model_context(mode)
        metric_fns: List[context_lib.MetricFn] = []
        if self.pads_evaluation:
            context = dataclasses.replace(context, eval_rows=row_weights > 0, metric_sink=metric_fns.append)
        spec = replicated(features, labels, mode, context.with_params(params))
        if self.pads_evaluation and spec.eval_metric_ops and not metric_fns:
            raise ValueError(
                "strategy %s evaluates the same number of batches on every rank, padding the shorter shards with "
                "rows of weight 0; the EVAL metrics %s did not go through ModelContext.eval_metric_ops, which "
                "leaves those rows out: return context.eval_metric_ops(metric_fn, labels, predictions) "
                "(as deepfm.models.ctr does)" % (self.name, ", ".join(sorted(spec.eval_metric_ops))))
        hook = sharded_evaluation.SumMetricStateHook(self._allreduce_sum, row_weights, spec.eval_metric_ops,
                                                     self.topology.task)
        return spec._replace(evaluation_hooks=list(spec.evaluation_hooks) + [hook])

    def _allreduce_sum(self, tensor: tf.Tensor, name: str) -> tf.Tensor:
        """The sum of every rank's `tensor`: an allreduce named `name`, on the host."""
        with tf.device(devices.HOST_DEVICE):
            return self.hvd.allreduce(tensor, op=self.hvd.Sum, name=name)

    def _train_hooks(self) -> List[tf.estimator.SessionRunHook]:
        """Broadcasts rank 0's variables when the session starts."""
        return [self.hvd.BroadcastGlobalVariablesHook(ROOT_RANK)]

    def _agree_max_op(self, value: tf.Tensor, name: str) -> tf.Tensor:
        """The maximum of every rank's int32 `value`: an allreduce named `name`, on the host.

        `deepfm.runtime.interrupt` fetches one of a stop flag with every
        training step, so every rank stops after the same step when any of
        them got SIGTERM or SIGINT.
        """
        with tf.device(devices.HOST_DEVICE):
            return self.hvd.allreduce(value, op=self.hvd.Max, name=name)

    def describe(self) -> str:
        hvd = self.hvd
        device = "GPU %d" % self._gpu if self._gpu is not None else "CPU"
        return "%s: rank %d of %d (local rank %d of %d), %s, lr x%g (%s)%s" % (
            self.name, hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), device,
            self._learning_rate_factor(), self._options.lr_scaling, self._describe_options())

    def _describe_options(self) -> str:
        return ", sparse_as_dense" if self._sparse_as_dense() else ""

    def _sparse_as_dense(self) -> bool:
        """`--sparse_as_dense` (an option of `horovod` alone)."""
        return isinstance(self._options, HorovodOptions) and self._options.sparse_as_dense


def _taken(features, key: str):
    """`(features without key, its value)` for a features dict holding `key`; else `(features, None)`."""
    if not isinstance(features, dict) or key not in features:
        return features, None
    features = dict(features)
    return features, features.pop(key)

