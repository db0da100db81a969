"""Columnar bulk parser of journal segment files (``.log``) into Arrow arrays.

The per-record journal API (``JournalReader.read_batch``) builds one Python ``Record`` per
message, which caps a reader at a few hundred thousand records per second. Spark wants columns,
so this module reads a segment in large blocks and builds the Arrow columns directly:

1. one ``read()`` of a block (default 32 MiB) into a ``bytes`` object;
2. the record positions are found by walking the ``length`` fields. The segment's sparse
   ``.index`` (one entry per ~4 KiB) gives thousands of known record starts per block, so the
   walk runs *in parallel from every index entry at once* with numpy (each step advances every
   walker by one record), and each walker must land exactly on the next entry: that chain check
   proves the positions are the ones a sequential walk from the block start would find (the
   index is never trusted: a stale or missing entry falls back to the sequential walk, a plain
   Python loop with a vectorised fast path for runs of equal-sized records);
3. unless ``verify_crc=False``, every record's CRC-32C (``google_crc32c``, C) over
   ``timestamp || frame`` is checked against the stored one — this is the one per-record Python
   step left (~0.25 us per record);
4. everything else is vectorised over the positions: timestamps, sequences, key and body
   lengths are gathered through overlapping big-endian numpy views of the block; the frame
   signature, the record length (``16 + keylen + bodylen``) and the contiguity of the sequences
   are checked;
5. ``key`` and ``body`` are built with ``pyarrow.Array.from_buffers`` over the block itself,
   with interleaved offsets (``[key0 start, key0 end, key1 start, ...]``) so the even elements
   are the keys and the odd ones the bytes in between; ``Array.filter`` with an even mask then
   copies just the keys into a compact array (C++). Same for bodies. Keys are UTF-8 validated.

On-disk record (docs/architecture.md)::

    length u32 BE | crc u32 BE | timestamp u64 BE (ns) | frame
    frame = AA A5 07 | seq u64 | keylen u8 | key | bodylen u32 | body

A torn record at the very end of a file (the writer is appending right now) is not an error:
the read simply ends before it. Any other inconsistency raises :class:`SegmentCorruptionError`
naming the file and byte offset.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

import numpy as np
import pyarrow as pa

try:
    import google_crc32c as _crc
    _crc_value = _crc.value
except Exception:  # pragma: no cover
    _crc_value = None

HEADER = 16            # length + crc + timestamp
FRAME_FIXED = 16       # AA A5 07 + seq(8) + keylen(1) + bodylen(4)
_U32 = struct.Struct(">I")
BLOCK_BYTES = 32 << 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_PARALLEL_MIN = 32     # below this many live walkers, finish them one by one in Python
_RUN_CHUNK = 8192


class SegmentCorruptionError(Exception):
    """A record that does not parse or whose CRC does not match (file and byte offset named)."""


@dataclass
class Columns:
    """One parsed block: parallel columns for ``len(self)`` records."""
    sequence: np.ndarray        # int64
    timestamp_ns: np.ndarray    # int64
    key: pa.Array               # pa.string()
    body: pa.Array              # pa.binary()

    def __len__(self) -> int:
        return len(self.sequence)

    def slice(self, lo: int, hi: int) -> "Columns":
        return Columns(self.sequence[lo:hi], self.timestamp_ns[lo:hi],
                       self.key.slice(lo, hi - lo), self.body.slice(lo, hi - lo))


# ----------------------------------------------------------------------------- files

def segment_files(stream_dir: str) -> List[Tuple[int, str]]:
    """``[(first sequence, path of the .log)]`` sorted by first sequence."""
    out = []
    for name in os.listdir(stream_dir):
        if name.endswith(LOG_SUFFIX):
            stem = name[:-len(LOG_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                out.append((int(stem), os.path.join(stream_dir, name)))
    out.sort()
    return out


def load_index(log_path: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(seqs, positions)`` of a segment's sparse ``.index`` (16-byte BE entries), as int64
    arrays; empty if the file is missing. Only a hint: every use is checked against the log."""
    path = log_path[:-len(LOG_SUFFIX)] + INDEX_SUFFIX
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    n = len(data) // 16
    a = np.frombuffer(data, dtype=">u8", count=2 * n).reshape(n, 2).astype(np.int64)
    seqs, poss = a[:, 0].copy(), a[:, 1].copy()
    # keep the increasing prefix (a torn or stale tail is ignored)
    if n > 1:
        bad = np.nonzero((np.diff(seqs) <= 0) | (np.diff(poss) <= 0))[0]
        if len(bad):
            k = int(bad[0]) + 1
            seqs, poss = seqs[:k], poss[:k]
    return seqs, poss


def floor_entry(index: Tuple[np.ndarray, np.ndarray], seq: int) -> Tuple[int, int]:
    """``(seq, position)`` of the last index entry at or before ``seq``; ``(0, 0)`` if none."""
    seqs, poss = index
    i = int(np.searchsorted(seqs, seq, side="right")) - 1
    if i < 0:
        return 0, 0
    return int(seqs[i]), int(poss[i])


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
    while p + HEADER <= limit:
        length = unpack(buf, p)[0]
        stride = HEADER + length
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
            if good < k or p + HEADER > limit:
                break
            length = unpack(buf, p)[0]
            if HEADER + length != stride:
                break
        if run < 16:
            slow_budget = 256   # sizes vary here: walk the next records one by one
    if pending:
        out.append(np.array(pending, dtype=np.int64))
    return out, p


def _walk_parallel(buf: bytes, starts: np.ndarray, limit: int) -> Optional[Tuple[np.ndarray, int]]:
    """Walk from every known record start at once (``starts[0]`` is a true record start, the
    others come from the index). Walker k must land exactly on ``starts[k+1]``; if one
    overshoots, the hints are wrong and None is returned (the caller walks sequentially)."""
    u32 = _be_view(buf, 4)
    K = len(starts)
    steps: List[np.ndarray] = []
    tails: List[np.ndarray] = []
    if K > 1:
        targets = starts[1:]
        cur = starts[:-1].copy()
        live = cur < targets
        n_live = int(live.sum())
        while n_live:
            if n_live < _PARALLEL_MIN and len(steps) >= 64:
                break          # a few long gaps left (sparse index here): finish them one by one
            if (cur[live] + HEADER > targets[live]).any():
                return None
            c = np.where(live, cur, 0)
            nxt = np.where(live, c + HEADER + u32[c].astype(np.int64), cur)
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
                if p + HEADER > t:
                    return None
                tail.append(p)
                p += HEADER + unpack(buf, p)[0]
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
    just after the last complete record. ``hints``: other record starts (from the index)."""
    if hints is not None and len(hints):
        h = hints[(hints > 0) & (hints < limit)]
        if len(h):
            r = _walk_parallel(buf, np.concatenate(([0], h)).astype(np.int64), limit)
            if r is not None:
                return r
    parts, after = _walk_sequential(buf, 0, limit)
    if not parts:
        return np.empty(0, np.int64), 0
    return (np.concatenate(parts) if len(parts) > 1 else parts[0]), after


def verify_crcs(buf: bytes, positions: np.ndarray, after: int, path: str, base: int) -> None:
    """Check every record's stored CRC-32C over ``timestamp || frame``.

    Batched: one CRC-32C call over a transformed copy of the block checks all records at once
    (:func:`_block_crc_ok`); only if that fails are the records checked one by one, to name the
    bad one."""
    if _crc_value is None:  # pragma: no cover
        raise RuntimeError("google_crc32c is required to verify CRCs (or set verifyCrc=false)")
    if len(positions) == 0:
        return
    if not _block_crc_ok(buf, positions, after):
        verify_crcs_each(buf, positions, after, path, base)
        # every record checks on its own: only a cancellation (2^-32) could get here
        raise SegmentCorruptionError(f"{path}: CRC mismatch between bytes "
                                     f"{base + int(positions[0])} and {base + after}")


def _block_crc_ok(buf: bytes, pos: np.ndarray, after: int) -> bool:
    """All records' CRCs in one pass, by the linearity of CRCs.

    Let R be CRC-32C without the initial value and final xor (a linear map over GF(2), with
    R(0...0 || M) = R(M)). The stored ``c = CRC(P) = R(P ^ (FFFFFFFF || 0...)) ^ FFFFFFFF`` of a
    payload P (``timestamp || frame``), and for a reflected CRC, appending the register value
    little-endian gives zero: ``R(X || R(X)_le) = 0``. So with ``P'`` = P whose first 4 bytes
    are xor-ed with FF, and ``d = c ^ FFFFFFFF``, a record is intact iff ``R(P' || d_le) = 0``,
    and ``R`` of the concatenation ``P'_1 || d_1 || 0000 || P'_2 || d_2 || 0000 || ...`` is 0
    when every record is intact. That stream is the block itself with each 8-byte header
    replaced by the previous record's ``d`` and 4 zero bytes — built with a few vectorised
    writes — and its R is one C call. A corrupted record makes it non-zero except with
    probability 2^-32 (a single error burst of up to 32 bits is always detected, as by the
    per-record check); corruption spread over several records could cancel out with that
    same 2^-32 probability."""
    p0 = int(pos[0])
    size = after - p0
    bm = np.zeros(size + 4, dtype=np.uint8)
    bm[:size] = np.frombuffer(buf, dtype=np.uint8, count=size, offset=p0)
    rel = pos - p0
    stored = _be_view(buf, 4)[pos + 4].astype(np.uint32)
    w8 = np.ndarray(buffer=bm, dtype="<u8", shape=(len(bm) - 7,), strides=(1,))
    w4 = np.ndarray(buffer=bm, dtype="<u4", shape=(len(bm) - 3,), strides=(1,))
    w8[rel] = 0                                   # headers out
    w4[rel + 8] ^= np.uint32(0xFFFFFFFF)          # the CRC's initial value, per record
    ends = np.empty_like(rel)
    ends[:-1] = rel[1:]
    ends[-1] = size
    w4[ends] = stored ^ np.uint32(0xFFFFFFFF)     # d_i right after record i
    w4[0] = np.uint32(0xFFFFFFFF)                 # cancels google_crc32c's own initial value
    bm.flags.writeable = False
    return _crc_value(bm) == 0xFFFFFFFF           # ... and its final xor


def verify_crcs_each(buf: bytes, positions: np.ndarray, after: int, path: str, base: int) -> None:
    """The plain check: each record's CRC on its own (~0.3 us per record)."""
    n = len(positions)
    starts = (positions + 8).tolist()
    ends = positions[1:].tolist()
    ends.append(after)
    # C-level iteration; the C extension takes bytes, so each record is sliced (a small copy)
    got = np.fromiter(map(_crc_value, map(buf.__getitem__, map(slice, starts, ends))),
                      dtype=np.uint32, count=n)
    stored = _be_view(buf, 4)[positions + 4]
    bad = np.nonzero(got != stored)[0]
    if len(bad):
        raise SegmentCorruptionError(
            f"{path}: CRC mismatch in the record at byte {base + int(positions[bad[0]])}")


# ----------------------------------------------------------------------------- columns

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


def parse_block(buf: bytes, pos: np.ndarray, path: str, base: int) -> Columns:
    """Columns for the records starting at ``pos`` in ``buf`` (already walked)."""
    n = len(pos)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return Columns(empty, empty, pa.array([], pa.string()), pa.array([], pa.binary()))
    if len(buf) >= 2**31:  # pragma: no cover - blocks are far smaller (int32 offsets)
        raise ValueError("block too large")
    arr = np.frombuffer(buf, dtype=np.uint8)
    u32 = _be_view(buf, 4)
    u64 = _be_view(buf, 8)
    length = u32[pos].astype(np.int64)
    if (length < FRAME_FIXED).any():
        bad = int(pos[length < FRAME_FIXED][0])
        raise SegmentCorruptionError(f"{path}: the record at byte {base + bad} is too short")
    sig_ok = (u32[pos + 16] >> 8) == 0xAAA507
    if not sig_ok.all():
        bad = int(pos[~sig_ok][0])
        raise SegmentCorruptionError(f"{path}: the record at byte {base + bad} does not hold a "
                                     "DELIVER frame")
    ts = u64[pos + 8].astype(np.int64)
    seq = u64[pos + 19].astype(np.int64)
    klen = arr[pos + 27].astype(np.int64)
    kstart = pos + 28
    kend = kstart + klen
    bend = pos + HEADER + length
    if (kend + 4 > bend).any():
        bad = int(pos[kend + 4 > bend][0])
        raise SegmentCorruptionError(f"{path}: record at byte {base + bad}: key longer than "
                                     "the record")
    blen = u32[kend].astype(np.int64)
    bstart = kend + 4
    if not np.array_equal(bstart + blen, bend):
        bad = int(pos[(bstart + blen) != bend][0])
        raise SegmentCorruptionError(f"{path}: record at byte {base + bad}: key and body lengths "
                                     "do not add up to the record length")
    if n > 1:
        step = np.diff(seq)
        if not (step == 1).all():
            i = int(np.nonzero(step != 1)[0][0])
            raise SegmentCorruptionError(f"{path}: sequence {int(seq[i + 1])} at byte "
                                         f"{base + int(pos[i + 1])} does not follow {int(seq[i])}")
    data = pa.py_buffer(buf)
    key = _compact(data, kstart, kend).view(pa.string())
    body = _compact(data, bstart, bend)
    try:
        key.validate(full=True)
    except pa.ArrowInvalid:
        raise SegmentCorruptionError(f"{path}: a key between bytes {base + int(pos[0])} and "
                                     f"{base + int(pos[-1])} is not valid UTF-8") from None
    return Columns(seq, ts, key, body)


def read_range(path: str, first_seq: int, last_seq: Optional[int], *, start_pos: int = 0,
               end_pos: Optional[int] = None, index: Optional[Tuple[np.ndarray, np.ndarray]] = None,
               verify_crc: bool = True, block_bytes: int = BLOCK_BYTES) -> Iterator[Columns]:
    """Yield :class:`Columns` for the records of one segment with
    ``first_seq <= sequence <= last_seq`` (``last_seq=None``: to the end of the file).

    ``start_pos``: a record start at or before ``first_seq`` (e.g. from the index; checked: if
    the first record read there is past ``first_seq``, the read restarts from byte 0).
    ``end_pos``: a hint where records past ``last_seq`` begin, to avoid reading further; if the
    records stop before ``last_seq`` there, the read goes on. ``index``: the segment's
    ``(seqs, positions)`` hints for the parallel walk. A torn tail ends the read.
    """
    idx_pos = index[1] if index is not None else None
    with open(path, "rb", buffering=0) as f:
        base = start_pos
        first_block = True
        soft_end = end_pos
        while True:
            size = os.fstat(f.fileno()).st_size
            stop = size if soft_end is None else min(size, soft_end)
            if base >= stop:
                if soft_end is not None and soft_end < size:
                    soft_end = None       # the hint was short of last_seq: go on
                    continue
                return
            f.seek(base)
            buf = f.read(min(block_bytes, stop - base))
            if len(buf) < HEADER:
                return
            hints = None
            if idx_pos is not None and len(idx_pos):
                lo, hi = np.searchsorted(idx_pos, [base + 1, base + len(buf)])
                hints = idx_pos[lo:hi] - base
            positions, after = walk(buf, len(buf), hints)
            if not len(positions):
                need = HEADER + _U32.unpack_from(buf, 0)[0]
                if base + need <= stop and need > len(buf):
                    # one record larger than the block: read exactly that record
                    f.seek(base)
                    buf = f.read(need)
                    positions, after = walk(buf, len(buf))
                if not len(positions):
                    if soft_end is not None and soft_end < size:
                        soft_end = None
                        continue
                    return        # a torn record at the end of the file
            if verify_crc:
                verify_crcs(buf, positions, after, path, base)
            cols = parse_block(buf, positions, path, base)
            seq = cols.sequence
            if first_block:
                first_block = False
                if seq[0] > first_seq and base != 0:
                    # the start position (an index hint) was wrong: read from the beginning
                    yield from read_range(path, first_seq, last_seq, start_pos=0, end_pos=None,
                                          index=None, verify_crc=verify_crc,
                                          block_bytes=block_bytes)
                    return
            lo = 0
            if seq[0] < first_seq:
                lo = int(np.searchsorted(seq, first_seq, side="left"))
            hi = len(seq)
            done = False
            if last_seq is not None and seq[-1] >= last_seq:
                hi = int(np.searchsorted(seq, last_seq, side="right"))
                done = True
            if lo < hi:
                yield cols.slice(lo, hi) if (lo or hi < len(seq)) else cols
            if done:
                return
            base += after
