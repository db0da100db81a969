"""Reading a stream as Arrow columns (for Spark): the records :class:`JournalReader` returns,
without a Python object per record.

``read_columns(view, first, last)`` goes through the journal's one read loop
(:meth:`StreamView._read <zeps.journal.view.StreamView._read>`) with a column sink instead of a
record sink, so the segments, the index (loaded and checked by :mod:`.recovery`), the torn-tail
rule and the corruption errors (:class:`CorruptionError` naming file and byte offset) are those
of the per-record reader. What differs is how a block is parsed:

1. one ``os.pread`` of a block (default 32 MiB, less when the index says where the last wanted
   record ends) into a ``bytes`` object;
2. the record positions are found by walking the ``length`` fields. The segment's sparse index
   gives thousands of known record starts per block, so the walk runs *in parallel from every
   index entry at once* with numpy (each step advances every walker by one record), and each
   walker must land exactly on the next entry: that chain check proves the positions are the
   ones a sequential walk from the block start would find (the index is never trusted: a wrong
   or missing entry falls back to the sequential walk, a plain Python loop with a vectorised
   fast path for runs of equal-sized records);
3. every check of :func:`zeps.journal.record.parse_records` is made over all records of the block
   at once (minimal length, DELIVER signature, key and body lengths adding up, the expected
   sequences, timestamps that never go back), through overlapping big-endian numpy views of the
   block. Unless ``verify_crc=False``, the CRC-32Cs of all records are checked with *one*
   ``google_crc32c`` call over a transformed copy of the block (:func:`_block_crc_ok`); only a
   block that fails is checked record by record, to find the bad one. The first record that
   fails any check is handed to ``parse_records`` itself, which says what is wrong with it, so
   both readers stop at the same byte for the same reason;
4. ``key`` and ``body`` are built with ``pyarrow.Array.from_buffers`` over the block itself,
   with interleaved offsets (``[key0 start, key0 end, key1 start, ...]``) so the even elements
   are the keys and the odd ones the bytes in between; ``Array.filter`` with an even mask then
   copies just the keys into a compact array (C++). Same for bodies. Keys are UTF-8 validated
   (a key that is not is reported as corruption; the per-record reader decodes keys lazily).

numpy and pyarrow are the ``spark`` extra's dependencies: ``zeps.journal`` does not import this
module; import it where it is used.
"""
from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

import google_crc32c
import numpy as np
import pyarrow as pa

from ..protocol.deliver import (DELIVER_ID, KEY_OFFSET, KEYLEN_OFFSET, MIN_FRAME, SEQ_OFFSET,
                                SIGNATURE)
from .record import (BAD, CRC_OFFSET, END, HEADER_SIZE, LIMIT, SHORT, TS_OFFSET,
                     parse_records)
from .segment import ScanResult, Segment

log = logging.getLogger("zeps.journal")

BLOCK_BYTES = 32 << 20
_U32 = struct.Struct(">I")
#: signature and command id of a DELIVER frame as the top 24 bits of its first u32
_DELIVER_HEAD = int.from_bytes(SIGNATURE + bytes((DELIVER_ID,)), "big")
_PARALLEL_MIN = 32     # below this many live walkers, finish them one by one in Python
_RUN_CHUNK = 8192
_crc_value = google_crc32c.value


@dataclass
class Columns:
    """Parallel columns for ``len(self)`` consecutive records."""
    sequence: np.ndarray        # int64
    timestamp_ns: np.ndarray    # int64
    key: pa.Array               # pa.string()
    body: pa.Array              # pa.binary()

    def __len__(self) -> int:
        return len(self.sequence)


# ----------------------------------------------------------------------------- walking

def _be_view(buf: bytes, width: int) -> np.ndarray:
    """An overlapping, unaligned view: element ``i`` is the big-endian integer at bytes
    ``[i, i + width)``; gathering ``view[positions]`` is one vectorised fancy index."""
    return np.ndarray(buffer=buf, dtype=">u%d" % width, shape=(max(len(buf) - width + 1, 0),),
                      strides=(1,))


def _walk_sequential(buf: bytes, start: int, limit: int) -> Tuple[List[np.ndarray], int]:
    """Positions of the complete records in ``buf[start:limit]`` walked one by one, and the
    position after the last one. Runs of equal-sized records are confirmed vectorised (every
    predicted start checked to hold the same length); sizes that vary go through the loop."""
    unpack = _U32.unpack_from
    u32 = _be_view(buf, 4)
    out: List[np.ndarray] = []
    pending: List[int] = []
    append = pending.append
    p = start
    slow_budget = 0
    while p + HEADER_SIZE <= limit:
        length = unpack(buf, p)[0]
        stride = HEADER_SIZE + length
        if p + stride > limit:
            break
        if slow_budget > 0:
            append(p)
            p += stride
            slow_budget -= 1
            continue
        run = 0
        chunk = 64   # a small first probe, so varied sizes cost little; doubles while it holds
        while True:
            k = min((limit - p) // stride, chunk)
            chunk = min(chunk * 2, _RUN_CHUNK)
            if k <= 0:
                break
            cand = p + stride * np.arange(k, dtype=np.int64)
            mism = np.nonzero(u32[cand] != length)[0]
            good = int(mism[0]) if len(mism) else k
            if good:
                if pending:
                    out.append(np.array(pending, dtype=np.int64))
                    pending = []
                    append = pending.append
                out.append(cand[:good])
                run += good
                p += stride * good
            if good < k or p + HEADER_SIZE > limit:
                break
            length = unpack(buf, p)[0]
            if HEADER_SIZE + length != stride:
                break
        if run < 16:
            slow_budget = 256   # sizes vary here: walk the next records one by one
    if pending:
        out.append(np.array(pending, dtype=np.int64))
    return out, p


def _walk_parallel(buf: bytes, starts: np.ndarray, limit: int) -> Optional[Tuple[np.ndarray, int]]:
    """Walk from every known record start at once (``starts[0]`` is a true record start, the
    others, increasing, come from the index). Walker k must land exactly on ``starts[k+1]``; if
    one overshoots, the hints are wrong and None is returned (the caller walks sequentially)."""
    u32 = _be_view(buf, 4)
    steps: List[np.ndarray] = []
    tails: List[np.ndarray] = []
    if len(starts) > 1:
        targets = starts[1:]
        cur = starts[:-1].copy()
        live = cur < targets
        n_live = int(live.sum())
        while n_live:
            if n_live < _PARALLEL_MIN and len(steps) >= 64:
                break          # a few long gaps left (sparse index here): finish them one by one
            if (cur[live] + HEADER_SIZE > targets[live]).any():
                return None
            c = np.where(live, cur, 0)
            nxt = np.where(live, c + HEADER_SIZE + u32[c].astype(np.int64), cur)
            if (nxt > targets).any():
                return None
            steps.append(np.where(live, cur, -1))
            cur = nxt
            live = cur < targets
            n_live = int(live.sum())
        unpack = _U32.unpack_from
        for k in np.nonzero(live)[0].tolist():
            p, t = int(cur[k]), int(targets[k])
            tail = []
            while p < t:
                if p + HEADER_SIZE > t:
                    return None
                tail.append(p)
                p += HEADER_SIZE + unpack(buf, p)[0]
            if p != t:
                return None
            tails.append(np.array(tail, dtype=np.int64))
    seq_parts, after = _walk_sequential(buf, int(starts[-1]), limit)
    parts: List[np.ndarray] = []
    if steps:
        m = np.stack(steps, axis=1).ravel()    # walker-major: each walker's records in order
        parts.append(m[m >= 0])
    parts.extend(tails)
    parts.extend(seq_parts)
    if not parts:
        return np.empty(0, np.int64), int(starts[-1])
    pos = np.concatenate(parts)
    if tails:
        pos.sort()
    return pos, after


def walk(buf: bytes, limit: int, hints: Optional[np.ndarray] = None) -> Tuple[np.ndarray, int]:
    """Record start positions in ``buf[:limit]`` (position 0 is a record start) and the position
    just after the last complete record. ``hints``: other record starts (from the index); used
    only if strictly increasing, and checked."""
    if hints is not None and len(hints):
        h = hints[(hints > 0) & (hints < limit)]
        if len(h) and (len(h) == 1 or bool((np.diff(h) > 0).all())):
            r = _walk_parallel(buf, np.concatenate(([0], h)).astype(np.int64), limit)
            if r is not None:
                return r
    parts, after = _walk_sequential(buf, 0, limit)
    if not parts:
        return np.empty(0, np.int64), 0
    return (np.concatenate(parts) if len(parts) > 1 else parts[0]), after


# ----------------------------------------------------------------------------- CRCs

def _block_crc_ok(buf: bytes, pos: np.ndarray, after: int) -> bool:
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
    stored = _be_view(buf, 4)[pos + CRC_OFFSET].astype(np.uint32)
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


def _first_bad_crc(buf: bytes, pos: np.ndarray, after: int) -> int:
    """Index of the first record whose CRC does not match (``len(pos)`` if none): one block
    check, and record by record (~0.3 us each) only if it fails."""
    n = len(pos)
    if n == 0 or _block_crc_ok(buf, pos, after):
        return n
    starts = (pos + TS_OFFSET).tolist()
    ends = pos[1:].tolist()
    ends.append(after)
    # C-level iteration; the C extension takes bytes, so each record is sliced (a small copy)
    got = np.fromiter(map(_crc_value, map(buf.__getitem__, map(slice, starts, ends))),
                      dtype=np.uint32, count=n)
    bad = np.nonzero(got != _be_view(buf, 4)[pos + CRC_OFFSET])[0]
    # every record checks on its own: only a cancellation (2^-32) gets here with none bad;
    # then the block is reported bad at its first record
    return int(bad[0]) if len(bad) else 0


# ----------------------------------------------------------------------------- checks

def _first(mask: np.ndarray) -> int:
    """Index of the first True in ``mask``, ``len(mask)`` if none."""
    return int(np.argmax(mask)) if mask.any() else len(mask)


class _Block:
    """The valid leading records of a walked block and their fields (all arrays of length
    ``n``): what parse_records would accept, checked over all records at once."""

    def __init__(self, buf: bytes, pos: np.ndarray, expect_seq: int, last_ts: Optional[int],
                 verify_crc: bool):
        arr = np.frombuffer(buf, dtype=np.uint8)
        u32 = _be_view(buf, 4)
        u64 = _be_view(buf, 8)
        length = u32[pos].astype(np.int64)
        n = _first(length < MIN_FRAME)
        pos, length = pos[:n], length[:n]
        frame = pos + HEADER_SIZE
        n = min(n, _first((u32[frame] >> 8) != _DELIVER_HEAD))
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
            n = min(n, _first_bad_crc(buf, pos[:n], int(bend[n - 1])))
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
        key = _compact(data, self.kstart[lo:hi], self.kend[lo:hi]).view(pa.string())
        ok = hi - lo
        try:
            key.validate(full=True)
        except pa.ArrowInvalid:
            ok = _first_bad_utf8(self.buf, self.kstart[lo:hi], self.kend[lo:hi])
            hi = lo + ok
            key = key.slice(0, ok)
        body = _compact(data, self.kend[lo:hi] + 4, self.bend[lo:hi])
        return Columns(self.seq[lo:hi], self.ts[lo:hi], key, body), ok


def _first_bad_utf8(buf: bytes, starts: np.ndarray, ends: np.ndarray) -> int:
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        try:
            buf[a:b].decode("utf-8")
        except UnicodeDecodeError:
            return i
    return len(starts)


_EVEN_MASKS: dict = {}


def _even_mask(n: int) -> pa.Array:
    """Boolean array [T, F, T, F, ..., T] of length 2n-1 (cached by size)."""
    m = _EVEN_MASKS.get(n)
    if m is None:
        a = np.zeros(2 * n - 1, dtype=bool)
        a[0::2] = True
        m = pa.array(a)
        if len(_EVEN_MASKS) > 16:
            _EVEN_MASKS.clear()
        _EVEN_MASKS[n] = m
    return m


def _compact(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """A compact binary array of ``data[starts[i]:ends[i]]`` (ranges increasing, disjoint):
    2n interleaved offsets over the block give 2n-1 elements (range i, then the gap after it);
    ``filter`` keeps the even ones, copying them into a new contiguous buffer in C++."""
    n = len(starts)
    if n == 0:
        return pa.array([], type=pa.binary())
    offsets = np.empty(2 * n, dtype=np.int32)
    offsets[0::2] = starts
    offsets[1::2] = ends
    wide = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(offsets), data])
    return wide.filter(_even_mask(n))


# ----------------------------------------------------------------------------- the sink

class ColumnSink:
    """Collects :class:`Columns` for the journal's read loop: the records up to ``last``
    (inclusive; None for all), one block per read (the caller yields between blocks)."""

    def __init__(self, last: Optional[int], verify_crc: bool, block_bytes: int):
        self.out: List[Columns] = []
        self.count = 0
        self.last = last
        self.verify_crc = verify_crc
        self.block_bytes = block_bytes

    def full(self) -> bool:
        return False

    def parse(self, seg: Segment, pos: int, seq: int, limit: int, want_seq: int,
              last_ts: Optional[int]) -> ScanResult:
        """Parse blocks from ``pos`` (record ``seq``) up to ``limit`` until a block yields
        rows (LIMIT), the records past ``last`` begin (LIMIT), ``limit`` is reached (END) or a
        record is short (SHORT) or bad (BAD) - the statuses of :meth:`Segment.parse`."""
        last = self.last
        need = 0
        while True:
            if pos >= limit:
                return ScanResult(END, pos, seq, last_ts, None)
            size = min(limit - pos, self.block_bytes)
            idx = seg.index
            if last is not None and idx is not None:
                end_hint = idx.after_seq(last)        # where the records past `last` begin
                if end_hint is not None and end_hint > pos:
                    size = min(size, end_hint - pos)
            size = max(size, min(need, limit - pos))
            buf = os.pread(seg.fd, size, pos)
            if len(buf) >= 1 << 31:  # pragma: no cover - int32 Arrow offsets; blocks are 32 MiB
                raise ValueError(f"{seg.log_path}: a record at byte {pos} is over 2 GiB")
            at_end = pos + len(buf) >= limit or len(buf) < size
            hints = None
            if idx is not None:
                h = idx.positions_between(pos, pos + len(buf))
                if len(h):
                    hints = np.frombuffer(h, dtype=np.uint64).astype(np.int64) - pos
            positions, _ = walk(buf, len(buf), hints)
            if not len(positions):
                need = HEADER_SIZE if len(buf) < HEADER_SIZE else \
                    HEADER_SIZE + _U32.unpack_from(buf, 0)[0]
                if not at_end and pos + need <= limit:
                    continue                          # one record longer than the block
                return ScanResult(SHORT, pos, seq, last_ts, need)
            need = 0
            block = _Block(buf, positions, seq, last_ts, self.verify_crc)
            n = block.n
            lo = int(np.searchsorted(block.seq, want_seq)) if want_seq > seq else 0
            hi = n if last is None else int(np.searchsorted(block.seq, last, side="right"))
            stop = hi < n                             # the records past `last` begin in here
            why = "the block's CRC-32C check failed"    # if parse_records finds it fine
            if lo < hi:
                cols, ok = block.columns(lo, hi)
                if ok < hi - lo:
                    n, hi, stop = lo + ok, lo + ok, False
                    why = "key is not valid UTF-8"
                if len(cols):
                    self.out.append(cols)
                    self.count += len(cols)
            k = hi if stop else n
            npos = pos + (int(block.pos[k]) if k < len(block.pos) else block.after())
            nseq = seq + k
            nts = int(block.ts[k - 1]) if k else last_ts
            if stop:
                return ScanResult(LIMIT, npos, nseq, nts, None)
            if n < len(positions):                    # positions[n] is not a valid record
                return ScanResult(BAD, npos, nseq, nts,
                                  _reason(buf, int(positions[n]), nseq, nts, why))
            if lo < hi:
                return ScanResult(LIMIT, npos, nseq, nts, None)
            pos, seq, last_ts = npos, nseq, nts       # nothing wanted yet: next block


def _reason(buf: bytes, p: int, seq: int, last_ts: Optional[int], otherwise: str) -> str:
    """What :func:`parse_records` (the journal's one definition of a valid record) says is
    wrong with the record at ``p``; ``otherwise`` if it finds nothing (a check only this reader
    makes: UTF-8 keys, the 2^-32 case of the block CRC check)."""
    status, _, _, _, info = parse_records(buf, p, len(buf), seq, None, last_ts=last_ts)
    return info if status == BAD else otherwise


def read_columns(view, first: int, last: Optional[int] = None, *, verify_crc: bool = True,
                 block_bytes: int = BLOCK_BYTES) -> Iterator[Columns]:
    """Yield :class:`Columns` for the records ``first..last`` (inclusive; ``last=None``: to the
    end) of a :class:`~zeps.journal.JournalReader` (or :class:`~zeps.journal.Journal`), in
    order, one block at a time. Same records, same end and same errors as
    ``view.read_from(first, end_seq=last)``; records that retention deleted are skipped with a
    warning on the ``zeps.journal`` logger. ``verify_crc=False`` skips the CRC check (the other
    checks stay)."""
    view._check_open()
    seq = max(first, 1)
    cursor = None
    while last is None or seq <= last:
        sink, cursor = view._read(seq, lambda: ColumnSink(last, verify_crc, block_bytes), cursor)
        if not sink.out:
            if last is not None and seq < view.first_seq:
                log.warning("journal %s: records %d..%d were deleted by retention",
                            view.stream_dir, seq, last)
            return
        got = int(sink.out[0].sequence[0])
        if got > seq:
            log.warning("journal %s: records %d..%d were deleted by retention; continuing at %d",
                        view.stream_dir, seq, got - 1, got)
        yield from sink.out
        seq = int(sink.out[-1].sequence[-1]) + 1
