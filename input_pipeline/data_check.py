"""The training data read whole once before a run touches its model directory.

`check_files` reads every row of the files once, in one pass through the
format's own reader and decoder (`DataFormat.decoded_batches`), and names
the first file that has any of (a second look, only where the pass found
a problem, finds its row):

* damage: a TFRecord or packed TFRecord file cut short, or a record whose
  bytes do not match their checksum (`input_pipeline.formats` counts each
  file's bytes); a LibSVM line that is not `label id:value ...`;
* a row of another layout: another number of fields than `field_size`;
* a value that is not finite (NaN, infinity) among the values or the labels;
* an id below 0 or at or above `feature_size`;
* no row at all;
* another number of rows than its dataset's `metadata.json` says (the step
  budget and the shards would be computed from wrong counts; a file the
  metadata does not list has its rows counted instead, as files outside a
  dataset do).

Each error is one line naming the file, the row where there is one (a
TFRecord file's record, a LibSVM file's `file:line`, a packed file's row),
the bad value and what to do. The pass costs what one epoch of input costs
without training (`benchmarks.input_speed`: about 2 to 3.5 microseconds a
row on this project's 2-core machine); `--check_data=false` skips it.

What is skipped by design: files `max_corrupted_records` may skip are not
checked for damage, and lines `skip_bad_records` drops are not errors (their
row counts then differ from the metadata's too). Pipe-mode channels cannot
be read twice and are not checked here; the model's own checks (ids in
range, finite values) stop a step that would train on a bad row.
"""

import dataclasses
import re
from typing import Dict, Optional, Sequence

import tensorflow as tf

from input_pipeline import files, formats, schema

CHECK_BATCH = 4096
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


def check_files(paths: Sequence[str], config, feature_size: int, role: str = "training") -> Summary:
    """Reads every row of `paths` once and refuses the first file with a problem (see the module docstring).

    One pass reads every file (a second look, file by file, only finds the
    row of a problem the first found).

    Args:
      paths: the files.
      config: the `pipeline.PipelineConfig` they are read with (format,
        `field_size`, the format's options).
      feature_size: ids must be in [0, feature_size).
      role: what the files are, in messages (`training`, `validation`).

    Returns:
      What the pass found.

    Raises:
      DataCheckError: the message names the file, the row and the value.
    """
    if not paths:
        return Summary(0, INT64_MAX, INT64_MIN, 0, 0)
    summary = summarize(paths, config, role)
    if summary.min_id < 0 or summary.max_id >= feature_size:
        path, row, text = _first_bad_row(paths, config, lambda ids, values, labels: _bad_id(ids, feature_size))
        raise DataCheckError("%s file %s, %s: %s is out of range [0, feature_size=%d): check --feature_size or the "
                             "metadata of the data" % (role, path, _location(config, row), text, feature_size))
    if summary.bad_values or summary.bad_labels:
        path, row, text = _first_bad_row(paths, config, lambda ids, values, labels: _bad_value(values, labels))
        raise DataCheckError("%s file %s, %s: %s (%d such value(s) and %d such label(s) in the input): fix or drop "
                             "the rows" % (role, path, _location(config, row), text, summary.bad_values,
                                           summary.bad_labels))
    _check_rows(paths, config, summary.rows, role)
    return summary


def summarize(paths: Sequence[str], config, role: str = "training") -> Summary:
    """One pass over `paths`: rows, id range and values that are not finite.

    Raises:
      DataCheckError: a file is damaged or a row cannot be decoded; the
        message names the file (and the record where a second look finds it).
    """
    data_format = formats.as_format(config.data_format)
    with tf.Graph().as_default():
        zero = tf.constant(0, tf.int64)
        initial = (zero, tf.constant(INT64_MAX, tf.int64), tf.constant(INT64_MIN, tf.int64), zero, zero)
        total = data_format.decoded_batches(list(paths), config, CHECK_BATCH).reduce(initial, _add)
        with tf.compat.v1.Session() as session:
            try:
                return Summary(*(int(v) for v in session.run(total)))
            except tf.errors.OpError as error:
                raise DataCheckError(_describe_read_error(paths, config, role, error)) from None


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
    from google.protobuf.message import DecodeError  # pylint: disable=import-outside-toplevel
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
    import numpy as np  # pylint: disable=import-outside-toplevel
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


def _check_rows(paths: Sequence[str], config, rows: int, role: str) -> None:
    """Refuses files whose dataset metadata has other row counts for them, or files without a row.

    The pass's total is compared with the metadata's; only when they differ
    (or a file is not listed) are files counted one by one
    (`DataFormat.count_rows`), to name the one.
    """
    if config.skip_bad_records or config.max_corrupted_records:
        return
    data_format = formats.as_format(config.data_format)
    listed: Dict[str, Optional[int]] = {}
    for path in paths:
        counts = files.row_counts([path], data_format) if schema.find_metadata(path) else None
        listed[path] = None if counts is None else counts[path]
    known = [count for count in listed.values() if count]
    if len(known) == len(listed) and sum(known) == rows:
        return
    for path, expected in listed.items():
        counted = data_format.count_rows(path)
        if counted == 0:
            raise DataCheckError("%s file %s holds no row: remove it from the input, or write its rows again"
                                 % (role, path))
        if expected is not None and counted != expected:
            raise DataCheckError("%s file %s holds %d rows, %s says %d: the metadata and the files disagree; write "
                                 "the metadata again or restore the file"
                                 % (role, path, counted, schema.find_metadata(path), expected))
