"""Typed configuration of a training job.

The entry point (`deepfm.train`) parses its flags once into these dataclasses;
library code receives them and never reads flags. A field made with
`cli.config_flags.field` is a flag of `deepfm.train`: its metadata holds the
flag's help text (`deepfm.job_config` gathers every section's flags).
"""

import dataclasses
from typing import Optional, Tuple

from cli import config_flags
from input_pipeline import check_record, schema

OPTIMIZERS = ("adam", "lazy_adam", "adagrad", "momentum", "ftrl", "sgd")
# The built-in models (`deepfm.models`).
MODELS = ("deepfm", "dcn")
DEEPFM, DCN = MODELS

# Defaults of the Amazon SageMaker DeepFM sample's notebook.
DEFAULT_EMBEDDING_SIZE = 32
DEFAULT_DEEP_LAYERS = (128, 64, 32)
DEFAULT_BATCH_SIZE = 1024
DEFAULT_LEARNING_RATE = 0.0005
DEFAULT_L2_REG = 0.0001
DEFAULT_DROPOUT = (0.5, 0.5, 0.5)
DEFAULT_MOMENTUM = 0.9
DEFAULT_CROSS_LAYERS = 3


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of a CTR model (DeepFM, DCN, or a user's own model_fn).

    Attributes:
      model: the built-in model (`MODELS`) the command line trains; a
        model_fn passed to the API reads what it needs from this config.
      feature_size: number of distinct feature ids; every id must be below it.
      field_size: ids per example.
      embedding_size: size k of each feature's FM factor / field embedding.
      deep_layers: widths of the hidden layers of the deep part.
      dropout: per hidden layer, the *drop rate* (fraction of units zeroed in
        training); 0 keeps every unit. (The SageMaker sample's `dropout` flag
        holds keep-probabilities 0.5,0.5,0.5, which is the same as drop rates
        0.5,0.5,0.5.)
      batch_norm: batch normalization after each hidden layer.
      batch_norm_decay: moving-average decay of batch normalization.
      l2_reg: L2 weight on the FM first-order weights and factors.
      learning_rate: the optimizer's learning rate (before any scaling a
        strategy applies).
      optimizer: one of `OPTIMIZERS`. The default `lazy_adam` is Adam that
        updates only the embedding rows a batch touches: 1.8x the throughput
        of `adam` at the same AUC (benchmarks/results/strategies.md).
      momentum: momentum of the `momentum` optimizer.
      check_ids: check at run time that every id is in [0, feature_size)
        and fail with the offending id otherwise.
      cross_layers: DCN's cross layers.
    """

    feature_size: int = dataclasses.field(metadata=config_flags.metadata(
        "Distinct feature ids; default: from the dataset metadata."))
    field_size: int = config_flags.field(
        schema.FIELD_SIZE, "Ids per example; default: from the dataset metadata, else 39.", flag_default=None)
    embedding_size: int = config_flags.field(DEFAULT_EMBEDDING_SIZE, "Embedding (FM factor) size.")
    deep_layers: Tuple[int, ...] = config_flags.field(DEFAULT_DEEP_LAYERS, "Deep part layer widths.")
    dropout: Tuple[float, ...] = config_flags.field(
        DEFAULT_DROPOUT, "Drop rate per deep layer (fraction of units zeroed; 0 keeps all).")
    batch_norm: bool = config_flags.field(False, "Batch normalization in the deep part.")
    batch_norm_decay: float = 0.9
    l2_reg: float = config_flags.field(DEFAULT_L2_REG, "L2 weight on the looked-up embedding rows.")
    learning_rate: float = config_flags.field(DEFAULT_LEARNING_RATE, "Learning rate before scaling.")
    optimizer: str = config_flags.field(
        "lazy_adam", "Optimizer; lazy_adam is Adam updating only the embedding rows a batch touches.",
        choices=OPTIMIZERS)
    momentum: float = DEFAULT_MOMENTUM
    check_ids: bool = config_flags.field(True, "Check at run time that every id is in [0, feature_size).")
    model: str = config_flags.field(DEEPFM, "The model to train.", choices=MODELS)
    cross_layers: int = config_flags.field(DEFAULT_CROSS_LAYERS, "DCN: cross layers.")

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError("model must be one of %s, got %r" % (", ".join(MODELS), self.model))
        if self.cross_layers < 1:
            raise ValueError("cross_layers must be >= 1, got %r" % self.cross_layers)
        if self.feature_size < 1:
            raise ValueError("feature_size must be >= 1, got %r" % self.feature_size)
        if self.field_size < 1:
            raise ValueError("field_size must be >= 1, got %r" % self.field_size)
        if self.embedding_size < 1:
            raise ValueError("embedding_size must be >= 1, got %r" % self.embedding_size)
        if any(width < 1 for width in self.deep_layers):
            raise ValueError("deep_layers must be positive widths, got %r" % (self.deep_layers,))
        if len(self.dropout) != len(self.deep_layers):
            raise ValueError(
                "dropout needs one drop rate per deep layer: %d layers %r, %d rates %r"
                % (len(self.deep_layers), self.deep_layers, len(self.dropout), self.dropout))
        if any(not 0.0 <= rate < 1.0 for rate in self.dropout):
            raise ValueError("dropout rates must be in [0, 1), got %r" % (self.dropout,))
        if self.optimizer not in OPTIMIZERS:
            raise ValueError("optimizer must be one of %s, got %r" % (", ".join(OPTIMIZERS), self.optimizer))
        if self.learning_rate <= 0:
            raise ValueError("learning_rate must be > 0, got %r" % self.learning_rate)
        if self.l2_reg < 0:
            raise ValueError("l2_reg must be >= 0, got %r" % self.l2_reg)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """What to train on, for how long, and where results go.

    Attributes:
      model_dir: checkpoints and event files; an existing one is resumed.
      export_dir: where the SavedModel goes (a timestamped subdirectory);
        None for no export.
      train_files: training files, resolved from the `--train_data` spec.
      val_files: validation files; empty for no evaluation (unless
        `val_channel` is set).
      val_channel: Pipe mode: the channel the validation data arrives on;
        only the chief reads it (a FIFO serves one reader).
      batch_size: examples per replica and step (the global batch is this
        times the strategy's replicas in sync).
      num_epochs: passes over the training data.
      max_steps: if set, each worker stops after this many steps instead
        (the global step where updates are synchronous; asynchronous
        parameter-server workers add up to max_steps x workers).
      metrics_file: where the final evaluation goes as JSON; None for none.
      log_every_n_steps: the progress interval in steps (console line,
        TensorBoard throughput, progress file).
      save_checkpoints_steps: checkpoint interval in steps.
      seed: graph-level random seed.
      eval_every_n_steps: evaluate on `val_files` every this many global
        steps during training, keep the best checkpoint (by validation AUC)
        and export it; None evaluates once, after training.
      early_stopping_patience: with `eval_every_n_steps`, stop after this
        many evaluations without a better validation AUC; None never stops
        early.
      progress_file: JSON lines, one `deepfm.runtime.hooks.ProgressRecord` per
        interval. `{task}` in it is replaced by the process's task name, so
        that each process of a job writes its own; without it, only the
        chief writes.
      trace_steps: steps of every training process to trace
        (`deepfm.runtime.step_trace`) after its first
        `step_trace.DEFAULT_WARMUP_STEPS`; 0 traces none.
      trace_dir: where the traces go; None: `<model_dir>/traces`.
      metrics_port: the chief serves Prometheus metrics on this port
        (`deepfm.runtime.metrics_server`); None for none.
      check_data: read every training and validation file once before the
        model directory is touched, and refuse damaged files, rows of another
        layout, values that are not finite, ids out of range and row counts
        other than the metadata's (`input_pipeline.data_check`); File mode.
      data_check_record: where the data check records the files it read
        (`input_pipeline.check_record.PLACES`): `auto` beside the data
        where the job owns the dataset's directory (not a SageMaker input
        channel, writable, of this user), else the model directory;
        `model_dir` always the model directory. A record beside the data is
        read either way.
      check_memory: before the first step, estimate what each process
        holds in memory (`strategies.memory_estimate`) and refuse one its
        host cannot hold (`deepfm.runtime.preflight.check_memory`); the chief
        also says at the start when its host cannot hold the weights for
        the export, and then leaves the export to `python -m deepfm.export`.
    """

    model_dir: str = dataclasses.field(metadata=config_flags.metadata(
        "Checkpoint directory; an existing one is resumed from."))
    train_files: Tuple[str, ...]
    val_files: Tuple[str, ...] = ()
    val_channel: Optional[str] = config_flags.field(
        None, "Pipe mode: the validation channel (default: --val_data files).")
    export_dir: Optional[str] = config_flags.field(None, "Where the SavedModel goes; none if unset.")
    batch_size: int = config_flags.field(DEFAULT_BATCH_SIZE, "Examples per replica and step.")
    num_epochs: int = config_flags.field(1, "Passes over the training data.")
    max_steps: Optional[int] = config_flags.field(
        None, "Steps per worker instead of num_epochs (for async ps the global step reaches this x workers).")
    metrics_file: Optional[str] = config_flags.field(None, "Write the final evaluation here as JSON.")
    log_every_n_steps: int = config_flags.field(
        100, "Progress interval in steps (console line, TensorBoard examples_per_sec, --progress_file).")
    save_checkpoints_steps: int = config_flags.field(1000, "Checkpoint interval in steps.")
    seed: Optional[int] = config_flags.field(None, "Random seed of the graph.")
    eval_every_n_steps: Optional[int] = config_flags.field(
        None, "Evaluate on the validation data every N global steps during training; the best checkpoint (by "
        "validation AUC) is exported.")
    early_stopping_patience: Optional[int] = config_flags.field(
        None, "With --eval_every_n_steps: stop after this many evaluations without a better validation AUC.")
    progress_file: Optional[str] = config_flags.field(
        None, "Write one JSON line per progress interval here; {task} in the path is replaced by the "
        "process's task name (each process of a job writes its own).")
    trace_steps: int = config_flags.field(
        0, "Trace this many steps of every training process, after its warm-up, and write Chrome traces and "
        "where each step's time went (0: none).")
    trace_dir: Optional[str] = config_flags.field(None, "Where --trace_steps writes (default: <model_dir>/traces).")
    metrics_port: Optional[int] = config_flags.field(
        None, "The chief serves Prometheus metrics on this port (needs the prometheus-client package).")
    check_data: bool = config_flags.field(
        True, "Read every training and validation file once before the model directory is touched; refuse "
        "damaged files, bad rows, values that are not finite, ids out of range and row counts other than the "
        "metadata's.")
    data_check_record: str = config_flags.field(
        check_record.AUTO, "Where the data check records the files it read: auto: beside the data where this job "
        "owns the dataset's directory (not a SageMaker input channel, writable, of this user), else the model "
        "directory; model_dir: always the model directory (e.g. a dataset a team shares). A record beside the data "
        "is read either way.", choices=check_record.PLACES)
    check_memory: bool = config_flags.field(
        True, "Before the first step, estimate each process's memory (variables, optimizer slots, exchange "
        "buffers, runtime) and refuse a process its host (its memory cgroup's limit, else the available memory) "
        "cannot hold, naming the strategy and process count that fit.")

    def __post_init__(self):
        for name in ("batch_size", "num_epochs", "log_every_n_steps", "save_checkpoints_steps"):
            if getattr(self, name) < 1:
                raise ValueError("--%s must be >= 1, got %r" % (name, getattr(self, name)))
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError("--max_steps must be >= 1, got %r" % self.max_steps)
        if self.data_check_record not in check_record.PLACES:
            raise ValueError("--data_check_record must be one of %s, got %r"
                             % (", ".join(check_record.PLACES), self.data_check_record))
        object.__setattr__(self, "train_files", tuple(self.train_files))
        object.__setattr__(self, "val_files", tuple(self.val_files))
        if self.metrics_port is not None and not 0 < self.metrics_port < 65536:
            raise ValueError("--metrics_port must be a TCP port (1-65535), got %r" % self.metrics_port)
        if self.trace_steps < 0:
            raise ValueError("--trace_steps must be >= 0, got %r" % self.trace_steps)
        for name in ("eval_every_n_steps", "early_stopping_patience"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError("--%s must be >= 1, got %r" % (name, value))
        if self.early_stopping_patience is not None and self.eval_every_n_steps is None:
            raise ValueError("--early_stopping_patience %d needs --eval_every_n_steps (how often to evaluate)"
                             % self.early_stopping_patience)
        if self.eval_every_n_steps is not None and not self.val_files:
            raise ValueError("--eval_every_n_steps %d needs validation files (--val_data, or a dataset root "
                             "with a validation/ split); Pipe-mode validation channels are evaluated "
                             "once, after training" % self.eval_every_n_steps)
