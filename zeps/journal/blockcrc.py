"""Checking the CRC-32Cs of all records of a block with one ``google_crc32c`` call, and
finding the bad record when that fails. Part of the columnar reader (:mod:`.columnar`); needs
numpy."""
from __future__ import annotations

import google_crc32c
import numpy as np

from .record import CRC_OFFSET, TS_OFFSET
from .speedups import journalc
from .walk import be_view

_crc_value = google_crc32c.value


def block_crc_ok(buf: bytes, pos: np.ndarray, after: int) -> bool:
    """All records' CRCs in one pass, by the linearity of CRCs.

    Let R be CRC-32C without the initial value and final xor (a linear map over GF(2), with
    R(0...0 || M) = R(M)). The stored ``c = CRC(P) = R(P ^ (FFFFFFFF || 0...)) ^ FFFFFFFF`` of a
    payload P (``timestamp || frame``), and for a reflected CRC, appending the register value
    little-endian gives zero: ``R(X || R(X)_le) = 0``. So with ``P'`` = P whose first 4 bytes
    are xor-ed with FF, and ``d = c ^ FFFFFFFF``, a record is intact iff ``R(P' || d_le) = 0``,
    and ``R`` of the concatenation ``P'_1 || d_1 || 0000 || P'_2 || d_2 || 0000 || ...`` is 0
    when every record is intact. That stream is the block itself with each 8-byte header
    replaced by the previous record's ``d`` and 4 zero bytes - built with a few vectorised
    writes - and its R is one C call. A corrupted record makes it non-zero except with
    probability 2^-32 (a single error burst of up to 32 bits is always detected, as by the
    per-record check); corruption spread over several records could cancel out with that
    same 2^-32 probability."""
    p0 = int(pos[0])
    size = after - p0
    bm = np.zeros(size + 4, dtype=np.uint8)
    bm[:size] = np.frombuffer(buf, dtype=np.uint8, count=size, offset=p0)
    rel = pos - p0
    stored = be_view(buf, 4)[pos + CRC_OFFSET].astype(np.uint32)
    w8 = np.ndarray(buffer=bm, dtype="<u8", shape=(len(bm) - 7,), strides=(1,))
    w4 = np.ndarray(buffer=bm, dtype="<u4", shape=(len(bm) - 3,), strides=(1,))
    w8[rel] = 0                                   # length and crc out
    w4[rel + TS_OFFSET] ^= np.uint32(0xFFFFFFFF)  # the CRC's initial value, per record
    ends = np.empty_like(rel)
    ends[:-1] = rel[1:]
    ends[-1] = size
    w4[ends] = stored ^ np.uint32(0xFFFFFFFF)     # d_i right after record i
    w4[0] = np.uint32(0xFFFFFFFF)                 # cancels google_crc32c's own initial value
    bm.flags.writeable = False
    return _crc_value(bm) == 0xFFFFFFFF           # ... and its final xor


def first_bad_crc(buf: bytes, pos: np.ndarray, after: int) -> int:
    """Index of the first record whose CRC does not match (``len(pos)`` if none):
    :func:`first_bad_crc_py`, or its C twin (record by record) where :mod:`.speedups` has it."""
    if journalc is None or not len(pos):
        return first_bad_crc_py(buf, pos, after)
    return journalc.first_bad_crc(buf, np.ascontiguousarray(pos, dtype=np.int64), after)


def first_bad_crc_py(buf: bytes, pos: np.ndarray, after: int) -> int:
    """:func:`first_bad_crc` in Python (the definition): one block check, and record by record
    (~0.3 us each) only if it fails."""
    n = len(pos)
    if n == 0 or block_crc_ok(buf, pos, after):
        return n
    if not isinstance(buf, bytes):
        buf = bytes(buf)                  # google_crc32c takes bytes (a block read into a buffer)
    starts = (pos + TS_OFFSET).tolist()
    ends = pos[1:].tolist()
    ends.append(after)
    # C-level iteration; the C extension takes bytes, so each record is sliced (a small copy)
    got = np.fromiter(map(_crc_value, map(buf.__getitem__, map(slice, starts, ends))),
                      dtype=np.uint32, count=n)
    bad = np.nonzero(got != be_view(buf, 4)[pos + CRC_OFFSET])[0]
    # every record checks on its own: only a cancellation (2^-32) gets here with none bad;
    # then the block is reported bad at its first record
    return int(bad[0]) if len(bad) else 0
