"""The lock-free, read-only :class:`JournalReader`.

It differs from the writer's view only in the hooks of :class:`~zeps.journal.view.StreamView`:

* where a segment ends: a reader looks at the file size (the writer knows its committed size);
* what a short or bad record at the end of the last segment means: a record the writer has not
  finished writing (or a torn tail the writer will cut on its next open), so it is "the end for
  now" if it lies after the segment's last index entry - a reader never yields a record that is
  not whole and CRC-verified;
* how the list of segments changes: a reader re-lists the directory when it reaches the end of
  the last segment it knows, so it finds rolled segments and segments retention deleted.

A compacted stream's reader (its ``SETTINGS.json`` says ``compact``, or the configuration does)
accepts gaps between sequences in its segments (:mod:`.compaction`).
"""
from __future__ import annotations

import os
from typing import Optional

from .config import JournalConfig
from .errors import JournalError, JournalNotFoundError
from .recovery import load_sealed, load_tail
from .segment import Segment, check_dir, list_segment_seqs
from . import settings
from .settings import is_compact
from .view import StreamView


class JournalReader(StreamView):
    """Read-only view of one stream directory. Takes no lock and writes nothing, so any
    number of readers, in any process, can run beside the one writer. It re-lists segments as
    needed and sees the writer's new records as they become whole."""

    def __init__(self, stream_dir, config: Optional[JournalConfig] = None):
        self._dir = os.fspath(stream_dir)
        check_dir(self._dir)
        config = config or JournalConfig()
        self._interval = config.index_interval_bytes
        self._gaps = config.compact or is_compact(self._dir)
        self._segs = []
        self._firsts = []
        self._closed = False
        self._tail = None          # (segment, pos, next seq, last ts) of the scanned tail
        self._settings_path = os.path.join(self._dir, settings.FILE)
        self._settings_seen = None  # SETTINGS.json's (inode, size, mtime) when its purge was read
        self._refresh()

    def __repr__(self):
        return f"JournalReader({self._dir!r})"

    def _refresh(self) -> bool:
        self._read_purge()
        try:
            seqs = list_segment_seqs(self._dir)
        except FileNotFoundError:
            raise JournalNotFoundError(f"stream directory {self._dir!r} no longer exists") \
                from None
        if seqs == self._firsts:
            return False
        old = {s.first_seq: s for s in self._segs}
        self._segs = [old.get(q) or Segment(self._dir, q, self._gaps) for q in seqs]
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

    def _read_purge(self) -> None:
        """A purge (``STREAM-PURGE``, kept in the stream's settings as ``purged_to``) is served
        by no reader: the floor of what this one reads follows it (a purge that deleted no
        whole segment left its messages on disk, and ``zeps replay --data-dir``, Spark and
        the Event BUS front end's snapshots served them; found by review). One ``stat`` a
        refresh; the file is read again when it changed."""
        path = self._settings_path
        if not os.access(path, os.F_OK):             # most streams have none: no exception
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == self._settings_seen:
            return
        try:
            got = settings.read(self._dir)
        except JournalError:                         # being replaced: the next refresh
            return
        self._settings_seen = seen
        if got is not None and got.purged_to >= self._floor:
            self._floor = got.purged_to + 1

    def _load(self, seg: Segment) -> None:
        if self._segs and seg is self._segs[-1]:
            load_tail(seg, self._interval)
        else:
            load_sealed(seg, self._interval, persist=False)

    def _soft_bad(self, seg: Segment, pos: int) -> bool:
        if not self._segs or seg is not self._segs[-1]:
            return False
        idx = seg.index
        return idx is None or len(idx) == 0 or pos > idx.last_pos()

    def _why_not_torn(self, seg: Segment) -> str:
        if self._segs and seg is self._segs[-1]:
            return ("it lies before the last index entry of the last segment, so it is not a "
                    "torn tail")
        return "a later segment exists, so it is not a torn tail"

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
            res = last.parse(pos, seq, last.limit(), None, last_ts=ts)
            ts = res.last_ts
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
