"""Pass 2 of the conversion: map every row to ids and values and write each split's shards.

Row k of a split (in input order, or in the shuffled order) goes to shard
k % `shards`, so shards differ by one row at most. Each byte range writes its
own piece of every shard and the pieces are concatenated in order, so the
output does not depend on the workers or the range size. With `shuffle`,
rows are scattered to buckets by a seeded hash of their index, each bucket
(sized to fit the memory budget) is permuted in memory, and the buckets are
written one after the other: a uniformly random order across all shards, in
bounded memory.
"""

import dataclasses
import os
import shutil
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from dataprep import vocab as vocab_lib
from dataprep import writers
from dataprep.criteo.blocks import Block, Chunk, kept_rows, line_crcs, parse_block, read_blocks
from dataprep.criteo.options import DEFAULT_SHUFFLE_SEED, ConversionOptions
from dataprep.criteo.records import CATEGORICAL_VALUE, FIRST_CATEGORICAL_ID, SPLITS
from dataprep.criteo.vocabulary import Vocabulary
from dataprep.criteo.workers import MIB, run_tasks
from input_pipeline import formats, schema

# Rows handed to the writer at once.
WRITE_BATCH_ROWS = 16384
# Shuffle buckets are sized so that this many fit the memory budget at once.
SHUFFLE_BUCKETS_IN_MEMORY = 8
_COPY_RANGE_BYTES = 1 << 30
_ROW_DTYPE = np.dtype([("label", "<f4"), ("ids", "<i8", (schema.FIELD_SIZE,)),
                       ("values", "<f8", (schema.FIELD_SIZE,))])
_SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
_SPLITMIX_M1 = 0xBF58476D1CE4E5B9
_SPLITMIX_M2 = 0x94D049BB133111EB


_TABLES_CACHE: Dict[str, list] = {}


def _tables(path: str) -> list:
    if path not in _TABLES_CACHE:
        _TABLES_CACHE.clear()
        with open(path, "rb") as f:
            _TABLES_CACHE[path] = [dict(keys=t["keys"], ids=t["ids"], unknown=int(t["unknown"]), widened={})
                                   for t in np.load(f, allow_pickle=True)["tables"]]
    return _TABLES_CACHE[path]


def save_tables(vocabulary: Vocabulary, path: str) -> None:
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


def _block_rows(block: Block, tables: list, clips: np.ndarray) -> np.ndarray:
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
    clips: Sequence[float]
    output_dir: str
    splits: Sequence[str]
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
    for data in read_blocks(task.chunk):
        block = parse_block(data)
        train = line_crcs(block) >= task.threshold
        keep = kept_rows(block, train, task.negative_sampling)
        rows = _block_rows(block, tables, clips)
        yield {schema.TRAIN_SPLIT: rows[train & keep], schema.VALIDATION_SPLIT: rows[~train]}


def _write_rows(writer: writers.SplitWriter, rows: np.ndarray) -> None:
    writer.write(rows["label"], rows["ids"], rows["values"])


def _write_chunk(task: _WriteTask) -> _Written:
    split_writers = {split: writers.SplitWriter(task.output_dir, split, task.shards, first_row=task.first_rows[split],
                                                piece_suffix=_piece("piece", task.chunk.index),
                                                libsvm_id_width=task.id_width)
                     for split in task.splits}
    pending: Dict[str, List[np.ndarray]] = {split: [] for split in task.splits}
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
    salt = _splitmix64(np.array([seed * len(SPLITS) + SPLITS.index(split)], dtype=np.uint64))[0]
    index = np.arange(first_row, first_row + count, dtype=np.uint64)
    return (_splitmix64(index ^ salt) % np.uint64(buckets)).astype(np.int64)


def _scatter_path(scatter_dir: str, split: str, chunk_index: int) -> str:
    return os.path.join(scatter_dir, "rows-%s-%06d.npy" % (split, chunk_index))


def _scatter_chunk(task: _WriteTask) -> _Written:
    """Shuffle, step 1: the chunk's rows, sorted by their bucket, in one file per split."""
    parts: Dict[str, List[np.ndarray]] = {split: [] for split in task.splits}
    buckets, scatter_dir = task.buckets, task.scatter_dir
    assert buckets is not None and scatter_dir is not None, "a scatter task has buckets and a directory"
    for block_rows in _converted_rows(task):
        for split in task.splits:
            parts[split].append(block_rows[split])
    written = _Written(rows={}, positives={})
    for split in task.splits:
        rows = np.concatenate(parts[split])
        bucket = _buckets_of(task.seed, split, task.first_rows[split], rows.size, buckets[split])
        order = np.argsort(bucket, kind="stable")
        np.save(_scatter_path(scatter_dir, split, task.chunk.index), rows[order])
        written.rows[split] = int(rows.size)
        written.positives[split] = int(np.count_nonzero(rows["label"] > 0.5))
        written.bucket_rows[split] = np.bincount(bucket, minlength=buckets[split])
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
    rng = np.random.default_rng([task.seed, SPLITS.index(task.split), task.bucket])
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
    shutil.copyfileobj(source, out, length=MIB)


def _join_splits(executor, output_dir: str, shards: int, suffixes: Dict[str, List[str]]) -> None:
    """Joins the pieces of every shard file of every split (`suffixes`: split -> its piece suffixes), in parallel."""
    run_tasks(executor, _join_pieces, [
        _JoinTask(os.path.join(output_dir, split, formats.as_format(data_format).shard_name(shard)), split_suffixes)
        for split, split_suffixes in suffixes.items() for shard in range(shards)
        for data_format in formats.names()])


def write_splits(executor, chunks: Sequence[Chunk], first_rows: Sequence[Dict[str, int]], splits: Sequence[str],
                 rows: Dict[str, int], threshold: int, tables_path: str, clips: Sequence[float], output_dir: str,
                 id_width: Optional[int], work_dir: str, seconds: Dict[str, float],
                 options: ConversionOptions) -> List[_Written]:
    """Pass 2: writes every split's shards (directly, or through shuffle buckets); records its seconds in `seconds`.

    Args:
      executor: the workers (`dataprep.criteo.workers.executor_for`).
      chunks: the inputs' byte ranges.
      first_rows: per range, the index in each split of its first row.
      splits: the splits to write.
      rows: the rows of each split (pass 1's count).
      threshold: a line whose CRC-32 is below it goes to validation.
      tables_path: the vocabulary's lookup tables (`save_tables`).
      clips: the dense fields' clip values.
      output_dir: the dataset root.
      id_width: the fixed LibSVM layout's id width (None: compact).
      work_dir: where shuffle buckets go.
      seconds: the phases' wall seconds, updated.
      options: the conversion's options.
    """
    negative_sampling, shards, shuffle, seed = (options.negative_sampling, options.shards, options.shuffle,
                                                options.seed)
    start = time.time()
    buckets: Dict[str, int] = {}
    if shuffle:
        bucket_bytes = int(options.memory_mb * MIB) // SHUFFLE_BUCKETS_IN_MEMORY
        # A bucket is held twice while it is permuted.
        buckets = {split: max(1, -(-rows[split] * _ROW_DTYPE.itemsize * 2 // bucket_bytes)) for split in splits}
    tasks = [_WriteTask(chunk, threshold, negative_sampling, tables_path, clips, output_dir, splits, shards,
                        first, id_width, scatter_dir=work_dir if shuffle else None,
                        buckets=buckets if shuffle else None, seed=seed)
             for chunk, first in zip(chunks, first_rows)]
    written = run_tasks(executor, _scatter_chunk if shuffle else _write_chunk, tasks)
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
        run_tasks(executor, _write_bucket, bucket_tasks)
    seconds["write"] = time.time() - start
    start = time.time()
    _join_splits(executor, output_dir, shards, {
        split: [_piece("bucket", b) for b in range(buckets[split])] if shuffle
        else [_piece("piece", chunk.index) for chunk in chunks] for split in splits})
    seconds["join"] = time.time() - start
    return written
