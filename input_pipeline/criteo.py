"""Converts raw Criteo click logs (TSV) into a DeepFM dataset root.

Input lines are the Kaggle Display Advertising Challenge / Criteo log format:
40 tab-separated fields, `label I1..I13 C1..C26`, an empty field meaning
"missing". Output is the layout of `input_pipeline.schema` (LibSVM and
TFRecord shards plus `metadata.json`), with the features of the classic
tf.estimator DeepFM and Amazon SageMaker DeepFM samples:

* Ids 1..13 are I1..I13. The value is `clip(raw, 0, clip_i) / clip_i`, with
  `DENSE_CLIP` (each field's 95% quantile in the Kaggle data). A missing
  field has value 0. Negative raw values (I2 holds a few) are clipped to 0
  as well, so every value lies in [0, 1] and a negative count reads as 0.
* C1..C26 follow, each field owning a block of ids: its unknown id (the
  block's first id, `offset`), then one id per kept value, most frequent
  first (ties in value order). A value is kept when it occurs at least
  `min_count` times in the rows the vocabulary is counted on (the train
  split); rarer and unseen values map to the unknown id. An empty field is a
  value of its own (the key `""`), so "missing" stays distinguishable from
  "rare". Every categorical value is 1.0.

Usage::

    python -m input_pipeline.criteo --input train.txt --output_dir data/criteo
    python -m input_pipeline.criteo --input day_1 day_2 --output_dir data/days \\
        --vocab data/criteo --shards 16

The conversion streams the input twice: the first pass checks every line
and counts categorical values, the second writes. Memory grows with the
number of distinct categorical values, not with the number of rows, and a
malformed line stops the run before anything is written (unless
`--skip_bad_records`). Which split a line goes to depends only on the
line's bytes (CRC-32), so the split is the same on every run and identical
lines always land in the same split.
"""

import dataclasses
import os
import re
import time
import zlib
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from absl import app, flags, logging

from input_pipeline import schema, writers

DENSE_CLIP = (20, 600, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50)
DENSE_NAMES = tuple("I%d" % (i + 1) for i in range(schema.NUM_DENSE_FIELDS))
CATEGORICAL_NAMES = tuple("C%d" % (i + 1) for i in range(schema.NUM_CATEGORICAL_FIELDS))
NUM_COLUMNS = 1 + schema.NUM_DENSE_FIELDS + schema.NUM_CATEGORICAL_FIELDS
FIRST_CATEGORICAL_ID = schema.FIRST_DENSE_ID + schema.NUM_DENSE_FIELDS
CATEGORICAL_VALUE = 1.0
LABELS = {"0": 0.0, "1": 1.0}

DEFAULT_VAL_FRACTION = 0.1
DEFAULT_SHARDS = 4
DEFAULT_MIN_COUNT = 10
# Rows parsed before they are handed to the writer as one batch.
WRITE_BATCH_ROWS = 10000
# Bad records listed one by one in the log; the rest are only counted.
MAX_LOGGED_BAD_RECORDS = 10
_HASH_RANGE = 2**32
_SHOWN_LINE_CHARS = 120
_INTEGER = re.compile(r"-?[0-9]+\Z")


class MalformedRecordError(ValueError):
    """A line of a Criteo file is not a valid record.

    Attributes:
      path: the file.
      line_number: 1-based line number.
      reason: what is wrong with the line.
    """

    def __init__(self, path: str, line_number: int, reason: str):
        super().__init__("%s:%d: %s (pass --skip_bad_records to skip such lines)" % (path, line_number, reason))
        self.path = path
        self.line_number = line_number
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class BadRecord:
    """A skipped line: where it is and what is wrong with it."""

    path: str
    line_number: int
    reason: str


@dataclasses.dataclass
class Record:
    """One parsed line.

    Attributes:
      label: 0.0 or 1.0.
      dense: I1..I13, None where missing.
      categorical: C1..C26 as written (empty string where missing).
    """

    label: float
    dense: List[Optional[int]]
    categorical: List[str]


def parse_line(text: str) -> Record:
    """Parses one line (without its line break).

    Raises:
      ValueError: the line is malformed; the message says how.
    """
    fields = text.split("\t")
    if len(fields) != NUM_COLUMNS:
        raise ValueError("expected %d tab-separated fields, got %d" % (NUM_COLUMNS, len(fields)))
    label = LABELS.get(fields[0])
    if label is None:
        raise ValueError("label must be 0 or 1, got %r" % fields[0][:_SHOWN_LINE_CHARS])
    dense = []
    for name, raw in zip(DENSE_NAMES, fields[1:1 + schema.NUM_DENSE_FIELDS]):
        if not raw:
            dense.append(None)
        elif _INTEGER.match(raw):
            dense.append(int(raw))
        else:
            raise ValueError("%s must be an integer or empty, got %r" % (name, raw[:_SHOWN_LINE_CHARS]))
    return Record(label, dense, fields[1 + schema.NUM_DENSE_FIELDS:])


def dense_values(dense: Sequence[Optional[int]], clips: Sequence[float]) -> List[float]:
    """Maps raw integer fields to `clip(raw, 0, clip) / clip`; missing -> 0."""
    return [0.0 if raw is None else min(max(raw, 0), clip) / clip for raw, clip in zip(dense, clips)]


class Vocabulary:
    """Per categorical field: offset, unknown id and value -> id map.

    Stored in `DatasetMetadata.vocabulary` as
    `{"C1": {"offset": 14, "unknown_id": 14, "values": {"05db9164": 15, ...}}, ...}`.
    """

    def __init__(self, fields: Dict[str, dict]):
        self.fields = fields
        self._maps = [fields[name]["values"] for name in CATEGORICAL_NAMES]
        self._unknown = [fields[name]["unknown_id"] for name in CATEGORICAL_NAMES]

    @classmethod
    def build(cls, counts: Sequence[Dict[str, int]], min_count: int) -> "Vocabulary":
        """Keeps, per field, the values seen at least `min_count` times.

        Args:
          counts: per categorical field, value -> occurrences.
          min_count: the frequency cutoff, >= 1.

        Returns:
          The vocabulary with ids from `FIRST_CATEGORICAL_ID` upwards.
        """
        fields = {}
        offset = FIRST_CATEGORICAL_ID
        for name, field_counts in zip(CATEGORICAL_NAMES, counts):
            kept = sorted((value for value, count in field_counts.items() if count >= min_count),
                          key=lambda value: (-field_counts[value], value))
            fields[name] = {"offset": offset, "unknown_id": offset,
                            "values": {value: offset + 1 + i for i, value in enumerate(kept)}}
            offset += 1 + len(kept)
        return cls(fields)

    @classmethod
    def from_metadata(cls, metadata: schema.DatasetMetadata, path: str) -> "Vocabulary":
        """Takes the vocabulary of a converted dataset, checking its shape.

        Raises:
          ValueError: the metadata at `path` has no usable vocabulary.
        """
        missing = [name for name in CATEGORICAL_NAMES if name not in metadata.vocabulary]
        if missing:
            raise ValueError("--vocab %s has no vocabulary for %s; it must be the metadata of a converted "
                             "Criteo dataset" % (path, ", ".join(missing)))
        for name in CATEGORICAL_NAMES:
            entry = metadata.vocabulary[name]
            if not isinstance(entry, dict) or not {"offset", "unknown_id", "values"} <= set(entry):
                raise ValueError("--vocab %s: vocabulary of %s needs offset, unknown_id and values, got %r"
                                 % (path, name, sorted(entry) if isinstance(entry, dict) else entry))
        vocabulary = cls(metadata.vocabulary)
        if vocabulary.feature_size > metadata.feature_size:
            raise ValueError("--vocab %s: vocabulary uses ids up to %d but feature_size is %d"
                             % (path, vocabulary.feature_size - 1, metadata.feature_size))
        return vocabulary

    @property
    def feature_size(self) -> int:
        """Largest id + 1."""
        return max(max([entry["unknown_id"]] + list(entry["values"].values())) for entry in self.fields.values()) + 1

    def ids(self, categorical: Sequence[str]) -> List[int]:
        """Maps C1..C26 of one record to ids."""
        return [mapping.get(value, unknown) for mapping, value, unknown in zip(self._maps, categorical, self._unknown)]

    def sizes(self) -> List[int]:
        """Kept values per field (not counting the unknown id)."""
        return [len(self.fields[name]["values"]) for name in CATEGORICAL_NAMES]


def check_inputs(inputs: Sequence[str]) -> None:
    """Checks that there is at least one input and every one is a non-empty file.

    Raises:
      FileNotFoundError: an input does not exist or is not a file.
      ValueError: no inputs, or an input is empty.
    """
    if not inputs:
        raise ValueError("no input files given (--input)")
    for path in inputs:
        if not os.path.isfile(path):
            raise FileNotFoundError("--input %r: no such file" % path)
        if os.path.getsize(path) == 0:
            raise ValueError("--input %r is empty" % path)


def _read_lines(inputs: Sequence[str]) -> Iterator[Tuple[str, int, bytes]]:
    for path in inputs:
        with open(path, "rb") as f:
            for line_number, raw in enumerate(f, start=1):
                yield path, line_number, raw.rstrip(b"\r\n")


def _parse(path: str, line_number: int, raw: bytes) -> Record:
    try:
        return parse_line(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise MalformedRecordError(path, line_number, "not UTF-8 text: %s" % e) from None
    except ValueError as e:
        raise MalformedRecordError(path, line_number, str(e)) from None


def _is_validation(raw: bytes, threshold: int) -> bool:
    return zlib.crc32(raw) < threshold


@dataclasses.dataclass
class _Scan:
    rows: Dict[str, int]
    bad_records: int
    counts: List[Dict[str, int]]


def _scan(inputs: Sequence[str], threshold: int, count_values: bool, skip_bad_records: bool) -> _Scan:
    """Pass 1: checks every line; counts categorical values of train rows."""
    scan = _Scan(rows={schema.TRAIN_SPLIT: 0, schema.VALIDATION_SPLIT: 0}, bad_records=0,
                 counts=[{} for _ in CATEGORICAL_NAMES])
    for path, line_number, raw in _read_lines(inputs):
        try:
            record = _parse(path, line_number, raw)
        except MalformedRecordError as e:
            if not skip_bad_records:
                raise
            scan.bad_records += 1
            if scan.bad_records <= MAX_LOGGED_BAD_RECORDS:
                logging.warning("skipping bad record %s", e)
            continue
        if _is_validation(raw, threshold):
            scan.rows[schema.VALIDATION_SPLIT] += 1
            continue
        scan.rows[schema.TRAIN_SPLIT] += 1
        if count_values:
            for field_counts, value in zip(scan.counts, record.categorical):
                field_counts[value] = field_counts.get(value, 0) + 1
    return scan


class _BatchingWriter:
    """Collects converted rows of one split and writes them in batches."""

    def __init__(self, writer: writers.SplitWriter):
        self.writer = writer
        self._labels, self._ids, self._values = [], [], []

    def add(self, label: float, ids: List[int], values: List[float]) -> None:
        self._labels.append(label)
        self._ids.append(ids)
        self._values.append(values)
        if len(self._labels) >= WRITE_BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._labels:
            self.writer.write(np.array(self._labels, np.float32), np.array(self._ids, np.int64),
                              np.array(self._values, np.float64))
        self._labels, self._ids, self._values = [], [], []


def convert(inputs: Sequence[str], output_dir: str, *, val_fraction: float = DEFAULT_VAL_FRACTION,
            shards: int = DEFAULT_SHARDS, vocab: Optional[str] = None, min_count: Optional[int] = None,
            skip_bad_records: bool = False, overwrite: bool = False) -> schema.DatasetMetadata:
    """Converts Criteo TSV files into a dataset root at `output_dir`.

    Args:
      inputs: Criteo TSV files, read in this order.
      output_dir: the dataset root to write.
      val_fraction: share of lines (by a hash of each line) that go to the
        validation split, in [0, 1); 0 writes every line to `train/`.
      shards: shard files per split and format.
      vocab: a `metadata.json`, or a dataset root holding one, whose
        vocabulary and clip values to apply instead of building a
        vocabulary; values it lacks map to their field's unknown id.
      min_count: frequency cutoff when building the vocabulary (default
        `DEFAULT_MIN_COUNT`); not allowed together with `vocab`.
      skip_bad_records: skip and count malformed lines instead of failing.
      overwrite: replace a dataset already in `output_dir`.

    Returns:
      The metadata written to `output_dir/metadata.json`. Its `source` names
      the inputs and the number of skipped bad records.

    Raises:
      ValueError: a bad argument; an empty input; a malformed line (a
        `MalformedRecordError` naming file and line) without
        `skip_bad_records`; no valid line at all.
      FileNotFoundError: an input or `vocab` does not exist.
      FileExistsError: `output_dir` holds a dataset and not `overwrite`.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError("val_fraction must be in [0, 1), got %r" % val_fraction)
    if shards < 1:
        raise ValueError("shards must be >= 1, got %r" % shards)
    if vocab is not None and min_count is not None:
        raise ValueError("min_count (%r) applies only when building a vocabulary, not with vocab=%r"
                         % (min_count, vocab))
    min_count = DEFAULT_MIN_COUNT if min_count is None else min_count
    if min_count < 1:
        raise ValueError("min_count must be >= 1, got %r" % min_count)
    check_inputs(inputs)
    vocabulary, clips, vocab_metadata = None, list(DENSE_CLIP), None
    if vocab is not None:
        vocab_metadata = schema.DatasetMetadata.read(vocab)
        vocabulary = Vocabulary.from_metadata(vocab_metadata, vocab)
        if len(vocab_metadata.dense_clip) != schema.NUM_DENSE_FIELDS:
            raise ValueError("--vocab %s: dense_clip must have %d values, got %r"
                             % (vocab, schema.NUM_DENSE_FIELDS, vocab_metadata.dense_clip))
        clips = list(vocab_metadata.dense_clip)
    writers.check_output_dir(output_dir, overwrite)

    threshold = int(val_fraction * _HASH_RANGE)
    scan = _scan(inputs, threshold, count_values=vocabulary is None, skip_bad_records=skip_bad_records)
    total = sum(scan.rows.values())
    if not total:
        raise ValueError("no valid records in %s (%d bad records skipped)" % (", ".join(inputs), scan.bad_records))
    if vocabulary is None:
        vocabulary = Vocabulary.build(scan.counts, min_count)
    del scan.counts

    writers.prepare_output_dir(output_dir, overwrite)
    split_names = [schema.TRAIN_SPLIT] + ([schema.VALIDATION_SPLIT] if val_fraction > 0 else [])
    split_writers = {name: _BatchingWriter(writers.SplitWriter(output_dir, name, shards)) for name in split_names}
    try:
        for path, line_number, raw in _read_lines(inputs):
            try:
                record = _parse(path, line_number, raw)
            except MalformedRecordError:
                continue  # counted (or fatal) in the first pass
            split = schema.VALIDATION_SPLIT if _is_validation(raw, threshold) else schema.TRAIN_SPLIT
            split_writers[split].add(record.label,
                                     list(range(schema.FIRST_DENSE_ID, FIRST_CATEGORICAL_ID))
                                     + vocabulary.ids(record.categorical),
                                     dense_values(record.dense, clips)
                                     + [CATEGORICAL_VALUE] * schema.NUM_CATEGORICAL_FIELDS)
        for writer in split_writers.values():
            writer.flush()
    finally:
        for writer in split_writers.values():
            writer.writer.close()
    splits = {name: writer.writer.split_info() for name, writer in split_writers.items()}
    num_positives = sum(writer.writer.positives for writer in split_writers.values())
    written = {name: info.rows for name, info in splits.items()}
    expected = {name: rows for name, rows in scan.rows.items() if name in split_writers}
    if written != expected:
        raise RuntimeError("inputs changed during the conversion: first pass counted %s rows, second wrote %s"
                           % (expected, written))

    vocab_text = ("vocabulary from %s" % vocab if vocab is not None
                  else "vocabulary built from the train split with min_count=%d" % min_count)
    metadata = schema.DatasetMetadata(
        feature_size=vocab_metadata.feature_size if vocab_metadata else vocabulary.feature_size,
        splits=splits, vocabulary=vocabulary.fields, dense_clip=[float(c) for c in clips],
        source="Criteo TSV %s: %d records converted (%d positive), %d bad records skipped; %s; val_fraction=%g"
        % (", ".join(os.path.abspath(p) for p in inputs), total, num_positives, scan.bad_records, vocab_text,
           val_fraction))
    metadata.write(output_dir)
    return metadata


def summary(output_dir: str, metadata: schema.DatasetMetadata, seconds: float) -> str:
    """A few lines describing a written dataset root, for the console."""
    lines = ["wrote %s in %.1fs: feature_size=%d field_size=%d"
             % (output_dir, seconds, metadata.feature_size, metadata.field_size)]
    for name, info in metadata.splits.items():
        lines.append("  %-10s %10d rows in %d shards" % (name, info.rows, len(info.shards)))
    lines.append("  source: %s" % metadata.source)
    return "\n".join(lines)


def define_flags() -> None:
    """Defines the command-line flags of this tool."""
    flags.DEFINE_multi_string("input", None, "Criteo TSV file; repeat the flag, or list more files after the flags.")
    flags.DEFINE_string("output_dir", None, "Dataset root to write.")
    flags.DEFINE_float("val_fraction", DEFAULT_VAL_FRACTION, "Share of lines for the validation split; 0: none.")
    flags.DEFINE_integer("shards", DEFAULT_SHARDS, "Shard files per split and format.")
    flags.DEFINE_string("vocab", None, "metadata.json (or dataset root) whose vocabulary to apply.")
    flags.DEFINE_integer("min_count", None, "Frequency cutoff of the vocabulary (default %d)." % DEFAULT_MIN_COUNT)
    flags.DEFINE_bool("skip_bad_records", False, "Skip and count malformed lines instead of failing.")
    flags.DEFINE_bool("overwrite", False, "Replace a dataset already in --output_dir.")
    flags.mark_flag_as_required("output_dir")


def main(argv: Sequence[str]) -> None:
    """Runs the conversion with the parsed flags and prints a summary."""
    cfg = flags.FLAGS
    start = time.time()
    try:
        metadata = convert(list(cfg.input or []) + list(argv[1:]), cfg.output_dir, val_fraction=cfg.val_fraction,
                           shards=cfg.shards, vocab=cfg.vocab, min_count=cfg.min_count,
                           skip_bad_records=cfg.skip_bad_records, overwrite=cfg.overwrite)
    except (ValueError, OSError) as e:
        raise SystemExit("error: %s" % e) from e
    print(summary(cfg.output_dir, metadata, time.time() - start))


def run() -> None:
    """Console entry point."""
    define_flags()
    app.run(main)


if __name__ == "__main__":
    run()
