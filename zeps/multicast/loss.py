"""Datagram loss, measured from the datagram numbers of each bridge session (pure, ``now`` given).

Every datagram of a bridge session carries the next number (1, 2, 3, ...). :class:`LossMeter`
classifies each datagram a receiver gets as new, late (a number skipped earlier that arrived
after all: reordering) or duplicate, and sums per time window how many datagrams were expected
(the numbers the highest seen advanced over) and how many arrived. Memory is bounded: the
missing numbers it remembers per session lie within ``track`` of the highest, and it keeps the
last ``sessions`` sessions. It remembers them as runs (first, last), so a datagram costs the
same whatever it skips (one forged number ``track`` ahead cost ``track`` dictionary entries).

Numbers are not authenticated, so one forged datagram must not be able to move a session's
numbers far: a number more than ``track`` away from the session's highest is *far* -- neither
counted nor remembered (its datagram is still used, as any other) -- unless the session has sent
nothing near its highest for ``hold`` seconds (a receiver that stopped reading for long comes
back far behind the bridge: the session starts over at that number). A late datagram counts as
expected and received in the window it arrives in when its number went missing in an earlier
one, so windows go on being judged while real datagrams fill numbers a forged one skipped. When
a new session would make more than ``sessions``, the least used one is forgotten (a flood of
one-datagram sessions does not push out the bridge's).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["DUPLICATE", "FAR", "LATE", "NEW", "LossMeter", "Window"]

NEW, LATE, DUPLICATE, FAR = "new", "late", "duplicate", "far"


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


def _first(run: list[int]) -> int:
    return run[0]


def _last(run: list[int]) -> int:
    return run[1]


class _Session:
    __slots__ = ("high", "missing", "near", "seen")

    def __init__(self, number: int, now: float):
        self.high = number
        #: Skipped numbers not yet arrived, as runs ``[first, last, window]`` by increasing
        #: number (window: the index of the window in which they went missing).
        self.missing: list[list[int]] = []
        #: When a number within ``track`` of ``high`` last came.
        self.near = now
        self.seen = 1


def _arrived(missing: list[list[int]], number: int) -> int | None:
    """Take ``number`` out of the runs of ``missing``; the window it went missing in, or None if
    it was not missing."""
    i = bisect_right(missing, number, key=_first) - 1
    if i < 0 or missing[i][1] < number:
        return None
    run = missing[i]
    first, last, went = run
    if first == last:
        del missing[i]
    elif number == first:
        run[0] = number + 1
    elif number == last:
        run[1] = number - 1
    else:
        run[1] = number - 1
        missing.insert(i + 1, [number + 1, last, went])
    return went


class LossMeter:
    """Counts expected and received datagrams per window of ``window`` seconds."""

    def __init__(self, window: float, now: float, *, track: int = 4096, sessions: int = 4,
                 hold: float | None = None):
        if not window > 0:
            raise ValueError("loss window must be more than zero seconds")
        self.window = window
        self.track = track
        self.max_sessions = sessions
        #: Seconds without a number near a session's highest before a far one restarts it.
        self.hold = 2 * window if hold is None else hold
        self._sessions: OrderedDict[int, _Session] = OrderedDict()
        self._ends = now + window
        self._index = 0
        self._expected = 0
        self._received = 0
        #: Datagrams lost since the start (late arrivals taken back).
        self.lost_total = 0

    def observe(self, session: int, number: int, now: float) -> str:
        """Classify one datagram: :data:`NEW`, :data:`LATE`, :data:`DUPLICATE` or :data:`FAR`."""
        sessions = self._sessions
        s = sessions.get(session)
        if s is None:
            if len(sessions) >= self.max_sessions:
                del sessions[min(sessions, key=lambda k: sessions[k].seen)]   # least used
            sessions[session] = _Session(number, now)
            self._count(1)
            return NEW
        sessions.move_to_end(session)
        s.seen += 1
        if abs(number - s.high) > self.track:
            if now - s.near < self.hold:
                return FAR
            s.high, s.near = number, now         # nothing near for long: start over here
            s.missing.clear()
            self._count(1)
            return NEW
        s.near = now
        if number > s.high:
            skipped = number - s.high - 1
            missing = s.missing
            if skipped:
                missing.append([s.high + 1, number - 1, self._index])
            floor = number - self.track             # numbers up to it are forgotten
            if missing and missing[0][0] <= floor:
                del missing[:bisect_right(missing, floor, key=_last)]
                if missing and missing[0][0] <= floor:
                    missing[0][0] = floor + 1
            s.high = number
            self._count(skipped + 1)
            return NEW
        went = _arrived(s.missing, number)
        if went is not None:
            if went != self._index:             # counted as lost in an earlier window
                self._expected += 1
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
        self._index += 1
        self._ends += self.window
        if self._ends <= now:
            self._ends = now + self.window
        return w

    def next_deadline(self) -> float:
        """When the current window ends."""
        return self._ends
