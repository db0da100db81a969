"""Reading a stream: the read logic shared by the writer (:class:`~zeps.journal.Journal`) and
the lock-free read-only :class:`JournalReader`, and the iterator returned by ``read_from``.

All reads go through :meth:`_StreamView._read`: find the segment (``bisect`` on the in-memory
list of first sequences), find the start (binary search in the sparse index), then read blocks
with one ``os.pread`` each and parse them (``struct.unpack_from``, CRC-32C per record). The
writer and a reader differ only in a few hooks:

* where a segment ends: the writer knows its committed size; a reader looks at the file size;
* what a bad record at the end of the last segment means: for the writer (which recovered the
  tail on open) it is corruption; for a reader it is a record the writer has not finished
  writing (or a torn tail the writer will cut on its next open), so it is "the end for now" -
  a reader never yields a record that is not whole and CRC-verified;
* how the list of segments changes: the writer changes it itself; a reader re-lists the
  directory when it reaches the end of the last segment it knows, so it finds rolled segments,
  and tolerates segments that retention deleted (it continues at the first kept sequence and
  says so through :class:`RecordIterator`).
"""
from __future__ import annotations

import logging
import os
import time
from bisect import bisect_right
from collections import OrderedDict
from typing import Callable, List, Optional

from .config import JournalConfig
from .errors import CorruptionError, JournalClosedError, JournalNotFoundError
from .record import BAD, HEADER_SIZE, LIMIT, SHORT, Record, StreamStats
from .segment import Segment, check_dir, list_segment_seqs

log = logging.getLogger("zeps.journal")

_MAX_BLOCK = 4 << 20
MAX_OPEN_SEALED = 32


class _Cursor:
    """Where a read stopped: the next record is ``seq`` at byte ``pos`` of ``seg``."""

    __slots__ = ("seg", "pos", "seq")

    def __init__(self, seg: Segment, pos: int, seq: int):
        self.seg, self.pos, self.seq = seg, pos, seq


class _StreamView:
    """Read API over a list of segments. Subclasses provide ``_segs``/``_firsts`` (segments
    and their first sequences, sorted), ``_interval`` and the hooks below."""

    _segs: List[Segment]
    _firsts: List[int]
    _interval: int
    _closed: bool
    _avg_record = 256.0

    # ------------------------------------------------------------------ hooks

    def _refresh(self) -> bool:
        """Re-read the list of segments; True if it changed."""
        return False

    def _load(self, seg: Segment) -> None:
        """Open a segment's files and check its index (writer and reader differ)."""
        raise NotImplementedError

    def _can_unload(self, seg: Segment) -> bool:
        return True

    def _prepare(self, seg: Segment) -> None:
        """Make ``seg`` readable. Sealed segments are kept open in an LRU of
        ``MAX_OPEN_SEALED``: a replay over thousands of segments must not run out of file
        descriptors. An evicted segment is re-opened (and its index re-checked) on next use."""
        if not seg.loaded:
            self._load(seg)
        if seg.sealed:
            lru = self.__dict__.get("_lru")
            if lru is None:
                lru = self._lru = OrderedDict()
            lru[seg] = None
            lru.move_to_end(seg)
            while len(lru) > MAX_OPEN_SEALED:
                old, _ = lru.popitem(last=False)
                if self._can_unload(old):
                    old.unload()

    def _forget(self, seg: Segment) -> None:
        lru = self.__dict__.get("_lru")
        if lru is not None:
            lru.pop(seg, None)

    def _soft_bad(self, seg: Segment, pos: int) -> bool:
        """Whether a bad record at ``pos`` of ``seg`` is an unfinished tail, not corruption."""
        return False

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
    def first_seq(self) -> int:
        """First sequence held (the next sequence when the stream is empty)."""
        self._check_open()
        self._refresh()
        return self._segs[0].first_seq if self._segs else 1

    @property
    def last_seq(self) -> int:
        """Last sequence held; ``first_seq - 1`` (0 for a new stream) when empty."""
        self._check_open()
        return self._end_seq() - 1

    def read_batch(self, seq: int, max_records: int = 1000,
                   max_bytes: int = 1 << 20) -> List[Record]:
        """Up to ``max_records`` records from ``max(seq, first_seq)``, stopping before the
        record that would take the frame bytes over ``max_bytes`` (at least one record is
        returned if there is one). Reads blocks (one ``os.pread`` each), not records. Returns
        [] at the end. If the first record returned is above ``seq``, retention deleted the
        records in between."""
        self._check_open()
        return self._read(seq, max_records, max_bytes, None)[0]

    def read_from(self, seq: int, end_seq: Optional[int] = None, follow: bool = False,
                  poll_interval: float = 0.05, stop: Optional[Callable[[], bool]] = None,
                  timeout: Optional[float] = None, batch_records: int = 1000,
                  batch_bytes: int = 1 << 20) -> "RecordIterator":
        """Iterate over records from ``seq`` (up to ``end_seq`` inclusive if given).

        With ``follow=True`` the iterator follows the live tail: at the end it polls every
        ``poll_interval`` seconds; it ends when ``end_seq`` is reached, when ``stop()``
        returns true, or after ``timeout`` seconds without a new record.

        The returned :class:`RecordIterator` tells whether records were skipped:
        ``it.first_available``, ``it.gap``, ``it.skipped_to`` (see its docstring). A request
        below the first kept sequence starts at the first kept one with ``gap`` set, never
        with an error.
        """
        self._check_open()
        return RecordIterator(self, seq, end_seq, follow, poll_interval, stop, timeout,
                              batch_records, batch_bytes)

    def seq_at(self, timestamp_ns: int) -> int:
        """First sequence whose timestamp is >= ``timestamp_ns``; the next sequence if none.
        Binary search over the segments' first timestamps, then over the time index, then a
        scan of at most one index interval."""
        self._check_open()
        return self._retry(lambda: self._seq_at(timestamp_ns))

    def info(self) -> StreamStats:
        self._check_open()
        return self._retry(self._info)

    # ------------------------------------------------------------------ implementation

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

    def _read(self, seq: int, max_records: int, max_bytes: int,
              cursor: Optional[_Cursor]):
        """Records from ``seq`` (or the first kept one above it) and the cursor after them."""
        for attempt in range(5):
            try:
                return self._read_once(seq, max_records, max_bytes, cursor)
            except FileNotFoundError:
                if attempt == 4:
                    raise
                cursor = None
                self._refresh()

    def _read_once(self, seq, max_records, max_bytes, cursor):
        out: List[Record] = []
        if max_records <= 0:
            return out, cursor
        if seq < 1:
            seq = 1
        if cursor is not None and cursor.seq == seq:
            seg, pos, s = cursor.seg, cursor.pos, cursor.seq
            self._prepare(seg)            # it may have been evicted from the LRU since
            from_index = False
        else:
            if self._segs and seq < self._segs[0].first_seq:
                self._refresh()
            loc = self._locate(seq)
            if loc is None:
                self._refresh()
                loc = self._locate(seq)
                if loc is None:
                    return out, None
            seg, pos, s = loc
            from_index = True
        start_pos = pos
        rebuilt = False
        relisted = False
        nbytes = 0
        while True:
            limit = self._limit(seg)
            want = min(max_bytes - nbytes, (max_records - len(out)) * self._avg_record)
            block = int(min(_MAX_BLOCK, max(16384, want * 1.25 + self._interval + 4096)))
            before = len(out)
            res = seg.parse(pos, s, limit, out, max_records, max_bytes, seq, None, block,
                            before, nbytes)
            if len(out) > before:
                got = out[before:]
                b = sum(len(r.frame) for r in got)
                nbytes += b
                self._avg_record = 0.8 * self._avg_record + 0.2 * (b / len(got) + HEADER_SIZE)
            pos, s = res.pos, res.seq
            if res.status == LIMIT:
                return out, _Cursor(seg, pos, s)
            if res.status == BAD:
                if from_index and pos == start_pos and not rebuilt and seg.sealed:
                    # the index entry pointed at a wrong record: rebuild it and retry once
                    log.warning("journal: %s: index entry does not match the log, rebuilding "
                                "the index in memory", seg.index_path)
                    seg.rebuild_in_memory(self._interval)
                    rebuilt = True
                    pos, s = seg.start_for(seq)
                    start_pos = pos
                    continue
                if self._soft_bad(seg, pos) or out:
                    # records before a bad one are returned; the next read raises
                    return out, _Cursor(seg, pos, s)
                raise seg.corruption(pos, res.describe())
            # END or SHORT at the limit
            if seg.bad_pos is not None and pos >= seg.bad_pos:
                if out:
                    return out, _Cursor(seg, pos, s)
                raise seg.corruption(seg.bad_pos, seg.bad_reason or "bad record")
            nxt = self._next_segment(seg)
            if nxt is None:
                if self._refresh():
                    continue        # a reader found new segments: re-check this one's end
                return out, _Cursor(seg, pos, s)
            if res.status == SHORT:
                # re-check: a reader may have seen the segment before it was finished
                if seg.limit() > limit:
                    continue
                if out:
                    return out, _Cursor(seg, pos, s)
                raise seg.corruption(pos, "incomplete record at the end of a sealed segment")
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
                    if out:
                        return out, None
                    s = nxt.first_seq
                    seq = max(seq, s)
                else:
                    if out:
                        return out, _Cursor(seg, pos, s)
                    raise CorruptionError(
                        f"journal {self._dir}: segment {seg.log_path} ends before sequence {s} "
                        f"but the next segment {nxt.log_path} starts at {nxt.first_seq}",
                        seg.log_path, pos)
            seg = nxt
            self._prepare(seg)
            pos = 0
            from_index = False
            if len(out) >= max_records:
                return out, _Cursor(seg, pos, s)

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
            fts = self._first_ts(segs[mid])
            if fts is not None and fts < ts:
                lo = mid + 1
            else:
                hi = mid
        i = lo - 1
        if i < 0:
            return segs[0].first_seq
        seg = segs[i]
        pos, s = seg.start_below_ts(ts)
        res = seg.parse(pos, s, self._limit(seg), None, stop_ts=ts, block=16384)
        if res.status == BAD and res.pos == pos and seg.sealed:
            log.warning("journal: %s: time index entry does not match the log, rebuilding "
                        "the index in memory", seg.time_path)
            seg.rebuild_in_memory(self._interval)
            pos, s = seg.start_below_ts(ts)
            res = seg.parse(pos, s, self._limit(seg), None, stop_ts=ts, block=16384)
        if res.status == LIMIT:
            return res.seq
        if res.status == BAD and not self._soft_bad(seg, res.pos):
            raise seg.corruption(res.pos, res.describe())
        if res.status != BAD and seg.bad_pos is not None and res.pos >= seg.bad_pos:
            raise seg.corruption(seg.bad_pos, seg.bad_reason or "bad record")
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
        if end_seq > first:
            for seg in segs:
                fts = self._first_ts(seg)
                if fts is not None:
                    oldest = fts
                    break
            newest = self._newest_ts()
        return StreamStats(first_seq=first, last_seq=end_seq - 1, size_bytes=size,
                           oldest_ts=oldest, newest_ts=newest, segments=len(segs))


class RecordIterator:
    """Iterator over records returned by ``read_from``.

    Decided: a request for records that retention already deleted is not an error; the
    iterator starts at (or, while following, jumps to) the first kept record and records the
    fact in fields the caller checks (the broker tells the subscriber; a replay tool prints a
    warning). It also logs a warning on the ``zeps.journal`` logger.

    ``requested``        the sequence asked for
    ``first_available``  the first sequence the journal held when the iterator was created
    ``gap``              True once records between ``requested`` and what was yielded were
                         missing (deleted by retention)
    ``skipped_to``       the sequence the iterator continued at after the last gap, or None
    ``missed``           how many sequences were skipped over all gaps
    ``next_seq``         the sequence of the next record to be yielded
    """

    def __init__(self, view: _StreamView, seq: int, end_seq: Optional[int], follow: bool,
                 poll_interval: float, stop: Optional[Callable[[], bool]],
                 timeout: Optional[float], batch_records: int, batch_bytes: int):
        self._view = view
        self.requested = seq
        self.end_seq = end_seq
        self.follow = follow
        self.poll_interval = poll_interval
        self._stop = stop
        self.timeout = timeout
        self._batch_records = max(1, batch_records)
        # the first read is small so that the first record comes quickly (a replay start, a
        # follower); each next read is 8x bigger up to batch_records
        self._want = min(16, self._batch_records)
        self._batch_bytes = max(1, batch_bytes)
        self.next_seq = max(seq, 1)
        self.first_available = view.first_seq
        self.gap = False
        self.skipped_to: Optional[int] = None
        self.missed = 0
        self._buf: List[Record] = []
        self._i = 0
        self._cursor: Optional[_Cursor] = None
        self._done = False
        if self.next_seq < self.first_available:
            self._note_gap(self.first_available)

    def _note_gap(self, to_seq: int) -> None:
        log.warning("journal %s: records %d..%d were deleted by retention; continuing at %d",
                    self._view._dir, self.next_seq, to_seq - 1, to_seq)
        self.gap = True
        self.skipped_to = to_seq
        self.missed += to_seq - self.next_seq
        self.next_seq = to_seq

    def __iter__(self):
        return self

    def close(self) -> None:
        self._done = True
        self._buf = []

    def __next__(self) -> Record:
        while True:
            if self._i < len(self._buf):
                r = self._buf[self._i]
                self._i += 1
                if r.sequence != self.next_seq:
                    self._note_gap(r.sequence)
                self.next_seq = r.sequence + 1
                return r
            if self._done:
                raise StopIteration
            end = self.end_seq
            if end is not None and self.next_seq > end:
                self._done = True
                raise StopIteration
            want = self._want
            self._want = min(self._batch_records, want * 8)
            if end is not None:
                want = min(want, end - self.next_seq + 1)
            recs, self._cursor = self._view._read(self.next_seq, want, self._batch_bytes,
                                                  self._cursor)
            if recs:
                self._buf = recs
                self._i = 0
                self._idle_since = None
                continue
            if not self.follow:
                self._done = True
                raise StopIteration
            if self._stop is not None and self._stop():
                self._done = True
                raise StopIteration
            now = time.monotonic()
            if self.timeout is not None:
                since = getattr(self, "_idle_since", None)
                if since is None:
                    self._idle_since = since = now
                if now - since >= self.timeout:
                    self._done = True
                    raise StopIteration
            time.sleep(self.poll_interval)


class JournalReader(_StreamView):
    """Read-only view of one stream directory. Takes no lock and writes nothing, so any
    number of readers, in any process, can run beside the one writer. It re-lists segments as
    needed and sees the writer's new records as they become whole."""

    def __init__(self, stream_dir: str, config: Optional[JournalConfig] = None):
        self._dir = os.fspath(stream_dir)
        check_dir(self._dir)
        self._interval = (config or JournalConfig()).index_interval_bytes
        self._segs = []
        self._firsts = []
        self._closed = False
        self._tail = None          # (segment, pos, next seq, last ts) of the scanned tail
        self._refresh()

    def __repr__(self):
        return f"JournalReader({self._dir!r})"

    def _refresh(self) -> bool:
        try:
            seqs = list_segment_seqs(self._dir)
        except FileNotFoundError:
            raise JournalNotFoundError(f"stream directory {self._dir!r} no longer exists") \
                from None
        if seqs == self._firsts:
            return False
        old = {s.first_seq: s for s in self._segs}
        self._segs = [old.get(q) or Segment(self._dir, q) for q in seqs]
        keep = set(seqs)
        for q, seg in old.items():
            if q not in keep:
                self._forget(seg)          # deleted: closed once no cursor refers to it
        for seg in self._segs[:-1]:
            if seg.loaded and not seg.sealed:
                # it was the growing last segment when loaded; now sealed: let the LRU of
                # open sealed segments manage it (a long-running follower crosses many)
                seg.sealed = True
                self._prepare(seg)
        self._firsts = seqs
        return True

    def _load(self, seg: Segment) -> None:
        if self._segs and seg is self._segs[-1]:
            seg.load_tail(self._interval)
        else:
            seg.load_sealed(self._interval, persist=False)

    def _soft_bad(self, seg: Segment, pos: int) -> bool:
        if not self._segs or seg is not self._segs[-1]:
            return False
        idx = seg.index
        return idx is None or len(idx) == 0 or pos > idx.last_pos()

    def _scan_tail(self):
        """(next seq, last ts) after the last whole record, scanning incrementally."""
        def go():
            self._refresh()
            if not self._segs:
                return 1, 0
            last = self._segs[-1]
            self._prepare(last)
            t = self._tail
            if t is not None and t[0] is last:
                pos, seq, ts = t[1], t[2], t[3]
            else:
                pos, seq = last.start_for(1 << 63)
                ts = None
            res = last.parse(pos, seq, last.limit(), None)
            if res.last_ts is not None:
                ts = res.last_ts
            self._tail = (last, res.pos, res.seq, ts)
            if ts is None and len(self._segs) > 1:
                prev = self._segs[-2]
                self._prepare(prev)
                ts = prev.last_ts
                self._tail = (last, res.pos, res.seq, ts)
            return res.seq, ts or 0
        return self._retry(go)

    def _end_seq(self) -> int:
        return self._scan_tail()[0]

    def _newest_ts(self) -> int:
        return self._scan_tail()[1]

    def close(self) -> None:
        self._closed = True
        for seg in self._segs:
            seg.close()
        self._segs = []
        self._firsts = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
