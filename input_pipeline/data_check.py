"""The training data read whole once before a run touches its model directory.

`check_files` reads every row of each file once, file by file, through the
format's own reader and decoder (`DataFormat.decoded_batches`), and stops
at the first file that has any of:

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
from typing import Dict, List, Optional, Sequence

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
class FileSummary:
    """What one pass over a file found.

    Attributes:
      path: the file.
      rows: its rows.
      min_id, max_id: the smallest and largest feature id (none: int64's
        largest and smallest).
      bad_values: values that are not finite.
      bad_labels: labels that are not finite.
    """

    path: str
    rows: int
    min_id: int
    max_id: int
    bad_values: int
    bad_labels: int


def check_files(paths: Sequence[str], config, feature_size: int, role: str = "training") -> List[FileSummary]:
    """Reads every row of `paths` once and refuses the first file with a problem (see the module docstring).

    Args:
      paths: the files.
      config: the `pipeline.PipelineConfig` they are read with (format,
        `field_size`, the format's options).
      feature_size: ids must be in [0, feature_size).
      role: what the files are, in messages (`training`, `validation`).

    Returns:
      A summary of each file.

    Raises:
      DataCheckError: the message names the file, the row and the value.
    """
    summaries = []
    for path in paths:
        summary = summarize(path, config, role)
        where = "%s file %s" % (role, path)
        if summary.rows == 0:
            raise DataCheckError("%s holds no row: remove it from the input, or write its rows again" % where)
        if summary.min_id < 0 or summary.max_id >= feature_size:
            row, text = _first_bad_row(path, config, lambda ids, values, labels: _bad_id(ids, feature_size))
            raise DataCheckError("%s, %s: %s is out of range [0, feature_size=%d): check --feature_size or the "
                                 "metadata of the data" % (where, _location(path, config, row), text, feature_size))
        if summary.bad_values or summary.bad_labels:
            row, text = _first_bad_row(path, config, lambda ids, values, labels: _bad_value(values, labels))
            raise DataCheckError("%s, %s: %s (%d such value(s) and %d such label(s) in the file): fix or drop the "
                                 "rows" % (where, _location(path, config, row), text, summary.bad_values,
                                           summary.bad_labels))
        _check_metadata_rows(path, config, summary.rows, where)
        summaries.append(summary)
    return summaries


def summarize(path: str, config, role: str = "training") -> FileSummary:
    """One pass over `path`: its rows, id range and bad values.

    Raises:
      DataCheckError: the file is damaged or a row cannot be decoded; the
        message names the file (and the row where the decoder or a second
        look can tell it).
    """
    data_format = formats.as_format(config.data_format)
    with tf.Graph().as_default():
        dataset = data_format.decoded_batches([path], config, CHECK_BATCH)

        def add(totals, batch):
            features, labels = batch
            ids, values = features[schema.FEAT_IDS], features[schema.FEAT_VALS]
            rows, low, high, bad_values, bad_labels = totals
            bad_label = tf.logical_not(tf.math.is_finite(labels))
            return (rows + tf.shape(labels, out_type=tf.int64)[0],
                    tf.minimum(low, tf.reduce_min(ids)), tf.maximum(high, tf.reduce_max(ids)),
                    bad_values + tf.math.count_nonzero(tf.logical_not(tf.math.is_finite(values)), dtype=tf.int64),
                    bad_labels + tf.math.count_nonzero(bad_label, dtype=tf.int64))

        zero = tf.constant(0, tf.int64)
        totals = dataset.reduce(
            (zero, tf.constant(INT64_MAX, tf.int64), tf.constant(INT64_MIN, tf.int64), zero, zero), add)
        with tf.compat.v1.Session() as session:
            try:
                rows, low, high, bad_values, bad_labels = (int(v) for v in session.run(totals))
            except tf.errors.OpError as e:
                raise DataCheckError(_describe_read_error(path, config, role, e)) from None
    return FileSummary(path, rows, low, high, bad_values, bad_labels)


def _describe_read_error(path: str, config, role: str, error: tf.errors.OpError) -> str:
    """One line for a read or decode error of `path`: the decoder's own message, or the bad record found."""
    text = error.message
    match = _ASSERTION.search(text)
    if match:
        message = match.group("message")
    else:
        message = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if path in message:
        return "%s data: %s" % (role, message)
    data_format = formats.as_format(config.data_format)
    if data_format.pipe_record_format is not None:
        found = _first_bad_record(path, data_format, config.field_size)
        if found:
            return "%s file %s, %s" % (role, path, found)
    return "%s file %s: %s" % (role, path, message)


def _first_bad_record(path: str, data_format, field_size: int) -> Optional[str]:
    """The first record of a TFRecord file (packed or not) that is not a row of the layout, as `record N: why`."""
    import google.protobuf.message  # pylint: disable=import-outside-toplevel
    try:
        records = list(tf.compat.v1.io.tf_record_iterator(path))
    except tf.errors.OpError:
        return None
    for number, record in enumerate(records):
        try:
            feature = tf.train.Example.FromString(record).features.feature
        except google.protobuf.message.DecodeError as e:
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


def _first_bad_row(path: str, config, find):
    """The first row of `path` that `find` flags, and its description (a second, eager pass)."""
    data_format = formats.as_format(config.data_format)
    offset = 0
    for features, labels in data_format.decoded_batches([path], config, CHECK_BATCH):
        ids, values, labels = (features[schema.FEAT_IDS].numpy(), features[schema.FEAT_VALS].numpy(),
                               labels.numpy())
        rows, describe = find(ids, values, labels)
        if rows.any():
            row = int(rows.nonzero()[0][0])
            return offset + row, describe(row)
        offset += len(labels)
    raise DataCheckError("%s: a row was flagged in a first pass and not found in a second: is the file being "
                         "written?" % path)


def _location(path: str, config, row: int) -> str:
    """Where row `row` (from 0) of `path` is: a TFRecord record, a LibSVM line, a packed file's row."""
    data_format = formats.as_format(config.data_format)
    if data_format.pipe_record_format is None:
        # LibSVM: one line per row, unless bad lines are skipped.
        return "row %d" % row if config.skip_bad_records else "line %d" % (row + 1)
    return "row %d" % row if data_format.packed else "record %d" % row


def _check_metadata_rows(path: str, config, rows: int, where: str) -> None:
    """Refuses a file whose dataset metadata has another row count for it."""
    if config.skip_bad_records or config.max_corrupted_records:
        return
    meta = schema.find_metadata(path)
    if meta is None:
        return
    expected = files.row_counts([path], config.data_format)
    if expected is None:
        # Not listed: its rows are counted (`input_pipeline.files`), as for files outside a dataset.
        return
    if expected[path] != rows:
        raise DataCheckError("%s holds %d rows, %s says %d: the metadata and the files disagree; write the "
                             "metadata again or restore the file" % (where, rows, meta, expected[path]))


def row_totals(summaries: Sequence[FileSummary]) -> Dict[str, int]:
    """Rows per file of `check_files`' summaries."""
    return {summary.path: summary.rows for summary in summaries}
