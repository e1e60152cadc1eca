"""Trains, evaluates and exports DeepFM with a chosen distribution strategy.

    python -m deepfm.train --train_data data/synthetic --model_dir runs/m1 \\
        --strategy single --export_dir runs/m1/export --metrics_file runs/m1/metrics.json

`--train_data` takes files, globs or directories; a dataset root (a directory
with metadata.json, as written by `input_pipeline.criteo` or
`input_pipeline.synthetic`) means its `train/` files, and `--val_data` then
defaults to its `validation/` files. `--feature_size` and `--field_size`
default to the dataset's metadata.

`--eval_every_n_steps N [--early_stopping_patience K]` evaluates during
training, exports the best checkpoint and may stop early. The console shows
a progress line per `--log_every_n_steps` and a summary; `--verbosity 0`
brings back TensorFlow's own logging (`deepfm.console`).
"""


from absl import app, flags

from deepfm import config as config_lib
from deepfm import console as console_lib
from input_pipeline import formats, schema

PROGRAM = "deepfm.train"

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the flags of the entry point (and of nothing else)."""
    import strategies  # registers the adapters, whose names the flag lists
    from input_pipeline import pipeline
    flags.DEFINE_enum("strategy", "single", strategies.names(), "Distribution strategy.")
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
    flags.DEFINE_integer("max_steps", None, "Steps per worker instead of num_epochs (for async ps the global step reaches this x workers).")
    flags.DEFINE_integer("embedding_size", config_lib.DEFAULT_EMBEDDING_SIZE, "Embedding (FM factor) size.")
    flags.DEFINE_list("deep_layers", [str(w) for w in config_lib.DEFAULT_DEEP_LAYERS], "Deep part layer widths.")
    flags.DEFINE_list("dropout", [str(r) for r in config_lib.DEFAULT_DROPOUT],
                      "Drop rate per deep layer (fraction of units zeroed; 0 keeps all).")
    flags.DEFINE_bool("batch_norm", False, "Batch normalization in the deep part.")
    flags.DEFINE_float("l2_reg", config_lib.DEFAULT_L2_REG, "L2 weight on the looked-up FM weights.")
    flags.DEFINE_float("learning_rate", config_lib.DEFAULT_LEARNING_RATE, "Learning rate before scaling.")
    flags.DEFINE_enum("optimizer", "lazy_adam", list(config_lib.OPTIMIZERS),
                      "Optimizer; lazy_adam is Adam updating only the embedding rows a batch touches.")
    flags.DEFINE_integer("shuffle_buffer", 0, "Shuffle buffer in examples; 0 for no shuffle.")
    flags.DEFINE_string("cache", None, "Cache the decoded-ready records: 'memory' or a file path prefix.")
    flags.DEFINE_bool("skip_bad_records", False, "Skip malformed LibSVM lines instead of failing.")
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
    flags.DEFINE_integer("num_devices", 0, "Towers or replicas on this host; 0: every device.")
    flags.DEFINE_enum("device_type", "auto", ["auto", "cpu", "gpu"], "Devices for tower and mirrored.")
    flags.DEFINE_enum("cross_device_ops", "reduction_to_one_device",
                      ["reduction_to_one_device", "hierarchical_copy", "nccl"], "MirroredStrategy reduction.")
    flags.DEFINE_enum("lr_scaling", strategies.base.DEFAULT_LR_SCALING, list(strategies.base.LR_SCALINGS),
                      "Horovod learning-rate scaling with the ranks: none, linear (x ranks), sqrt, capped "
                      "(x min(ranks, --lr_scale_cap)).")
    flags.DEFINE_float("lr_scale_cap", strategies.base.DEFAULT_LR_SCALE_CAP,
                       "Largest learning-rate factor of --lr_scaling=capped.")
    flags.DEFINE_bool("sparse_as_dense", False, "Horovod: allreduce embedding gradients densely.")
    flags.DEFINE_enum("hvd_compression", "none", ["none", "fp16"], "Horovod: compression of dense allreduces.")
    flags.DEFINE_integer("hvd_fusion_threshold_bytes", -1, "Horovod: HOROVOD_FUSION_THRESHOLD (-1: Horovod's "
                         "default, 128 MiB).")
    flags.DEFINE_float("hvd_cycle_time_ms", -1, "Horovod: HOROVOD_CYCLE_TIME in ms (-1: Horovod's default, 1 ms).")
    flags.DEFINE_bool("dedup_lookups", config_lib.ModelConfig.dedup_lookups, "Look up each distinct id of a "
                      "batch once; duplicate gradient rows are summed before any exchange.")
    flags.DEFINE_bool("check_ids", config_lib.ModelConfig.check_ids, "Check at run time that every id is "
                      "in [0, feature_size).")
    flags.DEFINE_float("ps_lr_factor", 1.0, "Parameter server: learning-rate factor for asynchronous updates.")
    flags.DEFINE_integer("ps_towers", 0, "Parameter server: towers per worker (0: none).")
    flags.DEFINE_integer("intra_op_threads", 0, "intra_op_parallelism_threads (0: TensorFlow's choice).")
    flags.DEFINE_integer("inter_op_threads", 0, "inter_op_parallelism_threads (0: TensorFlow's choice).")
    flags.DEFINE_integer("omp_num_threads", 0, "OMP_NUM_THREADS for oneDNN (0: unset).")
    flags.DEFINE_string("kmp_affinity", "", "KMP_AFFINITY for oneDNN ('' : unset).")
    flags.DEFINE_bool("amp", False, "Mixed-precision graph rewrite (GPUs).")
    flags.DEFINE_bool("xla", False, "XLA JIT compilation.")
    flags.mark_flag_as_required("model_dir")


def _parse_ints(flag: str, values) -> tuple:
    try:
        return tuple(int(v) for v in values)
    except ValueError as e:
        raise app.UsageError("--%s must be a list of integers, got %r" % (flag, ",".join(values))) from e


def _parse_floats(flag: str, values) -> tuple:
    try:
        return tuple(float(v) for v in values)
    except ValueError as e:
        raise app.UsageError("--%s must be a list of numbers, got %r" % (flag, ",".join(values))) from e


def parse_flags(flag_values=FLAGS, metadata=None):
    """Turns parsed flags into (TrainConfig, ModelConfig, PipelineConfig, StrategyConfig).

    Args:
      flag_values: the parsed flags.
      metadata: the `DatasetMetadata` of the training data, if it has one.

    Raises:
      app.UsageError: a flag is invalid; the message names it.
    """
    from input_pipeline import files, pipeline
    import strategies

    f = flag_values
    try:
        data_format = formats.get(f.data_format)
        pipe_mode = f.input_mode == pipeline.INPUT_MODE_PIPE
        # Pipe mode without channels is refused by the strategy (`Strategy.pipe_channel`);
        # channels must not come without Pipe mode, as strategies tell Pipe mode by them.
        for flag, value in (("train_channels", ",".join(f.train_channels)), ("val_channel", f.val_channel)):
            if value and not pipe_mode:
                raise ValueError("--%s %r needs --input_mode %s" % (flag, value, pipeline.INPUT_MODE_PIPE))
        train_files, val_files = (), ()
        if not pipe_mode or f.train_data:
            if not f.train_data:
                raise ValueError("--train_data is required in File mode")
            train_files = tuple(files.resolve(f.train_data, data_format, split=schema.TRAIN_SPLIT))
        if f.val_data is None:
            val_files = tuple(files.default_validation(f.train_data or [], data_format))
        elif f.val_data:
            val_files = tuple(files.resolve(f.val_data, data_format, split=schema.VALIDATION_SPLIT))
        feature_size = f.feature_size or (metadata.feature_size if metadata else None)
        if feature_size is None:
            raise ValueError("--feature_size is required: no metadata.json was found beside --train_data")
        field_size = f.field_size or (metadata.field_size if metadata else schema.FIELD_SIZE)
        model = config_lib.ModelConfig(
            feature_size=feature_size, field_size=field_size, embedding_size=f.embedding_size,
            deep_layers=_parse_ints("deep_layers", f.deep_layers),
            dropout=_parse_floats("dropout", f.dropout), batch_norm=f.batch_norm, l2_reg=f.l2_reg,
            learning_rate=f.learning_rate, optimizer=f.optimizer, dedup_lookups=f.dedup_lookups,
            check_ids=f.check_ids)
        for flag in ("batch_size", "num_epochs", "log_every_n_steps", "save_checkpoints_steps"):
            if getattr(f, flag) < 1:
                raise ValueError("--%s must be >= 1, got %r" % (flag, getattr(f, flag)))
        if f.max_steps is not None and f.max_steps < 1:
            raise ValueError("--max_steps must be >= 1, got %r" % f.max_steps)
        train = config_lib.TrainConfig(
            model_dir=f.model_dir, train_files=train_files, val_files=val_files, export_dir=f.export_dir,
            val_channel=f.val_channel, batch_size=f.batch_size, num_epochs=f.num_epochs,
            max_steps=f.max_steps, metrics_file=f.metrics_file, log_every_n_steps=f.log_every_n_steps,
            save_checkpoints_steps=f.save_checkpoints_steps, seed=f.seed,
            eval_every_n_steps=f.eval_every_n_steps, early_stopping_patience=f.early_stopping_patience,
            progress_file=f.progress_file, trace_steps=f.trace_steps, trace_dir=f.trace_dir,
            metrics_port=f.metrics_port)
        input_config = pipeline.PipelineConfig(
            data_format=data_format, field_size=field_size, shuffle_buffer=f.shuffle_buffer,
            cache=f.cache, seed=f.seed, skip_bad_records=f.skip_bad_records, input_mode=f.input_mode)
        strategy = strategies.StrategyConfig(
            name=f.strategy, num_devices=f.num_devices, device_type=f.device_type,
            cross_device_ops=f.cross_device_ops, lr_scaling=f.lr_scaling, lr_scale_cap=f.lr_scale_cap,
            sparse_as_dense=f.sparse_as_dense, hvd_compression=f.hvd_compression,
            hvd_fusion_threshold_bytes=f.hvd_fusion_threshold_bytes, hvd_cycle_time_ms=f.hvd_cycle_time_ms,
            ps_lr_factor=f.ps_lr_factor, ps_towers=f.ps_towers,
            intra_op_threads=f.intra_op_threads, inter_op_threads=f.inter_op_threads,
            omp_num_threads=f.omp_num_threads, kmp_affinity=f.kmp_affinity, amp=f.amp, xla=f.xla,
            train_channels=tuple(f.train_channels), s3_sharded=f.s3_sharded)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    return train, model, input_config, strategy


def find_metadata(spec):
    """The `DatasetMetadata` of the first dataset root among `spec`, or None."""
    for item in spec:
        path = schema.find_metadata(item)
        if path:
            return schema.DatasetMetadata.read(path)
    return None


def main(argv):
    console_lib.run_main(_main, argv, PROGRAM, console_lib.flags_want_detail)


def _main(argv):
    del argv
    import strategies
    from deepfm import trainer

    console_lib.configure_logging(console_lib.flags_want_detail())
    metadata = find_metadata(FLAGS.train_data or [])
    train, model, input_config, strategy_config = parse_flags(FLAGS, metadata)
    try:
        strategy = strategies.get(strategy_config)
        strategy.validate()
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    multi_process = strategy.role != "worker" or strategy.num_workers > 1
    console_lib.configure_logging(console_lib.flags_want_detail(), task_logs=multi_process)
    console = console_lib.Console(enabled=strategy.role == "worker" and strategy.is_chief)
    result = trainer.run(train, model, input_config, strategy, console=console)
    if result is not None and strategy.is_chief:
        extra = {}
        if metadata is not None and metadata.planted_auc is not None:
            extra["planted AUC (ceiling)"] = "%.4f" % metadata.planted_auc
        print(trainer.summary(result, extra))


def run():
    """Console-script entry point."""
    console_lib.entry_point(define_flags, main)


if __name__ == "__main__":
    run()
