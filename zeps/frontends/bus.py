"""The Event BUS front end's state, for one stream. Pure.

The shell owns the three sockets and the stream's ZEPS side, and calls:

* snapshot ROUTER: :meth:`BusFrontEnd.on_snapshot` with each request, then
  :meth:`~BusFrontEnd.pump_snapshots` with its ``send`` until it returns False;
* collector ROUTER: :meth:`~BusFrontEnd.on_collect` with each message (identity removed); a PUB
  comes back as the :class:`~zeps.frontends.bus_codec.Event` to publish on the stream (producer
  id, timestamp and UUID kept);
* the stream's live feed: :meth:`~BusFrontEnd.on_live` with every message, in sequence order;
  it returns the BROADCAST to send on the PUB socket.

The snapshot source (``source.events(subtrees, after)``, the shell's) returns the stream's
sequence ``S`` and an iterable of the events ``after < sequence <= S`` in order (it may leave
out topics outside the subtrees; those left in are skipped here). The snapshot holds every
event above the client's sequence under any of its subtrees, not only the latest per topic, as
the reference implementation's does; SYNCEND carries ``S``, the highest sequence the snapshot
reflects, as the reference's carries its own sequence.

A session's SYNCs come from a :class:`Scan`, a cursor over the source that can park: between
its turns, while other requests wait, it holds its cursor only and opens the source again after
it (:mod:`.snapshots`), so a SYNCSTART that scans the whole journal for subtrees that match
nothing takes turns with the others instead of holding a slot to its end.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional, Sequence, Tuple

from . import bus_codec as codec
from .counters import Counters
from .snapshots import Frames, Send, Snapshots
from .wire import DEFAULT_LIMITS, Buffer, Limits, decode_or_count

#: The shell's snapshot source: (subtrees, after) -> (sequence, events in order).
Source = Callable[[Tuple[str, ...], int], Tuple[int, Iterable[codec.Event]]]


def prefixes(subtrees: Sequence[str]) -> Tuple[str, ...]:
    """The distinct subtrees as ``str.startswith`` takes them; ``("",)`` if one is empty."""
    if "" in subtrees:
        return ("",)
    return tuple(dict.fromkeys(subtrees))


class Scan:
    """The SYNCs of one SYNCSTART: per event of the source above ``after`` up to ``last``, its
    SYNC or None (another subtree). :meth:`park` closes the source's iterator (the shell's holds
    records read ahead) and keeps the last sequence examined; the next entry opens the source
    again after it. So a parked session costs a cursor, and a turn at most one read ahead that
    is read again."""

    __slots__ = ("_source", "_wanted", "_after", "_last", "_events", "_dialect", "_done")

    def __init__(self, source: Source, wanted: Tuple[str, ...], after: int, last: int,
                 events: Optional[Iterable[codec.Event]], dialect: codec.Dialect):
        self._source = source
        self._wanted = wanted
        self._after = after                  # the last sequence examined (or asked above)
        self._last = last
        self._events: Optional[Iterator[codec.Event]] = (
            iter(events) if events is not None else None)
        self._dialect = dialect
        self._done = False

    def __iter__(self) -> "Scan":
        return self

    def __next__(self) -> Optional[Frames]:
        if self._done:
            raise StopIteration
        if self._events is None:
            if self._after >= self._last:
                self.close()
                raise StopIteration
            self._events = iter(self._source(self._wanted, self._after)[1])
        event = next(self._events, None)
        if event is None or event.sequence > self._last:
            self.close()
            raise StopIteration
        if event.sequence <= self._after:
            return None
        self._after = event.sequence
        if not event.topic.startswith(self._wanted):
            return None
        return codec.encode_sync(event, self._dialect)

    def park(self) -> None:
        self._drop_events()

    def close(self) -> None:
        self._done = True
        self._drop_events()

    def _drop_events(self) -> None:
        events, self._events = self._events, None
        close = getattr(events, "close", None)
        if close is not None:
            close()


class BusFrontEnd:
    def __init__(self, source: Source, limits: Limits = DEFAULT_LIMITS, *,
                 dialect: codec.Dialect = codec.RFC, counters: Optional[Counters] = None,
                 **snapshot_options):
        self.source = source
        self.limits = limits
        self.dialect = dialect
        self.counters = counters if counters is not None else Counters()
        self.snapshots = Snapshots(self._open, self.counters, **snapshot_options)

    # ------------------------------------------------------------------ snapshot ROUTER
    def on_snapshot(self, ident: bytes, frames: Sequence[Buffer], now: float) -> bool:
        """SYNCSTART from ``ident``: queued (True), or ignored and counted."""
        req = decode_or_count(codec.decode_syncstart, frames, self.limits, self.counters,
                              "snapshot")
        return req is not None and self.snapshots.request(ident, req)

    def pump_snapshots(self, send: Send, now: float) -> bool:
        return self.snapshots.pump(send, now)

    def _open(self, req: codec.SyncStart) -> Tuple[Iterator[Optional[Frames]], Frames]:
        wanted = prefixes(req.subtrees)
        sequence, events = self.source(wanted, req.sequence)
        end = codec.encode_syncend(req.subtrees, sequence, self.dialect)
        return Scan(self.source, wanted, req.sequence, sequence, events, self.dialect), end

    # ------------------------------------------------------------------ collector
    def on_collect(self, frames: Sequence[Buffer], now: float) -> Optional[codec.Event]:
        """PUB: the event to publish on the stream, or None (malformed: counted)."""
        event = decode_or_count(codec.decode_pub, frames, self.limits, self.counters,
                                "collector")
        if event is None:
            return None
        self.counters.add("collector.pub")
        return event

    # ------------------------------------------------------------------ live feed
    def on_message(self, sequence: int, key: str, value: bytes, timestamp_ns: int,
                   headers=()) -> Frames:
        """A message of the stream as ZEPS delivers it: :meth:`on_live` of its event
        (:func:`~zeps.frontends.bus_codec.from_message`)."""
        return self.on_live(codec.from_message(sequence, key, value, timestamp_ns, headers))

    def on_live(self, event: codec.Event) -> Frames:
        """A message of the stream (``event.sequence`` its ZEPS sequence; a plain ZEPS publish
        has no producer nor UUID and its journal timestamp): the BROADCAST to send."""
        self.counters.add("publisher.broadcast")
        return codec.encode_broadcast(event, self.dialect)

    def next_deadline(self, now: float) -> Optional[float]:
        return self.snapshots.next_deadline(now)

    def close(self) -> None:
        self.snapshots.close()
