"""The I/O both client front ends share: one DEALER socket (and its monitor) serving a Peering.

:class:`Connection` owns the socket and never decides anything: it hands every frame it reads
to the :class:`~zeps.clients.peering.Peering`, tells it when the socket monitor sees the TCP
connection close, replaces the socket when the peering says to reconnect, and sends what the
peering queued. Every socket reads frames of at most the peering's ``read_limit`` bytes
(``ZMQ_MAXMSGSIZE``); a connection libzmq drops without reconnecting is told to the peering,
which judges it (:mod:`zeps.clients.bounds`). How to *wait* is the front end's business: the
blocking client reads blocking (:meth:`Connection.recv_within`, its one blocking call) and
services the socket when due (:mod:`zeps.clients.waiting`), or under gevent polls
``connection.poller`` (``zmq.green``); the asyncio client awaits the poller (``zmq.asyncio``).
"""
from __future__ import annotations

import logging
import os
import struct
import sys
import time

import zmq

from ..units import check_endpoint
from . import lifetime
from .handshake import HANDSHAKE_FAILED as _HANDSHAKE_FAILED
from .handshake import HandshakeWatch
from .peering import Peering

__all__ = ["Connection", "check_endpoint", "zmq_for"]

log = logging.getLogger("zeps.client")

_NOBLOCK = int(zmq.NOBLOCK)
_backend_send = zmq.backend.Socket.send
_backend_recv = zmq.backend.Socket.recv
_backend_get = zmq.backend.Socket.get
_backend_set = zmq.backend.Socket.set
_RCVTIMEO = int(zmq.RCVTIMEO)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_MON_EVENT = struct.Struct("=HI")      # a socket-monitor event frame: event, value
_MON_EVENTS = int(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
                  | zmq.EVENT_HANDSHAKE_SUCCEEDED | _HANDSHAKE_FAILED)
#: Most frames read in one go, so that timers and the application get a turn.
DRAIN_LIMIT = 20000
_ASK_FIRST = 8            # reads of a drain that ask ZMQ_EVENTS before reading (drain)
#: Longest interval (s) between two :meth:`Connection.service` calls of the blocking client
#: while it waits by reading (:meth:`Connection.recv_within`): the monitor's events and the
#: timers are looked at that often while frames flow, and after that long without one. A
#: wake-up costs the subscriber's thread no more than one blocking read (a raw reader's), where
#: a poll of the socket and its monitor then a service cost about five ZeroMQ calls that each
#: poll the socket's mailbox (issue 20). ZeroMQ itself waits 100 ms before reconnecting.
SERVICE_SPACING = 0.05
#: The longest blocking read (ms): a read waits that long unless a deadline is sooner (setting
#: RCVTIMEO costs more than the read's own Python, so it stays the same from read to read).
READ_SPACING_MS = int(SERVICE_SPACING * 1000)
#: The socket's send high-water mark (frames) with batching: small, so that a publisher
#: faster than the socket finds it busy soon and its publishes join batches (natural
#: batching, :mod:`zeps.clients.batching`) instead of piling up one frame each in ZeroMQ's
#: queue ("busy": frames ZeroMQ's I/O thread has not taken yet, Nagle's data in flight). A
#: tight loop's ``publish()`` with confirms was 1.2-1.6x faster with 4 than 64 (60% of its
#: publishes left as single frames), as fast with 8; fewer than 4 made ``publish_batch`` wait
#: for the I/O thread after each frame. 8 for a paced publisher, whose sends hear of the room
#: its I/O thread made about once a ms: with 4 more were refused (``zmq.Again``) and asked
#: ZMQ_EVENTS (docs/benchmarks.md, "The send high-water mark"). A burst's rest goes with the
#: sender thread (:mod:`zeps.clients.flusher`). Set before connecting: ZeroMQ sizes a pipe's
#: low-water mark when it creates it, and a mark lowered later leaves the writer waiting for a
#: wake-up that never comes. Raised to 1000 when the broker does not batch (raising is safe).
BATCH_SNDHWM = 8
#: The same under gevent (``zmq.green``), where the client has no sender thread (an OS thread
#: must not touch a green socket): 64 sends every burst of up to 64 frames at once, and what a
#: longer burst leaves queued goes with the client's next call.
GREEN_BATCH_SNDHWM = 64
#: The same for the :class:`~zeps.clients.AsyncClient`, whose publishes join a queue that
#: leaves when the publishing coroutine lets the event loop run (or 64 at a time): it needs no
#: busy socket to batch, and a flat-out coroutine, which lets the loop run every 2 ms only,
#: keeps ZeroMQ's I/O thread busy in between with more frames queued (with 4, a flat-out
#: ``await publish()`` went 0.75-0.9x as fast).
ASYNC_BATCH_SNDHWM = 64
PLAIN_SNDHWM = 1000


_own_contexts: dict = {}          # flavour -> (context, the process that made it)


def _own_context(module):
    """A private context of a flavour, this process's (``Context.instance()`` may hand back
    another flavour's singleton if that one exists; a forked child's copy of its parent's has
    no I/O thread: a socket made on it never connects)."""
    ctx, pid = _own_contexts.get(module.__name__, (None, None))
    if ctx is None or ctx.closed or pid != os.getpid():
        if ctx is not None and pid != os.getpid():
            lifetime.keep(ctx)           # the parent's: never touched in the child
        ctx = module.Context()
        _own_contexts[module.__name__] = (ctx, os.getpid())
    return ctx


def zmq_for(context, asyncio: bool = False):
    """Pick ``(zmq module, context)`` for a client.

    asyncio: ``zmq.asyncio`` (``context`` may be a ``zmq.asyncio.Context`` or a plain one, which
    is shadowed). Otherwise ``zmq.green`` when gevent is in charge (a ``zmq.green.Context`` is
    given, or gevent has monkey-patched ``socket``), else plain ``zmq``.
    """
    if asyncio:
        import zmq.asyncio as za
        if context is None:
            return za, _own_context(za)
        return za, context if isinstance(context, za.Context) else za.Context.shadow(context.underlying)
    if context is not None:
        zg = sys.modules.get("zmq.green")
        green = zg is not None and isinstance(context, zg.Context)
    else:
        monkey = sys.modules.get("gevent.monkey")
        green = bool(monkey is not None and monkey.is_module_patched("socket"))
    if not green:
        return zmq, (context if context is not None else zmq.Context.instance())
    import zmq.green as zgreen
    return zgreen, (context if context is not None else _own_context(zgreen))


class Connection:
    """One DEALER socket to ``endpoint`` and its monitor, serving ``peering``.

    ``sock`` and ``mon`` are plain (synchronous) sockets used with NOBLOCK only, but for the
    blocking client's reads (:meth:`recv_within`); ``poller`` (of ``module``, the flavour
    :func:`zmq_for` picked) watches them for the other front ends.
    ``send(frame, flags)`` sends on ``sock``: the pyzmq backend's send, which costs a third of
    ``Socket.send`` (a wrapper for routing ids and groups, which ZEPS does not use), except on
    gevent sockets, whose own send also wakes other greenlets waiting on the socket. ``recv``,
    ``get`` (on ``sock``) and ``mon_get`` (on ``mon``) are the backend's too, for the same
    reason: the sugar's ``get`` turns every ZMQ_EVENTS answer into an ``enum`` (issue 20); on
    gevent sockets they are the sockets' own, which keep the greenlets' watchers in step.
    """

    def __init__(self, peering: Peering, endpoint: str, module, context, on_event=None,
                 curve=None):
        self.peering = peering
        self.curve = curve                # CurveKeys, or None for plaintext
        #: Called with each :class:`~zeps.clients.peering.ConnectionEvent` (lost, reconnected).
        self.on_event = on_event
        self.endpoint = endpoint
        self.module = module
        self.context = context
        self.sock = None
        self.mon = None
        self.poller = None
        self.send = self.recv = self.get = self.mon_get = None
        self._owned = ()            # the sockets to close: the flavour's own objects
        self._hwm = PLAIN_SNDHWM    # the socket's SNDHWM now
        self._rcvtimeo = -1         # the socket's RCVTIMEO now (ms)
        self._handshaken = False
        #: When the blocking client calls :meth:`service` next at the latest (monotonic s):
        #: set by :meth:`serviced`, 0 while the socket is new or closed.
        self.service_due = 0.0
        #: Judges failed handshakes until the broker first answered (then None).
        self.handshakes = HandshakeWatch(endpoint, curve)

    # ------------------------------------------------------------------ socket lifecycle

    def open(self) -> None:
        """Create and connect a fresh socket (raises ValueError for an endpoint ZeroMQ refuses)."""
        p = self.peering
        raw = self.context.socket(zmq.DEALER)
        if self.curve is not None:
            self.curve.apply(raw)
        raw.setsockopt(zmq.LINGER, 0)
        raw.setsockopt(zmq.RCVHWM, 0)          # credit bounds what the broker sends us
        raw.setsockopt(zmq.MAXMSGSIZE, p.read_limit)      # and how long a frame is (bounds.py)
        if not p.batching:
            self._hwm = PLAIN_SNDHWM
        elif self.module.__name__ == "zmq.asyncio":
            self._hwm = ASYNC_BATCH_SNDHWM    # it batches when the coroutine lets the loop run
        elif self.module.__name__ == "zmq.green":
            self._hwm = GREEN_BATCH_SNDHWM    # no sender thread (flusher.py)
        else:
            self._hwm = BATCH_SNDHWM
        raw.setsockopt(zmq.SNDHWM, self._hwm)
        raw.setsockopt(zmq.RECONNECT_IVL, 100)
        raw.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        try:
            raw.setsockopt(zmq.HEARTBEAT_IVL, int(p.heartbeat * 1000))
            raw.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(p.probe_timeout * 1000))
        except (AttributeError, zmq.ZMQError):
            pass
        raw_mon = raw.get_monitor_socket(_MON_EVENTS)
        try:
            raw.connect(self.endpoint)
        except zmq.ZMQError as e:
            raw.disable_monitor()
            raw_mon.close(0)
            raw.close(0)
            raise ValueError(f"bad endpoint {self.endpoint!r}: {e}") from None
        if self.module.__name__ == "zmq.asyncio":
            # NOBLOCK operations through synchronous views; the asyncio sockets are for waiting.
            self.sock, self.mon = zmq.Socket.shadow(raw.underlying), zmq.Socket.shadow(raw_mon.underlying)
        else:
            self.sock, self.mon = raw, raw_mon
        green = self.module.__name__ == "zmq.green"
        if green:
            self.send, self.recv, self.get = self.sock.send, self.sock.recv, self.sock.get
            self.mon_get = self.mon.get
        else:
            self.send = _backend_send.__get__(self.sock)
            self.recv = _backend_recv.__get__(self.sock)
            self.get = _backend_get.__get__(self.sock)
            self.mon_get = _backend_get.__get__(self.mon)
        poller = self.module.Poller()
        poller.register(raw, _POLLIN)
        poller.register(raw_mon, _POLLIN)
        self.poller = poller
        self._owned = (raw, raw_mon)
        self._rcvtimeo = -1
        self._handshaken = False    # the connection's handshake succeeded, it was not dropped
        self.service_due = 0.0

    def close(self) -> None:
        """Close the socket and its monitor (pyzmq unregisters them from an asyncio loop)."""
        raw, raw_mon = self.abandon(forked=False)
        if raw is not None:
            try:
                raw.disable_monitor()
            except zmq.ZMQError:
                pass
            raw_mon.close(0)
            raw.close(0)

    def abandon(self, forked: bool = True):
        """Forget the socket and its monitor without a call on them, and return them. Forked (a
        child's copy of the connection), they are the parent's and forget their event loop too
        (:func:`zeps.clients.lifetime.disown`); :meth:`close` keeps the loop, to unregister."""
        owned = self._owned or (None, None)
        if forked:
            lifetime.disown(*owned)
        self._owned = ()
        self.service_due = 0.0
        self.sock = self.mon = self.poller = None
        self.send = self.recv = self.get = self.mon_get = None
        return owned

    # ------------------------------------------------------------------ non-blocking work

    def service(self) -> None:
        """Read monitor events and frames, reconnect when due, run timers, send what is queued."""
        p = self.peering
        if self.sock is None:
            return
        mon = self.mon
        # Asking the monitor costs a third of a refused read (zmq.Again is a raised exception):
        # it is called on every wake-up of a subscriber, and almost always has nothing.
        while self.mon_get(_EVENTS) & _POLLIN:
            try:
                parts = mon.recv_multipart(_NOBLOCK)
            except zmq.Again:
                break
            if not parts or len(parts[0]) < 6:
                continue
            event, value = _MON_EVENT.unpack_from(parts[0], 0)
            if event == zmq.EVENT_DISCONNECTED:
                if self._handshaken:            # why? libzmq's next event says (bounds.py)
                    p.connection_dropped(time.monotonic())
                else:
                    p.connection_lost("connection closed by the broker")
                self._handshaken = False
            elif event == zmq.EVENT_CONNECT_RETRIED:
                p.zmq_reconnecting()
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._handshaken = True
            elif event & _HANDSHAKE_FAILED:
                self._handshaken = False
                self._handshake_failed(event, value)
        if p.need_reconnect is None:
            self.drain()
            if self._hwm != PLAIN_SNDHWM and p.ready and p.max_batch is None:
                self.sock.setsockopt(zmq.SNDHWM, PLAIN_SNDHWM)     # the broker does not batch
                self._hwm = PLAIN_SNDHWM
        now = time.monotonic()
        if p.reconnect_due(now):
            p.reconnect(now)
            self.close()
            self.open()
        else:
            p.tick(now)
        if p.waiting:
            self.send_queued()
        if p.events:
            self._emit()

    def _handshake_failed(self, event: int, value: int) -> None:
        """Until the broker's first answer a failed handshake is a mistake in the security
        settings: the peering fails with :class:`~zeps.clients.errors.HandshakeFailed` (see
        :class:`HandshakeWatch`). Once the broker answered (then restarted with other keys, or
        revoked the key) the client goes on reconnecting, as from any lost connection."""
        watch, p = self.handshakes, self.peering
        if watch is None:
            return
        error = watch.event(event, value)
        if error is not None:
            p.abort(error)

    def _emit(self) -> None:
        """Hand the peering's connection events to ``on_event`` (an application callback: what
        it raises is logged, never breaks the client)."""
        events = self.peering.events
        while events:
            event = events.popleft()
            if self.on_event is not None:
                try:
                    self.on_event(event)
                except Exception:
                    log.exception("zeps: the on_connection callback failed on %s", event)

    def drain(self) -> None:
        """Hand the peering the frames the socket holds, up to :data:`DRAIN_LIMIT` (no
        waiting)."""
        recv = self.recv
        p = self.peering
        receive = p.receive
        now = time.monotonic()
        if self.handshakes is not None:         # until the broker's first frame
            try:
                frame = recv(_NOBLOCK)
            except zmq.Again:
                return
            self.handshakes = None              # it answered: the handshake worked
            receive(frame, now)
            if p.need_reconnect is not None:
                return
        get = self.get
        for i in range(DRAIN_LIMIT):
            # The first reads ask ZMQ_EVENTS first: a subscriber woken for one frame ended each
            # wake-up on a raised zmq.Again, which costs more than the question (issue 20).
            if i < _ASK_FIRST and not get(_EVENTS) & _POLLIN:
                break
            try:
                frame = recv(_NOBLOCK)
            except zmq.Again:
                break
            receive(frame, now)
            if p.need_reconnect is not None:
                break

    def send_queued(self) -> None:
        """Send queued frames until the socket's high-water mark stops us; the publishes the
        peering queued meanwhile go as one batch once everything before them left."""
        p = self.peering
        box = p.outbox
        next_frame = p.next_frame
        send = self.send
        sent = False
        while True:
            frame = box[0] if box else next_frame()
            if frame is None:
                break
            try:
                send(frame, _NOBLOCK)
            except zmq.Again:
                # The refusal may be stale (see :meth:`send_or_queue`): asking ZMQ_EVENTS
                # brings ZeroMQ's count up to date; go on only if the socket has room.
                if not self.writable():
                    break
                continue
            box.popleft()
            sent = True
        if sent:
            self.peering.sent(time.monotonic())

    def send_or_queue(self, frame: bytes, recheck: bool = True) -> bool:
        """Send a PUBLISH frame now, or queue it in the peering when the socket has no room:
        True if it was sent.

        With ``recheck`` (a paced publisher: a loop of publishes gains more from the batch the
        queued frame joins), a refusal (``zmq.Again``) is checked once with ZMQ_EVENTS before
        the frame is queued:
        ZeroMQ counts a pipe's room from what its I/O thread last reported, and a send reads
        those reports at most about once a millisecond (libzmq's command throttle), so with
        a send high-water mark of a few frames, a paced publisher (10k msg/s) was refused on a
        pipe its I/O thread had long emptied: 40% of its messages were queued, and waited up to
        ``WRITABLE_LOOK`` for the next call to send them (issue 20). ZMQ_EVENTS reads the
        reports; a socket that really is busy stays refused, and the frame is queued."""
        try:
            self.send(frame, _NOBLOCK)
            return True
        except zmq.Again:
            pass
        if recheck and self.writable():
            try:
                self.send(frame, _NOBLOCK)
                return True
            except zmq.Again:
                pass
        self.peering.queue_publish(frame)
        return False

    def writable(self) -> bool:
        """Would the socket take a frame now? (Cheaper than a send refused with an exception.)"""
        return bool(self.get(_EVENTS) & _POLLOUT)

    def readable(self) -> bool:
        """Anything to read (a frame or a monitor event)? Cheap: two getsockopt calls."""
        return bool((self.get(_EVENTS) | self.mon_get(_EVENTS)) & _POLLIN)

    def serviced(self, now: float) -> None:
        """:meth:`service` ran at ``now``: the blocking client may read without it until
        :data:`SERVICE_SPACING` later, or the peering's next timer if sooner."""
        self.service_due = min(now + SERVICE_SPACING, self.peering.next_timer(now))

    def recv_within(self, ms: int):
        """The blocking client's wait for frames (a plain socket only): the next frame, read
        blocking for up to ``ms`` milliseconds, or None. ZeroMQ's own blocking read, as a raw
        reader's: no poll, no ZMQ_EVENTS (see :data:`SERVICE_SPACING`)."""
        if ms != self._rcvtimeo:
            _backend_set(self.sock, _RCVTIMEO, ms)
            self._rcvtimeo = ms
        try:
            return self.recv(0)
        except zmq.Again:
            return None

    def arm(self):
        """The poller, watching for writability too while frames wait for the socket."""
        raw = self._owned[0]
        self.poller.register(raw, _POLLIN | (_POLLOUT if self.peering.waiting else 0))
        return self.poller


def send_within(sock, frame, timeout: float) -> bool:
    """Send ``frame`` on ``sock``, waiting up to ``timeout`` seconds for the socket to take it;
    False if it did not. (A DEALER whose connection failed its handshake for good has no pipe,
    and a plain send on it never returns: see :class:`OneRequest`.)"""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.send(frame, zmq.NOBLOCK)
            return True
        except zmq.Again:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.poll(int(left * 1000) + 1, zmq.POLLOUT)


async def asend_within(sock, frame, timeout: float) -> bool:
    """:func:`send_within` for a ``zmq.asyncio`` socket: False if it did not take ``frame``
    within ``timeout`` seconds (the send is cancelled, and nothing of it is left queued)."""
    import asyncio
    try:
        await asyncio.wait_for(sock.send(frame), timeout)
        return True
    except asyncio.TimeoutError:
        return False


def request_once(endpoint: str, cmd, answer, *, timeout: float, context=None, curve=None):
    """Send one command that needs no ATTACH on a socket of its own and return the broker's
    answer of type ``answer``: LIST-STREAMS, LIMITS and the stream administration commands.

    Raises :class:`ValueError` for a malformed endpoint, :class:`ZepsTimeout` when no broker
    answers within ``timeout`` seconds, :class:`HandshakeFailed` when one answers but the
    security handshake fails (:class:`HandshakeWatch`), :class:`NoStream` /
    :class:`InvalidError` when it refuses, :class:`ZepsError` for an answer that does not decode.
    ``REASONS-SELECT`` goes first: a refusal comes as ERROR (code and fields) from a broker that
    offers it, else as INVALID."""
    with OneRequest(endpoint, context=context, curve=curve) as r:
        return r.ask(cmd, answer, timeout=timeout)


class OneRequest:
    """The DEALER socket (and its monitor) of :func:`request_once`, connected to ``endpoint``.

    Nothing is sent blocking: once a handshake has failed for good (a plaintext client at a
    CurveZMQ broker, say), ZeroMQ drops the connection's pipe, and a DEALER without a pipe
    blocks a send for ever; :meth:`ask` sends only what the socket takes, and its wait (for
    the socket to take the rest, for an answer, for the monitor's word) ends at its deadline."""

    def __init__(self, endpoint: str, *, context=None, curve=None):
        check_endpoint(endpoint)
        z, ctx = zmq_for(context)
        self.endpoint = endpoint
        self.sock = sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(sock)
        self.mon = sock.get_monitor_socket(_HANDSHAKE_FAILED)
        self.watch = HandshakeWatch(endpoint, curve)
        self.poller = z.Poller()
        self.poller.register(self.mon, zmq.POLLIN)
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as e:
            self.close()
            raise ValueError(f"bad endpoint {endpoint!r}: {e}") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.sock.disable_monitor()
        self.mon.close(0)
        self.sock.close(0)

    def ask(self, cmd, answer, *, timeout: float):
        """``cmd``'s answer of type ``answer`` (see :func:`request_once`)."""
        from zeps.protocol import ProtocolError, decode, encode
        from zeps.protocol import commands as c
        from zeps.protocol.reasons import Reason

        from .errors import ZepsError, ZepsTimeout, invalid_error

        sock, mon, poller, endpoint = self.sock, self.mon, self.poller, self.endpoint
        pending = [encode(c.ReasonsSelect()), encode(cmd)]
        selected = False                  # the first answer is REASONS-SELECT's (OK or INVALID)
        deadline = time.monotonic() + timeout
        while True:
            while pending:
                try:
                    sock.send(pending[0], zmq.NOBLOCK)
                except zmq.Again:
                    break
                del pending[0]
            poller.register(sock, zmq.POLLIN | (zmq.POLLOUT if pending else 0))
            left = deadline - time.monotonic()
            if left <= 0:
                raise ZepsTimeout(f"no answer from a ZEPS broker at {endpoint} within "
                                  f"{timeout:g}s (is it running?)")
            ready = dict(poller.poll(int(left * 1000) + 1))
            if mon in ready:
                parts = mon.recv_multipart()
                if len(parts[0]) >= 6:
                    error = self.watch.event(*_MON_EVENT.unpack_from(parts[0], 0))
                    if error is not None:
                        raise error
            if not ready.get(sock, 0) & zmq.POLLIN:
                continue
            try:
                reply = decode(sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                continue
            except ProtocolError as e:
                raise ZepsError(f"bad answer from {endpoint}: {e}") from None
            if not selected:
                selected = isinstance(reply, (c.ReasonsSelectOk, c.Invalid, c.Error))
                continue
            if isinstance(reply, (c.Invalid, c.Error)):
                raise invalid_error(Reason.received(reply), cmd.NAME)
            if isinstance(reply, answer):
                return reply
