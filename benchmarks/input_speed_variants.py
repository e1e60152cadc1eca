"""The rows of `benchmarks.input_speed` and how each row's dataset is made.

A row (`Variant`) names its data format, how its dataset is made (`KIND_*`:
the pipeline builder, a bare reference pipeline, a decoder alone), the order
of a builder row's batches (the builder's own or one of `SLOW_ORDERS`, built
here by `slow_order_dataset`), its cache, Pipe mode and the files it reads
(`FILES_*`). `BenchConfig` is what the command line asks for;
`build_dataset` makes a row's `tf.data.Dataset` in the current graph and
`planned_epochs` says how many epochs a row reads.

Nothing here measures: `benchmarks.input_speed` times the rows, and
`benchmarks.input_speed_report` writes their report.
"""

import dataclasses
import math
import os
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from benchmarks import common, harness
from cli import config_flags
from input_pipeline import files, format_base, format_tfrecord, format_tfrecord_packed, formats

PIPE_CHANNEL = "train"
SPLIT_PARTS = 2
CACHE_SHARDS = 1
PARALLEL_READS = (1, 4, 8)

# What a row reads.
FILES_TRAIN = "train"  # the train shards of the dataset root
FILES_SPLIT = "split"  # the same rows, each TFRecord shard split in SPLIT_PARTS files
FILES_CACHE = "cache"  # the first CACHE_SHARDS train shards, read for several epochs

# How a row's dataset is made.
KIND_BUILDER = "builder"
KIND_BARE_SEQUENTIAL = "bare_sequential"
KIND_BARE_CHUNKED = "bare_chunked"
KIND_DECODE_ONLY = "decode_only"

# The order a builder row's batches are made in: the builder's own, or a slow
# one built here (see `slow_order_dataset`).
ORDER_DEFAULT = "default"
ORDER_SCALAR_MAP = "scalar_map"  # decode one record per call, then batch
ORDER_NO_PREFETCH = "no_prefetch"  # no prefetch at the end, none injected by tf.data
ORDER_CACHE_AFTER_REPEAT = "cache_after_repeat"  # cache("memory") after repeat
SLOW_ORDERS = (ORDER_SCALAR_MAP, ORDER_NO_PREFETCH, ORDER_CACHE_AFTER_REPEAT)

REFERENCE = formats.TFRECORD.name


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of the benchmark.

    Attributes:
      name: row name (also the value of `--variants`).
      description: what the row measures.
      kind: how the dataset is made (`KIND_*`).
      data_format: the name of its format (`input_pipeline.formats`).
      order: `ORDER_DEFAULT` or one of `SLOW_ORDERS`.
      cache: `PipelineConfig.cache` (the builder's cache, before repeat).
      pipe: read in Pipe mode (a `PipeFeeder` streams the train files).
      num_parallel_reads: None for the builder's default.
      files: which files it reads (`FILES_*`).
    """

    name: str
    description: str
    kind: str = KIND_BUILDER
    data_format: str = formats.TFRECORD.name
    order: str = ORDER_DEFAULT
    cache: Optional[str] = None
    pipe: bool = False
    num_parallel_reads: Optional[int] = None
    files: str = FILES_TRAIN

    @property
    def per_epoch(self) -> bool:
        """Whether the row reads a fixed number of epochs and samples memory after each."""
        return self.files == FILES_CACHE


VARIANTS = (
    Variant(REFERENCE, "TFRecord, default pipeline: chunked parallel interleave, batch, vectorized "
            "parse_example (the reference)"),
    Variant(formats.LIBSVM.name, "LibSVM, default pipeline (batch, then vectorized decode)",
            data_format=formats.LIBSVM.name),
    Variant(formats.TFRECORD_PACKED.name, "packed TFRecord (%d rows to a record), default pipeline: decode "
            "each record, rebatch its rows" % format_tfrecord_packed.PACKED_ROWS_PER_RECORD,
            data_format=formats.TFRECORD_PACKED.name),
    Variant("tfrecord_scalar_map", "TFRecord, decode then batch (order scalar_map)", order=ORDER_SCALAR_MAP),
    Variant("libsvm_scalar_map", "LibSVM, decode then batch (order scalar_map)", data_format=formats.LIBSVM.name,
            order=ORDER_SCALAR_MAP),
    Variant("tfrecord_no_prefetch", "TFRecord, no prefetch (order no_prefetch)", order=ORDER_NO_PREFETCH),
    Variant("tfrecord_pipe", "TFRecord, Pipe mode: the same files through a FIFO to PipeModeDataset",
            pipe=True),
) + tuple(
    Variant("reads_%d" % reads, "TFRecord, num_parallel_reads=%d, the same rows in %d files"
            % (reads, PARALLEL_READS[-1]), num_parallel_reads=reads, files=FILES_SPLIT)
    for reads in PARALLEL_READS
) + (
    Variant("cache_none", "TFRecord, 1 shard, several epochs, no cache", files=FILES_CACHE),
    Variant("cache_memory", "TFRecord, 1 shard, several epochs, cache('memory') before repeat",
            cache="memory", files=FILES_CACHE),
    Variant("cache_after_repeat", "TFRecord, 1 shard, several epochs, cache('memory') after repeat "
            "(order cache_after_repeat)", order=ORDER_CACHE_AFTER_REPEAT, files=FILES_CACHE),
    Variant("bare_sequential", "reference: bare TFRecordDataset(files) -> batch -> parse_example "
            "(no interleave, no byte accounting)", kind=KIND_BARE_SEQUENTIAL),
    Variant("bare_chunked", "reference: the default's chunked interleave without the damaged-file "
            "accounting", kind=KIND_BARE_CHUNKED),
    Variant("decode_tfrecord", "profile: parse_example alone, on one cached batch", kind=KIND_DECODE_ONLY),
    Variant("decode_libsvm", "profile: LibSVM decode alone, on one cached batch", kind=KIND_DECODE_ONLY,
            data_format=formats.LIBSVM.name),
)
VARIANTS_BY_NAME = {variant.name: variant for variant in VARIANTS}

# Defaults of a full run and of --quick (a field left unset takes one of them).
FULL_RUNS, FULL_BATCHES, FULL_WARMUP, FULL_CACHE_EPOCHS = 3, 500, 50, 4
QUICK_RUNS, QUICK_BATCHES, QUICK_WARMUP, QUICK_CACHE_EPOCHS = 1, 20, 5, 3
DEFAULT_BATCH_SIZE = 1024
# The value of `--runs`, `--batches` and `--cache_epochs` (0) and of `--warmup` (-1) that stands for the
# default of the run's kind (full or --quick): none of them is a value one could measure with.
UNSET, UNSET_WARMUP = 0, -1


@dataclasses.dataclass(frozen=True)
class BenchConfig(harness.HarnessConfig):
    """What the command line asks for (its flags); the full or `--quick` defaults filled in.

    `variants` names the rows (all where empty); `names()` gives them with
    the reference row first. `one`, `split_dir` and `pipe_base_dir` are a
    child process's: the row it measures, the files of the `FILES_SPLIT`
    rows and the emulated SageMaker base directory.
    """

    rounds: int = config_flags.field(UNSET, "Measured runs per variant (0: %d; with --quick %d)."
                                     % (FULL_RUNS, QUICK_RUNS), flag="runs")
    data_dir: str = config_flags.field(common.DEFAULT_DATA_DIR, "Dataset root with metadata.json.")
    batches: int = config_flags.field(UNSET, "Timed batches per run (0: %d; with --quick %d)."
                                      % (FULL_BATCHES, QUICK_BATCHES))
    warmup: int = config_flags.field(UNSET_WARMUP, "Warm-up batches, not timed (-1: %d; with --quick %d)."
                                     % (FULL_WARMUP, QUICK_WARMUP))
    cache_epochs: int = config_flags.field(UNSET, "Epochs of the cache rows (0: %d; with --quick %d)."
                                           % (FULL_CACHE_EPOCHS, QUICK_CACHE_EPOCHS))
    batch_size: int = config_flags.field(DEFAULT_BATCH_SIZE, "Examples per batch.")
    quick: bool = config_flags.field(False, "A short run (smaller defaults).")
    one: str = config_flags.field("", "Internal: measure this row once in this process and print JSON.")
    split_dir: str = config_flags.field("", "Internal: the files of the split rows.")
    pipe_base_dir: str = config_flags.field("", "Internal: the emulated SageMaker base directory of the Pipe rows.")

    def __post_init__(self):
        defaults = ((QUICK_RUNS, QUICK_BATCHES, QUICK_WARMUP, QUICK_CACHE_EPOCHS) if self.quick
                    else (FULL_RUNS, FULL_BATCHES, FULL_WARMUP, FULL_CACHE_EPOCHS))
        for key, unset, default in zip(("rounds", "batches", "warmup", "cache_epochs"),
                                       (UNSET, UNSET, UNSET_WARMUP, UNSET), defaults):
            if getattr(self, key) == unset:
                object.__setattr__(self, key, default)
        super().__post_init__()
        for flag, value, minimum in (("batches", self.batches, 1), ("warmup", self.warmup, 0),
                                     ("cache_epochs", self.cache_epochs, 2), ("batch_size", self.batch_size, 1)):
            if value < minimum:
                raise ValueError("--%s must be >= %d, got %d" % (flag, minimum, value))
        self.names()
        if not files.is_dataset_root(self.data_dir):
            raise ValueError("--data_dir %r is not a dataset root (no metadata.json); make one with "
                             "`python -m dataprep.synthetic`" % self.data_dir)

    def names(self) -> Tuple[str, ...]:
        """The rows to measure, the reference first, each once.

        Raises:
          ValueError: an unknown row; the message lists the known ones.
        """
        asked = [name.strip() for name in self.variants.split(",") if name.strip()] or list(VARIANTS_BY_NAME)
        unknown = [name for name in asked if name not in VARIANTS_BY_NAME]
        if unknown:
            raise ValueError("--variants: unknown %s; known: %s" % (", ".join(map(repr, unknown)),
                                                                   ", ".join(VARIANTS_BY_NAME)))
        return (REFERENCE,) + tuple(dict.fromkeys(name for name in asked if name != REFERENCE))


# --- data ----------------------------------------------------------------------
def train_files(data_dir: str, data_format: formats.DataFormatLike) -> List[str]:
    """The train shards of a dataset root, sorted."""
    return files.resolve([data_dir], data_format)


def train_rows(paths: Sequence[str], data_format: formats.DataFormatLike) -> int:
    """Rows of `paths` from their dataset root's metadata.

    Raises:
      ValueError: a file the metadata does not list.
    """
    counts = files.row_counts(paths, data_format)
    if counts is None:
        raise ValueError("the metadata does not list the rows of %s" % ", ".join(paths))
    return sum(counts.values())


def split_tfrecords(paths: Sequence[str], out_dir: str, parts: int) -> List[str]:
    """Cuts every TFRecord file into `parts` files at record boundaries.

    The records' bytes are copied as they are (framing and CRCs included),
    in order: reading the outputs in order gives the inputs' records.

    Args:
      paths: TFRecord files.
      out_dir: where the parts go (created if missing), named
        `<stem>-<k>of<parts>.tfrecord`.
      parts: files per input, each with `records // parts` or one more.

    Returns:
      The paths of the parts, sorted (input order, then part order).

    Raises:
      ValueError: a file ends inside a record, or has fewer records than
        `parts`; the message names it.
    """
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        offsets = [0]
        while offsets[-1] + format_tfrecord.TFRECORD_LENGTH_BYTES <= len(data):
            (length,) = struct.unpack_from("<Q", data, offsets[-1])
            offsets.append(offsets[-1] + format_tfrecord.TFRECORD_FRAMING_BYTES + length)
        if offsets[-1] != len(data):
            raise ValueError("TFRecord file %s ends inside a record (at byte %d of %d)"
                             % (path, offsets[-2] if len(offsets) > 1 else 0, len(data)))
        records = len(offsets) - 1
        if records < parts:
            raise ValueError("TFRecord file %s has %d record(s), fewer than the %d parts asked for"
                             % (path, records, parts))
        stem = os.path.splitext(os.path.basename(path))[0]
        for part in range(parts):
            begin, end = offsets[part * records // parts], offsets[(part + 1) * records // parts]
            out = os.path.join(out_dir, "%s-%dof%d%s" % (stem, part, parts, formats.TFRECORD.extension))
            with open(out, "wb") as f:
                f.write(data[begin:end])
            written.append(out)
    return sorted(written)


# --- datasets ----------------------------------------------------------------------
def build_dataset(variant: Variant, config: BenchConfig, num_epochs: Optional[int]):
    """The `tf.data.Dataset` of `variant`'s batches (in the current graph)."""
    import tensorflow as tf

    from input_pipeline import pipeline

    data_format = formats.get(variant.data_format)
    decode_config = pipeline.PipelineConfig(data_format=data_format)
    paths = train_files(config.data_dir, data_format)

    def decode(*batch):
        return data_format.decode_batch(batch, decode_config, file_names=paths)

    if variant.kind == KIND_DECODE_ONLY:
        one_batch = (data_format.records(paths[:1], decode_config)
                     .batch(config.batch_size, drop_remainder=True).take(1).cache())
        return one_batch.repeat().map(decode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    if variant.kind in (KIND_BARE_SEQUENTIAL, KIND_BARE_CHUNKED):
        # The references read TFRecord without the format's damaged-file accounting.
        if variant.kind == KIND_BARE_SEQUENTIAL:
            records = tf.data.TFRecordDataset(paths, buffer_size=pipeline.DEFAULT_READ_BUFFER_BYTES)
        else:
            records = tf.data.Dataset.from_tensor_slices(paths).interleave(
                lambda path: tf.data.TFRecordDataset(path, buffer_size=pipeline.DEFAULT_READ_BUFFER_BYTES)
                .batch(format_base.READ_CHUNK_RECORDS),
                cycle_length=min(len(paths), format_base.DEFAULT_PARALLEL_READS),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
        return (records.batch(config.batch_size, drop_remainder=True)
                .map(decode, num_parallel_calls=tf.data.AUTOTUNE).repeat().prefetch(tf.data.AUTOTUNE))
    options: Dict[str, Any] = {}
    if variant.num_parallel_reads is not None:
        options["num_parallel_reads"] = variant.num_parallel_reads
    source: Union[str, Sequence[str]] = paths
    if variant.files == FILES_SPLIT:
        split_dir = config.split_dir
        if not split_dir:
            raise ValueError("row %s reads the files of split_dir, which is not set" % variant.name)
        source = sorted(os.path.join(split_dir, name) for name in os.listdir(split_dir))
    elif variant.files == FILES_CACHE:
        source = paths[:CACHE_SHARDS]
    elif variant.pipe:
        source = PIPE_CHANNEL
        options.update(input_mode=pipeline.INPUT_MODE_PIPE, pipe_base_dir=config.pipe_base_dir)
    pipeline_config = pipeline.PipelineConfig(data_format=data_format, cache=variant.cache, **options)
    builder = pipeline.DatasetBuilder(source, pipeline_config, config.batch_size, num_epochs=num_epochs)
    if variant.order == ORDER_DEFAULT:
        return builder()
    return slow_order_dataset(builder, variant.order)


def slow_order_dataset(builder, order: str):
    """The batches of `builder` (a `pipeline.DatasetBuilder`) made in a slow order.

    Built from `builder.records()` and `builder.decode_batch`, with the
    builder's batch size, `drop_remainder` and epochs; the same rows as
    `builder()` (with `cache_after_repeat`, a batch may straddle two epochs).
    The builder's own `cache` and `shuffle_buffer` are not applied.

    Args:
      builder: the pipeline whose records are read.
      order: one of `SLOW_ORDERS`:
        `scalar_map`: shard -> map(decode one record) -> batch -> repeat -> prefetch;
        `no_prefetch`: shard -> batch -> map(decode) -> repeat, and tf.data
          injects no prefetch of its own;
        `cache_after_repeat`: shard -> repeat -> cache("memory") -> batch ->
          map(decode) -> prefetch; the cache keeps every epoch.

    Raises:
      ValueError: an unknown order.
    """
    import tensorflow as tf

    if order not in SLOW_ORDERS:
        raise ValueError("order must be one of %s, got %r" % (", ".join(SLOW_ORDERS), order))
    records = builder.records()
    batch_size, drop_remainder = builder.batch_size, builder.config.drop_remainder
    if order == ORDER_SCALAR_MAP:
        def decode_one(*record):
            return builder.decode_batch(*[tf.expand_dims(part, 0) for part in record])

        rows = records.map(decode_one, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        return (rows.batch(batch_size, drop_remainder=drop_remainder).repeat(builder.num_epochs)
                .prefetch(tf.data.AUTOTUNE))
    if order == ORDER_NO_PREFETCH:
        batches = records.batch(batch_size, drop_remainder=drop_remainder)
        dataset = batches.map(builder.decode_batch, num_parallel_calls=tf.data.AUTOTUNE).repeat(builder.num_epochs)
        options = tf.data.Options()
        # Otherwise tf.data adds a prefetch of its own and there is no "no prefetch" to measure.
        options.experimental_optimization.inject_prefetch = False
        return dataset.with_options(options)
    cached = records.repeat(builder.num_epochs).cache()
    return (cached.batch(batch_size, drop_remainder=drop_remainder)
            .map(builder.decode_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def planned_epochs(variant: Variant, config: BenchConfig) -> Tuple[Optional[int], Optional[int]]:
    """`(num_epochs, batches per epoch)` of a row: None, None for rows that repeat without end.

    Per-epoch rows read `config.cache_epochs` epochs. Pipe mode reads as many
    whole epochs (one FIFO each) as the warm-up and timed batches need.
    """
    if not (variant.per_epoch or variant.pipe):
        return None, None
    paths = train_files(config.data_dir, variant.data_format)
    if variant.per_epoch:
        paths = paths[:CACHE_SHARDS]
    per_epoch = train_rows(paths, variant.data_format) // config.batch_size
    if per_epoch < 1:
        raise ValueError("%s holds fewer rows than one batch of %d" % (", ".join(paths), config.batch_size))
    if variant.per_epoch:
        return config.cache_epochs, per_epoch
    return math.ceil((config.warmup + config.batches) / per_epoch), per_epoch

