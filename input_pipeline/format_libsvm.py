"""The LibSVM format: one `label id:value ...` line per row; Pipe mode cannot carry it.

Registered as `libsvm` in `input_pipeline.formats`. Its option:
`skip_bad_records`. Its `suggestion` is the one command converting the files
to TFRecord (`CONVERTER_MODULE`), or the `--data_format` of the TFRecord
files beside them.

LibSVM lines are read with their file index and 1-based line number, so that
a bad line's error names `file:line` (`input_pipeline.decoders`). Files of
fixed-width lines (what `dataprep.criteo` writes by default: every
file's first line has the layout of `encoders.encode_libsvm_fixed`, all of
the same length, and each file's size is a whole number of such lines) are
read in blocks of `format_base.READ_CHUNK_RECORDS` lines straight into uint8
rows, one per line, instead of one string per line: no text line reader, no
string copies through the interleave and the batch
(`decoders.decode_libsvm_rows` decodes them; `benchmarks/criteo_convert.py`
compares both ways). Any other
file set, or `skip_bad_records` (which must be able to drop one line of
another length and go on), is read line by line.

This module imports no TensorFlow when it is imported; the methods that
build graphs import TensorFlow and `decoders` when called, and `encode`
imports `encoders` (numpy).
"""

import os
import shlex
from typing import Optional, Sequence

from input_pipeline import format_base, format_tfrecord

COUNT_READ_BYTES = 1 << 20
# The longest first line read to tell whether a LibSVM file is fixed-width.
FIXED_WIDTH_PROBE_BYTES = 1 << 16
CONVERTER_MODULE = "dataprep.libsvm_to_tfrecord"


class LibSVMFormat(format_base.DataFormat):
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
        tfrecord = format_tfrecord.TFRecordFormat()
        stems = [os.path.splitext(path)[0] for path in paths]
        if stems and all(os.path.isfile(stem + tfrecord.extension) for stem in stems):
            return ("reading LibSVM, which decodes slower than TFRecord; the same rows are in the %s file "
                    "beside each of the %d file(s): pass --data_format %s"
                    % (tfrecord.extension, len(paths), tfrecord.name))
        directories = sorted({os.path.dirname(path) or "." for path in paths})
        if len(directories) == 1 and all(path.endswith(self.extension) for path in paths):
            inputs = ["--input " + shlex.quote(os.path.join(directories[0], "*" + self.extension))]
        else:
            inputs = ["--input " + shlex.quote(path) for path in paths]
        return ("reading LibSVM, which decodes slower than TFRecord; convert once with: python -m "
                "%s --field_size %d %s, then pass --data_format %s"
                % (CONVERTER_MODULE, field_size, " ".join(inputs), tfrecord.name))

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

        The file is read in records of `format_base.READ_CHUNK_RECORDS` lines,
        then the lines left at its end as one record.
        """
        import tensorflow as tf

        block = width * format_base.READ_CHUNK_RECORDS
        tail = size % block
        blocks = tf.data.FixedLengthRecordDataset(path, record_bytes=block, footer_bytes=tail, buffer_size=block)
        last = tf.data.FixedLengthRecordDataset(path, record_bytes=tf.maximum(tail, 1), header_bytes=size - tail)
        blocks = blocks.concatenate(last.take(tf.cast(tail > 0, tf.int64)))

        @tf.autograph.experimental.do_not_convert
        def rows(block_index, data):
            matrix = tf.reshape(tf.io.decode_raw(data, tf.uint8), [-1, width])
            count = tf.shape(matrix, out_type=tf.int64)[0]
            first = block_index * format_base.READ_CHUNK_RECORDS + 1
            return matrix, tf.fill([count], index), first + tf.range(count, dtype=tf.int64)

        return blocks.enumerate().map(rows)

    def _file_chunks(self, path, size, index, config):
        """Chunks of `(lines, file index, 1-based line numbers)`."""
        import tensorflow as tf

        del size  # Text lines need no byte accounting.
        lines = tf.data.TextLineDataset(path, buffer_size=config.read_buffer_bytes)

        @tf.autograph.experimental.do_not_convert
        def number(chunk_index, chunk):
            count = tf.shape(chunk, out_type=tf.int64)[0]
            first = chunk_index * format_base.READ_CHUNK_RECORDS + 1
            return chunk, tf.fill([count], index), first + tf.range(count, dtype=tf.int64)

        return lines.batch(format_base.READ_CHUNK_RECORDS).enumerate().map(number)

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
