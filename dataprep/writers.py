"""Fast, sharded writing of DeepFM examples in LibSVM, TFRecord and packed TFRecord form.

Both data tools (`dataprep.criteo`, `dataprep.synthetic`) hand batches of
examples to a `SplitWriter` as numpy arrays (`input_pipeline.encoders` has
their layout), and it writes every row to one shard, in every format,
round-robin over the shards of the split, encoded by `input_pipeline.encoders`:
writing needs no TensorFlow and no Python call per row.

With `libsvm_id_width` the LibSVM text is written in the fixed-width layout
(`encoders.encode_libsvm_fixed`).
"""

import glob
import os
from typing import List, Optional, Sequence

import numpy as np

from input_pipeline import encoders, formats, schema

# Rows encoded at once: bounds the byte matrices of one encoding step
# (a few hundred bytes per row, several temporaries) to tens of MB.
ENCODE_BATCH_ROWS = 16384


class SplitWriter:
    """Writes one split of a dataset root as N shards in every format.

    Row k written to the split (counting from `first_row` across all `write`
    calls) goes to shard k % N, so shards differ in size by one row at most.
    Each shard stem `SPLIT/part-NNNNN` exists as `.libsvm`, `.tfrecord` and
    `.tfrecord-packed`, holding the same rows in the same order (packed
    records start afresh at each call's rows of a shard, so a few hold fewer
    than `input_pipeline.format_tfrecord_packed.PACKED_ROWS_PER_RECORD`). Use
    as a context manager, or call `close()`; `split_info()` gives the rows
    written.

    Parallel writers each write a piece of every shard: with `piece_suffix`
    the files are `SPLIT/part-NNNNN<suffix>.libsvm` (and `.tfrecord`), and
    the pieces of a shard, concatenated in row order, are the shard (every
    format is a plain sequence of records).
    """

    def __init__(self, root: str, split: str, num_shards: int, first_row: int = 0, piece_suffix: str = "",
                 libsvm_id_width: Optional[int] = None):
        """Creates `root/split/` and opens its 3 * `num_shards` files.

        Args:
          root: the dataset root.
          split: the split's directory name.
          num_shards: shards of the split.
          first_row: the split-wide index of the first row written here.
          piece_suffix: appended to each file's stem (see the class docstring).
          libsvm_id_width: write LibSVM in the fixed-width layout with ids of
            this many digits (`encode_libsvm_fixed`); None: the short layout.

        Raises:
          ValueError: `num_shards` < 1.
        """
        if num_shards < 1:
            raise ValueError("shards must be >= 1, got %r" % num_shards)
        directory = os.path.join(root, split)
        os.makedirs(directory, exist_ok=True)
        self._stems = ["%s/%s" % (split, schema.shard_stem(i))
                       for i in range(num_shards)]
        self._libsvm = [open(os.path.join(root, stem + piece_suffix + formats.LIBSVM.extension), "wb")
                        for stem in self._stems]
        self._tfrecord = [open(os.path.join(root, stem + piece_suffix + formats.TFRECORD.extension), "wb")
                          for stem in self._stems]
        self._packed = [open(os.path.join(root, stem + piece_suffix + formats.TFRECORD_PACKED.extension), "wb")
                        for stem in self._stems]
        self._first_row = first_row
        self._id_width = libsvm_id_width
        self._rows = np.zeros(num_shards, dtype=np.int64)
        self._positives = 0
        self._closed = False

    @property
    def rows(self) -> int:
        """Rows written so far."""
        return int(self._rows.sum())

    @property
    def positives(self) -> int:
        """Rows written so far with a label > 0.5."""
        return self._positives

    def write(self, labels: np.ndarray, ids: np.ndarray, values: np.ndarray) -> None:
        """Appends rows; see the module docstring for the shapes.

        Raises:
          ValueError: shapes disagree or an id is negative.
        """
        labels, ids, values = encoders.check_batch(labels, ids, values)
        for start in range(0, len(labels), ENCODE_BATCH_ROWS):
            part = slice(start, start + ENCODE_BATCH_ROWS)
            self._write_batch(labels[part], ids[part], values[part])

    def _write_batch(self, labels, ids, values):
        num_shards = len(self._stems)
        shard_of_row = (self._first_row + self.rows + np.arange(len(labels))) % num_shards
        for shard in range(num_shards):
            rows = np.flatnonzero(shard_of_row == shard)
            if not rows.size:
                continue
            if self._id_width is None:
                text = encoders.encode_libsvm(labels[rows], ids[rows], values[rows])
            else:
                text = encoders.encode_libsvm_fixed(labels[rows], ids[rows], values[rows], self._id_width)
            self._libsvm[shard].write(text)
            self._tfrecord[shard].write(encoders.encode_tfrecord(labels[rows], ids[rows], values[rows]))
            self._packed[shard].write(formats.TFRECORD_PACKED.encode(labels[rows], ids[rows], values[rows]))
            self._rows[shard] += rows.size
        self._positives += int(np.count_nonzero(labels > 0.5))

    def split_info(self) -> schema.SplitInfo:
        """The rows written, in total and per shard stem."""
        return schema.SplitInfo(rows=self.rows,
                                shards={stem: int(rows) for stem, rows in zip(self._stems, self._rows)})

    def close(self) -> None:
        """Flushes and closes every shard file; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for f in self._libsvm + self._tfrecord + self._packed:
            f.close()

    def __enter__(self) -> "SplitWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _existing_outputs(output_dir: str, extra_files: Sequence[str]) -> List[str]:
    found = []
    for name in (schema.METADATA_FILE,) + tuple(extra_files):
        path = os.path.join(output_dir, name)
        if os.path.lexists(path):
            found.append(path)
    for split in schema.SPLITS:
        view = os.path.join(output_dir, split, schema.METADATA_FILE)
        if os.path.lexists(view):
            found.append(view)
        for ext in formats.extensions().values():
            found.extend(sorted(glob.glob(os.path.join(output_dir, split, "part-*" + ext))))
    return found


def check_output_dir(output_dir: str, overwrite: bool = False, extra_files: Sequence[str] = ()) -> List[str]:
    """Checks that a dataset may be written to `output_dir`; changes nothing.

    A directory already holding a dataset (its `metadata.json`, shard files
    under `train/` or `validation/`, or one of `extra_files`) is refused
    unless `overwrite`. Other files in it do not count.

    Args:
      output_dir: the dataset root.
      overwrite: whether an existing dataset may be replaced.
      extra_files: further file names, relative to `output_dir`, that the
        tool writes.

    Returns:
      The existing dataset files that writing would replace.

    Raises:
      FileExistsError: `output_dir` holds a dataset and not `overwrite`; or
        it is not a directory.
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise FileExistsError("output_dir %r exists and is not a directory" % output_dir)
    existing = _existing_outputs(output_dir, extra_files)
    if existing and not overwrite:
        raise FileExistsError(
            "output_dir %r already holds a dataset (%s%s); pass --overwrite to replace it"
            % (output_dir, ", ".join(existing[:3]), ", ..." if len(existing) > 3 else ""))
    return existing


def prepare_output_dir(output_dir: str, overwrite: bool = False, extra_files: Sequence[str] = ()) -> None:
    """Makes `output_dir` ready to receive a dataset root.

    Runs `check_output_dir`; with `overwrite`, deletes the dataset files it
    finds, `metadata.json` first, so that a stale shard can never be taken
    for part of the new dataset. Creates `output_dir` if absent.

    Args:
      output_dir: the dataset root.
      overwrite: replace an existing dataset.
      extra_files: further file names, relative to `output_dir`, that the
        tool writes.

    Raises:
      FileExistsError: as `check_output_dir`.
    """
    for path in check_output_dir(output_dir, overwrite, extra_files):
        os.remove(path)
    os.makedirs(output_dir, exist_ok=True)
