"""The packed TFRecord format: TFRecord whose `tf.train.Example`s hold up to `PACKED_ROWS_PER_RECORD` rows each.

Registered as `tfrecord_packed` (files `.tfrecord-packed`) in
`input_pipeline.formats`. A record holds `label` [r], `ids` and `values`
[r * field_size]; Pipe mode carries it too, and TFRecord's damage checks and
option (`max_corrupted_records`) apply. The reader and the parser pay once
per record instead of once per row; the pipeline decodes its records before
it batches rows (`DataFormat.packed`). A file of one row per record reads as
packed too.

This module imports no TensorFlow when it is imported; the methods that
build graphs import TensorFlow and `decoders` when called, and `encode`
imports `encoders` (numpy).
"""

from input_pipeline import format_tfrecord

# Rows per record of the packed TFRecord format, as the writers write it.
PACKED_ROWS_PER_RECORD = 256


class PackedTFRecordFormat(format_tfrecord.TFRecordFormat):
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
