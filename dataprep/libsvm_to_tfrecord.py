"""Converts LibSVM files to TFRecord once, so that training reads the fast format.

Each `X.libsvm` becomes `X.tfrecord` (beside it, or in `--output_dir`) with
the same rows in the same order, in the layout of `input_pipeline.schema`
(`label`, `ids`, `values`). Lines are read and decoded by the pipeline's own
LibSVM format (`formats.LIBSVM`, so a bad line stops the conversion naming
`file:line`) and written by the TFRecord format's encoder
(`encoders.encode_tfrecord`).

Usage (the line the input pipeline logs when it reads LibSVM)::

    python -m dataprep.libsvm_to_tfrecord --field_size 39 --input 'data/train/*.libsvm'
"""

import glob
import os
from typing import List, Optional, Sequence

import numpy as np
from absl import flags

from cli import entry
from input_pipeline import formats, schema

PROGRAM = "dataprep.libsvm_to_tfrecord"

SOURCE = formats.LIBSVM
TARGET = formats.TFRECORD
LINES_PER_BATCH = 8192


def output_path(path: str, output_dir: Optional[str]) -> str:
    """Where the TFRecord twin of a LibSVM file goes."""
    stem = os.path.splitext(os.path.basename(path))[0] + TARGET.extension
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


def convert_file(path: str, target: str, field_size: int) -> int:
    """Writes the rows of one LibSVM file to `target`; returns the rows written.

    Raises:
      tf.errors.InvalidArgumentError: a bad line; the message names `path:line`.
    """
    from input_pipeline import pipeline  # pylint: disable=import-outside-toplevel
    config = pipeline.PipelineConfig(data_format=SOURCE, field_size=field_size, num_parallel_reads=1)

    def decode(*batch):
        return SOURCE.decode_batch(batch, config, file_names=[path])

    batches = SOURCE.batches([path], config, LINES_PER_BATCH).map(decode)
    rows = 0
    tmp = target + ".tmp"
    try:
        with open(tmp, "wb") as out:
            for features, labels in batches.prefetch(2).as_numpy_iterator():
                out.write(TARGET.encode(labels, features[schema.FEAT_IDS],
                                        features[schema.FEAT_VALS].astype(np.float64)))
                rows += labels.shape[0]
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return rows


def convert(patterns: Sequence[str], field_size: int, output_dir: Optional[str] = None,
            overwrite: bool = False) -> List[str]:
    """Converts every LibSVM file named; returns the TFRecord files written.

    Raises:
      FileNotFoundError: a pattern names no file.
      FileExistsError: a target exists and not `overwrite` (checked before
        anything is written).
    """
    paths = expand(patterns)
    targets = [output_path(path, output_dir) for path in paths]
    existing = [t for t in targets if os.path.exists(t)]
    if existing and not overwrite:
        raise FileExistsError("%s already exist(s); pass --overwrite to replace" % ", ".join(existing[:3]))
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
    for path, target in zip(paths, targets):
        rows = convert_file(path, target, field_size)
        print("%s -> %s: %d rows" % (path, target, rows))
    return targets


def define_flags() -> None:
    """Defines the command-line flags of this tool."""
    flags.DEFINE_multi_string("input", None, "LibSVM file or glob; repeat the flag for more.")
    flags.DEFINE_integer("field_size", schema.FIELD_SIZE, "id:value pairs per line.")
    flags.DEFINE_string("output_dir", None, "Directory for the TFRecord files (default: beside each input).")
    flags.DEFINE_bool("overwrite", False, "Replace TFRecord files that exist.")
    flags.mark_flag_as_required("input")


def main(argv: Sequence[str]) -> None:
    """Converts the files named by the flags."""
    del argv
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    cfg = flags.FLAGS
    try:
        convert(cfg.input, cfg.field_size, cfg.output_dir, cfg.overwrite)
    except (ValueError, OSError, tf.errors.InvalidArgumentError) as e:
        raise SystemExit("error: %s" % e) from e


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.TENSORFLOW_AFTER_FLAGS)


if __name__ == "__main__":
    run()
