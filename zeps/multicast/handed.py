"""What a multicast receiver handed from datagrams, remembered to tell when it was deceived.

A handed entry says "no matching message lies between ``after`` and me" and carries its
message's contents. When a real entry arrives after a forged one was handed in its place (one
that said the real message did not exist, or carried other contents for its sequence), the
stale real entry contradicts what is remembered here: :meth:`HandedLog.deceived`. Bounded: the
older half is forgotten when ``limit`` is reached.
"""
from __future__ import annotations

from bisect import bisect_left

__all__ = ["HandedLog"]


class HandedLog:
    """The spans handed multicast entries said held no matching message, and the contents
    they carried, for the last ``limit`` of each (sequences increase: kept sorted)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._span_starts: list[int] = []
        self._span_ends: list[int] = []
        self._seqs: list[int] = []
        self._digests: list[int] = []

    def note(self, start: int, msg) -> None:
        """``msg`` was handed from an entry saying nothing matching lies in ``start..seq``."""
        limit = self.limit
        if msg.sequence - start > 1:
            starts, ends = self._span_starts, self._span_ends
            if len(ends) >= limit:
                del starts[:limit // 2], ends[:limit // 2]
            starts.append(start)
            ends.append(msg.sequence)
        seqs, digests = self._seqs, self._digests
        if len(seqs) >= limit:
            del seqs[:limit // 2], digests[:limit // 2]
        seqs.append(msg.sequence)
        digests.append(hash((msg.key, msg.body, msg.timestamp)))

    def deceived(self, e) -> bool:
        """Whether entry ``e`` (at or below what was handed) lies in a span a handed entry said
        was empty, or has other contents than the entry handed for its sequence."""
        seq = e.sequence
        ends = self._span_ends
        i = bisect_left(ends, seq)
        if i < len(ends) and self._span_starts[i] < seq < ends[i]:
            return True
        if e.ref:
            return False
        seqs = self._seqs
        i = bisect_left(seqs, seq)
        return (i < len(seqs) and seqs[i] == seq
                and self._digests[i] != hash((e.key, e.body, e.timestamp)))
