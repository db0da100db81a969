"""The LRU of open sealed segments.

Each sealed segment in use keeps three file descriptors (log, index, time index). A replay over
thousands of segments, or a follower that crosses many rolls, must not run out of descriptors, so
at most :data:`MAX_OPEN_SEALED` sealed segments per Journal/JournalReader stay open; the least
recently used one is closed (:meth:`Segment.unload`) and re-opened, its index re-checked, on its
next use.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from .segment import Segment

MAX_OPEN_SEALED = 32


class OpenSegments:
    """Sealed segments in use, least recently used first. ``can_close(seg)`` lets the owner keep
    a segment open that it still needs (the writer's segments awaiting ``fdatasync``)."""

    def __init__(self, can_close: Callable[[Segment], bool], limit: int = MAX_OPEN_SEALED):
        self._lru: "OrderedDict[Segment, None]" = OrderedDict()
        self._can_close = can_close
        self._limit = limit

    def use(self, seg: Segment) -> None:
        """Mark ``seg`` (loaded, sealed) as just used; close the least recently used ones beyond
        the limit."""
        lru = self._lru
        lru[seg] = None
        lru.move_to_end(seg)
        while len(lru) > self._limit:
            old, _ = lru.popitem(last=False)
            if self._can_close(old):
                old.unload()

    def forget(self, seg: Segment) -> None:
        """Drop a segment that left the stream (retention): it is closed once unreferenced."""
        self._lru.pop(seg, None)
