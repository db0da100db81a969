"""Finding the records of a block of a segment: their start positions, by walking the
``length`` fields (and ``pid_len`` of records with a producer extension) - sequentially, or in
parallel (numpy) from every index entry in the block at once, each walker having to land exactly
on the next entry, so the index is checked, never trusted. Part of the columnar reader
(:mod:`.columnar`); needs numpy."""
from __future__ import annotations

import struct
from typing import List, Optional, Tuple

import numpy as np

from .record import EXT_FIXED, HEADER_SIZE, LENGTH_MASK, PID_LEN_OFFSET, PRODUCER_FLAG, record_span
from .speedups import journalc

_U32 = struct.Struct(">I")
_PARALLEL_MIN = 32     # below this many live walkers, finish them one by one in Python
_RUN_CHUNK = 8192


def be_view(buf: bytes, width: int) -> np.ndarray:
    """An overlapping, unaligned view: element ``i`` is the big-endian integer at bytes
    ``[i, i + width)``; gathering ``view[positions]`` is one vectorised fancy index."""
    return np.ndarray(buffer=buf, dtype=">u%d" % width, shape=(max(len(buf) - width + 1, 0),),
                      strides=(1,))


def spans(u32: np.ndarray, u8: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Bytes each record at ``pos`` takes (:func:`~.record.record_span`, vectorised); ``u32`` is
    :func:`be_view` ``(buf, 4)``, ``u8`` the block's bytes, and each record's header must be in
    the block."""
    word = u32[pos].astype(np.int64)
    span = HEADER_SIZE + (word & LENGTH_MASK)      # a headers extension is in the length
    flagged = word >= PRODUCER_FLAG
    if flagged.any():
        at = np.minimum(pos + PID_LEN_OFFSET, len(u8) - 1)
        span += np.where(flagged, EXT_FIXED + u8[at].astype(np.int64), 0)
    return span


def _walk_sequential(buf: bytes, start: int, limit: int) -> Tuple[List[np.ndarray], int]:
    """Positions of the complete records in ``buf[start:limit]`` walked one by one, and the
    position after the last one. Runs of equal-sized records are confirmed vectorised (every
    predicted start checked to hold the same length); sizes that vary go through the loop."""
    unpack = _U32.unpack_from
    u32 = be_view(buf, 4)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    out: List[np.ndarray] = []
    pending: List[int] = []
    append = pending.append
    p = start
    slow_budget = 0
    while p + HEADER_SIZE <= limit:
        word = unpack(buf, p)[0]
        stride = HEADER_SIZE + word if word <= LENGTH_MASK else record_span(buf, p, limit)
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
            differ = u32[cand] != word
            if word >= PRODUCER_FLAG:   # the same pid_len too, so the same size
                differ |= u8[cand + PID_LEN_OFFSET] != buf[p + PID_LEN_OFFSET]
            mism = np.nonzero(differ)[0]
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
            word = unpack(buf, p)[0]
            if record_span(buf, p, limit) != stride:
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
    u32 = be_view(buf, 4)
    u8 = np.frombuffer(buf, dtype=np.uint8)
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
            nxt = np.where(live, c + spans(u32, u8, c), cur)
            if (nxt > targets).any():
                return None
            steps.append(np.where(live, cur, -1))
            cur = nxt
            live = cur < targets
            n_live = int(live.sum())
        for k in np.nonzero(live)[0].tolist():
            p, t = int(cur[k]), int(targets[k])
            tail = []
            while p < t:
                if p + HEADER_SIZE > t:
                    return None
                tail.append(p)
                p += record_span(buf, p, t)
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
    just after the last complete record: :func:`walk_py`, or its C twin (a sequential walk, which
    needs no hints) where :mod:`.speedups` has it."""
    if journalc is None:
        return walk_py(buf, limit, hints)
    pos, after = journalc.walk(buf, limit)
    return np.frombuffer(pos, dtype=np.int64), after


def walk_py(buf: bytes, limit: int, hints: Optional[np.ndarray] = None
            ) -> Tuple[np.ndarray, int]:
    """:func:`walk` in numpy (the definition). ``hints``: other record starts (from the index);
    used only if strictly increasing, and checked."""
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
