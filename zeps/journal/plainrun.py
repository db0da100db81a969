"""A run of plain records of a block (one DELIVER frame each, no batch, no headers), checked
all at once for the columnar reader (:mod:`.columnar`, step 3 of its docstring): every check of
:func:`zeps.journal.record.parse_records`, over all the run's records, in numpy
(:meth:`_Block._init_py`, the definition) or in one C loop (:meth:`_Block._init_c`); and
:func:`fused_run`, the one-pass C loop for a block that starts with such records or batch
records without extensions."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import pyarrow as pa

from ..protocol.deliver import (DELIVER_ID, KEY_OFFSET, KEYLEN_OFFSET, MIN_FRAME, SEQ_OFFSET,
                                SIGNATURE)
from .blockcrc import first_bad_crc
from .columns import Columns
from .record import EXT_FIXED, HEADER_SIZE, LENGTH_MASK, PID_LEN_OFFSET, TS_OFFSET
from .ranges import _compact, _from, _i64
from .speedups import journalc
from .walk import be_view

#: signature and command id of a DELIVER frame as the top 24 bits of its first u32
_DELIVER_HEAD = int.from_bytes(SIGNATURE + bytes((DELIVER_ID,)), "big")


def _first(mask: np.ndarray) -> int:
    """Index of the first True in ``mask``, ``len(mask)`` if none."""
    return int(np.argmax(mask)) if mask.any() else len(mask)


class _Block:
    """The valid leading records of a walked block and their fields (all arrays of length
    ``n``): what parse_records would accept, checked over all records at once."""

    def __init__(self, buf: bytes, pos: np.ndarray, expect_seq: int, last_ts: Optional[int],
                 verify_crc: bool):
        if journalc is not None:
            self._init_c(buf, pos, expect_seq, last_ts, verify_crc)
        else:
            self._init_py(buf, pos, expect_seq, last_ts, verify_crc)

    def _init_c(self, buf: bytes, pos: np.ndarray, expect_seq: int, last_ts: Optional[int],
                verify_crc: bool):
        """:meth:`_init_py`'s checks and fields, record by record in C (one pass)."""
        (n, seq, ts, kstart, kend, bend, pstart, pend, pseq, flagged, any_flagged
         ) = journalc.check_plain(buf, _i64(pos), expect_seq, last_ts, verify_crc)
        self.flagged = None
        if any_flagged:
            f = np.frombuffer(flagged, dtype=np.bool_)
            pstart, pend = _from(pstart), _from(pend)
            n = min(n, _first_bad_utf8_mask(buf, pstart, pend, f))
            self.flagged = f[:n]
            self.pstart, self.pend = pstart[:n], pend[:n]
            self.pseq = np.frombuffer(pseq, dtype=np.uint64)[:n]
        self.n = n
        self.pos = pos[:n]
        self.seq, self.ts = _from(seq)[:n], _from(ts)[:n]
        self.kstart, self.kend, self.bend = _from(kstart)[:n], _from(kend)[:n], _from(bend)[:n]
        self.buf = buf

    def _init_py(self, buf: bytes, pos: np.ndarray, expect_seq: int, last_ts: Optional[int],
                 verify_crc: bool):
        """The checks over all records at once, in numpy (the definition)."""
        arr = np.frombuffer(buf, dtype=np.uint8)
        u32 = be_view(buf, 4)
        u64 = be_view(buf, 8)
        word = u32[pos].astype(np.int64)
        length = word & LENGTH_MASK
        n = _first(length < MIN_FRAME)
        pos, length, flagged = pos[:n], length[:n], word[:n] > LENGTH_MASK
        ext = np.zeros(n, dtype=np.int64)
        pstart = pseq = None
        if flagged.any():           # walked records are whole: their pid_len is in the block
            plen = np.where(flagged, arr[pos + PID_LEN_OFFSET].astype(np.int64), 0)
            n = min(n, _first(flagged & (plen == 0)))
            ext = np.where(flagged, EXT_FIXED + plen, 0)
            pstart = pos + PID_LEN_OFFSET + 1
            pseq = u64[(pstart + plen)[:n]].astype(np.uint64)
            n = min(n, _first(flagged[:n] & (pseq == 0)))
        frame = pos + HEADER_SIZE + ext
        n = min(n, _first((u32[frame[:n]] >> 8) != _DELIVER_HEAD))
        kstart = frame + KEY_OFFSET
        kend = kstart + arr[frame + KEYLEN_OFFSET].astype(np.int64)
        bend = frame + length
        n = min(n, _first(kend + 4 > bend))
        n = min(n, _first(kend[:n] + 4 + u32[kend[:n]].astype(np.int64) != bend[:n]))
        seq = u64[frame[:n] + SEQ_OFFSET].astype(np.int64)
        n = min(n, _first(seq != expect_seq + np.arange(len(seq), dtype=np.int64)))
        ts = u64[pos[:n] + TS_OFFSET].astype(np.int64)
        if len(ts):
            back = np.empty(len(ts), dtype=bool)
            back[0] = last_ts is not None and int(ts[0]) < last_ts
            np.less(ts[1:], ts[:-1], out=back[1:])
            n = min(n, _first(back))
        if verify_crc and n:
            n = min(n, first_bad_crc(buf, pos[:n], int(bend[n - 1])))
        self.flagged = flagged[:n] if pseq is not None and flagged[:n].any() else None
        if self.flagged is not None:
            f = self.flagged
            n = min(n, _first_bad_utf8_mask(buf, pstart[:n], pstart[:n] + ext[:n] - EXT_FIXED, f))
            self.flagged = f[:n]
            self.pstart, self.pend, self.pseq = pstart[:n], (pstart + ext - EXT_FIXED)[:n], pseq[:n]
        self.n = n
        self.pos, self.seq, self.ts = pos[:n], seq[:n], ts[:n]
        self.kstart, self.kend, self.bend = kstart[:n], kend[:n], bend[:n]
        self.buf = buf

    def after(self) -> int:
        """Byte position after the last valid record (0 if none)."""
        return int(self.bend[-1]) if self.n else 0

    def columns(self, lo: int, hi: int) -> Tuple[Columns, int]:
        """Columns of records ``lo..hi-1`` and how many of them have a valid UTF-8 key (all of
        them, or the index of the first that has not)."""
        data = pa.py_buffer(self.buf)
        key = _compact(data, self.kstart[lo:hi], self.kend[lo:hi], pa.string())
        ok = hi - lo
        try:
            key.validate(full=True)
        except pa.ArrowInvalid:
            ok = _first_bad_utf8(self.buf, self.kstart[lo:hi], self.kend[lo:hi])
            hi = lo + ok
            key = key.slice(0, ok)
        body = _compact(data, self.kend[lo:hi] + 4, self.bend[lo:hi])
        producer, pseq = self._producers(data, lo, hi)
        return Columns(self.seq[lo:hi], self.ts[lo:hi], key, body, producer, pseq), ok

    def _producers(self, data: pa.Buffer, lo: int, hi: int) -> Tuple[pa.Array, pa.Array]:
        """The nullable producer id and pseq columns of records ``lo..hi-1``."""
        f = None if self.flagged is None else self.flagged[lo:hi]
        if f is None or not f.any():
            return pa.nulls(hi - lo, pa.string()), pa.nulls(hi - lo, pa.uint64())
        ids = _compact(data, self.pstart[lo:hi][f], self.pend[lo:hi][f])
        offs = np.frombuffer(ids.buffers()[1], dtype=np.int32)[ids.offset:]
        lens = np.where(f, self.pend[lo:hi] - self.pstart[lo:hi], 0)
        full = np.empty(hi - lo + 1, dtype=np.int32)
        full[0] = offs[0]
        np.cumsum(lens, out=full[1:])
        full[1:] += offs[0]
        valid = pa.array(f).buffers()[1]
        producer = pa.Array.from_buffers(pa.string(), hi - lo,
                                         [valid, pa.py_buffer(full), ids.buffers()[2]])
        pseq = pa.array(self.pseq[lo:hi], type=pa.uint64(), mask=~f)
        return producer, pseq


def _first_bad_utf8_mask(buf: bytes, starts: np.ndarray, ends: np.ndarray,
                         mask: np.ndarray) -> int:
    """Index of the first record with ``mask`` set whose ``buf[starts:ends]`` is not valid UTF-8
    (``len(mask)`` if none): one pyarrow validation, record by record only if it fails."""
    sel = np.nonzero(mask)[0]
    ids = _compact(pa.py_buffer(buf), starts[sel], ends[sel], pa.string())
    try:
        ids.validate(full=True)
        return len(mask)
    except pa.ArrowInvalid:
        return int(sel[_first_bad_utf8(buf, starts[sel], ends[sel])])


def _first_bad_utf8(buf: bytes, starts: np.ndarray, ends: np.ndarray) -> int:
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        try:
            buf[a:b].decode("utf-8")
        except UnicodeDecodeError:
            return i
    return len(starts)


def plain_capacity(limit: int) -> Tuple[int, ...]:
    """The bytes each output of ``fused_columns`` needs for ``limit`` bytes of records (a plain
    record takes at least 32 bytes; keys and bodies are within the records; a batch record
    whose messages would pass that many rows is left to the next call)."""
    cap = limit // (HEADER_SIZE + MIN_FRAME) + 1
    return (cap * 8, cap * 8, (cap + 1) * 4, limit, (cap + 1) * 4, limit)


def fused_columns(buf, limit: int, expect_seq: int, last_ts: Optional[int], verify_crc: bool,
                  want_seq: int, last_seq: int):
    """``journalc.fused_columns`` (see :func:`fused_run`) into buffers of pyarrow's memory pool:
    ``(n, after, next_seq, last_t, stopped, seq, ts, key_offsets, keys, body_offsets,
    bodies)``, the last six ``pyarrow.Buffer`` of their used sizes. The pool reuses the memory
    of the columns already freed, where fresh memory for each block would be zeroed and faulted
    in page by page by the kernel (1.4x the whole read here)."""
    outs = [pa.allocate_buffer(max(size, 8)) for size in plain_capacity(limit)]
    n, after, next_seq, last_t, rows, kbytes, bbytes, stopped = journalc.fused_columns(
        buf, limit, expect_seq, last_ts, verify_crc, want_seq, last_seq, *outs)
    used = (rows * 8, rows * 8, (rows + 1) * 4, kbytes, (rows + 1) * 4, bbytes)
    return ((n, after, next_seq, last_t, bool(stopped))
            + tuple(o.slice(0, u) for o, u in zip(outs, used)))


_I64 = (1 << 63) - 1


def fused_run(buf, seq: int, want_seq: int, last_ts: Optional[int], verify_crc: bool,
              last: Optional[int]):
    """The leading run of a block's records without extensions, plain (one DELIVER each: most
    journals) or batch records (a DELIVER-BATCH each: what ``publish_batch`` writes), walked,
    checked and copied in *one* C pass (``fused_columns``: :func:`~.walk.walk`,
    :func:`~.columnar._kinds`, :class:`_Block`'s and :class:`~.batchcols.BatchRun`'s checks
    and the compaction of keys and bodies, fused; 12 -> 16.5M rows/s alone here for plain
    records), cut after ``last`` (None: no end; a batch record holding ``last`` and messages
    after it gives its messages up to ``last`` and is not passed), its rows from ``want_seq``
    on. None when the run is empty (the block does not start with such a record), or when a
    key is not UTF-8 (the general path then says which). Returns ``(bytes used, next seq,
    last timestamp, Columns or None if no row, whether the run ended at last)``."""
    if journalc is None or seq > _I64:
        return None                      # (the C pass takes signed 64-bit sequences)
    # a bound past what the C pass takes (2**64 - 1 for "to the end") means the same there:
    # it raised OverflowError where the general path returned the rows
    (n, used, nseq, last_t, stopped, seqs, ts, koffs, keys, boffs, bodies) = fused_columns(
        buf, len(buf), seq, last_ts, verify_crc, min(want_seq, _I64),
        -1 if last is None else min(last, _I64))
    rows = len(seqs) // 8
    if not n and not rows:
        return None
    cols = None
    if rows:
        key = pa.Array.from_buffers(pa.string(), rows, [None, koffs, keys])
        try:
            key.validate(full=True)
        except pa.ArrowInvalid:
            return None
        body = pa.Array.from_buffers(pa.binary(), rows, [None, boffs, bodies])
        cols = Columns(_from(seqs), _from(ts), key, body,
                       pa.nulls(rows, pa.string()), pa.nulls(rows, pa.uint64()))
    return used, nseq, last_t if n else last_ts, cols, stopped
