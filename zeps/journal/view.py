"""Reading a stream: the read logic shared by the writer (:class:`~zeps.journal.Journal`), the
lock-free read-only :class:`~zeps.journal.JournalReader`, and both ways of reading records -
:class:`Record` objects (:class:`RecordSink`) and Arrow columns (:mod:`.columnar`).

All reads go through :meth:`StreamView._read`: find the segment (``bisect`` on the in-memory
list of first sequences), find the start (binary search in the sparse index), then let a *sink*
parse from there (blocks read with ``os.pread``; the sink decides how to parse them and what to
build). Whatever sink parses, it reports where and why it stopped (a :class:`ScanResult`), and
this module alone decides what that means - so both readers follow the same rules:

* **Torn tail.** A short or bad record in the *last* segment, after its last index entry (or in
  a last segment without entries), is the end of the stream for now: a record the writer has
  not finished writing, or a torn tail the writer cuts on its next open. The index is written
  after the log bytes it points to, so a record before the last entry was whole when the entry
  was written: a short or bad record there is corruption (after the file size is re-read, in
  case the read raced the writer). The writer's own view (which recovered its tail on open) has
  no torn tail: anything short or bad in it is corruption.
* **Corruption.** A short or bad record in a sealed segment, or a segment that does not start
  with the sequence after its predecessor's last one, raises :class:`CorruptionError` naming
  the file and byte offset - after the good records before it were returned (the next read
  raises).
* **Segments come and go.** The writer changes the list itself; a reader re-lists the directory
  when it reaches the end of the last segment it knows (so it finds rolled segments), lists
  again before believing a gap between segments (a listing taken while files are created is not
  a snapshot), and tolerates segments that retention deleted: it continues at the first kept
  sequence (:class:`~zeps.journal.iterator.RecordIterator` reports the gap).
* **Wrong index.** An index entry that points at a wrong record in a sealed segment makes the
  read rebuild that segment's index in memory and start again, once.
"""
from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import Callable, List, Optional

from .errors import CorruptionError, JournalClosedError
from .iterator import RecordIterator
from .open_segments import OpenSegments
from .record import BAD, HEADER_SIZE, LIMIT, SHORT, Record, StreamStats
from .recovery import rebuild_in_memory
from .segment import ScanResult, Segment

log = logging.getLogger("zeps.journal")

_MAX_BLOCK = 4 << 20


class Cursor:
    """Where a read stopped: the next record is ``seq`` at byte ``pos`` of ``seg``; ``ts`` is
    the timestamp of the record before it (None if unknown); ``want``: the sequence the next
    read continues from (above ``seq`` when the read stopped inside a batch record); ``ino``:
    the log file's inode then (compaction replaces a file: a position in the old one means
    nothing in the new one, so such a cursor is dropped and the read locates again)."""

    __slots__ = ("seg", "pos", "seq", "ts", "want", "ino")

    def __init__(self, seg: Segment, pos: int, seq: int, ts: Optional[int], want: int):
        self.seg, self.pos, self.seq, self.ts, self.want = seg, pos, seq, ts, max(seq, want)
        self.ino = seg.ino


class RecordSink:
    """Collects :class:`Record` objects (or, with ``chunks``, records as stored: a batch record
    as one :class:`BatchRecord`): up to ``max_records`` messages, stopping before the message
    (chunk) that would take the frame bytes over ``max_bytes`` (at least one)."""

    __slots__ = ("view", "out", "max_records", "max_bytes", "n", "nbytes", "chunks")

    def __init__(self, view: "StreamView", max_records: int, max_bytes: int,
                 chunks: bool = False):
        self.view = view
        self.out: List = []
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.n = 0
        self.nbytes = 0
        self.chunks = chunks

    @property
    def count(self) -> int:
        return len(self.out)

    def full(self) -> bool:
        return self.n >= self.max_records

    def after(self) -> int:
        """The sequence after the last message collected (0 if none)."""
        return self.out[-1].last_sequence + 1 if self.out else 0

    def parse(self, seg: Segment, pos: int, seq: int, limit: int, want_seq: int,
              last_ts: Optional[int], exact: bool = False) -> ScanResult:
        """Parse from ``pos`` (record ``seq``; exactly that one if ``exact``: see
        :meth:`Segment.parse`) to ``limit``; blocks sized from the records wanted and the
        average record size seen so far."""
        out = self.out
        view = self.view
        before = len(out)
        n0 = self.n
        want = min(self.max_bytes - self.nbytes, (self.max_records - n0) * view._avg_record)
        block = int(min(_MAX_BLOCK, max(16384, want * 1.25 + view._interval + 4096)))
        res = seg.parse(pos, seq, limit, out, self.max_records, self.max_bytes, want_seq, None,
                        block, n0, self.nbytes, last_ts, self.chunks, exact)
        got = res.n - n0
        if got:
            stored = res.nbytes - self.nbytes + HEADER_SIZE * (len(out) - before)
            view._avg_record = 0.8 * view._avg_record + 0.2 * stored / got
        self.n, self.nbytes = res.n, res.nbytes
        return res


class StreamView:
    """Read API over a list of segments. Subclasses provide ``_segs``/``_firsts`` (segments
    and their first sequences, sorted), ``_dir``, ``_interval`` and the hooks below."""

    _segs: List[Segment]
    _firsts: List[int]
    _dir: str
    _interval: int
    _closed: bool
    _avg_record = 256.0
    #: The lowest sequence served: a purge's ``purged_to + 1`` for a reader in another process
    #: (:class:`~zeps.journal.JournalReader`); 1 for the writer, whose broker applies purges.
    _floor = 1

    # ------------------------------------------------------------------ hooks

    def _refresh(self) -> bool:
        """Re-read the list of segments; True if it changed."""
        return False

    def _load(self, seg: Segment) -> None:
        """Open a segment's files and check its index (writer and reader differ)."""
        raise NotImplementedError

    def _can_unload(self, seg: Segment) -> bool:
        return True

    def _soft_bad(self, seg: Segment, pos: int) -> bool:
        """Whether a short or bad record at ``pos`` of ``seg`` is a torn tail, not corruption."""
        return False

    def _why_not_torn(self, seg: Segment) -> str:
        """Why a bad record in ``seg`` is corruption rather than a torn tail (for the error)."""
        return "a later segment exists, so it is not a torn tail"

    def _end_seq(self) -> int:
        """The sequence after the last whole record."""
        raise NotImplementedError

    def _newest_ts(self) -> int:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"{type(self).__name__} on {self._dir} is closed")

    # ------------------------------------------------------------------ public read API

    @property
    def stream_dir(self) -> str:
        return self._dir

    @property
    def first_seq(self) -> int:
        """First sequence held (the next sequence when the stream is empty)."""
        self._check_open()
        self._refresh()
        return max(self._segs[0].first_seq if self._segs else 1, self._floor)

    @property
    def last_seq(self) -> int:
        """Last sequence held; ``first_seq - 1`` (0 for a new stream) when empty."""
        self._check_open()
        return self._end_seq() - 1

    def segment_seqs(self) -> List[int]:
        """First sequences of the segments held, oldest first (a segment holds the sequences
        up to the next one's first)."""
        self._check_open()
        self._refresh()
        return list(self._firsts)

    def read_batch(self, seq: int, max_records: int = 1000,
                   max_bytes: int = 1 << 20) -> List[Record]:
        """Up to ``max_records`` records from ``max(seq, first_seq)``, stopping before the
        record that would take the frame bytes over ``max_bytes`` (at least one record is
        returned if there is one). Reads blocks (one ``os.pread`` each), not records. Returns
        [] at the end. If the first record returned is above ``seq``, retention deleted the
        records in between."""
        self._check_open()
        return self._read_records(seq, max_records, max_bytes, None)[0]

    def read_chunks(self, seq: int, max_records: int = 1000,
                    max_bytes: int = 1 << 20) -> List:
        """Records as stored from ``max(seq, first_seq)``: a :class:`Record` per plain record,
        a :class:`BatchRecord` per batch record, never expanded (the first may be a batch
        starting below ``seq``: its messages below ``seq`` are the caller's to skip). The
        same limits as :meth:`read_batch`, counted in messages (at or above ``seq``) and
        frame bytes (a batch's whole frame); at least one chunk is returned if there is one.
        Returns [] at the end."""
        self._check_open()
        return self._read_records(seq, max_records, max_bytes, None, True)[0]

    def read_from(self, seq: int, end_seq: Optional[int] = None, follow: bool = False,
                  poll_interval: float = 0.05, stop: Optional[Callable[[], bool]] = None,
                  timeout: Optional[float] = None, batch_records: int = 1000,
                  batch_bytes: int = 1 << 20, clock: Optional[Callable[[], float]] = None,
                  sleep: Optional[Callable[[float], None]] = None):
        """Iterate over records from ``seq`` (up to ``end_seq`` inclusive if given).

        With ``follow=True`` the iterator follows the live tail: at the end it polls every
        ``poll_interval`` seconds; it ends when ``end_seq`` is reached, when ``stop()``
        returns true, or after ``timeout`` seconds without a new record. ``clock`` (seconds,
        monotonic) and ``sleep`` default to :func:`time.monotonic` and :func:`time.sleep`.

        The returned :class:`~zeps.journal.iterator.RecordIterator` tells whether records were
        skipped: ``it.first_available``, ``it.gap``, ``it.skipped_to`` (see its docstring). A
        request below the first kept sequence starts at the first kept one with ``gap`` set,
        never with an error.
        """
        self._check_open()
        return RecordIterator(self, seq, end_seq, follow, poll_interval, stop, timeout,
                              batch_records, batch_bytes, clock, sleep)

    def seq_at(self, timestamp_ns: int) -> int:
        """First sequence whose timestamp is >= ``timestamp_ns``; the next sequence if none.
        Binary search over the segments' first timestamps, then over the time index, then a
        scan of at most one index interval."""
        self._check_open()
        return max(self._retry(lambda: self._seq_at(timestamp_ns)), self._floor)

    def info(self) -> StreamStats:
        self._check_open()
        return self._retry(self._info)

    @property
    def newest_ts(self) -> int:
        """The newest record's timestamp (ns; 0: none), as :meth:`info` says it, without
        looking at the segments (O(1) in the writer)."""
        self._check_open()
        self._refresh()
        return self._newest_ts() if self._end_seq() > self.first_seq else 0

    # ------------------------------------------------------------------ segments

    def _open_segments(self) -> OpenSegments:
        lru = self.__dict__.get("_lru")
        if lru is None:
            lru = self._lru = OpenSegments(self._can_unload)
        return lru

    def _prepare(self, seg: Segment) -> None:
        """Make ``seg`` readable (loading it if it is not); a sealed one joins the LRU of open
        sealed segments."""
        if not seg.loaded:
            self._load(seg)
        if seg.sealed:
            self._open_segments().use(seg)

    def _forget(self, seg: Segment) -> None:
        self._open_segments().forget(seg)

    def _retry(self, fn):
        """Run ``fn``; if a segment vanished under it (retention in another process),
        re-list and retry."""
        for attempt in range(5):
            try:
                return fn()
            except FileNotFoundError:
                if attempt == 4:
                    raise
                self._refresh()

    def _limit(self, seg: Segment) -> int:
        lim = seg.limit()
        if seg.bad_pos is not None and seg.bad_pos < lim:
            return seg.bad_pos
        return lim

    def _locate(self, seq: int):
        """(segment, position, sequence at position) to start reading ``seq`` from, or None."""
        segs = self._segs
        if not segs:
            return None
        i = bisect_right(self._firsts, seq) - 1
        if i < 0:
            i = 0
        seg = segs[i]
        self._prepare(seg)
        pos, s = seg.start_for(seq)
        return seg, pos, s

    def _next_segment(self, seg: Segment) -> Optional[Segment]:
        j = bisect_right(self._firsts, seg.first_seq)
        return self._segs[j] if j < len(self._segs) else None

    def _in_list(self, seg: Segment) -> bool:
        j = bisect_right(self._firsts, seg.first_seq) - 1
        return j >= 0 and self._segs[j] is seg

    def _corrupt(self, seg: Segment, pos: int, reason: str) -> CorruptionError:
        return seg.corruption(pos, reason, self._why_not_torn(seg))

    # ------------------------------------------------------------------ reading

    def _read(self, seq: int, new_sink: Callable[[], object], cursor: Optional[Cursor]):
        """``(sink, cursor)``: a new sink filled from ``seq`` (or the first kept sequence above
        it) and the cursor after what it took (None if the next read must locate again)."""
        if seq < self._floor:                        # purged: never served again
            seq = self._floor
        for attempt in range(5):
            sink = new_sink()
            try:
                return sink, self._read_once(seq, sink, cursor)
            except FileNotFoundError:
                if attempt == 4:
                    raise
                cursor = None
                self._refresh()

    def _read_records(self, seq: int, max_records: int, max_bytes: int,
                      cursor: Optional[Cursor], chunks: bool = False):
        """``([Record], cursor)`` from ``seq``: the read behind ``read_batch`` and
        ``read_from`` (with ``chunks``, batch records whole: ``read_chunks``)."""
        sink, cursor = self._read(seq, lambda: RecordSink(self, max_records, max_bytes, chunks),
                                  cursor)
        return sink.out, cursor

    def _read_once(self, seq: int, sink, cursor: Optional[Cursor]) -> Optional[Cursor]:
        if sink.full():
            return cursor
        if seq < 1:
            seq = 1
        if cursor is not None and cursor.want == seq:
            seg, pos, s, ts = cursor.seg, cursor.pos, cursor.seq, cursor.ts
            self._prepare(seg)            # it may have been evicted from the LRU since
            from_index = False
            if seg.ino != cursor.ino:     # compaction replaced the file meanwhile
                cursor = None
        if cursor is None or cursor.want != seq:
            if self._segs and seq < self._segs[0].first_seq:
                self._refresh()
            loc = self._locate(seq)
            if loc is None:
                self._refresh()
                loc = self._locate(seq)
                if loc is None:
                    return None
            seg, pos, s = loc
            ts = None
            from_index = True
        start_pos = pos
        rebuilt = False
        relisted = False
        while True:
            limit = self._limit(seg)
            res = sink.parse(seg, pos, s, limit, seq, ts, from_index and pos == start_pos)
            pos, s, ts = res.pos, res.seq, res.last_ts
            if res.status == LIMIT:
                return Cursor(seg, pos, s, ts, max(seq, sink.after()))
            if res.status == BAD:
                if from_index and pos == start_pos and not rebuilt and seg.sealed:
                    # the index entry pointed at a wrong record: rebuild it and retry once
                    log.warning("journal: %s: index entry does not match the log, rebuilding "
                                "the index in memory", seg.index_path)
                    rebuild_in_memory(seg, self._interval)
                    rebuilt = True
                    pos, s = seg.start_for(seq)
                    start_pos, ts = pos, None
                    continue
                if sink.count or self._soft_bad(seg, pos):
                    # records before a bad one are returned; the next read raises
                    return Cursor(seg, pos, s, ts, max(seq, sink.after()))
                raise self._corrupt(seg, pos, res.describe())
            # END or SHORT at the limit
            if seg.bad_pos is not None and pos >= seg.bad_pos:
                if sink.count:
                    return Cursor(seg, pos, s, ts, max(seq, sink.after()))
                raise self._corrupt(seg, seg.bad_pos, seg.bad_reason or "bad record")
            nxt = self._next_segment(seg)
            if nxt is None:
                if self._refresh():
                    continue        # a reader found new segments: re-check this one's end
                if res.status == SHORT and not self._soft_bad(seg, pos):
                    if self._limit(seg) > limit:
                        continue    # the read raced the writer: the record is whole now
                    if sink.count:
                        return Cursor(seg, pos, s, ts, max(seq, sink.after()))
                    raise self._corrupt(seg, pos, res.describe())
                return Cursor(seg, pos, s, ts, max(seq, sink.after()))
            if res.status == SHORT:
                # re-check: a reader may have seen the segment before it was finished (the
                # limit read as it was: a known bad record's position caps it for good)
                if self._limit(seg) > limit:
                    continue
                if sink.count:
                    return Cursor(seg, pos, s, ts, max(seq, sink.after()))
                raise self._corrupt(seg, pos, res.describe())
            if nxt.first_seq != s:
                if not relisted:
                    # a directory listing taken while the writer creates files is not a
                    # snapshot (readdir may return a newer entry and miss an older one):
                    # list again before concluding anything
                    relisted = True
                    self._refresh()
                    continue
                if nxt.first_seq > s and not self._in_list(seg):
                    # seg was deleted by retention, and more after it: end the batch here so
                    # that the caller sees the jump at the start of the next one
                    if sink.count:
                        return None
                    s = nxt.first_seq
                    seq = max(seq, s)
                elif nxt.first_seq > s and seg.gaps:
                    s = nxt.first_seq   # compaction removed the last records of seg
                else:
                    if sink.count:
                        return Cursor(seg, pos, s, ts, max(seq, sink.after()))
                    raise CorruptionError(
                        f"journal {self._dir}: segment {seg.log_path} ends before sequence {s} "
                        f"but the next segment {nxt.log_path} starts at {nxt.first_seq}",
                        seg.log_path, pos)
            seg = nxt
            self._prepare(seg)
            pos = 0
            from_index = False
            if sink.full():
                return Cursor(seg, pos, s, ts, max(seq, sink.after()))

    # ------------------------------------------------------------------ lookups

    def _first_ts(self, seg: Segment) -> Optional[int]:
        self._prepare(seg)
        return seg.read_first_ts()

    def _seq_at(self, ts: int) -> int:
        self._refresh()
        end_seq = self._end_seq()
        segs = list(self._segs)
        if not segs or end_seq <= segs[0].first_seq:
            return end_seq
        lo, hi = 0, len(segs)
        while lo < hi:                  # last segment whose first timestamp is < ts
            mid = (lo + hi) >> 1
            k = mid
            fts = self._first_ts(segs[k])
            while fts is None and k + 1 < len(segs) and segs[k].gaps:
                k += 1                  # emptied by compaction: it is where the next begins
                fts = self._first_ts(segs[k])
            if fts is not None and fts < ts:
                lo = mid + 1
            else:
                hi = mid
        i = lo - 1
        if i < 0:
            return segs[0].first_seq
        seg = segs[i]
        pos, s = seg.start_below_ts(ts)
        res = seg.parse(pos, s, self._limit(seg), None, stop_ts=ts, block=16384, exact=pos > 0)
        if res.status == BAD and res.pos == pos and seg.sealed:
            log.warning("journal: %s: time index entry does not match the log, rebuilding "
                        "the index in memory", seg.time_path)
            rebuild_in_memory(seg, self._interval)
            pos, s = seg.start_below_ts(ts)
            res = seg.parse(pos, s, self._limit(seg), None, stop_ts=ts, block=16384,
                            exact=pos > 0)
        if res.status == LIMIT:
            return res.seq
        if res.status == BAD and not self._soft_bad(seg, res.pos):
            raise self._corrupt(seg, res.pos, res.describe())
        if res.status != BAD and seg.bad_pos is not None and res.pos >= seg.bad_pos:
            raise self._corrupt(seg, seg.bad_pos, seg.bad_reason or "bad record")
        if i + 1 < len(segs):
            return segs[i + 1].first_seq
        return end_seq

    def _seg_bytes(self, seg: Segment) -> int:
        if seg.fd >= 0:
            return seg.limit()
        try:
            return os.stat(seg.log_path).st_size
        except FileNotFoundError:
            return 0

    def _info(self) -> StreamStats:
        self._refresh()
        end_seq = self._end_seq()
        segs = list(self._segs)
        first = segs[0].first_seq if segs else 1
        size = sum(self._seg_bytes(s) for s in segs)
        oldest = newest = 0
        if first < self._floor:                      # purged, on disk still
            first = min(self._floor, end_seq)
            recs = self._read_records(first, 1, 1, None)[0] if end_seq > first else ()
            oldest = recs[0].timestamp if recs else 0
        elif end_seq > first:
            for seg in segs:
                fts = self._first_ts(seg)
                if fts is not None:
                    oldest = fts
                    break
        if end_seq > first:
            newest = self._newest_ts()
        return StreamStats(first_seq=first, last_seq=end_seq - 1, size_bytes=size,
                           oldest_ts=oldest, newest_ts=newest, segments=len(segs))
