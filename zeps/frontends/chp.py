"""The CHP front end's state: everything it decides, for one stream. Pure.

The shell owns the three sockets and the stream's ZEPS side, and calls:

* snapshot ROUTER: :meth:`ChpFrontEnd.on_snapshot` with each request, then
  :meth:`~ChpFrontEnd.pump_snapshots` with its ``send`` until it returns False;
* collector SUB (or PULL): :meth:`~ChpFrontEnd.on_collect` with each message; a KVSET comes
  back as the :class:`~zeps.frontends.chp_codec.KvMsg` to publish on the stream (UUID and
  properties kept);
* the stream's live feed: :meth:`~ChpFrontEnd.on_live` with every message, in sequence order;
  it returns the KVPUB to send on the PUB socket and keeps the ttl schedule;
* timers: :meth:`~ChpFrontEnd.expired` (the deletes to publish for ttls that are due) and
  :meth:`~ChpFrontEnd.hugz` (a HUGZ every second, updates or not), woken at
  :meth:`~ChpFrontEnd.next_deadline`.

The snapshot source (``source(subtree)``, the shell's: SNAPSHOT on a peering of its own with
the broker) returns the sequence ``S`` the snapshot is consistent at (or a callable that gives
it once the entries are done: SNAPSHOT-END's) and an iterable of the live keys'
``(key, sequence, value)`` as they stood at ``S``, or :data:`~zeps.frontends.snapshots.WAIT`
while the next ones are on their way: one KVSYNC per key under the subtree (each with its
last update's sequence), then KTHXBAI with ``S``. ``S`` is the highest sequence the snapshot
reflects, at least every KVSYNC's: the client discards KVPUBs at or below it, all of which the
snapshot holds (the Guide's servers send their sequence the same way).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import chp_codec as codec
from .counters import Counters
from .snapshots import WAIT, Frames, Send, Snapshots
from .ttl import TtlSchedule
from .wire import DEFAULT_LIMITS, Buffer, Limits, Malformed, decode_or_count

#: The shell's snapshot source: subtree -> (sequence or a callable giving it at the end,
#: (key, sequence, value) of each live key, or WAIT).
Source = Callable[[str], Tuple[Union[int, Callable[[], int]], Iterable[Any]]]


class Heartbeat:
    """HUGZ: due every ``interval`` seconds, updates or not. A client of a subtree sees only
    its subtree's KVPUBs: HUGZ sent only when the PUB socket was idle never reached a client of
    a quiet subtree while another was busy, and the Guide's clients take 5 s without a HUGZ
    for a dead server (they failed over and asked a snapshot again; found by review)."""
    __slots__ = ("interval", "last")

    def __init__(self, interval: float = 1.0, now: float = 0.0):
        self.interval = interval
        self.last = now

    def activity(self, now: float) -> None:
        self.last = now

    def due(self, now: float) -> bool:
        return now - self.last >= self.interval

    def next_deadline(self) -> float:
        return self.last + self.interval


def _whole_stream(req: codec.IcanHaz) -> bool:
    """A subtree the broker's SNAPSHOT would take for a regex: the shell reads every key for
    it, and the front end filters them (:mod:`.snapshots` runs one such scan at a time)."""
    return req.subtree.startswith("~")


class ChpFrontEnd:
    def __init__(self, source: Source, limits: Limits = DEFAULT_LIMITS, *, now: float = 0.0,
                 counters: Optional[Counters] = None, hugz_interval: float = 1.0,
                 max_ttl_keys: int = 1_000_000, **snapshot_options):
        self.source = source
        self.limits = limits
        self.counters = counters if counters is not None else Counters()
        self.snapshots = Snapshots(self._open, self.counters, whole=_whole_stream,
                                   **snapshot_options)
        self.heartbeat = Heartbeat(hugz_interval, now)
        self.ttl = TtlSchedule(max_ttl_keys)
        #: Added to every sequence sent (KVSYNC, KTHXBAI, KVPUB): the highest one sent before
        #: the stream was deleted and made again (:meth:`stream_made_again`), 0 until then.
        self.base = 0
        #: The highest sequence sent so far.
        self.sent = 0

    # ------------------------------------------------------------------ snapshot ROUTER
    def on_snapshot(self, ident: bytes, frames: Sequence[Buffer], now: float) -> bool:
        """ICANHAZ? from ``ident``: queued (True), or ignored and counted."""
        req = decode_or_count(codec.decode_icanhaz, frames, self.limits, self.counters,
                              "snapshot")
        return req is not None and self.snapshots.request(ident, req)

    def pump_snapshots(self, send: Send, now: float) -> bool:
        return self.snapshots.pump(send, now)

    def _open(self, req: codec.IcanHaz) -> Tuple[Iterator[Optional[Frames]], Any]:
        sequence, entries = self.source(req.subtree)
        subtree, base = req.subtree, self.base
        if callable(sequence):
            return (self._kvsyncs(subtree, entries, base),
                    lambda: self._kthxbai(sequence() + base, subtree))
        return self._kvsyncs(subtree, entries, base), self._kthxbai(sequence + base, subtree)

    def _kthxbai(self, sequence: int, subtree: str) -> Frames:
        self.sent = max(self.sent, sequence)
        return codec.encode_kthxbai(sequence, subtree)

    def _kvsyncs(self, subtree: str, entries, base: int) -> Iterator[Optional[Frames]]:
        counters = self.counters
        try:
            for entry in entries:
                if entry is WAIT:
                    yield WAIT
                    continue
                key, sequence, value = entry
                if not value or not key.startswith(subtree):
                    yield None
                elif key in codec.RESERVED_KEYS:
                    counters.add("snapshot.reserved key")
                    yield None
                else:
                    yield codec.encode_kvsync(key, sequence + base, value)
        finally:
            close = getattr(entries, "close", None)
            if close is not None:
                close()

    # ------------------------------------------------------------------ collector
    def on_collect(self, frames: Sequence[Buffer], now: float) -> Optional[codec.KvMsg]:
        """KVSET: the message to publish on the stream (sequence 0: the stream gives one), or
        None (malformed, or its ttl cannot be scheduled: counted)."""
        msg = decode_or_count(codec.decode_kvset, frames, self.limits, self.counters,
                              "collector")
        if msg is None:
            return None
        if msg.value and msg.ttl is not None and not self.ttl.has_room(msg.key):
            self.counters.add("collector.refused.ttl full")
            return None
        self.counters.add("collector.kvset")
        return msg

    # ------------------------------------------------------------------ live feed
    def on_message(self, sequence: int, key: str, value: bytes, headers, now: float, *,
                   replayed: bool = False) -> Optional[Frames]:
        """A message of the stream as ZEPS delivers it (headers: ``(name, bytes)`` pairs):
        :meth:`on_live` of its CHP reading (:func:`~zeps.frontends.chp_codec.from_message`;
        headers CHP cannot carry are left out and counted)."""
        msg, dropped = codec.from_message(sequence, key, value, headers, self.limits)
        if dropped and not replayed:
            self.counters.add("publisher.headers left out", dropped)
        return self.on_live(msg, now, replayed=replayed)

    def on_live(self, msg: codec.KvMsg, now: float, *, replayed: bool = False
                ) -> Optional[Frames]:
        """A message of the stream (``msg.sequence`` its ZEPS sequence; UUID and properties as
        published, empty for a plain ZEPS publish): the KVPUB to send, or None for a key no CHP
        client may see (empty, or a command word: counted). Keeps the ttl schedule: an update
        with a ttl (re)schedules its key's delete, any other update or a delete cancels it.

        ``replayed``: a message the front end reads again at start (the stream as it was when
        the broker started; ``now`` is then the time it was journalled, on the caller's clock):
        only the ttl schedule is kept, nothing is sent or counted, and None is returned."""
        key = msg.key
        if not key or key in codec.RESERVED_KEYS:
            if not replayed:
                self.counters.add("publisher.reserved key")
            return None
        ttl = None
        if msg.value:
            try:
                ttl = msg.ttl
            except Malformed:                      # a ZEPS publisher's bad ttl header
                if not replayed:
                    self.counters.add("publisher.bad ttl")
        if ttl is None:
            self.ttl.cancel(key)
        elif not self.ttl.set(key, now + ttl):
            self.counters.add("ttl.full")
        if replayed:
            return None
        self.counters.add("publisher.kvpub")
        if self.base:
            msg = replace(msg, sequence=msg.sequence + self.base)
        self.sent = max(self.sent, msg.sequence)
        return codec.encode_kvpub(msg)

    # ------------------------------------------------------------------ timers
    def expired(self, now: float, limit: int = 256) -> List[codec.KvMsg]:
        """The deletes to publish for keys whose ttl is due (empty value, no UUID, no
        properties); each key once, until it is set again with a ttl."""
        keys = self.ttl.due(now, limit)
        if keys:
            self.counters.add("ttl.expired", len(keys))
        return [codec.KvMsg(key) for key in keys]

    def hugz(self, now: float) -> Optional[Frames]:
        if not self.heartbeat.due(now):
            return None
        self.heartbeat.activity(now)
        return codec.encode_hugz()

    def next_deadline(self, now: float) -> float:
        deadline = self.heartbeat.next_deadline()
        for d in (self.ttl.next_deadline(), self.snapshots.next_deadline(now)):
            if d is not None and d < deadline:
                deadline = d
        return deadline

    def stream_made_again(self) -> None:
        """The stream was deleted and made again: no key of the old one is due, and the new
        stream's sequences, which start again from 1, are sent above every one sent so far.
        RFC 12's sequences only increase: a connected client takes an update only above the
        last it applied, so it kept the deleted keys and missed every update until the new
        stream passed the old one's sequence, while HUGZ told it the server was alive (found
        by review). (The base lives in this process only: after a broker restart the stream's
        own sequences are sent again.)"""
        self.ttl = TtlSchedule(self.ttl.max_keys)
        self.base = self.sent

    def close(self) -> None:
        self.snapshots.close()
