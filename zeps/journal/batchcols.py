"""Batch records for the columnar reader (:mod:`.columnar`): a run of consecutive batch records
of a block checked all at once, and the fields of all their messages found without a Python
step per message. Needs numpy. (The caller validates the UTF-8 of keys and producer ids.)

Every check :func:`zeps.journal.record.parse_records` makes of a batch record is made over the
whole run with numpy (length, header timestamp equal to the frame's, the expected sequences,
``1 <= count <= what the frame can hold``, timestamps that never go back, a producer extension's
non-empty id and ``1 <= pseq <= 2^64 - count``, the CRC-32Cs with one call of
:func:`.blockcrc.first_bad_crc`); the entries of every batch are walked *in parallel*
(each step advances every batch still walking by one entry; the last few long batches finish in
Python with :func:`zeps.protocol.batch.walk`), and each batch's walk must end exactly at the end
of its frame after ``count`` entries. Keys are UTF-8 validated in one pyarrow call. The first
record that fails is reported by index, and the caller asks ``parse_records`` why.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..protocol.batch import DELIVER_HEAD_SIZE, MIN_ENTRY, BadEntries, walk as walk_entries
from .record import EXT_FIXED, HEADER_SIZE, LENGTH_MASK, MAX_PSEQ, PID_LEN_OFFSET, TS_OFFSET
from .blockcrc import first_bad_crc
from .walk import be_view

#: below this many batches still walking, finish them one by one in Python
_PARALLEL_MIN = 16
# offsets in a DELIVER-BATCH frame (layout in zeps/protocol/batch.py)
_TS_AT, _SEQ_AT, _COUNT_AT = 3, 11, 19


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask)) if mask.any() else len(mask)


class BatchRun:
    """The valid leading batch records of a run (whole records at ``pos``, ending at
    ``after``, each holding a DELIVER-BATCH frame, after a producer extension if flagged) and
    the fields of their messages: the first ``n`` records pass every check but the UTF-8 of
    keys and producer ids (the caller validates them with one pyarrow call each); per record
    ``pos``, ``seq``, ``ts``, ``count`` and ``row0`` (its first message's row); per message
    ``kstart``, ``kend`` (key), ``bend`` (body end; the body starts at ``kend + 4``).
    ``flagged`` is None if no record of the run has a producer extension, else per record
    whether it has one, with ``pstart``/``pend`` (its id) and ``pseq`` (its first message's)."""

    def __init__(self, buf: bytes, pos: np.ndarray, after: int, expect_seq: int,
                 last_ts: Optional[int], verify_crc: bool):
        u32 = be_view(buf, 4)
        u64 = be_view(buf, 8)
        word = u32[pos].astype(np.int64)
        length = word & LENGTH_MASK
        n = _first(length < DELIVER_HEAD_SIZE + MIN_ENTRY)
        pos, length, flagged = pos[:n], length[:n], word[:n] > LENGTH_MASK
        ext = np.zeros(n, dtype=np.int64)
        if flagged.any():           # whole records: their pid_len is in the block
            plen = np.where(flagged, np.frombuffer(buf, dtype=np.uint8)[pos + PID_LEN_OFFSET]
                            .astype(np.int64), 0)
            n = min(n, _first(flagged & (plen == 0)))
            ext = np.where(flagged, EXT_FIXED + plen, 0)
            pstart = pos + PID_LEN_OFFSET + 1
            pseq = u64[pstart + plen].astype(np.uint64)
        else:
            flagged = None
        frame = pos + HEADER_SIZE + ext
        fend = frame + length
        ts = u64[pos + TS_OFFSET].astype(np.int64)
        n = min(n, _first(u64[frame + _TS_AT].astype(np.int64) != ts))
        count = u32[frame + _COUNT_AT].astype(np.int64)
        n = min(n, _first((count < 1) | (count > (length - DELIVER_HEAD_SIZE) // MIN_ENTRY)))
        count = count[:n]
        if flagged is not None:     # 1 <= pseq and pseq + count - 1 <= 2^64 - 1
            top = np.uint64(MAX_PSEQ) - (count - 1).astype(np.uint64)
            n = min(n, _first(flagged[:n] & ((pseq[:n] == 0) | (pseq[:n] > top))))
            count = count[:n]
        row0 = np.zeros(n, dtype=np.int64)
        np.cumsum(count[:-1], out=row0[1:])
        seq = u64[frame[:n] + _SEQ_AT].astype(np.int64)
        n = min(n, _first(seq != expect_seq + row0))
        if n:
            back = np.empty(n, dtype=bool)
            back[0] = last_ts is not None and int(ts[0]) < last_ts
            np.less(ts[1:n], ts[:n - 1], out=back[1:])
            n = min(n, _first(back))
        if verify_crc and n:
            n = min(n, first_bad_crc(buf, pos[:n], int(fend[n - 1])))
        starts, ok = _walk(buf, frame[:n] + DELIVER_HEAD_SIZE, fend[:n], count[:n], row0[:n])
        n = min(n, _first(~ok))
        rows = int(row0[n - 1] + count[n - 1]) if n else 0
        arr = np.frombuffer(buf, dtype=np.uint8)
        self.kstart = starts[:rows] + 1
        self.kend = self.kstart + arr[starts[:rows]].astype(np.int64)
        self.bend = np.empty(rows, dtype=np.int64)
        self.bend[:-1] = starts[1:rows]
        if rows:
            last_rows = row0[:n] + count[:n] - 1         # each batch's last message ends its frame
            self.bend[last_rows] = fend[:n]
        self.n = n
        self.pos, self.seq, self.ts, self.count, self.row0 = (
            pos[:n], seq[:n], ts[:n], count[:n], row0[:n])
        self.rows = rows
        self.flagged = None
        if flagged is not None and flagged[:n].any():
            self.flagged, self.pseq = flagged[:n], pseq[:n]
            self.pstart, self.pend = pstart[:n], (pstart + ext - EXT_FIXED)[:n]

    def record_of(self, row: int) -> int:
        """Index of the batch record holding message ``row``."""
        return int(np.searchsorted(self.row0, row, side="right")) - 1

    def row_seq(self, lo: int, hi: int) -> np.ndarray:
        """Sequences of messages ``lo..hi-1`` (the first of the run is ``seq[0]``)."""
        return self.seq[0] + np.arange(lo, hi, dtype=np.int64)

    def row_pseq(self, lo: int, hi: int) -> np.ndarray:
        """Producer sequences (uint64) of messages ``lo..hi-1``: their record's ``pseq`` plus
        their index in it (meaningless where the record has no producer)."""
        rec = np.repeat(np.arange(self.n), self.count)[lo:hi]
        within = (np.arange(lo, hi, dtype=np.int64) - self.row0[rec]).astype(np.uint64)
        return self.pseq[rec] + within

    def row_ts(self, lo: int, hi: int) -> np.ndarray:
        """Timestamps of messages ``lo..hi-1``."""
        return np.repeat(self.ts, self.count)[lo:hi]


def _walk(buf: bytes, start: np.ndarray, fend: np.ndarray, count: np.ndarray,
          row0: np.ndarray):
    """Entry start positions of all batches (flat, batch after batch: batch ``b``'s entry
    ``i`` at ``row0[b] + i``) and which batches' entries walk exactly (``count`` entries
    filling ``start[b]..fend[b]``)."""
    nb = len(start)
    total = int(row0[-1] + count[-1]) if nb else 0
    out = np.zeros(total, dtype=np.int64)
    ok = np.ones(nb, dtype=bool)
    arr = np.frombuffer(buf, dtype=np.uint8)
    u32 = be_view(buf, 4)
    top = len(u32) - 1
    cur = start.copy()
    active = np.arange(nb)
    s = 0
    while len(active):
        if len(active) < _PARALLEL_MIN:
            for b in active.tolist():
                try:
                    offs = walk_entries(buf, int(cur[b]), int(fend[b]), int(count[b]) - s, False)
                except BadEntries:
                    ok[b] = False
                    continue
                out[row0[b] + s:row0[b] + count[b]] = offs[:-1]
            break
        c = cur[active]
        lim = fend[active]
        out[row0[active] + s] = c
        good = c + MIN_ENTRY <= lim
        kend = c + 1 + arr[np.minimum(c, len(arr) - 1)].astype(np.int64)
        good &= kend + 4 <= lim
        nxt = kend + 4 + u32[np.minimum(kend, top)].astype(np.int64)
        good &= nxt <= lim
        cur[active] = nxt
        s += 1
        done = count[active] == s
        good &= ~done | (nxt == lim)            # the last entry must end the frame exactly
        ok[active[~good]] = False
        active = active[good & ~done]
    return out, ok
