"""`StrategyConfig`: which strategy a process runs, and the options every adapter reads.

An adapter's own options are a dataclass of its module (`Strategy.Options`,
held in `StrategyConfig.options`); `strategies.registry.make_config` sorts
flat command-line values into the two. The fields made with
`cli.config_flags.field` are flags of `deepfm.train`; `name` is `--strategy`.
"""

import dataclasses
from typing import Optional, Tuple

from cli import config_flags
from strategies import large_batch as large_batch_lib
from strategies import options as options_lib
from strategies import strategy_names as names_lib

DEVICE_TYPES = ("auto", "cpu", "gpu")


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
    """The strategy of one process, and the options every adapter reads.

    Attributes:
      name: the registered strategy name (`strategies.strategy_names`).
      options: the adapter's own options: an instance of its `Strategy.Options`
        (e.g. `strategies.horovod.HorovodOptions`); None for its defaults.
      device_type: `cpu`, `gpu`, or `auto` (GPUs if any are visible).
      intra_op_threads: `ConfigProto.intra_op_parallelism_threads` (0:
        TF's choice).
      inter_op_threads: `ConfigProto.inter_op_parallelism_threads` (0:
        TF's choice).
      omp_num_threads: `OMP_NUM_THREADS` for oneDNN (0: leave unset).
      kmp_affinity: `KMP_AFFINITY` for oneDNN ("" leaves it unset).
      amp: mixed-precision graph rewrite of the optimizer (GPUs only).
      xla: XLA JIT compilation of the graph.
      dedup_lookups: look up each distinct id of a batch once (`tf.unique`,
        gather, scatter back), so each embedding row moves once per step and
        duplicate gradient rows are summed before any exchange. Off by
        default: on one core the extra ops cost more step time than they
        save (docs/levers.md).
      train_channels: Pipe-mode training channels, one per worker on a host,
        assigned to workers by local rank in this order; empty in File mode.
        The input mode is the input pipeline's one setting
        (`input_pipeline.pipeline.PipelineConfig.input_mode`): a strategy
        tells Pipe mode by its channels (`pipe_mode`).
      s3_sharded: the input was split across hosts by S3 (ShardedByS3Key):
        do not shard it again by host.
      large_batch_rule: how training is rescaled for the global batch
        (`strategies.large_batch.RULES`): `none`, or `cowclip`.
      large_batch_base: the batch the hyperparameters are tuned at; the
        rule's ratio is the global batch over it.
      large_batch_warmup_steps: global steps of the rule's warm-up of the
        dense learning rate (0: none), or None: the steps holding
        `large_batch_warmup_examples`.
      large_batch_warmup_examples: examples of that warm-up, the same data
        at any global batch; None: `large_batch.DEFAULT_WARMUP_EXAMPLES`
        unless `large_batch_warmup_steps` is given (not both).
    """

    name: str = config_flags.field(names_lib.SINGLE, "Distribution strategy.", flag="strategy",
                                   choices=sorted(names_lib.ALL))
    options: Optional[object] = None
    device_type: str = config_flags.field("auto", "Devices to train on.", choices=DEVICE_TYPES)
    intra_op_threads: int = config_flags.field(0, "intra_op_parallelism_threads (0: TensorFlow's choice).")
    inter_op_threads: int = config_flags.field(0, "inter_op_parallelism_threads (0: TensorFlow's choice).")
    omp_num_threads: int = config_flags.field(0, "OMP_NUM_THREADS for oneDNN (0: unset).")
    kmp_affinity: str = config_flags.field("", "KMP_AFFINITY for oneDNN ('' : unset).")
    amp: bool = config_flags.field(False, "Mixed-precision graph rewrite (GPUs).")
    xla: bool = config_flags.field(False, "XLA JIT compilation.")
    dedup_lookups: bool = config_flags.field(
        False, "Look up each distinct id of a batch once; duplicate gradient rows are summed before any exchange.")
    train_channels: Tuple[str, ...] = config_flags.field(
        (), "Pipe mode: training channels, one per worker on a host, assigned by local rank in this order.")
    s3_sharded: bool = config_flags.field(False, "Input files were split across hosts by ShardedByS3Key.")
    large_batch_rule: str = config_flags.field(
        large_batch_lib.NONE, "Rescale training for the global batch: none, or cowclip (dense learning rate x "
        "sqrt(k), embedding L2 x k, per-id embedding gradient clipping, dense warm-up; k = global batch / "
        "--large_batch_base). See docs/large_batch.md.", choices=large_batch_lib.RULES)
    large_batch_base: int = config_flags.field(
        large_batch_lib.DEFAULT_BASE_BATCH, "The batch the hyperparameters are tuned at (--large_batch_rule).")
    large_batch_warmup_steps: Optional[int] = config_flags.field(
        None, "Global steps of --large_batch_rule's dense warm-up instead of --large_batch_warmup_examples "
        "(0: none).")
    large_batch_warmup_examples: Optional[int] = config_flags.field(
        None, "Examples of --large_batch_rule's dense learning-rate warm-up, the same data at any number of "
        "replicas (0: none; unset: %d unless --large_batch_warmup_steps is given)."
        % large_batch_lib.DEFAULT_WARMUP_EXAMPLES)

    def __post_init__(self):
        options_lib.check_choice("device_type", self.device_type, DEVICE_TYPES)
        large_batch_lib.check_options(self.large_batch_rule, self.large_batch_base, self.large_batch_warmup_steps,
                                      self.large_batch_warmup_examples)
        for flag in ("intra_op_threads", "inter_op_threads", "omp_num_threads"):
            options_lib.check_at_least(flag, getattr(self, flag), 0)
        object.__setattr__(self, "train_channels", tuple(self.train_channels))
        if len(set(self.train_channels)) != len(self.train_channels):
            raise ValueError("--train_channels %r lists a channel twice" % ",".join(self.train_channels))

    @property
    def pipe_mode(self) -> bool:
        """Whether the workers read Pipe-mode channels: `train_channels` is set."""
        return bool(self.train_channels)
