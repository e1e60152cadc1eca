"""Builds the tf.data input pipelines of training and evaluation.

Every dataset yields `(features, labels)` batches:
`features = {schema.FEAT_IDS: int64 [B, field_size],
schema.FEAT_VALS: float32 [B, field_size]}`, `labels` float32 [B].

Order. One order, the one the best-practice text recommends:
create -> shard -> cache (optional) -> shuffle (optional) ->
batch(drop_remainder=True; a `rebatch` of chunks, see "Chunks") ->
map(vectorized decode, AUTOTUNE) -> repeat -> prefetch(AUTOTUNE). The cache holds the undecoded records of one pass: it
comes before shuffle (after it, every epoch would replay the first epoch's
order) and before repeat (after it, the cache would store every epoch again
and its memory grow by one copy of the data per epoch). No other order can be
asked for. `DatasetBuilder.records` and `DatasetBuilder.decode_batch` are
the parts a caller needs to build one anyway: `benchmarks/input_speed_variants.py`
builds the slow orders the text warns against (a scalar map before batch, no
prefetch, cache after repeat) from them, to measure them.

Chunks. In File mode the format reads each file in chunks of records
(`format_base.READ_CHUNK_RECORDS`). Without a shuffle and without sharding by
records, the chunks go on as they are (through the cache, which then holds
chunks) and `Dataset.rebatch` cuts them into the batches: the same batches,
in the same order, as single records batched, without a tf.data element per
record. A shuffle or a shard by records needs single records, and gets them.

Packed records. A format whose records hold several rows each
(`DataFormat.packed`: packed TFRecord) is decoded before its rows are
batched: create -> cache (optional; the undecoded records) -> map(decode,
AUTOTUNE) -> shard rows (when sharding by records) -> shuffle (optional;
single rows) or `rebatch` -> repeat -> prefetch. Sharding by records keeps
rows `index`, `index + num`, ... of the pass, as single-row records sharded
would, so the shards and the step budget are the same; every such pipeline
then reads and decodes every record, and a cache holds all of them.

Formats. Everything that differs between TFRecord and LibSVM (reading,
decoding, row counting, options, whether Pipe mode carries it) is the
`input_pipeline.format_base.DataFormat` in `PipelineConfig.data_format`; this
module never compares format names.

Tracing. Every function this package and the strategies give `tf.data` (a
decode, a scan, a filter) is marked `tf.autograph.experimental.do_not_convert`:
it holds no Python control flow on tensors (`tf.cond` where it branches), so
it is traced as written. AutoGraph would convert each again in every
process: 16 conversions, 0.66 s of a two-step `single` job's 8.4 s under
cProfile, at each start of every training process.

Create. In File mode the files are read by the format's
`DataFormat.records`: in parallel, in chunks, by a deterministic interleave,
so every pipeline sees the records in the same order and sharding by records
gives disjoint shards (see `input_pipeline.format_base`). In Pipe mode the
records come from `input_pipeline.pipe.open_channel`, for formats Pipe mode
can carry (TFRecord).

Sharding. `DatasetBuilder.__call__` takes a `tf.distribute.InputContext`
and reads shard `input_pipeline_id` of `num_input_pipelines`. In File mode
whole files are dealt out (`files[id::num]`) when there are at least as many
files as pipelines and the shards stay within
`sharding.FILE_SHARD_MIN_BALANCE` of each other (by metadata rows, or by
bytes when rows are unknown); otherwise each pipeline reads every file and
keeps every `num`-th record. Pipe mode always shards by records (the
strategy picks the shard count with `sharding.pipe_mode_shard`).

Step budget. `steps_per_epoch` is the number of full batches the SMALLEST
shard yields in one epoch: `min over shards of (rows in shard // batch)`,
where a shard's rows are the sum of its files' rows (files dealt out) or
`total // num` rows for every shard (records dealt out; the first
`total % num` shards have one more). Giving every worker
`steps_per_epoch * num_epochs` steps keeps synchronous workers (Horovod) in
step: a worker whose shard ran out first would otherwise wait for the others
forever. The rows come from the dataset root's metadata (or from the
`row_counts` passed in), else from counting the files' rows once; in Pipe
mode, without row counts, the budget is unknown (None). Rows
dropped as bad (`skip_bad_records`, `max_corrupted_records`) are not known in
advance, so a budget computed from metadata may then exceed what a shard
yields; with `num_epochs=None` the dataset never runs out and the step
budget alone ends training.

Bad records. LibSVM: see `input_pipeline.decoders` (errors name `file:line`;
`skip_bad_records` drops and warns). TFRecord: a corrupt or truncated file
stops the pipeline with an error naming it, or with
`max_corrupted_records = N > 0` up to N of them per pass are skipped with a
warning (see `input_pipeline.format_tfrecord`).

Caching. `cache="memory"` is refused when the cached data is estimated (from
the file sizes of this pipeline's share) above `memory_budget_bytes`; a path
prefix caches to files instead, named with the prefix, a digest of the input
(files, sizes, modification times, order, format and its options) and the
shard, so caches of different inputs or shards never mix.

Input mode. `INPUT_MODES` is the one definition of File and Pipe mode, and
`PipelineConfig.input_mode` the one setting: strategies carry no input mode
of their own (they tell Pipe mode by their `train_channels`).
"""

import dataclasses
import hashlib
import os
import time
from typing import Callable, Mapping, Optional, Sequence, Tuple, Union

import tensorflow as tf
from absl import logging

from cli import config_flags
from input_pipeline import files, format_base, formats, pipe, schema, sharding

INPUT_MODE_FILE = "file"
INPUT_MODE_PIPE = "pipe"
INPUT_MODES = (INPUT_MODE_FILE, INPUT_MODE_PIPE)
CACHE_IN_MEMORY = "memory"

SHARD_NONE = "none"
SHARD_BY_FILES = "files"
SHARD_BY_RECORDS = "records"

DEFAULT_MEMORY_BUDGET_BYTES = 2 << 30
DEFAULT_READ_BUFFER_BYTES = 1 << 20
DIGEST_CHARS = 12


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """How to read, shard, cache, shuffle, batch and decode the input.

    Attributes:
      data_format: the `format_base.DataFormat` (a name is accepted and parsed
        into the format); Pipe mode needs one it can carry (TFRecord).
      field_size: ids per example.
      shuffle_buffer: examples in the shuffle buffer; 0 for no shuffle.
      cache: None, `"memory"`, or a file path prefix to cache to.
      memory_budget_bytes: the largest estimated data `cache="memory"` may
        hold.
      num_parallel_reads: files read at once (File mode);
        `tf.data.AUTOTUNE` reads up to `format_base.DEFAULT_PARALLEL_READS`.
      read_buffer_bytes: read buffer of each open file.
      seed: shuffle seed; None for a different order every run.
      skip_bad_records: an option of LibSVM (refused for other formats): drop
        bad lines (with a warning) instead of failing; a batch that dropped
        lines comes out shorter, so the batch dimension is no longer static.
      max_corrupted_records: an option of TFRecord (refused for other
        formats when set): corrupt or truncated files skipped per pass
        before failing; 0 fails on the first.
      input_mode: one of `INPUT_MODES`.
      pipe_base_dir: SageMaker's base directory (Pipe mode), by default
        `$SAGEMAKER_BASE_DIR` or `/opt/ml`.
      pipe_timeout_s: how long Pipe mode waits for each epoch's FIFO.
      drop_remainder: drop each epoch's last, partial batch (keeps the batch
        dimension static); False for evaluation, which should see every row.
      autotune: run tf.data's autotuning thread (`tf.data.Options.autotune`).
        Off by default: in TensorFlow 2.14 that thread can miss the
        cancellation when the iterator is destroyed and sleep out its period
        (up to 60 s), which holds up the closing of every training session.
        Without it, the `tf.data.AUTOTUNE` values start at tf.data's defaults
        (as many parallel calls as cores) and the prefetch buffer still grows
        as the consumer waits.
    """

    data_format: format_base.DataFormat = config_flags.field(
        formats.TFRECORD, "Format of the data files.", choices=formats.names())
    field_size: int = schema.FIELD_SIZE
    shuffle_buffer: int = config_flags.field(0, "Shuffle buffer in examples; 0 for no shuffle.")
    cache: Optional[str] = config_flags.field(
        None, "Cache the decoded-ready records: '%s' or a file path prefix." % CACHE_IN_MEMORY)
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES
    num_parallel_reads: int = tf.data.AUTOTUNE
    read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES
    # --seed is also `deepfm.config.TrainConfig.seed`: the graph's seed and the shuffle's.
    seed: Optional[int] = config_flags.field(None, "Random seed of the graph.")
    skip_bad_records: bool = config_flags.field(False, "Skip malformed LibSVM lines instead of failing.")
    max_corrupted_records: int = 0
    input_mode: str = config_flags.field(INPUT_MODE_FILE, "File mode or SageMaker Pipe mode.", choices=INPUT_MODES)
    pipe_base_dir: str = dataclasses.field(default_factory=pipe.default_base_dir)
    pipe_timeout_s: float = pipe.DEFAULT_FIFO_TIMEOUT_S
    drop_remainder: bool = True
    autotune: bool = config_flags.field(
        False, "Run tf.data's autotuning thread on the input. Off: in TensorFlow 2.14 it can hold up the end of "
        "each training session by up to 60 s.", flag="input_autotune")

    def __post_init__(self):
        # The dataclass is frozen: the parsed format replaces the name once, here.
        object.__setattr__(self, "data_format", formats.as_format(self.data_format))
        if self.input_mode not in INPUT_MODES:
            raise ValueError("input_mode must be one of %s, got %r"
                             % (", ".join(INPUT_MODES), self.input_mode))
        if self.input_mode == INPUT_MODE_PIPE:
            formats.check_pipe_mode(self.data_format)
        formats.check_options(self.data_format, self)
        for name in ("field_size", "read_buffer_bytes", "memory_budget_bytes"):
            if getattr(self, name) < 1:
                raise ValueError("%s must be >= 1, got %r" % (name, getattr(self, name)))
        if self.shuffle_buffer < 0:
            raise ValueError("shuffle_buffer must be >= 0, got %r" % self.shuffle_buffer)
        if self.num_parallel_reads != tf.data.AUTOTUNE and self.num_parallel_reads < 1:
            raise ValueError("num_parallel_reads must be >= 1 or tf.data.AUTOTUNE (%d), got %r"
                             % (tf.data.AUTOTUNE, self.num_parallel_reads))
        if self.pipe_timeout_s <= 0:
            raise ValueError("pipe_timeout_s must be > 0, got %r" % self.pipe_timeout_s)
        if self.cache is not None and not self.cache:
            raise ValueError("cache must be None, %r or a file path prefix, got ''" % CACHE_IN_MEMORY)


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """What one input pipeline reads.

    Attributes:
      unit: `none`, `files` (whole files dealt out) or `records`.
      num_shards: input pipelines in all.
      index: this pipeline's shard.
      files: the files this pipeline opens (File mode).
      rows_per_shard: rows of every shard, or None when unknown.
    """

    unit: str
    num_shards: int
    index: int
    files: Tuple[str, ...]
    rows_per_shard: Optional[Tuple[int, ...]]


Source = Union[str, Sequence[str]]


def with_options(dataset: tf.data.Dataset, config: PipelineConfig) -> tf.data.Dataset:
    """`dataset` with this package's `tf.data` options: autotuning as `config.autotune` says, no auto-sharding.

    The builder shards its input itself, so a strategy must not shard it again.
    """
    options = tf.data.Options()
    options.autotune.enabled = config.autotune
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)


class DatasetBuilder:
    """Builds the dataset of one input pipeline; see the module docstring.

    Args:
      source: File mode: the files to read (e.g. from `files.resolve`);
        Pipe mode: the channel name.
      config: the pipeline configuration.
      batch_size: examples per batch of this pipeline (the strategy has
        already scaled it).
      num_epochs: passes over the data; None repeats forever.
      row_counts: rows per file (File mode) or of the channel's files (Pipe
        mode); by default (File mode) read from the dataset root's metadata.
      metadata: the dataset's metadata where the caller read it already
        (`input_pipeline.dataset.Dataset`, with `row_counts`); by default
        found beside the files.

    Raises:
      ValueError: (at construction) a bad argument, a missing or empty file,
        a metadata `field_size` or first record that does not match
        `config.field_size`; the message names the file or value.
    """

    def __init__(self, source: Source, config: PipelineConfig, batch_size: int,
                 num_epochs: Optional[int] = 1, row_counts: Optional[Mapping[str, int]] = None,
                 metadata: Optional[schema.DatasetMetadata] = None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1, got %r" % batch_size)
        if num_epochs is not None and num_epochs < 1:
            raise ValueError("num_epochs must be >= 1 or None (forever), got %r" % num_epochs)
        self.config = config
        self.batch_size = batch_size
        self.num_epochs = num_epochs
        if config.input_mode == INPUT_MODE_PIPE:
            if not isinstance(source, str) or not source:
                raise ValueError("Pipe mode reads one channel: source must be a channel name, got %r"
                                 % (source,))
            self.channel: Optional[str] = source
            self.files: Tuple[str, ...] = ()
            self._sizes: Tuple[int, ...] = ()
            self._fingerprint: Tuple = ()
            self._rows = dict(row_counts) if row_counts is not None else None
            return
        if isinstance(source, str):
            raise ValueError("File mode takes a list of files, got the string %r; turn specs into files "
                             "with input_pipeline.files.resolve" % source)
        self.channel = None
        self.files = tuple(source)
        if not self.files:
            raise ValueError("no input files")
        for path in self.files:
            if not os.path.isfile(path):
                raise ValueError("input file %s does not exist" % path)
        stats = [os.stat(path) for path in self.files]
        self._sizes = tuple(stat.st_size for stat in stats)
        # What the file cache's name digests: the input as it was when the builder was made.
        self._fingerprint = tuple((os.path.abspath(path), stat.st_size, stat.st_mtime_ns)
                                  for path, stat in zip(self.files, stats))
        for path, size in zip(self.files, self._sizes):
            if size == 0:
                raise ValueError("input file %s is empty (0 bytes)" % path)
        if row_counts is None:
            row_counts = files.row_counts(self.files, config.data_format)
        if row_counts is None:
            # Files outside a dataset root (a SageMaker channel holds only its
            # split): count their rows once, so the step budget stays known.
            start = time.monotonic()
            row_counts = files.count_rows(self.files, config.data_format)
            logging.info("counted the rows of %d file(s) without metadata: %d rows in %.1f s",
                         len(self.files), sum(row_counts.values()), time.monotonic() - start)
        if row_counts is not None:
            missing = [path for path in self.files if path not in row_counts]
            if missing:
                raise ValueError("row_counts has no entry for %s" % ", ".join(missing))
        self._rows = dict(row_counts) if row_counts is not None else None
        self._check_field_size(metadata)

    def _check_field_size(self, metadata: Optional[schema.DatasetMetadata]) -> None:
        where = "the metadata of %s" % self.files[0]
        if metadata is None:
            path = schema.find_metadata(self.files[0])
            metadata = schema.load_metadata(path) if path is not None else None
            where = path or where
        if metadata is not None and metadata.field_size != self.config.field_size:
            raise ValueError("%s says field_size=%d, the pipeline is configured with field_size=%d"
                             % (where, metadata.field_size, self.config.field_size))
        self.config.data_format.check_first_record(self.files[0], self.config.field_size)

    # --- public interface ----------------------------------------------------
    def __call__(self, input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
        """Builds the dataset of the pipeline `input_context` names.

        Args:
          input_context: the shard to read; None reads everything.

        Returns:
          A `tf.data.Dataset` of `(features, labels)` batches.

        Raises:
          ValueError: `cache="memory"` and the data is estimated larger than
            `memory_budget_bytes`, or a bad input context.
        """
        plan = self.shard_plan(input_context)
        self._check_cache_memory(plan)
        logging.info("Input pipeline %d of %d: sharded by %s, %d file(s), %s rows, cache %s, shuffle buffer %d",
                     plan.index, plan.num_shards, plan.unit, len(plan.files),
                     "unknown" if plan.rows_per_shard is None else plan.rows_per_shard[plan.index],
                     self.config.cache, self.config.shuffle_buffer)
        suggestion = self.config.data_format.suggestion(self.files, self.config.field_size) if self.files else None
        if suggestion:
            logging.info("%s", suggestion)
        if self.config.data_format.packed:
            dataset = self._packed_batches(plan)
        else:
            dataset = self._batches(plan)
        return with_options(dataset.repeat(self.num_epochs).prefetch(tf.data.AUTOTUNE), self.config)

    def _batches(self, plan: ShardPlan) -> tf.data.Dataset:
        """Records of one row each: shard, cache, shuffle, batch (or rebatch chunks), decode."""
        chunked = self._reads_chunks(plan)
        dataset = self._records(plan, chunked)
        if self.config.cache is not None:
            dataset = dataset.cache(self._cache_filename(plan, chunked))
        if self.config.shuffle_buffer:
            dataset = dataset.shuffle(self.config.shuffle_buffer, seed=self.config.seed,
                                      reshuffle_each_iteration=True)
        if chunked:
            dataset = dataset.rebatch(self.batch_size, drop_remainder=self.config.drop_remainder)
        else:
            dataset = dataset.batch(self.batch_size, drop_remainder=self.config.drop_remainder)
        return dataset.map(tf.autograph.experimental.do_not_convert(self.decode_batch),
                           num_parallel_calls=tf.data.AUTOTUNE)

    def _packed_batches(self, plan: ShardPlan) -> tf.data.Dataset:
        """Records of several rows each (see "Packed records"): cache, decode, shard rows, shuffle, rebatch."""
        # Pipe mode gives single records; File mode the format's chunks (one record each).
        records = self._read(plan, chunked=True)
        if self.channel is not None:
            records = records.batch(1)
        if self.config.cache is not None:
            records = records.cache(self._cache_filename(plan, chunked=True))
        rows = records.map(tf.autograph.experimental.do_not_convert(self.decode_batch),
                           num_parallel_calls=tf.data.AUTOTUNE)
        if plan.unit == SHARD_BY_RECORDS:
            rows = rows.scan(tf.constant(0, tf.int64), _every_nth_row(plan.num_shards, plan.index))
        if self.config.shuffle_buffer:
            return rows.unbatch().shuffle(self.config.shuffle_buffer, seed=self.config.seed,
                                          reshuffle_each_iteration=True).batch(
                                              self.batch_size, drop_remainder=self.config.drop_remainder)
        return rows.rebatch(self.batch_size, drop_remainder=self.config.drop_remainder)

    def records(self, input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
        """The undecoded records of the pipeline `input_context` names, one pass.

        Created and sharded as `__call__` does, nothing more: for a caller
        that builds another order (see "Order" in the module docstring).

        Returns:
          A dataset of records: TFRecord, a scalar `tf.string`; LibSVM,
          `(line, file index, line number)`. `decode_batch` decodes a batch
          of them.
        """
        return self._records(self.shard_plan(input_context))

    def input_fn(self) -> Callable[..., tf.data.Dataset]:
        """An Estimator `input_fn(params=None, input_context=None)` returning the dataset."""

        def input_fn(params=None, input_context=None):
            del params  # The builder holds its configuration.
            return self(input_context)

        return input_fn

    def steps_per_epoch(self, input_context: Optional[tf.distribute.InputContext] = None) -> Optional[int]:
        """Full batches the smallest shard yields per epoch; None when rows are unknown.

        See "Step budget" in the module docstring.
        """
        rows = self.shard_plan(input_context).rows_per_shard
        if rows is None:
            return None
        return min(rows) // self.batch_size

    def shard_plan(self, input_context: Optional[tf.distribute.InputContext] = None) -> ShardPlan:
        """What the pipeline of `input_context` reads (see "Sharding")."""
        num_shards, index = 1, 0
        if input_context is not None:
            num_shards, index = input_context.num_input_pipelines, input_context.input_pipeline_id
        if num_shards < 1 or not 0 <= index < num_shards:
            raise ValueError("input pipeline %d of %d does not exist" % (index, num_shards))
        if self.channel is not None:
            unit = SHARD_BY_RECORDS if num_shards > 1 else SHARD_NONE
            rows = None
            if self._rows is not None:
                rows = tuple(sharding.rows_per_shard([sum(self._rows.values())], num_shards, by_files=False))
            return ShardPlan(unit, num_shards, index, (), rows)
        row_list = [self._rows[path] for path in self.files] if self._rows is not None else None
        if num_shards == 1:
            unit = SHARD_NONE
        elif sharding.files_balanced(row_list if row_list is not None else self._sizes, num_shards):
            unit = SHARD_BY_FILES
        else:
            unit = SHARD_BY_RECORDS
        by_files = unit == SHARD_BY_FILES
        shard_files = self.files[index::num_shards] if by_files else self.files
        rows = None
        if row_list is not None:
            rows = tuple(sharding.rows_per_shard(row_list, num_shards, by_files))
        return ShardPlan(unit, num_shards, index, shard_files, rows)

    def estimated_cache_bytes(self, plan: ShardPlan) -> Optional[int]:
        """Bytes one pass of `plan`'s pipeline puts in the cache; None if unknown (Pipe mode).

        The cache holds undecoded records, about their files' size.
        """
        if self.channel is not None:
            return None
        size = {path: size for path, size in zip(self.files, self._sizes)}
        estimate = sum(size[path] for path in plan.files)
        # Packed records are cached whole and their rows sharded after the cache.
        if plan.unit == SHARD_BY_RECORDS and not self.config.data_format.packed:
            estimate //= plan.num_shards
        return estimate

    # --- stages ----------------------------------------------------------------
    def _check_cache_memory(self, plan: ShardPlan) -> None:
        if self.config.cache != CACHE_IN_MEMORY:
            return
        estimate = self.estimated_cache_bytes(plan)
        if estimate is None:
            logging.warning("cache=%r in Pipe mode: the size of channel %r is unknown, so the cache "
                            "cannot be checked against memory_budget_bytes=%d",
                            CACHE_IN_MEMORY, self.channel, self.config.memory_budget_bytes)
            return
        what = "about %s of %d file(s) (shard %d of %d)" % (
            _bytes(estimate), len(plan.files), plan.index, plan.num_shards)
        if estimate > self.config.memory_budget_bytes:
            raise ValueError(
                "cache=%r would hold %s, more than memory_budget_bytes=%s. Cache to files with "
                "cache=<path prefix>, raise memory_budget_bytes, or leave cache unset"
                % (CACHE_IN_MEMORY, what, _bytes(self.config.memory_budget_bytes)))

    def _reads_chunks(self, plan: ShardPlan) -> bool:
        """Whether the records pass as the format's chunks up to the batch (see "Chunks")."""
        return self.channel is None and not self.config.shuffle_buffer and plan.unit != SHARD_BY_RECORDS

    def _cache_filename(self, plan: ShardPlan, chunked: bool) -> str:
        if self.config.cache == CACHE_IN_MEMORY:
            return ""
        data_format = self.config.data_format
        # Chunks and single records are different elements: their cache files never mix.
        key = [data_format.name, [getattr(self.config, option) for option in data_format.options], plan.unit,
               self.channel, self._fingerprint, chunked]
        digest = hashlib.sha1(repr(key).encode("utf-8")).hexdigest()[:DIGEST_CHARS]
        return "%s-%s-shard%dof%d" % (self.config.cache, digest, plan.index, plan.num_shards)

    def _records(self, plan: ShardPlan, chunked: bool = False) -> tf.data.Dataset:
        """Create and shard: the records of `plan`'s pipeline (in the format's chunks: `chunked`)."""
        records = self._read(plan, chunked)
        return records.shard(plan.num_shards, plan.index) if plan.unit == SHARD_BY_RECORDS else records

    def _read(self, plan: ShardPlan, chunked: bool) -> tf.data.Dataset:
        """Create: every record `plan`'s pipeline opens (in the format's chunks: `chunked`), unsharded."""
        if self.channel is not None:
            return pipe.open_channel(self.channel, self.config.pipe_base_dir, self.config.pipe_timeout_s,
                                     data_format=self.config.data_format)
        size = dict(zip(self.files, self._sizes))
        index = {path: i for i, path in enumerate(self.files)}
        read = self.config.data_format.record_chunks if chunked else self.config.data_format.records
        return read(plan.files, self.config, sizes=[size[path] for path in plan.files],
                    indices=[index[path] for path in plan.files])

    def decode_batch(self, *element):
        """Decodes a batch of `records` into `(features, labels)`."""
        return self.config.data_format.decode_batch(element, self.config, file_names=self.files)


def _every_nth_row(num_shards: int, index: int):
    """A `Dataset.scan` function keeping rows `index`, `index + num_shards`, ... of all the batches it sees."""

    @tf.autograph.experimental.do_not_convert
    def keep(first_row, batch):
        features, labels = batch
        count = tf.shape(labels, out_type=tf.int64)[0]
        kept = tf.equal((first_row + tf.range(count)) % num_shards, index)
        return first_row + count, (tf.nest.map_structure(lambda t: tf.boolean_mask(t, kept), features),
                                   tf.boolean_mask(labels, kept))

    return keep


def _bytes(count: int) -> str:
    return "%d bytes (%.1f MiB)" % (count, count / float(1 << 20))
