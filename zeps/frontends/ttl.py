"""When keys with a ``ttl`` are due to be deleted (CHP's ephemeral values). Pure: the caller
passes ``now`` (any monotonic clock, in seconds).

One due time per key: setting a key again replaces its due time, and an update without a ttl
(or a delete) cancels it. A heap orders the due times; replaced and cancelled entries stay in it
until they surface or until it holds more than twice the live ones plus 64, when it is rebuilt,
so a flood of updates to one key cannot grow it. At most ``max_keys`` keys are scheduled:
:meth:`TtlSchedule.set` returns False for one more (the caller counts and refuses it).
"""
from __future__ import annotations

import heapq
from typing import Dict, List, Optional, Tuple


class TtlSchedule:
    __slots__ = ("max_keys", "_due", "_heap", "_gen")

    def __init__(self, max_keys: int = 1_000_000):
        self.max_keys = max_keys
        self._due: Dict[str, Tuple[float, int]] = {}      # key -> (due, generation)
        self._heap: List[Tuple[float, int, str]] = []
        self._gen = 0

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: str) -> bool:
        return key in self._due

    def has_room(self, key: str) -> bool:
        return key in self._due or len(self._due) < self.max_keys

    def set(self, key: str, due: float) -> bool:
        """``key`` is deleted at ``due`` unless set again or cancelled first."""
        if not self.has_room(key):
            return False
        self._gen += 1
        self._due[key] = (due, self._gen)
        heapq.heappush(self._heap, (due, self._gen, key))
        self._compact()
        return True

    def cancel(self, key: str) -> None:
        if self._due.pop(key, None) is not None:
            self._compact()

    def due(self, now: float, limit: int = 256) -> List[str]:
        """Keys due at ``now``, earliest first, at most ``limit``; each is unscheduled."""
        out: List[str] = []
        heap = self._heap
        while heap and len(out) < limit and heap[0][0] <= now:
            due, gen, key = heapq.heappop(heap)
            if self._due.get(key) == (due, gen):
                del self._due[key]
                out.append(key)
        return out

    def next_deadline(self) -> Optional[float]:
        heap = self._heap
        while heap and self._due.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)                            # a stale entry on top
        return heap[0][0] if heap else None

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(due, gen, key) for key, (due, gen) in self._due.items()]
            heapq.heapify(self._heap)
