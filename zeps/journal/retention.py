"""Retention: which old segments go (:func:`segments_to_delete`, a pure rule, no files and no
clock of its own), and the writer's deletion of them (:class:`Retention`, a part of
:class:`~zeps.journal.Journal`, as a purge's).

Whole segments only, oldest first, never the active (last) one. A segment goes while the stream
is over ``retention_bytes``, or while its newest record is older than ``retention_ms`` at
``now_ns`` (a sealed segment left empty by compaction counts as old); the first segment that
meets neither condition stops the pass (retention never leaves a hole between kept segments).
"""
from __future__ import annotations

import logging
import os
from typing import Iterable, List, Optional, Tuple

from .compaction import lock_unless_running

log = logging.getLogger("zeps.journal")


def segments_to_delete(segments: Iterable[Tuple[int, Optional[int]]], total_bytes: int,
                       retention_bytes: Optional[int], retention_ms: Optional[int],
                       now_ns: int) -> List[str]:
    """For the sealed segments ``(size, newest timestamp or None)`` (oldest first, the active
    one excluded) of a stream of ``total_bytes``, the reason to delete each of the leading
    ones: ``"size"`` or ``"age"``; its length is how many to delete. ``segments`` is consumed
    only up to the first segment kept (it may load segments lazily)."""
    reasons = []
    for size, newest_ts in segments:
        if retention_bytes is not None and total_bytes > retention_bytes:
            reasons.append("size")
        elif retention_ms is not None and (
                newest_ts < now_ns - retention_ms * 1_000_000 if newest_ts is not None
                else size == 0):
            reasons.append("age")
        else:
            break
        total_bytes -= size
    return reasons


class Retention:
    """The writer's deletion of whole old segments: by :func:`segments_to_delete` (retention)
    or below a sequence (a purge)."""

    def apply_retention(self, now_ns: Optional[int] = None) -> int:
        """Delete whole old segments (never the active one) while the stream is over
        ``retention_bytes``, or while the oldest segment's newest record is older than
        ``retention_ms`` at ``now_ns`` (the journal's clock if None). Returns how many segments
        were deleted. Nothing is deleted while a compaction of the stream runs (in another
        process): it would put back the files of a segment it had read."""
        self._check_open()
        rb, rm = self.config.retention_bytes, self.config.retention_ms
        if rb is None and rm is None:
            return 0
        lock = lock_unless_running(self._dir, self._gaps)
        if lock is None:
            return 0
        try:
            return self._apply_retention(rb, rm, now_ns)
        finally:
            if lock >= 0:
                os.close(lock)

    def _apply_retention(self, rb: Optional[int], rm: Optional[int],
                         now_ns: Optional[int]) -> int:
        now = self._clock() if now_ns is None else now_ns
        total = sum(self._seg_bytes(s) for s in self._segs)
        sealed = self._segs[:-1]

        def sizes_and_ages():
            for seg in sealed:
                self._prepare(seg)
                yield seg.limit(), seg.last_ts
        reasons = segments_to_delete(sizes_and_ages(), total, rb, rm, now)
        self._delete_oldest(reasons)
        return len(reasons)

    def drop_before(self, seq: int) -> int:
        """Delete the whole sealed segments all of whose records are below ``seq`` (a purge;
        never the active segment). Returns how many were deleted."""
        self._check_open()
        n = 0
        while n < len(self._segs) - 1 and self._firsts[n + 1] <= seq:
            n += 1
        self._delete_oldest(["purge"] * n)
        return n

    def _delete_oldest(self, reasons: List[str]) -> None:
        for oldest, why in zip(self._segs[:len(reasons)], reasons):
            # (not oldest.limit(): a segment not open, never read since the journal was opened
            # or pushed out of the open ones, has no size nor descriptor, and fstat(-1) failed
            # every purge after a restart and, past 32 segments due, every retention pass)
            size = self._seg_bytes(oldest)
            with self._sync_lock:
                self._segs.pop(0)
                self._firsts.pop(0)
                if oldest in self._unsynced:
                    self._unsynced.remove(oldest)
            self._forget(oldest)
            oldest.delete_files()
            log.info("journal %s: %s deleted %s (%d bytes)", self._dir,
                     "purge" if why == "purge" else f"retention ({why})", oldest.log_path, size)
