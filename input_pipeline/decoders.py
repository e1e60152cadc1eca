"""Vectorized decoders: one call turns a whole batch of records into tensors.

Both decoders return `(features, labels)`:
`features = {schema.FEAT_IDS: int64 [B, field_size],
schema.FEAT_VALS: float32 [B, field_size]}`, `labels` float32 [B].

* TFRecord: `tf.io.parse_example` over the batch of serialized
  `tf.train.Example`s (fixed-length `label`, `ids`, `values`).
* LibSVM: the whole batch of lines is checked against the line grammar with
  one `tf.strings.regex_full_match`, split at whitespace and `:` in one pass
  (`tf.compat.v1.string_split` with a set of delimiter characters) and
  converted with `tf.strings.to_number`: no Python and no per-line op.
  The tokens of the good lines are reshaped into rows (every good line has
  the same number of tokens), which costs about a tenth of the decode less
  than padding them with `RaggedTensor.to_tensor`.
  Splitting at the character set costs about a quarter of replacing `:` by a
  space with a regex and then splitting at whitespace, which made the
  decode almost twice as slow (`benchmarks/input_pipeline.py`); for the
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

Fixed-width LibSVM (`writers.encode_libsvm_fixed`, what `input_pipeline.criteo`
writes by default): when every line of a batch has the same length and the
layout (`label` digit, then per pair ` `, the id's digits, `:`, `D.DDDDDD`),
the batch is decoded as a byte matrix (`tf.io.decode_raw`): ids and values
come from digit arithmetic, with no tokenizing and no per-token string
tensors. Any other batch (or one that breaks the layout anywhere) takes the
general path above, so errors and `skip_bad_records` behave the same. Both
paths give bit-identical tensors.

`check_libsvm_line` and `check_example` check one record in plain Python,
so that a wrong `field_size` or format is reported before a graph is built
(`input_pipeline.formats.DataFormat.check_first_record` reads the record and
calls the one of its format).
"""

import re
import sys
from typing import Dict, Optional, Sequence, Tuple

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
# The fixed-width layout (`writers.encode_libsvm_fixed`): per pair a space,
# the id, `:`, one integer digit, `.` and `FIXED_DECIMALS` decimals.
FIXED_DECIMALS = 6
_FIXED_PAIR_EXTRA = 4 + FIXED_DECIMALS  # every byte of a pair but the id's digits
_MAX_FIXED_ID_DIGITS = 9  # int32 holds such ids exactly
_SPACE, _COLON, _DOT, _ZERO = (ord(c) for c in " :.0")

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


def _decode_fixed_width(lines: tf.Tensor, field_size: int, width: tf.Tensor,
                        id_digits: tf.Tensor) -> Tuple[tf.Tensor, Features, tf.Tensor]:
    """Decodes lines of one length in the fixed-width layout, by byte arithmetic.

    The lines become a uint8 matrix, one row per `id:value` pair, and '0' is
    subtracted (uint8 arithmetic wraps, so any byte but a digit becomes
    more than 9). The layout check is one maximum over the matrix, after
    shifting each separator column onto 0, plus an exact look at the three
    separator columns; ids and values are one int32 matrix product with
    per-column powers of ten (exact: ids have at most 9 digits, and scaled
    values at most 7).

    Returns:
      (valid, features, labels): `valid` is false when any byte breaks the
      layout; the tensors are then meaningless.
    """
    raw = tf.io.decode_raw(lines, tf.uint8, fixed_length=width)
    batch = tf.shape(raw)[0]
    pair_bytes = _FIXED_PAIR_EXTRA + id_digits
    pairs = tf.reshape(raw[:, 1:], [-1, pair_bytes])
    digits = pairs - tf.constant(_ZERO, tf.uint8)
    position = tf.range(pair_bytes)
    colon, dot = id_digits + 1, id_digits + 3
    separator_chars = tf.constant([_SPACE, _COLON, _DOT])
    separator_columns = tf.stack([0, colon, dot])
    shift = tf.scatter_nd(separator_columns[:, None], (_ZERO - separator_chars) % 256, [pair_bytes])
    label_digits = raw[:, 0] - tf.constant(_ZERO, tf.uint8)
    valid = tf.reduce_all(tf.stack([
        tf.reduce_max(digits + tf.cast(shift, tf.uint8)) <= 9,
        tf.reduce_all(tf.equal(tf.gather(pairs, separator_columns, axis=1),
                               tf.cast(separator_chars, tf.uint8)[None, :])),
        tf.reduce_max(label_digits) <= 9]))
    # Column weights: the id in column 0, the value times 10**FIXED_DECIMALS in column 1.
    id_weight = tf.where(tf.logical_and(position >= 1, position <= id_digits),
                         tf.pow(10, tf.maximum(id_digits - position, 0)), 0)
    value_weight = tf.where(tf.equal(position, colon + 1), 10 ** FIXED_DECIMALS,
                            tf.where(position > dot, tf.pow(10, tf.maximum(dot + FIXED_DECIMALS - position, 0)), 0))
    weights = tf.stack([id_weight, value_weight], axis=1)
    decoded = tf.reshape(tf.matmul(tf.cast(digits, tf.int32), weights), [batch, field_size, 2])
    ids = tf.cast(decoded[:, :, 0], tf.int64)
    # In float64 the quotient (even computed as a product with the reciprocal,
    # as graph optimizations may rewrite it) is within 3e-16 of the decimal,
    # while a decimal of 7 digits is at least 3e-14 (relative) from any point
    # halfway between float32 numbers: rounding to float32 gives the float32
    # nearest to the decimal, what `tf.strings.to_number` gives.
    values = tf.cast(tf.cast(decoded[:, :, 1], tf.float64) / float(10 ** FIXED_DECIMALS), tf.float32)
    labels = tf.cast(label_digits, tf.float32)
    return valid, {schema.FEAT_IDS: ids, schema.FEAT_VALS: values}, labels


def _decode_tokens(lines: tf.Tensor, field_size: int, file_index: Optional[tf.Tensor],
                   line_number: Optional[tf.Tensor], file_names: Optional[Sequence[str]],
                   skip_bad_records: bool) -> Tuple[Features, tf.Tensor]:
    """The general LibSVM decode: grammar check, tokenizing, `to_number`."""
    well_formed = tf.strings.regex_full_match(lines, LIBSVM_LINE_PATTERN)
    tokens = tf.compat.v1.string_split(lines, sep=TOKEN_DELIMITERS, skip_empty=True,
                                       result_type="RaggedTensor")
    num_pairs = (tokens.row_lengths() - 1) // 2
    good = tf.logical_and(well_formed, tf.equal(num_pairs, field_size))
    all_good = tf.reduce_all(good)

    def report() -> tf.Tensor:
        """`file:line: bad LibSVM line (reason): text` of the first bad line."""
        first_bad = tf.argmin(tf.cast(good, tf.int32), output_type=tf.int32)
        reason = tf.where(
            well_formed[first_bad],
            tf.strings.join(["it has ", tf.strings.as_string(num_pairs[first_bad]),
                             " id:value pairs, field_size is %d" % field_size]),
            "it is not `label id:value ...` with a numeric label, integer ids and numeric values")
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
            raise ValueError("%s: feature %r of the first record holds %d %s values, expected %d "
                             "(field_size is %d)" % (path, key, len(values), kind, length, field_size))


def example_has_label(path: str, record: bytes) -> bool:
    """Whether a serialized `tf.train.Example` (the first of `path`) has the `label` feature.

    Raises:
      ValueError: the record is not a `tf.train.Example`; the message names
        the file.
    """
    return schema.LABEL_KEY in _parse_example(path, record).features.feature


def _parse_example(path: str, record: bytes) -> tf.train.Example:
    try:
        return tf.train.Example.FromString(record)
    except message.DecodeError as e:
        raise ValueError("%s: the first record is not a tf.train.Example: %s" % (path, e)) from e


def raise_error(message: tf.Tensor) -> tf.Operation:
    """An op that, when run, fails with `tf.errors.InvalidArgumentError` carrying `message`.

    Args:
      message: scalar string, built in the graph (it may name files and
        lines).
    """
    failed = tf.debugging.Assert(False, [message])
    with tf.control_dependencies([failed]):
        return tf.no_op()


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
