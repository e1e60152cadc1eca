"""A line of a Criteo click log: its fields, how it parses, and the features it becomes.

Input lines are the Kaggle Display Advertising Challenge / Criteo log format:
40 tab-separated fields, `label I1..I13 C1..C26`, an empty field meaning
"missing". The features are those of the classic tf.estimator DeepFM and
Amazon SageMaker DeepFM samples:

* Ids 1..13 are I1..I13. The value is `clip(raw, 0, clip_i) / clip_i`, with
  `DENSE_CLIP` (each field's 95% quantile in the Kaggle data). A missing
  field has value 0. Negative raw values (I2 holds a few) are clipped to 0
  as well, so every value lies in [0, 1] and a negative count reads as 0.
  An integer field has at most `MAX_INTEGER_DIGITS` digits.
* C1..C26 follow, each field owning a block of ids (`dataprep.criteo.vocabulary`).
  Every categorical value is 1.0.

A model trained on data whose train negatives were kept with probability
RATE predicts p' = p / (p + (1 - p) * RATE) for a true click probability p;
`recalibrate` inverts it, `recorded_negative_sampling` reads RATE back from
a dataset's metadata.
"""

import dataclasses
import os
import re
from typing import List, Optional, Sequence

import numpy as np

from input_pipeline import schema

DENSE_CLIP = (20, 600, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50)
DENSE_NAMES = tuple("I%d" % (i + 1) for i in range(schema.NUM_DENSE_FIELDS))
CATEGORICAL_NAMES = tuple("C%d" % (i + 1) for i in range(schema.NUM_CATEGORICAL_FIELDS))
NUM_COLUMNS = 1 + schema.NUM_DENSE_FIELDS + schema.NUM_CATEGORICAL_FIELDS
FIRST_CATEGORICAL_ID = schema.FIRST_DENSE_ID + schema.NUM_DENSE_FIELDS
CATEGORICAL_VALUE = 1.0
LABELS = {"0": 0.0, "1": 1.0}
MAX_INTEGER_DIGITS = 18
# The splits a row goes to, in the order the converter writes them.
SPLITS = (schema.TRAIN_SPLIT, schema.VALIDATION_SPLIT)
# Of a bad line, at most this many characters are shown in an error.
SHOWN_LINE_CHARS = 120
_INTEGER = re.compile(r"-?[0-9]+\Z")
_NEGATIVE_SAMPLING_SOURCE = re.compile(r"negative_sampling=([0-9.eE+-]+)")


class MalformedRecordError(ValueError):
    """A line of a Criteo file is not a valid record.

    Attributes:
      path: the file.
      line_number: 1-based line number.
      reason: what is wrong with the line.
    """

    def __init__(self, path: str, line_number: int, reason: str):
        super().__init__("%s:%d: %s (pass --skip_bad_records to skip such lines)" % (path, line_number, reason))
        self.path = path
        self.line_number = line_number
        self.reason = reason


@dataclasses.dataclass
class Record:
    """One parsed line.

    Attributes:
      label: 0.0 or 1.0.
      dense: I1..I13, None where missing.
      categorical: C1..C26 as written (empty string where missing).
    """

    label: float
    dense: List[Optional[int]]
    categorical: List[str]


def parse_line(text: str) -> Record:
    """Parses one line (without its line break) in plain Python.

    The converter parses blocks of lines with numpy and uses this to say
    what is wrong with a line numpy rejected; both accept the same lines.

    Raises:
      ValueError: the line is malformed; the message says how.
    """
    fields = text.split("\t")
    if len(fields) != NUM_COLUMNS:
        raise ValueError("expected %d tab-separated fields, got %d" % (NUM_COLUMNS, len(fields)))
    label = LABELS.get(fields[0])
    if label is None:
        raise ValueError("label must be 0 or 1, got %r" % fields[0][:SHOWN_LINE_CHARS])
    dense: List[Optional[int]] = []
    for name, raw in zip(DENSE_NAMES, fields[1:1 + schema.NUM_DENSE_FIELDS]):
        if not raw:
            dense.append(None)
        elif not _INTEGER.match(raw):
            raise ValueError("%s must be an integer or empty, got %r" % (name, raw[:SHOWN_LINE_CHARS]))
        elif len(raw.lstrip("-")) > MAX_INTEGER_DIGITS:
            raise ValueError("%s has more than %d digits: %r" % (name, MAX_INTEGER_DIGITS, raw[:SHOWN_LINE_CHARS]))
        else:
            dense.append(int(raw))
    return Record(label, dense, fields[1 + schema.NUM_DENSE_FIELDS:])


def recalibrate(probability, negative_sampling: float):
    """Maps a prediction of a model trained with negative sampling back to a click probability.

    A model trained on data whose negatives were kept with probability `r`
    predicts p' = p / (p + (1 - p) * r) for a true probability p; this is the
    inverse, p = r * p' / (1 - p' + r * p').

    Args:
      probability: predicted probability (a float or numpy array).
      negative_sampling: the rate the train split was written with.
    """
    probability = np.asarray(probability, dtype=np.float64)
    return negative_sampling * probability / (1.0 - probability + negative_sampling * probability)


def recorded_negative_sampling(metadata: schema.DatasetMetadata) -> float:
    """The negative-sampling rate a dataset was converted with (1.0: none)."""
    match = _NEGATIVE_SAMPLING_SOURCE.search(metadata.source)
    return float(match.group(1)) if match else 1.0


def check_inputs(inputs: Sequence[str]) -> None:
    """Checks that there is at least one input and every one is a non-empty file.

    Raises:
      FileNotFoundError: an input does not exist or is not a file.
      ValueError: no inputs, or an input is empty.
    """
    if not inputs:
        raise ValueError("no input files given (--input)")
    for path in inputs:
        if not os.path.isfile(path):
            raise FileNotFoundError("--input %r: no such file" % path)
        if os.path.getsize(path) == 0:
            raise ValueError("--input %r is empty" % path)
