"""Passes of the broker's timers over all it holds (the sessions for expiry, the open streams
for retention and the compaction check), spread over their period in slices of bounded size.

One round's timers used to visit every session, or every open stream, at once: a stall every
message routed meanwhile waited for (issue 20; ``python -m bench.bench_timers``, in
docs/benchmarks.md under "The timers' rounds"). A :class:`Sweep` takes what to visit when its
pass starts and hands it out at most ``size`` at a time, its slices evenly spaced across the
period, so that a round's timer work is bounded whatever the broker holds; with ``size`` or
fewer items a pass is one slice, every ``period`` seconds, as a plain timer.

Pure: the caller gives the time, and looks up each key it is handed (a session forgotten, a
stream closed since the pass started is not there any more). A pass lists keys, not
(key, value) pairs: building a list of 10,000 pairs took longer than the pass's visits.
"""
from __future__ import annotations

from typing import Callable, Generic, Iterable, List, TypeVar

T = TypeVar("T")


class Sweep(Generic[T]):
    """A pass every ``period`` seconds over the items ``items()`` lists when the pass starts,
    handed out by :meth:`take` at most ``size`` at a time; :attr:`next_at` is when the next
    slice is due (the timers' deadline), :attr:`passes` counts the passes started."""

    __slots__ = ("period", "size", "next_at", "passes", "_todo", "_pos", "_step")

    def __init__(self, period: float, size: int):
        if size < 1:
            raise ValueError(f"a sweep's slice holds at least one item, not {size}")
        self.period = period
        self.size = size
        self.next_at = float("-inf")
        self.passes = 0
        self._todo: List[T] = []
        self._pos = 0
        self._step = period

    def take(self, now: float, items: Callable[[], Iterable[T]]) -> List[T]:
        """The slice due at ``now`` (empty if none is due yet). The first slice of a pass
        lists ``items()``; the pass's slices follow each other ``period / slices`` apart, and
        the next pass starts that long after its last slice."""
        if now < self.next_at:
            return []
        if not self._todo:                         # a new pass
            self._todo = list(items())
            self._pos = 0
            self.passes += 1
            slices = max(1, -(-len(self._todo) // self.size))
            self._step = self.period / slices
        part = self._todo[self._pos:self._pos + self.size]
        self._pos += self.size
        if self._pos >= len(self._todo):           # the pass is over: let go of its items
            self._todo = []
        self.next_at = now + self._step
        return part

    @property
    def pending(self) -> int:
        """Items of the pass under way not handed out yet."""
        return max(len(self._todo) - self._pos, 0)
