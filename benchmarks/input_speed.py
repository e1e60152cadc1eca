"""Input-pipeline benchmark: examples/sec of the tf.data pipeline alone.

    python -m benchmarks.input_speed [--runs 3] [--batches 500] [--quick]
        [--data_dir data/synthetic] [--variants tfrecord,libsvm,...] [--results_dir DIR]

Iterates the batches of `input_pipeline.pipeline.DatasetBuilder` (batch
1024) the way `tf.estimator` does, in graph mode: an initializable iterator
and a session loop. Each step runs an op that depends on the iterator's next
batch, so the batch is made but not copied into Python; nothing else runs.

The rows, measured side by side in one run, variants interleaved round by
round, each measured run in a fresh process:

* the default (vectorized: batch, then decode) pipeline on TFRecord and on
  LibSVM, and each with the scalar decode (`scalar_map`: decode, then batch);
  the default pipeline on packed TFRecord (each record decoded, its rows
  rebatched);
* no prefetch (`no_prefetch`) against the default prefetch;
* Pipe mode: `PipeFeeder` (in the parent process, as SageMaker's agent is a
  process of its own) streams the same TFRecord files through a real FIFO to
  `PipeModeDataset`, read by the builder in Pipe mode (base directory in a
  temporary directory);
* `num_parallel_reads` 1, 4 and 8 on the same rows split into 8 files (each
  TFRecord shard cut in two at a record boundary): with the 4 shards alone
  8 parallel reads are capped at 4 files;
* caching over several epochs of one shard: none, `cache("memory")` before
  repeat, and after repeat (`cache_after_repeat`), with the resident memory
  after each epoch; their first epoch (which fills the cache) is the
  warm-up;
* reference pipelines built here, to show what the builder's own work costs:
  a bare `TFRecordDataset(files)` -> batch -> parse, and the builder's
  chunked interleave without the damaged-file accounting; and each decoder
  alone on one cached batch.

The builder makes only the recommended order; the slow orders the
best-practice text warns against (`scalar_map`, `no_prefetch`,
`cache_after_repeat`) are built here (`slow_order_dataset`), from the
builder's sharded records and its batch decoder.

Reports examples/sec (min/median/max over runs, warm-up batches excluded),
CPU microseconds per example (all threads of the process) and peak resident
memory, checks the targets below, and writes
`benchmarks/results/input_pipeline.{md,json,png}`.
"""

import argparse
import dataclasses
import json
import math
import os
import struct
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from benchmarks import common
from input_pipeline import files, formats, schema

NAME = "input_pipeline"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BATCH_SIZE = 1024
CHILD_TIMEOUT_S = 900
MIB = float(1 << 20)
MICROSECONDS = 1e6

# Defaults of a full run and of --quick.
FULL_RUNS, FULL_BATCHES, FULL_WARMUP, FULL_CACHE_EPOCHS = 3, 500, 50, 4
QUICK_RUNS, QUICK_BATCHES, QUICK_WARMUP, QUICK_CACHE_EPOCHS = 1, 20, 5, 3

# Targets (2 cores, batch 1024).
TARGET_TFRECORD_EXAMPLES_PER_SEC = 100_000
TARGET_VECTORIZED_OVER_SCALAR = 5.0
TARGET_LIBSVM_SLOWDOWN = 2.0

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

NOTES = """## Reading the rows

- Nothing but the input pipeline runs between batches here. `no_prefetch` thus has no training step to
  overlap with, and the parallel (AUTOTUNE) decode map still works ahead with its own buffer: the row shows
  what the final prefetch costs or saves on the pipeline alone, not what it does in training.
- Pipe mode has no parallel reads: `PipeModeDataset` reads one FIFO, fed by `PipeFeeder` in the parent
  process, whose CPU is not in the row's CPU column.
- The cache rows time the epochs after the first: `cache_memory` then serves records from memory (only the
  batching and the decode remain), while `cache_after_repeat` still reads the files and also copies every
  record into a cache that is never read back.
- On a shared machine the min-max spread is mostly other work; CPU us/example varies less than
  examples/sec."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of the benchmark.

    Attributes:
      name: row name (also the value of `--variants`).
      description: what the row measures.
      kind: how the dataset is made (`KIND_*`).
      data_format: the name of its `input_pipeline.formats` format.
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
            "each record, rebatch its rows" % formats.PACKED_ROWS_PER_RECORD, data_format=formats.TFRECORD_PACKED.name),
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


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """What the command line asks for.

    Attributes:
      data_dir: the dataset root (with metadata.json) whose train split is read.
      runs: measured runs of every variant.
      batches: timed batches per run (after the warm-up), except the
        per-epoch rows, which time every epoch after the first.
      warmup: batches read before timing starts.
      batch_size: examples per batch.
      cache_epochs: epochs of the per-epoch (cache) rows.
      variants: the rows, by name; the reference row always comes first.
      results_dir: where the report goes.
      one: (child process) the variant to measure.
      split_dir: (child process) the files of the `FILES_SPLIT` rows.
      pipe_base_dir: (child process) the emulated SageMaker base directory.
    """

    data_dir: str
    runs: int
    batches: int
    warmup: int
    batch_size: int
    cache_epochs: int
    variants: Tuple[str, ...]
    results_dir: str
    one: Optional[str] = None
    split_dir: Optional[str] = None
    pipe_base_dir: Optional[str] = None


def parse_args(argv: Optional[Sequence[str]] = None) -> BenchConfig:
    """Parses the command line into a `BenchConfig` (see `--help`).

    Raises:
      SystemExit: a bad flag value (argparse's usage error names it).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=common.DEFAULT_DATA_DIR, help="dataset root with metadata.json")
    parser.add_argument("--runs", type=int, help="measured runs per variant (default %d; --quick %d)"
                        % (FULL_RUNS, QUICK_RUNS))
    parser.add_argument("--batches", type=int, help="timed batches per run (default %d; --quick %d)"
                        % (FULL_BATCHES, QUICK_BATCHES))
    parser.add_argument("--warmup", type=int, help="warm-up batches, not timed (default %d; --quick %d)"
                        % (FULL_WARMUP, QUICK_WARMUP))
    parser.add_argument("--cache_epochs", type=int, help="epochs of the cache rows (default %d; --quick %d)"
                        % (FULL_CACHE_EPOCHS, QUICK_CACHE_EPOCHS))
    parser.add_argument("--batch_size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--variants", default=",".join(VARIANTS_BY_NAME),
                        help="comma-separated rows; %r is always measured" % REFERENCE)
    parser.add_argument("--quick", action="store_true", help="a short run (smaller defaults)")
    parser.add_argument("--results_dir", default=common.RESULTS_DIR)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--split_dir", help=argparse.SUPPRESS)
    parser.add_argument("--pipe_base_dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {"runs": QUICK_RUNS if quick else FULL_RUNS, "batches": QUICK_BATCHES if quick else FULL_BATCHES,
                "warmup": QUICK_WARMUP if quick else FULL_WARMUP,
                "cache_epochs": QUICK_CACHE_EPOCHS if quick else FULL_CACHE_EPOCHS}
    values = {key: getattr(args, key) if getattr(args, key) is not None else default
              for key, default in defaults.items()}
    minimum = {"runs": 1, "batches": 1, "warmup": 0, "cache_epochs": 2}
    for key, value in values.items():
        if value < minimum[key]:
            parser.error("--%s must be >= %d, got %d" % (key, minimum[key], value))
    if args.batch_size < 1:
        parser.error("--batch_size must be >= 1, got %d" % args.batch_size)
    names = [name for name in args.variants.split(",") if name]
    unknown = [name for name in names if name not in VARIANTS_BY_NAME]
    if unknown:
        parser.error("--variants: unknown %s; known: %s" % (", ".join(map(repr, unknown)),
                                                            ", ".join(VARIANTS_BY_NAME)))
    variants = (REFERENCE,) + tuple(dict.fromkeys(name for name in names if name != REFERENCE))
    if not files.is_dataset_root(args.data_dir):
        parser.error("--data_dir %r is not a dataset root (no metadata.json); make one with "
                     "`python -m dataprep.synthetic`" % args.data_dir)
    return BenchConfig(data_dir=args.data_dir, batch_size=args.batch_size, variants=variants,
                       results_dir=args.results_dir, one=args.one, split_dir=args.split_dir,
                       pipe_base_dir=args.pipe_base_dir, **values)


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
        while offsets[-1] + formats.TFRECORD_LENGTH_BYTES <= len(data):
            (length,) = struct.unpack_from("<Q", data, offsets[-1])
            offsets.append(offsets[-1] + formats.TFRECORD_FRAMING_BYTES + length)
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


# --- one measured run (child process) -----------------------------------------------
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
                .batch(formats.READ_CHUNK_RECORDS),
                cycle_length=min(len(paths), formats.DEFAULT_PARALLEL_READS),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
        return (records.batch(config.batch_size, drop_remainder=True)
                .map(decode, num_parallel_calls=tf.data.AUTOTUNE).repeat().prefetch(tf.data.AUTOTUNE))
    options: Dict[str, Any] = {}
    if variant.num_parallel_reads is not None:
        options["num_parallel_reads"] = variant.num_parallel_reads
    source: Union[str, Sequence[str]] = paths
    if variant.files == FILES_SPLIT:
        split_dir = config.split_dir
        if split_dir is None:
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


def run_one(config: BenchConfig) -> dict:
    """Measures one run of `config.one` in this process.

    Returns:
      `examples_per_sec`, `cpu_us_per_example`, `peak_rss_mb`, `timed_batches`
      and, for per-epoch rows, `rss_mb_per_epoch` (resident memory after each
      epoch) and `rss_mb_before` (before the first batch).

    Raises:
      RuntimeError: the dataset ended before any timed batch.
    """
    import psutil
    import tensorflow as tf

    if config.one is None:
        raise ValueError("run_one measures the row named by `one`, which is not set")
    variant = VARIANTS_BY_NAME[config.one]
    num_epochs, per_epoch = planned_epochs(variant, config)
    # Per-epoch rows plan both; the others leave them None (the dataset repeats without end).
    epochs_read, batches_per_epoch = num_epochs or 0, per_epoch or 0
    warmup = batches_per_epoch if variant.per_epoch else config.warmup
    limit = None if variant.per_epoch else warmup + config.batches
    process = psutil.Process()
    with tf.Graph().as_default():
        iterator = tf.compat.v1.data.make_initializable_iterator(build_dataset(variant, config, num_epochs))
        step = tf.group(tf.nest.flatten(iterator.get_next()))
        with tf.compat.v1.Session() as session:
            session.run(iterator.initializer)
            rss_before = process.memory_info().rss / MIB
            rss_per_epoch: List[float] = []
            count, start_wall, start_cpu = 0, time.perf_counter(), time.process_time()
            while limit is None or count < limit:
                try:
                    session.run(step)
                except tf.errors.OutOfRangeError:
                    break
                count += 1
                if count == warmup:
                    start_wall, start_cpu = time.perf_counter(), time.process_time()
                if variant.per_epoch and count % batches_per_epoch == 0 and len(rss_per_epoch) < epochs_read:
                    rss_per_epoch.append(process.memory_info().rss / MIB)
            wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
    timed = count - warmup
    if timed < 1:
        raise RuntimeError("variant %s: the dataset ended after %d batch(es), within the %d warm-up "
                           "batches" % (variant.name, count, warmup))
    examples = timed * config.batch_size
    result: Dict[str, object] = {"examples_per_sec": examples / wall,
                                 "cpu_us_per_example": cpu / examples * MICROSECONDS,
                                 "peak_rss_mb": common.peak_rss_mb(), "timed_batches": timed}
    if variant.per_epoch:
        result.update(rss_mb_before=rss_before, rss_mb_per_epoch=rss_per_epoch)
    return result


# --- the whole benchmark (parent process) ---------------------------------------------
def child_args(config: BenchConfig, name: str, split_dir: str, pipe_base_dir: str) -> List[str]:
    """The command line of the child process measuring `name` once."""
    return ["-m", "benchmarks.input_speed", "--data_dir", config.data_dir, "--batches", str(config.batches),
            "--warmup", str(config.warmup), "--cache_epochs", str(config.cache_epochs),
            "--batch_size", str(config.batch_size), "--variants", REFERENCE, "--one", name,
            "--split_dir", split_dir, "--pipe_base_dir", pipe_base_dir]


def measure(config: BenchConfig, name: str, split_dir: str, pipe_base_dir: str) -> dict:
    """Runs one measurement of `name` in a fresh process (with a Pipe-mode feeder when it needs one)."""
    from input_pipeline import pipe, pipe_feeder
    args = child_args(config, name, split_dir, pipe_base_dir)
    # The child imports this package whatever the working directory.
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))}
    variant = VARIANTS_BY_NAME[name]
    if not variant.pipe:
        return common.run_json_subprocess(args, timeout=CHILD_TIMEOUT_S, env=env)
    epochs, _ = planned_epochs(variant, config)
    if epochs is None:
        raise RuntimeError("the Pipe row %s planned no epochs" % name)
    channels = {PIPE_CHANNEL: train_files(config.data_dir, variant.data_format)}
    env[pipe.BASE_DIR_ENV] = pipe_base_dir
    with pipe_feeder.PipeFeeder(pipe_base_dir, channels, epochs=epochs):
        return common.run_json_subprocess(args, timeout=CHILD_TIMEOUT_S, env=env)


def run_all(config: BenchConfig) -> Tuple[Dict[str, Dict[str, list]], Tuple[float, float]]:
    """Measures every variant `config.runs` times, interleaved.

    Returns:
      `(results, load)`: variant name -> measurement -> one value per run,
      and the machine's 1-minute load average at the start and at the end.
    """
    results: Dict[str, Dict[str, list]] = {name: {} for name in config.variants}
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="input_pipeline_benchmark_") as work:
        split_dir, pipe_base_dir = os.path.join(work, "split"), os.path.join(work, "sagemaker")
        if any(VARIANTS_BY_NAME[name].files == FILES_SPLIT for name in config.variants):
            split_tfrecords(train_files(config.data_dir, formats.TFRECORD), split_dir, SPLIT_PARTS)
        for run in range(config.runs):
            for name in config.variants:
                out = measure(config, name, split_dir, pipe_base_dir)
                for key, value in out.items():
                    results[name].setdefault(key, []).append(value)
                print("run %d %-22s %9.0f examples/sec %6.2f us CPU/example %6.0f MiB" % (
                    run, name, out["examples_per_sec"], out["cpu_us_per_example"], out["peak_rss_mb"]),
                    file=sys.stderr)
    return results, (load_at_start, os.getloadavg()[0])


# --- report ----------------------------------------------------------------------
def _median(results: dict, name: str, key: str = "examples_per_sec") -> Optional[float]:
    if name not in results:
        return None
    return _measured(results, name, key)


def _measured(results: dict, name: str, key: str = "examples_per_sec") -> float:
    """The median of a row that was measured."""
    return common.Stats(results[name][key]).median


def targets(results: dict) -> List[Tuple[str, Optional[float], str, str, Optional[bool]]]:
    """`(target, measured, unit, format spec, met)` of each target.

    `measured` and `met` are None when a row the target needs was not measured.
    """
    tfrecord, libsvm = _median(results, REFERENCE), _median(results, formats.LIBSVM.name)
    scalar = _median(results, "libsvm_scalar_map")
    rows = [("vectorized TFRecord >= %s examples/sec" % format(TARGET_TFRECORD_EXAMPLES_PER_SEC, ","),
             tfrecord, "examples/sec", ",.0f",
             None if tfrecord is None else tfrecord >= TARGET_TFRECORD_EXAMPLES_PER_SEC)]
    over_scalar = tfrecord / scalar if tfrecord is not None and scalar else None
    rows.append(("vectorized TFRecord >= %gx scalar LibSVM" % TARGET_VECTORIZED_OVER_SCALAR, over_scalar, "x",
                 ".1f", None if over_scalar is None else over_scalar >= TARGET_VECTORIZED_OVER_SCALAR))
    slowdown = tfrecord / libsvm if tfrecord is not None and libsvm else None
    rows.append(("vectorized LibSVM within %gx of TFRecord" % TARGET_LIBSVM_SLOWDOWN, slowdown, "x slower", ".2f",
                 None if slowdown is None else slowdown <= TARGET_LIBSVM_SLOWDOWN))
    return rows


def memory_table(results: dict, config: BenchConfig) -> str:
    """Resident memory after each epoch of the per-epoch rows (median over runs)."""
    names = [name for name in config.variants if VARIANTS_BY_NAME[name].per_epoch]
    if not names:
        return ""
    header = (["row", "before (MiB)"] + ["epoch %d" % (e + 1) for e in range(config.cache_epochs)]
              + ["growth per epoch after the first (MiB)"])
    rows = []
    for name in names:
        runs = results[name]["rss_mb_per_epoch"]
        per_epoch = [common.Stats([run[e] for run in runs if len(run) > e]).median
                     for e in range(config.cache_epochs)]
        growth = (per_epoch[-1] - per_epoch[0]) / (len(per_epoch) - 1)
        rows.append([name, "%.0f" % _measured(results, name, "rss_mb_before")]
                    + ["%.0f" % value for value in per_epoch] + ["%+.1f" % growth])
    return common.markdown_table(header, rows)


def profile_text(results: dict) -> str:
    """Where the time goes, from the reference and profile rows (CPU per example, medians)."""
    cpu = {name: _measured(results, name, "cpu_us_per_example") for name in results}
    speed = {name: _measured(results, name) for name in results}
    lines = []
    for data_format in formats.names():
        full, decode = cpu.get(data_format), cpu.get("decode_" + data_format)
        if full is not None and decode is not None:
            lines.append("- %s: the default pipeline costs %.2f us of CPU per example; its decode alone %.2f us "
                         "(%.0f%%), reading, interleaving and batching the rest, %.2f us."
                         % (data_format, full, decode, 100.0 * decode / full, full - decode))
    if "bare_chunked" in results and "bare_sequential" in results:
        lines.append(
            "- TFRecord reading: bare TFRecordDataset %s examples/sec (%.2f us CPU/example); the chunked "
            "interleave without accounting %s (%.2f us); the default with the damaged-file accounting %s "
            "(%.2f us). The accounting costs %.2f us of CPU per example (%.0f%% of the default's CPU)."
            % (format(speed["bare_sequential"], ",.0f"), cpu["bare_sequential"],
               format(speed["bare_chunked"], ",.0f"), cpu["bare_chunked"], format(speed[REFERENCE], ",.0f"),
               cpu[REFERENCE], cpu[REFERENCE] - cpu["bare_chunked"],
               100.0 * (cpu[REFERENCE] - cpu["bare_chunked"]) / cpu[REFERENCE]))
        lines.append("- The chunked parallel interleave itself costs %.2f us of CPU per example over reading the "
                     "files one after the other." % (cpu["bare_chunked"] - cpu["bare_sequential"]))
    decode_libsvm, tfrecord = cpu.get("decode_libsvm"), cpu.get(REFERENCE)
    if decode_libsvm is not None and tfrecord is not None and "libsvm" in results:
        lines.append(
            "- LibSVM against TFRecord: %.1fx the CPU per example (%.2f against %.2f us), %.1fx slower in "
            "examples/sec. The LibSVM decode must check the line grammar, split each line into %d tokens and "
            "convert them from text, where parse_example reads binary numbers; the decode alone costs %.2f us, "
            "%s %gx the whole TFRecord pipeline's %.2f us, so while the pipeline is CPU-bound the %gx target %s."
            % (cpu["libsvm"] / tfrecord, cpu["libsvm"], tfrecord, speed[REFERENCE] / speed["libsvm"],
               1 + 2 * schema.FIELD_SIZE, decode_libsvm,
               "more than" if decode_libsvm > TARGET_LIBSVM_SLOWDOWN * tfrecord else "less than",
               TARGET_LIBSVM_SLOWDOWN, tfrecord, TARGET_LIBSVM_SLOWDOWN,
               "cannot be met by a faster pipeline around the same decode"
               if decode_libsvm > TARGET_LIBSVM_SLOWDOWN * tfrecord else "is within reach of the decode"))
    for data_format in formats.names():
        scalar = data_format + "_scalar_map"
        if data_format in results and scalar in results:
            lines.append("- %s: vectorized decode %.1fx the examples/sec of the scalar one (%.2f against %.2f us "
                         "CPU/example)." % (data_format, speed[data_format] / speed[scalar], cpu[data_format],
                                            cpu[scalar]))
    return "\n".join(lines)


def report(results: dict, config: BenchConfig, info: Dict[str, str], load: Tuple[float, float]) -> str:
    """The markdown body of the report (`load`: 1-minute load average at the start and end)."""
    stats = {name: common.Stats(results[name]["examples_per_sec"]) for name in config.variants}
    reference = stats[REFERENCE].median
    table = common.markdown_table(
        ["row", "what", "examples/sec median (min-max)", "ratio to %s" % REFERENCE, "CPU us/example",
         "peak RSS MiB"],
        [[name, VARIANTS_BY_NAME[name].description, stats[name].fmt(), "%.2f" % (stats[name].median / reference),
          "%.2f" % _measured(results, name, "cpu_us_per_example"), "%.0f" % max(results[name]["peak_rss_mb"])]
         for name in config.variants])
    target_rows = [[target, "-" if measured is None else format(measured, spec) + " " + unit,
                    "not measured" if met is None else ("yes" if met else "no")]
                   for target, measured, unit, spec, met in targets(results)]
    sections = [
        "The input pipeline alone, batch %d, on the train split of `%s` (%s rows in %d TFRecord and LibSVM "
        "shards). Graph mode as `tf.estimator` runs it: `tf.compat.v1.data.make_initializable_iterator` and a "
        "session loop running an op that depends on each batch (made, not copied into Python). %d runs per "
        "row, each a fresh process, rows interleaved; %d warm-up batches then %d timed batches per run, except "
        "the cache rows: %d epochs of %d shard, the first (which fills the cache) untimed. CPU us/example: "
        "CPU time of all the process's threads per timed example (Pipe mode: the reader only; the feeder runs "
        "in the parent process). Machine: %s cores, shared with other work while measured (1-minute load average "
        "%.2f at the start, %.2f at the end, this benchmark included)."
        % (config.batch_size, config.data_dir,
           format(train_rows(train_files(config.data_dir, formats.TFRECORD), formats.TFRECORD), ","),
           len(train_files(config.data_dir, formats.TFRECORD)), config.runs, config.warmup, config.batches,
           config.cache_epochs, CACHE_SHARDS, info["cores"], load[0], load[1]),
        table,
        "## Targets (2 cores, batch %d)\n\n" % config.batch_size
        + common.markdown_table(["target", "measured (medians)", "met"], target_rows),
    ]
    memory = memory_table(results, config)
    if memory:
        sections.append(
            "## Resident memory per epoch (cache rows, MiB, median over runs)\n\nSampled after every "
            "`rows // batch` batches (an epoch; with `cache_after_repeat` batches straddle epochs, so up to one "
            "batch early per epoch). Caching after repeat keeps every epoch again; caching before repeat keeps "
            "one copy.\n\n" + memory)
    profile = profile_text(results)
    if profile:
        sections.append("## Where the time goes (medians)\n\n" + profile)
    sections.append(NOTES + "\n\nThe chart (`%s.png`) leaves out the decode-only profile rows." % NAME)
    return "\n\n".join(sections)


def write_outputs(results: dict, load: Tuple[float, float], config: BenchConfig) -> str:
    """Writes `<results_dir>/input_pipeline.{md,json,png}`; returns the markdown body."""
    info = common.machine_info()
    body = report(results, config, info, load)
    raw = {"config": {key: value for key, value in dataclasses.asdict(config).items()
                      if key not in ("one", "split_dir", "pipe_base_dir", "results_dir")},
           "load_average_1min": {"start": load[0], "end": load[1]},
           "variants": results,
           "targets": [{"target": t, "measured": m, "met": met} for t, m, _, _, met in targets(results)]}
    common.write_report(NAME, "Input-pipeline throughput", body, info, raw, results_dir=config.results_dir)
    charted = [name for name in config.variants if VARIANTS_BY_NAME[name].kind != KIND_DECODE_ONLY]
    common.bar_chart(NAME, "Input pipeline alone, batch %d (%s cores)" % (config.batch_size, info["cores"]),
                     charted, [common.Stats(results[name]["examples_per_sec"]) for name in charted],
                     "examples/sec", TARGET_TFRECORD_EXAMPLES_PER_SEC, "TFRecord target",
                     results_dir=config.results_dir)
    return body


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark (or, with the hidden `--one`, one measurement) and returns the exit status."""
    config = parse_args(argv)
    if config.one:
        print(json.dumps(run_one(config)))
        return 0
    results, load = run_all(config)
    print(write_outputs(results, load, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
