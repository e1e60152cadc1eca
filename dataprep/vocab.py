"""Exact value counting in bounded memory: numpy partial counts, sorted runs on disk, a range-partitioned merge.

A value (a categorical field's raw bytes) is held as a fixed-width numpy
bytes key (`S8`, `S16`, ...: the width rounded up to `KEY_ALIGN`); keys of
8 bytes are sorted as big-endian `uint64`, which orders them like their
bytes. A `FieldCounter` takes the keys of a block of rows, reduces them to
(sorted unique keys, counts), keeps merging such partial counts in memory,
and, when they exceed its byte budget, writes them to disk as a sorted run.
`merge_runs` then merges the runs of one field in key ranges small enough
for the budget, keeping only the values seen at least `min_count` times:
the result is exactly the in-memory count, whatever the number of distinct
values. A value below the cutoff is never held longer than one key range.

Keys compare as their bytes padded with NULs, so a value must not end in a
NUL byte (text never does).
"""

import dataclasses
import os
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

KEY_ALIGN = 8
# Bytes per distinct value held in memory besides its key: its int64 count.
COUNT_BYTES = 8
# Partial counts are merged once they hold this many times the entries of
# the last merge result (amortizes the merges).
MERGE_GROWTH = 2
_MIN_MERGE_ENTRIES = 1 << 16
_SAMPLES_PER_RANGE = 64


def key_dtype(width: int) -> np.dtype:
    """The key dtype for values of up to `width` bytes (width rounded up to `KEY_ALIGN`)."""
    return np.dtype("S%d" % max(KEY_ALIGN, -(-width // KEY_ALIGN) * KEY_ALIGN))


def sortable(keys: np.ndarray) -> np.ndarray:
    """A view of `keys` that sorts like their bytes (big-endian uint64 for 8-byte keys)."""
    if keys.dtype.itemsize == KEY_ALIGN:
        return np.ascontiguousarray(keys).view(">u8")
    return keys


def widen(keys: np.ndarray, width: int) -> np.ndarray:
    """`keys` as keys of `width` bytes (NUL-padded: the order is kept)."""
    return keys if keys.dtype.itemsize == width else keys.astype("S%d" % width)


def common_width(arrays: Iterable[np.ndarray]) -> int:
    return max([KEY_ALIGN] + [a.dtype.itemsize for a in arrays])


def reduce_counts(keys: np.ndarray, counts: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and the summed count of each.

    Args:
      keys: bytes keys [n], any order.
      counts: int64 [n], the count of each key; None: 1 each.

    Returns:
      (keys [u] sorted by their bytes, counts int64 [u]).
    """
    if counts is None:
        counts = np.ones(keys.size, dtype=np.int64)
    if not keys.size:
        return keys, counts.astype(np.int64)
    order = np.argsort(sortable(keys), kind="stable")
    keys = keys[order]
    counts = counts[order]
    first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return keys[first], np.add.reduceat(counts, first).astype(np.int64)


def merge_counts(parts: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Tuple[np.ndarray, np.ndarray]:
    """Merges (keys, counts) partial counts into one sorted partial count."""
    parts = [p for p in parts if p[0].size]
    if not parts:
        return np.zeros(0, key_dtype(KEY_ALIGN)), np.zeros(0, np.int64)
    width = common_width(k for k, _ in parts)
    if len(parts) == 1:
        return widen(parts[0][0], width), parts[0][1]
    return reduce_counts(np.concatenate([widen(k, width) for k, _ in parts]),
                         np.concatenate([c for _, c in parts]))


def entry_bytes(keys: np.ndarray) -> int:
    """Memory of a partial count of these keys."""
    return keys.size * (keys.dtype.itemsize + COUNT_BYTES)


@dataclasses.dataclass
class Run:
    """A sorted partial count of one field on disk: two `.npy` files."""

    keys_path: str
    counts_path: str
    entries: int
    width: int

    def load(self) -> Tuple[np.ndarray, np.ndarray]:
        """Memory-maps the run (nothing is read until sliced)."""
        return np.load(self.keys_path, mmap_mode="r"), np.load(self.counts_path, mmap_mode="r")

    def remove(self) -> None:
        for path in (self.keys_path, self.counts_path):
            if os.path.exists(path):
                os.remove(path)


def write_run(keys: np.ndarray, counts: np.ndarray, path_prefix: str) -> Run:
    """Writes a sorted partial count as a run (`PREFIX.keys.npy`, `PREFIX.counts.npy`)."""
    run = Run(path_prefix + ".keys.npy", path_prefix + ".counts.npy", int(keys.size), keys.dtype.itemsize)
    np.save(run.keys_path, keys)
    np.save(run.counts_path, counts)
    return run


class FieldCounter:
    """Counts the values of one field within a memory budget, spilling sorted runs.

    Args:
      budget_bytes: memory the partial counts may take.
      spill_prefix: path prefix of the runs it writes (a number is appended).
    """

    def __init__(self, budget_bytes: int, spill_prefix: str):
        self._budget = max(int(budget_bytes), 1)
        self._prefix = spill_prefix
        self._parts: List[Tuple[np.ndarray, np.ndarray]] = []
        self._part_bytes = 0
        self._merged_bytes = 0
        self.runs: List[Run] = []

    @property
    def held_bytes(self) -> int:
        return self._part_bytes

    def add_keys(self, keys: np.ndarray) -> None:
        """Counts one occurrence of each key."""
        self.add(*reduce_counts(keys))

    def add(self, keys: np.ndarray, counts: np.ndarray) -> None:
        """Adds a partial count (sorted or not; reduced or not)."""
        if not keys.size:
            return
        self._parts.append((keys, counts))
        self._part_bytes += entry_bytes(keys)
        threshold = max(MERGE_GROWTH * self._merged_bytes, _MIN_MERGE_ENTRIES * (KEY_ALIGN + COUNT_BYTES))
        if self._part_bytes > min(threshold, self._budget):
            self._merge()
            # Merging again soon after would cost much for little: spill once the merged count
            # takes half the budget, so that new partial counts have room.
            if self._part_bytes * MERGE_GROWTH > self._budget:
                self.spill()

    def _merge(self) -> None:
        merged = merge_counts(self._parts)
        self._parts = [merged] if merged[0].size else []
        self._part_bytes = self._merged_bytes = entry_bytes(merged[0])

    def spill(self) -> None:
        """Writes what is held as a sorted run and frees it."""
        if not self._parts:
            return
        self._merge()
        keys, counts = self._parts[0]
        self.runs.append(write_run(keys, counts, "%s-%d" % (self._prefix, len(self.runs))))
        self._parts, self._part_bytes, self._merged_bytes = [], 0, 0

    def result(self) -> Tuple[np.ndarray, np.ndarray]:
        """The in-memory partial count (all of it when nothing was spilled)."""
        self._merge()
        return self._parts[0] if self._parts else merge_counts([])


def _range_splitters(parts: Sequence[Tuple[np.ndarray, np.ndarray]], ranges: int) -> List[bytes]:
    """Keys that cut the merged partial counts into about `ranges` parts of similar size."""
    entries = sum(keys.size for keys, _ in parts)
    step = max(1, entries // (_SAMPLES_PER_RANGE * ranges))
    width = common_width(keys for keys, _ in parts)
    sample = np.sort(np.concatenate([widen(np.asarray(keys[::step]), width) for keys, _ in parts]))
    cut = np.linspace(0, sample.size, ranges + 1)[1:-1].astype(np.int64)
    return sorted(set(sample[cut].tolist()))


def _position(keys: np.ndarray, key: bytes) -> int:
    """Index of the first of the sorted `keys` that is >= `key` (reads only what a binary search needs)."""
    width = keys.dtype.itemsize
    if len(key) > width:
        # Every key here is at most `width` bytes: those equal to the prefix are shorter, hence smaller.
        return int(np.searchsorted(keys, np.array(key[:width], keys.dtype), side="right"))
    probe = np.array(key, keys.dtype)
    return int(np.searchsorted(sortable(keys), sortable(probe.reshape(1))[0], side="left"))


def merge_runs(parts: Sequence[Tuple[np.ndarray, np.ndarray]], min_count: int,
               budget_bytes: int) -> Tuple[np.ndarray, np.ndarray]:
    """Merges sorted partial counts of one field, keeping the values seen >= `min_count` times.

    Args:
      parts: (keys, counts) pairs, each sorted by key: memory-mapped runs
        (`Run.load`) or arrays in memory.
      min_count: the frequency cutoff.
      budget_bytes: memory for one key range of the merge.

    Returns:
      (keys, counts) of the kept values, sorted by key.
    """
    parts = [(k, c) for k, c in parts if k.size]
    if not parts:
        return merge_counts([])
    width = common_width(k for k, _ in parts)
    total_bytes = sum(k.size for k, _ in parts) * (width + COUNT_BYTES)
    ranges = max(1, -(-total_bytes // max(int(budget_bytes), 1)))
    bounds = [None] + (_range_splitters(parts, ranges) if ranges > 1 else []) + [None]
    kept_keys, kept_counts = [], []
    for low, high in zip(bounds[:-1], bounds[1:]):
        pieces = []
        for keys, counts in parts:
            begin = 0 if low is None else _position(keys, low)
            end = keys.size if high is None else _position(keys, high)
            if end > begin:
                pieces.append((np.asarray(keys[begin:end]), np.asarray(counts[begin:end])))
        keys, counts = merge_counts(pieces)
        keep = counts >= min_count
        kept_keys.append(widen(keys[keep], width))
        kept_counts.append(counts[keep])
    return np.concatenate(kept_keys), np.concatenate(kept_counts)


def rank_kept(keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The kept keys most frequent first, ties in byte order."""
    order = np.lexsort((sortable(keys), -counts))
    return keys[order]
