"""What a client takes from a broker at most: the frames it reads, and the deliveries it hands.

**The frame bound.** Every socket a :class:`~zeps.clients.peering.Peering` is served on (the
first and each reconnect's) reads frames of at most :attr:`Peering.read_limit` bytes: libzmq's
``ZMQ_MAXMSGSIZE``, checked on a frame's length before it holds a byte of it. Without it the
client read any frame a broker sent (its DEALER has no receive high-water mark: credit bounds
what an honest broker sends): a lying broker's 256 MiB frame took a client to ~686 MiB.

The bound (``max_frame=None``, the default) follows the credit window, the protocol's own
promise: a broker never delivers more credit than it holds, and it holds at most the window,
so no honest DELIVER, DELIVER-TS, DELIVER-H or DELIVER-BATCH is longer than the window plus
its head (:data:`DELIVERY_HEAD`); no reply is longer than a listing page (1024 names: under
300 KiB). Hence :func:`frame_bound`: ``max(4 MiB, window + 64 KiB)``, 8 MiB + 64 KiB by
default (:data:`FRAME_FLOOR`, 4 MiB, fits the window any client of a default broker grows
to). It is never tightened below the window from ``LIMITS-OK``: a DELIVER-BATCH holds several
messages, up to the credit whatever ``max_message`` says, and libzmq reads the option only
when a socket connects (a socket's bound cannot change). When the window grows (``LIMITS-OK``
of a broker whose messages are over ~2 MiB, or its advice) past what the socket reads, the
credit is not granted on that socket: the peering is re-established on a new one whose bound
fits (once: the window is kept; ``on_connection`` hears a loss and a reconnect). An explicit
``max_frame`` (Kafka's ``receive.message.max.bytes``, at least 1 MiB) is every socket's bound
and caps the window at ``max_frame - 64 KiB``, as ``--max-credit`` does: a message costing
more is refused with the broker's advice (:class:`~zeps.clients.errors.InvalidError`).

**A frame over the bound.** libzmq drops the connection without reading it (the socket
monitor says ``DISCONNECTED``) and, unlike after a network error, does not reconnect (no
``CONNECT_RETRIED`` follows: its session ends on a protocol error). A connection that had
completed its handshake and is dropped without ``CONNECT_RETRIED`` within :data:`DROP_GRACE`
(libzmq sends it at once, from the same I/O thread) was refused a frame: the next call raises
:class:`~zeps.clients.errors.FrameTooLarge` once, and the peering is re-established on a new
socket, as after any lost connection (a lying broker that does it again is told again).

**Duplicates.** A delivery at or below the last sequence received (or one before the client
subscribed) never reaches the application: as confluent-kafka skips messages below the offset
it fetched, it is dropped and counted (:attr:`Peering.duplicates`, ``Client.duplicates``), and
its credit is not granted back (a broker is paid for what it delivers, not for repeating it);
it still counts against the window, so the beyond-credit check stays exact. Once repeats have
used up the top-up (half the window), the peering is re-established (as nats-py's ordered
consumer resets on a sequence mismatch): a new connection, re-subscribed after the last
message handed, with the whole window again. An honest broker never repeats itself (one
position per client: a new pattern never rewinds it).

:class:`Bounds` is a mixin of :class:`~zeps.clients.peering.Peering`, which owns the state.
"""
from __future__ import annotations

import logging
from typing import Optional

from ..protocol.codec import FRAME_SLACK
from .errors import FrameTooLarge

__all__ = ["FRAME_FLOOR", "MIN_MAX_FRAME", "FRAME_SLACK", "DELIVERY_HEAD", "DROP_GRACE",
           "frame_bound", "check_max_frame", "Bounds"]

log = logging.getLogger("zeps.client")

#: The least frame bound: every reply fits (the longest, a listing page, is under 300 KiB), and
#: so does the window a broker with the default ``--max-message`` (1 MiB) asks for (twice its
#: largest message: ~2.1 MiB), so that its clients never reconnect to grow the bound.
FRAME_FLOOR = 4 << 20
#: The least ``max_frame`` a client may ask for: every reply fits.
MIN_MAX_FRAME = 1 << 20
#: More than any delivery frame's length over its credit cost (DELIVER-BATCH's head: 23).
DELIVERY_HEAD = 64
#: Seconds a dropped connection waits for libzmq's ``CONNECT_RETRIED`` before it is taken for
#: a refused frame. libzmq's I/O thread sends it right after the DISCONNECTED when it
#: reconnects; the margin is for a host that stalls that thread: too short a grace would tell
#: an honest broker's restart as a refused frame (one FrameTooLarge), too long only delays
#: the error a lying broker earns.
DROP_GRACE = 1.0
#: While waiting for it, the peering's timers come this often (s).
_DROP_LOOK = 0.002


def frame_bound(window: int) -> int:
    """The longest frame an honest broker sends a client whose credit window is ``window``."""
    return max(FRAME_FLOOR, window + FRAME_SLACK)


def check_max_frame(max_frame: Optional[int]) -> None:
    """Raise :class:`ValueError` for a ``max_frame`` no client can work with."""
    if max_frame is None:
        return
    if isinstance(max_frame, bool) or not isinstance(max_frame, int) or \
            max_frame < MIN_MAX_FRAME:
        raise ValueError(f"max_frame must be None or at least {MIN_MAX_FRAME} bytes (the "
                         f"broker's replies), not {max_frame!r}")


class Bounds:
    """The frame bound, dropped connections and duplicates (see the module docs)."""

    __slots__ = ()

    def read_bound(self) -> int:
        """The ``ZMQ_MAXMSGSIZE`` of the next socket."""
        return self.max_frame or frame_bound(self.credit_window)

    def credit_cap(self) -> Optional[int]:
        """The most credit this client may grant: the broker's ``max_credit`` (when known),
        and what ``max_frame`` reads."""
        caps = [x for x in (self.max_credit, self.max_frame and self.max_frame - FRAME_SLACK)
                if x]
        return min(caps) if caps else None

    def outgrown(self) -> bool:
        """The window outgrew the socket: it could not read a delivery the window allows."""
        return self.credit_window + DELIVERY_HEAD > self.read_limit

    def regrow(self) -> None:
        """Re-establish the peering on a socket that reads what the window allows."""
        self.connection_lost(f"the credit window grew to {self.credit_window} bytes: a new "
                             f"connection reads frames of up to {self.read_bound()} bytes")

    # ------------------------------------------------------------------ dropped connections

    def connection_dropped(self, now: float) -> None:
        """The socket monitor saw a connection that completed its handshake close: libzmq's
        next event says why (:meth:`zmq_reconnecting`, else :meth:`_judge_drop`)."""
        if self.dropped_at is None:
            self.dropped_at = now

    def zmq_reconnecting(self) -> None:
        """libzmq reconnects (``CONNECT_RETRIED``): the broker or the network closed it."""
        if self.dropped_at is not None:
            self.dropped_at = None
            self.connection_lost("connection closed by the broker")

    def drop_timer(self, now: float) -> float:
        return min(self.dropped_at + DROP_GRACE, now + _DROP_LOOK)

    def _judge_drop(self, now: float) -> None:
        if now - self.dropped_at < DROP_GRACE:
            return
        self.dropped_at = None
        limit = self.read_limit
        what = (f"this client's max_frame, {limit} bytes" if self.max_frame else
                f"{limit} bytes, the most an honest broker sends with this client's credit "
                f"window of {self.credit_window} bytes (max_frame=None)")
        why = f"a frame longer than {what}, or not a ZeroMQ frame"
        log.warning("zeps: ZeroMQ dropped the connection to %s: it sent %s", self.endpoint, why)
        self.error = self.error or FrameTooLarge(
            f"the broker at {self.endpoint} sent {why}: ZeroMQ dropped the connection without "
            f"reading it (ZMQ_MAXMSGSIZE); reconnecting", self.endpoint, limit)
        self.connection_lost("ZeroMQ refused a frame")

    # ------------------------------------------------------------------ duplicates

    def _duplicate(self, cost: int, count: int = 1) -> None:
        """``count`` deliveries costing ``cost`` repeated sequences already received (or came
        before a subscription): dropped, counted, their credit not granted back."""
        self.duplicates += count
        self.wasted += cost
        if self.wasted >= self.topup or self.buffered + self.consumed + self.wasted > \
                self.credit_window:
            log.warning("zeps: the broker at %s re-sent messages already received (stream "
                        "%r, %d so far): starting the peering over after sequence %d",
                        self.endpoint, self.stream, self.duplicates, self.last_handed)
            self.connection_lost(f"the broker re-sent {self.wasted} bytes of messages already "
                                 f"received")
