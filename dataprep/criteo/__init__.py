"""Converts raw Criteo click logs (TSV) into a DeepFM dataset root, in bounded memory, on every core.

    python -m dataprep.criteo --input train.txt --output_dir data/criteo

From Python: `convert(inputs, output_dir, ConversionOptions(...))` (or
`convert_with_report`, which also says how fast each pass ran). One concept
per module:

* `records`: a Criteo line, its fields and the features it becomes;
  `recalibrate` for models trained with negative sampling.
* `vocabulary`: each categorical value's id, as `metadata.json` stores it.
* `options`: `ConversionOptions`, what a conversion is asked to do.
* `conversion`: the conversion, its two passes over byte ranges of the
  inputs on every core, and its `ConversionReport`;
  `blocks` (the ranges and their lines, parsed with numpy), `counting`
  (pass 1), `writing` (pass 2, shuffled or not), `workers` (the processes).
* `parts`: a conversion split over several machines (`count_part`,
  `merge_part_counts`), as the Processing jobs of `dataprep.criteo_processing`
  run it.
* `command`: the command line.

This package's names below are its public face.
"""

from dataprep.criteo.command import PROGRAM, define_flags, main, run, summary
from dataprep.criteo.conversion import ConversionReport, convert, convert_with_report
from dataprep.criteo.options import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MEMORY_MB,
    DEFAULT_MIN_COUNT,
    DEFAULT_SHARDS,
    DEFAULT_SHUFFLE_SEED,
    DEFAULT_VAL_FRACTION,
    LIBSVM_LAYOUTS,
    ConversionOptions,
)
from dataprep.criteo.parts import COUNTS_FILE, count_part, merge_part_counts
from dataprep.criteo.records import (
    CATEGORICAL_NAMES,
    CATEGORICAL_VALUE,
    DENSE_CLIP,
    DENSE_NAMES,
    FIRST_CATEGORICAL_ID,
    LABELS,
    MAX_INTEGER_DIGITS,
    NUM_COLUMNS,
    MalformedRecordError,
    Record,
    check_inputs,
    parse_line,
    recalibrate,
    recorded_negative_sampling,
)
from dataprep.criteo.vocabulary import Vocabulary
from dataprep.criteo.workers import keep_freed_memory

__all__ = [
    "PROGRAM", "define_flags", "main", "run", "summary",
    "ConversionReport", "convert", "convert_with_report",
    "DEFAULT_CHUNK_BYTES", "DEFAULT_MEMORY_MB", "DEFAULT_MIN_COUNT", "DEFAULT_SHARDS", "DEFAULT_SHUFFLE_SEED",
    "DEFAULT_VAL_FRACTION", "LIBSVM_LAYOUTS", "ConversionOptions",
    "COUNTS_FILE", "count_part", "merge_part_counts",
    "CATEGORICAL_NAMES", "CATEGORICAL_VALUE", "DENSE_CLIP", "DENSE_NAMES", "FIRST_CATEGORICAL_ID", "LABELS",
    "MAX_INTEGER_DIGITS", "NUM_COLUMNS", "MalformedRecordError", "Record", "check_inputs", "parse_line",
    "recalibrate", "recorded_negative_sampling",
    "Vocabulary", "keep_freed_memory",
]
