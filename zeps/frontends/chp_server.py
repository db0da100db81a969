"""The CHP front end's shell (``zeps broker --chp PORT:STREAM``): RFC 12's three sockets for
one stream, on :class:`~zeps.frontends.shell.FrontEndShell`.

* snapshot ROUTER on ``P``: ICANHAZ? -> one KVSYNC per live key under the subtree, then
  KTHXBAI with the sequence ``S`` the snapshot is consistent at (:mod:`.chp`);
* publisher PUB on ``P+1``: a KVPUB per message of the stream, with its ZEPS sequence, and a
  HUGZ every second (a client of a quiet subtree hears it while others are busy);
* collector on ``P+2``: a SUB, as the RFC says (default), or a PULL (``--chp-collector pull``)
  for the Guide's Python Clone client, whose ``clone.py`` connects a PUSH there. Each KVSET
  is published on the stream, its UUID and properties as headers (:func:`.chp_codec.to_headers`).

**Where the snapshot comes from: SNAPSHOT.** Each ICANHAZ? that gets a session (the bounded
sessions of :mod:`.snapshots`) opens a ZEPS peering of its own with the broker
(:class:`BrokerSnapshot`: a DEALER and the SDK's sans-I/O
:class:`~zeps.clients.snapshot.SnapshotReader`) that runs SNAPSHOT with the subtree as its
prefix: each entry becomes a KVSYNC as the session sends it, SNAPSHOT-END's sequence is
KTHXBAI's. The broker streams the entries under the peering's credit (one window, about
``--max-message`` + 65 KiB), which is granted back one entry at a time as the session takes
them: a CHP reader that never reads stops its session, the session stops taking, and the
broker stops sending; what it holds is one window and one message. The peering is ended
(DETACH) when the session ends. So the stream must have a key index (``zeps stream create
--key-index``, ``--compact``, or the broker run with ``--key-index``; ``zeps broker`` checks at
start). At start the link reads a SNAPSHOT of the whole stream too, for the ttl schedule
(nothing is sent for it on the PUB socket; due times from the journal timestamps), then
subscribes from its sequence.

**No gap, no duplicate.** A client subscribes (PUB) before it asks (ICANHAZ?). The broker takes
SNAPSHOT's sequence ``S`` after every message journalled so far, so at least every message the
front end has already sent as a KVPUB; every message above ``S`` comes as a KVPUB after that;
the client applies the snapshot and then the KVPUBs above ``S``.

**ttl.** A message with a ``ttl`` header (a KVSET's ``ttl`` property) schedules its key's
delete ``ttl`` seconds after it was journalled; when due (and the key was not set again) the
front end publishes the delete (the key, an empty body), which every CHP client receives as a
KVPUB with an empty value and a ZEPS subscriber as an empty message. A delete decided just as
someone sets the key again can land after that update (the front end decides on what it has
been delivered); CHP's own servers have the same window between their threads.
"""
from __future__ import annotations

from typing import Callable, Iterator, List, Set, Tuple

import zmq.green as zmq

from zeps.clients.errors import NoStream
from zeps.clients.snapshot import SnapshotReader
from zeps.protocol import commands as c, encode

from . import chp_codec
from .chp import ChpFrontEnd
from .shell import FrontEndShell
from .snapshots import WAIT

COLLECTORS = ("sub", "pull")
#: How long a snapshot peering's DETACH may wait in its socket when the session ends, in ms.
DETACH_LINGER = 1000
_DETACH = encode(c.Detach())


class BrokerSnapshot:
    """One ICANHAZ?'s SNAPSHOT: a DEALER of its own to the broker, driven by the SDK's
    :class:`~zeps.clients.snapshot.SnapshotReader`. :meth:`entries` yields ``(key, sequence,
    body)`` per entry, or WAIT when the next frame has not come yet (:attr:`waiting`: the shell
    polls :attr:`sock`); :meth:`sequence` is SNAPSHOT-END's once they are done. Frames are read
    one at a time, and only when the previous entry was taken, so what the broker sent and the
    session did not take yet is at most one window."""

    def __init__(self, sock, stream: str, subtree: str, window: int,
                 opened: Callable[["BrokerSnapshot"], None],
                 closed: Callable[["BrokerSnapshot"], None]):
        self.sock = sock
        self.reader = SnapshotReader(stream, (subtree,), window)
        self.waiting = False
        self._closed = closed
        opened(self)

    def sequence(self) -> int:
        return self.reader.seq

    def _flush(self) -> None:
        out = self.reader.outgoing
        sent = 0
        try:
            for frame in out:
                self.sock.send(frame, zmq.NOBLOCK)
                sent += 1
        except zmq.Again:
            pass
        finally:
            del out[:sent]

    def entries(self) -> Iterator:
        r = self.reader
        try:
            while True:
                self._flush()
                for m in r.take():               # one entry at most (read one frame a time)
                    yield m.key, m.sequence, m.body
                if r.error is not None:
                    if isinstance(r.error, NoStream):
                        return                   # no stream (deleted): an empty snapshot
                    raise r.error
                if r.done:
                    return
                try:
                    frame = self.sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    self._flush()                # the CREDIT take() freed, before waiting for
                    self.waiting = True          # what it lets the broker send
                    yield WAIT
                    self.waiting = False
                    continue
                r.receive(frame)
        finally:
            self.close()

    def close(self) -> None:
        if self.sock is None:
            return
        sock, self.sock = self.sock, None
        self.waiting = False
        try:
            sock.send(_DETACH, zmq.NOBLOCK)      # the broker frees the peering at once
        except zmq.ZMQError:
            pass
        sock.close(DETACH_LINGER)
        self._closed(self)


class ChpServer(FrontEndShell):
    SNAPSHOT_START = True
    COLLECT_FRAMES = 5

    def __init__(self, spec, *, collector: str = "sub", **kw):
        super().__init__(spec, **kw)
        if collector not in COLLECTORS:
            raise ValueError(f"collector must be one of {COLLECTORS}")
        self.collector_kind = collector
        #: the credit of one snapshot peering: the largest entry fits
        self.snapshot_window = self.limits.max_value + (64 << 10) + 1024
        self._peerings: Set[BrokerSnapshot] = set()
        self.frontend = ChpFrontEnd(self._source, self.limits, now=self.clock(),
                                    counters=self.counters)

    def collector_type(self) -> int:
        return zmq.SUB if self.collector_kind == "sub" else zmq.PULL

    def collector_options(self) -> dict:
        return {"SUBSCRIBE": b""} if self.collector_kind == "sub" else {}

    def stats(self) -> dict:
        out = super().stats()
        out.update(collector=self.collector_kind, snapshot_peerings=len(self._peerings))
        return out

    # ------------------------------------------------------------------ the stream
    def delivered(self, d, now: float) -> None:
        if d.snapshot:                     # the start-up SNAPSHOT: the ttl schedule, no KVPUB
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
        self.frontend.stream_made_again()

    # ------------------------------------------------------------------ the collector
    def collected(self, frames: List[bytes], now: float) -> None:
        msg = self.frontend.on_collect(frames, now)
        if msg is not None:
            self.publish(msg.key, msg.value, chp_codec.to_headers(msg))

    # ------------------------------------------------------------------ snapshots
    def snapshots_ready(self) -> bool:
        return self.link.caught_up

    def _source(self, subtree: str) -> Tuple[Callable[[], int], Iterator]:
        """ICANHAZ? ``subtree``: a SNAPSHOT on a peering of its own (opened now)."""
        sock = self._socket_unlisted(zmq.DEALER)
        # SNAPSHOT takes no prefix starting with ~ (a regex): the whole stream, then, which
        # the front end filters by the subtree (chp.py does for every entry)
        prefix = "" if subtree.startswith("~") else subtree
        snap = BrokerSnapshot(sock, self.spec.stream, prefix, self.snapshot_window,
                              self._peerings.add, self._peerings.discard)
        return snap.sequence, snap.entries()

    def _socket_unlisted(self, kind: int):
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if "[" in self.broker_endpoint:
            s.setsockopt(zmq.IPV6, 1)
        s.connect(self.broker_endpoint)
        return s

    def waiting_sockets(self) -> List:
        return [p.sock for p in self._peerings if p.waiting]

    def close(self) -> None:
        super().close()                   # the sessions first: each closes its peering
        for p in list(self._peerings):
            p.close()

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
