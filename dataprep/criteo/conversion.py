"""Converts raw Criteo click logs (TSV) into a DeepFM dataset root, in bounded memory, on every core.

Input lines are the Kaggle Display Advertising Challenge / Criteo log format:
40 tab-separated fields, `label I1..I13 C1..C26`, an empty field meaning
"missing". Output is the layout of `input_pipeline.schema` (LibSVM and
TFRecord shards plus `metadata.json`), with the features of the classic
tf.estimator DeepFM and Amazon SageMaker DeepFM samples:

* Ids 1..13 are I1..I13. The value is `clip(raw, 0, clip_i) / clip_i`, with
  `DENSE_CLIP` (each field's 95% quantile in the Kaggle data). A missing
  field has value 0. Negative raw values (I2 holds a few) are clipped to 0
  as well, so every value lies in [0, 1] and a negative count reads as 0.
  An integer field has at most `MAX_INTEGER_DIGITS` digits.
* C1..C26 follow, each field owning a block of ids: its unknown id (the
  block's first id, `offset`), then one id per kept value, most frequent
  first (ties in byte order). A value is kept when it occurs at least
  `min_count` times in the rows the vocabulary is counted on (every row of
  the train split, before negative sampling); rarer and unseen values map
  to the unknown id. An empty field is a value of its own (the key `""`), so
  "missing" stays distinguishable from "rare". Every categorical value is 1.0.

Usage::

    python -m dataprep.criteo --input train.txt --output_dir data/criteo
    python -m dataprep.criteo --input day_1 day_2 --output_dir data/days \\
        --vocab data/criteo --shards 16 --shuffle --negative_sampling 0.25

How it runs:

* The inputs are cut into byte ranges (`chunk_bytes`; a line belongs to the
  range its first byte is in) and both passes run over the ranges on
  `workers` processes. The first pass checks every line and counts the
  categorical values; the second writes. Lines are parsed a block at a time
  with numpy (field boundaries, digits and keys as byte arithmetic); the
  only per-line Python work is the line's CRC-32 (and, with negative
  sampling, a hash of each train negative).
* Memory: each process counts values in numpy partial counts and, past its
  share of `memory_mb`, writes them to disk as sorted runs
  (`dataprep.vocab`), merged at the end in key ranges that fit the
  budget. The result equals counting everything in memory. Only the kept
  vocabulary (values seen `min_count` times or more) must fit in memory, as
  it goes to `metadata.json`.
* Output: row k of a split (in input order, or in the shuffled order) goes
  to shard k % `shards`, so shards differ by one row at most. Each range
  writes its own piece of every shard and the pieces are concatenated in
  order, so the output does not depend on `workers` or `chunk_bytes`.
* Which split a line goes to depends only on the line's bytes (CRC-32), so
  the split is the same on every run and identical lines land in the same
  split. A malformed line stops the run before anything is written (unless
  `skip_bad_records`), naming the file and line.
* `shuffle`: rows are scattered to buckets by a seeded hash of their index,
  each bucket (sized to fit the memory budget) is permuted in memory, and
  the buckets are written one after the other: a uniformly random order
  across all shards, in bounded memory.
* `negative_sampling=RATE`: a train row labelled 0 is kept with probability
  RATE (decided by a hash of the line's bytes, so it is reproducible);
  positives and the validation split are kept whole. The rate is recorded in
  `metadata.json`'s `source` (`negative_sampling=RATE`; read it back with
  `recorded_negative_sampling`), because a model trained on such data
  predicts p' = p / (p + (1 - p) * RATE) for a true click probability p;
  `recalibrate` inverts it: p = RATE * p' / (1 - p' + RATE * p').

The parts a distributed job needs are here as functions: `count_part`
(the first pass over one instance's files, writing its counts),
`merge_part_counts` (one vocabulary from every instance's counts, written as
a `metadata.json` that `--vocab` takes) and `convert` with `vocab` (each
instance converts its own files with the shared vocabulary).
"""

import concurrent.futures
import ctypes
import dataclasses
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import tempfile
import time
import zlib
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from absl import flags, logging

from cli import entry
from input_pipeline import formats, schema
from dataprep import vocab as vocab_lib
from dataprep import writers

PROGRAM = "dataprep.criteo"

DENSE_CLIP = (20, 600, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50)
DENSE_NAMES = tuple("I%d" % (i + 1) for i in range(schema.NUM_DENSE_FIELDS))
CATEGORICAL_NAMES = tuple("C%d" % (i + 1) for i in range(schema.NUM_CATEGORICAL_FIELDS))
NUM_COLUMNS = 1 + schema.NUM_DENSE_FIELDS + schema.NUM_CATEGORICAL_FIELDS
FIRST_CATEGORICAL_ID = schema.FIRST_DENSE_ID + schema.NUM_DENSE_FIELDS
CATEGORICAL_VALUE = 1.0
LABELS = {"0": 0.0, "1": 1.0}
MAX_INTEGER_DIGITS = 18

DEFAULT_VAL_FRACTION = 0.1
DEFAULT_SHARDS = 4
DEFAULT_MIN_COUNT = 10
DEFAULT_MEMORY_MB = 512
DEFAULT_CHUNK_BYTES = 16 << 20
DEFAULT_SHUFFLE_SEED = 0
LIBSVM_LAYOUTS = ("fixed", "compact")
# Bytes parsed at once by numpy: bounds the per-block temporaries (about
# 30 times the block) while keeping numpy calls long.
BLOCK_BYTES = 1 << 20
# Rows handed to the writer at once.
WRITE_BATCH_ROWS = 16384
# Bad records listed one by one in the log; the rest are only counted.
MAX_LOGGED_BAD_RECORDS = 10
# Shuffle buckets are sized so that this many fit the memory budget at once.
SHUFFLE_BUCKETS_IN_MEMORY = 8
_MIB = 1 << 20
_COPY_RANGE_BYTES = 1 << 30
# glibc's mallopt parameters and the values `keep_freed_memory` sets.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest
_TRIM_THRESHOLD_BYTES = 1 << 30
_TOP_PAD_BYTES = 64 << 20
_HASH_RANGE = 2**32
_SHOWN_LINE_CHARS = 120
_INTEGER = re.compile(r"-?[0-9]+\Z")
_TAB, _NEWLINE, _MINUS, _ZERO, _NINE = 9, 10, ord("-"), ord("0"), ord("9")
_FIRST_NON_ASCII = 128
_TRAILING_CR = re.compile(rb"\r+(?=\n|\Z)")
_SAMPLE_PERSON = b"criteo-negative"
_SAMPLE_BITS = 64
_SPLITS = (schema.TRAIN_SPLIT, schema.VALIDATION_SPLIT)
_ROW_DTYPE = np.dtype([("label", "<f4"), ("ids", "<i8", (schema.FIELD_SIZE,)),
                       ("values", "<f8", (schema.FIELD_SIZE,))])
_SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
_SPLITMIX_M1 = 0xBF58476D1CE4E5B9
_SPLITMIX_M2 = 0x94D049BB133111EB


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
    """Parses one line (without its line break) in plain Python.

    The converter parses blocks of lines with numpy and uses this to say
    what is wrong with a line numpy rejected; both accept the same lines.

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
        elif not _INTEGER.match(raw):
            raise ValueError("%s must be an integer or empty, got %r" % (name, raw[:_SHOWN_LINE_CHARS]))
        elif len(raw.lstrip("-")) > MAX_INTEGER_DIGITS:
            raise ValueError("%s has more than %d digits: %r" % (name, MAX_INTEGER_DIGITS, raw[:_SHOWN_LINE_CHARS]))
        else:
            dense.append(int(raw))
    return Record(label, dense, fields[1 + schema.NUM_DENSE_FIELDS:])


def dense_values(dense: Sequence[Optional[int]], clips: Sequence[float]) -> List[float]:
    """Maps raw integer fields to `clip(raw, 0, clip) / clip`; missing -> 0."""
    return [0.0 if raw is None else min(max(raw, 0), clip) / clip for raw, clip in zip(dense, clips)]


def recalibrate(probability, negative_sampling: float):
    """Maps a prediction of a model trained with negative sampling back to a click probability.

    A model trained on data whose negatives were kept with probability `r`
    predicts p' = p / (p + (1 - p) * r) for a true probability p; this is the
    inverse, p = r * p' / (1 - p' + r * p').

    Args:
      probability: predicted probability (a float or numpy array).
      negative_sampling: the rate the train split was written with.
    """
    probability = np.asarray(probability, dtype=np.float64)
    return negative_sampling * probability / (1.0 - probability + negative_sampling * probability)


_NEGATIVE_SAMPLING_SOURCE = re.compile(r"negative_sampling=([0-9.eE+-]+)")


def recorded_negative_sampling(metadata: schema.DatasetMetadata) -> float:
    """The negative-sampling rate a dataset was converted with (1.0: none)."""
    match = _NEGATIVE_SAMPLING_SOURCE.search(metadata.source)
    return float(match.group(1)) if match else 1.0


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
        """Keeps, per field, the values seen at least `min_count` times (all counts in memory).

        Args:
          counts: per categorical field, value -> occurrences.
          min_count: the frequency cutoff, >= 1.

        Returns:
          The vocabulary with ids from `FIRST_CATEGORICAL_ID` upwards, most
          frequent value first, ties in byte order.
        """
        return cls.from_ranked([sorted((value for value, count in field_counts.items() if count >= min_count),
                                       key=lambda value: (-field_counts[value], value.encode()))
                                for field_counts in counts])

    @classmethod
    def from_ranked(cls, ranked: Sequence[Sequence[str]]) -> "Vocabulary":
        """Gives ids to kept values, per field in the order given."""
        fields = {}
        offset = FIRST_CATEGORICAL_ID
        for name, kept in zip(CATEGORICAL_NAMES, ranked):
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
        if metadata.split is not None:
            raise ValueError("--vocab %s is the metadata of the %r split folder, which has no vocabulary: give "
                             "the dataset root holding it" % (path, metadata.split))
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

    def lookup_tables(self) -> List[Tuple[np.ndarray, np.ndarray, int]]:
        """Per field (keys sorted by their bytes, their ids, the unknown id), for `_lookup`."""
        tables = []
        for mapping, unknown in zip(self._maps, self._unknown):
            encoded = [value.encode("utf-8") for value in mapping]
            keys = np.array(encoded, dtype=vocab_lib.key_dtype(max([0] + [len(v) for v in encoded])))
            ids = np.array(list(mapping.values()), dtype=np.int64)
            order = np.argsort(vocab_lib.sortable(keys), kind="stable")
            tables.append((keys[order], ids[order], unknown))
        return tables


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


# ---------------------------------------------------------------------------
# Byte ranges and blocks of lines.


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A byte range of an input file: the lines whose first byte lies in [start, end)."""

    index: int
    path: str
    start: int
    end: int


def plan_chunks(inputs: Sequence[str], chunk_bytes: int) -> List[Chunk]:
    """Cuts the inputs into byte ranges of about `chunk_bytes`, in input order."""
    chunks = []
    for path in inputs:
        size = os.path.getsize(path)
        count = max(1, -(-size // chunk_bytes))
        bounds = [size * i // count for i in range(count + 1)]
        for start, end in zip(bounds[:-1], bounds[1:]):
            chunks.append(Chunk(len(chunks), path, start, end))
    return chunks


def _read_blocks(chunk: Chunk) -> Iterator[bytes]:
    """The chunk's lines in blocks of about `BLOCK_BYTES`, each block whole lines ending in `\\n`.

    Trailing carriage returns are removed from each line, and a last line
    without a line break gets one.
    """
    with open(chunk.path, "rb") as f:
        position = chunk.start
        if position > 0:
            f.seek(position - 1)
            position += len(f.readline()) - 1  # the rest of the line the previous range owns
        while position < chunk.end:
            data = f.read(min(BLOCK_BYTES, chunk.end - position))
            if not data:
                return
            position += len(data)
            if not data.endswith(b"\n"):
                tail = f.readline()
                position += len(tail)
                data += tail
                if not data.endswith(b"\n"):
                    data += b"\n"
            if b"\r" in data:
                data = _TRAILING_CR.sub(b"", data)
            yield data


@dataclasses.dataclass
class _Block:
    """A block of lines parsed with numpy.

    Attributes:
      lines: the lines (without line breaks).
      rows: indices into `lines` of the good lines.
      labels: float64 [m] of the good lines.
      dense: int64 [m, 13] raw integer fields (0 where missing).
      keys: bytes keys [m, 26] of the categorical fields.
      bad: (index into `lines`, reason) of each bad line.
    """

    lines: List[bytes]
    rows: np.ndarray
    labels: np.ndarray
    dense: np.ndarray
    keys: np.ndarray
    bad: List[Tuple[int, str]]


_DENSE_WINDOW = MAX_INTEGER_DIGITS + 1  # a sign and the digits


def _bad_reason(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return "not UTF-8 text: %s" % e
    try:
        parse_line(text)
    except ValueError as e:
        return str(e)
    raise RuntimeError("a line the block parser rejected parses as a valid record: %r"
                       % raw[:_SHOWN_LINE_CHARS])


def _parse_block(data: bytes) -> _Block:
    """Parses whole lines (each ending in `\\n`) with numpy; see `_Block`."""
    arr = np.frombuffer(data, dtype=np.uint8)
    lines = data.split(b"\n")[:-1]
    is_newline = arr == _NEWLINE
    newlines = np.flatnonzero(is_newline)
    line_starts = np.concatenate([[0], newlines[:-1] + 1])
    separators = np.flatnonzero(is_newline | (arr == _TAB))
    newline_at = np.flatnonzero(is_newline[separators])
    fields_per_line = np.diff(newline_at, prepend=-1)
    candidates = np.flatnonzero(fields_per_line == NUM_COLUMNS)
    ends = separators[newline_at[candidates, None] + np.arange(1 - NUM_COLUMNS, 1)]
    starts = np.empty_like(ends)
    starts[:, 0] = line_starts[candidates]
    starts[:, 1:] = ends[:, :-1] + 1
    lengths = ends - starts
    cat = slice(1 + schema.NUM_DENSE_FIELDS, NUM_COLUMNS)
    key_width = vocab_lib.key_dtype(int(lengths[:, cat].max()) if candidates.size else 0).itemsize
    padded = np.concatenate([arr, np.zeros(max(key_width, _DENSE_WINDOW), np.uint8)])

    label_byte = arr[starts[:, 0]]
    good = (lengths[:, 0] == 1) & ((label_byte == _ZERO) | (label_byte == _ZERO + 1))

    dense_lengths = lengths[:, 1:cat.start]
    dense_starts = starts[:, 1:cat.start]
    negative = (padded[dense_starts] == _MINUS) & (dense_lengths > 0)
    good &= np.all((dense_lengths - negative <= MAX_INTEGER_DIGITS) & ~(negative & (dense_lengths == 1)), axis=1)
    magnitude = np.zeros(dense_lengths.shape, dtype=np.int64)
    longest = min(int(dense_lengths.max()) if dense_lengths.size else 0, _DENSE_WINDOW)
    for k in range(longest):  # Horner's rule, one character column at a time
        digit = padded[dense_starts + k].astype(np.int64) - _ZERO
        active = (k >= negative) & (k < dense_lengths)
        good &= np.all(((digit >= 0) & (digit <= 9)) | ~active, axis=1)
        magnitude = np.where(active, magnitude * 10 + digit, magnitude)
    dense = np.where(negative, -magnitude, magnitude)

    non_ascii = np.flatnonzero(arr >= _FIRST_NON_ASCII)
    for line in np.unique(np.searchsorted(newlines, non_ascii)):
        position = np.searchsorted(candidates, line)
        if position < candidates.size and candidates[position] == line:
            try:
                lines[line].decode("utf-8")
            except UnicodeDecodeError:
                good[position] = False

    cat_lengths = lengths[:, cat]
    window = np.lib.stride_tricks.sliding_window_view(padded, key_width)[starts[:, cat]]
    window = np.where(np.arange(key_width) < cat_lengths[..., None], window, 0).astype(np.uint8)
    keys = np.ascontiguousarray(window).view("S%d" % key_width).reshape(candidates.size, schema.NUM_CATEGORICAL_FIELDS)

    good_mask = np.zeros(len(lines), dtype=bool)
    good_mask[candidates[good]] = True
    bad = [(int(i), _bad_reason(lines[i])) for i in np.flatnonzero(~good_mask)]
    return _Block(lines=lines, rows=candidates[good], labels=(label_byte[good] - _ZERO).astype(np.float64),
                  dense=dense[good], keys=keys[good], bad=bad)


def _line_crcs(block: _Block) -> np.ndarray:
    return np.fromiter((zlib.crc32(block.lines[i]) for i in block.rows), dtype=np.int64, count=block.rows.size)


def _kept(block: _Block, train: np.ndarray, negative_sampling: float) -> np.ndarray:
    """Which good rows survive negative sampling (train rows labelled 0, by a hash of the line)."""
    keep = np.ones(block.rows.size, dtype=bool)
    if negative_sampling >= 1.0:
        return keep
    limit = int(negative_sampling * 2**_SAMPLE_BITS)
    for i in np.flatnonzero(train & (block.labels == 0)):
        digest = hashlib.blake2b(block.lines[block.rows[i]], digest_size=_SAMPLE_BITS // 8, person=_SAMPLE_PERSON)
        keep[i] = int.from_bytes(digest.digest(), "little") < limit
    return keep


# ---------------------------------------------------------------------------
# Pass 1: check lines, count rows and categorical values.


@dataclasses.dataclass
class _CountTask:
    chunk: Chunk
    threshold: int
    count_values: bool
    negative_sampling: float
    budget_bytes: int
    spill_dir: str
    stop_at_bad: bool
    hand_over_runs: bool = False


@dataclasses.dataclass
class _ChunkScan:
    """What pass 1 found in one byte range (line numbers local to the range, 1-based)."""

    index: int
    lines: int = 0
    rows: Dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(_SPLITS, 0))
    dropped_negatives: int = 0
    bad_records: int = 0
    bad: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
    error: Optional[Tuple[int, str]] = None
    counts: Optional[List[Tuple[np.ndarray, np.ndarray]]] = None
    runs: List[List[vocab_lib.Run]] = dataclasses.field(default_factory=list)
    spilled_runs: int = 0


class _Counters:
    """One `FieldCounter` per categorical field, sharing one memory budget."""

    def __init__(self, budget_bytes: int, spill_prefix: str):
        self._budget = budget_bytes
        self.fields = [vocab_lib.FieldCounter(budget_bytes, "%s-C%d" % (spill_prefix, f + 1))
                       for f in range(schema.NUM_CATEGORICAL_FIELDS)]

    def add(self, field: int, keys: np.ndarray, counts: Optional[np.ndarray] = None) -> None:
        if counts is None:
            self.fields[field].add_keys(keys)
        else:
            self.fields[field].add(keys, counts)

    def enforce_budget(self) -> None:
        """Spills the largest fields until what is held fits half the budget."""
        if sum(c.held_bytes for c in self.fields) <= self._budget:
            return
        for counter in sorted(self.fields, key=lambda c: -c.held_bytes):
            counter.spill()
            if sum(c.held_bytes for c in self.fields) * 2 <= self._budget:
                return

    @property
    def spilled(self) -> bool:
        return any(c.runs for c in self.fields)


def _count_chunk(task: _CountTask) -> _ChunkScan:
    scan = _ChunkScan(task.chunk.index)
    counters = _Counters(task.budget_bytes, os.path.join(task.spill_dir, "chunk-%06d" % task.chunk.index))
    for data in _read_blocks(task.chunk):
        block = _parse_block(data)
        for i, reason in block.bad:
            scan.bad_records += 1
            if len(scan.bad) < MAX_LOGGED_BAD_RECORDS:
                scan.bad.append((scan.lines + i + 1, reason))
            if task.stop_at_bad:
                scan.error = (scan.lines + i + 1, reason)
                return scan
        scan.lines += len(block.lines)
        train = _line_crcs(block) >= task.threshold
        keep = _kept(block, train, task.negative_sampling)
        scan.rows[schema.VALIDATION_SPLIT] += int(np.count_nonzero(~train))
        scan.rows[schema.TRAIN_SPLIT] += int(np.count_nonzero(train & keep))
        scan.dropped_negatives += int(np.count_nonzero(~keep))
        if task.count_values:
            keys = block.keys[train]
            for f in range(schema.NUM_CATEGORICAL_FIELDS):
                counters.add(f, keys[:, f])
            counters.enforce_budget()
    over_budget = counters.spilled
    if over_budget or (task.count_values and task.hand_over_runs):
        for counter in counters.fields:
            counter.spill()
        scan.runs = [counter.runs for counter in counters.fields]
        scan.spilled_runs = sum(len(runs) for runs in scan.runs) if over_budget else 0
    elif task.count_values:
        scan.counts = [counter.result() for counter in counters.fields]
    return scan


@dataclasses.dataclass
class _MergeTask:
    runs: List[vocab_lib.Run]
    min_count: int
    budget_bytes: int
    output_prefix: Optional[str] = None


def _merge_field(task: _MergeTask):
    """One field's kept (keys, counts); with `output_prefix`, written as a run there, and the `Run` returned."""
    keys, counts = vocab_lib.merge_runs([run.load() for run in task.runs], task.min_count, task.budget_bytes)
    if task.output_prefix is not None:
        return vocab_lib.write_run(keys, counts, task.output_prefix)
    return keys, counts


# ---------------------------------------------------------------------------
# Pass 2: convert and write.

_TABLES_CACHE: Dict[str, list] = {}


def _tables(path: str) -> list:
    if path not in _TABLES_CACHE:
        _TABLES_CACHE.clear()
        with open(path, "rb") as f:
            _TABLES_CACHE[path] = [dict(keys=t["keys"], ids=t["ids"], unknown=int(t["unknown"]), widened={})
                                   for t in np.load(f, allow_pickle=True)["tables"]]
    return _TABLES_CACHE[path]


def _save_tables(vocabulary: Vocabulary, path: str) -> None:
    tables = np.empty(schema.NUM_CATEGORICAL_FIELDS, dtype=object)
    for f, (keys, ids, unknown) in enumerate(vocabulary.lookup_tables()):
        tables[f] = {"keys": keys, "ids": ids, "unknown": unknown}
    with open(path, "wb") as out:
        np.savez(out, tables=tables)


def _lookup(keys: np.ndarray, table: dict) -> np.ndarray:
    """Ids of the keys of one field; the unknown id where a key is not in the vocabulary."""
    if not table["ids"].size:
        return np.full(keys.size, table["unknown"], dtype=np.int64)
    width = max(keys.dtype.itemsize, table["keys"].dtype.itemsize)
    if width not in table["widened"]:
        table["widened"][width] = vocab_lib.widen(table["keys"], width)
    known = table["widened"][width]
    keys = vocab_lib.widen(keys, width)
    position = np.minimum(np.searchsorted(vocab_lib.sortable(known), vocab_lib.sortable(keys)), known.size - 1)
    return np.where(known[position] == keys, table["ids"][position], table["unknown"])


def _block_rows(block: _Block, tables: list, clips: np.ndarray) -> np.ndarray:
    """The block's good rows as `_ROW_DTYPE` records (label, ids, values)."""
    rows = np.empty(block.rows.size, dtype=_ROW_DTYPE)
    rows["label"] = block.labels
    ids = rows["ids"]
    ids[:, :schema.NUM_DENSE_FIELDS] = np.arange(schema.FIRST_DENSE_ID, FIRST_CATEGORICAL_ID)
    for f, table in enumerate(tables):
        ids[:, schema.NUM_DENSE_FIELDS + f] = _lookup(block.keys[:, f], table)
    values = rows["values"]
    values[:, :schema.NUM_DENSE_FIELDS] = np.minimum(np.maximum(block.dense, 0), clips) / clips
    values[:, schema.NUM_DENSE_FIELDS:] = CATEGORICAL_VALUE
    return rows


@dataclasses.dataclass
class _WriteTask:
    chunk: Chunk
    threshold: int
    negative_sampling: float
    tables_path: str
    clips: List[float]
    output_dir: str
    splits: List[str]
    shards: int
    first_rows: Dict[str, int]
    id_width: Optional[int]
    scatter_dir: Optional[str] = None
    buckets: Optional[Dict[str, int]] = None
    seed: int = DEFAULT_SHUFFLE_SEED


@dataclasses.dataclass
class _Written:
    rows: Dict[str, int]
    positives: Dict[str, int]
    bucket_rows: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def _piece(prefix: str, index: int) -> str:
    return ".%s-%06d" % (prefix, index)


def _converted_rows(task: _WriteTask) -> Iterator[Dict[str, np.ndarray]]:
    """The chunk's rows to write, per split, a block at a time."""
    tables = _tables(task.tables_path)
    clips = np.asarray(task.clips, dtype=np.float64)
    for data in _read_blocks(task.chunk):
        block = _parse_block(data)
        train = _line_crcs(block) >= task.threshold
        keep = _kept(block, train, task.negative_sampling)
        rows = _block_rows(block, tables, clips)
        yield {schema.TRAIN_SPLIT: rows[train & keep], schema.VALIDATION_SPLIT: rows[~train]}


def _write_rows(writer: writers.SplitWriter, rows: np.ndarray) -> None:
    writer.write(rows["label"], rows["ids"], rows["values"])


def _write_chunk(task: _WriteTask) -> _Written:
    split_writers = {split: writers.SplitWriter(task.output_dir, split, task.shards, first_row=task.first_rows[split],
                                                piece_suffix=_piece("piece", task.chunk.index),
                                                libsvm_id_width=task.id_width)
                     for split in task.splits}
    pending = {split: [] for split in task.splits}
    written = _Written(rows=dict.fromkeys(task.splits, 0), positives=dict.fromkeys(task.splits, 0))

    def flush(split):
        if pending[split]:
            rows = np.concatenate(pending[split])
            _write_rows(split_writers[split], rows)
            written.rows[split] += rows.size
            written.positives[split] += int(np.count_nonzero(rows["label"] > 0.5))
            pending[split] = []

    try:
        for block_rows in _converted_rows(task):
            for split in task.splits:
                pending[split].append(block_rows[split])
                if sum(part.size for part in pending[split]) >= WRITE_BATCH_ROWS:
                    flush(split)
        for split in task.splits:
            flush(split)
    finally:
        for writer in split_writers.values():
            writer.close()
    return written


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """A 64-bit mix of each value (SplitMix64's finalizer): a seeded hash of row indices."""
    z = values.astype(np.uint64) + np.uint64(_SPLITMIX_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_SPLITMIX_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_SPLITMIX_M2)
    return z ^ (z >> np.uint64(31))


def _buckets_of(seed: int, split: str, first_row: int, count: int, buckets: int) -> np.ndarray:
    salt = _splitmix64(np.array([seed * len(_SPLITS) + _SPLITS.index(split)], dtype=np.uint64))[0]
    index = np.arange(first_row, first_row + count, dtype=np.uint64)
    return (_splitmix64(index ^ salt) % np.uint64(buckets)).astype(np.int64)


def _scatter_path(scatter_dir: str, split: str, chunk_index: int) -> str:
    return os.path.join(scatter_dir, "rows-%s-%06d.npy" % (split, chunk_index))


def _scatter_chunk(task: _WriteTask) -> _Written:
    """Shuffle, step 1: the chunk's rows, sorted by their bucket, in one file per split."""
    parts = {split: [] for split in task.splits}
    for block_rows in _converted_rows(task):
        for split in task.splits:
            parts[split].append(block_rows[split])
    written = _Written(rows={}, positives={})
    for split in task.splits:
        rows = np.concatenate(parts[split])
        bucket = _buckets_of(task.seed, split, task.first_rows[split], rows.size, task.buckets[split])
        order = np.argsort(bucket, kind="stable")
        np.save(_scatter_path(task.scatter_dir, split, task.chunk.index), rows[order])
        written.rows[split] = int(rows.size)
        written.positives[split] = int(np.count_nonzero(rows["label"] > 0.5))
        written.bucket_rows[split] = np.bincount(bucket, minlength=task.buckets[split])
    return written


@dataclasses.dataclass
class _BucketTask:
    split: str
    bucket: int
    slices: List[Tuple[str, int, int]]  # (scatter file, begin, end)
    first_row: int
    seed: int
    output_dir: str
    shards: int
    id_width: Optional[int]


def _write_bucket(task: _BucketTask) -> int:
    """Shuffle, step 2: one bucket's rows from every chunk, permuted, written as pieces of the shards."""
    parts = [np.load(path, mmap_mode="r")[begin:end] for path, begin, end in task.slices if end > begin]
    rows = np.concatenate(parts) if parts else np.zeros(0, _ROW_DTYPE)
    rng = np.random.default_rng([task.seed, _SPLITS.index(task.split), task.bucket])
    rows = rows[rng.permutation(rows.size)]
    with writers.SplitWriter(task.output_dir, task.split, task.shards, first_row=task.first_row,
                             piece_suffix=_piece("bucket", task.bucket), libsvm_id_width=task.id_width) as writer:
        for start in range(0, rows.size, WRITE_BATCH_ROWS):
            _write_rows(writer, rows[start:start + WRITE_BATCH_ROWS])
    return int(rows.size)


@dataclasses.dataclass
class _JoinTask:
    target: str
    suffixes: List[str]


def _join_pieces(task: _JoinTask) -> None:
    """Joins a shard file's pieces, in order, into the file, and removes them.

    The bytes are copied by the kernel (`os.copy_file_range`) where it can,
    else through a buffer.
    """
    stem, ext = os.path.splitext(task.target)
    with open(task.target, "wb") as out:
        for suffix in task.suffixes:
            piece = stem + suffix + ext
            with open(piece, "rb") as f:
                _append(f, out)
            os.remove(piece)


def _append(source, out) -> None:
    """Appends what is left of the binary file `source` to the binary file `out`."""
    out.flush()
    if hasattr(os, "copy_file_range"):
        try:
            while os.copy_file_range(source.fileno(), out.fileno(), _COPY_RANGE_BYTES):
                pass
            return
        except OSError:  # not between these files: the rest through a buffer
            pass
    shutil.copyfileobj(source, out, length=_MIB)


def _join_splits(executor, output_dir: str, shards: int, suffixes: Dict[str, List[str]]) -> None:
    """Joins the pieces of every shard file of every split (`suffixes`: split -> its piece suffixes), in parallel."""
    _run_tasks(executor, _join_pieces, [
        _JoinTask(os.path.join(output_dir, split, formats.as_format(data_format).shard_name(shard)), split_suffixes)
        for split, split_suffixes in suffixes.items() for shard in range(shards)
        for data_format in formats.names()])


# ---------------------------------------------------------------------------
# Running the passes.


class _InProcess:
    """The `concurrent.futures` executor interface, running each task at once in this process."""

    def submit(self, fn: Callable, *args) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # handed to the caller through the future, as a pool would
            future.set_exception(e)
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        del wait, cancel_futures


def keep_freed_memory() -> None:
    """Asks glibc's malloc to keep freed memory for reuse instead of returning it to the system.

    Every block of lines allocates and frees the same large numpy
    temporaries; when malloc gives them back to the system, the next block
    faults them in again (converting 2M rows on 2 workers: about a million
    page faults, against 50,000 with this). It changes the whole process, so
    entry points call it (the command line, the Processing job) and the
    pool's workers do; a library call leaves its caller's process alone.
    No-op where the C library is not glibc.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    mallopt(_M_TOP_PAD, _TOP_PAD_BYTES)


def _executor(workers: int):
    if workers == 1:
        return _InProcess()
    # Spawned, not forked: the caller may have loaded TensorFlow, whose threads do not survive a fork.
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=keep_freed_memory)


def _run_tasks(executor, fn: Callable, tasks: Sequence) -> list:
    futures = [executor.submit(fn, task) for task in tasks]
    return [future.result() for future in futures]


@dataclasses.dataclass
class ConversionReport:
    """What a conversion did and how fast.

    Attributes:
      input_bytes: bytes of the inputs.
      lines: lines read.
      rows: rows written per split.
      bad_records: malformed lines skipped.
      dropped_negatives: train negatives dropped by negative sampling.
      seconds: wall seconds per phase: `count` (pass 1), `vocabulary`
        (merging the counts), `write` (pass 2), `join` (joining pieces).
      spilled_runs: sorted runs written to disk by the count (0: it all
        fitted in memory).
      workers: processes used.
    """

    input_bytes: int
    lines: int
    rows: Dict[str, int]
    bad_records: int
    dropped_negatives: int
    seconds: Dict[str, float]
    spilled_runs: int
    workers: int

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def lines_text(self) -> List[str]:
        """Throughput per phase, for the console."""
        mb = self.input_bytes / 1e6
        out = []
        for phase, seconds in self.seconds.items():
            rate = "%.1f MB/s, %s lines/s" % (mb / seconds, format(int(self.lines / seconds), ",")) \
                if seconds > 0 and phase in ("count", "write") else ""
            out.append("  %-10s %7.1fs  %s" % (phase, seconds, rate))
        total = self.total_seconds
        out.append("  %-10s %7.1fs  %.1f MB/s, %s lines/s over %.1f MB on %d worker(s); %d count run(s) spilled"
                   % ("total", total, mb / total if total else 0.0,
                      format(int(self.lines / total) if total else 0, ","), mb, self.workers, self.spilled_runs))
        return out


def _check_arguments(val_fraction, shards, vocab, min_count, workers, memory_mb, chunk_bytes, negative_sampling,
                     libsvm_layout) -> int:
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
    if workers is not None and workers < 1:
        raise ValueError("workers must be >= 1, got %r" % workers)
    if not memory_mb > 0:
        raise ValueError("memory_mb must be > 0, got %r" % memory_mb)
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be >= 1, got %r" % chunk_bytes)
    if not 0.0 < negative_sampling <= 1.0:
        raise ValueError("negative_sampling must be in (0, 1], got %r" % negative_sampling)
    if libsvm_layout not in LIBSVM_LAYOUTS:
        raise ValueError("libsvm_layout must be one of %s, got %r" % (", ".join(LIBSVM_LAYOUTS), libsvm_layout))
    return min_count


def _load_vocab(vocab: str) -> Tuple[Vocabulary, schema.DatasetMetadata]:
    metadata = schema.DatasetMetadata.read(vocab)
    vocabulary = Vocabulary.from_metadata(metadata, vocab)
    if len(metadata.dense_clip) != schema.NUM_DENSE_FIELDS:
        raise ValueError("--vocab %s: dense_clip must have %d values, got %r"
                         % (vocab, schema.NUM_DENSE_FIELDS, metadata.dense_clip))
    return vocabulary, metadata


def _scan_inputs(executor, chunks: Sequence[Chunk], threshold: int, count_values: bool, negative_sampling: float,
                 budget_bytes: int, spill_dir: str, skip_bad_records: bool, workers: int) -> List[_ChunkScan]:
    """Pass 1 over every chunk; without `skip_bad_records`, raises for the first bad line of the inputs.

    With several workers, each chunk's counts come back as runs on disk
    (not through the pool's pipes to this process), so that the workers
    merge them field by field (`_merge_field`).
    """
    tasks = [_CountTask(chunk, threshold, count_values, negative_sampling, budget_bytes, spill_dir,
                        stop_at_bad=not skip_bad_records, hand_over_runs=workers > 1) for chunk in chunks]
    futures = [executor.submit(_count_chunk, task) for task in tasks]
    first_error = None
    scans: Dict[int, _ChunkScan] = {}
    for future in concurrent.futures.as_completed(futures):
        scan = future.result()
        scans[scan.index] = scan
        if scan.error is not None and (first_error is None or scan.index < first_error):
            first_error = scan.index
            for later in futures[scan.index + 1:]:
                later.cancel()
    if first_error is not None:
        scan = scans[first_error]
        chunk = chunks[first_error]
        lines_before = sum(scans[c.index].lines for c in chunks[:first_error] if c.path == chunk.path)
        line, reason = scan.error
        raise MalformedRecordError(chunk.path, lines_before + line, reason)
    return [scans[chunk.index] for chunk in chunks]


def _log_bad_records(chunks: Sequence[Chunk], scans: Sequence[_ChunkScan]) -> None:
    logged = 0
    lines_before: Dict[str, int] = {}
    for chunk, scan in zip(chunks, scans):
        offset = lines_before.get(chunk.path, 0)
        for line, reason in scan.bad:
            if logged < MAX_LOGGED_BAD_RECORDS:
                logging.warning("skipping bad record %s:%d: %s", chunk.path, offset + line, reason)
                logged += 1
        lines_before[chunk.path] = offset + scan.lines


def _build_vocabulary(executor, scans: Sequence[_ChunkScan], min_count: int, budget_bytes: int,
                      spill_dir: str) -> Tuple[Vocabulary, int]:
    """Merges the chunks' counts into the vocabulary; returns it and the number of runs spilled past the budget."""
    counters = _Counters(budget_bytes, os.path.join(spill_dir, "main"))
    for scan in scans:
        if scan.counts is not None:
            for f, (keys, counts) in enumerate(scan.counts):
                counters.add(f, keys, counts)
            scan.counts = None
            counters.enforce_budget()
    runs = [[run for scan in scans if scan.runs for run in scan.runs[f]] for f in range(schema.NUM_CATEGORICAL_FIELDS)]
    spilled = sum(scan.spilled_runs for scan in scans)
    if not counters.spilled and not any(runs):
        kept = []
        for counter in counters.fields:
            keys, counts = counter.result()
            keep = counts >= min_count
            kept.append((keys[keep], counts[keep]))
    else:
        if counters.spilled:
            spilled += sum(len(counter.runs) for counter in counters.fields)
        for f, counter in enumerate(counters.fields):
            counter.spill()
            runs[f].extend(counter.runs)
        kept = _run_tasks(executor, _merge_field, [_MergeTask(field_runs, min_count, budget_bytes)
                                                    for field_runs in runs])
    ranked = [[key.decode("utf-8") for key in vocab_lib.rank_kept(keys, counts).tolist()] for keys, counts in kept]
    return Vocabulary.from_ranked(ranked), spilled


def convert(inputs: Sequence[str], output_dir: str, **options) -> schema.DatasetMetadata:
    """Converts Criteo TSV files into a dataset root at `output_dir`.

    Takes the arguments of `convert_with_report` and returns only the
    metadata.
    """
    return convert_with_report(inputs, output_dir, **options)[0]


def convert_with_report(inputs: Sequence[str], output_dir: str, *, val_fraction: float = DEFAULT_VAL_FRACTION,
                        shards: int = DEFAULT_SHARDS, vocab: Optional[str] = None, min_count: Optional[int] = None,
                        skip_bad_records: bool = False, overwrite: bool = False, workers: Optional[int] = None,
                        memory_mb: float = DEFAULT_MEMORY_MB, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                        shuffle: bool = False, seed: int = DEFAULT_SHUFFLE_SEED, negative_sampling: float = 1.0,
                        libsvm_layout: str = "fixed", tmp_dir: Optional[str] = None,
                        ) -> Tuple[schema.DatasetMetadata, ConversionReport]:
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
      workers: processes that run the passes (default: the cores); the
        output does not depend on it.
      memory_mb: budget for the value counts of all processes together;
        past it, counts go to sorted runs on disk (see the module
        docstring). The interpreter and numpy add about 40 MB per process,
        and the kept vocabulary must fit besides.
      chunk_bytes: size of the byte ranges the inputs are cut into.
      shuffle: write the rows in a random order across all shards.
      seed: the shuffle's seed.
      negative_sampling: keep each train row labelled 0 with this
        probability, in (0, 1]; recorded in the metadata's `source`.
      libsvm_layout: `fixed` (every line the same length, which the
        pipeline decodes fastest; see `encoders.encode_libsvm_fixed`) or
        `compact` (shortest numbers).
      tmp_dir: where count runs and shuffle buckets go (default: the
        system's temporary directory); removed at the end.

    Returns:
      (metadata, report): the metadata written to `output_dir/metadata.json`
      (its `source` names the inputs, the number of skipped bad records and
      the options that change the rows), and what was done how fast.

    Raises:
      ValueError: a bad argument; an empty input; a malformed line (a
        `MalformedRecordError` naming file and line) without
        `skip_bad_records`; no valid line at all.
      FileNotFoundError: an input or `vocab` does not exist.
      FileExistsError: `output_dir` holds a dataset and not `overwrite`.
    """
    min_count = _check_arguments(val_fraction, shards, vocab, min_count, workers, memory_mb, chunk_bytes,
                                 negative_sampling, libsvm_layout)
    workers = workers or os.cpu_count() or 1
    check_inputs(inputs)
    vocabulary, clips, vocab_metadata = None, list(DENSE_CLIP), None
    if vocab is not None:
        vocabulary, vocab_metadata = _load_vocab(vocab)
        clips = list(vocab_metadata.dense_clip)
    writers.check_output_dir(output_dir, overwrite)

    budget_bytes = int(memory_mb * _MIB) // (workers + 1)
    threshold = int(val_fraction * _HASH_RANGE)
    chunks = plan_chunks(inputs, chunk_bytes)
    input_bytes = sum(os.path.getsize(path) for path in inputs)
    seconds = {}
    executor = _executor(workers)
    work_dir = tempfile.mkdtemp(prefix="criteo-convert-", dir=tmp_dir)
    try:
        start = time.time()
        scans = _scan_inputs(executor, chunks, threshold, vocabulary is None, negative_sampling, budget_bytes,
                             work_dir, skip_bad_records, workers)
        seconds["count"] = time.time() - start
        bad_records = sum(scan.bad_records for scan in scans)
        _log_bad_records(chunks, scans)
        rows = {split: sum(scan.rows[split] for scan in scans) for split in _SPLITS}
        if not sum(rows.values()):
            raise ValueError("no valid records in %s (%d bad records skipped)" % (", ".join(inputs), bad_records))
        start = time.time()
        spilled = 0
        if vocabulary is None:
            vocabulary, spilled = _build_vocabulary(executor, scans, min_count, budget_bytes, work_dir)
        seconds["vocabulary"] = time.time() - start
        feature_size = vocab_metadata.feature_size if vocab_metadata else vocabulary.feature_size
        id_width = len(str(feature_size - 1)) if libsvm_layout == "fixed" else None

        writers.prepare_output_dir(output_dir, overwrite)
        splits = [schema.TRAIN_SPLIT] + ([schema.VALIDATION_SPLIT] if val_fraction > 0 else [])
        tables_path = os.path.join(work_dir, "vocabulary.npz")
        _save_tables(vocabulary, tables_path)
        first_rows = []
        running = dict.fromkeys(splits, 0)
        for scan in scans:
            first_rows.append(dict(running))
            for split in splits:
                running[split] += scan.rows[split]
        written = _write_splits(executor, chunks, first_rows, splits, rows, threshold, negative_sampling,
                                tables_path, clips, output_dir, shards, id_width, shuffle, seed, memory_mb,
                                work_dir, seconds)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(work_dir, ignore_errors=True)

    written_rows = {split: sum(w.rows[split] for w in written) for split in splits}
    if written_rows != {split: rows[split] for split in splits}:
        raise RuntimeError("inputs changed during the conversion: first pass counted %s rows, second wrote %s"
                           % ({split: rows[split] for split in splits}, written_rows))
    num_positives = sum(w.positives[split] for w in written for split in splits)
    split_infos = {}
    for split in splits:
        stems = ["%s/%s" % (split, schema.shard_stem(i)) for i in range(shards)]
        per_shard = [len(range(i, rows[split], shards)) for i in range(shards)]
        split_infos[split] = schema.SplitInfo(rows=rows[split], shards=dict(zip(stems, per_shard)))
    dropped = sum(scan.dropped_negatives for scan in scans)
    total = sum(written_rows.values())
    options = ["val_fraction=%g" % val_fraction]
    if negative_sampling < 1.0:
        options.append("negative_sampling=%r (train negatives kept with this probability; %d dropped)"
                       % (negative_sampling, dropped))
    if shuffle:
        options.append("shuffled with seed %d" % seed)
    vocab_text = ("vocabulary from %s" % vocab if vocab is not None
                  else "vocabulary built from the train split with min_count=%d" % min_count)
    metadata = schema.DatasetMetadata(
        feature_size=feature_size, splits=split_infos, vocabulary=vocabulary.fields,
        dense_clip=[float(c) for c in clips],
        source="Criteo TSV %s: %d records converted (%d positive), %d bad records skipped; %s; %s"
        % (", ".join(os.path.abspath(p) for p in inputs), total, num_positives, bad_records, vocab_text,
           "; ".join(options)))
    metadata.write(output_dir, split_views=True)
    report = ConversionReport(input_bytes=input_bytes, lines=sum(scan.lines for scan in scans), rows=written_rows,
                              bad_records=bad_records, dropped_negatives=dropped, seconds=seconds,
                              spilled_runs=spilled, workers=workers)
    for line in report.lines_text():
        logging.info("%s", line)
    return metadata, report


def _write_splits(executor, chunks, first_rows, splits, rows, threshold, negative_sampling, tables_path, clips,
                  output_dir, shards, id_width, shuffle, seed, memory_mb, work_dir, seconds) -> List[_Written]:
    """Pass 2: writes every split's shards (directly, or through shuffle buckets)."""
    start = time.time()
    buckets = None
    if shuffle:
        bucket_bytes = int(memory_mb * _MIB) // SHUFFLE_BUCKETS_IN_MEMORY
        # A bucket is held twice while it is permuted.
        buckets = {split: max(1, -(-rows[split] * _ROW_DTYPE.itemsize * 2 // bucket_bytes)) for split in splits}
    tasks = [_WriteTask(chunk, threshold, negative_sampling, tables_path, clips, output_dir, splits, shards,
                        first, id_width, scatter_dir=work_dir if shuffle else None, buckets=buckets, seed=seed)
             for chunk, first in zip(chunks, first_rows)]
    written = _run_tasks(executor, _scatter_chunk if shuffle else _write_chunk, tasks)
    if shuffle:
        bucket_tasks = []
        for split in splits:
            counts = np.stack([w.bucket_rows[split] for w in written])  # [chunks, buckets]
            offsets = np.concatenate([np.zeros((len(chunks), 1), np.int64), np.cumsum(counts, axis=1)], axis=1)
            bucket_first = np.concatenate([[0], np.cumsum(counts.sum(axis=0))])
            for b in range(buckets[split]):
                slices = [(_scatter_path(work_dir, split, chunk.index), int(offsets[c, b]), int(offsets[c, b + 1]))
                          for c, chunk in enumerate(chunks)]
                bucket_tasks.append(_BucketTask(split, b, slices, int(bucket_first[b]), seed, output_dir, shards,
                                                id_width))
        _run_tasks(executor, _write_bucket, bucket_tasks)
    seconds["write"] = time.time() - start
    start = time.time()
    _join_splits(executor, output_dir, shards, {
        split: [_piece("bucket", b) for b in range(buckets[split])] if shuffle
        else [_piece("piece", chunk.index) for chunk in chunks] for split in splits})
    seconds["join"] = time.time() - start
    return written


# ---------------------------------------------------------------------------
# A conversion split over several machines (e.g. one processing job per part of the inputs).

COUNTS_FILE = "counts.json"


def count_part(inputs: Sequence[str], counts_dir: str, *, val_fraction: float = DEFAULT_VAL_FRACTION,
               skip_bad_records: bool = False, workers: Optional[int] = None, memory_mb: float = DEFAULT_MEMORY_MB,
               chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> dict:
    """Pass 1 over one part of the inputs: writes its full value counts to `counts_dir`.

    Each categorical field's counts go to `counts_dir/C<i>-<k>.{keys,counts}.npy`
    as sorted runs (no cutoff: the cutoff applies to the sum over all parts),
    with a summary in `counts_dir/counts.json`. `merge_part_counts` joins the
    parts' counts into one vocabulary.

    Returns:
      The summary: rows per split, lines, bad records and run files.

    Raises:
      As `convert`.
    """
    _check_arguments(val_fraction, 1, None, None, workers, memory_mb, chunk_bytes, 1.0, "fixed")
    workers = workers or os.cpu_count() or 1
    check_inputs(inputs)
    os.makedirs(counts_dir, exist_ok=True)
    budget_bytes = int(memory_mb * _MIB) // (workers + 1)
    chunks = plan_chunks(inputs, chunk_bytes)
    executor = _executor(workers)
    work_dir = tempfile.mkdtemp(prefix="criteo-count-", dir=counts_dir)
    try:
        scans = _scan_inputs(executor, chunks, int(val_fraction * _HASH_RANGE), True, 1.0, budget_bytes, work_dir,
                             skip_bad_records, workers)
        _log_bad_records(chunks, scans)
        counters = _Counters(budget_bytes, os.path.join(work_dir, "main"))
        runs = [[run for scan in scans if scan.runs for run in scan.runs[f]]
                for f in range(schema.NUM_CATEGORICAL_FIELDS)]
        for scan in scans:
            if scan.counts is not None:
                for f, (keys, counts) in enumerate(scan.counts):
                    counters.add(f, keys, counts)
                counters.enforce_budget()
        for f, counter in enumerate(counters.fields):
            counter.spill()
            runs[f].extend(counter.runs)
        # One sorted run per field: the part's exact counts, no cutoff.
        merged = _run_tasks(executor, _merge_field, [
            _MergeTask(field_runs, 1, budget_bytes, output_prefix=os.path.join(counts_dir, CATEGORICAL_NAMES[f]))
            for f, field_runs in enumerate(runs)])
        run_files = [[os.path.basename(run.keys_path), os.path.basename(run.counts_path)] for run in merged]
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(work_dir, ignore_errors=True)
    summary_json = {"inputs": [os.path.abspath(p) for p in inputs], "val_fraction": val_fraction,
                    "lines": sum(scan.lines for scan in scans),
                    "rows": {split: sum(scan.rows[split] for scan in scans) for split in _SPLITS},
                    "bad_records": sum(scan.bad_records for scan in scans), "runs": run_files}
    with open(os.path.join(counts_dir, COUNTS_FILE), "w") as f:
        json.dump(summary_json, f, indent=1, sort_keys=True)
    return summary_json


def merge_part_counts(counts_dirs: Sequence[str], output_dir: str, *, min_count: int = DEFAULT_MIN_COUNT,
                      memory_mb: float = DEFAULT_MEMORY_MB) -> schema.DatasetMetadata:
    """Joins the counts of every part into one vocabulary, written as `output_dir/metadata.json`.

    The metadata has the vocabulary, feature_size and dense_clip and no
    splits; pass it to `convert(..., vocab=output_dir)` on each part so that
    every part uses the same ids.

    Raises:
      FileNotFoundError: a counts directory lacks `counts.json`.
      ValueError: `min_count` < 1, or the parts were counted with different
        `val_fraction`s.
    """
    if min_count < 1:
        raise ValueError("min_count must be >= 1, got %r" % min_count)
    summaries = []
    for directory in counts_dirs:
        path = os.path.join(directory, COUNTS_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError("%s: no %s; run count_part on this part first" % (directory, COUNTS_FILE))
        with open(path) as f:
            summaries.append(json.load(f))
    fractions = sorted({s["val_fraction"] for s in summaries})
    if len(fractions) > 1:
        raise ValueError("the parts were counted with different val_fractions %s: %s" % (fractions, counts_dirs))
    ranked = []
    for f in range(schema.NUM_CATEGORICAL_FIELDS):
        parts = [vocab_lib.Run(os.path.join(d, s["runs"][f][0]), os.path.join(d, s["runs"][f][1]), 0, 0).load()
                 for d, s in zip(counts_dirs, summaries)]
        keys, counts = vocab_lib.merge_runs(parts, min_count, int(memory_mb * _MIB))
        ranked.append([key.decode("utf-8") for key in vocab_lib.rank_kept(keys, counts).tolist()])
    vocabulary = Vocabulary.from_ranked(ranked)
    os.makedirs(output_dir, exist_ok=True)
    metadata = schema.DatasetMetadata(
        feature_size=vocabulary.feature_size, vocabulary=vocabulary.fields, dense_clip=[float(c) for c in DENSE_CLIP],
        source="Criteo vocabulary from the counts of %d part(s) (%d train rows) with min_count=%d"
        % (len(counts_dirs), sum(s["rows"][schema.TRAIN_SPLIT] for s in summaries), min_count))
    metadata.write(output_dir)
    return metadata


# ---------------------------------------------------------------------------
# Command line.


def summary(output_dir: str, metadata: schema.DatasetMetadata, seconds: float,
            report: Optional[ConversionReport] = None) -> str:
    """A few lines describing a written dataset root, for the console."""
    lines = ["wrote %s in %.1fs: feature_size=%d field_size=%d"
             % (output_dir, seconds, metadata.feature_size, metadata.field_size)]
    for name, info in metadata.splits.items():
        lines.append("  %-10s %10d rows in %d shards" % (name, info.rows, len(info.shards)))
    if report is not None:
        lines.extend(report.lines_text())
    lines.append("  source: %s" % metadata.source)
    return "\n".join(lines)


def define_flags() -> None:
    """Defines the command-line flags of this tool."""
    flags.DEFINE_multi_string("input", None, "Criteo TSV file; repeat the flag, or list more files after the flags.")
    flags.DEFINE_string("output_dir", None, "Dataset root to write.")
    flags.DEFINE_float("val_fraction", DEFAULT_VAL_FRACTION, "Share of lines for the validation split; 0: none.")
    flags.DEFINE_integer("shards", DEFAULT_SHARDS, "Shard files per split and format (rows balanced to one row; "
                         "a multiple of the training workers gives each the same rows).")
    flags.DEFINE_string("vocab", None, "metadata.json (or dataset root) whose vocabulary to apply.")
    flags.DEFINE_integer("min_count", None, "Frequency cutoff of the vocabulary (default %d)." % DEFAULT_MIN_COUNT)
    flags.DEFINE_bool("skip_bad_records", False, "Skip and count malformed lines instead of failing.")
    flags.DEFINE_bool("overwrite", False, "Replace a dataset already in --output_dir.")
    flags.DEFINE_integer("workers", None, "Processes for both passes (default: the cores).")
    flags.DEFINE_float("memory_mb", DEFAULT_MEMORY_MB, "Memory for the value counts of all processes; past it "
                         "they spill to sorted runs on disk.")
    flags.DEFINE_bool("shuffle", False, "Write the rows in a random order across all shards.")
    flags.DEFINE_integer("seed", DEFAULT_SHUFFLE_SEED, "Seed of --shuffle.")
    flags.DEFINE_float("negative_sampling", 1.0, "Keep train rows labelled 0 with this probability; recorded "
                       "in metadata.json (see dataprep.criteo.recalibrate).")
    flags.DEFINE_enum("libsvm_layout", "fixed", LIBSVM_LAYOUTS, "fixed: equal-length LibSVM lines, decoded "
                      "fastest; compact: shortest numbers.")
    flags.DEFINE_string("tmp_dir", None, "Directory for count runs and shuffle buckets (default: system temp).")
    flags.mark_flag_as_required("output_dir")


def main(argv: Sequence[str]) -> None:
    """Runs the conversion with the parsed flags and prints a summary."""
    cfg = flags.FLAGS
    start = time.time()
    keep_freed_memory()
    try:
        metadata, report = convert_with_report(
            list(cfg.input or []) + list(argv[1:]), cfg.output_dir, val_fraction=cfg.val_fraction,
            shards=cfg.shards, vocab=cfg.vocab, min_count=cfg.min_count, skip_bad_records=cfg.skip_bad_records,
            overwrite=cfg.overwrite, workers=cfg.workers, memory_mb=cfg.memory_mb, shuffle=cfg.shuffle,
            seed=cfg.seed, negative_sampling=cfg.negative_sampling, libsvm_layout=cfg.libsvm_layout,
            tmp_dir=cfg.tmp_dir)
    except (ValueError, OSError) as e:
        raise SystemExit("error: %s" % e) from e
    print(summary(cfg.output_dir, metadata, time.time() - start, report))


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    # Run the imported module, so that the worker processes find its functions by their module name.
    from dataprep import criteo as _criteo
    _criteo.run()
