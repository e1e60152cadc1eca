"""The strategy interface and its registry.

A strategy adapter wraps the DeepFM `model_fn` without changing it, and
decides everything about distribution: how many replicas there are, how the
input is sharded and batched, the session and run configuration, optimizer
wrapping, learning-rate scaling, hooks, and which process saves, evaluates
and exports. `deepfm.runtime.trainer` drives any adapter through this interface.

Adapters live one per module and register themselves by name::

    @base.register("single")
    class SingleStrategy(base.Strategy):
        ...

`get(config)` builds the adapter named by `config.name`.
"""

import abc
import dataclasses
import importlib
import os
from typing import Callable, ClassVar, Dict, List, Optional, Type

import tensorflow as tf

CROSS_DEVICE_OPS = ("reduction_to_one_device", "hierarchical_copy", "nccl")
LR_SCALINGS = ("none", "linear", "sqrt", "capped")
HVD_COMPRESSIONS = ("none", "fp16")
DEVICE_TYPES = ("auto", "cpu", "gpu")
DEFAULT_LR_SCALE_CAP = 1.5
# The best-practice text: raise the learning rate with the workers, but not by their number
# (0.001 to 0.0015 even with four or more). Measured: at 2 ranks it keeps Horovod's AUC within
# 0.005 of one process's after the same examples, unscaled it does not (benchmarks/results/scale_out.md).
DEFAULT_LR_SCALING = "capped"

ModelFn = Callable[..., tf.estimator.EstimatorSpec]
# The adapter modules of this package; each registers itself when imported.
ADAPTER_MODULES = ("single", "tower", "mirrored", "ps", "horovod", "auto")


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
    """Options of every strategy; each adapter reads the ones it needs.

    Attributes:
      name: registered strategy name.
      num_devices: towers or replicas on this host (tower, mirrored); 0 means
        every device of `device_type` (on CPU: every core but `/cpu:0`, which
        does the reduction).
      device_type: `cpu`, `gpu`, or `auto` (GPUs if any are visible).
      cross_device_ops: MirroredStrategy's reduction (`CROSS_DEVICE_OPS`).
      lr_scaling: Horovod learning-rate policy (`LR_SCALINGS`): `none`,
        `linear` (x size), `sqrt` (x sqrt(size)), `capped`
        (x min(size, lr_scale_cap); the default).
      lr_scale_cap: the largest factor of the `capped` policy.
      sparse_as_dense: Horovod allreduces embedding gradients densely.
      hvd_compression: Horovod's compression of dense allreduces
        (`HVD_COMPRESSIONS`); Horovod never compresses the allgathers of
        sparse gradients.
      hvd_fusion_threshold_bytes: `HOROVOD_FUSION_THRESHOLD` (-1: Horovod's
        default).
      hvd_cycle_time_ms: `HOROVOD_CYCLE_TIME` in ms (-1: Horovod's default).
      ps_lr_factor: parameter server: factor on the learning rate for
        asynchronous updates (< 1 lowers it).
      ps_towers: parameter server: towers per worker (0 for none).
      intra_op_threads: `ConfigProto.intra_op_parallelism_threads` (0: TF's
        choice).
      inter_op_threads: `ConfigProto.inter_op_parallelism_threads` (0: TF's
        choice).
      omp_num_threads: `OMP_NUM_THREADS` for oneDNN (0: leave unset).
      kmp_affinity: `KMP_AFFINITY` for oneDNN ("" leaves it unset).
      amp: mixed-precision graph rewrite of the optimizer (GPUs only).
      xla: XLA JIT compilation of the graph.
      train_channels: Pipe-mode training channels, one per worker on a host,
        assigned to workers by local rank in this order; empty in File mode.
        The input mode is the input pipeline's one setting
        (`input_pipeline.pipeline.PipelineConfig.input_mode`): a strategy
        carries no copy of it, and one that reads differently in Pipe mode
        tells Pipe mode by `pipe_mode`, that is by its channels.
      s3_sharded: the input was split across hosts by S3 (ShardedByS3Key):
        do not shard it again by host.
    """

    name: str = "single"
    num_devices: int = 0
    device_type: str = "auto"
    cross_device_ops: str = "reduction_to_one_device"
    lr_scaling: str = DEFAULT_LR_SCALING
    lr_scale_cap: float = DEFAULT_LR_SCALE_CAP
    sparse_as_dense: bool = False
    hvd_compression: str = "none"
    hvd_fusion_threshold_bytes: int = -1
    hvd_cycle_time_ms: float = -1
    ps_lr_factor: float = 1.0
    ps_towers: int = 0
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    omp_num_threads: int = 0
    kmp_affinity: str = ""
    amp: bool = False
    xla: bool = False
    train_channels: tuple = ()
    s3_sharded: bool = False

    @property
    def pipe_mode(self) -> bool:
        """Whether the workers read Pipe-mode channels: `train_channels` is set."""
        return bool(self.train_channels)


class Strategy(abc.ABC):
    """How one process of a training job takes part in it.

    The defaults describe a single process on one device; adapters override
    what differs. Methods are called in this order by `deepfm.runtime.trainer`:
    `validate`, `setup`, then (on processes whose `role` is `worker`) the
    rest; a `ps` process calls `serve` only.

    Attributes:
      name: the registered name.
      config: the `StrategyConfig` this adapter was built from.
    """

    name: ClassVar[str] = ""

    def __init__(self, config: StrategyConfig):
        self.config = config

    # --- set-up -----------------------------------------------------------
    def validate(self) -> None:
        """Checks the configuration before anything starts.

        Raises:
          ValueError: an option is invalid for this strategy; the message
            names the flag and the allowed values.
        """
        check_choice("cross_device_ops", self.config.cross_device_ops, CROSS_DEVICE_OPS)
        check_choice("lr_scaling", self.config.lr_scaling, LR_SCALINGS)
        check_choice("device_type", self.config.device_type, DEVICE_TYPES)
        for flag in ("num_devices", "intra_op_threads", "inter_op_threads", "omp_num_threads", "ps_towers"):
            if getattr(self.config, flag) < 0:
                raise ValueError("--%s must be >= 0, got %r" % (flag, getattr(self.config, flag)))
        if self.config.amp and not tf.config.list_physical_devices("GPU"):
            raise ValueError("--amp (the mixed-precision graph rewrite) needs a GPU with Tensor Cores; "
                             "none is visible to this process")

    def setup(self) -> None:
        """Process-level initialization (environment, collective libraries)."""
        if self.config.omp_num_threads:
            os.environ["OMP_NUM_THREADS"] = str(self.config.omp_num_threads)
        if self.config.kmp_affinity:
            os.environ["KMP_AFFINITY"] = self.config.kmp_affinity

    @property
    def role(self) -> str:
        """`worker` for processes that train, `ps` for parameter servers."""
        return "worker"

    def serve(self) -> None:
        """Runs a non-training task (a parameter server) until the job ends."""
        raise NotImplementedError("strategy %r has no serving tasks" % self.name)

    # --- topology ----------------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas whose gradients are combined into one update."""
        return 1

    @property
    def num_workers(self) -> int:
        """Training processes in the whole job."""
        return 1

    @property
    def is_chief(self) -> bool:
        """Whether this process saves checkpoints, writes metrics and exports."""
        return True

    @property
    def evaluates(self) -> bool:
        """Whether this process runs evaluation."""
        return self.is_chief

    def input_context(self) -> tf.distribute.InputContext:
        """The shard of the input this process reads and its replica count."""
        return tf.distribute.InputContext(
            num_input_pipelines=1, input_pipeline_id=0,
            num_replicas_in_sync=self.num_replicas_in_sync)

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

    # --- the graph --------------------------------------------------------
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

    def run_config(self, **kwargs) -> tf.estimator.RunConfig:
        """The Estimator `RunConfig`; `kwargs` are passed through."""
        return tf.estimator.RunConfig(session_config=self.session_config(), **kwargs)

    def global_max_steps(self, steps_per_worker: int) -> int:
        """The global step at which training stops, given each worker's steps.

        Synchronous strategies advance the global step once per step of every
        worker together; asynchronous parameter servers override this.
        """
        return steps_per_worker

    def learning_rate_factor(self) -> float:
        """Factor this strategy applies to the configured learning rate."""
        return 1.0

    def model_params(self, params: Dict) -> Dict:
        """Adds strategy options to the model_fn's `params` (a new dict).

        The model_fn reads `optimizer_wrapper` (a callable taking and
        returning a `tf.compat.v1.train.Optimizer`) and
        `embedding_partitioner` (a variable partitioner for the embedding
        tables) when present.
        """
        params = dict(params)
        wrappers = [w for w in (self.optimizer_wrapper(), _amp_wrapper(self.config.amp)) if w]
        if wrappers:
            params["optimizer_wrapper"] = _compose(wrappers)
        return params

    def optimizer_wrapper(self) -> Optional[Callable]:
        """A callable wrapping the model's optimizer, or None."""
        return None

    def wrap_model_fn(self, model_fn: ModelFn) -> ModelFn:
        """Returns the model_fn this strategy trains (the same by default)."""
        return model_fn

    def finite_input(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Prepares a training dataset that ends by itself (Pipe mode without a step budget).

        By default training simply stops at the end of the data. Strategies
        whose processes must stop at the same step (Horovod) mark the last
        batch here and agree on stopping in their model_fn wrapper.
        """
        return dataset

    def train_hooks(self) -> List[tf.estimator.SessionRunHook]:
        """Hooks added to training."""
        return []

    def finish_training(self) -> None:
        """Called once training has ended (not on a stop by a signal), before evaluation and export."""

    def describe(self) -> str:
        """A one-line description of the topology, for the logs."""
        return "%s: %d replica(s) in sync, %d worker(s)" % (
            self.name, self.num_replicas_in_sync, self.num_workers)


def _compose(wrappers):
    def wrap(optimizer):
        for wrapper in wrappers:
            optimizer = wrapper(optimizer)
        return optimizer
    return wrap


def _amp_wrapper(enabled: bool) -> Optional[Callable]:
    if not enabled:
        return None
    return tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite


def check_choice(flag: str, value, allowed) -> None:
    """Raises ValueError naming `--flag`, the bad value and the allowed ones."""
    if value not in allowed:
        raise ValueError("--%s must be one of %s, got %r" % (flag, ", ".join(map(str, allowed)), value))


_REGISTRY: Dict[str, Type[Strategy]] = {}


def register(name: str):
    """Class decorator registering a `Strategy` subclass under `name`."""
    def decorate(cls):
        if name in _REGISTRY:
            raise ValueError("strategy %r is registered twice" % name)
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return decorate


def _load_adapters() -> None:
    for module in ADAPTER_MODULES:
        importlib.import_module("strategies." + module)


def names() -> List[str]:
    """The registered strategy names, sorted."""
    _load_adapters()
    return sorted(_REGISTRY)


def get(config: StrategyConfig) -> Strategy:
    """Builds the adapter named by `config.name`.

    Raises:
      ValueError: no strategy of that name; the message lists the valid ones.
    """
    _load_adapters()
    if config.name not in _REGISTRY:
        raise ValueError("--strategy must be one of %s, got %r" % (", ".join(names()), config.name))
    return _REGISTRY[config.name](config)
