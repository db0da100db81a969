"""What each client call does, written once for both front ends.

An operation is a generator over a front end (:class:`~zeps.clients.Client` or
:class:`~zeps.clients.AsyncClient`): it acts on the front end's
:class:`~zeps.clients.peering.Peering` (``front._p``), asks the front end to send what the
peering queued (``front._send_queued()``), and whenever it must wait it yields ``(condition,
deadline)``; the front end does I/O until ``condition()`` holds or the ``deadline`` (a
``time.monotonic()`` value, None for ever) passes, and sends back whether it held. The blocking
client drives an operation by polling its socket, the asyncio client by awaiting; the steps, the
retries after a reconnect and the errors are the same. Hot paths (publishing, handing out
buffered messages) are not here: each front end inlines them.
"""
from __future__ import annotations

import time
from typing import Optional

from ..protocol import commands as c
from ..protocol.codec import FRAME_SLACK, ProtocolError, encode_publish, publish_frame_limit
from ..protocol.headers import encode_block, normalise, publish_h_frame
from ..units import check_endpoint, to_timestamp_ns
from .errors import InvalidError, ZepsError, ZepsTimeout
from .message import StreamInfo
from .peering import ABSENT, CLOSED, CONNECTING, Peering
from .requests import RequestKind

__all__ = ["FrontEnd", "publish_frame"]

_monotonic = time.monotonic


class FrontEnd:
    """What both clients share: their options, their peering, their state."""

    def _setup(self, endpoint, stream, credit_window, confirms, timeout, heartbeat,
               timestamps, producer_id=None, idempotent=True, batching=True,
               create=False, max_frame=None) -> None:
        self.endpoint = check_endpoint(endpoint)
        self._p = p = Peering(stream, credit_window=credit_window, confirms=confirms,
                              timestamps=timestamps, timeout=timeout, heartbeat=heartbeat,
                              now=_monotonic(), endpoint=self.endpoint, producer_id=producer_id,
                              idempotent=idempotent, batching=batching, create=create,
                              max_frame=max_frame)
        self.stream = stream
        self.confirms = p.confirms
        self.timestamps = p.timestamps
        self.timeout = float(timeout)
        self.heartbeat = p.heartbeat
        self._subscription = None

    def _forked(self) -> None:
        """In a child of ``os.fork()`` (:mod:`zeps.clients.lifetime`): the connection's sockets
        are the parent's, forgotten without a call on them and kept referenced (nothing in the
        child finalizes them); every call raises :class:`~zeps.clients.ClientForked`, a receipt
        still pending too; what the subscription had received and not handed out is dropped
        (the parent hands it out). Each client adds what else of its own is the parent's."""
        self._abandoned = self._conn.abandon()
        self._p.forked(self._pid)
        if self._subscription is not None:
            self._subscription._drop()

    def _own_connection(self):
        """The client's connection, whose context and keys a connection of its own (a
        consumer's member, a snapshot) is made with: :class:`~zeps.clients.ClientForked` on a
        forked child's copy, whose context is the parent's (a socket made on it in the child
        never connects)."""
        p = self._p
        if p.forked_from is not None:
            raise p.closed_as()
        return self._conn

    @property
    def duplicates(self) -> int:
        """Deliveries the broker repeated (at or below a sequence already received), dropped
        and not paid for with credit (:mod:`zeps.clients.bounds`); an honest broker sends none."""
        return self._p.duplicates

    @property
    def attached(self) -> bool:
        """True while the peering is attached (False while reconnecting, after close, and while
        the stream does not exist: a reader does not create it, the first publish does)."""
        return self._p.attached

    @property
    def closed(self) -> bool:
        return self._p.state is CLOSED

    @property
    def incarnation(self) -> Optional[int]:
        """The incarnation of the stream this client attached to (``STREAM-ID``;
        docs/protocol.md), or None while it has not attached (or the broker does not say)."""
        return self._p.incarnation

    @property
    def reconnects(self) -> int:
        """How many times the peering was re-established after being lost."""
        return self._p.reconnects

    @property
    def last_confirmed(self) -> int:
        """Sequence of the last message confirmed durable (0 if none yet)."""
        return self._p.tracker.last_confirmed

    @property
    def credit_window(self) -> int:
        """The credit window now (bytes): as asked, or grown to fit the broker's largest
        message (:mod:`zeps.clients.window`)."""
        return self._p.credit_window

    @property
    def producer_id(self):
        """The producer id of exactly-once publishing (None when off: without confirms, with
        ``idempotent=False``, or the broker refused ``PRODUCER``)."""
        return self._p.producer

    @property
    def max_batch(self):
        """The largest PUBLISH-BATCH (bytes) the broker takes on this connection, None when
        publishes go one per frame (``batching=False``, an older broker, not answered yet)."""
        return self._p.max_batch

    @property
    def unconfirmed(self) -> int:
        """How many publishes are not yet confirmed (always 0 without confirms)."""
        return len(self._p.tracker.unconfirmed)

    def __repr__(self) -> str:
        return (f"<zeps.{type(self).__name__} {self.endpoint} stream={self.stream!r} "
                f"state={self._p.state}{' confirms' if self.confirms else ''}>")



def publish_frame(key: str, body, headers=None) -> bytes:
    """The PUBLISH frame of ``(key, body)``, or with ``headers`` (a dict, or ``(name, value)``
    pairs: :func:`zeps.protocol.headers.normalise`; none or empty: a plain PUBLISH) the
    PUBLISH-H: TypeError / ValueError for what cannot be sent."""
    if type(body) is not bytes:
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, (bytes, bytearray, memoryview)):
            raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    if type(key) is not str and not isinstance(key, str):
        raise TypeError(f"key must be str, not {type(key).__name__}")
    try:
        if headers:
            raw = key.encode("utf-8")
            if len(raw) > 255:
                raise ValueError("key longer than 255 bytes")
            return publish_h_frame(encode_block(normalise(headers)), raw, bytes(body))
        return encode_publish(key, body)
    except ProtocolError as e:
        raise ValueError(str(e)) from None


def check_headers(front) -> None:
    """A publish with headers to a broker that refused HEADERS-SELECT (an older broker) would
    be refused by it as an unknown command, after the fact: say so now."""
    if front._p.headers_offered is False:
        raise InvalidError(f"the broker at {front.endpoint} does not take message headers "
                           f"(it refused HEADERS-SELECT): publish without headers",
                           "PUBLISH-H")


def connect(front):
    """Wait for ATTACH-OK (and CONFIRM-SELECT-OK); raise the broker's refusal or a timeout."""
    p = front._p
    ok = yield (lambda: (p.ready or p.fatal is not None or p.attach_error is not None
                         or p.state is ABSENT),          # no stream: a reader does not create it
                _monotonic() + front.timeout)
    if p.attach_error is not None:
        raise p.attach_error
    if p.fatal is not None:
        raise p.fatal
    if not ok:
        raise ZepsTimeout(f"no answer from a ZEPS broker at {front.endpoint} within "
                          f"{front.timeout:g}s (is it running?)")


def prepare_publish(front, now: float):
    """Wait until a publish may go straight out (returns the time then), or raise why not:
    the error of an earlier publish, the client closed, reconnecting or blocked for longer
    than the client's timeout. After ``heartbeat`` seconds of silence, first checks with one
    round trip that the broker still knows the client."""
    p = front._p
    p.check()
    deadline = now + front.timeout
    if p.state is ABSENT:                # the first publish: attach, creating the stream
        yield from join(front, True, deadline, "PUBLISH")
    if p.silent(now):
        probe = p.heartbeat_probe(now)
        if probe is not None:
            front._send_queued()
            yield (lambda: probe.done or p.need_reconnect is not None or not p.attached,
                   deadline)
    while True:
        ok = yield (lambda: (p.attached and not p.outbox and p.need_reconnect is None
                             and p.producer_sync is None) or p.state is ABSENT
                    or p.error is not None or p.fatal is not None, deadline)
        p.check()
        if not (ok and p.state is ABSENT):
            break
        # A read's ATTACH (another task's, or one whose call was cancelled) was in flight and
        # found no stream: attach again, creating it.
        yield from join(front, True, deadline, "PUBLISH")
    if not ok:
        what = "reconnecting to" if not p.attached else "blocked sending to"
        raise ZepsTimeout(f"publish: still {what} {front.endpoint} after {front.timeout:g}s")
    return _monotonic()


def learn_limits(front, now: float):
    """Wait until the broker has said its limits (LIMITS-OK after the ATTACH; attaching first
    if the peering is ABSENT), so that :func:`check_frame_size` can judge a frame that may be
    too long: a frame longer than :data:`~zeps.protocol.codec.FRAME_SLACK`, before the first
    LIMITS-OK. A broker that refuses LIMITS (an older one) leaves the limit unknown."""
    p = front._p
    p.check()
    deadline = now + front.timeout
    if p.state is ABSENT:
        yield from join(front, True, deadline, "PUBLISH")

    def said():
        r = p.limits_request
        return (p.frame_limit is not None or (r is not None and r.done and not r.cancelled)
                or p.state is ABSENT or p.error is not None or p.fatal is not None)
    while True:
        ok = yield (said, deadline)
        p.check()
        if not (ok and p.state is ABSENT):
            break
        yield from join(front, True, deadline, "PUBLISH")    # a read's ATTACH found no stream
    if not ok:
        raise ZepsTimeout(f"publish: the limits of {front.endpoint} not known after "
                          f"{front.timeout:g}s")


def check_frame_size(front, frame: bytes) -> None:
    """ValueError for a PUBLISH frame longer than :func:`~zeps.protocol.codec.publish_frame_limit`
    of the broker's ``max_message``: over that limit by more than the room
    (:data:`~zeps.protocol.codec.FRAME_SLACK`) the broker reads beyond its limits. The broker
    would refuse it anyway, and may drop the connection unread instead of answering (its
    ``ZMQ_MAXMSGSIZE``: this with the default limits), after which a client with confirms
    would send it again after each reconnect. Nothing is sent."""
    limit = front._p.frame_limit
    if limit is not None and len(frame) > limit:
        max_message = limit - publish_frame_limit(0)
        raise ValueError(f"a PUBLISH of {len(frame)} bytes is over the --max-message of "
                         f"{max_message} bytes of the broker at {front.endpoint} by more than "
                         f"the {FRAME_SLACK} bytes it reads beyond (at most {limit} bytes): "
                         f"the message was not sent")


def join(front, create: bool, deadline: float, what: str):
    """The peering is ABSENT (its stream did not exist): attach now -- for a publish
    (``create``) creating the stream, for a read (``what``) only if it exists now. Raises
    :class:`NoStream` for a read of a stream still missing, or the broker's refusal (the
    peering stays ABSENT: a later call tries again)."""
    p = front._p
    p.join(create, _monotonic())
    front._send_queued()
    ok = yield (lambda: p.ready or p.state is ABSENT or p.fatal is not None, deadline)
    p.check()
    if p.state is ABSENT:
        err, p.attach_error = p.attach_error, None
        raise err if err is not None else p.no_stream(what)
    if not ok:
        raise ZepsTimeout(f"{what}: no answer to ATTACH from {front.endpoint} within "
                          f"{front.timeout:g}s")


def wait_attached(front, deadline: float, what: str, t: Optional[float] = None):
    """Wait until attached (``t``: the seconds the caller gave, for the error's text; the
    client's timeout if None)."""
    p = front._p
    p.check()
    if p.state is ABSENT:                # a read of a stream that did not exist: look again
        yield from join(front, False, deadline, what)
    ok = yield (lambda: (p.attached and p.need_reconnect is None) or p.state is ABSENT
                or p.fatal is not None, deadline)
    p.check()
    if ok and p.state is ABSENT:         # another read's ATTACH, in flight, found no stream
        raise p.no_stream(what)
    if not ok:
        t = front.timeout if t is None else t
        raise ZepsTimeout(f"{what}: not attached to {front.endpoint} within {t:g}s "
                          f"(reconnecting)")


def wait_request(front, r, deadline: float, t: float):
    p = front._p
    ok = yield (lambda: r.done or p.fatal is not None), deadline
    if not ok:
        raise ZepsTimeout(f"no answer to {r.name} from {front.endpoint} within {t:g}s")
    if r.error is not None:
        raise r.error
    if not r.done:
        p.check()


def request(front, cmd: c.Command, kind: RequestKind, timeout: Optional[float], unattached=False):
    """Send a request and return its reply; asked again if the peering was re-established
    before the reply came. ``unattached``: the request needs no ATTACH (it goes at once while
    the stream does not exist)."""
    t = front.timeout if timeout is None else timeout
    deadline = _monotonic() + t
    while True:
        if not (unattached and front._p.state is ABSENT):
            yield from wait_attached(front, deadline, cmd.NAME, t)
        r = front._p.request(cmd, kind, _monotonic())
        front._send_queued()
        yield from wait_request(front, r, deadline, t)
        if not r.cancelled:
            return r.result


def flush(front, timeout: Optional[float]):
    """PING, a barrier: the broker answers it after every publish sent before it. With
    confirms, the refusal of a publish comes after the CONFIRMs of those before it
    (zeps/broker/confirms.py), so flush also waits for the outcome of the newest publish sent
    before its PING-OK (a refusal is then known, and raised)."""
    p = front._p
    if p.state is ABSENT:                # nothing was published: nothing to wait for
        p.check()
        return
    t = front.timeout if timeout is None else timeout
    deadline = _monotonic() + t
    yield from request(front, c.Ping(), RequestKind.PING, timeout)
    unconfirmed = p.tracker.unconfirmed
    if front.confirms and unconfirmed:
        newest = unconfirmed[-1]
        ok = yield (lambda: newest.done() or p.error is not None or p.fatal is not None,
                    deadline)
        p.check()
        if not ok:
            raise ZepsTimeout(f"the outcome of {len(unconfirmed)} published message(s) not "
                              f"known within {t:g}s")
    p.check()


def info(front, timeout: Optional[float]):
    r = yield from request(front, c.StreamInfo(), RequestKind.INFO, timeout)
    return StreamInfo(r.first, r.last, r.size, r.oldest, r.newest, front.stream)


def seq_at(front, when, timeout: Optional[float]):
    r = yield from request(front, c.SeqAtTime(to_timestamp_ns(when)), RequestKind.SEQ_AT, timeout)
    return r.sequence


def list_streams(front, timeout: Optional[float]):
    """Every stream's name, a page (LIST-STREAMS-PAGE) at a time."""
    names: list = []
    after = ""
    while True:
        r = yield from request(front, c.ListStreamsPage(after), RequestKind.LIST, timeout,
                               unattached=True)
        names.extend(r.streams)
        if not r.next:
            return tuple(names)
        after = r.next


def wait_for_confirms(front, timeout: Optional[float]):
    if not front.confirms:
        raise ZepsError(f"wait_for_confirms() needs {type(front).__name__}(..., confirms=True)")
    p = front._p
    p.check()
    t = front.timeout if timeout is None else timeout
    unconfirmed = p.tracker.unconfirmed
    # Nothing unconfirmed is an answer at once, attached or not (while the client reconnected,
    # a call with everything confirmed waited for the ATTACH, and timed out on a broker down).
    ok = yield (lambda: not unconfirmed or p.error is not None or p.fatal is not None,
                _monotonic() + t)
    p.check()
    if not ok:
        raise ZepsTimeout(f"{len(unconfirmed)} published message(s) not confirmed within {t:g}s")
    return p.tracker.last_confirmed


def wait_receipt(front, receipt, timeout: Optional[float]):
    t = front.timeout if timeout is None else timeout
    yield receipt.done, _monotonic() + t
    if not receipt.done():
        raise ZepsTimeout(f"publish not confirmed within {t:g}s")


def subscribe(front, patterns, from_seq, from_time, live: bool):
    """SUBSCRIBE each pattern (``subscribe_args`` checked them), then grant the credit."""
    p = front._p
    p.check()
    if from_seq is not None:
        latest = max(from_seq - 1, 0)
    elif from_time is not None:
        latest = max((yield from seq_at(front, from_time, None)) - 1, 0)
    else:
        latest = 0
    for pattern in patterns:
        deadline = _monotonic() + front.timeout
        while True:
            yield from wait_attached(front, deadline, "SUBSCRIBE")
            r = p.subscribe(pattern, latest, live, _monotonic())
            front._send_queued()
            yield from wait_request(front, r, deadline, front.timeout)
            if not r.cancelled:
                break
    p.start_delivery()
    front._send_queued()


def fill(front, ready, timeout: Optional[float], batches: bool = False):
    """Put the next messages for the application into ``ready`` (the deque a subscription hands
    out from; see ``Peering.take``), or with ``batches`` the next :class:`MessageBatch` objects
    (``Peering.take_batches``): True once it holds some, False when ``timeout`` expires.
    Raises the error the client has to raise first. Another reader of the same subscription may fill
    ``ready`` meanwhile (asyncio tasks): that counts too."""
    p = front._p
    deadline = None if timeout is None else _monotonic() + timeout
    timed_out = False
    while not ready:
        if p.buffer and p.error is None:
            ready.extend(p.take_batches() if batches else p.take())
            front._send_queued()
            break
        p.check()
        if timed_out:
            return False
        if not p.subscribed:
            raise ZepsError("nothing subscribed: call subscribe() first")
        timed_out = not (yield (lambda: p.buffer or ready or p.broken), deadline)
    return True


def detach(front, timeout: Optional[float], log):
    """The waiting part of ``close()``: let publishes queued while reconnecting go out, then
    DETACH and wait for DETACH-OK (the broker has then processed every publish)."""
    p = front._p
    if p.state is CLOSED:
        return
    t = front.timeout if timeout is None else timeout
    deadline = _monotonic() + t
    if p.state is CONNECTING and p.unfinished_publishes():
        yield (lambda: p.attached or p.fatal is not None), deadline
        if not p.attached:
            log.warning("zeps: closing while reconnecting to %s: %d publish(es) not sent",
                        front.endpoint, p.unfinished_publishes())
    if p.attached:
        r = p.detach(_monotonic())
        front._send_queued()
        if not (yield (lambda: r.done or not p.attached), deadline):
            log.warning("zeps: no DETACH-OK from %s within %gs; closing anyway", front.endpoint, t)
