"""The conversion of Criteo TSV files into a dataset root, in bounded memory, on every core.

`convert_with_report(inputs, output_dir, ConversionOptions(...))` writes the
layout of `input_pipeline.schema` (LibSVM and TFRecord shards plus
`metadata.json`) with the features of `dataprep.criteo.records` and the
vocabulary of `dataprep.criteo.vocabulary`. How it runs:

* The inputs are cut into byte ranges (`dataprep.criteo.blocks`) and both
  passes run over the ranges on `workers` processes
  (`dataprep.criteo.workers`): pass 1 (`dataprep.criteo.counting`) checks
  every line and counts the categorical values, pass 2
  (`dataprep.criteo.writing`) writes.
* Memory: the value counts of all processes together stay within
  `memory_mb`, past which they go to sorted runs on disk; only the kept
  vocabulary (values seen `min_count` times or more) must fit in memory, as
  it goes to `metadata.json`.
* Which split a line goes to depends only on the line's bytes (CRC-32), so
  the split is the same on every run and identical lines land in the same
  split. A malformed line stops the run before anything is written (unless
  `skip_bad_records`), naming the file and line.
* `negative_sampling=RATE`: a train row labelled 0 is kept with probability
  RATE (decided by a hash of the line's bytes, so it is reproducible);
  positives and the validation split are kept whole. The rate is recorded in
  `metadata.json`'s `source` (`negative_sampling=RATE`), because a model
  trained on such data predicts a recalibrated probability
  (`dataprep.criteo.records.recalibrate`).
"""

import dataclasses
import os
import shutil
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

from absl import logging

from dataprep import writers
from dataprep.criteo.blocks import HASH_RANGE, plan_chunks
from dataprep.criteo.counting import build_vocabulary, log_bad_records, scan_inputs
from dataprep.criteo.options import ConversionOptions
from dataprep.criteo.records import DENSE_CLIP, SPLITS, check_inputs
from dataprep.criteo.vocabulary import load_vocab
from dataprep.criteo.workers import MIB, executor_for
from dataprep.criteo.writing import save_tables, write_splits
from input_pipeline import schema


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


def convert(inputs: Sequence[str], output_dir: str,
            options: Optional[ConversionOptions] = None) -> schema.DatasetMetadata:
    """Converts Criteo TSV files into a dataset root at `output_dir`; returns its metadata.

    As `convert_with_report`, without the report.
    """
    return convert_with_report(inputs, output_dir, options)[0]


def convert_with_report(inputs: Sequence[str], output_dir: str, options: Optional[ConversionOptions] = None
                        ) -> Tuple[schema.DatasetMetadata, ConversionReport]:
    """Converts Criteo TSV files into a dataset root at `output_dir`.

    Args:
      inputs: Criteo TSV files, read in this order.
      output_dir: the dataset root to write.
      options: how (None: the defaults of `ConversionOptions`).

    Returns:
      (metadata, report): the metadata written to `output_dir/metadata.json`
      (its `source` names the inputs, the number of skipped bad records and
      the options that change the rows), and what was done how fast.

    Raises:
      ValueError: a bad option; an empty input; a malformed line (a
        `MalformedRecordError` naming file and line) without
        `skip_bad_records`; no valid line at all.
      FileNotFoundError: an input or `vocab` does not exist.
      FileExistsError: `output_dir` holds a dataset and not `overwrite`.
    """
    options = options or ConversionOptions()
    workers = options.processes()
    min_count = options.vocabulary_min_count()
    check_inputs(inputs)
    vocabulary, vocab_metadata = None, None
    clips: List[float] = [float(c) for c in DENSE_CLIP]
    if options.vocab is not None:
        vocabulary, vocab_metadata = load_vocab(options.vocab)
        clips = list(vocab_metadata.dense_clip)
    writers.check_output_dir(output_dir, options.overwrite)

    budget_bytes = int(options.memory_mb * MIB) // (workers + 1)
    threshold = int(options.val_fraction * HASH_RANGE)
    chunks = plan_chunks(inputs, options.chunk_bytes)
    input_bytes = sum(os.path.getsize(path) for path in inputs)
    seconds = {}
    executor = executor_for(workers)
    work_dir = tempfile.mkdtemp(prefix="criteo-convert-", dir=options.tmp_dir)
    try:
        start = time.time()
        scans = scan_inputs(executor, chunks, threshold, vocabulary is None, options.negative_sampling, budget_bytes,
                            work_dir, options.skip_bad_records, workers)
        seconds["count"] = time.time() - start
        bad_records = sum(scan.bad_records for scan in scans)
        log_bad_records(chunks, scans)
        rows = {split: sum(scan.rows[split] for scan in scans) for split in SPLITS}
        if not sum(rows.values()):
            raise ValueError("no valid records in %s (%d bad records skipped)" % (", ".join(inputs), bad_records))
        start = time.time()
        spilled = 0
        if vocabulary is None:
            vocabulary, spilled = build_vocabulary(executor, scans, min_count, budget_bytes, work_dir)
        seconds["vocabulary"] = time.time() - start
        feature_size = vocab_metadata.feature_size if vocab_metadata else vocabulary.feature_size
        id_width = len(str(feature_size - 1)) if options.libsvm_layout == "fixed" else None

        writers.prepare_output_dir(output_dir, options.overwrite)
        splits = [schema.TRAIN_SPLIT] + ([schema.VALIDATION_SPLIT] if options.val_fraction > 0 else [])
        tables_path = os.path.join(work_dir, "vocabulary.npz")
        save_tables(vocabulary, tables_path)
        first_rows = []
        running = dict.fromkeys(splits, 0)
        for scan in scans:
            first_rows.append(dict(running))
            for split in splits:
                running[split] += scan.rows[split]
        written = write_splits(executor, chunks, first_rows, splits, rows, threshold, tables_path, clips, output_dir,
                               id_width, work_dir, seconds, options)
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
        stems = ["%s/%s" % (split, schema.shard_stem(i)) for i in range(options.shards)]
        per_shard = [len(range(i, rows[split], options.shards)) for i in range(options.shards)]
        split_infos[split] = schema.SplitInfo(rows=rows[split], shards=dict(zip(stems, per_shard)))
    dropped = sum(scan.dropped_negatives for scan in scans)
    total = sum(written_rows.values())
    notes = ["val_fraction=%g" % options.val_fraction]
    if options.negative_sampling < 1.0:
        notes.append("negative_sampling=%r (train negatives kept with this probability; %d dropped)"
                       % (options.negative_sampling, dropped))
    if options.shuffle:
        notes.append("shuffled with seed %d" % options.seed)
    vocab_text = ("vocabulary from %s" % options.vocab if options.vocab is not None
                  else "vocabulary built from the train split with min_count=%d" % min_count)
    metadata = schema.DatasetMetadata(
        feature_size=feature_size, splits=split_infos, vocabulary=vocabulary.fields,
        dense_clip=[float(c) for c in clips],
        source="Criteo TSV %s: %d records converted (%d positive), %d bad records skipped; %s; %s"
        % (", ".join(os.path.abspath(p) for p in inputs), total, num_positives, bad_records, vocab_text,
           "; ".join(notes)))
    metadata.write(output_dir, split_views=True)
    report = ConversionReport(input_bytes=input_bytes, lines=sum(scan.lines for scan in scans), rows=written_rows,
                              bad_records=bad_records, dropped_negatives=dropped, seconds=seconds,
                              spilled_runs=spilled, workers=workers)
    for line in report.lines_text():
        logging.info("%s", line)
    return metadata, report
