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
`prepare(plan)` takes the run's `Plan` once and returns nothing: its
`RunSettings` are read from `run`. A member called before the step it needs
raises `LifecycleError` naming the step.

What a caller reads is grouped: `topology` (where the process sits),
`input_plan()` (how it reads its input: `strategies.input_plan`), `run`
(what the run agreed on and its Estimator settings:
`strategies.run_settings`), `model_context(mode)` (what a model_fn gets),
`memory(...)` (what its processes hold: `strategies.memory_share`).

Adapters live one per module and register themselves by name
(`strategies.strategy_names`), each with its own options dataclass::

    @registry.register(names.SINGLE)
    class SingleStrategy(strategy.Strategy):
        ...

An adapter must define the abstract core: `_set_up` (where the process
sits), `_embedding_factory` (where its tables live), `_replicate` (how its
devices run the model_fn) and `describe`. The other `_` members have
defaults that describe one process on one device; an adapter overrides what
differs.
"""

import abc
import functools
import os
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple, overload

import tensorflow as tf
from absl import logging

from strategies import context as context_lib
from strategies import input_plan as input_plan_lib
from strategies import large_batch as large_batch_lib
from strategies import lifecycle, memory_estimate, memory_share, run_settings, saving
from strategies import options as options_lib
from strategies import tables as tables_lib
from strategies import topology as topology_lib
from strategies.config import StrategyConfig

# The name of the collective of `agree_max` on values agreed now.
AGREEMENT_NAME = "agreed_max"


class Strategy(abc.ABC):
    """How one process of a training job takes part in it.

    Built by `strategies.get(config)`, then `setup()` (the process) and
    `prepare(plan)` (the run), each once. On a process whose topology's role
    is `ROLE_PS` only `serve` follows; on a training process everything
    else.

    Attributes:
      name: the registered name.
      Options: the dataclass of this adapter's own options.
      config: the `StrategyConfig` this adapter was built from.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = options_lib.NoOptions
    # `MemoryShare.scale`: the count of processes `_memory_estimates` spreads the model over, as a phrase of it
    # (`"at %d rank(s)"`); empty where a process holds as much whatever the job's size.
    _memory_scale: ClassVar[str] = ""

    def __init__(self, config: StrategyConfig):
        options = config.options if config.options is not None else self.Options()
        if not isinstance(options, self.Options):
            raise ValueError("strategy %r takes %s options, got %s" % (
                config.name, self.Options.__name__, type(options).__name__))
        self.config = config
        # The adapter's options (`config.options`, or its defaults).
        self._options = options
        # How far the lifecycle went (`lifecycle.BUILT`, `SET_UP`, `PREPARED`); `strategies.lifecycle` reads it.
        self._stage = lifecycle.BUILT
        self._topology: Optional[topology_lib.Topology] = None
        self._prepared: Optional[run_settings.RunSettings] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        lifecycle.guard_members(cls)

    # --- the lifecycle -------------------------------------------------------------------------------
    def setup(self) -> topology_lib.Topology:
        """The first step: checks this process (`_validate`), initializes it, returns its `Topology`.

        Sets `--omp_num_threads` and `--kmp_affinity` in the environment
        first, then the adapter initializes the process (`_set_up`). Once per
        process: called again, it returns the same topology.

        Raises:
          ValueError: what `_validate` finds, or a process that cannot take
            its place (e.g. fewer GPUs than ranks on a host).
        """
        if self._topology is None:
            self._validate()
            if self.config.omp_num_threads:
                os.environ["OMP_NUM_THREADS"] = str(self.config.omp_num_threads)
            if self.config.kmp_affinity:
                os.environ["KMP_AFFINITY"] = self.config.kmp_affinity
            self._topology = self._set_up()
            self._stage = lifecycle.SET_UP
        return self._topology

    def _validate(self) -> None:
        """Checks what only the running process can check (devices, the cluster); `setup` calls it.

        Value ranges are checked by the config dataclasses themselves.

        Raises:
          ValueError: an option this process cannot honour; the message
            names the flag and says what would work.
        """
        if self.config.amp and not tf.config.list_physical_devices("GPU"):
            raise ValueError("--amp (the mixed-precision graph rewrite) needs a GPU with Tensor Cores; "
                             "none is visible to this process")

    @abc.abstractmethod
    def _set_up(self) -> topology_lib.Topology:
        """Initializes the process (collective libraries, devices); returns where it sits."""

    @property
    def topology(self) -> topology_lib.Topology:
        """Where this process sits in its job (what `setup` returned)."""
        assert self._topology is not None  # the lifecycle guard raised LifecycleError before setup()
        return self._topology

    def prepare(self, plan: lifecycle.Plan) -> None:
        """The second step: takes the run's plan, once, agreeing on it with the processes that must agree.

        Builds the `RunSettings` that `run` reads: `max_steps` (the plan's,
        else `InputPlan.global_max_steps` of its steps), `start_step` (the
        chief's resume step, agreed: a collective under Horovod, which every
        rank runs here), `checkpoint_dir`, the Estimator's `RunConfig` and
        the training hooks. Called again with the same plan it does nothing.
        A run resumed at its budget has `max_steps` at `start_step`: the
        trainer then runs a session of no step on every process.

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
            max_steps = self.input_plan().global_max_steps(plan.steps_per_worker)
        own_step = (plan.resume_step or 0) if self.topology.is_chief else 0
        start_step = self.agree_max(own_step)
        checkpoint_dir = self._checkpoint_dir(plan)
        self._prepared = run_settings.RunSettings(
            plan=plan, max_steps=max_steps, start_step=start_step, checkpoint_dir=checkpoint_dir,
            run_config=tf.estimator.RunConfig(**self._run_config_kwargs(plan, checkpoint_dir)),
            train_hooks=tuple(self._train_hooks()))
        self._stage = lifecycle.PREPARED

    def _checkpoint_dir(self, plan: lifecycle.Plan) -> str:
        """Where this process's Estimator checkpoints: the plan's model directory, by default."""
        return plan.model_dir

    @property
    def run(self) -> run_settings.RunSettings:
        """What `prepare` agreed on, and the Estimator settings of the plan."""
        assert self._prepared is not None  # the lifecycle guard raised LifecycleError before prepare()
        return self._prepared

    def serve(self) -> None:
        """Runs a non-training task (a parameter server) until the job ends."""
        raise NotImplementedError("strategy %r has no serving tasks" % self.name)

    # --- the input ---------------------------------------------------------------------------------
    def input_plan(self) -> input_plan_lib.InputPlan:
        """How this process reads its input: its shard, batches, Pipe channel, evaluation input.

        By default every row on one process, one replica batch per dataset
        batch and per step, and the first `--train_channels` channel.
        """
        channels = self.config.train_channels
        return input_plan_lib.InputPlan(
            context=tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                               num_replicas_in_sync=self.topology.replicas_in_sync),
            channel=channels[0] if channels else None)

    # --- the graph ---------------------------------------------------------------------------------
    def _session_config(self) -> tf.compat.v1.ConfigProto:
        """The session configuration: thread pools and soft placement."""
        config = tf.compat.v1.ConfigProto(
            allow_soft_placement=True,
            intra_op_parallelism_threads=self.config.intra_op_threads,
            inter_op_parallelism_threads=self.config.inter_op_threads)
        if self.config.xla:
            config.graph_options.optimizer_options.global_jit_level = (
                tf.compat.v1.OptimizerOptions.ON_1)
        return config

    def _run_config_kwargs(self, plan: lifecycle.Plan, checkpoint_dir: str) -> dict:
        """The `RunConfig` arguments of `plan`, checkpointing to `checkpoint_dir`; adapters add or change some."""
        return dict(model_dir=checkpoint_dir, tf_random_seed=plan.seed,
                    save_checkpoints_steps=plan.save_checkpoints_steps, save_checkpoints_secs=None,
                    keep_checkpoint_max=plan.keep_checkpoint_max, save_summary_steps=plan.log_every_n_steps,
                    log_step_count_steps=plan.log_every_n_steps, session_config=self._session_config())

    def _train_hooks(self) -> List[tf.estimator.SessionRunHook]:
        """The hooks this strategy adds to training (`RunSettings.train_hooks`): none by default."""
        return []

    def _learning_rate_factor(self) -> float:
        """Factor this strategy applies to the configured learning rate."""
        return 1.0

    def _optimizer_wrappers(self) -> Tuple[context_lib.OptimizerWrapper, ...]:
        """The wrappers of the model's optimizer, innermost first (none by default)."""
        return ()

    @abc.abstractmethod
    def _embedding_factory(self, mode: str) -> tables_lib.EmbeddingFactory:
        """How the model's embedding tables are created in `mode` (`tables.variable_tables`: one variable each)."""

    def _gradient_share(self) -> float:
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
        if per_replica_batch is None and self._prepared is not None:
            per_replica_batch = self._prepared.plan.per_replica_batch
        wrappers = self._optimizer_wrappers()
        if self.config.amp:
            wrappers = wrappers + (tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite,)
        return context_lib.ModelContext(
            learning_rate_factor=self._learning_rate_factor(), optimizer_wrappers=wrappers,
            embedding_factory=self._embedding_factory(mode),
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
            self.config.large_batch_base, self.config.large_batch_warmup_steps, self._gradient_share(),
            self.config.large_batch_warmup_examples)
        if rule is not None and mode == tf.estimator.ModeKeys.TRAIN:
            logging.info("%s", rule.describe())
        return rule

    @abc.abstractmethod
    def _replicate(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """How this process's devices run `model_fn`: once (`model_fn` itself), or the tower method once per tower."""

    def wrap_model_fn(self, model_fn: context_lib.ModelFn) -> context_lib.ModelFn:
        """Returns the model_fn this strategy trains.

        `model_fn(features, labels, mode, params)` finds its `ModelContext`
        in `params`; the returned one runs it as `_replicate` says, with this
        strategy's context for its mode (`model_context(mode)`, at the
        plan's per-replica batch).
        """
        replicated = self._replicate(model_fn)
        keep_checkpoint_max = self.run.plan.keep_checkpoint_max

        def with_context(features, labels, mode, params):
            context = self.model_context(mode)
            spec = replicated(features, labels, mode, context.with_params(params))
            if mode == tf.estimator.ModeKeys.TRAIN and isinstance(spec, tf.estimator.EstimatorSpec):
                spec = saving.with_no_copy_saver(spec, keep_checkpoint_max)
            return spec
        return with_context

    # --- agreement -------------------------------------------------------------------------------
    @overload
    def agree_max(self, value: int, name: str = AGREEMENT_NAME) -> int:
        ...

    @overload
    def agree_max(self, value: Sequence[int], name: str = AGREEMENT_NAME) -> Tuple[int, ...]:
        ...

    @overload
    def agree_max(self, value: tf.Tensor, name: str = AGREEMENT_NAME) -> tf.Tensor:
        ...

    def agree_max(self, value, name=AGREEMENT_NAME):
        """The maximum of `value` over the processes in lockstep (`Topology.lockstep`).

        Under Horovod a collective named `name`, which every rank must run at
        the same point; elsewhere each process agrees with itself.

        Args:
          value: an int32 tensor: the agreement is a graph op, returned (a
            training step fetches one of a stop flag:
            `deepfm.runtime.interrupt`). An int, or a sequence of ints each
            agreed on: agreed now, in a session of its own (no graph is built
            where the processes are not in lockstep), and returned as an int
            or a tuple of ints.
          name: the collective's name.
        """
        if isinstance(value, (tf.Tensor, tf.Variable)):
            return self._agree_max_op(value, name)
        if not self.topology.lockstep:
            return value if isinstance(value, int) else tuple(value)
        with tf.Graph().as_default():
            agreed = self._agree_max_op(tf.constant(value, tf.int32), name)
            with tf.compat.v1.Session(config=self._session_config()) as session:
                result = session.run(agreed)
        return int(result) if isinstance(value, int) else tuple(int(v) for v in result)

    def _agree_max_op(self, value: tf.Tensor, name: str) -> tf.Tensor:
        """The graph op of `agree_max` on the int32 `value`: `value` itself where the processes are not in lockstep."""
        del name
        return value

    # --- memory ------------------------------------------------------------------------------------
    def memory(self, state: memory_estimate.ModelState, ids_per_step: int) -> memory_share.MemoryShare:
        """The memory each kind of process of this strategy's job holds of the model, and how it spreads.

        Args:
          state: the model's training state (`memory_estimate.model_state`).
          ids_per_step: the ids one process looks up per step.
        """
        return memory_share.MemoryShare(self._memory_scale,
                                        functools.partial(self._memory_estimates, state, ids_per_step))

    def _memory_estimates(self, state: memory_estimate.ModelState, ids_per_step: int,
                          scale: Optional[int] = None) -> Dict[str, memory_estimate.ProcessMemory]:
        """The memory each kind of process holds, by role (`topology.ROLES`), at `scale` processes.

        By default one process holding the whole model. A strategy that
        spreads the model over processes overrides it, with `_memory_scale`.

        Args:
          state: the model's training state.
          ids_per_step: the ids one process looks up per step.
          scale: the count of processes `_memory_scale` names to estimate
            at; None: this job's (which may need `setup()`).
        """
        del ids_per_step, scale
        return {topology_lib.ROLE_WORKER: memory_estimate.whole_model(state)}

    # --- the end -----------------------------------------------------------------------------------
    def finish_training(self) -> None:
        """Called once training has ended (not on a stop by a signal), before evaluation and export.

        Nothing by default; a parameter-server worker waits there until no
        other process needs its host's parameter server.
        """
        return None

    @abc.abstractmethod
    def describe(self) -> str:
        """A one-line description of this process's part of the job, for the logs."""


def describe_topology(strategy: Strategy) -> str:
    """`describe` of a strategy that is its topology alone: `"single: 1 replica(s) in sync, 1 worker(s)"`."""
    topology = strategy.topology
    return "%s: %d replica(s) in sync, %d worker(s)" % (strategy.name, topology.replicas_in_sync, topology.workers)


def plain_tables(strategy: Strategy) -> tables_lib.EmbeddingFactory:
    """One variable per table, deduplicating the lookups' ids where `--dedup_lookups` says."""
    return tables_lib.variable_tables(dedup=strategy.config.dedup_lookups)


lifecycle.guard_members(Strategy)
