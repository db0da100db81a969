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
  or greenlet at a time; use one client per greenlet.
* **Publishing never drops silently.** When ZeroMQ's high-water mark is reached ``publish``
  blocks (up to ``timeout`` seconds, then :class:`ZepsTimeout`, and that message was not
  accepted). An ``INVALID`` the broker sends back for a publish (message over the broker's
  ``--max-message``, disk full, ...) is raised as :class:`InvalidError` by the next call on the
  client once it has arrived (``publish``, ``wait_for_confirms``, ``flush``, ``close``, ...);
  the call that raises it did not perform its own operation. (While publishing flat out the
  client looks at its socket every 2 ms, so a few more publishes may go out before it shows;
  ``flush()``, ``wait_for_confirms()`` and ``close()`` always see it.)
* **Confirms** (``confirms=True``): ``wait_for_confirms()`` blocks until every message published
  so far is durable under the broker's fsync policy and returns the sequence of the last one.
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
  ``INVALID`` whose reason says the broker does not know this client (``not attached: ...``,
  e.g. after expiry or when ZeroMQ reconnected the socket to a restarted broker), and (3) a
  heartbeat: when the peering has been silent for ``heartbeat`` seconds the client sends
  ``STREAM-INFO`` (valid only while attached, unlike ``PING`` which a broker answers even to a
  stranger) and declares the peering lost when no answer comes within
  ``max(heartbeat, timeout)`` seconds; ZeroMQ's own ZMTP heartbeats are enabled too. On a lost
  peering the client opens a fresh socket, re-ATTACHes, re-sends CONFIRM-SELECT, resubscribes
  every pattern from the last sequence it handed to the application, re-grants the credit
  window, and re-sends unconfirmed publishes. Messages received but not yet handed to the
  application are discarded and fetched again from the journal.
"""
from __future__ import annotations

import logging
import re
import struct
import sys
import time
from collections import deque
from typing import Iterable, Optional, Tuple, Union

import zmq

from ..protocol import commands as c
from ..protocol.codec import ProtocolError, decode, encode, encode_publish
from ..units import DEFAULT_ENDPOINT, TimeLike, to_timestamp_ns
from .errors import ClientClosed, ConnectionLost, InvalidError, ZepsError, ZepsTimeout
from .message import Message, StreamInfo

__all__ = ["Client", "list_streams", "check_endpoint", "to_timestamp_ns", "DEFAULT_ENDPOINT",
           "DEFAULT_CREDIT_WINDOW"]

log = logging.getLogger("zeps.client")

#: Where the broker listens by default.
#: Default credit window: 8 MiB of deliveries in flight.
DEFAULT_CREDIT_WINDOW = 8 << 20
#: Default idle time (s) after which the client checks the peering: the broker's default
#: expiry (60 s) divided by 3, as docs/protocol.md asks.
DEFAULT_HEARTBEAT = 20.0


_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_LOOK_INTERVAL = 0.002
_MON_EVENT = struct.Struct("=H")       # first 2 bytes of a socket-monitor event frame
_ENDPOINT_RE = re.compile(r"^(tcp|ipc|inproc|ws|wss|pgm|epgm|norm|vmci|tipc|udp)://(.+)$")

_CONNECTING, _ATTACHED, _FAILED, _CLOSED = "connecting", "attached", "failed", "closed"

# Reply command -> the request kinds it may answer.
_REPLY_KINDS = {
    c.AttachOk: ("attach",),
    c.SubscribeOk: ("subscribe", "resubscribe"),
    c.SeqAtTimeOk: ("seq_at",),
    c.StreamInfoOk: ("info", "probe"),
    c.ConfirmSelectOk: ("confirm_select",),
    c.DetachOk: ("detach",),
    c.PingOk: ("barrier", "ping"),
    c.ListStreamsOk: ("list",),
}


# --------------------------------------------------------------------------- helpers

def check_endpoint(endpoint) -> str:
    """Return ``endpoint`` if it looks like a ZeroMQ endpoint, else raise :class:`ValueError`
    naming it (``tcp://host:port``, ``ipc://path``, ``inproc://name``, ...)."""
    if not isinstance(endpoint, str):
        raise ValueError(f"bad endpoint {endpoint!r}: must be a string like tcp://127.0.0.1:7470")
    m = _ENDPOINT_RE.match(endpoint)
    if not m:
        raise ValueError(f"bad endpoint {endpoint!r}: expected transport://address, "
                         f"e.g. tcp://127.0.0.1:7470")
    if m.group(1) in ("tcp", "ws", "wss"):
        addr = m.group(2).split("/", 1)[0].rsplit(";", 1)[-1]
        host, sep, port = addr.rpartition(":")
        if not sep or not host or host == "*" or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad endpoint {endpoint!r}: {m.group(1)} endpoints need host:port "
                             f"with a port from 1 to 65535")
    return endpoint


_green_context = None


def _zmq_for(context):
    """Pick (zmq module, context) for a client: zmq.green when gevent is in charge."""
    global _green_context
    green = False
    if context is not None:
        zg = sys.modules.get("zmq.green")
        green = zg is not None and isinstance(context, zg.Context)
    else:
        monkey = sys.modules.get("gevent.monkey")
        green = bool(monkey is not None and monkey.is_module_patched("socket"))
    if not green:
        return zmq, (context if context is not None else zmq.Context.instance())
    import zmq.green as zgreen
    if context is None:
        # zmq.green.Context.instance() may return the plain singleton if it exists: keep our own.
        if _green_context is None or _green_context.closed:
            _green_context = zgreen.Context()
        context = _green_context
    return zgreen, context


class _Entry:
    """One request waiting for its reply (replies come back in request order)."""

    __slots__ = ("kind", "name", "done", "cancelled", "result", "error", "sent_at")

    def __init__(self, kind: str, name: str, now: float):
        self.kind = kind
        self.name = name
        self.done = False
        self.cancelled = False
        self.result = None
        self.error: Optional[Exception] = None
        self.sent_at = now


#: Reason prefixes of the broker's INVALIDs (zeps/broker/session.py).
_PUBLISH_REJECTED = "PUBLISH rejected"


def _not_attached(reason: str) -> bool:
    r = reason.lower()
    return r.startswith("not attached") or " before attach" in r


# --------------------------------------------------------------------------- the client

_DELIVER_TIMESTAMPS = encode(c.DeliverTimestamps())

class Client:
    """A peering with a ZEPS broker, attached to one stream.

    Args:
        endpoint: the broker's ZeroMQ endpoint, e.g. ``"tcp://127.0.0.1:7470"``.
            A malformed endpoint raises :class:`ValueError` naming it.
        stream: the stream to attach (1..255 bytes of UTF-8).
        credit_window: bytes of deliveries the broker may send ahead of the application
            (default 8 MiB). Must be at least the cost of the largest message.
        confirms: turn publisher confirms on (``CONFIRM-SELECT``): enables
            :meth:`wait_for_confirms` and re-sending of unconfirmed publishes after a
            reconnect (at-least-once).
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
        if not isinstance(stream, str) or not stream:
            raise ValueError("stream must be a non-empty string")
        if len(stream.encode("utf-8")) > 255:
            raise ValueError("stream name longer than 255 bytes")
        if "\x00" in stream:
            raise ValueError("stream name must not contain NUL")
        if not isinstance(credit_window, int) or credit_window < 1:
            raise ValueError("credit_window must be a positive number of bytes")
        if timeout is None or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        if heartbeat is None or heartbeat <= 0:
            raise ValueError("heartbeat must be a positive number of seconds")
        self.stream = stream
        self.credit_window = credit_window
        self.confirms = bool(confirms)
        self.timestamps = bool(timestamps)
        self.timeout = float(timeout)
        self.heartbeat = float(heartbeat)
        self._probe_timeout = max(self.heartbeat, self.timeout)
        self._zmq, self._ctx = _zmq_for(context)
        self.green = self._zmq is not zmq
        #: How many times the peering was re-established after being lost.
        self.reconnects = 0

        self._sock = None
        self._mon = None
        self._poller = None
        self._state = _CONNECTING
        self._closing = False
        self._connected = False
        self._need_reconnect: Optional[str] = None
        self._reconnect_at = 0.0
        self._connecting_since = 0.0
        self._outstanding: deque[_Entry] = deque()
        self._pubs_since_entry = 0
        self._outbox: deque[Tuple[bytes, bool]] = deque()
        self._error: Optional[Exception] = None     # one-shot: raised by the next call
        self._fatal: Optional[Exception] = None     # permanent
        self._probe: Optional[_Entry] = None
        self._next_look = 0.0
        now = time.monotonic()
        self._last_send = now
        self._last_recv = now
        # confirms
        self._pending: deque[bytes] = deque()
        self._peer_confirmed = 0
        self._last_confirmed = 0
        self._confirm_ready = not self.confirms
        # subscription
        self._patterns: dict[str, int] = {}
        self._subscribed = False
        self._buffer: deque[Tuple[Message, int]] = deque()
        self._last_handed = 0
        self._last_received = 0
        self._consumed = 0
        self._topup = max(1, credit_window // 2)
        self._subscription = None

        self._open_socket()
        deadline = time.monotonic() + self.timeout
        try:
            ok = self._pump(deadline, lambda: (self._state is _ATTACHED and self._confirm_ready)
                            or self._fatal is not None or self._attach_error is not None)
            if self._attach_error is not None:
                raise self._attach_error
            if self._fatal is not None:
                raise self._fatal
            if not ok:
                raise ZepsTimeout(f"no answer from a ZEPS broker at {self.endpoint} within "
                                  f"{self.timeout:g}s (is it running?)")
        except BaseException:
            self._close_socket()
            self._state = _CLOSED
            raise

    # ------------------------------------------------------------------ public API

    @property
    def attached(self) -> bool:
        """True while the peering is attached (False while reconnecting or after close)."""
        return self._state is _ATTACHED

    @property
    def closed(self) -> bool:
        return self._state is _CLOSED

    @property
    def last_confirmed(self) -> int:
        """Sequence of the last message confirmed durable (0 if none yet)."""
        return self._last_confirmed

    @property
    def unconfirmed(self) -> int:
        """How many publishes are not yet confirmed (always 0 without confirms)."""
        return len(self._pending)

    def publish(self, key: str, body: Union[bytes, bytearray, memoryview, str]) -> None:
        """Publish one message with routing ``key`` (text, at most 255 UTF-8 bytes) and ``body``
        (bytes; a ``str`` is encoded as UTF-8).

        Asynchronous: returns once ZeroMQ has taken the message. Blocks while the socket is at
        its high-water mark or the client is reconnecting, up to ``timeout`` seconds, then
        raises :class:`ZepsTimeout` (the message was not accepted). Raises :class:`InvalidError`
        if the broker rejected an earlier publish (this message is then not sent).
        """
        self._send_publish(self._frame(key, body))

    def publish_batch(self, messages: Iterable[Tuple[str, Union[bytes, str]]]) -> int:
        """Publish every ``(key, body)`` of ``messages`` in order; returns how many.

        Same guarantees as :meth:`publish` for each message (if it raises, the messages before
        the failing one were accepted, the rest were not).
        """
        n = 0
        frame_of = self._frame
        send = self._send_publish
        for key, body in messages:
            send(frame_of(key, body))
            n += 1
        return n

    def flush(self, timeout: Optional[float] = None) -> None:
        """Block until the broker has processed every publish sent so far (journalled, handed to
        the OS, not necessarily fsynced). Raises :class:`InvalidError` if one was rejected."""
        self._request(c.Ping(), "ping", timeout)
        self._check_usable()

    def wait_for_confirms(self, timeout: Optional[float] = None) -> int:
        """Block until every message published so far is confirmed durable; return the sequence
        of the last confirmed message (0 if nothing was ever confirmed).

        ``timeout`` defaults to the client's timeout; :class:`ZepsTimeout` when exceeded.
        Raises :class:`InvalidError` if the broker rejected a publish (call again to wait for
        the rest). Needs ``Client(confirms=True)``.
        """
        if not self.confirms:
            raise ZepsError("wait_for_confirms() needs Client(..., confirms=True)")
        self._check_usable()
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        ok = self._pump(deadline, lambda: (self._state is _ATTACHED and not self._pending
                                           and self._confirm_ready)
                        or self._error is not None or self._fatal is not None)
        self._check_usable()
        if not ok:
            raise ZepsTimeout(f"{len(self._pending)} published message(s) not confirmed within "
                              f"{t:g}s")
        return self._last_confirmed

    def subscribe(self, pattern: Union[str, Iterable[str]] = "", *, from_seq: Optional[int] = None,
                  from_time: Optional[TimeLike] = None, live: bool = False):
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

        A client has one position: calling ``subscribe`` again adds patterns (a message is
        delivered once if any pattern matches) and returns the same Subscription; a later
        pattern applies from ``max(its start, the current position)`` -- it never rewinds.
        To read history behind the position, use another Client.

        Raises :class:`InvalidError` with the broker's reason (e.g. a regex that does not
        compile) and :class:`ZepsTimeout`.
        """
        from .subscription import Subscription

        chosen = [x for x in (from_seq is not None, from_time is not None, bool(live)) if x]
        if len(chosen) > 1:
            raise ValueError("give at most one of from_seq, from_time, live")
        patterns = [pattern] if isinstance(pattern, str) else list(pattern)
        if not patterns:
            raise ValueError("no pattern given")
        for p in patterns:
            if not isinstance(p, str):
                raise TypeError(f"pattern must be str, not {type(p).__name__}")
            if len(p.encode("utf-8")) > 255:
                raise ValueError(f"pattern longer than 255 bytes: {p[:40]!r}...")
        self._check_usable()
        if from_seq is not None:
            if isinstance(from_seq, bool) or not isinstance(from_seq, int) or from_seq < 0:
                raise ValueError("from_seq must be an integer >= 0")
            latest = max(from_seq - 1, 0)
        elif from_time is not None:
            latest = max(self.seq_at(from_time) - 1, 0)
        else:
            latest = 0
        for p in patterns:
            stored = self._subscribe_one(p, latest, live)
            old = self._patterns.get(p)
            self._patterns[p] = stored if old is None else min(old, stored)
        if not self._subscribed:
            # Credit only once every pattern of this call is in place: with credit the broker
            # starts delivering, moving the position past what a later pattern would match.
            self._subscribed = True
            self._last_received = self._last_handed
            if self._state is _ATTACHED:
                self._send(encode(c.Credit(self.credit_window)))
        if self._subscription is None:
            self._subscription = Subscription(self)
        return self._subscription

    def info(self, timeout: Optional[float] = None) -> StreamInfo:
        """Ask the broker about the attached stream (``STREAM-INFO``)."""
        r = self._request(c.StreamInfo(), "info", timeout)
        return StreamInfo(r.first, r.last, r.size, r.oldest, r.newest, self.stream)

    def seq_at(self, when: TimeLike, timeout: Optional[float] = None) -> int:
        """First sequence journalled at or after ``when`` (``datetime``, ``int`` ns, ``float``
        seconds); the stream's ``last + 1`` if no message is that recent (``SEQ-AT-TIME``)."""
        r = self._request(c.SeqAtTime(to_timestamp_ns(when)), "seq_at", timeout)
        return r.sequence

    def list_streams(self, timeout: Optional[float] = None) -> Tuple[str, ...]:
        """Names of the streams the broker holds (``LIST-STREAMS``)."""
        return tuple(self._request(c.ListStreams(), "list", timeout).streams)

    def close(self, timeout: Optional[float] = None) -> None:
        """Detach and close the socket. Idempotent.

        While attached, sends any publish still queued, then ``DETACH`` and waits (up to
        ``timeout``, default the client's) for ``DETACH-OK`` -- so every publish made before
        ``close()`` has been processed by the broker when it returns. It does *not* wait for
        confirms: call :meth:`wait_for_confirms` first if you need durability. Raises
        :class:`InvalidError` for a publish the broker rejected (after closing).
        """
        if self._state is _CLOSED:
            return
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        try:
            if self._state is _CONNECTING and (self._pending or self._outbox):
                # Reconnecting with publishes not yet (re)sent: give them a chance to go out.
                self._pump(deadline, lambda: self._state is _ATTACHED or self._fatal is not None)
                if self._state is not _ATTACHED:
                    log.warning("zeps: closing while reconnecting to %s: %d publish(es) not "
                                "sent", self.endpoint, max(len(self._pending),
                                                          sum(p for _, p in self._outbox)))
            if self._state is _ATTACHED and self._sock is not None:
                self._closing = True
                entry = self._send_request(c.Detach(), "detach")
                if not self._pump(deadline, lambda: entry.done or self._state is not _ATTACHED):
                    log.warning("zeps: no DETACH-OK from %s within %gs; closing anyway",
                                self.endpoint, t)
        finally:
            self._close_socket()
            self._state = _CLOSED
            self._buffer.clear()
        err, self._error = self._error, None
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
        try:
            if self._state is not _CLOSED:
                self._close_socket()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"<zeps.Client {self.endpoint} stream={self.stream!r} state={self._state}"
                f"{' confirms' if self.confirms else ''}{' green' if self.green else ''}>")

    # ------------------------------------------------------------------ publishing internals

    @staticmethod
    def _frame(key: str, body) -> bytes:
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
        if not isinstance(key, str):
            raise TypeError(f"key must be str, not {type(key).__name__}")
        try:
            return encode_publish(key, body)
        except ProtocolError as e:
            raise ValueError(str(e)) from None

    def _send_publish(self, frame: bytes) -> None:
        now = time.monotonic()
        if (self._error is not None or self._state is not _ATTACHED or self._outbox
                or now - self._last_send >= self.heartbeat or self._need_reconnect):
            self._prepare_publish(now)
        sock = self._sock
        try:
            sock.send(frame, _NOBLOCK)
            self._last_send = now
        except zmq.Again:
            self._outbox.append((frame, True))
        self._pubs_since_entry += 1
        if self.confirms:
            self._pending.append(frame)
        # Look at what came back (CONFIRM, INVALID, monitor events) at most every 2 ms while
        # publishing flat out: two getsockopt calls cost more than the send itself.
        if now >= self._next_look:
            self._next_look = now + _LOOK_INTERVAL
            if (sock.getsockopt(_EVENTS) | self._mon.getsockopt(_EVENTS)) & _POLLIN:
                self._service()

    def _prepare_publish(self, now: float) -> None:
        self._check_usable()
        deadline = now + self.timeout
        silent = now - self._last_send >= self.heartbeat
        self._service()            # (may itself send the heartbeat probe)
        self._check_usable()
        if silent and self._state is _ATTACHED:
            # Silent for a while: make sure the broker still knows us before sending a message
            # it would otherwise reject as "not attached" (and lose, without confirms).
            probe = self._probe
            if probe is None or probe.done:
                probe = self._probe = self._send_request(c.StreamInfo(), "probe")
            self._pump(deadline, lambda: probe.done or self._need_reconnect is not None
                       or self._state is not _ATTACHED)
        ok = self._pump(deadline, lambda: (self._state is _ATTACHED and not self._outbox
                                           and not self._need_reconnect)
                        or self._error is not None or self._fatal is not None)
        self._check_usable()
        if not ok:
            what = "reconnecting to" if self._state is not _ATTACHED else "blocked sending to"
            raise ZepsTimeout(f"publish: still {what} {self.endpoint} after {self.timeout:g}s")

    # ------------------------------------------------------------------ subscription internals

    def _subscribe_one(self, pattern: str, latest: int, live: bool) -> int:
        """SUBSCRIBE one pattern; return the 'latest' to use when resubscribing it."""
        deadline = time.monotonic() + self.timeout
        while True:
            self._wait_attached(deadline, "SUBSCRIBE")
            info = self._send_request(c.StreamInfo(), "info") if live else None
            entry = self._send_request(
                c.Subscribe(pattern, c.LATEST_LIVE if live else latest), "subscribe")
            self._wait_entry(entry, deadline)
            if entry.cancelled:
                continue
            if entry.error is not None:
                raise entry.error
            if live:
                if info.cancelled:
                    continue
                # Messages after info.last are at or after "now"; use it as the resume point.
                return info.result.last if info.error is None else self._last_handed
            return latest

    def _next_message(self, timeout: Optional[float]) -> Optional[Message]:
        """The next message for the application, or None when ``timeout`` expires."""
        if self._buffer and self._error is None:
            return self._hand()
        self._check_usable()
        if not self._subscribed:
            raise ZepsError("nothing subscribed: call Client.subscribe() first")
        deadline = None if timeout is None else time.monotonic() + timeout
        self._pump(deadline, lambda: bool(self._buffer) or self._error is not None
                   or self._fatal is not None or self._state is _CLOSED)
        self._check_usable()
        if self._buffer:
            return self._hand()
        return None

    def _hand(self) -> Message:
        msg, cost = self._buffer.popleft()
        self._last_handed = msg.sequence
        self._consumed += cost
        if self._consumed >= self._topup:
            self._grant()
        return msg

    def _grant(self) -> None:
        if self._state is _ATTACHED and self._consumed:
            self._send(encode(c.Credit(self._consumed)))
        self._consumed = 0

    # ------------------------------------------------------------------ requests

    def _check_usable(self) -> None:
        if self._state is _CLOSED:
            raise ClientClosed("the client is closed")
        if self._fatal is not None:
            raise self._fatal
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _send_request(self, cmd: c.Command, kind: str) -> _Entry:
        """Send a request whose reply comes back in order. If publishes were sent since the
        previous request, a PING goes first: an INVALID that arrives before its PING-OK answers
        one of those publishes, not this request."""
        now = time.monotonic()
        if self._pubs_since_entry:
            self._pubs_since_entry = 0
            barrier = _Entry("barrier", "PING", now)
            self._outstanding.append(barrier)
            self._send(encode(c.Ping()))
        entry = _Entry(kind, cmd.NAME, now)
        self._outstanding.append(entry)
        self._send(encode(cmd))
        return entry

    def _wait_attached(self, deadline: float, what: str) -> None:
        self._check_usable()
        ok = self._pump(deadline, lambda: (self._state is _ATTACHED and not self._need_reconnect)
                        or self._fatal is not None)
        self._check_usable()
        if not ok:
            raise ZepsTimeout(f"{what}: not attached to {self.endpoint} within {self.timeout:g}s "
                              f"(reconnecting)")

    def _wait_entry(self, entry: _Entry, deadline: float) -> None:
        if not self._pump(deadline, lambda: entry.done or self._fatal is not None):
            raise ZepsTimeout(f"no answer to {entry.name} from {self.endpoint} within "
                              f"{self.timeout:g}s")
        if self._fatal is not None and not entry.done:
            raise self._fatal

    def _request(self, cmd: c.Command, kind: str, timeout: Optional[float] = None):
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        while True:
            self._wait_attached(deadline, cmd.NAME)
            entry = self._send_request(cmd, kind)
            if not self._pump(deadline, lambda: entry.done or self._fatal is not None):
                raise ZepsTimeout(f"no answer to {cmd.NAME} from {self.endpoint} within {t:g}s")
            if entry.cancelled:
                continue        # the peering was re-established meanwhile: ask again
            if entry.error is not None:
                raise entry.error
            if not entry.done:
                self._check_usable()
            return entry.result

    # ------------------------------------------------------------------ socket and I/O loop

    def _open_socket(self) -> None:
        z = self._zmq
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)          # credit bounds what the broker sends us
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 500)
        try:
            sock.setsockopt(zmq.HEARTBEAT_IVL, int(self.heartbeat * 1000))
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(self._probe_timeout * 1000))
        except (AttributeError, zmq.ZMQError):
            pass
        mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        try:
            sock.connect(self.endpoint)
        except zmq.ZMQError as e:
            sock.disable_monitor()
            mon.close(0)
            sock.close(0)
            raise ValueError(f"bad endpoint {self.endpoint!r}: {e}") from None
        poller = z.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(mon, zmq.POLLIN)
        self._sock, self._mon, self._poller = sock, mon, poller
        self._connected = False
        self._state = _CONNECTING
        self._attach_error = None
        now = time.monotonic()
        self._connecting_since = now
        self._last_send = self._last_recv = now
        entry = _Entry("attach", "ATTACH", now)
        self._outstanding.append(entry)
        sock.send(encode(c.Attach(self.stream)))

    def _close_socket(self) -> None:
        sock, mon = self._sock, self._mon
        self._sock = self._mon = self._poller = None
        if sock is not None:
            try:
                sock.disable_monitor()
            except Exception:
                pass
            if mon is not None:
                mon.close(0)
            sock.close(0)

    def _lost(self, why: str) -> None:
        if self._state in (_CLOSED, _FAILED) or self._need_reconnect:
            return
        if self._closing:               # detaching anyway: no point in reconnecting
            self._state = _FAILED
            return
        self._need_reconnect = why

    def _reconnect(self) -> None:
        why, self._need_reconnect = self._need_reconnect, None
        self.reconnects += 1
        # Publishes the broker may not have processed (sent after the last answered request):
        # without confirms nobody can tell whether they were stored.
        unsure = not self.confirms and (self._pubs_since_entry > 0 or any(
            e.kind == "barrier" for e in self._outstanding))
        if unsure:
            log.warning("zeps: peering with %s (stream %r) lost: %s; reconnecting. Publishes "
                        "sent just before may be lost (use confirms=True for at-least-once)",
                        self.endpoint, self.stream, why)
        else:
            log.info("zeps: peering with %s (stream %r) lost: %s; reconnecting", self.endpoint,
                     self.stream, why)
        self._close_socket()
        for e in self._outstanding:
            e.cancelled = True
            e.done = True
        self._outstanding.clear()
        self._probe = None
        self._pubs_since_entry = 0
        # Publishes never handed to ZeroMQ are kept (they reached no broker); with confirms,
        # every unconfirmed publish is in _pending and is re-sent from there.
        keep = [] if self.confirms else [f for f, p in self._outbox if p]
        self._outbox.clear()
        self._outbox.extend((f, True) for f in keep)
        self._buffer.clear()
        self._last_received = self._last_handed
        self._consumed = 0
        self._confirm_ready = not self.confirms
        self._reconnect_at = time.monotonic() + 0.1
        self._open_socket()

    def _on_attached(self, initial: bool) -> None:
        self._state = _ATTACHED
        self._connecting_since = 0.0
        held = list(self._outbox)
        self._outbox.clear()
        if self.confirms:
            self._peer_confirmed = 0
            self._send_request(c.ConfirmSelect(), "confirm_select")
        if self.timestamps:          # before any SUBSCRIBE: every delivery then carries its time
            self._send(_DELIVER_TIMESTAMPS)
        if self._patterns:
            for pattern, latest in sorted(self._patterns.items(), key=lambda kv: kv[1]):
                self._send_request(c.Subscribe(pattern, max(latest, self._last_handed)),
                                   "resubscribe")
        if self._subscribed:
            self._send(encode(c.Credit(self.credit_window)))
        if self.confirms:
            for frame in self._pending:
                self._send(frame)
            self._pubs_since_entry += len(self._pending)
        else:
            for frame, _ in held:
                self._send(frame)
            self._pubs_since_entry += len(held)
        if not initial:
            log.info("zeps: re-attached to %s (stream %r)%s", self.endpoint, self.stream,
                        f", re-sending {len(self._pending)} unconfirmed publish(es)"
                        if self._pending else "")

    def _send(self, frame: bytes) -> None:
        """Send a frame now, or queue it behind frames waiting for the high-water mark."""
        if self._outbox or self._sock is None or self._state is not _ATTACHED:
            self._outbox.append((frame, False))
            return
        try:
            self._sock.send(frame, zmq.NOBLOCK)
            self._last_send = time.monotonic()
        except zmq.Again:
            self._outbox.append((frame, False))

    def _flush_outbox(self) -> None:
        sock = self._sock
        box = self._outbox
        try:
            while box:
                sock.send(box[0][0], zmq.NOBLOCK)
                box.popleft()
                self._last_send = time.monotonic()
        except zmq.Again:
            pass

    def _pump(self, deadline: Optional[float], cond) -> bool:
        """Do I/O until ``cond()`` is true (True) or ``deadline`` passes (False)."""
        while True:
            self._service()
            if cond():
                return True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            wait = 1.0 if deadline is None else deadline - now
            wait = min(wait, self._next_timer(now) - now)
            self._poll(max(wait, 0.0))

    def _next_timer(self, now: float) -> float:
        if self._need_reconnect:
            return self._reconnect_at
        if self._state is not _ATTACHED:
            return now + 0.25
        t = min(self._last_send, self._last_recv) + self.heartbeat
        if self._probe is not None and not self._probe.done:
            t = min(t, self._probe.sent_at + self._probe_timeout)
        return max(t, now + 0.001)

    def _poll(self, seconds: float) -> None:
        if self._poller is None:
            time.sleep(seconds) if not self.green else self._zmq_sleep(seconds)
            return
        flags = zmq.POLLIN | (zmq.POLLOUT if self._outbox and self._state is _ATTACHED else 0)
        self._poller.register(self._sock, flags)
        self._poller.poll(int(seconds * 1000) + (1 if seconds > 0 else 0))

    @staticmethod
    def _zmq_sleep(seconds: float) -> None:
        import gevent
        gevent.sleep(seconds)

    def _service(self) -> None:
        """Non-blocking: read monitor events and frames, flush queued frames, run timers."""
        if self._sock is None:
            if self._need_reconnect and self._state not in (_CLOSED, _FAILED):
                self._reconnect()
            return
        mon = self._mon
        while True:
            try:
                parts = mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            event = _MON_EVENT.unpack_from(parts[0], 0)[0] if parts and len(parts[0]) >= 2 else 0
            if event == zmq.EVENT_CONNECTED:
                self._connected = True
            elif event == zmq.EVENT_DISCONNECTED:
                self._connected = False
                self._lost("connection closed by the broker")
        if not self._need_reconnect:
            self._drain()
        now = time.monotonic()
        if self._need_reconnect:
            if now >= self._reconnect_at and self._state not in (_CLOSED, _FAILED):
                self._reconnect()
            return
        if self._state is _ATTACHED:
            if self._outbox:
                self._flush_outbox()
            probe = self._probe
            if probe is not None:
                if probe.done:
                    self._probe = None
                elif now - probe.sent_at > self._probe_timeout:
                    self._lost(f"no answer to a heartbeat within {self._probe_timeout:g}s")
                    return
            elif now - min(self._last_send, self._last_recv) >= self.heartbeat:
                self._probe = self._send_request(c.StreamInfo(), "probe")
        elif self._state is _CONNECTING and self.reconnects:
            if now - self._connecting_since > 2 * self._probe_timeout:
                self._lost("no ATTACH-OK")

    def _drain(self, limit: int = 20000) -> None:
        sock = self._sock
        got = False
        for _ in range(limit):
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            got = True
            cid = frame[2] if len(frame) > 2 and frame[0] == 0xAA else -1
            if cid == 7:
                self._on_deliver(frame, 0)
            elif cid == 43:                 # DELIVER-TS: a timestamp, then DELIVER's fields
                self._on_deliver(frame, 8)
            else:
                self._on_frame(frame)
            if self._need_reconnect or self._sock is not sock:
                break
        if got:
            self._last_recv = time.monotonic()

    def _on_deliver(self, frame: bytes, off: int) -> None:
        """A DELIVER (``off`` 0) or a DELIVER-TS (``off`` 8: the timestamp comes first)."""
        try:
            ts = _U64.unpack_from(frame, 3)[0] if off else None
            seq = _U64.unpack_from(frame, 3 + off)[0]
            klen = frame[11 + off]
            kend = 12 + off + klen
            blen = _U32.unpack_from(frame, kend)[0]
            if kend + 4 + blen > len(frame):
                raise ValueError("truncated")
            key = frame[12 + off:kend].decode("utf-8")
        except (struct.error, IndexError, ValueError) as e:
            log.warning("zeps: ignoring a bad DELIVER frame from %s: %s", self.endpoint, e)
            return
        cost = 9 + klen + blen
        if not self._subscribed or seq <= self._last_received:
            # Defensive: never hand a duplicate; it still used credit.
            self._consumed += cost
            if self._consumed >= self._topup:
                self._grant()
            return
        self._last_received = seq
        body = frame[kend + 4:kend + 4 + blen]
        self._buffer.append((Message(seq, key, body, ts, self.stream), cost))

    def _on_frame(self, frame: bytes) -> None:
        try:
            cmd = decode(frame)
        except ProtocolError as e:
            log.warning("zeps: ignoring an undecodable frame from %s: %s", self.endpoint, e)
            return
        cls = type(cmd)
        if cls is c.Confirm:
            self._on_confirm(cmd)
            return
        if cls is c.Invalid:
            self._on_invalid(cmd.reason)
            return
        kinds = _REPLY_KINDS.get(cls)
        if kinds is not None:
            if not self._outstanding:
                log.warning("zeps: unexpected %s from %s", cls.NAME, self.endpoint)
                return
            entry = self._outstanding.popleft()
            if entry.kind not in kinds:
                self._lost(f"protocol confusion: {cls.NAME} answered {entry.name}")
                return
            entry.result = cmd
            entry.done = True
            if cls is c.AttachOk:
                self._on_attached(initial=self.reconnects == 0)
            elif cls is c.ConfirmSelectOk:
                self._confirm_ready = True
            return
        if cls is c.DeliverTimestampsOk:
            return
        if cls is c.Ping:
            self._send(encode(c.PingOk()))
        elif cls is c.Detach:
            self._lost("the broker sent DETACH")
        else:
            log.warning("zeps: ignoring unexpected %s from %s", cls.NAME, self.endpoint)

    def _on_confirm(self, cmd: c.Confirm) -> None:
        n = cmd.count - self._peer_confirmed
        if n > 0:
            pending = self._pending
            for _ in range(min(n, len(pending))):
                pending.popleft()
            self._peer_confirmed = cmd.count
        if cmd.sequence > self._last_confirmed:
            self._last_confirmed = cmd.sequence

    def _on_invalid(self, reason: str) -> None:
        if _not_attached(reason) and self._state is _ATTACHED:
            self._lost(f"the broker does not know this client ({reason})")
            return
        head = self._outstanding[0] if self._outstanding else None
        if head is not None and head.kind != "barrier" and not reason.startswith(_PUBLISH_REJECTED):
            # Answer to the request at the head (no publish was sent before it unanswered).
            self._outstanding.popleft()
            head.error = InvalidError(reason, head.name)
            head.done = True
            if head.kind == "attach":
                if self.reconnects == 0:
                    self._attach_error = head.error
                else:
                    self._state = _FAILED
                    self._fatal = ConnectionLost(f"the broker refused to re-attach stream "
                                                 f"{self.stream!r}: {reason}")
            elif head.kind == "confirm_select":
                self._fatal = head.error
            elif head.kind == "resubscribe":
                self._error = self._error or head.error
            return
        # An INVALID with no request in front of it answers a PUBLISH (or a CREDIT).
        err = InvalidError(reason, "PUBLISH")
        if self._error is None:
            self._error = err
        if self.confirms and self._pending:
            # The broker does not count a rejected publish. Which one it was is not on the
            # wire; rejections are by body size (--max-message), so forget the unconfirmed
            # publish with the largest body: the count of CONFIRMs stays right in any case.
            pending = self._pending
            biggest = max(range(len(pending)), key=lambda i: len(pending[i]) - pending[i][3])
            del pending[biggest]


def list_streams(endpoint: str = DEFAULT_ENDPOINT, *, timeout: float = 10.0,
                 context=None) -> Tuple[str, ...]:
    """Names of the streams a broker holds (``LIST-STREAMS``, which needs no ATTACH).

    Raises :class:`ValueError` for a malformed endpoint, :class:`ZepsTimeout` when no broker
    answers within ``timeout`` seconds, :class:`InvalidError` if the broker refuses.
    """
    check_endpoint(endpoint)
    z, ctx = _zmq_for(context)
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
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(int(left * 1000) + 1):
                if time.monotonic() >= deadline:
                    raise ZepsTimeout(f"no answer from a ZEPS broker at {endpoint} within "
                                      f"{timeout:g}s (is it running?)")
                continue
            try:
                cmd = decode(sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                continue
            except ProtocolError as e:
                raise ZepsError(f"bad answer from {endpoint}: {e}") from None
            if isinstance(cmd, c.ListStreamsOk):
                return tuple(cmd.streams)
            if isinstance(cmd, c.Invalid):
                raise InvalidError(cmd.reason, "LIST-STREAMS")
    finally:
        sock.close(0)
