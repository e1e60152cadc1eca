"""`Strategy`: how one process of a training job takes part in it; every adapter implements it.

A strategy adapter trains any Estimator `model_fn` without changing it, and
decides everything about distribution: how many replicas there are, how the
input is sharded and batched, the session and run configuration, how the
optimizer is wrapped and the learning rate scaled, where embedding tables
live and how their rows are looked up, hooks, and which process saves,
evaluates and exports. `deepfm.runtime.trainer` drives any adapter through
this interface and nothing else: code outside this package never tests a
strategy's name or reaches into an adapter.

Its lifecycle has two explicit steps (`strategies.lifecycle`): `setup()`
checks and initializes the process and returns its `Topology`;
`prepare(plan)` takes the run's `Plan` once. A member called before the step
it needs raises `LifecycleError` naming the step.

Adapters live one per module and register themselves by name
(`strategies.strategy_names`), each with its own options dataclass::

    @registry.register(names.SINGLE)
    class SingleStrategy(strategy.Strategy):
        ...

An adapter overrides `_set_up` (returning its `Topology`) and what differs
in the members below; the defaults describe one process on one device.
"""

import dataclasses
import os
from typing import Callable, ClassVar, Dict, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from input_pipeline import pipeline
from strategies import context as context_lib
from strategies import large_batch as large_batch_lib
from strategies import lifecycle, memory_estimate, saving
from strategies import options as options_lib
from strategies import tables as tables_lib
from strategies import topology as topology_lib
from strategies.config import StrategyConfig

# The name of the collective of `agreed_max`.
AGREEMENT_NAME = "agreed_max"


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """What `prepare` agreed on (see the properties of `Strategy`)."""

    plan: lifecycle.Plan
    max_steps: Optional[int]
    start_step: int
    checkpoint_dir: str


class Strategy:
    """How one process of a training job takes part in it.

    Built by `strategies.get(config)`, then `setup()` (the process) and
    `prepare(plan)` (the run), each once. On a process whose topology's role
    is `ROLE_PS` only `serve` follows; on a training process everything
    else.

    Attributes:
      name: the registered name.
      Options: the dataclass of this adapter's own options.
      config: the `StrategyConfig` this adapter was built from.
      options: the adapter's options (`config.options`, or its defaults).
      stage: how far its lifecycle went (`lifecycle.BUILT`, `SET_UP`,
        `PREPARED`).
      evaluates_in_training_session: evaluation during training must run
        inside the one training session. So it is with asynchronous
        parameter servers: a new session of the chief would restore the
        servers from its last checkpoint and undo the other workers' updates
        since (`deepfm.runtime.early_stopping`).
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = options_lib.NoOptions
    evaluates_in_training_session: ClassVar[bool] = False
    # The count of processes `memory_estimates` spreads the model over, as a phrase of it (`"at %d rank(s)"`);
    # empty where a process holds as much whatever the job's size.
    memory_scale: ClassVar[str] = ""

    def __init__(self, config: StrategyConfig):
        options = config.options if config.options is not None else self.Options()
        if not isinstance(options, self.Options):
            raise ValueError("strategy %r takes %s options, got %s" % (
                config.name, self.Options.__name__, type(options).__name__))
        self.config = config
        self.options = options
        self.stage = lifecycle.BUILT
        self._topology: Optional[topology_lib.Topology] = None
        self._prepared: Optional[_Prepared] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        lifecycle.guard_members(cls)

    # --- the lifecycle -------------------------------------------------------------------------------
    def validate(self) -> None:
        """Checks what only the running process can check (devices, the cluster); `setup` calls it.

        Value ranges are checked by the config dataclasses themselves.

        Raises:
          ValueError: an option this process cannot honour; the message
            names the flag and says what would work.
        """
        if self.config.amp and not tf.config.list_physical_devices("GPU"):
            raise ValueError("--amp (the mixed-precision graph rewrite) needs a GPU with Tensor Cores; "
                             "none is visible to this process")

    def setup(self) -> topology_lib.Topology:
        """The first step: checks this process (`validate`), initializes it, returns its `Topology`.

        Once per process: called again, it returns the same topology.

        Raises:
          ValueError: what `validate` finds, or a process that cannot take
            its place (e.g. fewer GPUs than ranks on a host).
        """
        if self._topology is None:
            self.validate()
            self._topology = self._set_up()
            self.stage = lifecycle.SET_UP
        return self._topology

    def _set_up(self) -> topology_lib.Topology:
        """Initializes the process (environment, collective libraries); returns where it sits.

        What adapters override (calling this one for the environment).
        """
        if self.config.omp_num_threads:
            os.environ["OMP_NUM_THREADS"] = str(self.config.omp_num_threads)
        if self.config.kmp_affinity:
            os.environ["KMP_AFFINITY"] = self.config.kmp_affinity
        return topology_lib.Topology()

    @property
    def topology(self) -> topology_lib.Topology:
        """Where this process sits in its job (what `setup` returned)."""
        assert self._topology is not None  # the lifecycle guard raised LifecycleError before setup()
        return self._topology

    def prepare(self, plan: lifecycle.Plan) -> None:
        """The second step: takes the run's plan, once, agreeing on it with the processes that must agree.

        Sets `max_steps` (the plan's, else `global_max_steps` of its steps),
        `start_step` (the chief's resume step, agreed: a collective under
        Horovod, which every rank runs here) and `checkpoint_dir`. Called
        again with the same plan it does nothing. A run resumed at its
        budget has `max_steps` at `start_step`: the trainer then runs a
        session of no step on every process.

        Raises:
          ValueError: another plan than the one prepared for (build a new
            strategy for another run).
        """
        if self._prepared is not None:
            if plan == self._prepared.plan:
                return
            raise ValueError("strategy %r is prepared for %s already; build a new strategy for another plan (%s)"
                             % (self.name, self._prepared.plan, plan))
        max_steps = plan.max_steps
        if max_steps is None and plan.steps_per_worker is not None:
            max_steps = self.global_max_steps(plan.steps_per_worker)
        own_step = (plan.resume_step or 0) if self.topology.is_chief else 0
        start_step = self.agreed_max(own_step)
        self._prepared = _Prepared(plan, max_steps, start_step, self._checkpoint_dir(plan))
        self.stage = lifecycle.PREPARED

    def _checkpoint_dir(self, plan: lifecycle.Plan) -> str:
        """Where this process's Estimator checkpoints: the plan's model directory, by default."""
        return plan.model_dir

    def _run(self) -> _Prepared:
        """What `prepare` agreed on (the lifecycle guard of each property raised LifecycleError before it)."""
        assert self._prepared is not None
        return self._prepared

    @property
    def plan(self) -> lifecycle.Plan:
        """The plan `prepare` took."""
        return self._run().plan

    @property
    def max_steps(self) -> Optional[int]:
        """The global step at which training stops; None: at the end of the input."""
        return self._run().max_steps

    @property
    def start_step(self) -> int:
        """The global step training starts from: the chief's resume step, the same on every process in lockstep."""
        return self._run().start_step

    @property
    def checkpoint_dir(self) -> str:
        """Where this process's Estimator checkpoints (Horovod's other ranks: a private directory)."""
        return self._run().checkpoint_dir

    def serve(self) -> None:
        """Runs a non-training task (a parameter server) until the job ends."""
        raise NotImplementedError("strategy %r has no serving tasks" % self.name)

    # --- the input ---------------------------------------------------------------------------------
    def input_context(self) -> tf.distribute.InputContext:
        """The shard of the input this process reads and its replica count."""
        return tf.distribute.InputContext(
            num_input_pipelines=1, input_pipeline_id=0,
            num_replicas_in_sync=self.topology.replicas_in_sync)

    def batch_per_input_pipeline(self, per_replica_batch: int) -> int:
        """Examples per batch of this process's dataset.

        One replica's batch by default; the tower method feeds all its towers
        from one dataset and so reads their batches together.
        """
        return per_replica_batch

    def batches_per_step(self) -> int:
        """Batches of this process's dataset that one global step consumes.

        One by default; MirroredStrategy takes one batch per replica.
        """
        return 1

    def pipe_channel(self) -> str:
        """The Pipe-mode training channel this process reads.

        Raises:
          ValueError: no channel is configured for this worker (the one
            check that Pipe mode has its channels).
        """
        channels = self.config.train_channels
        if not channels:
            raise ValueError("--input_mode pipe needs --train_channels (one channel per worker on a host)")
        return channels[0]

    def finite_input(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Prepares a training dataset that ends by itself (Pipe mode without a step budget).

        By default training simply stops at the end of the data. Strategies
        whose processes must stop at the same step (Horovod) mark the last
        batch here and agree on stopping in their model_fn wrapper.
        """
        return dataset

    def evaluation_input_fn(self, builder: pipeline.DatasetBuilder) -> Callable[..., tf.data.Dataset]:
        """The Estimator `input_fn` of this process's evaluation of the validation rows `builder` reads.

        By default every row, on this one process. Processes that evaluate
        together (Horovod ranks) read a shard each and sum their metric
        state (`strategies.sharded_evaluation`).
        """
        return builder.input_fn()

    def global_max_steps(self, steps_per_worker: int) -> int:
        """The global step at which training stops, given each worker's steps (a pure rule).

        Synchronous strategies advance the global step once per step of every
        worker together; asynchronous parameter servers override this.
        """
        return steps_per_worker

    # --- the graph ---------------------------------------------------------------------------------
    def session_config(self) -> tf.compat.v1.ConfigProto:
        """The session configuration: thread pools and soft placement."""
        config = tf.compat.v1.ConfigProto(
            allow_soft_placement=True,
            intra_op_parallelism_threads=self.config.intra_op_threads,
            inter_op_parallelism_threads=self.config.inter_op_threads)
        if self.config.xla:
            config.graph_options.optimizer_options.global_jit_level = (
                tf.compat.v1.OptimizerOptions.ON_1)
        return config

    def run_config(self, **unexpected) -> tf.estimator.RunConfig:
        """The Estimator `RunConfig` of the plan: checkpoints, summaries, seed, session.

        Raises:
          TypeError: arguments, which it took before the plan held them.
        """
        if unexpected:
            raise TypeError("run_config() takes no arguments: put %s in the strategies.Plan given to prepare()"
                            % ", ".join(sorted(unexpected)))
        return tf.estimator.RunConfig(**self._run_config_kwargs())

    def _run_config_kwargs(self) -> dict:
        """The `RunConfig` arguments of the plan; adapters add or change some."""
        plan = self.plan
        return dict(model_dir=self.checkpoint_dir, tf_random_seed=plan.seed,
                    save_checkpoints_steps=plan.save_checkpoints_steps, save_checkpoints_secs=None,
                    keep_checkpoint_max=plan.keep_checkpoint_max, save_summary_steps=plan.log_every_n_steps,
                    log_step_count_steps=plan.log_every_n_steps, session_config=self.session_config())

    def learning_rate_factor(self) -> float:
        """Factor this strategy applies to the configured learning rate."""
        return 1.0

    def optimizer_wrappers(self) -> Tuple[context_lib.OptimizerWrapper, ...]:
        """The wrappers of the model's optimizer, innermost first (none by default)."""
        return ()

    def embedding_factory(self, mode: str) -> tables_lib.EmbeddingFactory:
        """How the model's embedding tables are created in `mode`: one variable each by default."""
        del mode
        return tables_lib.variable_tables(dedup=self.config.dedup_lookups)

    def gradient_share(self) -> float:
        """The factor that turns the gradient of one replica's loss into its share of a step's mean gradient.

        1 / replicas in sync by default: each replica's loss is its own
        batch's mean, and the replicas' gradients are averaged.
        """
        return 1.0 / self.topology.replicas_in_sync

    def model_context(self, mode: str, per_replica_batch: Optional[int] = None) -> context_lib.ModelContext:
        """The `ModelContext` of a model_fn call in `mode` (a `tf.estimator.ModeKeys` value).

        Args:
          mode: the mode.
          per_replica_batch: examples per replica and step; a large-batch
            rule needs it in TRAIN and EVAL. Default: the plan's, once
            prepared.

        Raises:
          ValueError: a large-batch rule without the per-replica batch.
        """
        if per_replica_batch is None and self.stage >= lifecycle.PREPARED:
            per_replica_batch = self.plan.per_replica_batch
        wrappers = self.optimizer_wrappers()
        if self.config.amp:
            wrappers = wrappers + (tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite,)
        return context_lib.ModelContext(
            learning_rate_factor=self.learning_rate_factor(), optimizer_wrappers=wrappers,
            embedding_factory=self.embedding_factory(mode),
            large_batch=self._large_batch_rule(mode, per_replica_batch))

    def _large_batch_rule(self, mode: str, per_replica_batch: Optional[int]
                          ) -> Optional[large_batch_lib.LargeBatchRule]:
        """`--large_batch_rule` at this strategy's global batch; None for `none`, and in PREDICT (the export)."""
        if self.config.large_batch_rule == large_batch_lib.NONE or mode == tf.estimator.ModeKeys.PREDICT:
            return None
        if per_replica_batch is None:
            raise ValueError(
                "--large_batch_rule %s needs the per-replica batch: prepare the strategy with a "
                "strategies.Plan(per_replica_batch=...) (as deepfm.runtime.trainer does)"
                % self.config.large_batch_rule)
        rule = large_batch_lib.make_rule(
            self.config.large_batch_rule, per_replica_batch * self.topology.replicas_in_sync,
            self.config.large_batch_base, self.config.large_batch_warmup_steps, self.gradient_share(),
            self.config.large_batch_warmup_examples)
        if rule is not None and mode == tf.estimator.ModeKeys.TRAIN:
            logging.info("%s", rule.describe())
        return rule

    def replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """How this process's devices run `model_fn`: once, by default; the tower method once per tower."""
        return model_fn

    def wrap_model_fn(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """Returns the model_fn this strategy trains.

        `model_fn(features, labels, mode, params)` finds its `ModelContext`
        in `params`; the returned one runs it as `replicate` says, with this
        strategy's context for its mode (`model_context(mode)`, at the
        plan's per-replica batch).
        """
        replicated = self.replicate(model_fn)

        def with_context(features, labels, mode, params):
            context = self.model_context(mode)
            spec = replicated(features, labels, mode, context.with_params(params))
            if mode == tf.estimator.ModeKeys.TRAIN and isinstance(spec, tf.estimator.EstimatorSpec):
                spec = saving.with_no_copy_saver(spec, self.plan.keep_checkpoint_max)
            return spec
        return with_context

    def train_hooks(self) -> List[tf.estimator.SessionRunHook]:
        """Hooks added to training."""
        return []

    # --- agreement -------------------------------------------------------------------------------
    def agree_max(self, value: tf.Tensor, name: str = AGREEMENT_NAME) -> tf.Tensor:
        """The maximum of the int32 `value` over the processes in lockstep (`Topology.lockstep`).

        A graph op; under Horovod a collective named `name`, which every rank
        must run at the same point. Elsewhere each process agrees with
        itself: `value`.
        """
        del name
        return value

    def agreed_max(self, value: int) -> int:
        """The maximum of `value` over the processes in lockstep, run now in a session of its own.

        A collective where the processes are in lockstep: every one of them
        calls it at the same point. Elsewhere `value`, with no graph built.
        """
        if not self.topology.lockstep:
            return value
        with tf.Graph().as_default():
            agreed = self.agree_max(tf.constant(value, tf.int32))
            with tf.compat.v1.Session(config=self.session_config()) as session:
                return int(session.run(agreed))

    # --- memory ------------------------------------------------------------------------------------
    def memory_estimates(self, state: memory_estimate.ModelState, ids_per_step: int,
                         scale: Optional[int] = None) -> Dict[str, memory_estimate.ProcessMemory]:
        """The memory each kind of process of this strategy's job holds, by role (`topology.ROLES`).

        By default one process holding the whole model. A strategy that
        spreads the model over processes overrides it, with `memory_scale`.

        Args:
          state: the model's training state (`memory_estimate.model_state`).
          ids_per_step: the ids one process looks up per step.
          scale: the count of processes `memory_scale` names to estimate at;
            None: this job's (which may need `setup()`).
        """
        del ids_per_step, scale
        return {topology_lib.ROLE_WORKER: memory_estimate.whole_model(state)}

    # --- the end -----------------------------------------------------------------------------------
    def finish_training(self) -> None:
        """Called once training has ended (not on a stop by a signal), before evaluation and export."""

    def describe(self) -> str:
        """A one-line description of the topology, for the logs."""
        topology = self.topology
        return "%s: %d replica(s) in sync, %d worker(s)" % (self.name, topology.replicas_in_sync, topology.workers)


lifecycle.guard_members(Strategy)
