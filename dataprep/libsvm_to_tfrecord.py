"""Converts data files to a faster format once: LibSVM to TFRecord by default.

Each `X.libsvm` becomes `X.tfrecord` (beside it, or in `--output_dir`) with
the same rows in the same order, in the layout of `input_pipeline.schema`
(`label`, `ids`, `values`). Rows are read and decoded by the pipeline's own
format (`formats.LIBSVM`, so a bad line stops the conversion naming
`file:line`) and written by the target format's encoder (`DataFormat.encode`).
`--input_format` and `--output_format` convert between any two formats, for
example TFRecord files written elsewhere to packed TFRecord
(`--input_format tfrecord --output_format tfrecord_packed`).

Usage (the line the input pipeline logs when it reads LibSVM)::

    python -m dataprep.libsvm_to_tfrecord --field_size 39 --input 'data/train/*.libsvm'
"""

import dataclasses
import glob
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
from absl import flags

from cli import config_flags, entry
from input_pipeline import format_base, formats, schema

PROGRAM = "dataprep.libsvm_to_tfrecord"

SOURCE = formats.LIBSVM
TARGET = formats.TFRECORD
LINES_PER_BATCH = 8192


def output_path(path: str, output_dir: Optional[str], target: format_base.DataFormat = TARGET) -> str:
    """Where the `target`-format twin of a file goes."""
    stem = os.path.splitext(os.path.basename(path))[0] + target.extension
    return os.path.join(output_dir or os.path.dirname(os.path.abspath(path)), stem)


def expand(patterns: Sequence[str]) -> List[str]:
    """Files named by paths or globs, in the order given.

    Raises:
      FileNotFoundError: a pattern names no file.
    """
    paths = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern))
        if not matched:
            raise FileNotFoundError("--input %r names no file" % pattern)
        paths.extend(matched)
    return paths


def convert_file(path: str, target: str, field_size: int, source_format: format_base.DataFormat = SOURCE,
                 target_format: format_base.DataFormat = TARGET) -> int:
    """Writes the rows of one file in `source_format` to `target` in `target_format`; returns the rows written.

    Raises:
      tf.errors.InvalidArgumentError: a bad record; the message names its
        file (and line, for LibSVM).
    """
    from input_pipeline import pipeline
    config = pipeline.PipelineConfig(data_format=source_format, field_size=field_size, num_parallel_reads=1)
    batches = source_format.decoded_batches([path], config, LINES_PER_BATCH)
    rows = 0
    tmp = target + ".tmp"
    try:
        with open(tmp, "wb") as out:
            for features, labels in batches.prefetch(2).as_numpy_iterator():
                out.write(target_format.encode(labels, features[schema.FEAT_IDS],
                                               features[schema.FEAT_VALS].astype(np.float64)))
                rows += labels.shape[0]
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return rows


def convert(patterns: Sequence[str], field_size: int, output_dir: Optional[str] = None,
            overwrite: bool = False, source_format: formats.DataFormatLike = SOURCE,
            target_format: formats.DataFormatLike = TARGET) -> List[str]:
    """Converts every file named from `source_format` to `target_format`; returns the files written.

    Raises:
      ValueError: the two formats are the same.
      FileNotFoundError: a pattern names no file.
      FileExistsError: a target exists and not `overwrite` (checked before
        anything is written).
    """
    source_format, target_format = formats.as_format(source_format), formats.as_format(target_format)
    if source_format == target_format:
        raise ValueError("--input_format and --output_format are both %r: nothing to convert" % source_format.name)
    paths = expand(patterns)
    targets = [output_path(path, output_dir, target_format) for path in paths]
    existing = [t for t in targets if os.path.exists(t)]
    if existing and not overwrite:
        raise FileExistsError("%s already exist(s); pass --overwrite to replace" % ", ".join(existing[:3]))
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
    for path, target in zip(paths, targets):
        rows = convert_file(path, target, field_size, source_format, target_format)
        print("%s -> %s: %d rows" % (path, target, rows))
    return targets


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    """What the command line converts (its flags are these fields)."""

    input: Optional[Tuple[str, ...]] = dataclasses.field(
        metadata=config_flags.metadata("File or glob to convert; repeat the flag for more.", repeated=True))
    field_size: int = config_flags.field(schema.FIELD_SIZE, "Ids (id:value pairs) per row.")
    input_format: str = config_flags.field(SOURCE.name, "Format of the --input files.", choices=formats.names())
    output_format: str = config_flags.field(TARGET.name, "Format to write.", choices=formats.names())
    output_dir: Optional[str] = config_flags.field(None, "Directory for the converted files (default: beside "
                                                         "each input).")
    overwrite: bool = config_flags.field(False, "Replace converted files that exist.")


def define_flags() -> None:
    """Defines the command-line flags of this tool (`ConvertConfig`'s fields)."""
    config_flags.define_flags([ConvertConfig])
    flags.mark_flag_as_required("input")


def main(argv: Sequence[str]) -> None:
    """Converts the files named by the flags."""
    del argv
    import tensorflow as tf
    cfg = ConvertConfig(**config_flags.values(ConvertConfig, flags.FLAGS))
    assert cfg.input is not None
    try:
        convert(list(cfg.input), cfg.field_size, cfg.output_dir, cfg.overwrite, cfg.input_format, cfg.output_format)
    except (ValueError, OSError, tf.errors.InvalidArgumentError) as e:
        raise SystemExit("error: %s" % e) from e


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    run()
