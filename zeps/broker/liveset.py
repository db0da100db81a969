"""The live subscribers of a stream, as routing needs them (issue 20).

Routing sends a record to the subscribers whose patterns match its key *and* that are live; a
historical one (out of credit, congested, never reading) must cost a PUBLISH nothing, however
many there are. The subscription index answers the first question (:mod:`zeps.matching`), this
set the second: routing intersects the two, in C, over the smaller of them. A subscriber's
change of state is O(1) here whatever its patterns (a second index of the live subscribers'
patterns made it O(patterns): a hostile client's lever, flipping at every message).

A Python set keeps its table as it empties, and an intersection walks the smaller set's
*table*: a set that held a thousand ids and holds one still costs the walk of a thousand slots.
So a set that falls to a quarter of its peak is copied compact (amortised O(1) per change).
"""
from __future__ import annotations

from typing import Set

#: Below this peak the table is small anyway: never copied.
COMPACT_ABOVE = 32


class LiveSet:
    """The identities of a stream's live subscribers (:attr:`ids`, a set; replaced when it is
    compacted, so read it anew each time)."""

    __slots__ = ("ids", "_peak")

    def __init__(self) -> None:
        self.ids: Set[bytes] = set()
        self._peak = 0

    def add(self, ident: bytes) -> None:
        ids = self.ids
        ids.add(ident)
        if len(ids) > self._peak:
            self._peak = len(ids)

    def discard(self, ident: bytes) -> None:
        ids = self.ids
        ids.discard(ident)
        if self._peak > COMPACT_ABOVE and len(ids) * 4 < self._peak:
            self.ids = set(ids)
            self._peak = len(ids)
