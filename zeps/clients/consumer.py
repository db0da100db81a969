"""A durable consumer as the SDK reads it (ids 80-92, docs/consumers.md): the sans-I/O member
both front ends drive (:class:`ConsumerPeering`), the messages it hands out
(:class:`ConsumerMessage`, with ``ack()``, ``nak()``, ``in_progress()``) and the checking of a
consumer's settings (:func:`consumer_add`).

A member reads on a connection of its own (a peering that CONSUMEs instead of subscribing, as
a snapshot reader does), so a :class:`~zeps.clients.Client` can publish, subscribe and consume
at once. The conversation, pipelined: REASONS-SELECT, STREAM-EXPECT 0 (a reader never creates a
stream: a missing one is :class:`~zeps.clients.errors.NoStream`), ATTACH, LIMITS (sizes the
credit window, :mod:`zeps.clients.window`), BATCH-SELECT, HEADERS-SELECT, DELIVER-TIMESTAMPS
(an INVALID to any of these five: an older broker, the feature is done without), CONSUME; on
CONSUME-OK the credit window. Messages then come as DELIVER (-TS, -H, -BATCH) under credit,
exactly as a subscriber's: the credit a message used is granted back once the application has
taken it and the top-up is reached, so a member that stops taking stops the broker sending.

Acknowledgements are queued on the peering and leave together: every ``ack()`` since the last
flush becomes ONE ACK frame of ranges (``zeps.protocol.consumer``: 5,000 consecutive messages
are one 16-byte range), NAKs follow it. A flush happens when the application asks for more and
nothing is buffered (before waiting for the broker), when the oldest queued acknowledgement is
:data:`ACK_DELAY` old, when :data:`~zeps.protocol.consumer.MAX_ACK_RANGES` ranges gathered, on
every batch asked for, and on close. ``in_progress()`` (PROGRESS) leaves at once: it is meant
for a long piece of work, between two asks.

Reconnects: a lost peering (the connection closed, the broker's DETACH, an INVALID "not
attached", a heartbeat unanswered) is joined again (CONSUME on a new connection): the messages
not acknowledged are the broker's to give again (to this member or another), so the messages
buffered are dropped, acknowledgements not yet sent are dropped, and acknowledging a message
received before the reconnect does nothing (it comes again). At-least-once, as the broker's.

Pure: no sockets, no clock (``now`` is passed in).
"""
from __future__ import annotations

import logging
import math
import struct
from collections import deque
from datetime import datetime
from typing import Callable, Deque, List, Optional, Tuple

from zeps.protocol import ProtocolError, decode, encode
from zeps.protocol import commands as c
from zeps.protocol.codec import decode_headers
from zeps.protocol.consumer import MAX_ACK_RANGES, bad_consumer_name, pack_ranges, ranges_of
from zeps.protocol.deliver import (DELIVER_ID, DELIVER_TS_ID, SEQ_OFFSET, SIGNATURE, TS_SHIFT,
                                   deliver_cost, key_body_of)
from zeps.protocol.headers import NO_HEADERS, Headers, deliver_h_cost
from zeps.protocol.reasons import Code, Reason
from zeps.units import to_timestamp_ns

from .batching import DELIVER_BATCH_HEAD, ENTRY_COST_EXTRA, BadEntries, decode_deliver_batch
from .defaults import DEFAULT_CREDIT_WINDOW, DEFAULT_HEARTBEAT
from .errors import ClientForked, ZepsError, ZepsTimeout, forked, invalid_error
from .message import Message
from .window import largest_cost, topup_for, window_for

__all__ = ["ConsumerMessage", "ConsumerPeering", "consumer_add", "ACK_MODES", "ACK_DELAY",
           "JOINING", "JOINED", "CLOSING", "CLOSED"]

log = logging.getLogger("zeps.client")

#: ``ack=`` of :func:`consumer_add` -> CONSUMER-ADD's ``ack``.
ACK_MODES = {"explicit": c.ACK_EXPLICIT, "all": c.ACK_ALL, "none": c.ACK_NONE}
#: Seconds an acknowledgement waits at most for others to leave with it (while messages are
#: buffered: once none is, it leaves before the member waits for the broker).
ACK_DELAY = 0.05
#: Seconds between two joins after a lost peering.
REJOIN_SPACING = 0.1
#: The states of a :class:`ConsumerPeering`.
JOINING, JOINED, CLOSING, CLOSED = "joining", "joined", "closing", "closed"

_U64 = struct.Struct(">Q").unpack_from
_DELIVER_HEAD = SIGNATURE + bytes((DELIVER_ID,))
_DELIVER_TS_HEAD = SIGNATURE + bytes((DELIVER_TS_ID,))
_DELIVER_H_HEAD = SIGNATURE + bytes((c.DeliverHeaders.ID,))
_tuple_new = tuple.__new__
#: The answer each request of the set-up (and the heartbeat, DETACH) waits for.
_ANSWERS = {c.ReasonsSelectOk: "REASONS-SELECT", c.StreamExpectOk: "STREAM-EXPECT",
            c.AttachOk: "ATTACH", c.LimitsOk: "LIMITS", c.BatchSelectOk: "BATCH-SELECT",
            c.HeadersSelectOk: "HEADERS-SELECT", c.DeliverTimestampsOk: "DELIVER-TIMESTAMPS",
            c.ConsumeOk: "CONSUME", c.StreamInfoOk: "STREAM-INFO", c.DetachOk: "DETACH"}
#: Refused by an older broker: the feature is done without.
_OPTIONAL = frozenset(("REASONS-SELECT", "STREAM-EXPECT", "LIMITS", "BATCH-SELECT",
                       "HEADERS-SELECT", "DELIVER-TIMESTAMPS", "STREAM-INFO"))


def consumer_add(name: str, patterns=("",), *, start=None, ack: str = "explicit",
                 ack_wait: float = 30.0, max_deliver: int = 0, max_ack_pending: int = 1000,
                 dead_letter: str = "", key_order: bool = False) -> c.ConsumerAdd:
    """The CONSUMER-ADD for these settings (docs/consumers.md); ValueError / TypeError naming
    the argument that is wrong. ``start``: None (the first message kept), an ``int`` (that
    sequence), a ``datetime`` or ``float`` (seconds since the epoch: the first message at or
    after it) or ``"new"`` (messages published after the consumer is made)."""
    why = bad_consumer_name(name) if isinstance(name, str) else "a consumer name is a str"
    if why:
        raise ValueError(f"bad consumer name {name!r}: {why}")
    patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    if not 1 <= len(patterns) <= 16:
        raise ValueError(f"a consumer has 1 to 16 patterns, not {len(patterns)}")
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(f"pattern must be str, not {type(p).__name__}")
        if len(p.encode("utf-8")) > 255:
            raise ValueError(f"pattern longer than 255 bytes: {p[:40]!r}...")
    if start is None or start == "all":
        how, value = c.START_ALL, 0
    elif start == "new":
        how, value = c.START_NEW, 0
    elif isinstance(start, bool) or isinstance(start, str):
        raise ValueError(f"start is None, a sequence, a time or 'new', not {start!r}")
    elif isinstance(start, int):
        if start < 0:
            raise ValueError(f"start sequence must be >= 0, not {start}")
        how, value = c.START_SEQUENCE, start
    elif isinstance(start, (datetime, float)):
        how, value = c.START_TIME, to_timestamp_ns(start)
    else:
        raise TypeError(f"start is None, an int (sequence), a datetime or float (time) or "
                        f"'new', not {type(start).__name__}")
    if ack not in ACK_MODES:
        raise ValueError(f"ack is one of {', '.join(ACK_MODES)}, not {ack!r}")
    if isinstance(ack_wait, bool) or not isinstance(ack_wait, (int, float)) \
            or not ack_wait > 0 or not math.isfinite(ack_wait):
        raise ValueError(f"ack_wait must be a positive number of seconds, not {ack_wait!r}")
    for label, v, low, high in (("max_deliver", max_deliver, 0, 2**32 - 1),
                                ("max_ack_pending", max_ack_pending, 1, 65_536)):
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"{label} must be a whole number from {low} to {high}, not {v!r}")
    if not isinstance(dead_letter, str) or len(dead_letter.encode("utf-8")) > 255 \
            or "\x00" in dead_letter:
        raise ValueError(f"dead_letter is a stream name (or ''), not {dead_letter!r}")
    return c.ConsumerAdd(name, patterns, how, value, ACK_MODES[ack],
                         max(1, int(round(ack_wait * 1000))), max_deliver, max_ack_pending,
                         dead_letter, c.CONSUMER_KEY_ORDER if key_order else 0)


class ConsumerMessage(Message):
    """A :class:`~zeps.clients.Message` handed out by a consumer: ``ack()``, ``nak(delay)``
    and ``in_progress()`` tell the broker what became of it (queued, sent together: see
    :mod:`zeps.clients.consumer`). Settling a message twice (ack, then ack or nak) does nothing;
    a message received before a reconnect cannot be settled any more (it comes again); after
    the consumer was closed, each raises :class:`~zeps.clients.errors.ZepsError`."""

    # No __slots__: a __dict__ holds the member it came from and whether it was settled.

    def __new__(cls, sequence: int, key: str, body: bytes, timestamp: Optional[int] = None,
                stream: Optional[str] = None, headers: Headers = NO_HEADERS,
                member: Optional["ConsumerPeering"] = None, generation: int = 0):
        m = _tuple_new(cls, (sequence, key, body, timestamp, stream, headers))
        m._member = member
        m._generation = generation
        m.settled = False
        return m

    def __eq__(self, other):
        if isinstance(other, Message):
            return tuple.__eq__(self, other)
        return False if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__

    def _to(self) -> "ConsumerPeering":
        if self._member is None:
            raise ZepsError("this message did not come from a consumer: nothing to acknowledge")
        return self._member

    def ack(self) -> None:
        """Acknowledge: the broker will not give it again (queued; sent with the next ACK)."""
        self._to().settle(self, "ack")

    def nak(self, delay: Optional[float] = None) -> None:
        """Give it back, to be delivered again (to any member) after ``delay`` seconds."""
        if delay is not None and (isinstance(delay, bool) or not delay >= 0):
            raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")
        self._to().settle(self, "nak", delay)

    def in_progress(self) -> None:
        """Still working on it: its ack wait starts again (PROGRESS, sent at once)."""
        self._to().settle(self, "progress")


class ConsumerPeering:
    """One member of consumer ``name`` of ``stream``, without I/O (see the module docs).

    The driver sends :attr:`outgoing` (and clears it) on its socket, hands every frame from the
    broker to :meth:`receive`, calls :meth:`tick` when :meth:`next_timer` says, replaces its
    socket and calls :meth:`rejoin` when :attr:`need_rejoin` is set and :attr:`rejoin_at` has
    come, and hands the messages of :meth:`take` to the application. ``wake`` (if set) is
    called when a frame that should leave at once was queued (a PROGRESS, a full ACK).
    """

    def __init__(self, stream: str, name: str, *, window: int = DEFAULT_CREDIT_WINDOW,
                 heartbeat: float = DEFAULT_HEARTBEAT, timeout: float = 10.0,
                 batching: bool = True, headers: bool = True, timestamps: bool = True,
                 now: float = 0.0):
        why = bad_consumer_name(name) if isinstance(name, str) else "a consumer name is a str"
        if why:
            raise ValueError(f"bad consumer name {name!r}: {why}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("window must be a positive number of bytes")
        self.stream = stream
        self.name = name
        self.asked_window = window
        self.heartbeat = float(heartbeat)
        self.timeout = float(timeout)
        self.options = (batching, headers, timestamps)
        self.outgoing: List[bytes] = []
        self.buffered: Deque[Tuple[ConsumerMessage, int]] = deque()
        self.state = JOINING
        self.error: Optional[Exception] = None
        #: Why the peering must be joined again (None: it need not), and from when.
        self.need_rejoin: Optional[str] = None
        self.rejoin_at = 0.0
        self.wake: Optional[Callable[[], None]] = None
        #: CONSUME-OK's fields at the last join: every sequence up to ``floor`` acknowledged,
        #: ``next`` the next the consumer reads; ``skipped``: the messages retention removed
        #: before they were acknowledged, summed over the joins.
        self.floor = self.next = self.skipped = 0
        self.joins = 0                  # CONSUME-OKs received
        self.generation = 0             # connections: a message knows the one it came on
        self.acked = 0                  # acknowledgements sent
        self._join(now)

    # ------------------------------------------------------------------ the conversation

    def _join(self, now: float) -> None:
        self.generation += 1
        self.state = JOINING
        self.since = now
        self.last_send = self.last_recv = now
        self.probe_at: Optional[float] = None
        self.buffered.clear()
        self._acks: List[int] = []
        self._runs = 0
        self._ack_since: Optional[float] = None
        self._naks: List[bytes] = []
        self._pending = 0               # credit of messages buffered
        self._used = 0                  # credit of messages taken, not granted back yet
        self.window = self.asked_window
        self.topup = max(1, self.window // 2)
        self.max_credit: Optional[int] = None
        batching, headers, timestamps = self.options
        cmds: List[c.Command] = [c.ReasonsSelect(), c.StreamExpect(0), c.Attach(self.stream),
                                 c.Limits()]
        if batching:
            cmds.append(c.BatchSelect())
        if headers:
            cmds.append(c.HeadersSelect())
        if timestamps:
            cmds.append(c.DeliverTimestamps())
        cmds.append(c.Consume(self.name))
        self._expect: Deque[str] = deque(cmd.NAME for cmd in cmds)
        self.outgoing.extend(encode(cmd) for cmd in cmds)

    def receive(self, frame: bytes, now: float) -> None:
        """One frame from the broker."""
        self.last_recv = now
        if self.state is CLOSED or self.error is not None:
            return
        try:
            if frame.startswith(_DELIVER_TS_HEAD):
                key, body = key_body_of(frame, TS_SHIFT)
                self._message(_U64(frame, SEQ_OFFSET + TS_SHIFT)[0], key.decode(), body,
                              _U64(frame, SEQ_OFFSET)[0], NO_HEADERS,
                              deliver_cost(len(key), len(body)))
                return
            if frame.startswith(_DELIVER_HEAD):
                key, body = key_body_of(frame, 0)
                self._message(_U64(frame, SEQ_OFFSET)[0], key.decode(), body, None, NO_HEADERS,
                              deliver_cost(len(key), len(body)))
                return
            if frame.startswith(DELIVER_BATCH_HEAD):
                self._batch(frame)
                return
            if frame.startswith(_DELIVER_H_HEAD):
                cmd = decode_headers(frame)
                self._message(cmd.sequence, cmd.key, cmd.body, cmd.timestamp,
                              Headers(cmd.headers), deliver_h_cost(frame))
                return
        except (IndexError, struct.error, UnicodeDecodeError, BadEntries, ProtocolError) as e:
            self._bad(f"a malformed {_kind(frame)} frame ({e})")
            return
        try:
            cmd = decode(frame)
        except ProtocolError as e:
            self._bad(f"a frame that does not decode ({e})")
            return
        self._command(cmd, now)

    def _bad(self, what: str) -> None:
        self.error = ZepsError(f"consumer {self.name!r} of stream {self.stream!r}: the broker "
                               f"sent {what}")

    def _command(self, cmd: c.Command, now: float) -> None:
        cls = type(cmd)
        if cls is c.Ping:
            self._send(encode(c.PingOk()))
            return
        if cls is c.Detach:
            if self.state is CLOSING:
                self.state = CLOSED
            else:
                self.lost("the broker sent DETACH (the consumer was deleted, or the broker "
                          "forgot this member)", now)
            return
        if cls is c.Invalid or cls is c.Error:
            self._refused(Reason.received(cmd), now)
            return
        name = _ANSWERS.get(cls)
        if name is None:
            log.warning("zeps: consumer %r: ignoring an unexpected %s", self.name, cls.NAME)
            return
        if not self._expect or self._expect[0] != name:
            self.lost(f"protocol confusion: {cls.NAME} answered "
                      f"{self._expect[0] if self._expect else 'nothing'}", now)
            return
        self._expect.popleft()
        if cls is c.LimitsOk:
            self.max_credit = cmd.max_credit
            largest = min(largest_cost(cmd.max_message), cmd.max_credit)
            self._fit(largest)
        elif cls is c.ConsumeOk:
            self.state = JOINED
            self.joins += 1
            self.floor, self.next = cmd.floor, cmd.next
            self.skipped += cmd.skipped
            if cmd.skipped:
                log.warning("zeps: consumer %r of stream %r: %d message(s) were removed by "
                            "retention before they were acknowledged", self.name, self.stream,
                            cmd.skipped)
            self._send(encode(c.Credit(self.window)))
        elif cls is c.StreamInfoOk:
            self.probe_at = None
        elif cls is c.DetachOk:
            self.state = CLOSED

    def _refused(self, why: Reason, now: float) -> None:
        if why.code is Code.NOT_ATTACHED and self.state is JOINED:
            self.lost(f"the broker does not know this member ({why.text})", now)
            return
        if why.code is Code.WINDOW_TOO_SMALL:
            cost = why.fields[1] if len(why.fields) > 1 else ""
            if cost.isdigit():
                self._fit(int(cost))
            return
        if not self._expect:
            # Answers nothing asked: an ACK, NAK, PROGRESS or CREDIT the broker refused.
            log.warning("zeps: consumer %r of stream %r: the broker refused: %s", self.name,
                        self.stream, why.text)
            return
        name = self._expect.popleft()
        if name in _OPTIONAL:
            if name == "STREAM-INFO":
                self.probe_at = None
            log.debug("zeps: consumer %r: the broker refused %s (%s)", self.name, name,
                      why.text)
        elif name == "DETACH":
            self.state = CLOSED
        else:                          # ATTACH (no stream, no right) or CONSUME (no consumer)
            self.error = invalid_error(why, name)

    def _fit(self, largest: int) -> None:
        window = window_for(self.window, largest, self.max_credit)
        if window is None:
            return
        more = window - self.window
        self.window = window
        self.topup = topup_for(window, largest)
        if more > 0 and self.state is JOINED:      # the credit grows by as much at once
            self._send(encode(c.Credit(more)))

    # ------------------------------------------------------------------ messages in

    def _message(self, seq: int, key: str, body: bytes, ts: Optional[int], headers: Headers,
                 cost: int) -> None:
        if self.state is not JOINED:
            return
        self._pending += cost
        if self._pending + self._used > self.window:
            self._beyond_credit()
            return
        self.buffered.append((_tuple_new(ConsumerMessage, (seq, key, body, ts, self.stream,
                                                           headers)), cost))
        m = self.buffered[-1][0]
        m._member, m._generation, m.settled = self, self.generation, False

    def _batch(self, frame: bytes) -> None:
        ts, first, offsets = decode_deliver_batch(frame)
        for i in range(len(offsets) - 1):
            start, end = offsets[i], offsets[i + 1]
            kend = start + 1 + frame[start]
            self._message(first + i, frame[start + 1:kend].decode(), frame[kend + 4:end], ts,
                          NO_HEADERS, end - start + ENTRY_COST_EXTRA)

    def _beyond_credit(self) -> None:
        self.buffered.clear()
        self.lost(f"the broker sent more than the {self.window} bytes of credit it was given",
                  self.last_recv)

    # ------------------------------------------------------------------ the application

    def take(self, limit: int, now: float, flush: bool = False) -> List[ConsumerMessage]:
        """Hand out up to ``limit`` buffered messages (their credit goes back to the broker at
        the top-up). The acknowledgements queued leave first when ``flush``, when nothing is
        buffered, or when the oldest waited :data:`ACK_DELAY`."""
        if self.state is CLOSED:
            raise ZepsError(f"consumer {self.name!r} is closed")
        if self._acks and self._ack_since is None:
            self._ack_since = now       # the time of the first ask since the first ack
        if flush or not self.buffered or (self._acks and now - self._ack_since >= ACK_DELAY):
            self.flush()
        out: List[ConsumerMessage] = []
        buf = self.buffered
        spent = 0
        while buf and len(out) < limit:
            m, cost = buf.popleft()
            out.append(m)
            spent += cost
        self._pending -= spent
        self._used += spent
        if self._used >= self.topup and self.state is JOINED:
            self._send(encode(c.Credit(self._used)))
            self._used = 0
        return out

    def settle(self, m: ConsumerMessage, what: str, delay: Optional[float] = None,
               now: Optional[float] = None) -> None:
        """``m.ack()`` / ``m.nak(delay)`` / ``m.in_progress()``."""
        if self.state is CLOSED or self.state is CLOSING:
            if isinstance(self.error, ClientForked):
                raise self.error
            raise ZepsError(f"consumer {self.name!r} is closed: message {m.sequence} can no "
                            f"longer be acknowledged (the broker gives it to a member again)")
        if m.settled or m._generation != self.generation:
            return                      # settled already, or from before a reconnect
        seq = m.sequence
        if what == "progress":
            self._send(encode(c.Progress(seq)))
            self._wake()
            return
        m.settled = True
        if what == "nak":
            ms = 0 if not delay else int(round(delay * 1000))
            self._naks.append(encode(c.Nak(seq, ms)))
            return
        acks = self._acks
        if not acks:
            self._ack_since = now
            self._runs = 1
        elif seq != acks[-1] + 1:
            self._runs += 1
        acks.append(seq)
        if self._runs >= MAX_ACK_RANGES:
            self.flush()
            self._wake()

    def flush(self) -> None:
        """Queue the acknowledgements as ACK frames (one, unless more than
        :data:`~zeps.protocol.consumer.MAX_ACK_RANGES` ranges), then the NAKs."""
        if self._acks:
            ranges = ranges_of(self._acks)
            for i in range(0, len(ranges), MAX_ACK_RANGES):
                self._send(encode(c.Ack(pack_ranges(ranges[i:i + MAX_ACK_RANGES]))))
            self.acked += len(self._acks)
            self._acks = []
            self._runs = 0
            self._ack_since = None
        if self._naks:
            for frame in self._naks:
                self._send(frame)
            self._naks = []

    def close(self, now: float) -> None:
        """Send what is queued, then DETACH (the member leaves: what it holds unacknowledged
        goes to the other members). The driver waits for :attr:`closed` (DETACH-OK), or gives
        up, then calls :meth:`finish`."""
        if self.state is CLOSED or self.state is CLOSING:
            return
        if self.state is JOINED and self.error is None and self.need_rejoin is None:
            self.flush()
            self._send(encode(c.Detach()))
            self._expect.append("DETACH")
            self.state = CLOSING
        else:
            self.state = CLOSED
        self.buffered.clear()

    @property
    def closed(self) -> bool:
        return self.state is CLOSED

    def forked(self, parent: int) -> None:
        """This is the copy a forked child has of process ``parent``'s member, whose socket is
        the parent's: closed for good, without a frame. Every call raises
        :class:`~zeps.clients.errors.ClientForked`, ``ack()`` on a message it handed out in the
        parent too; what it had buffered is dropped (the parent hands it out)."""
        self.error = forked("consumer", parent)
        self.state = CLOSED
        self.buffered.clear()
        self.outgoing.clear()
        self._acks = []
        self._naks = []

    def finish(self) -> None:
        """The driver closed its socket: final."""
        self.state = CLOSED
        self.buffered.clear()

    # ------------------------------------------------------------------ timers and losses

    def next_timer(self, now: float) -> float:
        """When :meth:`tick` (or a rejoin) has something to do next."""
        if self.need_rejoin is not None:
            return self.rejoin_at
        if self.state is JOINING:
            return self.since + self.timeout
        if self.probe_at is not None:
            return self.probe_at + self.timeout
        return max(min(self.last_send, self.last_recv) + self.heartbeat, now)

    def tick(self, now: float) -> None:
        """Heartbeats (STREAM-INFO after ``heartbeat`` seconds of silence either way: it also
        tells that the broker still knows this member) and their timeouts; a join that is
        not answered within ``timeout`` (the first: :class:`ZepsTimeout`; later ones: joined
        again)."""
        if self.need_rejoin is not None or self.error is not None or self.state is CLOSED:
            return
        if self.state is JOINING:
            if now - self.since > self.timeout:
                if self.joins == 0:
                    self.error = ZepsTimeout(f"consumer {self.name!r} of stream "
                                             f"{self.stream!r}: no answer to CONSUME within "
                                             f"{self.timeout:g}s (is the broker running?)")
                else:
                    self.lost(f"no answer to CONSUME within {self.timeout:g}s", now)
            return
        if self.probe_at is not None:
            if now - self.probe_at > self.timeout:
                self.lost(f"no answer to a heartbeat within {self.timeout:g}s", now)
        elif self.state is JOINED and now - min(self.last_send, self.last_recv) >= self.heartbeat:
            self.probe_at = now
            self._expect.append("STREAM-INFO")
            self._send(encode(c.StreamInfo()))

    def lost(self, why: str, now: float) -> None:
        """The peering is gone: join again on a new connection (from :attr:`rejoin_at`)."""
        if self.state is CLOSING:
            self.state = CLOSED
            return
        if self.state is CLOSED or self.error is not None or self.need_rejoin is not None:
            return
        log.info("zeps: consumer %r of stream %r: %s; joining again", self.name, self.stream, why)
        self.need_rejoin = why
        self.rejoin_at = now + REJOIN_SPACING
        self.buffered.clear()
        self.outgoing.clear()

    def rejoin(self, now: float) -> None:
        """The driver replaced its socket: the set-up and CONSUME again (:attr:`outgoing`).
        What was buffered, and acknowledgements not sent, are dropped: the broker gives every
        message not acknowledged again."""
        self.need_rejoin = None
        self.outgoing.clear()
        self._join(now)

    # ------------------------------------------------------------------ helpers

    def _send(self, frame: bytes) -> None:
        self.outgoing.append(frame)

    def _wake(self) -> None:
        if self.wake is not None:
            self.wake()

    def sent(self, now: float) -> None:
        """The driver handed :attr:`outgoing` to its socket."""
        self.outgoing.clear()
        self.last_send = now


def _kind(frame: bytes) -> str:
    if frame.startswith(DELIVER_BATCH_HEAD):
        return "DELIVER-BATCH"
    if frame.startswith(_DELIVER_H_HEAD):
        return "DELIVER-H"
    return "DELIVER-TS" if frame.startswith(_DELIVER_TS_HEAD) else "DELIVER"

