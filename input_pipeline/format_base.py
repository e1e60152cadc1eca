"""The interface every data format implements (`DataFormat`), and the reading of files they share.

Everything that differs between the on-disk formats of a dataset lives in a
`DataFormat`; the formats are `input_pipeline.format_tfrecord`,
`input_pipeline.format_tfrecord_packed` and `input_pipeline.format_libsvm`,
registered by name in `input_pipeline.formats`, which also says what each
method is for.

A format is a stateless object with one instance per class: a copy or a
pickle of a format is the registered object itself.

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

This module imports no TensorFlow when it is imported, so that the
TensorFlow-free data tools (`dataprep`) can name formats and files; the
methods that build graphs import TensorFlow when called.
"""

import abc
import os
from typing import TYPE_CHECKING, Callable, ClassVar, Dict, Optional, Sequence, Tuple, Union

from input_pipeline import schema
from input_pipeline.read_options import ReadOptions

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

# Files read at once when num_parallel_reads is AUTOTUNE. A fixed number
# (not the core count) keeps the record order the same on every host.
DEFAULT_PARALLEL_READS = 8
READ_CHUNK_RECORDS = 256

Record = Union[bytes, str]


class DataFormat(abc.ABC):
    """What differs between data formats; see `input_pipeline.formats`.

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
    _instances: ClassVar[Dict[type, "DataFormat"]] = {}

    def __repr__(self) -> str:
        return "formats.get(%r)" % self.name

    def shard_name(self, index: int) -> str:
        """The file name of shard `index` in this format (`part-00003.tfrecord`)."""
        return schema.shard_stem(index) + self.extension

    def __eq__(self, other) -> bool:
        return isinstance(other, DataFormat) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __new__(cls):
        # One object per format class, so that copies and pickles (`__reduce__`) are the registered object.
        instance = DataFormat._instances.get(cls)
        if instance is None:
            instance = DataFormat._instances[cls] = super().__new__(cls)
        return instance

    def __reduce__(self):
        return type(self), ()

    # --- validation ----------------------------------------------------------
    @property
    def supports_pipe_mode(self) -> bool:
        """Whether SageMaker Pipe mode can carry the format."""
        return self.pipe_record_format is not None

    def check_options(self, config: ReadOptions) -> None:
        """Checks the values of the format's own options in `config` (none by default).

        `input_pipeline.formats.check_options` refuses the options of other
        formats, then calls this.

        Raises:
          ValueError: a bad value (the message names the option and the value).
        """
        del config  # No option to check by default.

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
        return self._decoded(self.record_chunks(paths, config), paths, config, batch_size, labelled)

    def each_file(self, paths: Sequence[str], config: ReadOptions, batch_size: int,
                  result: "Callable[[tf.Tensor, tf.data.Dataset], tf.data.Dataset]", parallel: int,
                  labelled: bool = True) -> "tf.data.Dataset":
        """`result(index, batches)` for every file of `paths`, `parallel` files at once, in one pipeline.

        `batches` holds what `decoded_batches([paths[index]], ...)` would:
        the file's rows decoded, in batches of `batch_size`, its chunks
        checked as in a pipeline of that file alone (`_checked`). The
        reader and the decoder are traced once for all the files, and one
        pipeline runs them, where a pipeline per file costs its graph and
        its start (about 0.2 s of CPU a file, more than its rows in small
        files). The results arrive as their files end, in no fixed order:
        `result` gets the file's index in `paths` to pass on.

        Args:
          paths, config: as for `records`.
          batch_size: rows per batch.
          result: the dataset of one file's result, from its index (an int32
            scalar) and its decoded batches.
          parallel: files read at once.
          labelled: as for `decode_batch`.

        Returns:
          The dataset of every file's `result`, concatenated in the order the files end.
        """
        import tensorflow as tf

        sizes = [os.path.getsize(path) for path in paths]
        files = tf.data.Dataset.from_tensor_slices((
            tf.constant(list(paths), tf.string), tf.constant(sizes, tf.int64),
            tf.constant(list(range(len(paths))), tf.int32)))
        file_chunks = self._chunk_reader(paths, sizes, config)

        @tf.autograph.experimental.do_not_convert
        def one_file(path, size, index):
            chunks = self._checked(file_chunks(path, size, index, config), config)
            return result(index, self._decoded(chunks, paths, config, batch_size, labelled))

        cycle_length = max(1, min(parallel, len(paths)))
        return files.interleave(one_file, cycle_length=cycle_length, block_length=1, num_parallel_calls=cycle_length,
                                deterministic=False)

    def _decoded(self, chunks: "tf.data.Dataset", paths: Sequence[str], config: ReadOptions, batch_size: int,
                 labelled: bool) -> "tf.data.Dataset":
        """The rows of `record_chunks`' `chunks` of `paths`, decoded, in batches of `batch_size`."""
        import tensorflow as tf

        @tf.autograph.experimental.do_not_convert
        def decode(*batch):
            return self.decode_batch(batch, config, file_names=paths, labelled=labelled)

        if self.packed:
            return chunks.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).rebatch(batch_size)
        return chunks.rebatch(batch_size).map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

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
            tf.autograph.experimental.do_not_convert(lambda path, size, index: file_chunks(path, size, index, config)),
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

