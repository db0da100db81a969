"""The front ends' I/O shell: the sockets and the greenlet of one front end, in the broker's
process (``zeps broker --chp PORT:STREAM``, ``--bus PORT:STREAM``).

Thin on purpose, as the broker's own shell: the pure state (:mod:`.chp`, :mod:`.bus`,
:mod:`.link`) decides, this moves bytes and time. Each front end has one greenlet and five
sockets (``zmq.green``): the three of its protocol, bound on ``P``, ``P+1`` and ``P+2`` on the
broker's host, and one DEALER connected to the broker's own endpoint: the front end is an
ordinary ZEPS client of its stream (:class:`~zeps.frontends.link.Link`), so what its clients
publish is journalled, limited and refused as anyone's, a ZEPS subscriber sees it, and a CHP or
BUS client sees what ZEPS clients publish. A round:

1. the link: its control frames out, then up to ``READ_MAX`` frames in; each message delivered
   goes to the front end (:meth:`FrontEndShell.delivered`, which sends KVPUB/BROADCAST);
2. the collector, only while the link is attached and took the last publish: up to
   ``READ_MAX`` messages, each a publish on the link. A publish the DEALER cannot take
   (``SNDHWM`` reached: the broker reads only as fast as it journals) is held, alone, and the
   collector is not read until it went out: a flood waits in its senders' sockets and the
   kernel, and the collector's small ``RCVHWM`` keeps what is read ahead to a few MiB;
3. the snapshot ROUTER, once the front end can answer (the link is live): up to ``READ_MAX``
   requests, then a pump of the snapshot sessions (:mod:`.snapshots`: bounded per round; a
   reader that never reads fills its own pipe, its ``SNDHWM`` of 16 messages, and holds
   nothing else; CHP's sessions each read a SNAPSHOT from the broker on a DEALER of their own,
   which the wait polls while a session waits for it);
4. the timers (CHP: HUGZ, ttl deletes).

Then it yields (``gevent.sleep(0)``; while it discards, until the hub polled its descriptors:
:meth:`FrontEndShell._serve`) if there is more to do, else it polls its sockets until the next
deadline. Every read is capped (:class:`~zeps.frontends.capped.CappedReader`): of a message
with more frames than the largest command has, the first frames are handed on (and counted
malformed) and the rest is discarded at most ``DISCARD_MAX`` frames a round, so one message
of millions of frames never holds the broker's process; libzmq drops a connection that sends
a frame over the socket's ``MAXMSGSIZE``. What a peer sends that does not parse is ignored
and counted (:class:`~zeps.frontends.counters.Counters`; shown in ``/varz`` under
``frontends``, and logged once per reason and at stop).
"""
from __future__ import annotations

import errno
import math
import os
import time
from typing import Callable, List, Optional

import gevent
import zmq.green as zmq

from zeps.journal import JournalConfig, JournalError, JournalReader, stream_dir_name

from .capped import CappedReader
from .counters import Counters
from .link import Link, publish_size
from .spec import FrontEndSpec, hosts_of
from .wire import DEFAULT_LIMITS, Limits

#: Messages read from one socket per round, then the others get their turn.
READ_MAX = 256
#: The snapshot ROUTER's queues, in messages, per peer: at most this many ...
SNAPSHOT_HWM = 16
#: ... and at most this many bytes of the largest messages (libzmq counts messages): what a
#: peer that asks for a snapshot and never reads holds in the broker (:func:`snapshot_hwm`).
SNAPSHOT_PIPE_BYTES = 2 << 20
#: The DEALER to the broker: publishes queued before the collector stops being read.
LINK_SNDHWM = 100
#: What a collector reads ahead off one peer, in bytes (its RCVHWM is this over the largest frame).
COLLECTOR_READ_AHEAD = 8 << 20
#: Longest poll when nothing is due.
IDLE_WAIT = 1.0

_NB = zmq.NOBLOCK


def snapshot_hwm(limits: Limits) -> int:
    """The snapshot ROUTER's ``SNDHWM``: :data:`SNAPSHOT_HWM` messages, fewer where that many
    of the largest (``limits.frame_limit()``) would pass :data:`SNAPSHOT_PIPE_BYTES`, at least
    2. With the default ``--max-message`` (1 MiB) it is 2: a reader that never reads holds two
    entries of a snapshot in the broker, not 16 (16 MiB of the largest values)."""
    return max(2, min(SNAPSHOT_HWM, SNAPSHOT_PIPE_BYTES // limits.frame_limit()))


class FrontEndShell:
    """What both front ends' shells share; :class:`~zeps.frontends.chp_server.ChpServer` and
    :class:`~zeps.frontends.bus_server.BusServer` add their sockets' commands."""

    #: the link starts with a SNAPSHOT of the stream (CHP: its ttl schedule), else at its end
    SNAPSHOT_START = False
    #: the largest command of the collector, in frames, and 1 if a ROUTER's identity precedes
    COLLECT_FRAMES = 6
    COLLECT_IDENT = 0

    def __init__(self, spec: FrontEndSpec, *, broker_endpoint: str, data_dir: str,
                 context, journal_config: Optional[JournalConfig] = None,
                 limits: Limits = DEFAULT_LIMITS, log=None, expiry: float = 60.0,
                 pub_hwm: int = 1000, clock: Callable[[], float] = time.monotonic,
                 wall_ns: Callable[[], int] = time.time_ns):
        self.spec = spec
        self.limits = limits
        self.log = log
        self.clock = clock
        self.wall_ns = wall_ns
        self.ctx = context
        self.data_dir = data_dir
        self.journal_config = journal_config or JournalConfig()
        self.counters = Counters()
        self.host, self.broker_endpoint = hosts_of(broker_endpoint)
        self.pub_hwm = pub_hwm
        window = max(8 << 20, 2 * (limits.max_value + (64 << 10) + 1024))
        self.link = Link(spec.stream, snapshot=self.SNAPSHOT_START, window=window,
                         ping_interval=max(0.5, min(10.0, expiry / 3)),
                         counters=self.counters, now=clock())
        self.sockets: List = []
        self._pending: List[bytes] = []          # one publish the DEALER could not take
        self._greenlet: Optional[gevent.Greenlet] = None
        self._reader: Optional[JournalReader] = None
        self._logged: set = set()
        self._malformed = 0

    # ------------------------------------------------------------------ sockets
    def _socket(self, kind: int, **options):
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if self.host.startswith("["):
            s.setsockopt(zmq.IPV6, 1)
        for name, value in options.items():
            s.setsockopt(getattr(zmq, name), value)
        self.sockets.append(s)
        return s

    def _bind(self, kind: int, offset: int, **options):
        s = self._socket(kind, **options)
        s.bind(f"tcp://{self.host}:{self.spec.port + offset}")
        return s

    def open(self) -> "FrontEndShell":
        """Bind the protocol's three sockets and connect the link (zmq.ZMQError if a port is
        taken: nothing is left open)."""
        try:
            snap_max = max(self.limits.max_subtrees_bytes, 255) + 1024
            self.snapshot = self._bind(zmq.ROUTER, 0, ROUTER_MANDATORY=1,
                                       SNDHWM=snapshot_hwm(self.limits), RCVHWM=SNAPSHOT_HWM,
                                       MAXMSGSIZE=snap_max)
            self.pub = self._bind(zmq.PUB, 1, SNDHWM=self.pub_hwm)
            frame_limit = self.limits.frame_limit()
            hwm = max(8, min(1000, COLLECTOR_READ_AHEAD // frame_limit))
            self.collector = self._bind(self.collector_type(), 2, RCVHWM=hwm,
                                        MAXMSGSIZE=frame_limit, **self.collector_options())
            self.dealer = self._socket(zmq.DEALER, SNDHWM=LINK_SNDHWM,
                                       RCVHWM=1000, IPV6=1 if "[" in self.broker_endpoint else 0)
            self.dealer.connect(self.broker_endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        counters = self.counters
        self._link_in = CappedReader(self.dealer, 1, "zeps", counters)
        self._collector_in = CappedReader(self.collector,
                                          self.COLLECT_IDENT + self.COLLECT_FRAMES + 1,
                                          "collector", counters)
        self._snapshot_in = CappedReader(self.snapshot, 1 + 4, "snapshot", counters)
        return self

    def collector_type(self) -> int:
        raise NotImplementedError

    def collector_options(self) -> dict:
        return {}

    def start(self) -> "FrontEndShell":
        self._greenlet = gevent.spawn(self._serve)
        return self

    def stop(self) -> None:
        g = self._greenlet
        if g is not None:
            g.kill(block=True, timeout=5)
        self.close()
        if self.log is not None:
            self.log.info("frontend_stopped", frontend=self.spec.name, stream=self.spec.stream,
                          counters=self.counters.as_dict())

    def close(self) -> None:
        for s in self.sockets:
            s.close(0)
        self.sockets = []
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.frontend.close()

    def stats(self) -> dict:
        """For ``/varz``: the front end, its stream and its counters (a live view)."""
        return {"kind": self.spec.kind, "port": self.spec.port, "stream": self.spec.stream,
                "state": self.link.state, "position": self.link.position,
                "counters": self.counters.as_dict()}

    # ------------------------------------------------------------------ the journal
    def reader(self) -> Optional[JournalReader]:
        """The stream's journal, read-only (None while the stream has no directory)."""
        if self._reader is None:
            path = os.path.join(self.data_dir, stream_dir_name(self.spec.stream))
            try:
                self._reader = JournalReader(path, self.journal_config)
            except (JournalError, OSError):
                return None
        return self._reader

    def forget_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # ------------------------------------------------------------------ the loop
    def _serve(self) -> None:
        """Rounds; after a busy one, ``gevent.sleep(0)``, except while a socket's message of
        too many frames is being discarded: then the next round waits on a zero timer, which
        fires once the hub has polled its descriptors (as the broker's busy turns,
        ``zeps/broker/server.py``). A ``gevent.sleep(0)`` is queued as a callback, and gevent
        runs 50 of those before it looks at its descriptors: 50 rounds of ``DISCARD_MAX``
        frames ran in a row, and a ZEPS PING waited 0.7 s (median) for its answer; 18 ms now.
        The other busy rounds are as they were: they cost at most ``READ_MAX`` small messages
        each, and yielding so for them too changed what a calm client meets in a flood of
        SYNCSTARTs (``tests/test_bus_frontend.py``: it asked sooner, and waited longer)."""
        hub = gevent.get_hub()
        busy = hub.loop.timer(0.0)
        readers = (self._link_in, self._collector_in, self._snapshot_in)
        try:
            while True:
                if not self._round(self.clock()):
                    self._wait()
                elif any(r.discarding for r in readers):
                    hub.wait(busy)
                else:
                    gevent.sleep(0)
        except gevent.GreenletExit:
            pass
        except Exception as exc:                      # a bug: say so, keep the broker up
            if self.log is not None:
                self.log.exception("frontend_failed", frontend=self.spec.name, error=str(exc))
            raise
        finally:
            busy.close()

    def _round(self, now: float) -> bool:
        link = self.link
        link.tick(now)
        self._flush()
        busy = self._read_link(now)
        if link.reset:
            link.reset = False
            self.stream_reset()
        if link.attached and not self._pending:
            busy |= self._read_collector(now)
        if self.snapshots_ready():
            busy |= self._read_snapshots(now)
        busy |= bool(self.frontend.pump_snapshots(self._snapshot_send, now))
        busy |= self.timers(now)
        self._flush()
        malformed = self.counters["snapshot.malformed"] + self.counters["collector.malformed"]
        if malformed != self._malformed:
            self._malformed = malformed
            self.note_malformed()
        return busy

    def _wait(self) -> None:
        now = self.clock()
        deadline = self.link.next_deadline()
        d = self.frontend.next_deadline(now)
        if d is not None:
            deadline = min(deadline, d)
        timeout = min(max(deadline - now, 0.0), IDLE_WAIT)
        poller = zmq.Poller()
        out = zmq.POLLOUT if (self.link.outbox or self._pending) else 0
        poller.register(self.dealer, zmq.POLLIN | out)
        if self.link.attached and not self._pending:
            poller.register(self.collector, zmq.POLLIN)
        if self.snapshots_ready():
            poller.register(self.snapshot, zmq.POLLIN)
        for sock in self.waiting_sockets():
            poller.register(sock, zmq.POLLIN)
        poller.poll(math.ceil(timeout * 1000))

    def _flush(self) -> None:
        """The link's control frames, then the held publish, as far as the DEALER takes them."""
        for queue in (self.link.outbox, self._pending):
            sent = 0
            try:
                for frame in queue:
                    self.dealer.send(frame, _NB)
                    sent += 1
            except zmq.Again:
                pass
            finally:
                del queue[:sent]
            if queue:
                return

    # Each read below is a turn of READ_MAX messages at most (CappedReader.read_turn): False
    # when the socket is empty (done), True when busy (yield, then go on).
    def _read_link(self, now: float) -> bool:
        link = self.link

        def handle(frames: List[bytes]) -> None:
            d = link.on_frame(frames[0], now)
            if d is not None:
                self.delivered(d, now)
        return self._link_in.read_turn(handle, READ_MAX)

    def _read_collector(self, now: float) -> bool:
        return self._collector_in.read_turn(lambda frames: self.collected(frames, now),
                                            READ_MAX, held=lambda: self._pending)

    def _read_snapshots(self, now: float) -> bool:
        frontend = self.frontend
        return self._snapshot_in.read_turn(
            lambda frames: frontend.on_snapshot(frames[0], frames[1:], now), READ_MAX)

    def _snapshot_send(self, ident: bytes, frames: List[bytes]) -> Optional[bool]:
        """Send a snapshot's message: True sent, False the peer's pipe is full, None it is
        gone. A refusal is asked again once after ZMQ_EVENTS: libzmq counts a pipe's room from
        what its I/O thread last reported, and a send reads those reports at most about once a
        millisecond, so with a pipe of 2 messages a reader that had long taken them was found
        full (``SNAPSHOT_PIPE_BYTES``; the client SDK's publisher meets the same)."""
        sock = self.snapshot
        for again in (True, False):
            try:
                sock.send_multipart([ident, *frames], _NB)
                return True
            except zmq.Again:
                if not again:
                    return False
                sock.getsockopt(zmq.EVENTS)          # reads the I/O thread's reports
            except zmq.ZMQError as exc:
                if exc.errno == errno.EHOSTUNREACH:
                    return None
                raise
        return False

    def publish(self, key: str, body: bytes, headers=()) -> bool:
        """Publish on the stream through the link (held if the DEALER is full)."""
        if publish_size(body, headers) > self.limits.max_value:
            self.counters.add("collector.refused.too large")
            return False
        frame = self.link.publish(key, body, headers)
        if frame is None:
            return False
        self._pending.append(frame)
        self._flush()
        return True

    def note_malformed(self) -> None:
        """Log each reason a peer's command was ignored for, the first time it is seen."""
        if self.log is None:
            return
        for name in self.counters.as_dict():
            if ".malformed." in name and name not in self._logged:
                self._logged.add(name)
                self.log.warning("frontend_ignored", frontend=self.spec.name,
                                 what=name, detail="a peer's command did not parse: ignored "
                                 "and counted (logged once per reason)")

    # ------------------------------------------------------------------ the front end's part
    frontend = None

    def delivered(self, d, now: float) -> None:
        raise NotImplementedError

    def collected(self, frames: List[bytes], now: float) -> None:
        raise NotImplementedError

    def snapshots_ready(self) -> bool:
        return self.link.live

    def waiting_sockets(self) -> List:
        """Sockets whose input a snapshot session waits for (the wait ends when one has some)."""
        return []

    def stream_reset(self) -> None:
        self.forget_reader()

    def timers(self, now: float) -> bool:
        return False
