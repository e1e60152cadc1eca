"""Turns an input spec (files, globs, directories) into the files to read.

A spec item may be:

* a file: used as is, whatever its extension;
* a glob: the files it matches are used as is; directories it matches are
  expanded like directory items;
* a dataset root (a directory holding `metadata.json`, see
  `input_pipeline.schema`): the files of the chosen split and format,
  `<root>/<split>/*<ext>`;
* any other directory: its files with the format's extension (not
  recursive; names starting with "." are partial or hidden files and are
  left out).

Row counts come from the dataset root's metadata (`row_counts`) or, when the
files are not in a dataset root, from reading them (`count_rows`).
"""

import glob
import os
import struct
from typing import Dict, List, Optional, Sequence, Union

from input_pipeline import schema

GLOB_CHARACTERS = "*?["
# TFRecord framing: uint64 length, uint32 masked CRC of the length, the
# data, uint32 masked CRC of the data.
TFRECORD_LENGTH_BYTES = 8
TFRECORD_CRC_BYTES = 4
TFRECORD_FRAMING_BYTES = TFRECORD_LENGTH_BYTES + 2 * TFRECORD_CRC_BYTES
COUNT_READ_BYTES = 1 << 20


def check_format(data_format: str) -> None:
    """Raises ValueError unless `data_format` is one of `schema.DATA_FORMATS`."""
    if data_format not in schema.DATA_FORMATS:
        raise ValueError("data_format must be one of %s, got %r"
                         % (", ".join(schema.DATA_FORMATS), data_format))


def is_dataset_root(path: str) -> bool:
    """Whether `path` is a directory holding `metadata.json`."""
    return os.path.isfile(os.path.join(path, schema.METADATA_FILE))


def resolve(spec: Union[str, Sequence[str]], data_format: str,
            split: str = schema.TRAIN_SPLIT) -> List[str]:
    """Returns the files a spec names: absolute paths, sorted, deduplicated.

    Args:
      spec: spec items (files, globs, directories); a single string is one
        item.
      data_format: `tfrecord` or `libsvm`: picks the extension in
        directories.
      split: the split a dataset root stands for.

    Returns:
      The sorted absolute paths of every file the items name.

    Raises:
      ValueError: an unknown format, an empty spec, an item that matches no
        file (the message names it), or an empty (0-byte) file.
    """
    check_format(data_format)
    items = [spec] if isinstance(spec, str) else list(spec)
    if not items:
        raise ValueError("the input spec names no files")
    found = set()
    for item in items:
        matches = _expand(item, data_format, split)
        if not matches:
            raise ValueError("input spec item %r matches no %s file%s"
                             % (item, data_format, _why_nothing(item, split)))
        for path in matches:
            if os.path.getsize(path) == 0:
                raise ValueError("input file %s (from spec item %r) is empty (0 bytes)" % (path, item))
            found.add(os.path.abspath(path))
    return sorted(found)


def default_validation(spec: Union[str, Sequence[str]], data_format: str) -> List[str]:
    """The validation files that go with a training spec.

    Returns:
      When every spec item is a dataset root, the files of their
      `validation/` splits (sorted, absolute); otherwise, or when none has
      validation files, an empty list.
    """
    check_format(data_format)
    items = [spec] if isinstance(spec, str) else list(spec)
    if not items or not all(is_dataset_root(item) for item in items):
        return []
    found = set()
    for item in items:
        found.update(os.path.abspath(path)
                     for path in _split_files(item, data_format, schema.VALIDATION_SPLIT))
    return sorted(found)


def row_counts(paths: Sequence[str], data_format: str) -> Optional[Dict[str, int]]:
    """Rows of each file, from the metadata of the dataset roots holding them.

    Args:
      paths: files, e.g. from `resolve`.
      data_format: their format.

    Returns:
      `path -> rows` (keys as given), or None when any file is not listed in
      the metadata of a dataset root.

    Raises:
      ValueError: a metadata file is not valid.
    """
    check_format(data_format)
    tables: Dict[str, Dict[str, int]] = {}
    counts = {}
    for path in paths:
        meta = schema.find_metadata(path)
        if meta is None:
            return None
        if meta not in tables:
            tables[meta] = schema.DatasetMetadata.read(meta).rows_per_file(
                os.path.dirname(meta), data_format)
        rows = tables[meta].get(os.path.abspath(path))
        if rows is None:
            return None
        counts[path] = rows
    return counts


def count_rows(paths: Sequence[str], data_format: str) -> Dict[str, int]:
    """Rows of each file, by reading it (for files outside a dataset root).

    LibSVM: lines, as `tf.data.TextLineDataset` yields them (a last line
    without a newline counts). TFRecord: records, found by walking the
    length fields without reading the data or checking CRCs.

    Returns:
      `path -> rows`, keys as given.

    Raises:
      ValueError: a TFRecord file ends inside a record (the message names the
        file and the byte offset).
    """
    check_format(data_format)
    counter = _count_tfrecords if data_format == "tfrecord" else _count_lines
    return {path: counter(path) for path in paths}


def read_first_record(path: str, data_format: str) -> Union[bytes, str]:
    """The first record of a file: a serialized TFRecord or a LibSVM line.

    Raises:
      ValueError: the file holds no complete first record.
    """
    check_format(data_format)
    with open(path, "rb") as f:
        if data_format == "libsvm":
            line = f.readline()
            if not line:
                raise ValueError("%s holds no line" % path)
            return line.decode("utf-8", errors="replace").rstrip("\r\n")
        header = f.read(TFRECORD_LENGTH_BYTES + TFRECORD_CRC_BYTES)
        if len(header) < TFRECORD_LENGTH_BYTES + TFRECORD_CRC_BYTES:
            raise ValueError("%s is not a TFRecord file: it ends after %d bytes, inside the "
                             "first record's header" % (path, len(header)))
        (length,) = struct.unpack("<Q", header[:TFRECORD_LENGTH_BYTES])
        data = f.read(length)
        if len(data) < length:
            raise ValueError("%s: the first record says it holds %d bytes, the file ends after %d "
                             "(truncated, or not a TFRecord file)" % (path, length, len(data)))
        return data


def _expand(item: str, data_format: str, split: str) -> List[str]:
    if os.path.isdir(item):
        return _directory_files(item, data_format, split)
    if os.path.isfile(item):
        return [item]
    if any(c in item for c in GLOB_CHARACTERS):
        matches = []
        for match in sorted(glob.glob(item)):
            if os.path.isdir(match):
                matches.extend(_directory_files(match, data_format, split))
            elif os.path.isfile(match):
                matches.append(match)
        return matches
    return []


def _directory_files(directory: str, data_format: str, split: str) -> List[str]:
    if is_dataset_root(directory):
        return _split_files(directory, data_format, split)
    ext = schema.FORMAT_EXTENSIONS[data_format]
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))
            if name.endswith(ext) and not name.startswith(".")
            and os.path.isfile(os.path.join(directory, name))]


def _split_files(root: str, data_format: str, split: str) -> List[str]:
    split_dir = os.path.join(root, split)
    if not os.path.isdir(split_dir):
        return []
    return _directory_files(split_dir, data_format, split)


def _why_nothing(item: str, split: str) -> str:
    if is_dataset_root(item):
        return " (it is a dataset root; its %s/ split has none)" % split
    if os.path.isdir(item):
        return " (a directory without files of that extension)"
    if any(c in item for c in GLOB_CHARACTERS):
        return " (the glob matches nothing)"
    return " (no such file or directory)"


def _count_lines(path: str) -> int:
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


def _count_tfrecords(path: str) -> int:
    size = os.path.getsize(path)
    records = 0
    offset = 0
    with open(path, "rb") as f:
        while offset < size:
            header = f.read(TFRECORD_LENGTH_BYTES)
            if len(header) < TFRECORD_LENGTH_BYTES:
                break
            (length,) = struct.unpack("<Q", header)
            end = offset + TFRECORD_FRAMING_BYTES + length
            if end > size:
                break
            records += 1
            offset = end
            f.seek(offset)
    if offset != size:
        raise ValueError("TFRecord file %s is truncated or corrupt: record %d at byte %d does not "
                         "end inside the file (%d bytes)" % (path, records, offset, size))
    return records

