"""A key snapshot as the SDK reads it (SNAPSHOT, ids 74-77; docs/protocol.md "Snapshots"): the
sans-I/O reader both front ends drive, and the value handed to applications.

A snapshot is read on a connection of its own (a peering that never subscribes, as the broker
asks: SNAPSHOT before any SUBSCRIBE), so a :class:`~zeps.clients.Client` that is subscribed can
take one too. The reader opens with REASONS-SELECT, HEADERS-SELECT, STREAM-EXPECT 0 (a reader
never creates a stream: a missing one is :class:`~zeps.clients.errors.NoStream`), ATTACH,
LIMITS, a CREDIT of its window and SNAPSHOT; each entry becomes a
:class:`~zeps.clients.Message`; the credit an entry used is granted back once the application
has taken it (so a reader that stops iterating stops the broker sending: the broker keeps a
cursor, nothing more), as a subscriber's is (:mod:`.window`): once half the window is used, or
less where the broker would otherwise hold less than its largest entry's cost (LIMITS-OK says
what that is; a window smaller than that grows to twice it). Otherwise an entry of half the
window and a larger one after it would stall the snapshot for good: the reader waiting for
the entry, the broker for credit. SNAPSHOT-END gives :attr:`SnapshotReader.seq`, the sequence
the snapshot is consistent at: subscribe ``from_seq=seq + 1`` for what came after.
"""
from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional, Sequence

from zeps.protocol import ProtocolError, decode, encode
from zeps.protocol import commands as c
from zeps.protocol.headers import NO_HEADERS, Headers
from zeps.protocol.reasons import Reason
from zeps.protocol.snapshot import parse_entry

from .errors import ZepsError, invalid_error
from .message import Message
from .window import largest_cost, topup_for, window_for

__all__ = ["Snapshot", "SnapshotReader", "SNAPSHOT_WINDOW"]

#: Credit a snapshot reader grants (bytes of entries in flight).
SNAPSHOT_WINDOW = 4 << 20
#: An entry's frame length minus its credit cost (signature, id, timestamp, body length).
_ENTRY_OVERHEAD = 15


class Snapshot(list):
    """The entries of a snapshot (:class:`~zeps.clients.Message`, in key order per prefix) and
    ``seq``, the sequence they are consistent at: apply them, then the stream from ``seq + 1``."""

    def __init__(self, messages=(), seq: int = 0):
        super().__init__(messages)
        self.seq = seq

    def as_dict(self) -> dict:
        """``{key: body}`` of the entries."""
        return {m.key: m.body for m in self}

    def __repr__(self) -> str:
        return f"Snapshot({len(self)} entries, seq={self.seq})"


class SnapshotReader:
    """The protocol of one snapshot, without I/O. ``outgoing`` holds frames to send (the driver
    sends and clears it), :meth:`receive` takes each frame from the broker, :meth:`take` hands
    out the entries received (and queues the credit they free); ``done`` once SNAPSHOT-END came
    (``seq``, ``count``), ``error`` if the broker refused."""

    def __init__(self, stream: str, prefixes: Sequence[str] = ("",), window: int = SNAPSHOT_WINDOW):
        if isinstance(prefixes, str):
            prefixes = (prefixes,)
        self.stream = stream
        self.prefixes = tuple(prefixes)
        self.window = window
        self.outgoing: List[bytes] = [encode(cmd) for cmd in (
            c.ReasonsSelect(), c.HeadersSelect(), c.StreamExpect(0), c.Attach(stream),
            c.Limits(), c.Credit(window), c.Snapshot(self.prefixes))]
        self.buffered: Deque[Message] = deque()
        self.done = False
        self.error: Optional[ZepsError] = None
        self.seq = 0
        self.count = 0
        self._answers = 0               # of REASONS-SELECT, HEADERS-SELECT, STREAM-EXPECT
        self._used = 0                  # credit of entries handed out, not granted back yet
        self._pending = 0               # credit of entries received, not handed out yet
        self._topup = window // 2       # used credit granted back from this much (LIMITS-OK)

    def receive(self, frame: bytes) -> None:
        if self.error is not None:               # failed: nothing after it counts
            return
        got = parse_entry(frame)                 # the common frame, read in place
        if got is not None:
            if self._within_credit(frame):
                self.buffered.append(Message(got[1], got[2], got[3], got[0], self.stream,
                                             NO_HEADERS))
            return
        try:
            cmd = decode(frame)
        except ProtocolError as e:
            self.error = ZepsError(f"bad frame from the broker during a snapshot: {e}")
            return
        cls = type(cmd)
        if cls is c.SnapshotEntry or cls is c.SnapshotEntryH:
            if self._within_credit(frame):
                headers = Headers(cmd.headers) if cls is c.SnapshotEntryH else NO_HEADERS
                self.buffered.append(Message(cmd.sequence, cmd.key, cmd.body, cmd.timestamp,
                                             self.stream, headers))
        elif cls is c.SnapshotEnd:
            self.seq = cmd.sequence
            self.done = True
        elif cls is c.Invalid or cls is c.Error:
            if self._answers < 2:        # an older broker refusing an option: not fatal here
                self._answers += 1
                return
            if self.error is None:       # the first refusal says why (ATTACH's: no stream)
                self.error = invalid_error(Reason.received(cmd), "SNAPSHOT")
        elif cls in (c.ReasonsSelectOk, c.HeadersSelectOk, c.StreamExpectOk):
            self._answers += 1
        elif cls is c.LimitsOk:
            self._limits(cmd.max_message, cmd.max_credit)
        elif cls is c.Ping:
            self.outgoing.append(encode(c.PingOk()))
        elif cls is c.Detach:
            self.error = ZepsError("the broker sent DETACH during the snapshot")

    def _within_credit(self, frame: bytes) -> bool:
        """Count an entry, unless it costs more credit than the broker holds (what it was
        given less what came and was not granted back): then the snapshot fails. An honest
        broker never sends such an entry; one that does (ignoring the credit) had every entry
        buffered, whatever the application took, as a subscriber's peering is dropped then."""
        cost = len(frame) - _ENTRY_OVERHEAD
        if self._pending + self._used + cost > self.window:
            self.error = ZepsError(f"the broker sent more than the {self.window} bytes of "
                                   f"credit it was given during the snapshot")
            return False
        self.count += 1
        self._pending += cost
        return True

    def _limits(self, max_message: int, max_credit: int) -> None:
        """The broker's limits: the largest entry costs what its largest message does, or a
        dead-lettered one (with the headers the broker adds). A window smaller grows to twice
        that (CREDIT of the difference; the broker refuses none it can hold), and credit goes
        back early enough that the broker holds that much again once everything was taken."""
        largest = largest_cost(max_message)
        if largest > self.window:
            grown = window_for(self.window, largest, max_credit)
            if grown is None:        # over what the broker ever holds: it will say so
                return
            self.outgoing.append(encode(c.Credit(grown - self.window)))
            self.window = grown
        self._topup = topup_for(self.window, largest)

    def take(self) -> List[Message]:
        """The entries received so far (in order); their credit goes back to the broker once
        half the window is used, or less (:meth:`_limits`)."""
        out = list(self.buffered)
        self.buffered.clear()
        self._used += self._pending
        self._pending = 0
        if self._used >= self._topup and not self.done:
            self.outgoing.append(encode(c.Credit(self._used)))
            self._used = 0
        return out

    @property
    def finished(self) -> bool:
        """Nothing more will come (ended or refused) and every entry was taken."""
        return (self.done or self.error is not None) and not self.buffered
