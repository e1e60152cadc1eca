"""The training data read whole once before a run touches its model directory, and once per dataset.

`check_files` reads every row of each file once through the format's own
reader and decoder, all the files in one pipeline that sums up each file on
its own (`summaries`, `DataFormat.each_file`), and names the first file that
has any of (where the pipeline fails, a pass per file finds which; a second
look, only where a file's summary shows a problem, finds its row):

* damage: a TFRecord or packed TFRecord file cut short, or a record whose
  bytes do not match their checksum (`input_pipeline.format_tfrecord` counts each
  file's bytes); a LibSVM line that is not `label id:value ...`;
* a row of another layout: another number of fields than `field_size`;
* a value that is not finite (NaN, infinity) among the values or the labels;
* an id below 0 or at or above `feature_size`;
* no row at all;
* another number of rows than its dataset's `metadata.json` says (the step
  budget and the shards would be computed from wrong counts; a file the
  metadata does not list has its rows counted by its pass, as files outside
  a dataset do).

Each error is one line naming the file, the row where there is one (a
TFRecord file's record, a LibSVM file's `file:line`, a packed file's row),
the bad value and what to do. `--check_data=false` skips the check.

Once per dataset. What the pass found in each good file is kept in a record
(`input_pipeline.check_record`): beside the data where the job owns the
dataset's directory, else in the model directory (a SageMaker input channel,
a read-only or another user's folder, or `data_check_record` `model_dir`).
A later check reads only the files that are new or changed since (size,
mtime, or the options they are read with) and judges the others from their
record: a restart's time to its first step does not grow with the rows. A
record beside the data spares its files in every run on them; one in the
model directory, in the restarts of that run.

Cost. Reading costs what one epoch of input costs without training
(`benchmarks.input_speed`: about 2 to 3.5 microseconds a row on this
project's 2-core machine), plus building the pipeline's graph and starting
it: once for all the files, where a pass per file (as the check read them
before) pays about 0.25 s of CPU for each file there, more than a small
file's rows. `workers` files are read at once, by default
`WORKERS_PER_CORE` for each core the process may use. Measured on that
machine (`benchmarks.data_check`, CPU of the check, medians of 5
interleaved rounds): 20,000 rows in 8 files, 2.57 s a pass per file and
0.79 s in one pipeline; 1,000,000 rows in 16 files, 6.27 and 3.48 s. A check
whose files are all recorded reads none: 0.00 s. Progress is logged every
`PROGRESS_INTERVAL_S` (files and rows done, of the metadata's rows where
every file has them), and the end with the time taken and the files the
record spared (`--verbosity 0` shows these lines).

What is skipped by design: files `max_corrupted_records` may skip are not
checked for damage (each file's pass has the budget; the budget across the
files is the training input's), and lines `skip_bad_records` drops are not
errors (their row counts then differ from the metadata's too). Pipe-mode
channels cannot be read twice and are not checked here; the model's own
checks (ids in range, finite values) stop a step that would train on a bad
row.
"""

import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import re
import time
from typing import Dict, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from input_pipeline import check_record, files, formats, schema

CHECK_BATCH = 4096
# The data check logs how far it is at most this often (and when it ends).
PROGRESS_INTERVAL_S = 10.0
# Files read at once per core (in a pass per file, one builds its graph while others run: four beat two
# on 2 cores).
WORKERS_PER_CORE = 2
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
# Assert messages arrive as `assertion failed: [<message>]` followed by the op's name.
_ASSERTION = re.compile(r"assertion failed: \[(?P<message>.*?)\](?:\s|$)", re.S)


class DataCheckError(ValueError):
    """A training or validation file holds something training cannot use; the message names it."""


@dataclasses.dataclass(frozen=True)
class Summary:
    """What one pass over files found.

    Attributes:
      rows: their rows.
      min_id, max_id: the smallest and largest feature id (none: int64's
        largest and smallest).
      bad_values: values that are not finite.
      bad_labels: labels that are not finite.
    """

    rows: int
    min_id: int
    max_id: int
    bad_values: int
    bad_labels: int


def check_files(paths: Sequence[str], config, feature_size: int, role: str = "training",
                record: Optional[check_record.CheckRecord] = None, workers: Optional[int] = None) -> Summary:
    """Reads every row of `paths` once and refuses the first file with a problem (see the module docstring).

    Each file is read in a pass of its own, `workers` at a time (a second
    look, file by file, only finds the row of a problem the first found).
    A file `record` holds, unchanged since and read with the same options,
    is not read: what was found in it is judged again. Files read and found
    good are added to `record` (its `save` writes them).

    Args:
      paths: the files.
      config: the `pipeline.PipelineConfig` they are read with (format,
        `field_size`, the format's options).
      feature_size: ids must be in [0, feature_size).
      role: what the files are, in messages (`training`, `validation`).
      record: the record of files already checked (`check_record`); None
        reads every file.
      workers: files read at once; None: `WORKERS_PER_CORE` per core this
        process may use.

    Returns:
      What the files hold, together.

    Raises:
      DataCheckError: the message names the file, the row and the value; the
        first file of `paths` with a problem (of those read before the
        first problem stopped the check).
    """
    if not paths:
        return Summary(0, INT64_MAX, INT64_MIN, 0, 0)
    data_format = formats.as_format(config.data_format)
    options = record_options(config)
    expected = _listed_rows(paths, data_format)
    progress = _Progress(role, len(paths), _known_total(expected))
    found: Dict[str, Summary] = {}
    errors: Dict[str, DataCheckError] = {}

    def judge(path: str, summary: Summary) -> bool:
        try:
            _judge(path, summary, config, feature_size, role, expected[path])
        except DataCheckError as e:
            errors[path] = e
            return False
        found[path] = summary
        return True

    for path in paths:
        recorded = record.found(path, options) if record is not None else None
        if recorded is not None:
            summary = Summary(**recorded)
            progress.add(summary.rows, recorded=True)
            judge(path, summary)
    to_read = [path for path in paths if path not in found and path not in errors]
    if to_read and not errors:
        _read_files(to_read, config, role, workers or default_workers(), record, options, judge, progress, errors)
    progress.finish()
    for path in paths:
        if path in errors:
            raise errors[path]
    return functools.reduce(_combine, (found[path] for path in paths))


def _read_files(paths: Sequence[str], config, role: str, workers: int, record: Optional[check_record.CheckRecord],
                options: Dict[str, object], judge, progress: "_Progress", errors: Dict[str, "DataCheckError"]) -> None:
    """Reads `paths`, `workers` at a time, and judges each as it ends; the first problem stops the reading.

    The files are read in one pipeline (`summaries`); where it fails (a
    file cannot be read or decoded, which the pipeline cannot tell apart),
    the files it had not summarized are read again file by file
    (`_read_each`), and the first of them with the problem is named.
    """
    def take(path: str, state: Optional[check_record.FileState], started_ns: int, summary: Summary) -> None:
        """A file read: counted, judged, and recorded where it is good."""
        progress.add(summary.rows, recorded=False)
        if judge(path, summary) and record is not None and state is not None:
            record.add(path, state, options, dataclasses.asdict(summary), started_ns)

    states = {path: _state_of(path) for path in paths}
    started_ns = time.time_ns()
    done = set()
    try:
        with contextlib.closing(summaries(paths, config, workers)) as found:
            for index, summary in found:
                path = paths[index]
                done.add(path)
                take(path, states[path], started_ns, summary)
                if errors:
                    return
    except (tf.errors.OpError, OSError):
        _read_each([path for path in paths if path not in done], config, role, workers, take, progress, errors)


def summaries(paths: Sequence[str], config, workers: int):
    """(index in `paths`, `Summary`) of every file, as the files end, `workers` read at once, in one pipeline.

    Each file's summary is that of `summarize([path])` (`DataFormat.each_file`).

    Raises:
      tf.errors.OpError: a file cannot be read or decoded (which one, the
        error may not say); OSError: a file cannot be found.
    """
    data_format = formats.as_format(config.data_format)

    @tf.autograph.experimental.do_not_convert
    def summary(index, batches):
        return tf.data.Dataset.from_tensors((index,) + tuple(batches.reduce(_initial_totals(), _add)))

    graph = tf.Graph()
    with graph.as_default():
        element = tf.compat.v1.data.make_one_shot_iterator(
            data_format.each_file(list(paths), config, CHECK_BATCH, summary, workers)).get_next()
    # No graph is the default while the caller has a summary (it may read files eagerly, `_first_bad_row`).
    session = tf.compat.v1.Session(graph=graph)
    try:
        while True:
            try:
                index, *totals = session.run(element)
            except tf.errors.OutOfRangeError:
                return
            yield int(index), Summary(*(int(v) for v in totals))
    finally:
        session.close()


def _read_each(paths: Sequence[str], config, role: str, workers: int, take, progress: "_Progress",
               errors: Dict[str, "DataCheckError"]) -> None:
    """Reads `paths` in a pass each, `workers` at a time, and `take`s each as it ends; the first problem cancels
    the files not begun.

    Each pass builds its own graph (Python, holding the interpreter's lock)
    and then runs it (TensorFlow's threads): with two or more workers, one
    file's pass is built while another's runs.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(paths))) as pool:
        pending = {}
        for path in paths:
            pending[pool.submit(_read_one, path, config, role)] = path
        for future in concurrent.futures.as_completed(pending):
            path = pending[future]
            if future.cancelled():
                continue
            try:
                state, started_ns, summary = future.result()
            except DataCheckError as e:
                errors[path] = e
                progress.add(0, recorded=False)
            else:
                take(path, state, started_ns, summary)
            if errors:
                for other in pending:
                    other.cancel()


def _state_of(path: str) -> Optional[check_record.FileState]:
    """A file's state before it is read (None: it cannot be; its pass names the problem)."""
    try:
        return check_record.FileState.of(path)
    except OSError:
        return None  # The pass names the problem (a missing file: TensorFlow's NotFoundError).


def _read_one(path: str, config, role: str) -> Tuple[Optional[check_record.FileState], int, Summary]:
    """One file's state before it was read (None: it cannot be), when its reading started, what it found."""
    state = _state_of(path)
    started_ns = time.time_ns()
    return state, started_ns, summarize([path], config, role)


def record_options(config) -> Dict[str, object]:
    """What reading a file depended on, besides its bytes: a file recorded under other options is read again."""
    data_format = formats.as_format(config.data_format)
    return {"format": data_format.name, "field_size": int(config.field_size),
            "skip_bad_records": bool(config.skip_bad_records),
            "max_corrupted_records": int(config.max_corrupted_records)}


def default_workers() -> int:
    """Files read at once: `WORKERS_PER_CORE` per core this process may use (its CPU affinity where there is one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux.
        cores = os.cpu_count() or 1
    return WORKERS_PER_CORE * max(1, cores)


def _judge(path: str, summary: Summary, config, feature_size: int, role: str, expected_rows: Optional[int]) -> None:
    """Refuses one file from what was found in it: ids out of range, values that are not finite, its row count.

    A second look reads the file again only to name the row of a problem.
    """
    if summary.min_id < 0 or summary.max_id >= feature_size:
        _, row, text = _first_bad_row([path], config, lambda ids, values, labels: _bad_id(ids, feature_size))
        raise DataCheckError("%s file %s, %s: %s is out of range [0, feature_size=%d): check --feature_size or the "
                             "metadata of the data" % (role, path, _location(config, row), text, feature_size))
    if summary.bad_values or summary.bad_labels:
        _, row, text = _first_bad_row([path], config, lambda ids, values, labels: _bad_value(values, labels))
        raise DataCheckError("%s file %s, %s: %s (%d such value(s) and %d such label(s) in the input): fix or drop "
                             "the rows" % (role, path, _location(config, row), text, summary.bad_values,
                                           summary.bad_labels))
    _check_rows(path, config, summary.rows, expected_rows, role)


def _combine(a: Summary, b: Summary) -> Summary:
    """Two summaries as one."""
    return Summary(a.rows + b.rows, min(a.min_id, b.min_id), max(a.max_id, b.max_id), a.bad_values + b.bad_values,
                   a.bad_labels + b.bad_labels)


def summarize(paths: Sequence[str], config, role: str = "training") -> Summary:
    """One pass over `paths`: rows, id range and values that are not finite.

    Raises:
      DataCheckError: a file is damaged or a row cannot be decoded; the
        message names the file (and the record where a second look finds it).
    """
    data_format = formats.as_format(config.data_format)
    with tf.Graph().as_default():
        total = data_format.decoded_batches(list(paths), config, CHECK_BATCH).reduce(_initial_totals(), _add)
        with tf.compat.v1.Session() as session:
            try:
                return Summary(*(int(v) for v in session.run(total)))
            except tf.errors.OpError as error:
                raise DataCheckError(_describe_read_error(paths, config, role, error)) from None


def _initial_totals():
    """What `_add` starts from: no row, no id, no bad value."""
    zero = tf.constant(0, tf.int64)
    return zero, tf.constant(INT64_MAX, tf.int64), tf.constant(INT64_MIN, tf.int64), zero, zero


@tf.autograph.experimental.do_not_convert
def _add(totals, batch):
    """One batch's rows, id range and values that are not finite, added to `totals`."""
    features, labels = batch
    ids, values = features[schema.FEAT_IDS], features[schema.FEAT_VALS]
    rows, low, high, bad_values, bad_labels = totals
    return (rows + tf.shape(labels, out_type=tf.int64)[0],
            tf.minimum(low, tf.reduce_min(ids)), tf.maximum(high, tf.reduce_max(ids)),
            bad_values + tf.math.count_nonzero(tf.logical_not(tf.math.is_finite(values)), dtype=tf.int64),
            bad_labels + tf.math.count_nonzero(tf.logical_not(tf.math.is_finite(labels)), dtype=tf.int64))


def _describe_read_error(paths: Sequence[str], config, role: str, error: tf.errors.OpError) -> str:
    """One line for a read or decode error: the reader's or decoder's own message where it names the file,
    else the first record of a TFRecord file that is not a row of the layout."""
    text = error.message
    match = _ASSERTION.search(text)
    if match:
        message = match.group("message")
    else:
        message = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if any(path in message for path in paths):
        return "%s data: %s" % (role, message)
    data_format = formats.as_format(config.data_format)
    if data_format.pipe_record_format is not None:
        for path in paths:
            found = _first_bad_record(path, data_format, config.field_size)
            if found:
                return "%s file %s, %s" % (role, path, found)
    return "%s data (%s): %s" % (role, ", ".join(paths), message)


def _first_bad_record(path: str, data_format, field_size: int) -> Optional[str]:
    """The first record of a TFRecord file (packed or not) that is not a row of the layout, as `record N: why`."""
    from google.protobuf.message import DecodeError
    try:
        records = list(tf.compat.v1.io.tf_record_iterator(path))
    except tf.errors.OpError:
        return None
    for number, record in enumerate(records):
        try:
            feature = tf.train.Example.FromString(record).features.feature
        except DecodeError as e:
            return "record %d is not a tf.train.Example: %s" % (number, e)
        rows = len(feature[schema.LABEL_KEY].float_list.value) if data_format.packed else 1
        expected = {schema.LABEL_KEY: ("float_list", rows),
                    schema.IDS_KEY: ("int64_list", rows * field_size),
                    schema.VALUES_KEY: ("float_list", rows * field_size)}
        for key, (kind, length) in expected.items():
            if key not in feature:
                return "record %d has no feature %r (it has %s)" % (number, key, sorted(feature))
            count = len(getattr(feature[key], kind).value)
            if count != length or not length:
                return "record %d: feature %r holds %d values, expected %d (field_size is %d)" % (
                    number, key, count, length, field_size)
    return None


def _bad_id(ids, feature_size: int):
    """The rows holding an id outside [0, feature_size), and a description of a row's first one."""
    bad = (ids < 0) | (ids >= feature_size)

    def describe(row):
        field = int(bad[row].nonzero()[0][0])
        return "feature id %d of field %d" % (ids[row][field], field)
    return bad.any(axis=1), describe


def _bad_value(values, labels):
    """The rows holding a value or a label that is not finite, and a description of the first."""
    import numpy as np
    bad_values = ~np.isfinite(values)
    bad_labels = ~np.isfinite(labels)
    rows = bad_values.any(axis=1) | bad_labels

    def describe(row):
        if bad_labels[row]:
            return "label %r" % float(labels[row])
        field = int(bad_values[row].nonzero()[0][0])
        return "value %r of field %d" % (float(values[row][field]), field)
    return rows, describe


def _first_bad_row(paths: Sequence[str], config, find):
    """The first file of `paths` with a row `find` flags, that row and its description (eager passes)."""
    data_format = formats.as_format(config.data_format)
    for path in paths:
        offset = 0
        for features, labels in data_format.decoded_batches([path], config, CHECK_BATCH):
            ids, values, labels = (features[schema.FEAT_IDS].numpy(), features[schema.FEAT_VALS].numpy(),
                                   labels.numpy())
            rows, describe = find(ids, values, labels)
            if rows.any():
                row = int(rows.nonzero()[0][0])
                return path, offset + row, describe(row)
            offset += len(labels)
    raise DataCheckError("%s: a row was flagged in a first pass and not found in a second: were the files being "
                         "written?" % ", ".join(paths))


def _location(config, row: int) -> str:
    """Where row `row` (from 0) of a file is: a TFRecord record, a LibSVM line, a packed file's row."""
    data_format = formats.as_format(config.data_format)
    if data_format.pipe_record_format is None:
        # LibSVM: one line per row, unless bad lines are skipped.
        return "row %d" % row if config.skip_bad_records else "line %d" % (row + 1)
    return "row %d" % row if data_format.packed else "record %d" % row


def _listed_rows(paths: Sequence[str], data_format) -> Dict[str, Optional[int]]:
    """Each file's rows in its dataset's metadata; None for a file the metadata does not list (or without one)."""
    listed: Dict[str, Optional[int]] = {}
    for path in paths:
        counts = files.row_counts([path], data_format) if schema.find_metadata(path) else None
        listed[path] = None if counts is None else counts[path]
    return listed


def _known_total(expected: Dict[str, Optional[int]]) -> Optional[int]:
    """The rows of all files, where the metadata lists every one."""
    counts = list(expected.values())
    return None if any(count is None for count in counts) else sum(count or 0 for count in counts)


def _check_rows(path: str, config, rows: int, expected: Optional[int], role: str) -> None:
    """Refuses a file without a row, or whose dataset metadata has another row count for it.

    Not with `skip_bad_records` or `max_corrupted_records`: rows they drop
    make the counts differ.
    """
    if config.skip_bad_records or config.max_corrupted_records:
        return
    if rows == 0:
        raise DataCheckError("%s file %s holds no row: remove it from the input, or write its rows again"
                             % (role, path))
    if expected is not None and rows != expected:
        raise DataCheckError("%s file %s holds %d rows, %s says %d: the metadata and the files disagree; write "
                             "the metadata again or restore the file"
                             % (role, path, rows, schema.find_metadata(path), expected))


class _Progress:
    """Logs how far a check is: every `PROGRESS_INTERVAL_S` the files and rows done, at the end the time taken."""

    def __init__(self, role: str, files_total: int, rows_total: Optional[int]):
        self._role = role
        self._files_total = files_total
        self._rows_total = rows_total
        self._files = self._rows = self._recorded = 0
        self._start = self._logged = time.monotonic()

    def add(self, rows: int, recorded: bool) -> None:
        """One file done: read (`recorded` False) or found in the record."""
        self._files += 1
        self._rows += rows
        self._recorded += int(recorded)
        now = time.monotonic()
        if now - self._logged >= PROGRESS_INTERVAL_S and self._files < self._files_total:
            self._logged = now
            logging.info("data check: %d of %d %s file(s), %s rows, %.0f s", self._files, self._files_total,
                         self._role, self._rows_of(), now - self._start)

    def finish(self) -> None:
        """The end of the check: its time, the files read and those the record spared."""
        logging.info("data check: %d %s file(s), %s rows in %.1f s: %d read, %d already checked (unchanged since "
                     "their record)", self._files, self._role, "{:,}".format(self._rows),
                     time.monotonic() - self._start, self._files - self._recorded, self._recorded)

    def _rows_of(self) -> str:
        if self._rows_total is None:
            return "{:,}".format(self._rows)
        return "{:,} of {:,}".format(self._rows, self._rows_total)
