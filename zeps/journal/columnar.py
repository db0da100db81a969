"""Reading a stream as Arrow columns (for Spark): the records :class:`JournalReader` returns,
without a Python object per record.

``read_columns(view, first, last)`` goes through the journal's one read loop
(:meth:`StreamView._read <zeps.journal.view.StreamView._read>`) with a column sink instead of a
record sink, so the segments, the index (loaded and checked by :mod:`.recovery`), the torn-tail
rule and the corruption errors (:class:`CorruptionError` naming file and byte offset) are those
of the per-record reader. What differs is how a block is parsed:

1. one ``os.preadv`` of a block (default 4 MiB, less when the index says where the last wanted
   record ends) into a buffer reused from block to block (:mod:`.blockbuffer`). A block about
   the size of a core's L2 cache stays in cache through the passes over it: 4 MiB blocks read
   1.5x (C loops) to 1.7x (numpy) faster than 32 MiB ones here. With the C loops, the one pass
   over a leading run of plain records reads a *sealed* segment's block through a memory map
   instead (:meth:`.blockbuffer.BlockBuffer.mapped`: no copy; never the last segment, the one
   ZEPS truncates), and a block it does not take whole is read as above;
2. the record positions are found by walking the ``length`` fields (:mod:`.walk`). The
   segment's sparse index gives thousands of known record starts per block, so the walk runs
   *in parallel from every index entry at once* with numpy (each step advances every walker by
   one record), and each walker must land exactly on the next entry: that chain check proves the
   positions are the ones a sequential walk from the block start would find (the index is never
   trusted: a wrong or missing entry falls back to the sequential walk, a plain Python loop with
   a vectorised fast path for runs of equal-sized records);
3. every check of :func:`zeps.journal.record.parse_records` is made over all records of the block
   at once, in :mod:`.plainrun` (minimal length, DELIVER signature, key and body lengths adding up,
   a valid producer extension where one is flagged, the expected sequences, timestamps that never
   go back), through overlapping big-endian numpy views of the block. Unless ``verify_crc=False``,
   the CRC-32Cs of all records are checked with *one* ``google_crc32c`` call over a transformed
   copy of the block (:mod:`.blockcrc`); only a block that fails is checked record by record, to
   find the bad one. The first record that fails any check is handed to ``parse_records`` itself,
   which says what is wrong with it, so both readers stop at the same byte for the same reason; A
   run of batch records (a DELIVER-BATCH frame each) is checked the same way, all at once, by
   :class:`~.batchcols.BatchRun`, which walks the entries of all its batches in parallel: a batch
   record gives one row per message, exactly the rows of a journal holding the same messages one
   record each;
4. ``key`` and ``body`` are compact copies of their ranges of the block (:mod:`.ranges`):
   ``pyarrow.Array.from_buffers`` over the block itself, with interleaved offsets
   (``[key0 start, key0 end, key1 start, ...]``) so the even elements are the keys and the odd
   ones the bytes in between; ``Array.filter`` with an even mask then copies just the keys into
   a compact array (C++). Same for bodies. Keys are UTF-8 validated
   (a key that is not is reported as corruption; the per-record reader decodes keys lazily).
   Producer ids and sequences (records with a producer extension) become the nullable
   ``producer`` / ``pseq`` columns; a block without one gets all-null columns, built in O(1);
5. records with a headers extension (messages published with headers, PUBLISH-H) form runs of
   their own, read record by record through ``parse_records`` (one Python object per record)
   into the same columns and a ``headers`` column (a list of ``{key, value}`` structs, in
   order); rows of records without headers have a null ``headers``, built in O(1).

numpy and pyarrow are the ``spark`` extra's dependencies: ``zeps.journal`` does not import this
module; import it where it is used.

**The C loops.** Where :mod:`.speedups` has the optional extension ``zeps.journal._journalc``,
steps 2-4 run as C loops over the block instead (a sequential walk; the kinds of the records;
every check of step 3 and the CRC-32C record by record, in one pass; the copies of keys and
bodies). A block that starts with records without extensions (most journals: one record per
message, or batch records of ``publish_batch``, no producer) goes further: ``fused_columns``
walks, checks and copies that run in *one* pass (:func:`.plainrun.fused_run`; 12 -> 16.5M
rows/s alone here for plain records), and the steps above read whatever follows it. The numpy
code above stays their definition and the fallback (``ZEPS_PURE_PYTHON=1``), and
``tests/test_journalc.py`` checks the two give the same columns and the same errors for any
block.
"""
from __future__ import annotations

import logging
from typing import Iterator, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from ..protocol.batch import DELIVER_BATCH_ID
from ..protocol.deliver import SIGNATURE
from .batchcols import BatchRun
from .blockbuffer import BlockBuffer
from .columns import HEADERS_TYPE, Columns
from .plainrun import (LENGTH_MASK, _Block, _first, _first_bad_utf8,  # noqa: F401 (tests)
                       _first_bad_utf8_mask, fused_run)
from .record import (BAD, END, EXT_FIXED, HEADER_SIZE, HEADERS_FLAG, LIMIT, PID_LEN_OFFSET,
                     PRODUCER_FLAG, SHORT, BatchRecord, parse_records, record_span)
from .ranges import _compact, _compact_py, _i64  # noqa: F401 (_compact_py: tests)
from .segment import ScanResult, Segment
from .speedups import journalc
from .walk import be_view, walk

log = logging.getLogger("zeps.journal")

BLOCK_BYTES = 4 << 20
#: signature and command id of a DELIVER-BATCH frame (a batch record) as the top 24 bits of its
#: first u32
_BATCH_HEAD = int.from_bytes(SIGNATURE + bytes((DELIVER_BATCH_ID,)), "big")


# ----------------------------------------------------------------------------- the sink

class ColumnSink:
    """Collects :class:`Columns` for the journal's read loop: the records up to ``last``
    (inclusive; None for all), one block per read (the caller yields between blocks)."""

    def __init__(self, last: Optional[int], verify_crc: bool, block_bytes: int,
                 blocks: Optional[BlockBuffer] = None):
        self.out: List[Columns] = []
        self.count = 0
        self.last = last
        self.verify_crc = verify_crc
        self.block_bytes = block_bytes
        self.blocks = blocks or BlockBuffer()

    def full(self) -> bool:
        return False

    def after(self) -> int:
        """The sequence after the last row collected (0 if none)."""
        return _u64(self.out[-1].sequence[-1]) + 1 if self.out else 0

    def parse(self, seg: Segment, pos: int, seq: int, limit: int, want_seq: int,
              last_ts: Optional[int], exact: bool = False) -> ScanResult:
        """Parse blocks from ``pos`` (record ``seq``) up to ``limit`` until a block yields
        rows (LIMIT), the records past ``last`` begin (LIMIT), ``limit`` is reached (END) or a
        record is short (SHORT) or bad (BAD) - the statuses of :meth:`Segment.parse`. A
        segment of a compacted stream (``seg.gaps``: its sequences may have gaps) is read
        record by record (:meth:`_parse_gapped`)."""
        if seg.gaps:
            return self._parse_gapped(seg, pos, seq, limit, want_seq, last_ts, exact)
        last = self.last
        need = 0
        while True:
            if pos >= limit:
                return ScanResult(END, pos, seq, last_ts, None)
            size = min(limit - pos, self.block_bytes)
            end_hint = self._end_hint(seg)
            if end_hint is not None and end_hint > pos:
                size = min(size, end_hint - pos)
            size = max(size, min(need, limit - pos))
            buf = None
            if journalc is not None and seg.sealed:      # the C pass reads the map itself
                buf = self.blocks.mapped(seg, size, pos)
            if buf is None:
                buf = self.blocks.read(seg.fd, size, pos)
            if len(buf) >= 1 << 31:  # pragma: no cover - int32 Arrow offsets; blocks are 4 MiB
                raise ValueError(f"{seg.log_path}: a record at byte {pos} is over 2 GiB")
            at_end = pos + len(buf) >= limit or len(buf) < size
            if journalc is not None:
                fast = self._fused_fast(buf, seq, want_seq, last_ts)
                if fast is not None:
                    used, seq, last_ts, emitted, stopped = fast
                    pos += used
                    need = 0
                    if emitted or stopped or (last is not None and seq > last):
                        return ScanResult(LIMIT, pos, seq, last_ts, None)
                    continue
            if isinstance(buf, memoryview):   # the general path reads a copy, as it always did
                buf = self.blocks.read(seg.fd, size, pos)
            hints = None
            idx = seg.index
            if idx is not None and journalc is None:     # (the C walk needs no hints)
                h = idx.positions_between(pos, pos + len(buf))
                if len(h):
                    hints = np.frombuffer(h, dtype=np.uint64).astype(np.int64) - pos
            positions, after = walk(buf, len(buf), hints)
            if not len(positions):
                need = record_span(buf, 0, len(buf))
                if not at_end and pos + need <= limit:
                    continue                          # one record longer than the block
                return ScanResult(SHORT, pos, seq, last_ts, need)
            need = 0
            res, seq, last_ts, emitted = self._block(buf, positions, after, pos, seq, want_seq,
                                                     last_ts)
            if res is not None:
                return res
            pos += after
            if emitted:
                return ScanResult(LIMIT, pos, seq, last_ts, None)
            # nothing wanted yet: next block

    def _end_hint(self, seg: Segment) -> Optional[int]:
        """Where the records past ``last`` begin in ``seg``, if its index says so: a binary
        search of the index file, asked once per segment of a read (the blocks'
        :class:`BlockBuffer` keeps the answer: an index entry, once written, never changes)."""
        if self.last is None or seg.index is None:
            return None
        memo = self.blocks.end_hints
        hint = memo.get(seg)
        if hint is None or memo.get("last") != self.last:
            if memo.get("last") != self.last:
                memo.clear()
                memo["last"] = self.last
            hint = seg.index.after_seq(self.last)
            if hint is not None:
                memo[seg] = hint
        return hint

    def _fused_fast(self, buf, seq: int, want_seq: int, last_ts: Optional[int]):
        """The leading run of plain and batch records without extensions of a block in one C
        pass (:func:`~.plainrun.fused_run`), or None: then the general path reads the block.
        Returns ``(bytes used, next seq, last ts, whether rows were collected, whether the run
        ended at last)``; the records after the run are left to the next pass of
        :meth:`parse`."""
        got = fused_run(buf, seq, want_seq, last_ts, self.verify_crc, self.last)
        if got is None:
            return None
        used, nseq, last_t, cols, stopped = got
        if cols is not None:
            self.out.append(cols)
            self.count += len(cols)
        return used, nseq, last_t, cols is not None, stopped

    def _block(self, buf: bytes, positions: np.ndarray, after: int, pos: int, seq: int,
               want_seq: int, last_ts: Optional[int]):
        """Columns of the walked records of a block read at ``pos``, run by run: a run of
        plain records is checked all at once by :class:`_Block`, a run of batch records by
        :class:`~.batchcols.BatchRun`. Returns ``(ScanResult or None if the whole block was
        consumed, next seq, last ts, whether rows were collected)``."""
        kind = _kinds(buf, positions)
        edges = np.flatnonzero(np.diff(kind)) + 1
        bounds = [0] + edges.tolist() + [len(positions)]
        emitted = False
        runs = (self._plain_run, self._batch_run, self._headers_run)
        for i, j in zip(bounds[:-1], bounds[1:]):
            run = runs[kind[i]]
            res, seq, last_ts, got = run(buf, positions, after, i, j, pos, seq, want_seq,
                                         last_ts)
            emitted |= got
            if res is not None:
                return res, seq, last_ts, emitted
        return None, seq, last_ts, emitted

    def _plain_run(self, buf, positions, after, i, j, pos, seq, want_seq, last_ts):
        """Plain records ``positions[i:j]``: see :meth:`_block`."""
        last = self.last
        block = _Block(buf, positions[i:j], seq, last_ts, self.verify_crc)
        n = block.n
        lo = int(np.searchsorted(block.seq, want_seq)) if want_seq > seq else 0
        hi = n if last is None else int(np.searchsorted(block.seq, last, side="right"))
        stop = hi < n                             # the records past `last` begin in here
        why = "the block's CRC-32C check failed"    # if parse_records finds it fine
        emitted = False
        if lo < hi:
            cols, ok = block.columns(lo, hi)
            if ok < hi - lo:
                n, hi, stop = lo + ok, lo + ok, False
                why = "key is not valid UTF-8"
            if len(cols):
                self.out.append(cols)
                self.count += len(cols)
                emitted = True
        k = hi if stop else n
        if k < n:
            npos = int(block.pos[k])
        elif i + n < len(positions):
            npos = int(positions[i + n])
        else:
            npos = after
        nseq = seq + k
        nts = int(block.ts[k - 1]) if k else last_ts
        if stop:
            return ScanResult(LIMIT, pos + npos, nseq, nts, None), nseq, nts, emitted
        if n < j - i:                             # positions[i + n] is not a valid record
            return (ScanResult(BAD, pos + npos, nseq, nts,
                               _reason(buf, int(positions[i + n]), nseq, nts, why)),
                    nseq, nts, emitted)
        return None, nseq, nts, emitted

    def _parse_gapped(self, seg: Segment, pos: int, seq: int, limit: int, want_seq: int,
                      last_ts: Optional[int], exact: bool) -> ScanResult:
        """:meth:`parse` for a segment whose sequences may have gaps (compaction removed
        records, :mod:`.compaction`): the block's records are read by
        :meth:`Segment.parse` (records whole, positions from their sizes), the rows built
        from them one by one: the same rows, stops and errors, without the vectorised checks
        (which assume consecutive sequences)."""
        last = self.last
        recs: list = []
        res = seg.parse(pos, seq, limit, recs, max_records=1 << 16, max_bytes=self.block_bytes,
                        last_ts=last_ts, chunks=True, exact=exact)
        rows: list = []
        keys: list = []
        p, ts = pos, last_ts
        stop = None
        for r in recs:
            for m in (r.records() if isinstance(r, BatchRecord) else (r,)):
                if m.sequence < want_seq:
                    continue
                if last is not None and m.sequence > last:
                    stop = ScanResult(LIMIT, p, r.sequence, ts, None)
                    break
                try:
                    keys.append(m.key)
                except UnicodeDecodeError:
                    stop = ScanResult(BAD, p, r.sequence, ts, "key is not valid UTF-8")
                    break
                rows.append(m)
            if stop is not None:
                break
            p += r.size
            ts = r.timestamp
        if rows:
            self.out.append(_record_columns(rows, keys))
            self.count += len(rows)
        if stop is not None:
            return stop
        if rows and res.status == END:
            return ScanResult(LIMIT, res.pos, res.seq, res.last_ts, None)
        return res

    def _headers_run(self, buf, positions, after, i, j, pos, seq, want_seq, last_ts):
        """Records with a headers extension ``positions[i:j]``, read one by one by
        ``parse_records`` (so they are checked by the one definition of a valid record); keys
        are UTF-8 validated here as elsewhere in this reader."""
        start = int(positions[i])
        stop = int(positions[j]) if j < len(positions) else after
        last = self.last
        if last is not None and last < max(seq, want_seq):
            return ScanResult(LIMIT, pos + start, seq, last_ts, None), seq, last_ts, False
        recs: list = []
        run = bytes(memoryview(buf)[start:stop])    # parse_records takes bytes (copies out)
        res = parse_records(run, 0, stop - start, seq, recs, want_seq=want_seq, last_ts=last_ts,
                            max_records=(1 << 62) if last is None else
                            last - max(seq, want_seq) + 1)
        res.pos += start
        keys = []
        for k, r in enumerate(recs):
            try:
                keys.append(r.key)
            except UnicodeDecodeError:       # one message per record: its position is known
                bpos = int(positions[i + r.sequence - seq])
                del recs[k:]
                pre = parse_records(run, 0, bpos - start, seq, None, last_ts=last_ts)
                res = ScanResult(BAD, bpos, r.sequence, pre.last_ts, "key is not valid UTF-8")
                break
        emitted = bool(recs)
        if recs:
            self.out.append(_record_columns(recs, keys))
            self.count += len(recs)
        if res.status == END:
            return None, res.seq, res.last_ts, emitted
        res.pos += pos
        return res, res.seq, res.last_ts, emitted

    def _batch_run(self, buf, positions, after, i, j, pos, seq, want_seq, last_ts):
        """Batch records ``positions[i:j]``: see :meth:`_block`. A read that stops inside a
        batch (``last``) stops at that batch's record, as :func:`parse_records` does."""
        last = self.last
        run = BatchRun(buf, positions[i:j], int(positions[j]) if j < len(positions) else after,
                       seq, last_ts, self.verify_crc)
        n, rows = run.n, run.rows
        why = "the block's CRC-32C check failed"
        data = pa.py_buffer(buf)
        key = None
        if run.flagged is not None:
            bad = _first_bad_utf8_mask(buf, run.pstart, run.pend, run.flagged)
            if bad < n:
                n, rows = bad, int(run.row0[bad])
                why = "producer id is not valid UTF-8"
        if rows:
            key = _compact(data, run.kstart[:rows], run.kend[:rows], pa.string())
            try:
                key.validate(full=True)
            except pa.ArrowInvalid:
                n = run.record_of(_first_bad_utf8(buf, run.kstart[:rows], run.kend[:rows]))
                rows = int(run.row0[n])
                why = "key is not valid UTF-8"
        lo = min(max(want_seq - seq, 0), rows)
        hi = rows if last is None else min(max(last - seq + 1, 0), rows)
        emitted = False
        if lo < hi:
            body = _compact(data, run.kend[lo:hi] + 4, run.bend[lo:hi])
            producer, pseq = _batch_producers(data, run, lo, hi)
            self.out.append(Columns(run.row_seq(lo, hi), run.row_ts(lo, hi),
                                    key.slice(lo, hi - lo), body, producer, pseq))
            self.count += hi - lo
            emitted = True
        if hi < rows:                             # the messages past `last` begin in here
            b = run.record_of(hi)
            nts = int(run.ts[b - 1]) if b else last_ts
            return (ScanResult(LIMIT, pos + int(run.pos[b]), int(run.seq[b]), nts, None),
                    int(run.seq[b]), nts, emitted)
        nseq = seq + rows
        nts = int(run.ts[n - 1]) if n else last_ts
        if n < j - i:                             # positions[i + n] is not a valid record
            p = int(positions[i + n])
            return (ScanResult(BAD, pos + p, nseq, nts, _reason(buf, p, nseq, nts, why)),
                    nseq, nts, emitted)
        return None, nseq, nts, emitted


def _record_columns(recs, keys) -> Columns:
    """Columns of records read one by one (:class:`~.record.Record` objects). Sequences and
    timestamps are u64 on disk: read as uint64 and cast, as the vectorised paths do
    (``batchcols``), so a value past int64 (a forged record) wraps the same way there and
    here instead of raising OverflowError."""
    return Columns(np.array([r.sequence for r in recs], dtype=np.uint64).astype(np.int64),
                   np.array([r.timestamp for r in recs], dtype=np.uint64).astype(np.int64),
                   pa.array(keys, type=pa.string()),
                   pa.array([r.body for r in recs], type=pa.binary()),
                   pa.array([r.producer for r in recs], type=pa.string()),
                   pa.array([r.pseq for r in recs], type=pa.uint64()),
                   pa.array([None if r.header_block is None else
                             [{"key": n, "value": v} for n, v in r.headers] for r in recs],
                            type=HEADERS_TYPE))


def _batch_producers(data: pa.Buffer, run: BatchRun, lo: int, hi: int
                     ) -> Tuple[pa.Array, pa.Array]:
    """The nullable producer id and pseq columns of messages ``lo..hi-1`` of a batch run: a
    message of a record with a producer extension has its record's id and ``pseq + i``."""
    if run.flagged is None:
        return pa.nulls(hi - lo, pa.string()), pa.nulls(hi - lo, pa.uint64())
    f = run.flagged
    ids = _compact(data, run.pstart[f], run.pend[f], pa.string())
    rec = np.repeat(np.arange(len(f)), run.count)[lo:hi]
    mask = ~f[rec]
    pick = pa.array((np.cumsum(f) - 1)[rec], type=pa.int64(), mask=mask)
    return ids.take(pick), pa.array(run.row_pseq(lo, hi), type=pa.uint64(), mask=mask)


def _kinds(buf: bytes, positions: np.ndarray) -> np.ndarray:
    """Each record's kind (int8): 1 a batch record, 2 one with headers, 0 a plain one;
    :func:`_kinds_py` or its C twin."""
    if journalc is None:
        return _kinds_py(buf, positions)
    return np.frombuffer(journalc.kinds(buf, _i64(positions)), dtype=np.int8)


def _kinds_py(buf: bytes, positions: np.ndarray) -> np.ndarray:
    """:func:`_kinds` in numpy (the definition)."""
    kind = _batch_mask(buf, positions).astype(np.int8)      # 1: batch records
    kind[(be_view(buf, 4)[positions] & HEADERS_FLAG) != 0] = 2   # 2: with headers
    return kind


def _batch_mask(buf: bytes, positions: np.ndarray) -> np.ndarray:
    """Which of the (whole) records at ``positions`` hold a DELIVER-BATCH frame (after their
    producer extension, if flagged)."""
    u32 = be_view(buf, 4)
    word = u32[positions].astype(np.int64)
    ext = 0
    flagged = word >= PRODUCER_FLAG
    if flagged.any():
        plen = np.frombuffer(buf, dtype=np.uint8)[np.minimum(positions + PID_LEN_OFFSET,
                                                             len(buf) - 1)]
        ext = np.where(flagged, EXT_FIXED + plen.astype(np.int64), 0)
    at = np.minimum(positions + HEADER_SIZE + ext, len(u32) - 1)
    return (u32[at] >> 8) == _BATCH_HEAD


def _reason(buf: bytes, p: int, seq: int, last_ts: Optional[int], otherwise: str) -> str:
    """What :func:`parse_records` (the journal's one definition of a valid record) says is
    wrong with the record at ``p``; ``otherwise`` if it finds nothing (a check only this reader
    makes: UTF-8 keys, the 2^-32 case of the block CRC check)."""
    res = parse_records(bytes(memoryview(buf)[p:]), 0, len(buf) - p, seq, None, last_ts=last_ts)
    return res.info if res.status == BAD else otherwise


def _u64(sequence) -> int:
    """A sequence of a column (int64, the u64 on disk cast: past 2^63-1 it wraps) as on disk."""
    return int(sequence) & 0xFFFF_FFFF_FFFF_FFFF


def read_columns(view, first: int, last: Optional[int] = None, *, verify_crc: bool = True,
                 block_bytes: int = BLOCK_BYTES) -> Iterator[Columns]:
    """Yield :class:`Columns` for the records ``first..last`` (inclusive; ``last=None``: to the
    end) of a :class:`~zeps.journal.JournalReader` (or :class:`~zeps.journal.Journal`), in
    order, one block at a time. Same records, same end and same errors as
    ``view.read_from(first, end_seq=last)``; records that retention deleted are skipped with a
    warning on the ``zeps.journal`` logger, those compaction removed silently.
    ``verify_crc=False`` skips the CRC check (the other checks stay)."""
    view._check_open()
    seq = max(first, 1)
    cursor = None
    blocks = BlockBuffer()
    while last is None or seq <= last:
        sink, cursor = view._read(seq, lambda: ColumnSink(last, verify_crc, block_bytes, blocks),
                                  cursor)
        if not sink.out:
            if last is not None and seq < view.first_seq:
                log.warning("journal %s: records %d..%d were deleted by retention",
                            view.stream_dir, seq, last)
            return
        got = _u64(sink.out[0].sequence[0])
        kept = view._firsts[0] if view._firsts else got
        if got > seq and seq < kept:      # (the gaps of a compacted stream are no loss)
            log.warning("journal %s: records %d..%d were deleted by retention; continuing at %d",
                        view.stream_dir, seq, min(got, kept) - 1, got)
        yield from sink.out
        seq = _u64(sink.out[-1].sequence[-1]) + 1
