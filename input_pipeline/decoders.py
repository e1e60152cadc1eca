"""Vectorized decoders: one call turns a whole batch of records into tensors.

Both decoders return `(features, labels)`:
`features = {schema.FEAT_IDS: int64 [B, field_size],
schema.FEAT_VALS: float32 [B, field_size]}`, `labels` float32 [B].

* TFRecord: `tf.io.parse_example` over the batch of serialized
  `tf.train.Example`s (fixed-length `label`, `ids`, `values`).
* Packed TFRecord (`decode_tfrecord_packed`): records of several rows each,
  parsed as ragged features and reshaped into rows; one parse per record
  instead of one per row.
* LibSVM: the whole batch of lines is checked against the line grammar with
  one `tf.strings.regex_full_match`, split at whitespace and `:` in one pass
  (`tf.compat.v1.string_split` with a set of delimiter characters) and
  converted with `tf.strings.to_number`: no Python and no per-line op.
  The tokens of the good lines are reshaped into rows (every good line has
  the same number of tokens), which costs about a tenth of the decode less
  than padding them with `RaggedTensor.to_tensor`.
  Splitting at the character set costs about a quarter of replacing `:` by a
  space with a regex and then splitting at whitespace, which made the
  decode almost twice as slow (`benchmarks/input_speed.py`); for the
  same reason `tf.io.decode_csv` (typed columns, but only one delimiter, so
  `:` must be replaced first) is slower too.

Bad LibSVM lines: a line that does not follow the grammar or has a number of
pairs other than `field_size` stops the pipeline with
`tf.errors.InvalidArgumentError` naming the first bad line of the batch as
`file:line` (when the caller passes the lines' file indices and line
numbers), the reason, and the line's text. With `skip_bad_records` the bad
lines are dropped instead (the batch comes out shorter) and each batch that
drops lines prints one warning to stderr: how many it dropped and the first
one's `file:line` and reason.

Fixed-width LibSVM (`encoders.encode_libsvm_fixed`, what `dataprep.criteo`
writes by default): when every line of a batch has the same length and the
layout (`label` digit, then per pair ` `, the id's digits, `:`, `D.DDDDDD`),
the batch is decoded as a byte matrix (`tf.io.decode_raw`): ids and values
come from digit arithmetic, with no tokenizing and no per-token string
tensors. Any other batch (or one that breaks the layout anywhere) takes the
general path above, so errors and `skip_bad_records` behave the same. Both
paths give bit-identical tensors.

Fixed-width files read as byte rows (`decode_libsvm_rows`): a file whose
first line has the fixed-width layout and whose size is a whole number of
such lines is read in blocks of lines straight into a uint8 matrix, one row
per line with its `\n` (`input_pipeline.format_libsvm`), with no string per
line. Such a batch is decoded by the same byte arithmetic; when any row
breaks the layout, the rows are turned back into lines and take the general
path, which decodes lines that are valid LibSVM of that length and names
the first bad one. A row that does not end in the line's `\n`, or holds
one before it, is a line of another length: every row after it in its
file is shifted, so it is reported as bad (the file must be read line by
line, which `skip_bad_records` does).

`check_libsvm_line` and `check_example` check one record in plain Python,
so that a wrong `field_size` or format is reported before a graph is built
(`input_pipeline.format_base.DataFormat.check_first_record` reads the record and
calls the one of its format).
"""

import re
import sys
from typing import Dict, Optional, Sequence, Tuple, Union

import tensorflow as tf
from google.protobuf import message

from input_pipeline import schema

# The LibSVM line grammar, read alike by RE2 (TensorFlow) and Python's `re`:
# a label, then `id:value` pairs, separated by whitespace.
NUMBER_PATTERN = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
ID_PATTERN = r"\d{1,18}"
LIBSVM_LINE_PATTERN = r"\s*%s(?:\s+%s:%s)*\s*" % (NUMBER_PATTERN, ID_PATTERN, NUMBER_PATTERN)
PAIR_SEPARATOR = ":"
# Where lines are split into tokens: the whitespace characters of C's
# isspace (those of RE2's `\s` and the vertical tab) and the pair separator;
# runs of them count as one split point.
TOKEN_DELIMITERS = " \t\n\v\f\r" + PAIR_SEPARATOR
# Characters of a bad line quoted in error messages.
QUOTED_LINE_CHARS = 200
# The fixed-width layout (`encoders.encode_libsvm_fixed`): per pair a space,
# the id, `:`, one integer digit, `.` and `FIXED_DECIMALS` decimals.
FIXED_DECIMALS = 6
_FIXED_PAIR_EXTRA = 4 + FIXED_DECIMALS  # every byte of a pair but the id's digits
_MAX_FIXED_ID_DIGITS = 9
# Id digits decoded in one float32 sum (below 2**24: exact); the rest in a second.
_LOW_ID_DIGITS = 7
_SPACE, _COLON, _DOT, _ZERO, _NEWLINE = (ord(c) for c in " :.0\n")

Features = Dict[str, tf.Tensor]


def tfrecord_feature_spec(field_size: int, labelled: bool = True) -> Dict[str, tf.io.FixedLenFeature]:
    """The `tf.io.parse_example` spec of the dataset layout (`input_pipeline.schema`).

    Args:
      field_size: ids per example.
      labelled: whether the spec has the `label` feature.
    """
    spec = {
        schema.IDS_KEY: tf.io.FixedLenFeature([field_size], tf.int64),
        schema.VALUES_KEY: tf.io.FixedLenFeature([field_size], tf.float32),
    }
    if labelled:
        spec[schema.LABEL_KEY] = tf.io.FixedLenFeature([], tf.float32)
    return spec


def decode_tfrecord(serialized: tf.Tensor, field_size: int) -> Tuple[Features, tf.Tensor]:
    """Decodes a batch of serialized `tf.train.Example`s.

    Args:
      serialized: string [B].
      field_size: ids per example.

    Returns:
      `(features, labels)` as described in the module docstring.
    """
    parsed = tf.io.parse_example(serialized, tfrecord_feature_spec(field_size))
    return _features(parsed), parsed[schema.LABEL_KEY]


def decode_tfrecord_features(serialized: tf.Tensor, field_size: int) -> Features:
    """Decodes the features alone of a batch of serialized `tf.train.Example`s (they need no `label`)."""
    return _features(tf.io.parse_example(serialized, tfrecord_feature_spec(field_size, labelled=False)))


def decode_tfrecord_packed(serialized: tf.Tensor, field_size: int, labelled: bool = True,
                           file_index: Optional[tf.Tensor] = None,
                           file_names: Optional[Sequence[str]] = None):
    """Decodes a batch of packed `tf.train.Example`s, each holding several rows.

    A packed record's `label` holds its r rows' labels, `ids` and `values`
    their r * `field_size` ids and values, row by row
    (`encoders.encode_tfrecord_packed`). The lists are parsed as ragged
    features: their values come out back to back, already in row order.

    Args:
      serialized: string [P], P packed records.
      field_size: ids per row.
      labelled: False to decode the features alone (no `label` needed).
      file_index: int32 [P], each record's index into `file_names`; names
        the file of a bad record.
      file_names: the files `file_index` refers to.

    Returns:
      `(features, labels)` of all the records' rows, in order (the
      features alone when not `labelled`).

    Raises:
      tf.errors.InvalidArgumentError: (when the graph runs) a record whose
        `ids` and `values` are not `field_size` per row (per label); the
        message names its file, when known, and its counts.
    """
    spec = {key: tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
            for key, dtype in ((schema.IDS_KEY, tf.int64), (schema.VALUES_KEY, tf.float32))}
    if labelled:
        spec[schema.LABEL_KEY] = tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)
    parsed = tf.io.parse_example(serialized, spec)
    ids, values = parsed[schema.IDS_KEY], parsed[schema.VALUES_KEY]
    id_counts, value_counts = ids.row_lengths(), values.row_lengths()
    if labelled:
        label_counts = parsed[schema.LABEL_KEY].row_lengths()
    else:
        label_counts = id_counts // field_size
    good = tf.logical_and(tf.equal(id_counts, label_counts * field_size), tf.equal(value_counts, id_counts))

    def report():
        bad = tf.argmin(tf.cast(good, tf.int32))
        where = ("a packed TFRecord record" if file_index is None or not file_names else
                 tf.strings.join(["a packed TFRecord record of ",
                                  tf.gather(tf.constant(list(file_names)), file_index[bad])]))
        return raise_error(tf.strings.join([
            where, " holds ", tf.strings.as_string(label_counts[bad]), " row(s) (labels) with ",
            tf.strings.as_string(id_counts[bad]), " ids and ", tf.strings.as_string(value_counts[bad]),
            " values; each row needs field_size=%d of both (was the file written with another "
            "field_size?)" % field_size]))

    check = tf.cond(tf.reduce_all(good), tf.no_op, report)
    with tf.control_dependencies([check]):
        features = {schema.FEAT_IDS: tf.reshape(ids.flat_values, [-1, field_size]),
                    schema.FEAT_VALS: tf.reshape(values.flat_values, [-1, field_size])}
    if not labelled:
        return features
    return features, tf.identity(parsed[schema.LABEL_KEY].flat_values)


def _features(parsed: Dict[str, tf.Tensor]) -> Features:
    return {schema.FEAT_IDS: parsed[schema.IDS_KEY], schema.FEAT_VALS: parsed[schema.VALUES_KEY]}


def decode_libsvm(lines: tf.Tensor, field_size: int,
                  file_index: Optional[tf.Tensor] = None,
                  line_number: Optional[tf.Tensor] = None,
                  file_names: Optional[Sequence[str]] = None,
                  skip_bad_records: bool = False) -> Tuple[Features, tf.Tensor]:
    """Decodes a batch of LibSVM lines `label id:value ...`.

    Args:
      lines: string [B], without line ends.
      field_size: `id:value` pairs every line must have.
      file_index: int32 [B], each line's index into `file_names`; with
        `line_number` and `file_names`, lets errors name `file:line`.
      line_number: int64 [B], each line's 1-based number in its file.
      file_names: the files `file_index` refers to.
      skip_bad_records: drop bad lines (with a warning) instead of failing.

    Returns:
      `(features, labels)` as described in the module docstring; with
      `skip_bad_records` the batch dimension is the number of good lines.

    Raises:
      tf.errors.InvalidArgumentError: (when the graph runs) a bad line and
        not `skip_bad_records`; the message names the file and line.
    """
    lines = tf.convert_to_tensor(lines, tf.string)

    def general():
        return _decode_tokens(lines, field_size, file_index, line_number, file_names, skip_bad_records)

    lengths = tf.strings.length(lines)
    width = tf.reduce_max(lengths)
    pair_bytes = (width - 1) // field_size
    id_digits = pair_bytes - _FIXED_PAIR_EXTRA
    layout_possible = tf.logical_and(
        tf.logical_and(tf.size(lengths) > 0, tf.reduce_all(tf.equal(lengths, width))),
        tf.logical_and(tf.equal((width - 1) % field_size, 0),
                       tf.logical_and(id_digits >= 1, id_digits <= _MAX_FIXED_ID_DIGITS)))

    def fixed_or_general():
        valid, features, labels = _decode_fixed_width(lines, field_size, width, id_digits)
        return tf.cond(valid, lambda: (features, labels), general)

    features, labels = tf.cond(layout_possible, fixed_or_general, general)
    batch = lines.shape[0] if not skip_bad_records else None
    features[schema.FEAT_IDS].set_shape([batch, field_size])
    features[schema.FEAT_VALS].set_shape([batch, field_size])
    labels.set_shape([batch])
    return features, labels


def fixed_width_line_bytes(line: bytes, field_size: int) -> Optional[int]:
    """The length of a line (its `\\n` included) in the fixed-width layout; None for any other line.

    Args:
      line: a line as read from a file, with its line end.
      field_size: the `id:value` pairs the line must have.
    """
    id_digits = _fixed_id_digits(len(line), field_size)
    if id_digits is None:
        return None
    pattern = rb"[0-9](?: [0-9]{%d}:[0-9]\.[0-9]{%d}){%d}\n" % (id_digits, FIXED_DECIMALS, field_size)
    return len(line) if re.fullmatch(pattern, line) else None


def _fixed_id_digits(line_bytes: Optional[int], field_size: int) -> Optional[int]:
    """Digits per id of fixed-width lines of `line_bytes` bytes (`\\n` included); None if no layout fits."""
    if not line_bytes or field_size < 1 or line_bytes < 2 or (line_bytes - 2) % field_size:
        return None
    id_digits = (line_bytes - 2) // field_size - _FIXED_PAIR_EXTRA
    return id_digits if 1 <= id_digits <= _MAX_FIXED_ID_DIGITS else None


def decode_libsvm_rows(rows: tf.Tensor, field_size: int,
                       file_index: Optional[tf.Tensor] = None,
                       line_number: Optional[tf.Tensor] = None,
                       file_names: Optional[Sequence[str]] = None) -> Tuple[Features, tf.Tensor]:
    """Decodes a batch of fixed-width LibSVM lines given as bytes, one row per line.

    Args:
      rows: uint8 [B, W], each row a line of the fixed-width layout with
        its `\\n` (W is `fixed_width_line_bytes` of the lines; it must be
        known when the graph is built).
      field_size: `id:value` pairs every line must have.
      file_index: int32 [B], each row's index into `file_names`.
      line_number: int64 [B], each row's 1-based line number in its file.
      file_names: the files `file_index` refers to.

    Returns:
      `(features, labels)` as described in the module docstring.

    Raises:
      ValueError: W does not fit the layout for `field_size`.
      tf.errors.InvalidArgumentError: (when the graph runs) a row that is
        not a valid LibSVM line of W bytes; the message names the file and
        line.
    """
    rows = tf.convert_to_tensor(rows, tf.uint8)
    width = rows.shape[1]
    id_digits = _fixed_id_digits(width, field_size)
    if id_digits is None:
        raise ValueError("rows of %s bytes are not fixed-width LibSVM lines of %d pairs" % (width, field_size))
    valid, features, labels = _decode_fixed_bytes(rows, field_size, id_digits, newline=True)

    def general():
        lines = tf.strings.reduce_join(tf.gather(_BYTE_STRINGS, tf.cast(rows[:, :-1], tf.int32)), axis=1)
        misaligned = tf.logical_or(tf.not_equal(rows[:, -1], _NEWLINE),
                                   tf.reduce_any(tf.equal(rows[:, :-1], _NEWLINE), axis=1))
        return _decode_tokens(lines, field_size, file_index, line_number, file_names, skip_bad_records=False,
                              misaligned=misaligned, width=width)

    features, labels = tf.cond(valid, lambda: (features, labels), general)
    batch = rows.shape[0]
    features[schema.FEAT_IDS].set_shape([batch, field_size])
    features[schema.FEAT_VALS].set_shape([batch, field_size])
    labels.set_shape([batch])
    return features, labels


def _decode_fixed_width(lines: tf.Tensor, field_size: int, width: tf.Tensor,
                        id_digits: tf.Tensor) -> Tuple[tf.Tensor, Features, tf.Tensor]:
    """Decodes lines of one length in the fixed-width layout, by byte arithmetic.

    Returns:
      (valid, features, labels): see `_decode_fixed_bytes`.
    """
    return _decode_fixed_bytes(tf.io.decode_raw(lines, tf.uint8, fixed_length=width), field_size, id_digits)


def _decode_fixed_bytes(raw: tf.Tensor, field_size: int, id_digits: Union[int, tf.Tensor],
                        newline: bool = False) -> Tuple[tf.Tensor, Features, tf.Tensor]:
    """Decodes lines of the fixed-width layout given as bytes [B, W], by byte arithmetic.

    Each byte is XORed with its column's character: '0' in a digit column
    (a digit becomes 0 to 9, any other byte more than 9), the separator in a
    separator column (it becomes 0, any other byte more). One maximum over
    the whole matrix then checks the digits, and the separators come out
    as a fourth column of the one float32 matrix product that computes ids
    and values with per-column powers of ten: their sum is 0 exactly when
    each is. Every sum of the product is an integer below 2**24, so exact
    (ids of more than `_LOW_ID_DIGITS` digits come out as two such parts).

    Args:
      raw: uint8 [B, W]: the label digit, `field_size` pairs, then (with
        `newline`) the `\\n`.
      field_size: pairs per line.
      id_digits: digits per id.
      newline: whether the rows end with the line's `\\n`.

    Returns:
      (valid, features, labels): `valid` is false when any byte breaks the
      layout; the tensors are then meaningless.
    """
    batch = tf.shape(raw)[0]
    pair_bytes = _FIXED_PAIR_EXTRA + id_digits
    position = tf.range(pair_bytes)
    colon, dot = id_digits + 1, id_digits + 3
    pair_chars = _ZERO
    for column, char in ((0, _SPACE), (colon, _COLON), (dot, _DOT)):
        pair_chars = tf.where(tf.equal(position, column), char, pair_chars)
    line_chars = [tf.constant([_ZERO]), tf.tile(pair_chars, [field_size])]
    if newline:
        line_chars.append(tf.constant([_NEWLINE]))
    digits = tf.bitwise.bitwise_xor(raw, tf.cast(tf.concat(line_chars, 0), tf.uint8))
    pairs = tf.reshape(digits[:, 1:1 + field_size * pair_bytes], [-1, pair_bytes])
    # Column weights: the id's high and low digits, the value times 10**FIXED_DECIMALS, the separators.
    power = id_digits + 1 - position  # of ten of the id digit at `position`, plus one
    id_digit = tf.logical_and(position >= 1, position <= id_digits)
    low_id = tf.where(tf.logical_and(id_digit, power <= _LOW_ID_DIGITS), tf.pow(10, tf.maximum(power - 1, 0)), 0)
    high_id = tf.where(tf.logical_and(id_digit, power > _LOW_ID_DIGITS),
                       tf.pow(10, tf.maximum(power - 1 - _LOW_ID_DIGITS, 0)), 0)
    value_weight = tf.where(tf.equal(position, colon + 1), 10 ** FIXED_DECIMALS,
                            tf.where(position > dot, tf.pow(10, tf.maximum(dot + FIXED_DECIMALS - position, 0)), 0))
    separator_weight = tf.cast(tf.not_equal(pair_chars, _ZERO), tf.int32)
    # Integer powers of ten below 2**24, cast: exact in float32.
    weights = tf.cast(tf.stack([high_id, low_id, value_weight, separator_weight], axis=1), tf.float32)
    decoded = tf.reshape(tf.matmul(tf.cast(pairs, tf.float32), weights), [batch, field_size, 4])
    valid = tf.logical_and(tf.reduce_max(digits) <= 9, tf.reduce_max(decoded[:, :, 3]) <= 0.0)
    ids = (tf.cast(decoded[:, :, 0], tf.int64) * 10 ** _LOW_ID_DIGITS) + tf.cast(decoded[:, :, 1], tf.int64)
    # In float64 the quotient (even computed as a product with the reciprocal,
    # as graph optimizations may rewrite it) is within 3e-16 of the decimal,
    # while a decimal of 7 digits is at least 3e-14 (relative) from any point
    # halfway between float32 numbers: rounding to float32 gives the float32
    # nearest to the decimal, what `tf.strings.to_number` gives.
    values = tf.cast(tf.cast(decoded[:, :, 2], tf.float64) / float(10 ** FIXED_DECIMALS), tf.float32)
    labels = tf.cast(digits[:, 0], tf.float32)
    return valid, {schema.FEAT_IDS: ids, schema.FEAT_VALS: values}, labels


def _decode_tokens(lines: tf.Tensor, field_size: int, file_index: Optional[tf.Tensor],
                   line_number: Optional[tf.Tensor], file_names: Optional[Sequence[str]],
                   skip_bad_records: bool, misaligned: Optional[tf.Tensor] = None,
                   width: Optional[int] = None) -> Tuple[Features, tf.Tensor]:
    """The general LibSVM decode: grammar check, tokenizing, `to_number`.

    `misaligned` (bool [B]) marks lines cut out of a fixed-width file of
    `width`-byte lines that are not such a line (`decode_libsvm_rows`): they
    are bad whatever they hold.
    """
    well_formed = tf.strings.regex_full_match(lines, LIBSVM_LINE_PATTERN)
    tokens = tf.compat.v1.string_split(lines, sep=TOKEN_DELIMITERS, skip_empty=True,
                                       result_type="RaggedTensor")
    num_pairs = (tokens.row_lengths() - 1) // 2
    good = tf.logical_and(well_formed, tf.equal(num_pairs, field_size))
    if misaligned is not None:
        good = tf.logical_and(good, tf.logical_not(misaligned))
    all_good = tf.reduce_all(good)

    def report() -> tf.Tensor:
        """`file:line: bad LibSVM line (reason): text` of the first bad line."""
        first_bad = tf.argmin(tf.cast(good, tf.int32), output_type=tf.int32)
        reason = tf.where(
            well_formed[first_bad],
            tf.strings.join(["it has ", tf.strings.as_string(num_pairs[first_bad]),
                             " id:value pairs, field_size is %d" % field_size]),
            "it is not `label id:value ...` with a numeric label, integer ids and numeric values")
        if misaligned is not None and width is not None:
            reason = tf.where(
                misaligned[first_bad],
                "its file is read as fixed-width LibSVM (its first line is %d bytes long, and its size a multiple "
                "of that), but this line is not %d bytes long; skip_bad_records reads such files line by line"
                % (width, width), reason)
        where = _line_location(first_bad, file_index, line_number, file_names)
        return tf.strings.join([where, ": bad LibSVM line (", reason, "): ",
                                tf.strings.substr(lines[first_bad], 0, QUOTED_LINE_CHARS)])

    if skip_bad_records:
        num_bad = tf.reduce_sum(tf.cast(tf.logical_not(good), tf.int32))
        check = tf.cond(all_good, tf.no_op, lambda: _warn_skipped(num_bad, report()))
        flat_tokens = tf.boolean_mask(tokens.flat_values, tf.repeat(good, tokens.row_lengths()))
        batch = None
    else:
        check = tf.cond(all_good, tf.no_op, lambda: raise_error(tf.strings.join([
            report(), " (skip_bad_records drops such lines)"])))
        flat_tokens = tokens.flat_values
        batch = lines.shape[0]
    with tf.control_dependencies([check]):
        # Every line left has exactly `1 + 2 * field_size` tokens (`good`), so
        # the tokens reshape to rows without padding.
        dense = tf.reshape(flat_tokens, [-1 if batch is None else batch, 1 + 2 * field_size])
        labels = tf.strings.to_number(dense[:, 0], tf.float32)
        ids = tf.strings.to_number(dense[:, 1::2], tf.int64)
        values = tf.strings.to_number(dense[:, 2::2], tf.float32)
    return {schema.FEAT_IDS: ids, schema.FEAT_VALS: values}, labels


def check_libsvm_line(path: str, line: str, field_size: int) -> None:
    """Checks the first line of a LibSVM file in plain Python (no graph needed).

    Args:
      path: the file, named in errors.
      line: its first line, without the line end.
      field_size: the `id:value` pairs the line must have.

    Raises:
      ValueError: the line is not `label id:value ...` with `field_size`
        pairs; the message names the file and what is wrong.
    """
    if not re.fullmatch(LIBSVM_LINE_PATTERN, line):
        raise ValueError("%s:1: bad LibSVM line (not `label id:value ...` with numbers): %s"
                         % (path, line[:QUOTED_LINE_CHARS]))
    pairs = len(line.split()) - 1
    if pairs != field_size:
        raise ValueError("%s:1: the line has %d id:value pairs, field_size is %d" % (path, pairs, field_size))


def check_example(path: str, record: bytes, field_size: int) -> None:
    """Checks the first record of a TFRecord file in plain Python (no graph needed).

    Args:
      path: the file, named in errors.
      record: its first serialized record.
      field_size: the ids the record must have.

    Raises:
      ValueError: the record is not a `tf.train.Example` in the layout of
        `input_pipeline.schema` with `field_size` ids; the message names the
        file and what is wrong.
    """
    feature = _parse_example(path, record).features.feature
    for key, kind, length in ((schema.LABEL_KEY, "float_list", 1),
                              (schema.IDS_KEY, "int64_list", field_size),
                              (schema.VALUES_KEY, "float_list", field_size)):
        if key not in feature:
            raise ValueError("%s: the first record has no feature %r (it has %s)"
                             % (path, key, sorted(feature)))
        values = getattr(feature[key], kind).value
        if len(values) != length:
            packed = key == schema.LABEL_KEY and len(values) > 1
            raise ValueError("%s: feature %r of the first record holds %d %s values, expected %d "
                             "(field_size is %d)%s" % (path, key, len(values), kind, length, field_size,
                                                       "; records of several rows are read with --data_format "
                                                       "tfrecord_packed" if packed else ""))


def check_packed_example(path: str, record: bytes, field_size: int) -> int:
    """Checks the first record of a packed TFRecord file in plain Python; returns its rows.

    Raises:
      ValueError: the record is not a `tf.train.Example` holding `label`,
        and `field_size` `ids` and `values` per label
        (`encoders.encode_tfrecord_packed`); the message names the file and
        what is wrong.
    """
    feature = _parse_example(path, record).features.feature
    for key in (schema.LABEL_KEY, schema.IDS_KEY, schema.VALUES_KEY):
        if key not in feature:
            raise ValueError("%s: the first record has no feature %r (it has %s)" % (path, key, sorted(feature)))
    rows = len(feature[schema.LABEL_KEY].float_list.value)
    for key, kind in ((schema.IDS_KEY, "int64_list"), (schema.VALUES_KEY, "float_list")):
        count = len(getattr(feature[key], kind).value)
        if not rows or count != rows * field_size:
            raise ValueError("%s: the first record holds %d row(s) (labels) and %d %s values in %r, expected "
                             "%d (field_size is %d)" % (path, rows, count, kind, key, rows * field_size, field_size))
    return rows


def packed_example_rows(path: str, record: bytes, number: int) -> int:
    """The rows (labels) of record `number` (from 0) of the packed TFRecord file `path`.

    Raises:
      ValueError: the record is not a `tf.train.Example`, or has no `label`.
    """
    which = "record %d" % number
    feature = _parse_example(path, record, which).features.feature
    if schema.LABEL_KEY not in feature:
        raise ValueError("%s: %s has no feature %r: packed records carry their rows' labels"
                         % (path, which, schema.LABEL_KEY))
    return len(feature[schema.LABEL_KEY].float_list.value)


def example_has_label(path: str, record: bytes) -> bool:
    """Whether a serialized `tf.train.Example` (the first of `path`) has the `label` feature.

    Raises:
      ValueError: the record is not a `tf.train.Example`; the message names
        the file.
    """
    return schema.LABEL_KEY in _parse_example(path, record).features.feature


def _parse_example(path: str, record: bytes, which: str = "the first record") -> tf.train.Example:
    try:
        return tf.train.Example.FromString(record)
    except message.DecodeError as e:
        raise ValueError("%s: %s is not a tf.train.Example: %s" % (path, which, e)) from e


def raise_error(message: tf.Tensor) -> tf.Operation:
    """An op that, when run, fails with `tf.errors.InvalidArgumentError` carrying `message`.

    Args:
      message: scalar string, built in the graph (it may name files and
        lines).
    """
    failed = tf.debugging.Assert(False, [message])
    with tf.control_dependencies([failed]):
        return tf.no_op()


_BYTE_STRINGS = tuple(bytes([b]) for b in range(256))


def _line_location(row, file_index, line_number, file_names) -> tf.Tensor:
    if file_index is None or line_number is None or not file_names:
        return tf.strings.join(["row ", tf.strings.as_string(row), " of the batch"])
    name = tf.gather(tf.constant(list(file_names)), file_index[row])
    return tf.strings.join([name, ":", tf.strings.as_string(line_number[row])])


def _warn_skipped(num_bad: tf.Tensor, report: tf.Tensor) -> tf.Operation:
    # A single string tensor prints without quotes.
    printed = tf.print(tf.strings.join([
        "WARNING: skipped ", tf.strings.as_string(num_bad), " bad LibSVM line(s) of a batch; the first: ",
        report]), output_stream=sys.stderr)
    with tf.control_dependencies([printed]):
        return tf.no_op()
