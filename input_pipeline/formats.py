"""The data formats, each behind one interface (`DataFormat`), registered by name.

Everything that differs between the on-disk formats of a dataset lives in
its `DataFormat`; the rest of the input pipeline asks the format object and
never compares format names::

    fmt = formats.get("libsvm")      # parsed once, at the entry point
    fmt.extension                     # ".libsvm"
    fmt.count_rows(path)              # rows of a file, read in plain Python
    fmt.records(paths, config)        # tf.data: the undecoded records of files
    fmt.batches(paths, config, 1024)  # tf.data: batches of them, without single-record elements
    fmt.decode_batch(batch, config)   # (features, labels) of a batch of records

A format is in the manner of tf.estimator's `Head` or Horovod's
`Compressor`: a stateless object; the options only one format reads
(`DataFormat.options`, fields of `pipeline.PipelineConfig`, read through
`read_options.ReadOptions`) are validated by the format (`check_options`),
and an option of another format that is set is refused. Formats:

* `TFRECORD` (`tfrecord`): one `tf.train.Example` per row; the format
  SageMaker Pipe mode carries. Option: `max_corrupted_records`.
* `TFRECORD_PACKED` (`tfrecord_packed`, files `.tfrecord-packed`): TFRecord
  whose `tf.train.Example`s hold up to `PACKED_ROWS_PER_RECORD` rows each
  (`label` [r], `ids` and `values` [r * field_size]); Pipe mode carries it
  too, and TFRecord's damage checks and option apply. The reader and the
  parser pay once per record instead of once per row; the pipeline decodes
  its records before it batches rows (`DataFormat.packed`). A file of one
  row per record reads as packed too.
* `LIBSVM` (`libsvm`): one `label id:value ...` line per row. Option:
  `skip_bad_records`. Its `suggestion` is the one command converting the
  files to TFRecord (`dataprep.libsvm_to_tfrecord`).

Reading files (`DataFormat.records`): the files are read in parallel by a
deterministic interleave with a fixed cycle length (every pipeline sees the
records in the same order, so sharding by records gives disjoint shards),
each file in chunks of `READ_CHUNK_RECORDS` records that are unbatched after
the interleave: passing single records through a parallel interleave costs
several microseconds each (8 copies of a 10,040-row Criteo TFRecord file on 2
shared cores: about 115,000 rows/s with single records, 500,000 to 600,000
with chunks). A caller that only batches the records takes
`DataFormat.batches` instead, which cuts the chunks into batches
(`Dataset.rebatch`: the same batches as unbatch then batch, with no
single-record elements in between).

TFRecord damage: TensorFlow's own error for a corrupt or truncated record does
not name the file, so each file is read with `ignore_errors` and its bytes are
counted (`TFRECORD_FRAMING_BYTES` plus the data per record); a file that
ends before its size stops the pipeline with an `InvalidArgumentError`
naming the file and the bytes read. With `max_corrupted_records = N > 0`, up
to N such files per pass are skipped instead, each with a warning on stderr
(as TFRecord framing cannot resynchronize, a corrupt record also skips the
rest of its file). A file missing when an epoch opens it fails with
TensorFlow's `NotFoundError`, which names it. This bookkeeping costs, on the
10,040-row Criteo file read, batched and decoded, about 3.3 microseconds of
CPU per row against 1.5 for a bare `TFRecordDataset` with the same decode.

LibSVM lines are read with their file index and 1-based line number, so that
a bad line's error names `file:line` (`input_pipeline.decoders`). Files of
fixed-width lines (what `dataprep.criteo` writes by default: every
file's first line has the layout of `encoders.encode_libsvm_fixed`, all of
the same length, and each file's size is a whole number of such lines) are
read in blocks of `READ_CHUNK_RECORDS` lines straight into uint8 rows, one
per line, instead of one string per line: no text line reader, no string
copies through the interleave and the batch (`decoders.decode_libsvm_rows`
decodes them; `benchmarks/criteo_convert.py` compares both ways). Any other
file set, or `skip_bad_records` (which must be able to drop one line of
another length and go on), is read line by line.

This module imports no TensorFlow when it is imported, so that the
TensorFlow-free data tools (`dataprep`) can name formats and files. The
methods that build graphs import TensorFlow and `decoders` when called, and
`encode` imports `encoders` (numpy).
"""

import abc
import os
import shlex
import struct
import sys
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from input_pipeline import schema
from input_pipeline.read_options import ReadOptions

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

# TFRecord framing: uint64 length, uint32 masked CRC of the length, the
# data, uint32 masked CRC of the data.
TFRECORD_LENGTH_BYTES = 8
TFRECORD_CRC_BYTES = 4
TFRECORD_HEADER_BYTES = TFRECORD_LENGTH_BYTES + TFRECORD_CRC_BYTES
TFRECORD_FRAMING_BYTES = TFRECORD_LENGTH_BYTES + 2 * TFRECORD_CRC_BYTES
COUNT_READ_BYTES = 1 << 20
# Files read at once when num_parallel_reads is AUTOTUNE. A fixed number
# (not the core count) keeps the record order the same on every host.
DEFAULT_PARALLEL_READS = 8
READ_CHUNK_RECORDS = 256
# Rows per record of the packed TFRecord format, as the writers write it.
PACKED_ROWS_PER_RECORD = 256
PROBE_BYTES = 1
# The longest first line read to tell whether a LibSVM file is fixed-width.
FIXED_WIDTH_PROBE_BYTES = 1 << 16
CONVERTER_MODULE = "dataprep.libsvm_to_tfrecord"

Record = Union[bytes, str]



class DataFormat(abc.ABC):
    """What differs between data formats; see the module docstring.

    Attributes:
      name: the registered name (the value of `--data_format`).
      display_name: the name in messages (`TFRecord`).
      extension: the file extension, with its dot.
      pipe_record_format: the `PipeModeDataset` record format that carries
        the format in SageMaker Pipe mode; None when Pipe mode cannot.
      options: the `PipelineConfig` fields only this format reads.
      packed: whether a record holds several rows: `decode_batch` of P
        records then yields any number of rows, so the pipeline decodes
        records before it batches rows (`input_pipeline.pipeline`).
    """

    name: str = ""
    display_name: str = ""
    extension: str = ""
    pipe_record_format: Optional[str] = None
    options: Tuple[str, ...] = ()
    packed: bool = False

    def __repr__(self) -> str:
        return "formats.get(%r)" % self.name

    def shard_name(self, index: int) -> str:
        """The file name of shard `index` in this format (`part-00003.tfrecord`)."""
        return schema.shard_stem(index) + self.extension

    def __eq__(self, other) -> bool:
        return isinstance(other, DataFormat) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self):
        # Copies and pickles are the registered object.
        return get, (self.name,)

    # --- validation ----------------------------------------------------------
    @property
    def supports_pipe_mode(self) -> bool:
        """Whether SageMaker Pipe mode can carry the format."""
        return self.pipe_record_format is not None

    def check_pipe_mode(self) -> None:
        """Raises ValueError unless Pipe mode can carry the format."""
        if not self.supports_pipe_mode:
            carried = " or ".join(fmt.display_name for fmt in _REGISTRY.values() if fmt.supports_pipe_mode)
            raise ValueError("Pipe mode reads %s channels only, got data_format=%r" % (carried, self.name))

    def check_options(self, config: ReadOptions) -> None:
        """Checks the format's options in `config`; refuses another format's that is set.

        Raises:
          ValueError: an option of another format is set (the message names
            the option, its value and the format it belongs to).
        """
        for other in _REGISTRY.values():
            for option in other.options:
                value = getattr(config, option)
                if option not in self.options and value:
                    raise ValueError("%s=%r applies to %s only, got data_format=%r"
                                     % (option, value, other.display_name, self.name))

    # --- files, in plain Python ----------------------------------------------------
    @abc.abstractmethod
    def count_rows(self, path: str) -> int:
        """Rows of a file, by reading it (for files outside a dataset root).

        Raises:
          ValueError: the file is damaged so that its rows cannot be
            counted; the message names it.
        """

    @abc.abstractmethod
    def read_first_record(self, path: str) -> Record:
        """The first record of a file, undecoded.

        Raises:
          ValueError: the file holds no complete first record.
        """

    @abc.abstractmethod
    def check_first_record(self, path: str, field_size: int) -> None:
        """Checks the first record of a file without a graph.

        Raises:
          ValueError: the record does not follow the layout of
            `input_pipeline.schema` with `field_size` ids; the message names
            the file and what is wrong.
        """

    def has_labels(self, path: str) -> bool:
        """Whether the rows of `path` carry labels (by default, always)."""
        del path  # Rows of the format always carry labels.
        return True

    def suggestion(self, paths: Sequence[str], field_size: int) -> Optional[str]:
        """A log line for a pipeline reading `paths`: a faster way to read them, if any."""
        del paths, field_size  # Nothing to suggest by default.
        return None

    @abc.abstractmethod
    def encode(self, labels: "np.ndarray", ids: "np.ndarray", values: "np.ndarray") -> bytes:
        """The bytes of rows in the format, as `dataprep.writers` writes them."""

    # --- tf.data ---------------------------------------------------------------
    def records(self, paths: Sequence[str], config: ReadOptions,
                sizes: Optional[Sequence[int]] = None,
                indices: Optional[Sequence[int]] = None) -> "tf.data.Dataset":
        """The undecoded records of `paths`, one pass, read in parallel.

        Args:
          paths: the files, read in this order by a deterministic interleave.
          config: `read_buffer_bytes`, `num_parallel_reads` and the format's
            options are read from it.
          sizes: each file's size, as it was when the pipeline was built;
            by default their size now.
          indices: each file's index in the list errors name files by
            (`decode_batch`'s `file_names`); by default their position in
            `paths`.

        Returns:
          A dataset of records; `decode_batch` decodes a batch of them.
        """
        return self.record_chunks(paths, config, sizes, indices).unbatch()

    def batches(self, paths: Sequence[str], config: ReadOptions, batch_size: int,
                drop_remainder: bool = False, sizes: Optional[Sequence[int]] = None,
                indices: Optional[Sequence[int]] = None) -> "tf.data.Dataset":
        """`records(...).batch(batch_size, drop_remainder)`, without single-record elements.

        The chunks of `record_chunks` are cut into batches by
        `Dataset.rebatch`: the same batches in the same order, with one
        copy of each record and no per-record element in between.

        Args:
          paths, config, sizes, indices: as for `records`.
          batch_size: records per batch.
          drop_remainder: drop the last batch when it is short.

        Returns:
          A dataset of batches of records; `decode_batch` decodes each.
        """
        return self.record_chunks(paths, config, sizes, indices).rebatch(batch_size, drop_remainder=drop_remainder)

    def decoded_batches(self, paths: Sequence[str], config: ReadOptions, batch_size: int,
                        labelled: bool = True) -> "tf.data.Dataset":
        """Every row of `paths` once, in file order, decoded, in batches of `batch_size` (the last shorter).

        Batches of records are decoded; a `packed` format's records are
        decoded first and their rows cut into batches.

        Args:
          paths, config: as for `records`.
          batch_size: rows per batch.
          labelled: as for `decode_batch`.

        Returns:
          A dataset of what `decode_batch` returns.
        """
        import tensorflow as tf

        def decode(*batch):
            return self.decode_batch(batch, config, file_names=paths, labelled=labelled)

        if self.packed:
            return self.record_chunks(paths, config).map(decode, num_parallel_calls=tf.data.AUTOTUNE,
                                                         deterministic=True).rebatch(batch_size)
        return self.batches(paths, config, batch_size).map(decode, num_parallel_calls=tf.data.AUTOTUNE,
                                                           deterministic=True)

    def record_chunks(self, paths: Sequence[str], config: ReadOptions,
                      sizes: Optional[Sequence[int]] = None,
                      indices: Optional[Sequence[int]] = None) -> "tf.data.Dataset":
        """The records of `records`, in chunks of up to `READ_CHUNK_RECORDS` (some of them empty).

        Unbatched, they are `records`; cut by `Dataset.rebatch`, `batches`.
        Arguments as for `records`.
        """
        import tensorflow as tf

        sizes = [os.path.getsize(path) for path in paths] if sizes is None else sizes
        indices = range(len(paths)) if indices is None else indices
        files = tf.data.Dataset.from_tensor_slices((
            tf.constant(list(paths), tf.string), tf.constant(list(sizes), tf.int64),
            tf.constant(list(indices), tf.int32)))
        reads = config.num_parallel_reads
        cycle_length = min(len(paths), DEFAULT_PARALLEL_READS if reads == tf.data.AUTOTUNE else reads)
        file_chunks = self._chunk_reader(paths, sizes, config)
        chunks = files.interleave(
            lambda path, size, index: file_chunks(path, size, index, config),
            cycle_length=cycle_length, block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE if reads == tf.data.AUTOTUNE else cycle_length,
            deterministic=True)
        return self._checked(chunks, config)

    def _chunk_reader(self, paths: Sequence[str], sizes: Sequence[int], config: ReadOptions):
        """The reader of the chunks of one file, chosen for the files at hand (`_file_chunks` by default)."""
        del paths, sizes, config  # One reader for any files by default.
        return self._file_chunks

    @abc.abstractmethod
    def _file_chunks(self, path: "tf.Tensor", size: "tf.Tensor", index: "tf.Tensor",
                     config: ReadOptions) -> "tf.data.Dataset":
        """Chunks of up to `READ_CHUNK_RECORDS` records of one file."""

    def _checked(self, chunks: "tf.data.Dataset", config: ReadOptions) -> "tf.data.Dataset":
        """A check across the chunks of every file, after the interleave (none by default)."""
        del config  # No check across files by default.
        return chunks

    @abc.abstractmethod
    def decode_batch(self, batch: Tuple["tf.Tensor", ...], config: ReadOptions,
                     file_names: Sequence[str] = (), labelled: bool = True):
        """Decodes a batch of `records` (the components of the batched element).

        Args:
          batch: the batched record components.
          config: `field_size` and the format's options are read from it.
          file_names: the files the records' indices refer to (errors name
            them).
          labelled: False for rows without labels: then the features alone
            are returned.

        Returns:
          `(features, labels)`: `features = {schema.FEAT_IDS: int64 [B,
          field_size], schema.FEAT_VALS: float32 [B, field_size]}`, `labels`
          float32 [B]; the features alone when not `labelled`.
        """


class TFRecordFormat(DataFormat):
    """`tf.train.Example` records with `label`, `ids` and `values`; Pipe mode carries them."""

    name = "tfrecord"
    display_name = "TFRecord"
    extension = ".tfrecord"
    pipe_record_format = "TFRecord"
    options = ("max_corrupted_records",)

    def check_options(self, config: ReadOptions) -> None:
        super().check_options(config)
        if config.max_corrupted_records < 0:
            raise ValueError("max_corrupted_records must be >= 0, got %r" % config.max_corrupted_records)

    def count_rows(self, path: str) -> int:
        """Records, found by walking the length fields without reading the data or checking CRCs.

        Raises:
          ValueError: the file ends inside a record (the message names the
            file and the byte offset).
        """
        return sum(1 for _ in self._walk_records(path, read_data=False))

    @staticmethod
    def _walk_records(path: str, read_data: bool):
        """Yields each record's data (`read_data`) or None, walking the length fields; no CRC is checked.

        Raises:
          ValueError: the file ends inside a record (the message names the
            file and the byte offset).
        """
        size = os.path.getsize(path)
        records = 0
        offset = 0
        with open(path, "rb") as f:
            while offset < size:
                header = f.read(TFRECORD_HEADER_BYTES if read_data else TFRECORD_LENGTH_BYTES)
                if len(header) < TFRECORD_LENGTH_BYTES:
                    break
                (length,) = struct.unpack("<Q", header[:TFRECORD_LENGTH_BYTES])
                end = offset + TFRECORD_FRAMING_BYTES + length
                if end > size:
                    break
                yield f.read(length) if read_data else None
                records += 1
                offset = end
                f.seek(offset)
        if offset != size:
            raise ValueError("TFRecord file %s is truncated or corrupt: record %d at byte %d does not "
                             "end inside the file (%d bytes)" % (path, records, offset, size))

    def read_first_record(self, path: str) -> bytes:
        """The first serialized record (without its framing)."""
        with open(path, "rb") as f:
            header = f.read(TFRECORD_HEADER_BYTES)
            if len(header) < TFRECORD_HEADER_BYTES:
                raise ValueError("%s is not a TFRecord file: it ends after %d bytes, inside the "
                                 "first record's header" % (path, len(header)))
            (length,) = struct.unpack("<Q", header[:TFRECORD_LENGTH_BYTES])
            data = f.read(length)
        if len(data) < length:
            raise ValueError("%s: the first record says it holds %d bytes, the file ends after %d "
                             "(truncated, or not a TFRecord file)" % (path, length, len(data)))
        return data

    def check_first_record(self, path: str, field_size: int) -> None:
        from input_pipeline import decoders
        decoders.check_example(path, self.read_first_record(path), field_size)

    def has_labels(self, path: str) -> bool:
        """Whether the first record holds the `label` feature."""
        from input_pipeline import decoders
        return decoders.example_has_label(path, self.read_first_record(path))

    def encode(self, labels, ids, values) -> bytes:
        from input_pipeline import encoders
        return encoders.encode_tfrecord(labels, ids, values)

    def _file_chunks(self, path, size, index, config):
        """Chunks of a file's records, then an empty chunk marking its end.

        The records' bytes are counted as they pass; at the end marker a
        file read short of its size is damaged. With no corruption budget
        that fails right here; otherwise the chunk goes on with the path and
        byte counts to `_checked`, which counts damaged files across the
        whole pipeline.

        `ignore_errors` retries a reader that cannot open its file for ever,
        so the file is first opened by a one-byte probe outside it: a missing
        file fails with TensorFlow's `NotFoundError`, which names it.
        """
        import tensorflow as tf

        from input_pipeline import decoders

        empty = tf.zeros([0], tf.string)
        probe = tf.data.FixedLengthRecordDataset(path, record_bytes=PROBE_BYTES, buffer_size=PROBE_BYTES)
        probe = probe.take(1).filter(lambda byte: False).map(lambda byte: empty)
        records = tf.data.TFRecordDataset(path, buffer_size=config.read_buffer_bytes)
        # `batch` never yields an empty chunk, so the empty one marks the end.
        body = records.ignore_errors().batch(self._records_per_chunk())
        end = tf.data.Dataset.from_tensors(empty)
        budget = config.max_corrupted_records

        def account(consumed, chunk):
            consumed += tf.reduce_sum(tf.cast(tf.strings.length(chunk), tf.int64) + TFRECORD_FRAMING_BYTES)
            at_end = tf.equal(tf.size(chunk), 0)
            unread = tf.where(at_end, size - consumed, tf.constant(0, tf.int64))
            element = self._chunk_element(chunk, index)
            if budget:
                return consumed, (element, path, consumed, unread)
            check = tf.cond(tf.equal(unread, 0), tf.no_op, lambda: decoders.raise_error(
                tf.strings.join([_damage_report(path, consumed, unread, budget),
                                 " (a larger max_corrupted_records skips damaged files)"])))
            with tf.control_dependencies([check]):
                return consumed, tf.nest.map_structure(tf.identity, element)

        return probe.concatenate(body).concatenate(end).scan(tf.constant(0, tf.int64), account)

    def _records_per_chunk(self) -> int:
        """Records per chunk of `_file_chunks`."""
        return READ_CHUNK_RECORDS

    def _chunk_element(self, chunk, index):
        """What a chunk of records passes on as: the records alone (byte damage names the path itself)."""
        del index  # Errors name the path itself.
        return chunk

    def _checked(self, chunks, config):
        """With `max_corrupted_records`: counts damaged files; warns within it, fails beyond it."""
        import tensorflow as tf

        budget = config.max_corrupted_records
        if not budget:
            return chunks

        def count(damaged_files, element):
            chunk, path, consumed, unread = element
            damaged = tf.not_equal(unread, 0)
            damaged_files += tf.cast(damaged, tf.int64)

            def report():
                check = tf.debugging.Assert(damaged_files <= budget, [
                    _damage_report(path, consumed, unread, budget)])
                with tf.control_dependencies([check]):
                    printed = tf.print(tf.strings.join([
                        "WARNING: ", _damage_report(path, consumed, unread, budget),
                        "; skipped the rest of the file (corrupt record ", tf.strings.as_string(damaged_files),
                        " of max_corrupted_records=%d)" % budget]), output_stream=sys.stderr)
                with tf.control_dependencies([printed]):
                    return tf.identity(damaged_files)

            return tf.cond(damaged, report, lambda: damaged_files), chunk

        return chunks.scan(tf.constant(0, tf.int64), count)

    def decode_batch(self, batch, config, file_names=(), labelled=True):
        from input_pipeline import decoders
        (serialized,) = batch
        if labelled:
            return decoders.decode_tfrecord(serialized, config.field_size)
        return decoders.decode_tfrecord_features(serialized, config.field_size)


class PackedTFRecordFormat(TFRecordFormat):
    """TFRecord files of `tf.train.Example`s of up to `PACKED_ROWS_PER_RECORD` rows each.

    The TFRecord framing, its damage checks and Pipe mode are TFRecord's;
    what differs is that a record holds several rows
    (`encoders.encode_tfrecord_packed`): the reader and the parser pay once
    per record instead of once per row.
    """

    name = "tfrecord_packed"
    display_name = "packed TFRecord"
    extension = ".tfrecord-packed"
    packed = True

    def count_rows(self, path: str) -> int:
        """Rows: the labels of every record, read and parsed.

        Raises:
          ValueError: the file ends inside a record, or a record is not a
            packed `tf.train.Example` (the message names the file).
        """
        from input_pipeline import decoders
        return sum(decoders.packed_example_rows(path, data, number)
                   for number, data in enumerate(self._walk_records(path, read_data=True)))

    def check_first_record(self, path: str, field_size: int) -> None:
        from input_pipeline import decoders
        decoders.check_packed_example(path, self.read_first_record(path), field_size)

    def encode(self, labels, ids, values) -> bytes:
        from input_pipeline import encoders
        return encoders.encode_tfrecord_packed(labels, ids, values, PACKED_ROWS_PER_RECORD)

    def _records_per_chunk(self) -> int:
        """One: a record already holds many rows."""
        return 1

    def _chunk_element(self, chunk, index):
        """Records with their file's index, so that a bad record's error names its file."""
        import tensorflow as tf
        return chunk, tf.fill(tf.shape(chunk), index)

    def decode_batch(self, batch, config, file_names=(), labelled=True):
        """Decodes records (with their file indices in File mode) into all their rows."""
        from input_pipeline import decoders
        serialized, file_index = batch if len(batch) == 2 else (batch[0], None)
        return decoders.decode_tfrecord_packed(serialized, config.field_size, labelled=labelled,
                                               file_index=file_index, file_names=file_names)


class LibSVMFormat(DataFormat):
    """`label id:value ...` lines; Pipe mode cannot carry them."""

    name = "libsvm"
    display_name = "LibSVM"
    extension = ".libsvm"
    options = ("skip_bad_records",)

    def count_rows(self, path: str) -> int:
        """Lines, as `tf.data.TextLineDataset` yields them (a last line without a newline counts)."""
        lines = 0
        last = b"\n"
        with open(path, "rb") as f:
            while True:
                block = f.read(COUNT_READ_BYTES)
                if not block:
                    break
                lines += block.count(b"\n")
                last = block[-1:]
        return lines + (0 if last == b"\n" else 1)

    def read_first_record(self, path: str) -> str:
        """The first line, without its line end."""
        with open(path, "rb") as f:
            line = f.readline()
        if not line:
            raise ValueError("%s holds no line" % path)
        return line.decode("utf-8", errors="replace").rstrip("\r\n")

    def check_first_record(self, path: str, field_size: int) -> None:
        from input_pipeline import decoders
        decoders.check_libsvm_line(path, self.read_first_record(path), field_size)

    def suggestion(self, paths: Sequence[str], field_size: int) -> str:
        """How to read TFRecord instead.

        Returns:
          When every file has a TFRecord twin beside it (the data tools write
          both), a hint to pass `--data_format tfrecord`; otherwise the one
          command that converts the files.
        """
        stems = [os.path.splitext(path)[0] for path in paths]
        if stems and all(os.path.isfile(stem + TFRECORD.extension) for stem in stems):
            return ("reading LibSVM, which decodes slower than TFRecord; the same rows are in the %s file "
                    "beside each of the %d file(s): pass --data_format %s"
                    % (TFRECORD.extension, len(paths), TFRECORD.name))
        directories = sorted({os.path.dirname(path) or "." for path in paths})
        if len(directories) == 1 and all(path.endswith(self.extension) for path in paths):
            inputs = ["--input " + shlex.quote(os.path.join(directories[0], "*" + self.extension))]
        else:
            inputs = ["--input " + shlex.quote(path) for path in paths]
        return ("reading LibSVM, which decodes slower than TFRecord; convert once with: python -m "
                "%s --field_size %d %s, then pass --data_format %s"
                % (CONVERTER_MODULE, field_size, " ".join(inputs), TFRECORD.name))

    def encode(self, labels, ids, values) -> bytes:
        from input_pipeline import encoders
        return encoders.encode_libsvm(labels, ids, values)

    def fixed_width_line_bytes(self, paths: Sequence[str], sizes: Sequence[int], field_size: int) -> Optional[int]:
        """The line length (line end included) when every file is read as fixed-width lines; else None.

        That is when every file's first line has the fixed-width layout with
        `field_size` pairs (`decoders.fixed_width_line_bytes`), all of one
        length, and each file's size (`sizes`) is a whole number of lines.
        """
        from input_pipeline import decoders
        width = None
        for path, size in zip(paths, sizes):
            with open(path, "rb") as f:
                line = f.readline(FIXED_WIDTH_PROBE_BYTES)
            line_bytes = decoders.fixed_width_line_bytes(line, field_size)
            if line_bytes is None or size % line_bytes or width not in (None, line_bytes):
                return None
            width = line_bytes
        return width

    def _chunk_reader(self, paths, sizes, config):
        width = None if config.skip_bad_records else self.fixed_width_line_bytes(paths, sizes, config.field_size)
        if width is None:
            return self._file_chunks
        return lambda path, size, index, config: self._fixed_width_chunks(path, size, index, width)

    def _fixed_width_chunks(self, path, size, index, width: int):
        """Chunks of `(uint8 rows [n, width], file index, 1-based line numbers)` of a fixed-width file.

        The file is read in records of `READ_CHUNK_RECORDS` lines, then the
        lines left at its end as one record.
        """
        import tensorflow as tf

        block = width * READ_CHUNK_RECORDS
        tail = size % block
        blocks = tf.data.FixedLengthRecordDataset(path, record_bytes=block, footer_bytes=tail, buffer_size=block)
        last = tf.data.FixedLengthRecordDataset(path, record_bytes=tf.maximum(tail, 1), header_bytes=size - tail)
        blocks = blocks.concatenate(last.take(tf.cast(tail > 0, tf.int64)))

        def rows(block_index, data):
            matrix = tf.reshape(tf.io.decode_raw(data, tf.uint8), [-1, width])
            count = tf.shape(matrix, out_type=tf.int64)[0]
            first = block_index * READ_CHUNK_RECORDS + 1
            return matrix, tf.fill([count], index), first + tf.range(count, dtype=tf.int64)

        return blocks.enumerate().map(rows)

    def _file_chunks(self, path, size, index, config):
        """Chunks of `(lines, file index, 1-based line numbers)`."""
        import tensorflow as tf

        del size  # Text lines need no byte accounting.
        lines = tf.data.TextLineDataset(path, buffer_size=config.read_buffer_bytes)

        def number(chunk_index, chunk):
            count = tf.shape(chunk, out_type=tf.int64)[0]
            first = chunk_index * READ_CHUNK_RECORDS + 1
            return chunk, tf.fill([count], index), first + tf.range(count, dtype=tf.int64)

        return lines.batch(READ_CHUNK_RECORDS).enumerate().map(number)

    def decode_batch(self, batch, config, file_names=(), labelled=True):
        from input_pipeline import decoders
        lines, file_index, line_number = batch
        if lines.dtype == "uint8":  # fixed-width rows (`_fixed_width_chunks`)
            features, labels = decoders.decode_libsvm_rows(lines, config.field_size, file_index=file_index,
                                                           line_number=line_number, file_names=file_names)
        else:
            features, labels = decoders.decode_libsvm(lines, config.field_size, file_index=file_index,
                                                      line_number=line_number, file_names=file_names,
                                                      skip_bad_records=config.skip_bad_records)
        return (features, labels) if labelled else features


DataFormatLike = Union[str, DataFormat]
_REGISTRY: Dict[str, DataFormat] = {}


def register(data_format: DataFormat) -> DataFormat:
    """Adds a format to the registry under its name; returns it.

    Raises:
      ValueError: the name is taken.
    """
    if data_format.name in _REGISTRY:
        raise ValueError("data format %r is registered twice" % data_format.name)
    _REGISTRY[data_format.name] = data_format
    return data_format


TFRECORD = register(TFRecordFormat())
TFRECORD_PACKED = register(PackedTFRecordFormat())
LIBSVM = register(LibSVMFormat())


def names() -> List[str]:
    """The registered format names, in registration order (TFRecord first)."""
    return list(_REGISTRY)


def get(name: str) -> DataFormat:
    """The format registered as `name`.

    Raises:
      ValueError: no such format; the message lists the registered ones.
    """
    data_format = _REGISTRY.get(name) if isinstance(name, str) else None
    if data_format is None:
        raise ValueError("data_format must be one of %s, got %r" % (", ".join(_REGISTRY), name))
    return data_format


def as_format(data_format: DataFormatLike) -> DataFormat:
    """A format given as itself or by name (library calls may pass either).

    Raises:
      ValueError: an unknown name.
    """
    return data_format if isinstance(data_format, DataFormat) else get(data_format)


def extensions() -> Mapping[str, str]:
    """Format name -> file extension, for every registered format."""
    return {fmt.name: fmt.extension for fmt in _REGISTRY.values()}


def _damage_report(path, consumed, unread, budget: int) -> "tf.Tensor":
    import tensorflow as tf
    return tf.strings.join([
        "TFRecord file ", path, " could not be read to its end: read ", tf.strings.as_string(consumed),
        " of ", tf.strings.as_string(consumed + unread), " bytes (a corrupt or truncated record, or the "
        "file changed after the pipeline was built); max_corrupted_records=%d" % budget])
