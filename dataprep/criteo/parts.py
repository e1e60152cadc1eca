"""A conversion split over several machines: each counts its part, one vocabulary from every part's counts.

The parts a distributed job (`dataprep.criteo_processing`) needs:
`count_part` (the first pass over one instance's files, writing its exact
counts), `merge_part_counts` (one vocabulary from every instance's counts,
written as a `metadata.json` that `ConversionOptions.vocab` takes) and
`convert` with `vocab` (each instance converts its own files with the
shared vocabulary).
"""

import json
import os
import shutil
import tempfile
from typing import Optional, Sequence

from dataprep import vocab as vocab_lib
from dataprep.criteo.blocks import HASH_RANGE, plan_chunks
from dataprep.criteo.counting import Counters, MergeTask, log_bad_records, merge_field, scan_inputs
from dataprep.criteo.options import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MEMORY_MB,
    DEFAULT_MIN_COUNT,
    DEFAULT_VAL_FRACTION,
    ConversionOptions,
)
from dataprep.criteo.records import CATEGORICAL_NAMES, DENSE_CLIP, SPLITS, check_inputs
from dataprep.criteo.vocabulary import Vocabulary
from dataprep.criteo.workers import MIB, executor_for, run_tasks
from input_pipeline import schema

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
    workers = ConversionOptions(val_fraction=val_fraction, workers=workers, memory_mb=memory_mb,
                                chunk_bytes=chunk_bytes).processes()
    check_inputs(inputs)
    os.makedirs(counts_dir, exist_ok=True)
    budget_bytes = int(memory_mb * MIB) // (workers + 1)
    chunks = plan_chunks(inputs, chunk_bytes)
    executor = executor_for(workers)
    work_dir = tempfile.mkdtemp(prefix="criteo-count-", dir=counts_dir)
    try:
        scans = scan_inputs(executor, chunks, int(val_fraction * HASH_RANGE), True, 1.0, budget_bytes, work_dir,
                             skip_bad_records, workers)
        log_bad_records(chunks, scans)
        counters = Counters(budget_bytes, os.path.join(work_dir, "main"))
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
        merged = run_tasks(executor, merge_field, [
            MergeTask(field_runs, 1, budget_bytes, output_prefix=os.path.join(counts_dir, CATEGORICAL_NAMES[f]))
            for f, field_runs in enumerate(runs)])
        run_files = [[os.path.basename(run.keys_path), os.path.basename(run.counts_path)] for run in merged]
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(work_dir, ignore_errors=True)
    summary_json = {"inputs": [os.path.abspath(p) for p in inputs], "val_fraction": val_fraction,
                    "lines": sum(scan.lines for scan in scans),
                    "rows": {split: sum(scan.rows[split] for scan in scans) for split in SPLITS},
                    "bad_records": sum(scan.bad_records for scan in scans), "runs": run_files}
    with open(os.path.join(counts_dir, COUNTS_FILE), "w") as out:
        json.dump(summary_json, out, indent=1, sort_keys=True)
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
    for field in range(schema.NUM_CATEGORICAL_FIELDS):
        parts = [vocab_lib.Run(os.path.join(d, s["runs"][field][0]), os.path.join(d, s["runs"][field][1]), 0, 0).load()
                 for d, s in zip(counts_dirs, summaries)]
        keys, counts = vocab_lib.merge_runs(parts, min_count, int(memory_mb * MIB))
        ranked.append([key.decode("utf-8") for key in vocab_lib.rank_kept(keys, counts).tolist()])
    vocabulary = Vocabulary.from_ranked(ranked)
    os.makedirs(output_dir, exist_ok=True)
    metadata = schema.DatasetMetadata(
        feature_size=vocabulary.feature_size, vocabulary=vocabulary.fields, dense_clip=[float(c) for c in DENSE_CLIP],
        source="Criteo vocabulary from the counts of %d part(s) (%d train rows) with min_count=%d"
        % (len(counts_dirs), sum(s["rows"][schema.TRAIN_SPLIT] for s in summaries), min_count))
    metadata.write(output_dir)
    return metadata
