"""A front end's ZEPS side: one peering with the broker, attached to the front end's stream.
Pure: frames and ``now`` in, frames and messages out; the shell owns the DEALER socket.

The front end is an ordinary ZEPS client of its broker (so limits and refusals apply to it as
to anyone), speaking the wire protocol directly (``docs/protocol.md``):

1. ``HEADERS-SELECT``, ``ATTACH stream`` (a plain ATTACH: the operator named the stream, so
   under ``--auto-create yes`` it is created; under ``no`` a missing one is retried every
   ``retry`` seconds);
2. on ``ATTACH-OK``: ``DELIVER-TIMESTAMPS`` (so that a message without headers carries its
   journal timestamp too), ``STREAM-ID`` (the stream's incarnation), ``STREAM-INFO``;
3. on ``STREAM-INFO-OK``: ``SUBSCRIBE "" latest`` and ``CREDIT window``. ``latest`` is the last
   sequence taken (a re-attach resumes without a gap or a repeat), else the stream's last
   sequence (BUS: live from here; the snapshot socket reads the journal itself). A front end
   that starts with a ``snapshot`` (CHP) sends ``CREDIT window`` and ``SNAPSHOT ""`` instead
   the first time (and after a reset): every live key's latest message comes as a
   :class:`Delivered` with ``snapshot`` set (in key order: CHP rebuilds its ttl schedule from
   them, nothing is sent to its clients), then on SNAPSHOT-END ``SUBSCRIBE "" S``, ``S`` its
   sequence (no gap, no repeat). The stream must have a key index; a refusal is retried every
   ``retry`` seconds, as a refused ATTACH.

Messages come as DELIVER-H (with headers) or DELIVER-TS; each is handed on once, in sequence
order (:class:`Delivered`). Credit is given back as it is used (half a window at a time). A
PING goes out every ``ping_interval`` seconds so the broker never expires the peering. A
``DETACH`` from the broker (expiry, a deleted stream) or an INVALID before the subscription is
in place starts over at step 1; an INVALID while attached answers a publish (the broker refused
it: counted, its reason kept for the log). A stream whose last sequence is below the position
taken, or whose incarnation (STREAM-ID-OK) is not the one the link read before, was deleted and
made again: the position is dropped (:attr:`Link.reset` is set for the shell) and the new
stream is read as at start. (The last sequence alone missed a stream made again that had more
messages than the position by the time the link attached again.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from zeps.protocol import ProtocolError, commands as c, decode, encode, encode_publish
from zeps.protocol.headers import BadHeaders, encode_block, publish_h_frame

from .counters import Counters

IDLE, ATTACHING, INFO, SUBSCRIBING, LIVE = "idle", "attaching", "info", "subscribing", "live"
SNAPSHOTTING = "snapshotting"
_ATTACHED = (INFO, SNAPSHOTTING, SUBSCRIBING, LIVE)
#: DELIVER-TS's and DELIVER-H's frame length minus the credit the message costs; DELIVER's.
_TS_OVERHEAD = 15
_PLAIN_OVERHEAD = 7

_HEADERS_SELECT = encode(c.HeadersSelect())
_TIMESTAMPS = encode(c.DeliverTimestamps())
_STREAM_INFO = encode(c.StreamInfo())
_STREAM_ID = encode(c.StreamId())
_PING = encode(c.Ping())


@dataclass(frozen=True)
class Delivered:
    """A message of the stream: its sequence, key, body, journal timestamp (ns; 0 if the broker
    sent a plain DELIVER) and headers (``(name, bytes)`` pairs, empty for none); ``snapshot``:
    a key's latest message from the start-up SNAPSHOT (key order), not a new one."""
    sequence: int
    key: str
    body: bytes
    timestamp: int = 0
    headers: Tuple[Tuple[str, bytes], ...] = ()
    snapshot: bool = False


def publish_frame(key: str, body: bytes, headers: Sequence[Tuple[str, bytes]] = ()) -> bytes:
    """PUBLISH, or PUBLISH-H when there are headers. Raises ValueError (BadHeaders, a key over
    255 bytes) for what cannot be sent."""
    if not headers:
        return encode_publish(key, body)
    kb = key.encode("utf-8")
    if len(kb) > 255:
        raise ValueError("key over 255 bytes")
    return publish_h_frame(encode_block(headers), kb, body)


def publish_size(body: bytes, headers: Sequence[Tuple[str, bytes]] = ()) -> int:
    """What the broker checks against its body limit: the body and the headers' block."""
    if not headers:
        return len(body)
    return len(body) + 6 + sum(3 + len(n.encode("utf-8")) + len(v) for n, v in headers)


class Link:
    def __init__(self, stream: str, *, snapshot: bool = False, window: int = 8 << 20,
                 ping_interval: float = 10.0, retry: float = 1.0,
                 counters: Optional[Counters] = None, now: float = 0.0):
        self.stream = stream
        self.snapshot = snapshot
        self.window = window
        self.ping_interval = ping_interval
        self.retry = retry
        self.counters = counters if counters is not None else Counters()
        self.state = IDLE
        #: the last sequence handed on, or skipped by a link that does not replay (None: none)
        self.position: Optional[int] = None
        #: the stream's last sequence when the subscription was made the first time (or after
        #: a reset; SNAPSHOT-END's for a front end that starts with a snapshot)
        self.head: Optional[int] = None
        #: set when the stream was deleted and made again (the shell clears it)
        self.reset = False
        #: the incarnation of the stream the position is of (STREAM-ID-OK; None: not known)
        self.incarnation: Optional[int] = None
        #: the broker's last refusal (INVALID's reason), for the log
        self.last_refusal: Optional[str] = None
        self.outbox: List[bytes] = []
        self._consumed = 0
        self._next_ping = now + ping_interval
        self._retry_at = now

    # ------------------------------------------------------------------ state
    @property
    def attached(self) -> bool:
        """Publishes may be sent (ATTACH-OK seen)."""
        return self.state in _ATTACHED

    @property
    def live(self) -> bool:
        return self.state == LIVE

    @property
    def caught_up(self) -> bool:
        """Live, and every message up to the head taken."""
        return (self.state == LIVE and self.head is not None
                and (self.position or 0) >= self.head)

    # ------------------------------------------------------------------ time
    def tick(self, now: float) -> None:
        """Attach when due; a PING every ``ping_interval``."""
        if self.state == IDLE and now >= self._retry_at:
            self.state = ATTACHING
            self.outbox += [_HEADERS_SELECT, encode(c.Attach(self.stream))]
            self.counters.add("zeps.attach")
        if now >= self._next_ping:
            self._next_ping = now + self.ping_interval
            self.outbox.append(_PING)

    def next_deadline(self) -> float:
        if self.state == IDLE:
            return min(self._retry_at, self._next_ping)
        return self._next_ping

    # ------------------------------------------------------------------ frames
    def on_frame(self, frame: bytes, now: float) -> Optional[Delivered]:
        """One frame from the broker: the message it delivers, if any (each once, in order)."""
        try:
            cmd = decode(frame)
        except ProtocolError:
            self.counters.add("zeps.bad frame")
            return None
        if isinstance(cmd, (c.DeliverHeaders, c.DeliverTs, c.Deliver)):
            return self._deliver(cmd, len(frame))
        state = self.state
        if isinstance(cmd, (c.SnapshotEntry, c.SnapshotEntryH)):
            return self._entry(cmd, len(frame))
        if isinstance(cmd, c.SnapshotEnd) and state == SNAPSHOTTING:
            self.position = self.head = cmd.sequence
            self.counters.set("zeps.position", cmd.sequence)
            self.state = SUBSCRIBING
            self.outbox.append(encode(c.Subscribe("", cmd.sequence)))
            return None
        if isinstance(cmd, c.AttachOk) and state == ATTACHING:
            self.state = INFO
            self.outbox += [_TIMESTAMPS, _STREAM_ID, _STREAM_INFO]
        elif isinstance(cmd, c.StreamIdOk) and state == INFO:
            if self.incarnation is not None and cmd.incarnation != self.incarnation:
                self._made_again()
            self.incarnation = cmd.incarnation
        elif isinstance(cmd, c.StreamInfoOk) and state == INFO:
            self._subscribe(cmd.last)
        elif isinstance(cmd, c.SubscribeOk) and state == SUBSCRIBING:
            self.state = LIVE
        elif isinstance(cmd, c.Detach):
            self.counters.add("zeps.detached")
            self._down(now, 0.0)
        elif isinstance(cmd, c.Invalid):
            self.last_refusal = cmd.reason
            if state == LIVE or (state == SNAPSHOTTING and "key index" not in cmd.reason):
                self.counters.add("zeps.refused")
            else:
                self.counters.add("zeps.attach refused")
                self._down(now, self.retry)
        return None

    def _made_again(self) -> None:
        """The stream was deleted and made again: nothing of the new one is taken yet."""
        if self.position is None:
            return
        self.position = None
        self.reset = True
        self.counters.add("zeps.stream reset")
        self.counters.set("zeps.position", 0)

    def _subscribe(self, last: int) -> None:
        if self.position is not None and self.position > last:
            self._made_again()
        self._consumed = 0
        if self.position is None and self.snapshot:
            self.state = SNAPSHOTTING            # SNAPSHOT-END subscribes (credit given now)
            self.outbox += [encode(c.Credit(self.window)), encode(c.Snapshot(("",)))]
            return
        if self.position is None:
            self.head = self.position = last     # taken: what came before is not read
            self.counters.set("zeps.position", last)
        self.state = SUBSCRIBING
        self.outbox += [encode(c.Subscribe("", self.position)), encode(c.Credit(self.window))]

    def _entry(self, cmd, size: int) -> Optional[Delivered]:
        self._credit_used(size - _TS_OVERHEAD)
        if self.state != SNAPSHOTTING:
            return None
        return Delivered(cmd.sequence, cmd.key, cmd.body, cmd.timestamp,
                         getattr(cmd, "headers", ()), snapshot=True)

    def _credit_used(self, cost: int) -> None:
        self._consumed += cost
        if self._consumed >= self.window // 2:
            self.outbox.append(encode(c.Credit(self._consumed)))
            self._consumed = 0

    def _deliver(self, cmd, size: int) -> Optional[Delivered]:
        overhead = _PLAIN_OVERHEAD if isinstance(cmd, c.Deliver) else _TS_OVERHEAD
        self._credit_used(size - overhead)
        if self.state not in (SUBSCRIBING, LIVE):
            return None
        seq = cmd.sequence
        if self.position is not None and seq <= self.position:
            self.counters.add("zeps.repeated")
            return None
        self.position = seq
        self.counters.set("zeps.position", seq)
        return Delivered(seq, cmd.key, cmd.body, getattr(cmd, "timestamp", 0),
                         getattr(cmd, "headers", ()))

    def _down(self, now: float, delay: float) -> None:
        self.state = IDLE
        self._retry_at = now + delay

    # ------------------------------------------------------------------ publishing
    def publish(self, key: str, body: bytes, headers: Sequence[Tuple[str, bytes]] = ()
                ) -> Optional[bytes]:
        """The frame that publishes a message, or None if it cannot be sent (counted)."""
        try:
            return publish_frame(key, body, headers)
        except (BadHeaders, ValueError):
            self.counters.add("zeps.unsendable")
            return None
