"""The blocking ZEPS client: :class:`Client` (plain ``zmq`` or, under gevent, ``zmq.green``).

A :class:`Client` is one ZeroMQ DEALER socket attached to **one** stream of a ZEPS broker (one
peering = one stream). It publishes, subscribes (through a :class:`~zeps.clients.Subscription`),
asks for stream information, and survives broker restarts::

    from zeps.clients import Client

    with Client("tcp://127.0.0.1:7470", "orders", confirms=True) as c:
        receipt = c.publish("eu.fr", b"hello")
        last = c.wait_for_confirms()        # durable up to sequence `last`
        receipt.result()                    # this message's sequence

    with Client("tcp://127.0.0.1:7470", "orders") as c:
        for msg in c.subscribe("eu."):        # history first, then live, seamlessly
            print(msg.sequence, msg.key, msg.body)

What you can rely on (delivery, confirms, credit, reconnects) is in the package documentation,
:mod:`zeps.clients`. This module is a front end: the protocol is the pure
:class:`~zeps.clients.peering.Peering`, the socket is a :class:`~zeps.clients.transport.Connection`,
each call is an operation of :mod:`zeps.clients.operations`; the client drives them through
their waits as :mod:`zeps.clients.waiting` says.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Callable, Iterable, Optional, Tuple, Union

import zmq

from ..protocol import commands as c
from ..protocol.batch import PUBLISH_BATCH_ID
from ..protocol.codec import FRAME_SLACK
from ..units import DEFAULT_ENDPOINT, TimeLike, to_timestamp_ns
from . import lifetime
from . import operations as ops
from .errors import ConcurrentUseError
from .message import StreamInfo
from .operations import publish_frame
from .batching import batch_frames
from .defaults import (DEFAULT_CREDIT_WINDOW, DEFAULT_HEARTBEAT, LOOK_INTERVAL, SLOW_PUBLISH,
                       WRITABLE_LOOK, WRITABLE_QUEUE)
from .flusher import NO_FLUSHER, Flusher
from .peering import ABSENT, CLOSED, ConnectionEvent
from .receipt import Receipt, done_receipt
from .subscription import Subscription, subscribe_args
from .transport import Connection, check_endpoint, request_once, zmq_for  # noqa: F401 (check_endpoint: API)
from .waiting import Driver

__all__ = ["Client", "list_streams", "check_endpoint", "to_timestamp_ns", "DEFAULT_ENDPOINT",
           "DEFAULT_CREDIT_WINDOW", "DEFAULT_HEARTBEAT"]

log = logging.getLogger("zeps.client")

_monotonic = time.monotonic
_get_ident = threading.get_ident
_DONE = done_receipt(Receipt)


def _guarded(method):
    """One caller at a time: a second thread (or greenlet) calling while one is inside gets
    :class:`ConcurrentUseError` (:meth:`Client._concurrent`) instead of corrupting the client or
    its socket. The client's own sender is waited for, and armed by frames left waiting."""
    name = method.__name__

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if not self._guard.acquire(False):
            self._concurrent(name)
        self._owner = _get_ident()
        self._calls += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            self._guard.release()
            if self._p.waiting and not self._flusher.armed:
                self._flusher.arm()
    return call


class Client(ops.FrontEnd, Driver):
    """A peering with a ZEPS broker, attached to one stream.

    Args:
        endpoint: the broker's ZeroMQ endpoint, e.g. ``"tcp://127.0.0.1:7470"``.
            A malformed endpoint raises :class:`ValueError` naming it.
        stream: the stream to attach (1..255 bytes of UTF-8).
        credit_window: bytes of deliveries the broker may send ahead of the application
            (default 8 MiB). After each ATTACH the client asks the broker's ``LIMITS`` and
            grows the window to the cost of the largest message the broker accepts (at most
            the broker's ``--max-credit``); a broker without ``LIMITS`` that advises "credit
            window too small" gets the window grown to fit (:mod:`zeps.clients.window`).
        confirms: turn publisher confirms on (``CONFIRM-SELECT``): enables
            :meth:`wait_for_confirms`, receipts that resolve to sequences, and re-sending of
            unconfirmed publishes after a reconnect -- exactly-once among confirmed messages
            (see ``producer_id``).
        producer_id: with confirms, the client is an idempotent producer (``PRODUCER``): every
            publish gets a producer sequence (1, 2, ... across reconnects) and the broker stores
            a re-sent one only if it does not hold it yet. Every message confirmed is then in
            the stream exactly once, across broker crashes, reconnects, and a new client that
            takes over the same ``producer_id`` and re-publishes the same messages in the same
            order (a retried Spark task). Not covered: two clients using one producer id at the
            same time; a retry after the broker forgot the producer (it keeps its
            ``max_producers`` most recent ones per stream). Default: a random id per client.
            Details: :mod:`zeps.clients.producer`.
        idempotent: False turns exactly-once off (confirms then give at-least-once: a message
            durable just before a crash whose CONFIRM was lost is stored twice). A broker that
            refuses ``PRODUCER`` gives at-least-once too (logged as a warning).
        on_connection: called with a :class:`~zeps.clients.peering.ConnectionEvent` when the
            peering is lost (``kind == "lost"``, ``reason``) and when it is re-established
            (``"reconnected"``), from inside the client's calls (from its I/O task for the
            :class:`~zeps.clients.AsyncClient`, where a coroutine function's coroutine runs as
            a task of the loop). What it raises is logged and ignored.
        timeout: seconds to wait for the broker in blocking operations (attach, requests, a
            publish blocked by the high-water mark, ``wait_for_confirms`` without its own
            timeout). Raises :class:`ZepsTimeout` when exceeded.
        heartbeat: seconds of silence after which the client checks the peering (see
            :mod:`zeps.clients`). Keep it below a third of the broker's ``--expiry``.
        timestamps: ask the broker for DELIVER-TS (a ZEPS extension, docs/protocol.md) so that
            every :class:`Message` carries the time the broker journalled it (default True;
            False for a broker that only speaks the 12 commands of ZEPS/1).
        batching: ask the broker for batches (``BATCH-SELECT``, :mod:`zeps.clients.batching`;
            default True): messages then arrive as DELIVER-BATCH frames and publishes made
            while the socket is busy leave together as one PUBLISH-BATCH (natural batching:
            no linger, receipts and confirms per message as without; what stays queued is sent
            by the client's sender, :mod:`zeps.clients.flusher`). A broker without batching
            answers INVALID and the client uses plain PUBLISH / DELIVER.
        context: a ``zmq.Context`` to use; a ``zmq.green.Context`` makes the client
            gevent-cooperative. Default: the process-wide context (a private green one when
            gevent has patched ``socket``).
        create: readers never create streams: by default the client attaches only to a stream
            that exists (``STREAM-EXPECT 0``, docs/protocol.md), and if there is none it stays
            unattached until its first :meth:`publish`, which creates the stream; reads
            (:meth:`subscribe`, :meth:`info`, :meth:`seq_at`) look again and raise
            :class:`~zeps.clients.errors.NoStream` at once if it still does not exist.
            ``create=True`` attaches creating the (empty) stream at once, as a plain ZEPS/1
            ATTACH does: for a subscriber that waits for a publisher not started yet.
        max_frame: the longest frame the client reads (bytes: ``ZMQ_MAXMSGSIZE`` on each of its
            sockets, as Kafka's ``receive.message.max.bytes``). Default None: the credit window
            plus 64 KiB, the most an honest broker sends (:mod:`zeps.clients.bounds`); given,
            it caps the window too. A longer frame is not read: the next call raises
            :class:`~zeps.clients.FrameTooLarge`, and the client reconnects.

    The constructor connects and ATTACHes; it raises :class:`InvalidError` if the broker
    refuses the stream (not for a stream that does not exist: see ``create``) and
    :class:`ZepsTimeout` if no broker answers within ``timeout``. Use it as a context
    manager, or call :meth:`close`. A client still open when the interpreter exits is closed
    then, as :meth:`close` does; one garbage-collected without :meth:`close` drops the
    publishes it still held, and logs how many (:mod:`zeps.clients.lifetime`).
    """

    def __init__(self, endpoint: str, stream: str, *, credit_window: int = DEFAULT_CREDIT_WINDOW,
                 confirms: bool = False, timeout: float = 10.0,
                 heartbeat: float = DEFAULT_HEARTBEAT, timestamps: bool = True, context=None,
                 producer_id: Optional[str] = None, idempotent: bool = True,
                 on_connection: Optional[Callable[[ConnectionEvent], None]] = None,
                 curve=None, batching: bool = True, create: bool = False,
                 max_frame: Optional[int] = None):
        self._setup(endpoint, stream, credit_window, confirms, timeout, heartbeat, timestamps,
                    producer_id, idempotent, batching, create, max_frame)
        p = self._p
        module, ctx = zmq_for(context)
        self.green = module is not zmq
        self._guard = threading.Lock()
        self._owner: Optional[int] = None           # thread ident of the last caller
        self._calls = 0                             # calls made: the sender's sign of life
        self._flusher = NO_FLUSHER if self.green else Flusher(self)
        self._next_look = 0.0
        self._next_writable = 0.0
        self._last_publish = 0.0
        self._conn = conn = Connection(p, self.endpoint, module, ctx, on_connection, curve)
        self._blocking = module is zmq      # waits by reading (Connection.recv_within)
        conn.open()
        try:
            conn.send_queued()
            self._run(ops.connect(self))
        except BaseException:
            conn.close()
            p.close()
            raise
        lifetime.opened(self)

    # ------------------------------------------------------------------ publishing

    def publish(self, key: str, body: Union[bytes, bytearray, memoryview, str],
                headers=None) -> Receipt:
        """Publish one message with routing ``key`` (text, at most 255 UTF-8 bytes) and ``body``
        (bytes; a ``str`` is encoded as UTF-8); return its :class:`~zeps.clients.Receipt`.

        ``headers``: the message's headers, a dict (``{"uuid": b"...", "ttl": "30"}``; a list
        of values for a repeated name) or ``(name, value)`` pairs, kept in order (names: text,
        1 to 255 UTF-8 bytes; values: bytes, a ``str`` is encoded as UTF-8; at most 255 pairs
        and 64 KiB, which count against the broker's body limit). Subscribers read them as
        :attr:`Message.headers <zeps.clients.Message.headers>`. A message with headers travels
        alone (never in a PUBLISH-BATCH). Raises :class:`InvalidError` at once if the broker
        does not take headers.

        Asynchronous: returns once ZeroMQ has taken the message (at once on an idle socket),
        or, while the socket is busy (its I/O thread has not taken the few frames it holds: a
        loop of publishes faster than that thread), once it is queued in the client to leave
        with the next PUBLISH-BATCH, sent by the next ``publish`` or, if no call comes within
        about a millisecond, by the client's sender thread (:mod:`zeps.clients.flusher`;
        under gevent, by the next call). Blocks while that queue is full or the client is
        reconnecting, up to ``timeout`` seconds, then raises :class:`ZepsTimeout` (the
        message was not accepted). Raises :class:`InvalidError` if the broker rejected an
        earlier publish (this message is then not sent). Raises ``ValueError``, sending nothing,
        for a message over the broker's ``--max-message`` by more than the 64 KiB of room the
        broker reads beyond its limits (it could drop the connection instead of refusing it),
        once the broker has said its limits (a publish longer than 64 KiB waits for them); a
        message over the limit by less is refused by the broker (:class:`InvalidError`, as
        above). With confirms,
        ``receipt.result(timeout)`` waits for this message's CONFIRM and returns its
        sequence; without, the receipt is already done (sequence unknown).
        """
        frame = publish_frame(key, body, headers)
        if headers and self._p.headers_offered is False:
            ops.check_headers(self)
        if not self._guard.acquire(False):         # _guarded, inlined on the hot path
            self._concurrent("publish")
        self._owner = _get_ident()
        self._calls += 1
        try:
            if len(frame) > FRAME_SLACK:            # perhaps longer than the broker reads
                self._fits(frame)
            p = self._p
            now = _monotonic()
            r = Receipt(frame, self) if p.confirms else _DONE
            if not p.publish(frame, now, r):
                now = self._run(ops.prepare_publish(self, now))
                p.publish(frame, now, r, False)
            conn = self._conn
            gap, self._last_publish = now - self._last_publish, now
            if p.waiting:                   # behind other frames: joins the next batch
                p.queue_publish(frame)
                # Asking the socket costs more than queueing: ask every WRITABLE_LOOK seconds,
                # or once a batch's worth has gathered; but at every call of a publisher
                # slower than SLOW_PUBLISH (a paced one: nothing to batch, and what the socket
                # refused would otherwise wait for a later call; issue 20).
                if (gap > SLOW_PUBLISH or now >= self._next_writable
                        or len(p.queue) >= WRITABLE_QUEUE) and conn.writable():
                    self._next_writable = now + WRITABLE_LOOK
                    conn.send_queued()
                if not self._flusher.armed:     # the sender sends it if no call comes
                    self._flusher.arm()
            elif not conn.send_or_queue(frame, gap > SLOW_PUBLISH):
                self._flusher.arm()
            if now >= self._next_look:
                self._next_look = now + LOOK_INTERVAL
                if conn.readable():
                    conn.service()
            return r
        finally:
            self._guard.release()

    def publish_batch(self, messages: Iterable[Tuple[str, Union[bytes, str]]]) -> int:
        """Publish every ``(key, body)`` of ``messages`` in order; returns how many.

        Same guarantees as :meth:`publish` for each message (if it raises, the messages before
        the failing one were accepted, the rest were not). With batching, the messages leave as
        PUBLISH-BATCH frames as large as the broker takes, whatever the socket's state: the way
        to publish many messages fast (like a pipeline in redis-py). With confirms, each
        message still has its receipt inside the client (re-sent after a reconnect until
        confirmed); :meth:`wait_for_confirms` waits for all of them.
        """
        p = self._p
        if p.state is CLOSED:            # (its connection is gone: the batch path would read
            raise p.closed_as()          # the socket's events, TypeError, not ClientClosed)
        if p.state is ABSENT:            # the first publish creates the stream: batches after it
            self._attach_to_publish()
        if p.queue.max_batch is None:                    # a ZEPS/1 broker
            n = 0
            publish = self.publish
            for key, body in messages:
                publish(key, body)
                n += 1
            return n
        if not self._guard.acquire(False):
            self._concurrent("publish_batch")
        self._owner = _get_ident()
        self._calls += 1
        try:
            conn = self._conn
            send = self._queue_with_receipts if p.confirms else self._send_batch_frames
            try:
                n = send(messages, conn, _monotonic())
            except (ValueError, TypeError):    # a message that cannot be sent: those before it
                if p.waiting and not self._flusher.armed:      # leave as they would have
                    self._flusher.arm()
                raise
            if conn.writable():
                conn.send_queued()
            if conn.readable():
                conn.service()
            if p.waiting and not self._flusher.armed:
                self._flusher.arm()
        finally:
            self._guard.release()
        return n

    def _send_batch_frames(self, messages, conn, now: float) -> int:
        """``publish_batch`` without confirms: the messages are laid out straight into
        PUBLISH-BATCH frames as large as the broker takes (no PUBLISH frame, no peering call
        per message); each frame goes out once the one before it was taken by the socket."""
        p = self._p
        n = 0
        for frame, count in batch_frames(messages, p.queue.max_batch, p.queue.max_body):
            if count == 1 and len(frame) > FRAME_SLACK and frame[2] != PUBLISH_BATCH_ID:
                self._fits(frame)                   # a PUBLISH of a body over the limit
            if not p.may_publish(now, True):
                if p.outbox and conn.writable():
                    conn.send_queued()
                if not p.may_publish(now, True):
                    now = self._run(ops.prepare_publish(self, now))
            p.publish_frame(frame, count, now)
            n += count
            if conn.writable():
                conn.send_queued()
        return n

    def _queue_with_receipts(self, messages, conn, now: float) -> int:
        """``publish_batch`` with confirms: each message gets its receipt (kept until its
        CONFIRM, to be re-sent after a reconnect) and joins the publish queue, which leaves as
        PUBLISH-BATCH frames as large as the broker takes, not one ZeroMQ send per message."""
        p = self._p
        n = 0
        for key, body in messages:
            frame = publish_frame(key, body)
            if len(frame) > FRAME_SLACK:
                self._fits(frame)
            r = Receipt(frame, self)
            if not p.publish(frame, now, r):
                if p.outbox and conn.writable():
                    conn.send_queued()
                if not p.publish(frame, now, r):
                    now = self._run(ops.prepare_publish(self, now))
                    p.publish(frame, now, r, False)
            p.queue_publish(frame)
            n += 1
            if p.outbox and conn.writable():
                conn.send_queued()
        return n

    def _fits(self, frame: bytes) -> None:
        """A frame longer than every broker reads: ValueError if it is longer than
        :func:`ops.check_frame_size` lets through (the broker's limits learnt first if it has
        not said them yet)."""
        if self._p.frame_limit is None:
            self._run(ops.learn_limits(self, _monotonic()))
        ops.check_frame_size(self, frame)

    @_guarded
    def _attach_to_publish(self) -> None:
        self._run(ops.prepare_publish(self, _monotonic()))

    @_guarded
    def flush(self, timeout: Optional[float] = None) -> None:
        """Block until the broker has processed every publish sent so far (journalled, handed to
        the OS, not necessarily fsynced; with confirms, until each is confirmed durable or
        refused). Raises :class:`InvalidError` if one was rejected."""
        self._run(ops.flush(self, timeout))

    @_guarded
    def wait_for_confirms(self, timeout: Optional[float] = None) -> int:
        """Block until every message published so far is confirmed durable; return the sequence
        of the last confirmed message (0 if nothing was ever confirmed).

        ``timeout`` defaults to the client's timeout; :class:`ZepsTimeout` when exceeded.
        Raises :class:`InvalidError` if the broker rejected a publish (call again to wait for
        the rest). Needs ``Client(confirms=True)``.
        """
        return self._run(ops.wait_for_confirms(self, timeout))

    @_guarded
    def _wait_receipt(self, receipt: Receipt, timeout: Optional[float]) -> None:
        self._run(ops.wait_receipt(self, receipt, timeout))

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

        * default: from the first message the stream keeps (the history, then live). The CLI's
          ``zeps subscribe`` starts live instead (``--all`` for this); the SDK keeps the
          history as its default because a program should not lose what was published before
          it started (as JetStream's consumers deliver all by default);
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

        Raises :class:`~zeps.clients.errors.NoStream` at once if the stream does not exist
        (readers never create streams: a publish does, or ``Client(..., create=True)``),
        :class:`InvalidError` with the broker's reason (e.g. a regex that does not compile) and
        :class:`ZepsTimeout`.
        """
        patterns = subscribe_args(pattern, from_seq, from_time, live, timeout)
        self._run(ops.subscribe(self, patterns, from_seq, from_time, live))
        if self._subscription is None:
            self._subscription = Subscription(self)
        if timeout is not None:
            self._subscription.timeout = timeout
        return self._subscription

    # ------------------------------------------------------------------ requests

    @_guarded
    def info(self, timeout: Optional[float] = None) -> StreamInfo:
        """Ask the broker about the attached stream (``STREAM-INFO``)."""
        return self._run(ops.info(self, timeout))

    @_guarded
    def seq_at(self, when: TimeLike, timeout: Optional[float] = None) -> int:
        """First sequence journalled at or after ``when`` (``datetime``, ``int`` ns, ``float``
        seconds); the stream's ``last + 1`` if no message is that recent (``SEQ-AT-TIME``)."""
        return self._run(ops.seq_at(self, when, timeout))

    @_guarded
    def list_streams(self, timeout: Optional[float] = None) -> Tuple[str, ...]:
        """Names of the streams the broker holds (``LIST-STREAMS``)."""
        return self._run(ops.list_streams(self, timeout))

    def snapshot(self, prefix="", timeout: Optional[float] = None):
        """The latest message of every live key under ``prefix`` (a str, or up to 16 of them)
        of the stream, and the sequence that is consistent at: a
        :class:`~zeps.clients.snapshot.Snapshot` (a list of :class:`Message` with ``.seq``);
        subscribe ``from_seq=snap.seq + 1`` for what came after. Read on a connection of its
        own, under credit (``SNAPSHOT``; the stream needs a key index: ``InvalidError``
        otherwise). :meth:`iter_snapshot` hands the entries out as they come instead."""
        from .snapshot_io import read_snapshot
        return read_snapshot(self.endpoint, self.stream, prefix, **self._snapshot_options(timeout))

    def iter_snapshot(self, prefix="", timeout: Optional[float] = None):
        """As :meth:`snapshot`, an iterator of the entries (credit granted back as they are
        taken: memory bounded by the window); its ``.seq`` is set once it is exhausted."""
        from .snapshot_io import SnapshotIterator
        return SnapshotIterator(self.endpoint, self.stream, prefix,
                                **self._snapshot_options(timeout))

    def _snapshot_options(self, timeout):
        conn = self._own_connection()
        return {"timeout": self.timeout if timeout is None else timeout,
                "context": conn.context, "curve": conn.curve}

    # ------------------------------------------------------------------ durable consumers

    @_guarded
    def add_consumer(self, name: str, patterns=("",), *, timeout: Optional[float] = None,
                     **settings) -> int:
        """Create the durable consumer ``name`` of the stream (CONSUMER-ADD; idempotent with
        the same settings); returns the first sequence it hands out. Settings (docs/consumers.md,
        :func:`zeps.clients.consumer.consumer_add`): ``start`` (None: the first kept; a sequence;
        a datetime / float time; "new"), ``ack`` ("explicit", "all", "none"), ``ack_wait``
        (s), ``max_deliver``, ``max_ack_pending``, ``dead_letter`` (a stream), ``key_order``."""
        from .consumer_admin import add
        return self._run(add(self, name, patterns, timeout, **settings))

    def consume(self, name: str, *, timeout: Optional[float] = None, batch: int = 512):
        """Join consumer ``name`` as a member, on a connection of its own: a joined
        :class:`~zeps.clients.consumer_io.Consumer` (iterate it, or ``.batches()``; a context
        manager; ``close()`` leaves). Messages have ``.ack()``, ``.nak(delay)``,
        ``.in_progress()``, sent batched. Rejoins after a lost connection (what was not
        acknowledged comes again). ``timeout``: each ``next()``'s wait (None: for ever)."""
        from .consumer_admin import member_options
        from .consumer_io import Consumer
        opts = member_options(self, None)
        opts["join_timeout"] = opts.pop("timeout")
        return Consumer(name=name, timeout=timeout, batch=batch, **opts).join()

    @_guarded
    def consumer_info(self, name: str, timeout: Optional[float] = None) -> dict:
        """Consumer ``name``'s settings and state (CONSUMER-INFO, the broker's JSON)."""
        from .consumer_admin import info
        return self._run(info(self, name, timeout))

    @_guarded
    def consumers(self, timeout: Optional[float] = None) -> Tuple[str, ...]:
        """The names of the stream's consumers (CONSUMER-LIST)."""
        from .consumer_admin import names
        return self._run(names(self, timeout))

    @_guarded
    def delete_consumer(self, name: str, timeout: Optional[float] = None) -> None:
        """Delete consumer ``name`` and its position (CONSUMER-DELETE; members are detached)."""
        from .consumer_admin import delete
        self._run(delete(self, name, timeout))

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
        try:
            self._run(ops.detach(self, timeout, log))
        finally:
            lifetime.closed(self)
            self._flusher.stop()
            self._conn.close()
            p.close()
            if self._subscription is not None:
                self._subscription._drop()
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
        lifetime.warn_dropped(self)
        getattr(self, "_flusher", NO_FLUSHER).stop()
        conn = getattr(self, "_conn", None)
        if conn is not None and conn.sock is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _forked(self) -> None:
        """In a child of ``os.fork()``: as :meth:`FrontEnd._forked
        <zeps.clients.operations.FrontEnd._forked>`; the guard and the sender thread are the
        parent's too."""
        super()._forked()
        self._guard = threading.Lock()        # a parent's thread may have held it at the fork
        self._flusher = NO_FLUSHER            # the parent's sender thread is not in the child

    def _concurrent(self, call: str):
        """The guard is taken: wait for the client's sender to let go, else raise the error."""
        if self._flusher.wait_guard():
            return
        owner = self._owner             # written by whoever holds the guard, right after taking it
        me = threading.current_thread()
        if owner is None:
            other = "another thread"
        elif owner == me.ident:
            other = f"another greenlet of thread {me.name!r}"
        else:
            other = next((f"thread {t.name!r}" for t in threading.enumerate()
                          if t.ident == owner), f"thread {owner}")
        raise ConcurrentUseError(
            f"Client used by two threads at once: thread {me.name!r} called {call}() while "
            f"{other} is inside a call on it (stream {self.stream!r}). Use one Client per "
            f"thread (or greenlet).")


def list_streams(endpoint: str = DEFAULT_ENDPOINT, *, timeout: float = 10.0,
                 context=None, curve=None) -> Tuple[str, ...]:
    """Names of the streams a broker holds, every page of them (``LIST-STREAMS-PAGE``, which
    needs no ATTACH; the broker answers from memory, a page at a time).

    Raises :class:`ValueError` for a malformed endpoint, :class:`ZepsTimeout` when no broker
    answers within ``timeout`` seconds, :class:`InvalidError` if the broker refuses.
    """
    names: list = []
    after = ""
    while True:
        page = request_once(endpoint, c.ListStreamsPage(after), c.ListStreamsPageOk,
                            timeout=timeout, context=context, curve=curve)
        names.extend(page.streams)
        if not page.next:
            return tuple(names)
        after = page.next
