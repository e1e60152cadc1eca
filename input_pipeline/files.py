"""Turns an input spec (files, globs, directories) into the files to read.

A spec item may be:

* a file: used as is, whatever its extension;
* a glob: the files it matches are used as is; directories it matches are
  expanded like directory items;
* a dataset root (a directory holding `metadata.json` and its split
  folders, see `input_pipeline.schema`): the files of the chosen split and
  format, `<root>/<split>/*<ext>`;
* any other directory (a split folder among them): its files with the
  format's extension (not recursive; names starting with "." are partial or
  hidden files and are left out).

Row counts come from the nearest metadata (`row_counts`: a split folder's
own, else its dataset root's) or, when the files have none, from reading
them (`count_rows`, the format's `DataFormat.count_rows`).

The format may be given as an `input_pipeline.format_base.DataFormat` or by
name.
"""

import glob
import os
from typing import Dict, List, Optional, Sequence, Set, Union

from input_pipeline import format_base, format_libsvm, formats, schema

GLOB_CHARACTERS = "*?["


def is_dataset_root(path: str) -> bool:
    """Whether `path` is a dataset root (`schema.is_dataset_root`), not a split folder."""
    return schema.is_dataset_root(path)


def resolve(spec: Union[str, Sequence[str]], data_format: formats.DataFormatLike,
            split: str = schema.TRAIN_SPLIT) -> List[str]:
    """Returns the files a spec names: absolute paths, sorted, deduplicated.

    Args:
      spec: spec items (files, globs, directories); a single string is one
        item.
      data_format: the format, whose extension is picked in directories.
      split: the split a dataset root stands for.

    Returns:
      The sorted absolute paths of every file the items name.

    Raises:
      ValueError: an unknown format, an empty spec, an item that matches no
        file (the message names it), or an empty (0-byte) file.
    """
    data_format = formats.as_format(data_format)
    items = [spec] if isinstance(spec, str) else list(spec)
    if not items:
        raise ValueError("the input spec names no files")
    found: Set[str] = set()
    for item in items:
        matches = _expand(item, data_format, split)
        if not matches:
            raise ValueError("input spec item %r matches no %s file%s%s"
                             % (item, data_format.name, _why_nothing(item, split),
                                _other_formats(item, data_format, split)))
        for path in matches:
            if os.path.getsize(path) == 0:
                raise ValueError("input file %s (from spec item %r) is empty (0 bytes)" % (path, item))
            found.add(os.path.abspath(path))
    return sorted(found)


def default_validation(spec: Union[str, Sequence[str]], data_format: formats.DataFormatLike) -> List[str]:
    """The validation files that go with a training spec.

    Returns:
      When every spec item is a dataset root, the files of their
      `validation/` splits (sorted, absolute); otherwise, or when none has
      validation files, an empty list.
    """
    data_format = formats.as_format(data_format)
    items = [spec] if isinstance(spec, str) else list(spec)
    if not items or not all(is_dataset_root(item) for item in items):
        return []
    found: Set[str] = set()
    for item in items:
        found.update(os.path.abspath(path)
                     for path in _split_files(item, data_format, schema.VALIDATION_SPLIT))
    return sorted(found)


def row_counts(paths: Sequence[str], data_format: formats.DataFormatLike) -> Optional[Dict[str, int]]:
    """Rows of each file, from the nearest metadata of each (its split folder's or dataset root's).

    Args:
      paths: files, e.g. from `resolve`.
      data_format: their format.

    Returns:
      `path -> rows` (keys as given), or None when any file is not listed in
      the metadata of a dataset root.

    Raises:
      ValueError: a metadata file is not valid.
    """
    data_format = formats.as_format(data_format)
    tables: Dict[str, Dict[str, int]] = {}
    counts = {}
    for path in paths:
        meta = schema.find_metadata(path)
        if meta is None:
            return None
        if meta not in tables:
            tables[meta] = schema.load_metadata(meta).rows_per_file(
                os.path.dirname(meta), data_format.extension)
        rows = tables[meta].get(os.path.abspath(path))
        if rows is None:
            return None
        counts[path] = rows
    return counts


def count_rows(paths: Sequence[str], data_format: formats.DataFormatLike) -> Dict[str, int]:
    """Rows of each file, by reading it (for files outside a dataset root).

    Returns:
      `path -> rows`, keys as given.

    Raises:
      ValueError: a file cannot be counted (`DataFormat.count_rows`; the
        message names it).
    """
    data_format = formats.as_format(data_format)
    return {path: data_format.count_rows(path) for path in paths}


def _expand(item: str, data_format: format_base.DataFormat, split: str) -> List[str]:
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


def _directory_files(directory: str, data_format: format_base.DataFormat, split: str) -> List[str]:
    if is_dataset_root(directory):
        return _split_files(directory, data_format, split)
    ext = data_format.extension
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))
            if name.endswith(ext) and not name.startswith(".")
            and os.path.isfile(os.path.join(directory, name))]


def _split_files(root: str, data_format: format_base.DataFormat, split: str) -> List[str]:
    split_dir = os.path.join(root, split)
    if not os.path.isdir(split_dir):
        return []
    return _directory_files(split_dir, data_format, split)


def _other_formats(item: str, data_format: format_base.DataFormat, split: str) -> str:
    """What other formats' files `item` holds, as the flags that read them ("" when none)."""
    held = [other.name for other in map(formats.get, formats.names())
            if other != data_format and _expand(item, other, split)]
    if not held:
        return ""
    return "; it holds %s files: pass %s, or convert them (python -m %s --input_format ... --output_format %s)" % (
        " and ".join(held), " or ".join("--data_format " + name for name in held), format_libsvm.CONVERTER_MODULE,
        data_format.name)


def _why_nothing(item: str, split: str) -> str:
    if is_dataset_root(item):
        return " (it is a dataset root; its %s/ split has none)" % split
    if os.path.isdir(item):
        return " (a directory without files of that extension)"
    if any(c in item for c in GLOB_CHARACTERS):
        return " (the glob matches nothing)"
    return " (no such file or directory)"
