"""The iterator returned by ``read_from``: batches of records, gaps left by retention reported,
and an optional follow mode that polls the live tail."""
from __future__ import annotations

import logging
import time
from typing import Callable, List, Optional

from .record import Record

#: A read's retention gaps (a logger of their own: a reader that reports them itself, as
#: ``zeps replay --data-dir`` does, quiets it).
log = logging.getLogger("zeps.journal.gaps")


class RecordIterator:
    """Iterator over records returned by ``read_from``.

    Decided: a request for records that retention already deleted is not an error; the
    iterator starts at (or, while following, jumps to) the first kept record and records the
    fact in fields the caller checks (the broker tells the subscriber; a replay tool prints a
    warning). It also logs a warning on the ``zeps.journal.gaps`` logger.

    ``requested``        the sequence asked for
    ``first_available``  the first sequence the journal held when the iterator was created
    ``gap``              True once records between ``requested`` and what was yielded were
                         missing (deleted by retention)
    ``skipped_to``       the sequence the iterator continued at after the last gap, or None
    ``missed``           how many sequences were skipped over all gaps
    ``compacted``        how many sequences were skipped because compaction removed them (a
                         compacted stream's gaps: the normal case there, not a loss, so not a
                         ``gap``; only sequences below the stream's first kept one count as
                         deleted by retention)
    ``next_seq``         the sequence of the next record to be yielded

    Following uses ``clock()`` (monotonic seconds) to measure ``timeout`` and ``sleep()``
    between polls; both are injected so that a test can run the follow loop on a fake clock.
    """

    def __init__(self, view, seq: int, end_seq: Optional[int], follow: bool,
                 poll_interval: float, stop: Optional[Callable[[], bool]],
                 timeout: Optional[float], batch_records: int, batch_bytes: int,
                 clock: Optional[Callable[[], float]] = None,
                 sleep: Optional[Callable[[float], None]] = None):
        self._view = view
        self.requested = seq
        self.end_seq = end_seq
        self.follow = follow
        self.poll_interval = poll_interval
        self._stop = stop
        self.timeout = timeout
        self._clock = clock or time.monotonic
        self._sleep = sleep or time.sleep
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
        self.compacted = 0
        self._buf: List[Record] = []
        self._i = 0
        self._cursor = None
        self._idle_since: Optional[float] = None
        self._done = False
        if self.next_seq < self.first_available:
            self._note_gap(self.first_available)

    def _note_gap(self, to_seq: int) -> None:
        log.warning("journal %s: records %d..%d were deleted by retention; continuing at %d",
                    self._view.stream_dir, self.next_seq, to_seq - 1, to_seq)
        self.gap = True
        self.skipped_to = to_seq
        self.missed += to_seq - self.next_seq
        self.next_seq = to_seq

    def _jump(self, to_seq: int) -> None:
        """The next record is ``to_seq``, above ``next_seq``: the sequences below the first
        kept one were deleted by retention (a gap), the others removed by compaction."""
        firsts = self._view._firsts
        kept = firsts[0] if firsts else to_seq
        if self.next_seq < kept:
            self._note_gap(min(to_seq, kept))
        if to_seq > self.next_seq:
            self.compacted += to_seq - self.next_seq
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
                if self.end_seq is not None and r.sequence > self.end_seq:
                    # a compacted stream's gap: the records asked for (as many as the range
                    # has sequences) came from beyond it, and were yielded
                    self._done = True
                    self._buf = []
                    raise StopIteration
                self._i += 1
                if r.sequence != self.next_seq:
                    self._jump(r.sequence)
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
            recs, self._cursor = self._view._read_records(self.next_seq, want,
                                                          self._batch_bytes, self._cursor)
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
            if self.timeout is not None:
                now = self._clock()
                if self._idle_since is None:
                    self._idle_since = now
                if now - self._idle_since >= self.timeout:
                    self._done = True
                    raise StopIteration
            self._sleep(self.poll_interval)
