"""The blocking ZEPS client: :class:`Client`.

A :class:`Client` is one ZeroMQ DEALER socket attached to **one** stream of a ZEPS broker (one
peering = one stream). It publishes, subscribes (through a :class:`~zeps.clients.Subscription`),
asks for stream information, and survives broker restarts::

    from zeps.clients import Client

    with Client("tcp://127.0.0.1:7470", "orders", confirms=True) as c:
        c.publish("eu.fr", b"hello")
        last = c.wait_for_confirms()        # durable up to sequence `last`

    with Client("tcp://127.0.0.1:7470", "orders") as c:
        for msg in c.subscribe("eu."):        # history first, then live, seamlessly
            print(msg.sequence, msg.key, msg.body)

How it works (what you can rely on)
-----------------------------------

* **No background thread.** All socket I/O happens inside your calls (``publish``,
  ``Subscription.next`` / iteration, ``wait_for_confirms``, ...). While a call is blocked the
  client answers to the broker, sends heartbeats and reconnects. If your program does not call
  the client for longer than the broker's expiry (60 s by default) the broker forgets the
  peering; the client notices it at the next call and re-attaches transparently (a ``publish``
  after ``heartbeat`` seconds of silence first checks, with one round trip, that the broker
  still knows the client, so that publish is not lost).
* **Plain or gevent.** In a plain program it uses blocking ``zmq`` with polling and timeouts.
  If gevent has monkey-patched ``socket``, or you pass ``context=zmq.green.Context()``, it uses
  ``zmq.green`` so that waiting yields to other greenlets. A client must be used by one thread
  or greenlet at a time (one client per thread or greenlet): a call made while another thread
  or greenlet is inside a call on the same client raises :class:`ConcurrentUseError` naming
  both. For asyncio, see :class:`~zeps.clients.AsyncClient` (same semantics, same errors).
* **Publishing never drops silently.** When ZeroMQ's high-water mark is reached ``publish``
  blocks (up to ``timeout`` seconds, then :class:`ZepsTimeout`, and that message was not
  accepted). An ``INVALID`` the broker sends back for a publish (message over the broker's
  ``--max-message``, disk full, ...) is raised as :class:`InvalidError` by the next call on the
  client once it has arrived (``publish``, ``wait_for_confirms``, ``flush``, ``close``, ...);
  the call that raises it did not perform its own operation. (While publishing flat out the
  client looks at its socket every 2 ms, so a few more publishes may go out before it shows;
  ``flush()``, ``wait_for_confirms()`` and ``close()`` always see it.)
* **Confirms** (``confirms=True``): ``wait_for_confirms()`` blocks until every message published
  so far is durable under the broker's fsync policy and returns the sequence of the last one;
  the :class:`~zeps.clients.Receipt` that ``publish`` returns resolves to its message's sequence
  when the CONFIRM covering it arrives (``receipt.result(timeout)``; see
  :mod:`zeps.clients.receipt`).
  Messages not yet confirmed when the peering is lost are **re-sent** after the reconnect:
  delivery is *at-least-once* (a message that became durable just before a crash, but whose
  CONFIRM was lost, is stored twice, under two sequences). Without confirms, a publish is
  *at-most-once* across a broker crash: messages in flight when the broker dies may be lost.
* **Subscriptions and credit.** The client grants the broker ``credit_window`` bytes of
  deliveries and tops the credit up as *your application* consumes messages (when half of the
  window was consumed). A slow application therefore makes the broker switch this client to
  journal replay instead of queueing; you never see the switch: sequences strictly increase,
  without gaps (except for messages your patterns do not match) and without duplicates (the
  client drops any sequence not above the last one it handed to you, defensively).
  ``credit_window`` must be at least as large as the largest message's cost
  (``8 + len(key) + 1 + len(body)``), otherwise that message is never delivered; the default
  (8 MiB) is well above the broker's default ``--max-message`` (1 MiB).
* **Reconnect.** A lost peering is detected by (1) a ZeroMQ socket-monitor ``DISCONNECTED``
  event (a broker that dies closes the TCP connection: detection is immediate), (2) an
  ``INVALID`` whose reason says the broker does not know this client (it starts with
  :data:`zeps.protocol.reasons.NOT_ATTACHED`, e.g. after expiry or when ZeroMQ reconnected the
  socket to a restarted broker) or a ``DETACH`` sent by the broker, and (3) a
  heartbeat: when the peering has been silent for ``heartbeat`` seconds the client sends
  ``STREAM-INFO`` (valid only while attached, unlike ``PING`` which a broker answers even to a
  stranger) and declares the peering lost when no answer comes within
  ``max(heartbeat, timeout)`` seconds; ZeroMQ's own ZMTP heartbeats are enabled too. On a lost
  peering the client opens a fresh socket, re-ATTACHes, re-sends CONFIRM-SELECT, resubscribes
  every pattern from the last sequence it handed to the application, re-grants the credit
  window, and re-sends unconfirmed publishes. Messages received but not yet handed to the
  application are discarded and fetched again from the journal.

The protocol logic lives in the pure :class:`~zeps.clients.peering.Peering`; this module is its
blocking front end over a :class:`~zeps.clients.transport.Connection`.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Iterable, Optional, Tuple, Union

import zmq

from ..protocol import commands as c
from ..protocol.codec import ProtocolError, encode, encode_publish
from ..units import DEFAULT_ENDPOINT, TimeLike, to_timestamp_ns
from .errors import ConcurrentUseError, ZepsError, ZepsTimeout
from .message import StreamInfo
from .peering import CLOSED, CONNECTING, Peering, list_streams_answer
from .receipt import Receipt, done_receipt
from .subscription import Subscription, subscribe_args
from .transport import Connection, check_endpoint, zmq_for

__all__ = ["Client", "list_streams", "check_endpoint", "to_timestamp_ns", "DEFAULT_ENDPOINT",
           "DEFAULT_CREDIT_WINDOW", "DEFAULT_HEARTBEAT"]

log = logging.getLogger("zeps.client")

#: Default credit window: 8 MiB of deliveries in flight.
DEFAULT_CREDIT_WINDOW = 8 << 20
#: Default idle time (s) after which the client checks the peering: the broker's default
#: expiry (60 s) divided by 3, as docs/protocol.md asks.
DEFAULT_HEARTBEAT = 20.0

_NOBLOCK = int(zmq.NOBLOCK)
#: While publishing flat out, look at what came back (CONFIRM, INVALID, monitor events) at most
#: this often (s): two getsockopt calls cost more than the send itself.
_LOOK_INTERVAL = 0.002
_monotonic = time.monotonic
_get_ident = threading.get_ident
_DONE = done_receipt(Receipt)


def publish_frame(key: str, body) -> bytes:
    """The PUBLISH frame of ``(key, body)``: TypeError / ValueError for what cannot be sent."""
    if type(body) is not bytes:
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    if type(key) is not str and not isinstance(key, str):
        raise TypeError(f"key must be str, not {type(key).__name__}")
    try:
        return encode_publish(key, body)
    except ProtocolError as e:
        raise ValueError(str(e)) from None


def _thread_name(ident) -> str:
    for t in threading.enumerate():
        if t.ident == ident:
            return f"thread {t.name!r}"
    return f"thread {ident}"


def _guarded(method):
    """One caller at a time: a second thread (or greenlet) calling while one is inside gets
    :class:`ConcurrentUseError` (see :meth:`Client._concurrent`) instead of corrupting the
    client's state or its ZeroMQ socket, which is not thread-safe."""
    name = method.__name__

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if not self._guard.acquire(False):
            self._concurrent(name)
        try:
            return method(self, *args, **kwargs)
        finally:
            self._guard.release()
    return call


class Client:
    """A peering with a ZEPS broker, attached to one stream.

    Args:
        endpoint: the broker's ZeroMQ endpoint, e.g. ``"tcp://127.0.0.1:7470"``.
            A malformed endpoint raises :class:`ValueError` naming it.
        stream: the stream to attach (1..255 bytes of UTF-8).
        credit_window: bytes of deliveries the broker may send ahead of the application
            (default 8 MiB). Must be at least the cost of the largest message.
        confirms: turn publisher confirms on (``CONFIRM-SELECT``): enables
            :meth:`wait_for_confirms`, receipts that resolve to sequences, and re-sending of
            unconfirmed publishes after a reconnect (at-least-once).
        timeout: seconds to wait for the broker in blocking operations (attach, requests, a
            publish blocked by the high-water mark, ``wait_for_confirms`` without its own
            timeout). Raises :class:`ZepsTimeout` when exceeded.
        heartbeat: seconds of silence after which the client checks the peering (see the
            module documentation). Keep it below a third of the broker's ``--expiry``.
        timestamps: ask the broker for DELIVER-TS (a ZEPS extension, docs/protocol.md) so that
            every :class:`Message` carries the time the broker journalled it (default True;
            False for a broker that only speaks the 12 commands of ZEPS/1).
        context: a ``zmq.Context`` to use; a ``zmq.green.Context`` makes the client
            gevent-cooperative. Default: the process-wide context (a private green one when
            gevent has patched ``socket``).

    The constructor connects and ATTACHes; it raises :class:`InvalidError` if the broker
    refuses the stream and :class:`ZepsTimeout` if no broker answers within ``timeout``.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, endpoint: str, stream: str, *, credit_window: int = DEFAULT_CREDIT_WINDOW,
                 confirms: bool = False, timeout: float = 10.0,
                 heartbeat: float = DEFAULT_HEARTBEAT, timestamps: bool = True, context=None):
        self.endpoint = check_endpoint(endpoint)
        now = _monotonic()
        self._p = p = Peering(stream, credit_window=credit_window, confirms=confirms,
                              timestamps=timestamps, timeout=timeout, heartbeat=heartbeat,
                              now=now, endpoint=self.endpoint)
        self.stream = stream
        self.credit_window = credit_window
        self.confirms = p.confirms
        self.timestamps = p.timestamps
        self.timeout = float(timeout)
        self.heartbeat = p.heartbeat
        module, ctx = zmq_for(context)
        self.green = module is not zmq
        self._guard = threading.Lock()
        self._owner = None
        self._next_look = 0.0
        self._subscription: Optional[Subscription] = None
        self._conn = conn = Connection(p, self.endpoint, module, ctx)
        conn.open()
        try:
            conn.flush()
            ok = self._pump(now + self.timeout, lambda: p.ready or p.fatal is not None
                            or p.attach_error is not None)
            if p.attach_error is not None:
                raise p.attach_error
            if p.fatal is not None:
                raise p.fatal
            if not ok:
                raise ZepsTimeout(f"no answer from a ZEPS broker at {self.endpoint} within "
                                  f"{self.timeout:g}s (is it running?)")
        except BaseException:
            conn.close()
            p.close()
            raise

    # ------------------------------------------------------------------ state

    @property
    def attached(self) -> bool:
        """True while the peering is attached (False while reconnecting or after close)."""
        return self._p.attached

    @property
    def closed(self) -> bool:
        return self._p.state is CLOSED

    @property
    def reconnects(self) -> int:
        """How many times the peering was re-established after being lost."""
        return self._p.reconnects

    @property
    def last_confirmed(self) -> int:
        """Sequence of the last message confirmed durable (0 if none yet)."""
        return self._p.last_confirmed

    @property
    def unconfirmed(self) -> int:
        """How many publishes are not yet confirmed (always 0 without confirms)."""
        return len(self._p.pending)

    # ------------------------------------------------------------------ publishing

    def publish(self, key: str, body: Union[bytes, bytearray, memoryview, str]) -> Receipt:
        """Publish one message with routing ``key`` (text, at most 255 UTF-8 bytes) and ``body``
        (bytes; a ``str`` is encoded as UTF-8); return its :class:`~zeps.clients.Receipt`.

        Asynchronous: returns once ZeroMQ has taken the message. Blocks while the socket is at
        its high-water mark or the client is reconnecting, up to ``timeout`` seconds, then
        raises :class:`ZepsTimeout` (the message was not accepted). Raises :class:`InvalidError`
        if the broker rejected an earlier publish (this message is then not sent). With
        confirms, ``receipt.result(timeout)`` waits for this message's CONFIRM and returns its
        sequence; without, the receipt is already done (sequence unknown).
        """
        frame = publish_frame(key, body)
        if not self._guard.acquire(False):         # _guarded, inlined on the hot path
            self._concurrent("publish")
        try:
            p = self._p
            now = _monotonic()
            r = Receipt(frame, self) if p.confirms else _DONE
            if not p.publish(frame, now, r):
                now = self._prepare_publish(now)
                p.publish(frame, now, r, False)
            conn = self._conn
            try:
                conn.send(frame, _NOBLOCK)
            except zmq.Again:
                p.unsent(frame)
            if now >= self._next_look:
                self._next_look = now + _LOOK_INTERVAL
                if conn.readable():
                    conn.service()
            return r
        finally:
            self._guard.release()

    def publish_batch(self, messages: Iterable[Tuple[str, Union[bytes, str]]]) -> int:
        """Publish every ``(key, body)`` of ``messages`` in order; returns how many.

        Same guarantees as :meth:`publish` for each message (if it raises, the messages before
        the failing one were accepted, the rest were not).
        """
        n = 0
        publish = self.publish
        for key, body in messages:
            publish(key, body)
            n += 1
        return n

    def _prepare_publish(self, now: float) -> float:
        """Wait until a publish may go straight out (and return the time then), or raise why it
        may not."""
        p = self._p
        p.check()
        deadline = now + self.timeout
        silent = p.silent(now)
        self._conn.service()            # (may itself send the heartbeat probe)
        p.check()
        if silent:
            probe = p.heartbeat_probe(now)
            if probe is not None:
                self._pump(deadline, lambda: probe.done or p.need_reconnect is not None
                           or not p.attached)
        ok = self._pump(deadline, lambda: (p.attached and not p.outbox and p.need_reconnect is None)
                        or p.error is not None or p.fatal is not None)
        p.check()
        if not ok:
            what = "reconnecting to" if not p.attached else "blocked sending to"
            raise ZepsTimeout(f"publish: still {what} {self.endpoint} after {self.timeout:g}s")
        return _monotonic()

    @_guarded
    def flush(self, timeout: Optional[float] = None) -> None:
        """Block until the broker has processed every publish sent so far (journalled, handed to
        the OS, not necessarily fsynced). Raises :class:`InvalidError` if one was rejected."""
        self._request(c.Ping(), "ping", timeout)
        self._p.check()

    @_guarded
    def wait_for_confirms(self, timeout: Optional[float] = None) -> int:
        """Block until every message published so far is confirmed durable; return the sequence
        of the last confirmed message (0 if nothing was ever confirmed).

        ``timeout`` defaults to the client's timeout; :class:`ZepsTimeout` when exceeded.
        Raises :class:`InvalidError` if the broker rejected a publish (call again to wait for
        the rest). Needs ``Client(confirms=True)``.
        """
        if not self.confirms:
            raise ZepsError("wait_for_confirms() needs Client(..., confirms=True)")
        p = self._p
        p.check()
        t = self.timeout if timeout is None else timeout
        ok = self._pump(_monotonic() + t, lambda: (p.attached and not p.pending and p.confirm_ready)
                        or p.error is not None or p.fatal is not None)
        p.check()
        if not ok:
            raise ZepsTimeout(f"{len(p.pending)} published message(s) not confirmed within "
                              f"{t:g}s")
        return p.last_confirmed

    @_guarded
    def _wait_receipt(self, receipt: Receipt, timeout: Optional[float]) -> None:
        t = self.timeout if timeout is None else timeout
        self._pump(_monotonic() + t, receipt.done)
        if not receipt.done():
            raise receipt._timed_out(t)

    # ------------------------------------------------------------------ subscribing

    @_guarded
    def subscribe(self, pattern: Union[str, Iterable[str]] = "", *, from_seq: Optional[int] = None,
                  from_time: Optional[TimeLike] = None, live: bool = False,
                  timeout: Optional[float] = None) -> Subscription:
        """Subscribe to keys matching ``pattern`` and return the client's
        :class:`~zeps.clients.Subscription` (an iterator of :class:`Message`).

        ``pattern`` is a key prefix (``""`` = every key) or, starting with ``~``, a regular
        expression searched in the key; several patterns may be given as a list. Where it
        starts (at most one of):

        * default: from the first message the stream keeps;
        * ``from_seq=N``: from sequence N;
        * ``from_time=t``: from the first message journalled at or after ``t`` (``datetime``,
          ``int`` ns or ``float`` seconds since the epoch);
        * ``live=True``: only messages published from now on.

        ``timeout``: seconds each step of ``for msg in sub`` waits for a message before raising
        :class:`ZepsTimeout` (sets ``sub.timeout``; default: wait for ever).

        A client has one position: calling ``subscribe`` again adds patterns (a message is
        delivered once if any pattern matches) and returns the same Subscription; a later
        pattern applies from ``max(its start, the current position)`` -- it never rewinds.
        To read history behind the position, use another Client.

        Raises :class:`InvalidError` with the broker's reason (e.g. a regex that does not
        compile) and :class:`ZepsTimeout`.
        """
        patterns = subscribe_args(pattern, from_seq, from_time, live, timeout)
        p = self._p
        p.check()
        if from_seq is not None:
            latest = max(from_seq - 1, 0)
        elif from_time is not None:
            latest = max(self._seq_at(from_time, None) - 1, 0)
        else:
            latest = 0
        for one in patterns:
            self._subscribe_one(one, latest, live)
        p.start_delivery()
        self._conn.flush()
        if self._subscription is None:
            self._subscription = Subscription(self)
        if timeout is not None:
            self._subscription.timeout = timeout
        return self._subscription

    def _subscribe_one(self, pattern: str, latest: int, live: bool) -> None:
        p = self._p
        deadline = _monotonic() + self.timeout
        while True:
            self._wait_attached(deadline, "SUBSCRIBE")
            r = p.subscribe(pattern, latest, live, _monotonic())
            self._conn.flush()
            self._wait_request(r, deadline, self.timeout)
            if not r.cancelled:
                return

    def _next_batch(self, timeout: Optional[float]):
        """The next messages for the application (a non-empty list, see :meth:`Peering.take`),
        or None when ``timeout`` expires."""
        if not self._guard.acquire(False):         # _guarded, inlined on the hot path
            self._concurrent("Subscription.next")
        try:
            p = self._p
            if not p.buffer or p.error is not None:
                p.check()
                if not p.subscribed:
                    raise ZepsError("nothing subscribed: call Client.subscribe() first")
                self._pump(None if timeout is None else _monotonic() + timeout,
                           lambda: p.buffer or p.broken)
                p.check()
                if not p.buffer:
                    return None
            batch = p.take()
            if p.outbox:
                self._conn.flush()
            return batch
        finally:
            self._guard.release()

    # ------------------------------------------------------------------ requests

    @_guarded
    def info(self, timeout: Optional[float] = None) -> StreamInfo:
        """Ask the broker about the attached stream (``STREAM-INFO``)."""
        r = self._request(c.StreamInfo(), "info", timeout)
        return StreamInfo(r.first, r.last, r.size, r.oldest, r.newest, self.stream)

    @_guarded
    def seq_at(self, when: TimeLike, timeout: Optional[float] = None) -> int:
        """First sequence journalled at or after ``when`` (``datetime``, ``int`` ns, ``float``
        seconds); the stream's ``last + 1`` if no message is that recent (``SEQ-AT-TIME``)."""
        return self._seq_at(when, timeout)

    def _seq_at(self, when: TimeLike, timeout: Optional[float]) -> int:
        return self._request(c.SeqAtTime(to_timestamp_ns(when)), "seq_at", timeout).sequence

    @_guarded
    def list_streams(self, timeout: Optional[float] = None) -> Tuple[str, ...]:
        """Names of the streams the broker holds (``LIST-STREAMS``)."""
        return tuple(self._request(c.ListStreams(), "list", timeout).streams)

    def _request(self, cmd: c.Command, kind: str, timeout: Optional[float]):
        t = self.timeout if timeout is None else timeout
        deadline = _monotonic() + t
        while True:
            self._wait_attached(deadline, cmd.NAME)
            r = self._p.request(cmd, kind, _monotonic())
            self._conn.flush()
            self._wait_request(r, deadline, t)
            if not r.cancelled:         # else the peering was re-established meanwhile: again
                return r.result

    def _wait_request(self, r, deadline: float, t: float) -> None:
        p = self._p
        if not self._pump(deadline, lambda: r.done or p.fatal is not None):
            raise ZepsTimeout(f"no answer to {r.name} from {self.endpoint} within {t:g}s")
        if r.error is not None:
            raise r.error
        if not r.done:
            p.check()

    def _wait_attached(self, deadline: float, what: str) -> None:
        p = self._p
        p.check()
        ok = self._pump(deadline, lambda: (p.attached and p.need_reconnect is None)
                        or p.fatal is not None)
        p.check()
        if not ok:
            raise ZepsTimeout(f"{what}: not attached to {self.endpoint} within {self.timeout:g}s "
                              f"(reconnecting)")

    # ------------------------------------------------------------------ closing

    @_guarded
    def close(self, timeout: Optional[float] = None) -> None:
        """Detach and close the socket. Idempotent.

        While attached, sends any publish still queued, then ``DETACH`` and waits (up to
        ``timeout``, default the client's) for ``DETACH-OK`` -- so every publish made before
        ``close()`` has been processed by the broker when it returns. It does *not* wait for
        confirms: call :meth:`wait_for_confirms` first if you need durability (receipts still
        pending fail with :class:`ClientClosed`). Raises :class:`InvalidError` for a publish the
        broker rejected (after closing).
        """
        p = self._p
        if p.state is CLOSED:
            return
        t = self.timeout if timeout is None else timeout
        deadline = _monotonic() + t
        try:
            if p.state is CONNECTING and p.unsent_publishes():
                # Reconnecting with publishes not yet (re)sent: give them a chance to go out.
                self._pump(deadline, lambda: p.attached or p.fatal is not None)
                if not p.attached:
                    log.warning("zeps: closing while reconnecting to %s: %d publish(es) not "
                                "sent", self.endpoint, p.unsent_publishes())
            if p.attached and self._conn.sock is not None:
                r = p.detach(_monotonic())
                self._conn.flush()
                if not self._pump(deadline, lambda: r.done or not p.attached):
                    log.warning("zeps: no DETACH-OK from %s within %gs; closing anyway",
                                self.endpoint, t)
        finally:
            self._conn.close()
            p.close()
            if self._subscription is not None:
                self._subscription._ready.clear()
        err, p.error = p.error, None
        if err is not None:
            raise err

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            try:
                self.close(timeout=min(self.timeout, 1.0))
            except Exception:
                pass

    def __del__(self):
        conn = getattr(self, "_conn", None)
        if conn is not None and conn.sock is not None:
            try:
                conn.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        return (f"<zeps.Client {self.endpoint} stream={self.stream!r} state={self._p.state}"
                f"{' confirms' if self.confirms else ''}{' green' if self.green else ''}>")

    # ------------------------------------------------------------------ the I/O loop

    def _pump(self, deadline: Optional[float], cond) -> bool:
        """Do I/O until ``cond()`` is true (True) or ``deadline`` passes (False).

        Records the calling thread meanwhile: a second thread calling while this one waits is
        told who holds the client (calls that do not wait are too short to record it cheaply)."""
        conn, p = self._conn, self._p
        self._owner = _get_ident()
        try:
            while True:
                conn.service()
                if cond():
                    return True
                now = _monotonic()
                if deadline is not None and now >= deadline:
                    return False
                wait = 1.0 if deadline is None else deadline - now
                wait = max(min(wait, p.next_timer(now) - now), 0.0)
                if conn.poller is None:
                    self._sleep(wait)
                else:
                    conn.arm().poll(int(wait * 1000) + (1 if wait > 0 else 0))
        finally:
            self._owner = None

    def _sleep(self, seconds: float) -> None:
        if self.green:
            import gevent
            gevent.sleep(seconds)
        else:
            time.sleep(seconds)

    def _concurrent(self, call: str):
        """Raise the error for a call made while another caller is inside the client."""
        owner = self._owner
        me = threading.current_thread()
        if owner is None:
            other = "another thread"
        elif owner == me.ident:
            other = f"another greenlet of thread {me.name!r}"
        else:
            other = _thread_name(owner)
        raise ConcurrentUseError(
            f"Client used by two threads at once: thread {me.name!r} called {call}() while "
            f"{other} is inside a call on it (stream {self.stream!r}). Use one Client per "
            f"thread (or greenlet).")


def list_streams(endpoint: str = DEFAULT_ENDPOINT, *, timeout: float = 10.0,
                 context=None) -> Tuple[str, ...]:
    """Names of the streams a broker holds (``LIST-STREAMS``, which needs no ATTACH).

    Raises :class:`ValueError` for a malformed endpoint, :class:`ZepsTimeout` when no broker
    answers within ``timeout`` seconds, :class:`InvalidError` if the broker refuses.
    """
    check_endpoint(endpoint)
    z, ctx = zmq_for(context)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as e:
            raise ValueError(f"bad endpoint {endpoint!r}: {e}") from None
        sock.send(encode(c.ListStreams()))
        poller = z.Poller()
        poller.register(sock, zmq.POLLIN)
        deadline = _monotonic() + timeout
        while True:
            left = deadline - _monotonic()
            if left <= 0:
                raise ZepsTimeout(f"no answer from a ZEPS broker at {endpoint} within "
                                  f"{timeout:g}s (is it running?)")
            if not poller.poll(int(left * 1000) + 1):
                continue
            try:
                names = list_streams_answer(sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                continue
            except ProtocolError as e:
                raise ZepsError(f"bad answer from {endpoint}: {e}") from None
            if names is not None:
                return names
    finally:
        sock.close(0)
