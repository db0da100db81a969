"""The client side of one ZEPS peering as a pure state machine: no sockets, no clock.

Note (issue 16): over 600 lines. Its split by job -- the publishes awaiting CONFIRM in a
``ConfirmTracker``, the request kinds as an Enum instead of strings -- waits until the features
being written on this module have landed.

:class:`Peering` knows the whole conversation of a client attached to one stream -- ATTACH and
re-ATTACH, request/reply matching, publish and CONFIRM counting, the credit window, the position
to resubscribe from, heartbeats and the decision to reconnect, what each INVALID means -- and
does no I/O. A shell (the blocking :class:`~zeps.clients.Client`, the
:class:`~zeps.clients.AsyncClient`) feeds it, always passing the time as ``now``:

* frames from the broker: :meth:`Peering.receive`;
* connection events: :meth:`Peering.connection_lost` (the socket monitor saw the TCP connection
  close), :meth:`Peering.reconnect` (when :meth:`Peering.reconnect_due` says so, just before the
  shell replaces its socket), :meth:`Peering.tick` (timers; wake it at :meth:`Peering.next_timer`);
* the application's actions: :meth:`Peering.publish`, :meth:`Peering.request`,
  :meth:`Peering.subscribe`, :meth:`Peering.take`, :meth:`Peering.detach`, :meth:`Peering.close`,
  and :meth:`Peering.join` while :data:`ABSENT` (readers never create streams: the first ATTACH
  says ``STREAM-EXPECT 0`` unless ``create``; a stream that does not exist leaves the peering
  ABSENT until a publish attaches creating it or a read finds it);

and takes from it the frames to send, in order (:attr:`Peering.outbox`: the shell sends from
the left and leaves what the socket does not take), the messages for the application
(:attr:`Peering.buffer`, handed out by :meth:`Peering.take` and :meth:`Peering.take_batches`:
the subscriber's half, DELIVERs in and credit out, is :mod:`zeps.clients.delivery`), the
outcome of each request (a
:class:`Request`), of each publish (a receipt, :mod:`zeps.clients.receipt`), and the errors to
raise (:meth:`Peering.check`).

Each ATTACH goes after ``REASONS-SELECT``: a broker that offers it refuses with ERROR (a code
and fields, :mod:`zeps.protocol.reasons`) instead of INVALID, and the peering acts on the code
and the fields; from a broker that does not (its INVALID answers the REASONS-SELECT), an INVALID's
code is read from its text's prefix and what the fields would say is parsed from the text, best
effort (INVALID's text is cut at 255 bytes). Below, "an INVALID" is either.

Replies to requests come back in request order, so a reply answers the oldest outstanding
request. An INVALID answers that request too, unless it says ``PUBLISH rejected: ...`` (it then
answers a publish) or publishes were sent since the last request: a PING (a *barrier*) is sent
before the next request in that case, and an INVALID arriving before its PING-OK answers a
publish. An INVALID saying ``not attached: ...`` and a DETACH from the broker mean the broker
forgot this client: the peering is re-established (a new socket, ATTACH, CONFIRM-SELECT,
DELIVER-TIMESTAMPS, every pattern re-subscribed from the last message handed to the application,
the credit window re-granted, unconfirmed publishes re-sent).

After each ATTACH the peering asks ``LIMITS`` and sizes its credit window from the answer
(:mod:`zeps.clients.window`; an INVALID answer, from an older broker, changes nothing), then
``BATCH-SELECT`` and ``STREAM-DESCRIBE`` (:mod:`zeps.clients.batching`: DELIVER-BATCH frames
give the messages DELIVERs would give, and publishes made while frames wait for the socket are
queued and sealed into one PUBLISH-BATCH when it is free: :meth:`Peering.next_frame`;
an INVALID answer leaves plain PUBLISH / DELIVER). With
confirms it says ``PRODUCER`` before publishing and before each run of re-sent publishes
(:mod:`zeps.clients.producer`). Two INVALIDs come unasked and answer no request: ``credit window
too small: ...`` grows the window, ``pattern removed: ...`` drops a pattern and is raised once
as :class:`~zeps.clients.errors.PatternRemoved`. Losing and regaining the peering are queued as
:class:`ConnectionEvent` in :attr:`Peering.events` for the shell to hand on.
"""
from __future__ import annotations

import ast
import logging
import re
import struct
from collections import deque
from typing import Deque, Dict, List, NamedTuple, Optional, Tuple, Union

from ..protocol import commands as c
from ..protocol.codec import ProtocolError, decode, encode
from ..protocol.deliver import DELIVER_ID, DELIVER_TS_ID, SIGNATURE, TS_SHIFT
from ..protocol.reasons import FENCED, Code, Reason
from .batching import (DELIVER_BATCH_HEAD, MAX_BATCH_BYTES,
                       PUBLISH_BATCH_HEAD, PublishQueue, unbatch)
from .confirms import ConfirmTracker
from .delivery import Delivery
from .errors import (ClientClosed, ConnectionLost, InvalidError, NoStream, PatternRemoved,
                     ProducerFenced, ProducerStateLost, StreamDeleted, StreamRecreated,
                     invalid_error)
from .message import Message, MessageBatch
from .producer import check_producer_id, new_producer_id, refusal_kind
from .requests import REPLY_KINDS, Request, RequestKind
from .window import advised_cost, largest_cost, topup_for, window_for

__all__ = ["Peering", "Request", "RequestKind", "ConnectionEvent", "CONNECTING", "ATTACHED", "ABSENT",
           "FAILED", "CLOSED", "LOST", "RECONNECTED", "validate_options"]

log = logging.getLogger("zeps.client")

CONNECTING, ATTACHED, FAILED, CLOSED = "connecting", "attached", "failed", "closed"
#: Not attached because the stream does not exist (a reader's ATTACH does not create it): the
#: next publish attaches creating it (:meth:`Peering.join`), the next read looks again.
ABSENT = "absent"
#: Kinds of :class:`ConnectionEvent`.
LOST, RECONNECTED = "lost", "reconnected"
#: Seconds between two reconnects.
RECONNECT_SPACING = 0.1

_DELIVER_HEAD = SIGNATURE + bytes((DELIVER_ID,))
_DELIVER_TS_HEAD = SIGNATURE + bytes((DELIVER_TS_ID,))
_U32_unpack_from = struct.Struct(">I").unpack_from
_PUBLISH_HEAD = SIGNATURE + bytes((c.Publish.ID,))
_PING = encode(c.Ping())
_PING_OK = encode(c.PingOk())
_DELIVER_TIMESTAMPS = encode(c.DeliverTimestamps())
_LIMITS = c.Limits()
_BATCH_SELECT = c.BatchSelect()
_REASONS_SELECT = encode(c.ReasonsSelect())
_STREAM_ID = c.StreamId()
#: The pattern the text of a PATTERN_REMOVED reason names, from a broker without REASONS-SELECT
#: (it writes the regex, without its ``~``, as a Python string literal).
_REMOVED_REGEX = re.compile(r"""regular expression ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")

class ConnectionEvent(NamedTuple):
    """The peering was lost (``kind`` :data:`LOST`, ``reason`` says why) or re-established
    (:data:`RECONNECTED`, ``reason`` says what was re-sent); ``reconnects`` counts the
    reconnects so far. A shell hands these to the application's ``on_connection`` callback."""
    kind: str
    reason: str
    reconnects: int


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


class Peering(Delivery):
    """One client's peering with a broker, attached to ``stream`` (see the module docs).

    Starts connecting: the ATTACH is in :attr:`outbox`.
    """

    def __init__(self, stream: str, *, credit_window: int, confirms: bool, timestamps: bool,
                 timeout: float, heartbeat: float, now: float, endpoint: str = "",
                 producer_id: Optional[str] = None, idempotent: bool = True,
                 batching: bool = True, reasons: bool = True, incarnations: bool = True,
                 create: bool = False):
        validate_options(stream, credit_window, timeout, heartbeat)
        check_producer_id(producer_id, confirms)
        self.stream = stream
        self.endpoint = endpoint        # for log lines only
        self.credit_window = credit_window
        self.confirms = bool(confirms)
        self.timestamps = bool(timestamps)
        #: Ask BATCH-SELECT after each ATTACH (zeps.clients.batching).
        self.batching = bool(batching)
        #: Ask REASONS-SELECT before each ATTACH (refusals as codes and fields).
        self.reasons = bool(reasons)
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
        self.held: Deque[bytes] = deque()             # frames waiting for ATTACH-OK
        self.outstanding: Deque[Request] = deque()
        self.pubs_since_request = 0
        self.error: Optional[Exception] = None        # one-shot: raised by the next call
        self.fatal: Optional[Exception] = None        # permanent
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
        # the broker's limits (LIMITS-OK), when it said them, and the largest message cost the
        # window is sized for (window.py)
        self.max_credit: Optional[int] = None
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
        self.topup = max(1, credit_window // 2)
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

    def check(self) -> None:
        """Raise what the application must hear before its next operation: :class:`ClientClosed`,
        the permanent error, or (once) the error of an earlier asynchronous operation."""
        if self.state is CLOSED:
            raise ClientClosed("the client is closed")
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

    @property
    def max_batch(self) -> Optional[int]:
        """The largest PUBLISH-BATCH (bytes) the broker takes on this connection; None while
        batching is off (not asked, not answered yet, or refused by an older broker)."""
        return self.queue.max_batch

    @property
    def waiting(self) -> bool:
        """Frames wait for the socket (queued ones or publishes to batch): the shell sends
        them (:meth:`next_frame`) as soon as it can."""
        return bool(self.outbox or self.queue.frames)

    def unsent_publishes(self) -> int:
        """Publishes not yet handed to a broker (or not yet confirmed, with confirms)."""
        if self.confirms:
            return len(self.tracker.unconfirmed)
        return len(self.queue) + sum(_publishes_in(f) for f in (*self.outbox, *self.held))

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
        # Publishes never handed to the old socket reached no broker: keep them. With confirms
        # every unconfirmed publish is re-sent from the tracker's instead.
        keep = [] if self.confirms else [p for f in (*self.outbox, *self.held)
                                         for p in _plain_publishes(f)] + self.queue.drain()
        self.queue.drain()              # with confirms, the tracker has them
        self.queue.max_batch = None     # until the next broker answers BATCH-SELECT
        self.queue.max_body = None
        self.outbox.clear()
        self.held.clear()
        self.held.extend(keep)
        self.buffer.clear()
        self.buffered = self.buffered_messages = 0
        self.last_received = self.last_handed
        self.consumed = 0
        self.confirm_ready = not self.confirms
        self.reconnect_at = now + RECONNECT_SPACING
        self._attach(now)

    def tick(self, now: float) -> None:
        """Timers: send a heartbeat after ``heartbeat`` seconds of silence; declare the peering
        lost when a heartbeat or a re-ATTACH is not answered within ``probe_timeout``."""
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

    def publish(self, frame: bytes, now: float, receipt, checked: bool = True) -> bool:
        """Account for one PUBLISH the shell hands to its socket right after.

        With ``checked``, first return False (and do nothing) unless the publish may go straight
        out: attached, nothing queued, no error to raise first, not silent for ``heartbeat``
        seconds. The shell then waits for that (:meth:`heartbeat_probe`, :attr:`ready`, an
        empty :attr:`outbox`) and calls again with ``checked=False``. ``receipt`` is kept until its
        CONFIRM with confirms on."""
        if checked and (self.state is not ATTACHED or self.error is not None
                        or (self.outbox and (self.queue.max_batch is None or self.queue.size
                                             + len(frame) > self.queue.max_batch))
                        or self.need_reconnect is not None or self.producer_sync is not None
                        or now - self.last_send >= self.heartbeat):
            return False
        self.pubs_since_request += 1
        self.last_send = now
        if self.confirms:
            self.tracker.track(receipt)
        return True

    def may_publish(self, now: float) -> bool:
        """Whether publishes may go straight out now (see :meth:`publish`)."""
        return (self.state is ATTACHED and self.error is None and not self.outbox
                and self.need_reconnect is None and self.producer_sync is None
                and now - self.last_send < self.heartbeat)

    def publish_frame(self, frame: bytes, count: int, now: float) -> None:
        """Account for ``count`` publishes without confirms that the shell built into one frame
        (``batching.batch_frames``: a PUBLISH-BATCH within ``max_batch``, or a PUBLISH) when
        :meth:`may_publish`: they go out behind what the queue holds, in order. Without
        batching (the broker changed meanwhile) a PUBLISH-BATCH goes as its PUBLISHes."""
        self.pubs_since_request += count
        self.last_send = now
        if self.queue.frames:
            self.outbox.append(self.queue.seal())
        if count > 1 and self.queue.max_batch is None:
            self.outbox.extend(unbatch(frame))
        else:
            self.outbox.append(frame)

    def unsent(self, frame: bytes) -> None:
        """The socket did not take a PUBLISH frame (high-water mark), or the shell did not try
        because frames wait (:attr:`waiting`): queue it, in order -- to leave with the next
        batch when the broker takes batches."""
        if self.queue.max_batch is None or self.state is not ATTACHED:
            self.outbox.append(frame)
        else:
            self.outbox.extend(self.queue.add(frame))

    def next_frame(self) -> Optional[bytes]:
        """The frame to send next (the shell pops it from :attr:`outbox` once the socket
        took it): the oldest of :attr:`outbox`, else what the queue holds, sealed into one
        PUBLISH-BATCH now that the socket is free (natural batching). None: nothing waits."""
        if self.outbox:
            return self.outbox[0]
        if self.queue.frames:
            self.outbox.append(self.queue.seal())
            return self.outbox[0]
        return None

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

    def close(self) -> None:
        """The shell closed its socket: final. Unconfirmed publishes fail with ClientClosed."""
        self.state = CLOSED
        self.buffer.clear()
        self.buffered = self.buffered_messages = 0
        self.tracker.fail_all(ClientClosed("the client was closed before the broker confirmed "
                                        "this message"))

    # ------------------------------------------------------------------ input

    def receive(self, frame: bytes, now: float) -> None:
        """One frame from the broker."""
        self.last_recv = now
        if frame.startswith(_DELIVER_TS_HEAD):
            self._on_deliver(frame, TS_SHIFT)
        elif frame.startswith(_DELIVER_HEAD):
            self._on_deliver(frame, 0)
        elif frame.startswith(DELIVER_BATCH_HEAD):
            self._on_deliver_batch(frame)
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
        elif kind is RequestKind.BATCH_LIMITS:
            if cmd.max_message:         # the stream's own limit replaces the broker's
                self.queue.max_body = cmd.max_message
            self.queue.max_batch = self.offered_batch     # batching starts
        elif kind is RequestKind.LIMITS:
            self.max_credit = cmd.max_credit
            self.queue.max_body = cmd.max_message
            self._fit(min(largest_cost(cmd.max_message), cmd.max_credit))
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
        held = list(self.held)
        self.held.clear()
        if self.incarnation is None:     # which stream this is (a re-ATTACH expects it)
            self.request(_STREAM_ID, RequestKind.STREAM_ID, now)
        self.request(_LIMITS, RequestKind.LIMITS, now)        # sizes the credit window (window.py)
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
            for frame in held:
                self._send(frame)
                self.pubs_since_request += frame.startswith(_PUBLISH_HEAD)
        if self.reconnects:
            n = len(self.tracker.unconfirmed)
            what = f"re-sending {n} unconfirmed publish(es)" if n else "nothing to re-send"
            log.info("zeps: re-attached to %s (stream %r), %s", self.endpoint, self.stream, what)
            self.events.append(ConnectionEvent(RECONNECTED, what, self.reconnects))

    def _on_invalid(self, why: Reason) -> None:
        """An INVALID, or an ERROR (``why`` has its code and fields then)."""
        code, reason = why.code, why.text
        if code is Code.NOT_ATTACHED and self.state is ATTACHED:
            self.connection_lost(f"the broker does not know this client ({reason})")
            return
        if code is Code.NOT_ALLOWED and why.fields[:1] == ("connect",):
            # This connection's key was removed from the broker's allow-list: every command on
            # it is refused, and a new connection could not complete the handshake.
            self.state = FAILED
            self._fail(ConnectionLost(f"the broker no longer accepts this client's key: "
                                      f"{reason}"))
            return
        # Advice the broker sends on its own, answering no request:
        if code is Code.WINDOW_TOO_SMALL:
            self._window_too_small(why)
            return
        if code is Code.PATTERN_REMOVED:
            self._pattern_removed(why)
            return
        rejected = code is Code.PUBLISH_REJECTED
        head = self.outstanding[0] if self.outstanding else None
        if head is not None and head.kind is not RequestKind.BARRIER and not rejected:
            # The answer to the request at the head (no publish was sent before it unanswered).
            self.outstanding.popleft()
            head.error = invalid_error(why, head.name)
            head.done = True
            if head.kind is RequestKind.ATTACH:
                if not self.ever_attached:
                    # A reader's ATTACH (STREAM-EXPECT 0) to no stream, or any refused ATTACH
                    # once the constructor returned: ABSENT, for the next call to try again.
                    self.state = ABSENT
                    if code is Code.NO_STREAM and not (self.create or self.creating):
                        self.absence = head.error
                    else:
                        self.attach_error = head.error
                    self.creating = False
                else:
                    self.state = FAILED
                    self._fail(self._reattach_refused(code, reason))
            elif head.kind is RequestKind.STREAM_ID:
                log.debug("zeps: the broker at %s does not tell stream incarnations (%s)",
                          self.endpoint, reason)
                self.incarnation = 0
            elif head.kind is RequestKind.STREAM_EXPECT and not self.incarnation:
                log.debug("zeps: the broker at %s does not have STREAM-EXPECT (%s): its ATTACH "
                          "creates stream %r", self.endpoint, reason, self.stream)
            elif head.kind is RequestKind.STREAM_EXPECT:
                log.warning("zeps: the broker at %s does not check stream incarnations (%s): "
                            "re-attaching to stream %r without knowing whether it is the same "
                            "stream", self.endpoint, reason, self.stream)
            elif head.kind is RequestKind.CONFIRM_SELECT:
                self._fail(head.error)
            elif head.kind is RequestKind.RESUBSCRIBE:
                self.error = self.error or head.error
            elif head.kind is RequestKind.REASONS_SELECT:
                log.debug("zeps: the broker at %s does not offer REASONS-SELECT (%s): refusals "
                          "are read from INVALID's text", self.endpoint, reason)
            elif head.kind is RequestKind.BATCH_SELECT:
                log.debug("zeps: the broker at %s does not batch (%s): plain PUBLISH/DELIVER",
                          self.endpoint, reason)
            elif head.kind is RequestKind.BATCH_LIMITS:       # the broker's own limit stands
                self.queue.max_batch = self.offered_batch
            elif head.kind is RequestKind.PRODUCER:
                self._producer_refused(head, why)
            return
        # With no request in front of it, an INVALID answers a PUBLISH (or a CREDIT).
        if rejected and refusal_kind(why) == FENCED:
            self._fenced(why)
            return
        err = invalid_error(why, "PUBLISH" if rejected else None)
        if self.error is None:
            self.error = err
        if rejected and self.confirms:           # the broker does not count it
            self.tracker.reject_one(err)

    # ------------------------------------------------------------------ exactly-once

    def _producer_synced(self, last: int, now: float) -> None:
        """The answer to the PRODUCER after ATTACH: the broker holds this producer's messages
        up to ``last``. The unconfirmed publishes up to it are re-sent as they were numbered,
        after their own PRODUCERs (duplicates: confirmed, not stored again); the others are
        numbered again from ``last + 1`` (a peering may not start past it: a rejected publish,
        or records a broker crash lost, leave holes) and re-sent after one PRODUCER.

        If ``last`` is below a producer sequence the broker already confirmed, it forgot this
        producer (too old, evicted, the stream created again): the unconfirmed publishes may
        or may not be stored, so they are not re-sent (they would be stored twice); they fail
        with :class:`ProducerStateLost`, said once (receipt or next call) and logged, and the
        next publishes are numbered from ``last + 1``."""
        self.producer_sync = None
        tracker = self.tracker
        at = self.producer_at
        if tracker.forgotten(last):
            n = len(tracker.unconfirmed)
            err = ProducerStateLost(
                f"the broker at {self.endpoint} forgot producer {self.producer!r} on stream "
                f"{self.stream!r}: it holds its messages up to producer sequence {last}, yet "
                f"it had confirmed {tracker.producer_confirmed} (its producer state was "
                f"dropped: too old, too many producers, or the stream was created again); {n} "
                f"unconfirmed message(s) were not re-sent, as they may be stored already: "
                f"publish them again only if a duplicate does no harm", last,
                tracker.producer_confirmed)
            log.warning("zeps: %s", err)
            if n:
                self.error = self.error or err
            tracker.restart(last, err)
            if at != last + 1:
                self.request(c.Producer(self.producer, last + 1), RequestKind.PRODUCER, now)
            return
        for first, receipts in tracker.resync(last):
            if first != at:
                self.request(c.Producer(self.producer, first), RequestKind.PRODUCER, now)
            self._resend(receipts)
            at = first + len(receipts)

    def _producer_refused(self, head: Request, why: Reason) -> None:
        """PRODUCER was refused: the id is another key's (final: :class:`ProducerFenced`),
        or the broker does not do exactly-once here (an older broker, no right to publish, a
        limit): publishing goes on at-least-once (the unconfirmed publishes are re-sent)."""
        if refusal_kind(why) is not None:
            self._fenced(why)
            return
        log.warning("zeps: the broker at %s refused PRODUCER (%s): publishing to stream %r is "
                    "at-least-once, not exactly-once", self.endpoint, why.text, self.stream)
        self.producer = None
        if head is self.producer_sync:
            self.producer_sync = None
            self._resend(self.tracker.unconfirmed)

    def _fenced(self, why: Reason) -> None:
        """Another client took this producer id over (or it is another key's): final."""
        if self.fatal is not None:                   # one INVALID per publish in flight
            return
        err = ProducerFenced(why.text, "PRODUCER", why.code, why.fields)
        log.warning("zeps: stream %r: exactly-once publishing stops: %s", self.stream, why.text)
        self.producer_sync = None
        self._fail(err)

    # ------------------------------------------------------------------ helpers

    def _reattach_refused(self, code: Code, reason: str) -> ConnectionLost:
        """The error a refused re-ATTACH ends the peering with: the stream it knew was deleted
        (``no stream``), or is another incarnation, or (any other reason) the peering is lost."""
        inc = self.incarnation or 0
        if code is Code.NO_STREAM:
            return StreamDeleted(f"stream {self.stream!r} was deleted (the broker said: "
                                 f"{reason})", self.stream, inc, reason)
        if code is Code.STREAM_RECREATED:
            return StreamRecreated(f"stream {self.stream!r} was deleted and created again: its "
                                   f"sequences are not the ones this client knew (the broker "
                                   f"said: {reason})", self.stream, inc, reason)
        return ConnectionLost(f"the broker refused to re-attach stream {self.stream!r}: {reason}")

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

    def _fit(self, largest: int, advice: Optional[str] = None) -> None:
        """Size the credit window for messages costing up to ``largest`` (window.py), granting
        what it grows by -- and the credit held back so far -- at once while subscribed. With a
        broker's ``advice`` that cannot be followed, the application hears it."""
        largest = max(largest, self.largest)
        window = window_for(self.credit_window, largest, self.max_credit)
        if window is None:              # can never be delivered to this client: say so
            self.error = self.error or InvalidError(advice or f"a message of {largest} bytes "
                                                              f"of credit cannot be delivered")
            return
        self.largest = largest
        self.topup = topup_for(window, largest)
        more = window - self.credit_window
        if more <= 0:
            return
        log.info("zeps: credit window for stream %r grows from %d to %d bytes", self.stream,
                 self.credit_window, window)
        self.credit_window = window
        if self.subscribed:
            self.consumed += more
            self._grant()

    def _window_too_small(self, why: Reason) -> None:
        # fields: (sequence, cost, peak); from a broker without REASONS-SELECT, the text's figure
        cost = why.fields[1] if len(why.fields) > 1 else ""
        self._fit(int(cost) if cost.isdigit() else advised_cost(why.text, self.credit_window),
                  why.text)

    def _pattern_removed(self, why: Reason) -> None:
        reason = why.text
        if why.fields:                   # (the pattern as subscribed,)
            pattern = why.fields[0]
        else:                            # a broker without REASONS-SELECT: the text, if not cut
            m = _REMOVED_REGEX.search(reason)
            pattern = None
            if m:
                try:
                    pattern = "~" + ast.literal_eval(m.group(1))
                except (ValueError, SyntaxError):
                    pattern = None
        if pattern is not None and self.patterns.pop(pattern, None) is None:
            pattern = None
        log.warning("zeps: stream %r: %s", self.stream, reason)
        self.error = self.error or PatternRemoved(reason, pattern, why.fields)

    def _send(self, frame: bytes) -> None:
        if self.queue.frames:            # publishes queued before this frame leave before it
            self.outbox.append(self.queue.seal())
        # ABSENT: only requests that need no ATTACH are made (LIST-STREAMS-PAGE): they go now
        (self.outbox if self.state is ATTACHED or self.state is ABSENT else self.held).append(frame)

    def _resend(self, receipts) -> None:
        """Send the frames of unconfirmed publishes again (after a re-ATTACH)."""
        for r in receipts:
            self._send(r.frame)
        self.pubs_since_request += len(receipts)

    def _fail(self, error: Exception) -> None:
        self.fatal = error
        self.tracker.fail_all(error)


def _publishes_in(frame: bytes) -> int:
    """How many publishes a frame of the outbox carries (0: not a publish)."""
    if frame.startswith(_PUBLISH_HEAD):
        return 1
    if frame.startswith(PUBLISH_BATCH_HEAD):
        return _U32_unpack_from(frame, 3)[0]
    return 0


def _plain_publishes(frame: bytes) -> List[bytes]:
    """The PUBLISH frames an outbox frame carries (a batch unbatched), none for others."""
    if frame.startswith(_PUBLISH_HEAD):
        return [frame]
    if frame.startswith(PUBLISH_BATCH_HEAD):
        return unbatch(frame)
    return []

