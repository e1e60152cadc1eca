"""Pass 1 of the conversion: check every line, count the rows and each categorical field's values.

Each worker counts its byte ranges' values in numpy partial counts and, past
its share of the memory budget, writes them to disk as sorted runs
(`dataprep.vocab`); `build_vocabulary` merges them in key ranges that fit
the budget, so the result equals counting everything in memory. Only the
kept vocabulary must fit in memory. A malformed line stops the pass
(`scan_inputs` raises for the first one of the inputs) unless bad records
are skipped and counted.
"""

import concurrent.futures
import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from dataprep import vocab as vocab_lib
from dataprep.criteo.blocks import Chunk, kept_rows, line_crcs, parse_block, read_blocks
from dataprep.criteo.records import SPLITS, MalformedRecordError
from dataprep.criteo.vocabulary import Vocabulary
from dataprep.criteo.workers import run_tasks
from input_pipeline import schema

# Bad records listed one by one in the log; the rest are only counted.
MAX_LOGGED_BAD_RECORDS = 10


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
class ChunkScan:
    """What pass 1 found in one byte range (line numbers local to the range, 1-based)."""

    index: int
    lines: int = 0
    rows: Dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    dropped_negatives: int = 0
    bad_records: int = 0
    bad: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
    error: Optional[Tuple[int, str]] = None
    counts: Optional[List[Tuple[np.ndarray, np.ndarray]]] = None
    runs: List[List[vocab_lib.Run]] = dataclasses.field(default_factory=list)
    spilled_runs: int = 0


class Counters:
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


def _count_chunk(task: _CountTask) -> ChunkScan:
    scan = ChunkScan(task.chunk.index)
    counters = Counters(task.budget_bytes, os.path.join(task.spill_dir, "chunk-%06d" % task.chunk.index))
    for data in read_blocks(task.chunk):
        block = parse_block(data)
        for i, reason in block.bad:
            scan.bad_records += 1
            if len(scan.bad) < MAX_LOGGED_BAD_RECORDS:
                scan.bad.append((scan.lines + i + 1, reason))
            if task.stop_at_bad:
                scan.error = (scan.lines + i + 1, reason)
                return scan
        scan.lines += len(block.lines)
        train = line_crcs(block) >= task.threshold
        keep = kept_rows(block, train, task.negative_sampling)
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
class MergeTask:
    runs: List[vocab_lib.Run]
    min_count: int
    budget_bytes: int
    output_prefix: Optional[str] = None


def merge_field(task: MergeTask):
    """One field's kept (keys, counts); with `output_prefix`, written as a run there, and the `Run` returned."""
    keys, counts = vocab_lib.merge_runs([run.load() for run in task.runs], task.min_count, task.budget_bytes)
    if task.output_prefix is not None:
        return vocab_lib.write_run(keys, counts, task.output_prefix)
    return keys, counts


def scan_inputs(executor, chunks: Sequence[Chunk], threshold: int, count_values: bool, negative_sampling: float,
                 budget_bytes: int, spill_dir: str, skip_bad_records: bool, workers: int) -> List[ChunkScan]:
    """Pass 1 over every chunk; without `skip_bad_records`, raises for the first bad line of the inputs.

    With several workers, each chunk's counts come back as runs on disk
    (not through the pool's pipes to this process), so that the workers
    merge them field by field (`merge_field`).
    """
    tasks = [_CountTask(chunk, threshold, count_values, negative_sampling, budget_bytes, spill_dir,
                        stop_at_bad=not skip_bad_records, hand_over_runs=workers > 1) for chunk in chunks]
    futures = [executor.submit(_count_chunk, task) for task in tasks]
    first_error = None
    scans: Dict[int, ChunkScan] = {}
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
        line, reason = scan.error or (0, "")
        raise MalformedRecordError(chunk.path, lines_before + line, reason)
    return [scans[chunk.index] for chunk in chunks]


def log_bad_records(chunks: Sequence[Chunk], scans: Sequence[ChunkScan]) -> None:
    logged = 0
    lines_before: Dict[str, int] = {}
    for chunk, scan in zip(chunks, scans):
        offset = lines_before.get(chunk.path, 0)
        for line, reason in scan.bad:
            if logged < MAX_LOGGED_BAD_RECORDS:
                logging.warning("skipping bad record %s:%d: %s", chunk.path, offset + line, reason)
                logged += 1
        lines_before[chunk.path] = offset + scan.lines


def build_vocabulary(executor, scans: Sequence[ChunkScan], min_count: int, budget_bytes: int,
                      spill_dir: str) -> Tuple[Vocabulary, int]:
    """Merges the chunks' counts into the vocabulary; returns it and the number of runs spilled past the budget."""
    counters = Counters(budget_bytes, os.path.join(spill_dir, "main"))
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
        kept = run_tasks(executor, merge_field, [MergeTask(field_runs, min_count, budget_bytes)
                                                    for field_runs in runs])
    ranked = [[key.decode("utf-8") for key in vocab_lib.rank_kept(keys, counts).tolist()] for keys, counts in kept]
    return Vocabulary.from_ranked(ranked), spilled
