"""The CHP front end's shell (``zeps broker --chp PORT:STREAM``): RFC 12's three sockets for
one stream, on :class:`~zeps.frontends.shell.FrontEndShell`.

* snapshot ROUTER on ``P``: ICANHAZ? -> one KVSYNC per live key under the subtree, then
  KTHXBAI with the sequence ``S`` the snapshot is consistent at (:mod:`.chp`);
* publisher PUB on ``P+1``: a KVPUB per message of the stream, with its ZEPS sequence, and a
  HUGZ after a second without one;
* collector on ``P+2``: a SUB, as the RFC says (default), or a PULL (``--chp-collector pull``)
  for the Guide's Python Clone client, whose ``clone.py`` connects a PUSH there. Each KVSET
  is published on the stream, its UUID and properties as headers (:func:`.chp_codec.to_headers`).

**Where the snapshot comes from (interim).** The key index (:mod:`.keyindex`) is the front
end's own until the journal's last-value index and its SNAPSHOT extension land: at start the
link reads the stream from its first message (nothing is sent for it on the PUB socket; the
ttl schedule is rebuilt from the journal timestamps) and the snapshot socket is read once it
has caught up; values are read from the journal (:class:`~zeps.journal.JournalReader`) as the
KVSYNCs go out, so a key costs the index about 150 bytes, not its value.

**ttl.** A message with a ``ttl`` header (a KVSET's ``ttl`` property) schedules its key's
delete ``ttl`` seconds after it was journalled; when due (and the key was not set again) the
front end publishes the delete (the key, an empty body), which every CHP client receives as a
KVPUB with an empty value and a ZEPS subscriber as an empty message. A delete decided just as
someone sets the key again can land after that update (the front end decides on what it has
been delivered); CHP's own servers have the same window between their threads.
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import zmq.green as zmq

from . import chp_codec
from .chp import ChpFrontEnd
from .keyindex import KeyIndex
from .shell import FrontEndShell

COLLECTORS = ("sub", "pull")


class ChpServer(FrontEndShell):
    REPLAY = True
    COLLECT_FRAMES = 5

    def __init__(self, spec, *, collector: str = "sub", max_keys: int = 1_000_000, **kw):
        super().__init__(spec, **kw)
        if collector not in COLLECTORS:
            raise ValueError(f"collector must be one of {COLLECTORS}")
        self.collector_kind = collector
        self.index = KeyIndex(max_keys)
        self.frontend = ChpFrontEnd(self._source, self.limits, now=self.clock(),
                                    counters=self.counters)

    def collector_type(self) -> int:
        return zmq.SUB if self.collector_kind == "sub" else zmq.PULL

    def collector_options(self) -> dict:
        return {"SUBSCRIBE": b""} if self.collector_kind == "sub" else {}

    def stats(self) -> dict:
        out = super().stats()
        out.update(collector=self.collector_kind, keys=len(self.index))
        return out

    # ------------------------------------------------------------------ the stream
    def delivered(self, d, now: float) -> None:
        if d.key and not self.index.apply(d.sequence, d.key, not d.body):
            self.counters.add("index.full")
            if self.log is not None and self.counters["index.full"] == 1:
                self.log.warning("chp_index_full", frontend=self.spec.name,
                                 max_keys=self.index.max_keys,
                                 detail="keys beyond are not in CHP snapshots")
        if d.sequence <= (self.link.head or 0):       # read again at start: no KVPUB
            age = max(0.0, (self.wall_ns() - d.timestamp) / 1e9) if d.timestamp else 0.0
            self.frontend.on_message(d.sequence, d.key, d.body, d.headers, now - age,
                                     replayed=True)
            return
        frames = self.frontend.on_message(d.sequence, d.key, d.body, d.headers, now)
        if frames is not None:
            self._broadcast(frames)

    def _broadcast(self, frames: List[bytes]) -> None:
        try:
            self.pub.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:                               # PUB drops rather than blocks
            self.counters.add("publisher.dropped")

    def stream_reset(self) -> None:
        super().stream_reset()
        self.index.clear()
        self.frontend.forget_ttls()

    # ------------------------------------------------------------------ the collector
    def collected(self, frames: List[bytes], now: float) -> None:
        msg = self.frontend.on_collect(frames, now)
        if msg is not None:
            self.publish(msg.key, msg.value, chp_codec.to_headers(msg))

    # ------------------------------------------------------------------ snapshots
    def snapshots_ready(self) -> bool:
        return self.link.caught_up

    def _source(self, subtree: str) -> Tuple[int, Iterator[Tuple[str, int, bytes]]]:
        sequence, entries = self.index.snapshot(subtree)
        return sequence, self._values(entries)

    def _values(self, entries) -> Iterator[Tuple[str, int, bytes]]:
        for key, seq in entries:
            value = self._value_at(seq) if seq is not None else None
            yield key, seq or 0, value or b""           # empty: skipped, but counted

    def _value_at(self, seq: int) -> Optional[bytes]:
        """The body of message ``seq`` (None if retention deleted it)."""
        reader = self.reader()
        if reader is None:
            return None
        records = reader.read_batch(seq, max_records=1, max_bytes=1)
        if records and records[0].sequence == seq:
            return records[0].body
        return None

    # ------------------------------------------------------------------ timers
    def timers(self, now: float) -> bool:
        hugz = self.frontend.hugz(now)
        if hugz is not None:
            self._broadcast(hugz)
        if not self.link.caught_up or self._pending:
            return False
        expired = self.frontend.expired(now, limit=64)
        for msg in expired:
            self.publish(msg.key, b"")
        return len(expired) == 64
