"""The Event BUS front end's shell (``zeps broker --bus PORT:STREAM``): the protocol's three
sockets for one stream, on :class:`~zeps.frontends.shell.FrontEndShell`.

* snapshot ROUTER on ``P``: SYNCSTART subtrees sequence -> one SYNC per event above the
  sequence under any of the subtrees, in order, then SYNCEND with the sequence ``S`` the
  snapshot reflects (:mod:`.bus`). Events are read from the journal itself
  (:class:`~zeps.journal.JournalReader`, read-only, 64 records at a time as the session goes);
* publisher PUB on ``P+1``: a BROADCAST per message of the stream, with its ZEPS sequence;
* collector ROUTER on ``P+2``: each PUB from a DEALER is published on the stream, its producer
  id, timestamp and UUID as headers (:func:`.bus_codec.to_headers`).

``S`` is the last sequence the front end broadcast (at start: the stream's last sequence, from
which its link subscribes), so every event above it goes out on the PUB socket after the
snapshot was asked for. Output speaks ``--bus-dialect`` (:data:`.bus_codec.RFC` or
``REFERENCE``); input accepts both.
"""
from __future__ import annotations

from typing import Iterator, List, Tuple

import zmq.green as zmq

from . import bus_codec
from .bus import BusFrontEnd
from .shell import FrontEndShell

#: Records read from the journal at a time by a snapshot session (and their bytes, at least one
#: record): what an open session holds besides its head message.
READ_RECORDS = 64
READ_BYTES = 256 << 10


class BusServer(FrontEndShell):
    COLLECT_FRAMES = 6
    COLLECT_IDENT = 1

    def __init__(self, spec, *, dialect: bus_codec.Dialect = bus_codec.RFC, **kw):
        super().__init__(spec, **kw)
        self.frontend = BusFrontEnd(self._source, self.limits, dialect=dialect,
                                    counters=self.counters)

    def collector_type(self) -> int:
        return zmq.ROUTER

    def stats(self) -> dict:
        out = super().stats()
        out["dialect"] = self.frontend.dialect.name
        return out

    # ------------------------------------------------------------------ the stream
    def delivered(self, d, now: float) -> None:
        frames = self.frontend.on_message(d.sequence, d.key, d.body, d.timestamp, d.headers)
        try:
            self.pub.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            self.counters.add("publisher.dropped")

    # ------------------------------------------------------------------ the collector
    def collected(self, frames: List[bytes], now: float) -> None:
        event = self.frontend.on_collect(frames[1:], now)     # frames[0]: the DEALER's id
        if event is not None:
            self.publish(event.topic, event.data, bus_codec.to_headers(event))

    # ------------------------------------------------------------------ snapshots
    def _source(self, subtrees, after: int) -> Tuple[int, Iterator[bus_codec.Event]]:
        upto = self.link.position or 0
        return upto, self._events(after, upto)

    def _events(self, after: int, upto: int) -> Iterator[bus_codec.Event]:
        seq = after + 1
        while seq <= upto:
            reader = self.reader()
            if reader is None:
                return
            records = reader.read_batch(seq, max_records=READ_RECORDS, max_bytes=READ_BYTES)
            if not records:
                return
            for r in records:
                if r.sequence > upto:
                    return
                yield bus_codec.from_message(r.sequence, r.key, r.body, r.timestamp, r.headers)
            seq = records[-1].sequence + 1
