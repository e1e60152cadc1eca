"""Trains, evaluates and exports a CTR model (DeepFM or DCN) with a chosen distribution strategy.

    python -m deepfm.train --train_data data/synthetic --model_dir runs/m1 \\
        --strategy single --export_dir runs/m1/export --metrics_file runs/m1/metrics.json

`--train_data` takes files, globs or directories; a dataset root (a directory
with metadata.json, as written by `dataprep.criteo` or `dataprep.synthetic`)
means its `train/` files, and `--val_data` then defaults to its
`validation/` files. `--feature_size` and `--field_size` default to the
dataset's metadata.

The flags are parsed once, here, into the configuration dataclasses
(`parse_flags`), which check their own values; the library never reads
flags. Each strategy's own options are flags too, made from its options
dataclass (`strategies.options_class`): a flag of another strategy's options
is refused, naming the strategies it applies to.

`--eval_every_n_steps N [--early_stopping_patience K]` evaluates during
training, exports the best checkpoint and may stop early. The console shows
a progress line per `--log_every_n_steps` and a summary; `--verbosity 0`
brings back TensorFlow's own logging (`cli.entry`).
"""

import dataclasses
import functools
from typing import Callable, List, Optional

from absl import app, flags

from cli import entry
from deepfm import api
from deepfm import config as config_lib
from input_pipeline import formats, schema

PROGRAM = "deepfm.train"

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the flags of the entry point (and of nothing else)."""
    import strategies  # registers the adapters, whose names the flag lists
    from input_pipeline import pipeline
    from strategies import config as strategy_config_lib
    from strategies import large_batch
    flags.DEFINE_enum("strategy", "single", strategies.names(), "Distribution strategy.")
    flags.DEFINE_enum("model", config_lib.DEEPFM, list(config_lib.MODELS), "The model to train.")
    flags.DEFINE_list("train_data", None, "Training files, globs or directories (a dataset root: its train/ files).")
    flags.DEFINE_list("val_data", None, "Validation files, globs or directories; default: the dataset root's "
                      "validation/ files. Pass an empty value for none.")
    flags.DEFINE_enum("data_format", formats.TFRECORD.name, formats.names(), "Format of the data files.")
    flags.DEFINE_integer("feature_size", None, "Distinct feature ids; default: from the dataset metadata.")
    flags.DEFINE_integer("field_size", None, "Ids per example; default: from the dataset metadata, else 39.")
    flags.DEFINE_string("model_dir", None, "Checkpoint directory; an existing one is resumed from.")
    flags.DEFINE_string("export_dir", None, "Where the SavedModel goes; none if unset.")
    flags.DEFINE_string("metrics_file", None, "Write the final evaluation here as JSON.")
    flags.DEFINE_integer("batch_size", config_lib.DEFAULT_BATCH_SIZE, "Examples per replica and step.")
    flags.DEFINE_integer("num_epochs", 1, "Passes over the training data.")
    flags.DEFINE_integer("max_steps", None, "Steps per worker instead of num_epochs (for async ps the global step "
                         "reaches this x workers).")
    flags.DEFINE_integer("embedding_size", config_lib.DEFAULT_EMBEDDING_SIZE, "Embedding (FM factor) size.")
    flags.DEFINE_list("deep_layers", [str(w) for w in config_lib.DEFAULT_DEEP_LAYERS], "Deep part layer widths.")
    flags.DEFINE_list("dropout", [str(r) for r in config_lib.DEFAULT_DROPOUT],
                      "Drop rate per deep layer (fraction of units zeroed; 0 keeps all).")
    flags.DEFINE_integer("cross_layers", config_lib.DEFAULT_CROSS_LAYERS, "DCN: cross layers.")
    flags.DEFINE_bool("batch_norm", False, "Batch normalization in the deep part.")
    flags.DEFINE_float("l2_reg", config_lib.DEFAULT_L2_REG, "L2 weight on the looked-up embedding rows.")
    flags.DEFINE_float("learning_rate", config_lib.DEFAULT_LEARNING_RATE, "Learning rate before scaling.")
    flags.DEFINE_enum("optimizer", "lazy_adam", list(config_lib.OPTIMIZERS),
                      "Optimizer; lazy_adam is Adam updating only the embedding rows a batch touches.")
    flags.DEFINE_bool("check_ids", config_lib.ModelConfig.check_ids, "Check at run time that every id is "
                      "in [0, feature_size).")
    flags.DEFINE_integer("shuffle_buffer", 0, "Shuffle buffer in examples; 0 for no shuffle.")
    flags.DEFINE_bool("input_autotune", False, "Run tf.data's autotuning thread on the input. Off: in "
                      "TensorFlow 2.14 it can hold up the end of each training session by up to 60 s.")
    flags.DEFINE_string("cache", None, "Cache the decoded-ready records: 'memory' or a file path prefix.")
    flags.DEFINE_bool("skip_bad_records", False, "Skip malformed LibSVM lines instead of failing.")
    flags.DEFINE_bool("check_data", config_lib.TrainConfig.check_data, "Read every training and validation file "
                      "once before the model directory is touched; refuse damaged files, bad rows, values that "
                      "are not finite, ids out of range and row counts other than the metadata's.")
    flags.DEFINE_integer("seed", None, "Random seed of the graph.")
    flags.DEFINE_integer("log_every_n_steps", 100, "Progress interval in steps (console line, TensorBoard "
                         "examples_per_sec, --progress_file).")
    flags.DEFINE_integer("eval_every_n_steps", None, "Evaluate on the validation data every N global steps "
                         "during training; the best checkpoint (by validation AUC) is exported.")
    flags.DEFINE_integer("early_stopping_patience", None, "With --eval_every_n_steps: stop after this many "
                         "evaluations without a better validation AUC.")
    flags.DEFINE_string("progress_file", None, "Write one JSON line per progress interval here; {task} in the "
                        "path is replaced by the process's task name (each process of a job writes its own).")
    flags.DEFINE_integer("trace_steps", 0, "Trace this many steps of every training process, after its "
                         "warm-up, and write Chrome traces and where each step's time went (0: none).")
    flags.DEFINE_integer("metrics_port", None, "The chief serves Prometheus metrics on this port (needs the "
                         "prometheus-client package).")
    flags.DEFINE_string("trace_dir", None, "Where --trace_steps writes (default: <model_dir>/traces).")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint interval in steps.")
    flags.DEFINE_enum("input_mode", pipeline.INPUT_MODE_FILE, list(pipeline.INPUT_MODES),
                      "File mode or SageMaker Pipe mode.")
    flags.DEFINE_list("train_channels", [], "Pipe mode: training channels, one per worker on a host, "
                      "assigned by local rank in this order.")
    flags.DEFINE_string("val_channel", None, "Pipe mode: the validation channel (default: --val_data files).")
    flags.DEFINE_bool("s3_sharded", False, "Input files were split across hosts by ShardedByS3Key.")
    # Options of every strategy (`strategies.StrategyConfig`).
    flags.DEFINE_enum("device_type", "auto", list(strategy_config_lib.DEVICE_TYPES), "Devices to train on.")
    flags.DEFINE_bool("dedup_lookups", False, "Look up each distinct id of a batch once; duplicate gradient rows "
                      "are summed before any exchange.")
    flags.DEFINE_integer("intra_op_threads", 0, "intra_op_parallelism_threads (0: TensorFlow's choice).")
    flags.DEFINE_integer("inter_op_threads", 0, "inter_op_parallelism_threads (0: TensorFlow's choice).")
    flags.DEFINE_integer("omp_num_threads", 0, "OMP_NUM_THREADS for oneDNN (0: unset).")
    flags.DEFINE_string("kmp_affinity", "", "KMP_AFFINITY for oneDNN ('' : unset).")
    flags.DEFINE_bool("amp", False, "Mixed-precision graph rewrite (GPUs).")
    flags.DEFINE_bool("xla", False, "XLA JIT compilation.")
    flags.DEFINE_enum("large_batch_rule", large_batch.NONE, list(large_batch.RULES),
                      "Rescale training for the global batch: none, or cowclip (dense learning rate x sqrt(k), "
                      "embedding L2 x k, per-id embedding gradient clipping, dense warm-up; k = global batch / "
                      "--large_batch_base). See docs/large_batch.md.")
    flags.DEFINE_integer("large_batch_base", large_batch.DEFAULT_BASE_BATCH,
                         "The batch the hyperparameters are tuned at (--large_batch_rule).")
    flags.DEFINE_integer("large_batch_warmup_examples", None,
                         "Examples of --large_batch_rule's dense learning-rate warm-up, the same data at any "
                         "number of replicas (0: none; unset: %d unless --large_batch_warmup_steps is given)."
                         % large_batch.DEFAULT_WARMUP_EXAMPLES)
    flags.DEFINE_integer("large_batch_warmup_steps", None,
                         "Global steps of --large_batch_rule's dense warm-up instead of "
                         "--large_batch_warmup_examples (0: none).")
    define_option_flags()
    flags.mark_flag_as_required("model_dir")


# --- each strategy's own options as flags -------------------------------------------------------------
def define_option_flags() -> None:
    """Defines one flag per field of the strategies' options dataclasses (a field shared by several, once)."""
    import strategies
    defined = set()
    for name in strategies.names():
        for field in dataclasses.fields(strategies.options_class(name)):
            if field.name in defined:
                continue
            defined.add(field.name)
            help_text = field.metadata.get("help", field.name)
            choices = field.metadata.get("choices")
            if choices:
                flags.DEFINE_enum(field.name, field.default, list(choices), help_text)
            elif field.type is bool:
                flags.DEFINE_bool(field.name, field.default, help_text)
            elif field.type is int:
                flags.DEFINE_integer(field.name, field.default, help_text)
            elif field.type is float:
                flags.DEFINE_float(field.name, field.default, help_text)
            else:
                flags.DEFINE_string(field.name, field.default, help_text)


def strategy_config(flag_values):
    """The `StrategyConfig` of the parsed flags: the common options, and the adapter options given.

    Raises:
      ValueError: a flag of other strategies' options only, or a bad value.
    """
    import strategies
    f = flag_values
    given = {flag: f[flag].value for flag in strategies.option_owners() if f[flag].present}
    return strategies.make_config(
        f.strategy, device_type=f.device_type, intra_op_threads=f.intra_op_threads,
        inter_op_threads=f.inter_op_threads, omp_num_threads=f.omp_num_threads, kmp_affinity=f.kmp_affinity,
        amp=f.amp, xla=f.xla, dedup_lookups=f.dedup_lookups, train_channels=tuple(f.train_channels),
        s3_sharded=f.s3_sharded, large_batch_rule=f.large_batch_rule, large_batch_base=f.large_batch_base,
        large_batch_warmup_steps=f.large_batch_warmup_steps,
        large_batch_warmup_examples=f.large_batch_warmup_examples, **given)


def _parse_ints(flag: str, values) -> tuple:
    try:
        return tuple(int(v) for v in values)
    except ValueError as e:
        raise ValueError("--%s must be a list of integers, got %r" % (flag, ",".join(values))) from e


def _parse_floats(flag: str, values) -> tuple:
    try:
        return tuple(float(v) for v in values)
    except ValueError as e:
        raise ValueError("--%s must be a list of numbers, got %r" % (flag, ",".join(values))) from e


def parse_flags(flag_values=FLAGS):
    """Turns parsed flags into (TrainConfig, ModelConfig, PipelineConfig, StrategyConfig, Dataset or None).

    The dataset's metadata is read once, here.

    Raises:
      app.UsageError: a flag is invalid; the message names it.
    """
    from input_pipeline import dataset as dataset_lib
    from input_pipeline import pipeline

    f = flag_values
    try:
        data_format = formats.get(f.data_format)
        pipe_mode = f.input_mode == pipeline.INPUT_MODE_PIPE
        # Pipe mode without channels is refused by the strategy (`Strategy.pipe_channel`);
        # channels must not come without Pipe mode, as strategies tell Pipe mode by them.
        for flag, value in (("train_channels", ",".join(f.train_channels)), ("val_channel", f.val_channel)):
            if value and not pipe_mode:
                raise ValueError("--%s %r needs --input_mode %s" % (flag, value, pipeline.INPUT_MODE_PIPE))
        data: Optional[dataset_lib.Dataset] = None
        if not pipe_mode and not f.train_data:
            raise ValueError("--train_data is required in File mode")
        if f.train_data or f.val_data:
            data = dataset_lib.Dataset.open(f.train_data or [], f.val_data, data_format)
        metadata = data.metadata if data is not None else None
        feature_size = f.feature_size or (metadata.feature_size if metadata else None)
        if feature_size is None:
            raise ValueError("--feature_size is required: no metadata.json was found beside --train_data")
        field_size = f.field_size or (metadata.field_size if metadata else schema.FIELD_SIZE)
        model = config_lib.ModelConfig(
            feature_size=feature_size, field_size=field_size, embedding_size=f.embedding_size,
            deep_layers=_parse_ints("deep_layers", f.deep_layers),
            dropout=_parse_floats("dropout", f.dropout), batch_norm=f.batch_norm, l2_reg=f.l2_reg,
            learning_rate=f.learning_rate, optimizer=f.optimizer, check_ids=f.check_ids, model=f.model,
            cross_layers=f.cross_layers)
        train = config_lib.TrainConfig(
            model_dir=f.model_dir, train_files=data.train_files if data else (),
            val_files=data.val_files if data else (), export_dir=f.export_dir,
            val_channel=f.val_channel, batch_size=f.batch_size, num_epochs=f.num_epochs,
            max_steps=f.max_steps, metrics_file=f.metrics_file, log_every_n_steps=f.log_every_n_steps,
            save_checkpoints_steps=f.save_checkpoints_steps, seed=f.seed,
            eval_every_n_steps=f.eval_every_n_steps, early_stopping_patience=f.early_stopping_patience,
            progress_file=f.progress_file, trace_steps=f.trace_steps, trace_dir=f.trace_dir,
            metrics_port=f.metrics_port, check_data=f.check_data)
        input_config = pipeline.PipelineConfig(
            data_format=data_format, field_size=field_size, shuffle_buffer=f.shuffle_buffer,
            cache=f.cache, seed=f.seed, skip_bad_records=f.skip_bad_records, input_mode=f.input_mode,
            autotune=f.input_autotune)
        strategy = strategy_config(f)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    return train, model, input_config, strategy, data


def _main(argv, model_fn=None):
    del argv
    import strategies
    from deepfm.runtime import trainer
    from strategies import topology as topology_lib

    entry.configure_logging(entry.flags_want_detail())
    train, model, input_config, strategy_config, data = parse_flags(FLAGS)
    try:
        strategy = strategies.get(strategy_config)
        topology = strategy.setup()
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    multi_process = topology.role != topology_lib.ROLE_WORKER or topology.workers > 1
    entry.configure_logging(entry.flags_want_detail(), task_logs=multi_process)
    result = api.train_and_evaluate(train, model, input_config, strategy, model_fn=model_fn, console=True)
    if result is not None and topology.is_chief:
        extra = {}
        metadata = data.metadata if data is not None else None
        if metadata is not None and metadata.planted_auc is not None:
            extra["planted AUC (ceiling)"] = "%.4f" % metadata.planted_auc
        print(trainer.summary(result, extra))


def run(argv: Optional[List[str]] = None, model_fn: Optional[Callable] = None) -> None:
    """Runs the command line: the console script, and an entry-point script that trains with these flags.

    The flags are parsed into the configuration dataclasses, which go to
    `deepfm.train_and_evaluate`.

    Args:
      argv: the program's name, then its flags; default `sys.argv`.
      model_fn: a model_fn of your own to train instead of the built-in
        model that `--model` names (docs/api.md says what it receives and
        must return); the SageMaker entry point passes one through
        (`examples/sagemaker_entry_point.py`).
    """
    entry.run(functools.partial(_main, model_fn=model_fn), PROGRAM, define_flags, entry.TENSORFLOW_BEFORE_FLAGS,
              argv=argv)


if __name__ == "__main__":
    run()
