"""Datagram loss, measured from the datagram numbers of each bridge session (pure, ``now`` given).

Every datagram of a bridge session carries the next number (1, 2, 3, ...). :class:`LossMeter`
classifies each datagram a receiver gets as new, late (a number skipped earlier that arrived
after all: reordering) or duplicate, and sums per time window how many datagrams were expected
(the numbers the highest seen advanced over) and how many arrived. Memory is bounded: the
missing numbers it remembers per session lie within ``track`` of the highest, and it keeps the
last ``sessions`` sessions.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["DUPLICATE", "LATE", "NEW", "LossMeter", "Window"]

NEW, LATE, DUPLICATE = "new", "late", "duplicate"


@dataclass(frozen=True, slots=True)
class Window:
    """One closed window: datagrams ``expected`` and ``received`` in it."""

    expected: int
    received: int

    @property
    def lost(self) -> int:
        """Expected datagrams that did not come (late ones of an earlier window offset it)."""
        return max(0, self.expected - self.received)

    @property
    def rate(self) -> float:
        """Lost / expected (0.0 when nothing was expected)."""
        return self.lost / self.expected if self.expected else 0.0


class _Session:
    __slots__ = ("high", "missing")

    def __init__(self, number: int):
        self.high = number
        self.missing: set[int] = set()


class LossMeter:
    """Counts expected and received datagrams per window of ``window`` seconds."""

    def __init__(self, window: float, now: float, *, track: int = 4096, sessions: int = 4):
        if not window > 0:
            raise ValueError("loss window must be more than zero seconds")
        self.window = window
        self.track = track
        self.max_sessions = sessions
        self._sessions: OrderedDict[int, _Session] = OrderedDict()
        self._ends = now + window
        self._expected = 0
        self._received = 0
        #: Datagrams lost since the start (late arrivals taken back).
        self.lost_total = 0

    def observe(self, session: int, number: int) -> str:
        """Classify one datagram: :data:`NEW`, :data:`LATE` or :data:`DUPLICATE`."""
        s = self._sessions.get(session)
        if s is None:
            s = self._sessions[session] = _Session(number)
            if len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
            self._count(1)
            return NEW
        self._sessions.move_to_end(session)
        if number > s.high:
            skipped = number - s.high - 1
            if skipped:
                floor = number - self.track
                s.missing.update(range(max(s.high + 1, floor), number))
                if len(s.missing) > self.track:
                    s.missing = {n for n in s.missing if n > floor}
            s.high = number
            self._count(skipped + 1)
            return NEW
        if number in s.missing:
            s.missing.discard(number)
            self._received += 1
            self.lost_total -= 1
            return LATE
        return DUPLICATE

    def _count(self, expected: int) -> None:
        self._expected += expected
        self._received += 1
        self.lost_total += expected - 1

    def roll(self, now: float) -> Window | None:
        """The window that ended by ``now`` (and start the next), or ``None`` if it has not.

        After a pause longer than a window, the windows with nothing in them are skipped."""
        if now < self._ends:
            return None
        w = Window(self._expected, self._received)
        self._expected = self._received = 0
        self._ends += self.window
        if self._ends <= now:
            self._ends = now + self.window
        return w

    def next_deadline(self) -> float:
        """When the current window ends."""
        return self._ends
