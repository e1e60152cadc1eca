"""TFRecord framing with numpy: many records framed at once, no TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64 length            (little-endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

`frame_records` frames a whole batch of records in a few numpy passes:
CRC-32C (Castagnoli) is computed for every record at once, four bytes per
step with four lookup tables ("slicing by 4"). The bytes equal what
`tf.io.TFRecordWriter` writes, so the data tools can write TFRecord files
without importing TensorFlow (whose import alone takes about half a GB of
resident memory per process).
"""

from typing import Tuple

import numpy as np

CRC32C_POLYNOMIAL = 0x82F63B78  # reflected Castagnoli polynomial
_CRC_INIT = 0xFFFFFFFF
_MASK_DELTA = 0xA282EAD8
_MASK_ROTATION = 15
LENGTH_BYTES = 8
CRC_BYTES = 4
FRAMING_BYTES = LENGTH_BYTES + 2 * CRC_BYTES
_WORD_BYTES = 4
_BYTE_BITS = 8
_BYTE_MASK = 0xFF


def _tables() -> np.ndarray:
    """The four slicing-by-4 lookup tables, uint32 [4, 256]."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(_BYTE_BITS):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(CRC32C_POLYNOMIAL), table >> 1).astype(np.uint32)
    tables = [table]
    for _ in range(_WORD_BYTES - 1):
        previous = tables[-1]
        tables.append((previous >> 8) ^ table[previous & _BYTE_MASK])
    return np.stack(tables)


_TABLES = _tables()


def crc32c(data: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC-32C of each row of a padded byte matrix.

    Args:
      data: uint8 [n, w]; row i holds its record in its first `lengths[i]`
        bytes (the rest is ignored).
      lengths: int [n], each <= w.

    Returns:
      uint32 [n], the CRC-32C of each record.
    """
    n = data.shape[0]
    crc = np.full(n, _CRC_INIT, dtype=np.uint32)
    lengths = np.asarray(lengths, dtype=np.int64)
    if not n:
        return crc
    full_words = lengths // _WORD_BYTES
    max_words = int(full_words.max())
    t0, t1, t2, t3 = _TABLES
    if max_words:
        words = np.ascontiguousarray(data[:, :max_words * _WORD_BYTES]).view("<u4").astype(np.uint32)
        for w in range(max_words):
            mixed = crc ^ words[:, w]
            stepped = (t3[mixed & _BYTE_MASK] ^ t2[(mixed >> 8) & _BYTE_MASK]
                       ^ t1[(mixed >> 16) & _BYTE_MASK] ^ t0[mixed >> 24])
            crc = np.where(w < full_words, stepped, crc)
    rows = np.arange(n)
    for t in range(_WORD_BYTES - 1):
        position = full_words * _WORD_BYTES + t
        active = position < lengths
        byte = data[rows, np.minimum(position, data.shape[1] - 1)].astype(np.uint32)
        stepped = t0[(crc ^ byte) & _BYTE_MASK] ^ (crc >> 8)
        crc = np.where(active, stepped, crc)
    return crc ^ np.uint32(_CRC_INIT)


def masked_crc32c(data: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The TFRecord checksum: CRC-32C rotated right by 15 bits plus a constant."""
    crc = crc32c(data, lengths).astype(np.uint64)
    rotated = ((crc >> np.uint64(_MASK_ROTATION)) | (crc << np.uint64(32 - _MASK_ROTATION))) & np.uint64(0xFFFFFFFF)
    return ((rotated + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _padded(data: np.ndarray, offsets: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Rows `data[offsets[i]:offsets[i] + w]` (w the longest record), as one matrix.

    A row's bytes past its record's length are the next record's (or zeros):
    `crc32c` ignores them.
    """
    lengths = np.diff(offsets)
    width = max(int(lengths.max()), 1)
    padded = np.concatenate([data, np.zeros(width, np.uint8)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)
    return windows[offsets[:-1]], lengths


def frame_records(buffer: bytes, offsets: np.ndarray) -> bytes:
    """Frames records laid out back to back as TFRecord file content.

    Args:
      buffer: the records' bytes, back to back.
      offsets: int [n + 1]; record i is `buffer[offsets[i]:offsets[i + 1]]`.

    Returns:
      The n framed records, ready to be appended to a TFRecord file.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.size - 1
    if n <= 0:
        return b""
    data = np.frombuffer(buffer, dtype=np.uint8)[offsets[0]:offsets[-1]]
    offsets = offsets - offsets[0]
    matrix, lengths = _padded(data, offsets)
    width = matrix.shape[1]
    header = np.empty((n, LENGTH_BYTES + CRC_BYTES), dtype=np.uint8)
    header[:, :LENGTH_BYTES] = lengths.astype("<u8").view(np.uint8).reshape(n, LENGTH_BYTES)
    header[:, LENGTH_BYTES:] = masked_crc32c(header[:, :LENGTH_BYTES], np.full(n, LENGTH_BYTES)).astype(
        "<u4").view(np.uint8).reshape(n, CRC_BYTES)
    footer = masked_crc32c(matrix, lengths).astype("<u4").view(np.uint8).reshape(n, CRC_BYTES)
    chars = np.concatenate([header, matrix, footer], axis=1)
    keep = np.ones(chars.shape, dtype=bool)
    keep[:, header.shape[1]:header.shape[1] + width] = np.arange(width) < lengths[:, None]
    return chars[keep].tobytes()
