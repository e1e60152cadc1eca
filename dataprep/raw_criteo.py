"""Generates raw Criteo-shaped TSV (the converter's input) with a chosen number of distinct values.

Each line is `label I1..I13 C1..C26`, tab-separated, as in the Criteo logs:
labels 1 with probability `POSITIVE_RATE`; integer fields geometric-like
counts, missing with probability `MISSING_RATE`; categorical values 8 hex
digits, missing with probability `MISSING_RATE`.

The categorical fields come in two kinds, so that the number of distinct
values is set by `distinct` while the vocabulary (values frequent enough to
be kept) stays realistic:

* The last `ceil(distinct / rows)` fields are near-unique: row i takes value
  number `i % u` of the field (u = its share of `distinct`), so each of its
  u values occurs about rows / u times, below a usual frequency cutoff when
  u is near `rows`. These stand for the ids and timestamps-like fields that
  make the real data's vocabulary huge.
* The other fields draw from small Zipf-distributed vocabularies.

Usage::

    python -m dataprep.raw_criteo --rows 2000000 --distinct 8000000 --output data/criteo_raw/criteo.tsv
"""

import dataclasses
import os
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
from absl import flags

from cli import config_flags, entry
from input_pipeline import schema

PROGRAM = "dataprep.raw_criteo"

POSITIVE_RATE = 0.25
MISSING_RATE = 0.1
ZIPF_EXPONENT = 1.3
# Vocabulary sizes of the fields that are not near-unique, cycled over the fields.
SMALL_VOCAB_SIZES = (4, 30, 300, 3000, 30000)
HEX_DIGITS = 8
DENSE_SCALE = (3, 100, 20, 8, 5000, 100, 10, 15, 100, 1, 2, 1, 10)
BLOCK_ROWS = 65536
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_TAB, _NEWLINE, _ZERO = ord("\t"), ord("\n"), ord("0")
_MAX_DENSE_DIGITS = 9


@dataclasses.dataclass(frozen=True)
class RawSpec:
    """What to generate.

    Attributes:
      rows: lines.
      distinct: distinct values of the near-unique fields together (the
        small fields add a few thousand more).
      seed: random seed.
    """

    rows: int = dataclasses.field(metadata=config_flags.metadata("Lines to write."))
    distinct: int = config_flags.field(0, "Distinct values of the near-unique categorical fields together.")
    seed: int = config_flags.field(0, "Random seed.")

    def unique_sizes(self) -> List[int]:
        """Distinct values of each near-unique field (the last fields)."""
        if self.distinct <= 0:
            return []
        fields = min(schema.NUM_CATEGORICAL_FIELDS, -(-self.distinct // self.rows))
        return [self.distinct // fields + (1 if i < self.distinct % fields else 0) for i in range(fields)]


def _hex(values: np.ndarray) -> np.ndarray:
    """uint8 [n, 8]: the values (< 2**32) as 8 lowercase hex digits."""
    shifts = np.arange(HEX_DIGITS - 1, -1, -1, dtype=np.uint64) * 4
    return _HEX[(values.astype(np.uint64)[:, None] >> shifts) & np.uint64(15)]


def _mix(values: np.ndarray, salt: int) -> np.ndarray:
    """A 32-bit hash of each value (distinct values of one salt stay distinct: a bijection)."""
    z = (values.astype(np.uint64) + np.uint64(salt * 0x9E3779B9)) & np.uint64(0xFFFFFFFF)
    for multiplier in (0x7FEB352D, 0x846CA68B):
        z ^= z >> np.uint64(16)
        z = (z * np.uint64(multiplier)) & np.uint64(0xFFFFFFFF)
    return z ^ (z >> np.uint64(16))


def _digits(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Right-aligned decimal digits of non-negative ints, uint8 [n, 9], and the mask of used columns."""
    count = np.ones(values.shape, dtype=np.int64)
    for k in range(1, _MAX_DENSE_DIGITS):
        count += values >= 10**k
    columns = np.arange(_MAX_DENSE_DIGITS)
    chars = (_ZERO + (values[:, None] // 10 ** (_MAX_DENSE_DIGITS - 1 - columns)) % 10).astype(np.uint8)
    return chars, columns >= _MAX_DENSE_DIGITS - count[:, None]


def block_text(spec: RawSpec, first_row: int, count: int) -> bytes:
    """The TSV text of rows [first_row, first_row + count)."""
    rng = np.random.default_rng([spec.seed, first_row])
    index = np.arange(first_row, first_row + count)
    segments: List[Tuple[np.ndarray, np.ndarray]] = []
    labels = (rng.random(count) < POSITIVE_RATE).astype(np.uint8) + _ZERO
    segments.append((labels[:, None], np.ones((count, 1), bool)))
    tab = (np.full((count, 1), _TAB, np.uint8), np.ones((count, 1), bool))
    for scale in DENSE_SCALE:
        values = rng.geometric(1.0 / (scale + 1), count) - 1
        chars, mask = _digits(np.minimum(values, 10**_MAX_DENSE_DIGITS - 1))
        mask &= (rng.random(count) >= MISSING_RATE)[:, None]
        segments += [tab, (chars, mask)]
    unique = spec.unique_sizes()
    small = schema.NUM_CATEGORICAL_FIELDS - len(unique)
    for f in range(schema.NUM_CATEGORICAL_FIELDS):
        if f < small:
            size = SMALL_VOCAB_SIZES[f % len(SMALL_VOCAB_SIZES)]
            number = (rng.zipf(ZIPF_EXPONENT, count) - 1) % size
        else:
            number = index % unique[f - small]
        chars = _hex(_mix(number, f + 1))
        present = (rng.random(count) >= MISSING_RATE)[:, None]
        segments += [tab, (chars, np.broadcast_to(present, chars.shape))]
    segments.append((np.full((count, 1), _NEWLINE, np.uint8), np.ones((count, 1), bool)))
    chars = np.concatenate([c for c, _ in segments], axis=1)
    mask = np.concatenate([m for _, m in segments], axis=1)
    return chars[mask].tobytes()


def blocks(spec: RawSpec) -> Iterator[bytes]:
    """The whole file's text, `BLOCK_ROWS` rows at a time."""
    for first in range(0, spec.rows, BLOCK_ROWS):
        yield block_text(spec, first, min(BLOCK_ROWS, spec.rows - first))


def write(spec: RawSpec, path: str) -> int:
    """Writes the TSV file; returns its size in bytes."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for text in blocks(spec):
            f.write(text)
    os.replace(tmp, path)
    return os.path.getsize(path)


@dataclasses.dataclass(frozen=True)
class RawOutput:
    """Where the command line writes (beside `RawSpec`'s flags)."""

    output: Optional[str] = dataclasses.field(metadata=config_flags.metadata("TSV file to write."))


def define_flags() -> None:
    """Defines the command-line flags of this tool (`RawSpec`'s and `RawOutput`'s fields)."""
    config_flags.define_flags([RawSpec, RawOutput])
    flags.mark_flags_as_required(["rows", "output"])


def main(argv: Sequence[str]) -> None:
    """Writes the file named by the flags."""
    del argv
    spec = RawSpec(**config_flags.values(RawSpec, flags.FLAGS))
    output = RawOutput(**config_flags.values(RawOutput, flags.FLAGS)).output
    assert output is not None
    if spec.rows < 1 or spec.distinct < 0:
        raise SystemExit("error: --rows must be >= 1 and --distinct >= 0, got %d and %d" % (spec.rows, spec.distinct))
    size = write(spec, output)
    print("wrote %s: %d rows, %.1f MB" % (output, spec.rows, size / 1e6))


def run() -> None:
    """Console entry point."""
    entry.run(main, PROGRAM, define_flags, entry.NO_TENSORFLOW)


if __name__ == "__main__":
    run()
