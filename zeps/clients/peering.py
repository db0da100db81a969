"""The client side of one ZEPS peering as a pure state machine: no sockets, no clock.

:class:`Peering` knows the whole conversation of a client attached to one stream and does no
I/O. A shell (the blocking :class:`~zeps.clients.Client`, the
:class:`~zeps.clients.AsyncClient`) feeds it, always passing the time as ``now``:

* frames from the broker: :meth:`Peering.receive`;
* connection events: :meth:`Peering.connection_lost` (the socket monitor saw the TCP connection
  close), :meth:`Peering.reconnect` (when :meth:`Peering.reconnect_due` says so, just before the
  shell replaces its socket), :meth:`Peering.tick` (timers; wake it at :meth:`Peering.next_timer`);
* the application's actions: :meth:`Peering.publish` (and ``queue_publish``, ``publish_frame``),
  :meth:`Peering.request`, :meth:`Peering.subscribe`, :meth:`Peering.take`,
  :meth:`Peering.detach`, :meth:`Peering.close`, and :meth:`Peering.join` while :data:`ABSENT`
  (readers never create streams: the first ATTACH says ``STREAM-EXPECT 0`` unless ``create``; a
  stream that does not exist leaves the peering ABSENT until a publish attaches creating it or
  a read finds it);

and takes from it the frames to send, in order (:attr:`Peering.outbox`: the shell sends from
the left and leaves what the socket does not take), the messages for the application
(:attr:`Peering.buffer`, handed out by :meth:`Peering.take` and :meth:`Peering.take_batches`),
the outcome of each request (a :class:`~zeps.clients.requests.Request`), of each publish (a
receipt, :mod:`zeps.clients.receipt`), and the errors to raise (:meth:`Peering.check`).

The conversation is written here: ATTACH and re-ATTACH and the session set-up after each
ATTACH-OK, request/reply matching (replies come back in request order: a reply answers the
oldest outstanding request), heartbeats and the decision to reconnect. A DETACH from the
broker, or an INVALID saying ``not attached: ...``, means the broker forgot this client: the
peering is re-established (a new socket, ATTACH, CONFIRM-SELECT, DELIVER-TIMESTAMPS, every
pattern re-subscribed from the last message handed to the application, the credit window
re-granted, unconfirmed publishes re-sent). After each ATTACH the peering asks ``LIMITS`` and
sizes its credit window from the answer (:mod:`zeps.clients.window`; an INVALID answer, from an
older broker, changes nothing), then ``BATCH-SELECT`` and ``STREAM-DESCRIBE``
(:mod:`zeps.clients.batching`; an INVALID answer leaves plain PUBLISH / DELIVER), and with
confirms ``CONFIRM-SELECT``, one ``STREAM-INFO`` that anchors receipts and ``PRODUCER``.
Losing and regaining the peering are queued as
:class:`~zeps.clients.states.ConnectionEvent` in :attr:`Peering.events` for the shell to hand
on. The other jobs have a module each, the peering's mixins and parts:

* :mod:`zeps.clients.publishing` -- the publisher's half: publishes out, in order, queued and
  sealed into PUBLISH-BATCH frames while the socket is busy;
* :mod:`zeps.clients.delivery` -- the subscriber's half: DELIVERs in, credit out, the window;
* :mod:`zeps.clients.bounds` -- the longest frame read, a frame over it, duplicates;
* :mod:`zeps.clients.confirms` -- the publishes awaiting CONFIRM (:class:`ConfirmTracker`);
* :mod:`zeps.clients.producer` -- exactly-once publishing (PRODUCER and its answers);
* :mod:`zeps.clients.refusals` -- what each INVALID or ERROR means;
* :mod:`zeps.clients.requests` -- the request kinds (:class:`RequestKind`) and what answers each;
* :mod:`zeps.clients.states` -- the peering's states and connection events.
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Deque, Dict, Optional, Tuple, Union

from ..protocol import commands as c
from ..protocol.codec import ProtocolError, decode, encode, publish_frame_limit
from ..protocol.deliver import DELIVER_ID, DELIVER_TS_ID, SIGNATURE, TS_SHIFT
from ..protocol.reasons import Code, Reason
from .batching import DELIVER_BATCH_HEAD, MAX_BATCH_BYTES, PublishQueue
from .bounds import Bounds, check_max_frame
from .confirms import ConfirmTracker
from .delivery import Delivery
from .errors import ClientClosed, InvalidError, NoStream, forked
from .message import Message, MessageBatch
from .producer import ExactlyOnce, check_producer_id, new_producer_id
from .publishing import Publishing
from .refusals import Refusals
from .requests import REPLY_KINDS, Request, RequestKind
from .states import ABSENT, ATTACHED, CLOSED, CONNECTING, FAILED, LOST, RECONNECTED, ConnectionEvent
from .window import largest_cost

__all__ = ["Peering", "Request", "RequestKind", "ConnectionEvent", "CONNECTING", "ATTACHED", "ABSENT",
           "FAILED", "CLOSED", "LOST", "RECONNECTED", "validate_options"]

log = logging.getLogger("zeps.client")

#: Seconds between two reconnects.
RECONNECT_SPACING = 0.1

_DELIVER_HEAD = SIGNATURE + bytes((DELIVER_ID,))
_DELIVER_TS_HEAD = SIGNATURE + bytes((DELIVER_TS_ID,))
_PING = encode(c.Ping())
_PING_OK = encode(c.PingOk())
_DELIVER_TIMESTAMPS = encode(c.DeliverTimestamps())
_LIMITS = c.Limits()
_BATCH_SELECT = c.BatchSelect()
_HEADERS_SELECT = c.HeadersSelect()
_DELIVER_H_HEAD = SIGNATURE + bytes((c.DeliverHeaders.ID,))
_REASONS_SELECT = encode(c.ReasonsSelect())
_STREAM_ID = c.StreamId()


def validate_options(stream, credit_window, timeout, heartbeat) -> None:
    """Raise :class:`ValueError` for a client option no peering can work with."""
    if not isinstance(stream, str) or not stream:
        raise ValueError("stream must be a non-empty string")
    if len(stream.encode("utf-8")) > 255:
        raise ValueError("stream name longer than 255 bytes")
    if "\x00" in stream:
        raise ValueError("stream name must not contain NUL")
    if isinstance(credit_window, bool) or not isinstance(credit_window, int) or credit_window < 1:
        raise ValueError("credit_window must be a positive number of bytes")
    if timeout is None or timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    if heartbeat is None or heartbeat <= 0:
        raise ValueError("heartbeat must be a positive number of seconds")


class Peering(Publishing, Delivery, Bounds, ExactlyOnce, Refusals):
    """One client's peering with a broker, attached to ``stream`` (see the module docs).

    Starts connecting: the ATTACH is in :attr:`outbox`.
    """

    def __init__(self, stream: str, *, credit_window: int, confirms: bool, timestamps: bool,
                 timeout: float, heartbeat: float, now: float, endpoint: str = "",
                 producer_id: Optional[str] = None, idempotent: bool = True,
                 batching: bool = True, reasons: bool = True, incarnations: bool = True,
                 create: bool = False, headers: bool = True, max_frame: Optional[int] = None):
        validate_options(stream, credit_window, timeout, heartbeat)
        check_producer_id(producer_id, confirms)
        check_max_frame(max_frame)
        self.stream = stream
        self.endpoint = endpoint        # for log lines only
        #: The longest frame read (None: the window's, zeps.clients.bounds); read_limit: the
        #: socket's now (set before each socket is made: at start and in reconnect()).
        self.max_frame = max_frame
        self.max_credit: Optional[int] = None
        self.credit_window = min(credit_window, self.credit_cap() or credit_window)
        self.read_limit = self.read_bound()
        self.dropped_at: Optional[float] = None      # a drop awaiting libzmq's word (bounds.py)
        self.duplicates = 0                           # deliveries dropped as repeats
        self.wasted = 0                               # their credit, this connection
        self.confirms = bool(confirms)
        self.timestamps = bool(timestamps)
        #: Ask BATCH-SELECT after each ATTACH (zeps.clients.batching).
        self.batching = bool(batching)
        #: Ask REASONS-SELECT before each ATTACH (refusals as codes and fields).
        self.reasons = bool(reasons)
        #: Ask HEADERS-SELECT after each ATTACH (messages with headers come as DELIVER-H);
        #: ``headers_offered``: the broker's answer on this connection (None: not yet).
        self.headers = bool(headers)
        self.headers_offered: Optional[bool] = None
        #: Publishes waiting to leave as one PUBLISH-BATCH; its ``max_batch`` is the broker's
        #: answer to BATCH-SELECT on this connection (None: plain PUBLISH only).
        self.queue = PublishQueue()
        self.batch_setup: Optional[Request] = None    # the last request batching waits for
        self.offered_batch: Optional[int] = None      # BATCH-SELECT-OK's max_batch
        #: The incarnation of the stream at the first ATTACH (STREAM-ID); every re-ATTACH says
        #: STREAM-EXPECT with it, so it joins that stream or none. None: not known yet; 0: the
        #: broker does not tell (or ``incarnations`` is off: tests of the session set-up).
        self.incarnation: Optional[int] = None if incarnations else 0
        #: Readers never create streams: unless ``create``, the first ATTACH says STREAM-EXPECT 0
        #: (join the stream if it exists, never create it); a refusal "no stream" leaves the
        #: peering :data:`ABSENT`, and the first publish attaches again, creating it
        #: (``creating``). A broker without STREAM-EXPECT creates it at once, as before.
        self.create = bool(create)
        self.creating = False
        self.ever_attached = False
        self.absence: Optional[InvalidError] = None   # the broker's "no stream", when ABSENT
        self.heartbeat = float(heartbeat)
        #: How long a heartbeat (or a re-ATTACH) may wait for its answer.
        self.probe_timeout = max(self.heartbeat, float(timeout))
        #: How many times the peering was re-established after being lost.
        self.reconnects = 0
        self.state = CONNECTING
        self.closing = False
        self.need_reconnect: Optional[str] = None     # why, once the peering is lost
        self.reconnect_at = 0.0
        self.connecting_since = now
        self.outbox: Deque[bytes] = deque()           # frames to send now, in order
        self.deferred: Deque[bytes] = deque()         # frames waiting for ATTACH-OK
        self.outstanding: Deque[Request] = deque()
        self.pubs_since_request = 0
        self.error: Optional[Exception] = None        # one-shot: raised by the next call
        self.fatal: Optional[Exception] = None        # permanent
        self.forked_from: Optional[int] = None         # a forked child's copy: the parent's pid
        self.attach_error: Optional[InvalidError] = None
        self.probe: Optional[Request] = None
        self.last_send = now
        self.last_recv = now
        #: The publishes awaiting CONFIRM, and their producer sequences (zeps.clients.confirms).
        self.tracker = ConfirmTracker()
        self.confirm_ready = not self.confirms
        # exactly-once publishing (zeps.clients.producer): None when off
        self.producer: Optional[str] = None
        if self.confirms and (idempotent or producer_id is not None):
            self.producer = producer_id if producer_id is not None else new_producer_id()
        #: The PRODUCER after an ATTACH while its answer is awaited: re-sends and new publishes
        #: wait for it (_producer_synced).
        self.producer_sync: Optional[Request] = None
        self.producer_at = 0                          # the broker's next pseq for this peering
        #: Lost / reconnected, for the shell to hand on (the oldest dropped if nobody reads).
        self.events: Deque[ConnectionEvent] = deque(maxlen=64)
        # the broker's limits (LIMITS-OK), when it said them (max_credit, above), and the
        # largest message cost the window is sized for (window.py)
        #: The longest PUBLISH frame sent to this broker (publish_frame_limit of its LIMITS-OK;
        #: None until it said): a longer one could make it drop the connection
        #: (operations.check_frame_size).
        self.frame_limit: Optional[int] = None
        self.limits_request = None                    # the LIMITS of the last ATTACH
        self.largest = 0
        # subscription
        self.patterns: Dict[str, int] = {}            # pattern -> the `latest` to resubscribe
        self.subscribed = False
        # (message or DELIVER-BATCH kept whole, its credit cost)
        self.buffer: Deque[Tuple[Union[Message, MessageBatch], int]] = deque()
        self.buffered = 0                             # credit cost of the buffer
        self.buffered_messages = 0                    # messages in the buffer
        self.last_handed = 0
        self.last_received = 0
        self.consumed = 0                             # credit to grant back
        self.topup = max(1, self.credit_window // 2)
        self._attach(now)

    # ------------------------------------------------------------------ state for the shells

    @property
    def attached(self) -> bool:
        return self.state is ATTACHED

    @property
    def ready(self) -> bool:
        """Attached, confirms selected (when asked for), BATCH-SELECT answered (when asked),
        the producer's state known (PRODUCER-OK, with exactly-once), not about to reconnect."""
        return (self.state is ATTACHED and self.confirm_ready and self.need_reconnect is None
                and (self.batch_setup is None or self.batch_setup.done)
                and self.producer_sync is None)

    @property
    def broken(self) -> bool:
        """Something the waiting application must hear about: an error, or the client is closed."""
        return self.error is not None or self.fatal is not None or self.state is CLOSED

    @property
    def streaming(self) -> bool:
        """Only messages to wait for: attached and subscribed, no error, no event for the
        application, no frame waiting to go, not about to reconnect. A shell may then read the
        next frame and hand what it brings without its other work (``waiting.Driver._fill``)."""
        return (self.state is ATTACHED and self.subscribed and self.error is None
                and self.fatal is None and self.need_reconnect is None and not self.events
                and not self.outbox and not self.queue.frames)

    def check(self) -> None:
        """Raise what the application must hear before its next operation: :class:`ClientClosed`,
        the permanent error, or (once) the error of an earlier asynchronous operation."""
        if self.state is CLOSED:
            raise self.closed_as()
        if self.fatal is not None:
            raise self.fatal
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def heard(self, error: Exception) -> None:
        """The application heard of ``error`` elsewhere (a receipt): :meth:`check` will not
        raise it again."""
        if self.error is error:
            self.error = None

    def next_timer(self, now: float) -> float:
        """When :meth:`tick` (or :meth:`reconnect`) has something to do next."""
        if self.dropped_at is not None:
            return self.drop_timer(now)
        if self.need_reconnect:
            return self.reconnect_at
        if self.state is ABSENT:
            return now + self.heartbeat
        if self.state is not ATTACHED:
            return now + 0.25
        probe = self.probe
        if probe is not None and not probe.done:        # its answer or its timeout comes next
            return max(probe.sent_at + self.probe_timeout, now + 0.001)
        return max(min(self.last_send, self.last_recv) + self.heartbeat, now + 0.001)

    def reconnect_due(self, now: float) -> bool:
        return (self.need_reconnect is not None and now >= self.reconnect_at
                and self.state is not CLOSED and self.state is not FAILED)

    # ------------------------------------------------------------------ connection events

    def sent(self, now: float) -> None:
        """The shell handed frames to its socket."""
        self.last_send = now

    def connection_lost(self, why: str) -> None:
        """The peering is gone (the connection closed, or the broker forgot us): reconnect."""
        if self.state is CLOSED or self.state is FAILED or self.need_reconnect:
            return
        if self.state is ABSENT:        # nothing to re-establish: the next join() attaches
            return
        if self.closing:                # detaching anyway: no point in reconnecting
            self.state = FAILED
            return
        self.need_reconnect = why
        if self.state is ATTACHED:      # said once per loss, not for each failed re-ATTACH
            self.events.append(ConnectionEvent(LOST, why, self.reconnects))

    def reconnect(self, now: float) -> None:
        """Start over on a new connection: the shell replaces its socket right after this and
        sends :attr:`outbox` (the ATTACH) on the new one."""
        why, self.need_reconnect = self.need_reconnect, None
        self.reconnects += 1
        if not self.confirms and (self.pubs_since_request > 0 or any(
                r.kind is RequestKind.BARRIER for r in self.outstanding)):
            log.warning("zeps: peering with %s (stream %r) lost: %s; reconnecting. Publishes "
                        "sent just before may be lost (use confirms=True for at-least-once)",
                        self.endpoint, self.stream, why)
        else:
            log.info("zeps: peering with %s (stream %r) lost: %s; reconnecting", self.endpoint,
                     self.stream, why)
        for r in self.outstanding:
            r.cancelled = True
            r.done = True
        self.outstanding.clear()
        self.producer_sync = None
        self.probe = None
        self.pubs_since_request = 0
        self._keep_unsent()
        self.buffer.clear()
        self.buffered = self.buffered_messages = 0
        self.last_received = self.last_handed
        self.consumed = self.wasted = 0
        self.dropped_at = None
        self.read_limit = self.read_bound()
        self.confirm_ready = not self.confirms
        self.reconnect_at = now + RECONNECT_SPACING
        self._attach(now)

    def tick(self, now: float) -> None:
        """Timers: send a heartbeat after ``heartbeat`` seconds of silence; declare the peering
        lost when a heartbeat or a re-ATTACH is not answered within ``probe_timeout``; judge a
        dropped connection (:mod:`zeps.clients.bounds`)."""
        if self.dropped_at is not None:
            self._judge_drop(now)
        if self.need_reconnect:
            return
        if self.state is ATTACHED:
            probe = self.probe
            if probe is not None and probe.done:
                probe = self.probe = None
            if probe is not None:
                if now - probe.sent_at > self.probe_timeout:
                    self.connection_lost(f"no answer to a heartbeat within {self.probe_timeout:g}s")
            elif now - min(self.last_send, self.last_recv) >= self.heartbeat:
                self.probe = self.request(c.StreamInfo(), RequestKind.PROBE, now)
        elif self.state is CONNECTING and self.reconnects:
            if now - self.connecting_since > 2 * self.probe_timeout:
                self.connection_lost("no ATTACH-OK")

    def silent(self, now: float) -> bool:
        """Nothing sent for ``heartbeat`` seconds: the broker may have forgotten us."""
        return now - self.last_send >= self.heartbeat

    def heartbeat_probe(self, now: float) -> Optional[Request]:
        """The heartbeat in flight, or a new one: a publish after a silence waits for it, so
        that the broker still knows us (a publish it rejects as "not attached" is lost without
        confirms). None while not attached."""
        if self.state is not ATTACHED:
            return None
        if self.probe is None or self.probe.done:
            self.probe = self.request(c.StreamInfo(), RequestKind.PROBE, now)
        return self.probe

    # ------------------------------------------------------------------ application actions

    def request(self, cmd: c.Command, kind: RequestKind, now: float, arg=None) -> Request:
        """Send a request whose reply comes back in order (a barrier PING goes first if
        publishes were sent since the previous request)."""
        if self.pubs_since_request:
            self.pubs_since_request = 0
            self.outstanding.append(Request(RequestKind.BARRIER, "PING", now))
            self._send(_PING)
        r = Request(kind, cmd.NAME, now, arg)
        self.outstanding.append(r)
        self._send(encode(cmd))
        return r

    def subscribe(self, pattern: str, latest: int, live: bool, now: float) -> Request:
        """SUBSCRIBE one pattern from ``latest`` (or live). Once SUBSCRIBE-OK arrives the pattern
        is re-subscribed after every reconnect, from ``latest`` (live: the stream's last
        sequence at the time) or the last message handed, whichever is later."""
        info = self.request(c.StreamInfo(), RequestKind.INFO, now) if live else None
        return self.request(c.Subscribe(pattern, c.LATEST_LIVE if live else latest),
                            RequestKind.SUBSCRIBE, now, (pattern, latest, info))

    def join(self, create: bool, now: float) -> None:
        """:data:`ABSENT`: attach now. ``create`` (a publish): the ATTACH may create the stream;
        else (a read) it joins the stream only if it exists now. The answer makes the peering
        attached or, refused, :data:`ABSENT` again with :attr:`attach_error` (``no stream``
        for a read: :attr:`absence`, see :meth:`no_stream`)."""
        self.creating = create
        self._attach(now)

    def no_stream(self, what: str) -> InvalidError:
        """The error for ``what`` (a call that needs the stream) while :data:`ABSENT`."""
        why = self.absence
        reason = why.reason if why is not None else f"no stream: {self.stream!r}"
        return NoStream(reason, what, Code.NO_STREAM, (self.stream,),
                        message=f"no stream {self.stream!r} at {self.endpoint}: a reader does "
                                f"not create it (the first publish to it does, as does "
                                f"'zeps stream create'; Client(..., create=True) attaches "
                                f"creating it, to wait for messages)")

    def detach(self, now: float) -> Request:
        """Start closing: DETACH (a peering lost from now on is not re-established)."""
        self.closing = True
        return self.request(c.Detach(), RequestKind.DETACH, now)

    def abort(self, error: Exception) -> None:
        """The shell cannot go on (its I/O failed): the peering is over and every waiter hears
        ``error``."""
        self.state = FAILED
        self._fail(error)

    def closed_as(self) -> ClientClosed:
        """What a call on the closed client raises."""
        if self.forked_from is not None:
            return forked("client", self.forked_from)
        return ClientClosed("the client is closed")

    def forked(self, parent: int) -> None:
        """This is the copy a forked child has of process ``parent``'s peering, whose socket
        is the parent's: closed for good, calls raise
        :class:`~zeps.clients.errors.ClientForked` (a receipt still pending too)."""
        self.forked_from = parent
        self.close()

    def close(self) -> None:
        """The shell closed its socket: final. Unconfirmed publishes fail with ClientClosed."""
        self.state = CLOSED
        self.buffer.clear()
        self.buffered = self.buffered_messages = 0
        self.tracker.fail_all(self.closed_as() if self.forked_from is not None else
                              ClientClosed("the client was closed before the broker "
                                           "confirmed this message"))

    # ------------------------------------------------------------------ input

    def receive(self, frame: bytes, now: float) -> None:
        """One frame from the broker."""
        self.last_recv = now
        if frame.startswith(DELIVER_BATCH_HEAD):          # first: what a batching client gets
            self._on_deliver_batch(frame)
        elif frame.startswith(_DELIVER_TS_HEAD):
            self._on_deliver(frame, TS_SHIFT)
        elif frame.startswith(_DELIVER_HEAD):
            self._on_deliver(frame, 0)
        elif frame.startswith(_DELIVER_H_HEAD):
            self._on_deliver_h(frame)
        else:
            self._on_command(frame, now)

    def _on_command(self, frame: bytes, now: float) -> None:
        try:
            cmd = decode(frame)
        except ProtocolError as e:
            log.warning("zeps: ignoring an undecodable frame: %s", e)
            return
        cls = type(cmd)
        if cls is c.Confirm:
            self.tracker.confirm(cmd.count, cmd.sequence)
        elif cls is c.Invalid or cls is c.Error:
            self._on_invalid(Reason.received(cmd))
        elif cls in REPLY_KINDS:
            self._on_reply(cmd, REPLY_KINDS[cls], now)
        elif cls is c.Ping:
            self._send(_PING_OK)
        elif cls is c.Detach:
            self.connection_lost("the broker sent DETACH")
        elif cls is not c.DeliverTimestampsOk:
            log.warning("zeps: ignoring unexpected %s", cls.NAME)

    def _on_reply(self, cmd: c.Command, kinds, now: float) -> None:
        if not self.outstanding:
            log.warning("zeps: unexpected %s (no request outstanding)", cmd.NAME)
            return
        r = self.outstanding.popleft()
        if r.kind not in kinds:
            self.connection_lost(f"protocol confusion: {cmd.NAME} answered {r.name}")
            return
        r.result = cmd
        r.done = True
        kind = r.kind
        if kind is RequestKind.ATTACH:
            self._on_attached(now)
        elif kind is RequestKind.CONFIRM_SELECT:
            self.confirm_ready = True
        elif kind is RequestKind.ANCHOR:
            self.tracker.anchor = cmd.last
        elif kind is RequestKind.STREAM_ID:
            if self.incarnation is None:
                self.incarnation = cmd.incarnation
        elif kind is RequestKind.BATCH_SELECT:
            self.offered_batch = min(cmd.max_batch, MAX_BATCH_BYTES)
        elif kind is RequestKind.HEADERS_SELECT:
            self.headers_offered = True
        elif kind is RequestKind.BATCH_LIMITS:
            if cmd.max_message:         # the stream's own limit replaces the broker's
                self.queue.max_body = cmd.max_message
            self.queue.max_batch = self.offered_batch     # batching starts
        elif kind is RequestKind.LIMITS:
            self.max_credit = cmd.max_credit
            self.frame_limit = publish_frame_limit(cmd.max_message)
            self.queue.max_body = cmd.max_message
            self._fit(min(largest_cost(cmd.max_message), self.credit_cap()))
        elif kind is RequestKind.PRODUCER:
            if r is self.producer_sync:
                self._producer_synced(cmd.last, now)
        elif kind is RequestKind.SUBSCRIBE:
            pattern, latest, info = r.arg
            if info is not None:       # live: what comes after the stream's last is "from now"
                latest = info.result.last if info.error is None else self.last_handed
            old = self.patterns.get(pattern)
            self.patterns[pattern] = latest if old is None else min(old, latest)

    def _on_attached(self, now: float) -> None:
        self.state = ATTACHED
        self.ever_attached = True
        self.creating = False
        self.absence = None
        self.connecting_since = 0.0
        deferred = list(self.deferred)
        self.deferred.clear()
        if self.incarnation is None:     # which stream this is (a re-ATTACH expects it)
            self.request(_STREAM_ID, RequestKind.STREAM_ID, now)
        # Sizes the credit window (window.py) and the longest frame a publish may be.
        self.limits_request = self.request(_LIMITS, RequestKind.LIMITS, now)
        if self.batching:            # before any SUBSCRIBE, CONFIRM-SELECT: see batching.py
            self.offered_batch = None
            self.request(_BATCH_SELECT, RequestKind.BATCH_SELECT, now)
            # The stream's own body limit: larger messages never go in a batch (batching.py).
            self.batch_setup = self.request(c.StreamDescribe(self.stream), RequestKind.BATCH_LIMITS, now)
        if self.confirms:
            self.tracker.new_connection()
            self.request(c.ConfirmSelect(), RequestKind.CONFIRM_SELECT, now)
            # The stream's last sequence before any publish of ours: lets receipts be exact.
            self.request(c.StreamInfo(), RequestKind.ANCHOR, now)
        if self.headers:             # before any SUBSCRIBE: messages with headers as DELIVER-H
            self.headers_offered = None
            self.request(_HEADERS_SELECT, RequestKind.HEADERS_SELECT, now)
        if self.timestamps:          # before any SUBSCRIBE: every delivery then carries its time
            self._send(_DELIVER_TIMESTAMPS)
        for pattern, latest in sorted(self.patterns.items(), key=lambda kv: kv[1]):
            self.request(c.Subscribe(pattern, max(latest, self.last_handed)), RequestKind.RESUBSCRIBE, now)
        if self.subscribed:
            self._send(encode(c.Credit(self.credit_window)))
        if self.producer is not None:
            # PRODUCER alone: what is re-sent, and how it is numbered, depends on its answer
            # (_producer_synced); publishes wait for it too (ready).
            first = self.tracker.first_pseq()
            self.producer_at = first
            self.producer_sync = self.request(c.Producer(self.producer, first), RequestKind.PRODUCER, now)
        elif self.confirms:
            self._resend(self.tracker.unconfirmed)
        else:
            self._send_deferred(deferred)
        if self.reconnects:
            n = len(self.tracker.unconfirmed)
            what = f"re-sending {n} unconfirmed publish(es)" if n else "nothing to re-send"
            log.info("zeps: re-attached to %s (stream %r), %s", self.endpoint, self.stream, what)
            self.events.append(ConnectionEvent(RECONNECTED, what, self.reconnects))

    # ------------------------------------------------------------------ helpers

    def _attach(self, now: float) -> None:
        self.state = CONNECTING
        self.attach_error = None
        self.connecting_since = now
        self.last_send = self.last_recv = now
        if self.reasons:                 # first: ATTACH's own refusal comes as ERROR too
            self.outstanding.append(Request(RequestKind.REASONS_SELECT, "REASONS-SELECT", now))
            self.outbox.append(_REASONS_SELECT)
        if self.incarnation or (self.incarnation is None and not (self.create or self.creating)):
            # re-ATTACH: to the stream it knew, or to none; a reader's first: to whichever exists
            self.outstanding.append(Request(RequestKind.STREAM_EXPECT, "STREAM-EXPECT", now))
            self.outbox.append(encode(c.StreamExpect(self.incarnation or 0)))
        self.outstanding.append(Request(RequestKind.ATTACH, "ATTACH", now))
        self.outbox.append(encode(c.Attach(self.stream)))

    def _fail(self, error: Exception) -> None:
        self.fatal = error
        self.tracker.fail_all(error)
