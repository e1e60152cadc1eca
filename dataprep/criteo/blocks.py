"""The inputs as byte ranges, and a range's lines as blocks parsed with numpy.

The inputs are cut into byte ranges (`plan_chunks`; a line belongs to the
range its first byte is in), which both passes of the converter share out
among the workers. A range is read a block of whole lines at a time
(`read_blocks`) and `parse_block` finds the field boundaries, digits and
keys of every line as byte arithmetic; the only per-line Python work is the
line's CRC-32 (`line_crcs`, which decides its split) and, with negative
sampling, a hash of each train negative (`kept_rows`).
"""

import dataclasses
import hashlib
import os
import re
import zlib
from typing import Iterator, List, Sequence, Tuple

import numpy as np

from dataprep import vocab as vocab_lib
from dataprep.criteo.records import MAX_INTEGER_DIGITS, NUM_COLUMNS, SHOWN_LINE_CHARS, parse_line
from input_pipeline import schema

# Bytes parsed at once by numpy: bounds the per-block temporaries (about
# 30 times the block) while keeping numpy calls long.
BLOCK_BYTES = 1 << 20
# The range of a line's CRC-32: a line goes to validation when its CRC-32 is below val_fraction * this.
HASH_RANGE = 2**32
_TAB, _NEWLINE, _MINUS, _ZERO, _NINE = 9, 10, ord("-"), ord("0"), ord("9")
_FIRST_NON_ASCII = 128
_TRAILING_CR = re.compile(rb"\r+(?=\n|\Z)")
_SAMPLE_PERSON = b"criteo-negative"
_SAMPLE_BITS = 64


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A byte range of an input file: the lines whose first byte lies in [start, end)."""

    index: int
    path: str
    start: int
    end: int


def plan_chunks(inputs: Sequence[str], chunk_bytes: int) -> List[Chunk]:
    """Cuts the inputs into byte ranges of about `chunk_bytes`, in input order."""
    chunks: List[Chunk] = []
    for path in inputs:
        size = os.path.getsize(path)
        count = max(1, -(-size // chunk_bytes))
        bounds = [size * i // count for i in range(count + 1)]
        for start, end in zip(bounds[:-1], bounds[1:]):
            chunks.append(Chunk(len(chunks), path, start, end))
    return chunks


def read_blocks(chunk: Chunk) -> Iterator[bytes]:
    """The chunk's lines in blocks of about `BLOCK_BYTES`, each block whole lines ending in `\\n`.

    Trailing carriage returns are removed from each line, and a last line
    without a line break gets one.
    """
    with open(chunk.path, "rb") as f:
        position = chunk.start
        if position > 0:
            f.seek(position - 1)
            position += len(f.readline()) - 1  # the rest of the line the previous range owns
        while position < chunk.end:
            data = f.read(min(BLOCK_BYTES, chunk.end - position))
            if not data:
                return
            position += len(data)
            if not data.endswith(b"\n"):
                tail = f.readline()
                position += len(tail)
                data += tail
                if not data.endswith(b"\n"):
                    data += b"\n"
            if b"\r" in data:
                data = _TRAILING_CR.sub(b"", data)
            yield data


@dataclasses.dataclass
class Block:
    """A block of lines parsed with numpy.

    Attributes:
      lines: the lines (without line breaks).
      rows: indices into `lines` of the good lines.
      labels: float64 [m] of the good lines.
      dense: int64 [m, 13] raw integer fields (0 where missing).
      keys: bytes keys [m, 26] of the categorical fields.
      bad: (index into `lines`, reason) of each bad line.
    """

    lines: List[bytes]
    rows: np.ndarray
    labels: np.ndarray
    dense: np.ndarray
    keys: np.ndarray
    bad: List[Tuple[int, str]]


_DENSE_WINDOW = MAX_INTEGER_DIGITS + 1  # a sign and the digits


def _bad_reason(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return "not UTF-8 text: %s" % e
    try:
        parse_line(text)
    except ValueError as e:
        return str(e)
    raise RuntimeError("a line the block parser rejected parses as a valid record: %r"
                       % raw[:SHOWN_LINE_CHARS])


def parse_block(data: bytes) -> Block:
    """Parses whole lines (each ending in `\\n`) with numpy; see `Block`."""
    arr = np.frombuffer(data, dtype=np.uint8)
    lines = data.split(b"\n")[:-1]
    is_newline = arr == _NEWLINE
    newlines = np.flatnonzero(is_newline)
    line_starts = np.concatenate([[0], newlines[:-1] + 1])
    separators = np.flatnonzero(is_newline | (arr == _TAB))
    newline_at = np.flatnonzero(is_newline[separators])
    fields_per_line = np.diff(newline_at, prepend=-1)
    candidates = np.flatnonzero(fields_per_line == NUM_COLUMNS)
    ends = separators[newline_at[candidates, None] + np.arange(1 - NUM_COLUMNS, 1)]
    starts = np.empty_like(ends)
    starts[:, 0] = line_starts[candidates]
    starts[:, 1:] = ends[:, :-1] + 1
    lengths = ends - starts
    cat = slice(1 + schema.NUM_DENSE_FIELDS, NUM_COLUMNS)
    key_width = vocab_lib.key_dtype(int(lengths[:, cat].max()) if candidates.size else 0).itemsize
    padded = np.concatenate([arr, np.zeros(max(key_width, _DENSE_WINDOW), np.uint8)])

    label_byte = arr[starts[:, 0]]
    good = (lengths[:, 0] == 1) & ((label_byte == _ZERO) | (label_byte == _ZERO + 1))

    dense_lengths = lengths[:, 1:cat.start]
    dense_starts = starts[:, 1:cat.start]
    negative = (padded[dense_starts] == _MINUS) & (dense_lengths > 0)
    good &= np.all((dense_lengths - negative <= MAX_INTEGER_DIGITS) & ~(negative & (dense_lengths == 1)), axis=1)
    magnitude = np.zeros(dense_lengths.shape, dtype=np.int64)
    longest = min(int(dense_lengths.max()) if dense_lengths.size else 0, _DENSE_WINDOW)
    for k in range(longest):  # Horner's rule, one character column at a time
        digit = padded[dense_starts + k].astype(np.int64) - _ZERO
        active = (k >= negative) & (k < dense_lengths)
        good &= np.all(((digit >= 0) & (digit <= 9)) | ~active, axis=1)
        magnitude = np.where(active, magnitude * 10 + digit, magnitude)
    dense = np.where(negative, -magnitude, magnitude)

    non_ascii = np.flatnonzero(arr >= _FIRST_NON_ASCII)
    for line in np.unique(np.searchsorted(newlines, non_ascii)):
        position = np.searchsorted(candidates, line)
        if position < candidates.size and candidates[position] == line:
            try:
                lines[line].decode("utf-8")
            except UnicodeDecodeError:
                good[position] = False

    cat_lengths = lengths[:, cat]
    window = np.lib.stride_tricks.sliding_window_view(padded, key_width)[starts[:, cat]]
    window = np.where(np.arange(key_width) < cat_lengths[..., None], window, 0).astype(np.uint8)
    keys = np.ascontiguousarray(window).view("S%d" % key_width).reshape(candidates.size, schema.NUM_CATEGORICAL_FIELDS)

    good_mask = np.zeros(len(lines), dtype=bool)
    good_mask[candidates[good]] = True
    bad = [(int(i), _bad_reason(lines[i])) for i in np.flatnonzero(~good_mask)]
    return Block(lines=lines, rows=candidates[good], labels=(label_byte[good] - _ZERO).astype(np.float64),
                  dense=dense[good], keys=keys[good], bad=bad)


def line_crcs(block: Block) -> np.ndarray:
    return np.fromiter((zlib.crc32(block.lines[i]) for i in block.rows), dtype=np.int64, count=block.rows.size)


def kept_rows(block: Block, train: np.ndarray, negative_sampling: float) -> np.ndarray:
    """Which good rows survive negative sampling (train rows labelled 0, by a hash of the line)."""
    keep = np.ones(block.rows.size, dtype=bool)
    if negative_sampling >= 1.0:
        return keep
    limit = int(negative_sampling * 2**_SAMPLE_BITS)
    for i in np.flatnonzero(train & (block.labels == 0)):
        digest = hashlib.blake2b(block.lines[block.rows[i]], digest_size=_SAMPLE_BITS // 8, person=_SAMPLE_PERSON)
        keep[i] = int.from_bytes(digest.digest(), "little") < limit
    return keep
