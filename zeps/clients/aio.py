"""The asyncio ZEPS client: :class:`AsyncClient` (``zmq.asyncio``).

Same peering, same operations, same semantics and same errors as the blocking
:class:`~zeps.clients.Client` (see :mod:`zeps.clients`); only the waiting differs::

    from zeps.clients import AsyncClient

    async with AsyncClient("tcp://127.0.0.1:7470", "orders", confirms=True) as client:
        receipt = await client.publish("eu.fr", b"hello")
        await client.wait_for_confirms()        # or: seq = await receipt
        async for msg in client.subscribe("eu."):
            print(msg.sequence, msg.key, msg.body)

A task of the event loop (started by ``connect()`` / ``async with``) owns the socket: it hands
every frame to the :class:`~zeps.clients.peering.Peering`, sends heartbeats, reconnects, and
wakes the coroutines waiting for a reply, a CONFIRM or a message. The client may be shared by
the tasks of its loop. Every ``await`` on it is cancellation-safe: a cancelled call leaves the
client usable and consistent (a publish cancelled before it returned was not sent; a request
whose reply comes after the cancellation is matched and dropped; a subscription keeps every
message for the next reader).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Callable, Iterable, Optional, Tuple, Union

import zmq

from ..protocol import commands as c
from ..protocol.codec import FRAME_SLACK, ProtocolError, encode
from ..units import DEFAULT_ENDPOINT, TimeLike
from . import lifetime
from . import operations as ops
from .defaults import DEFAULT_CREDIT_WINDOW, DEFAULT_HEARTBEAT, LOOK_INTERVAL, WRITABLE_BATCH
from .errors import ClientClosed, ConnectionLost, ZepsError, ZepsTimeout
from .message import StreamInfo
from .operations import publish_frame
from .peering import CLOSED, ConnectionEvent
from .receipt import AsyncReceipt, done_receipt
from .requests import list_streams_answer
from .subscription import AsyncSubscription, Subscribing, subscribe_args
from .transport import Connection, asend_within, check_endpoint, zmq_for

__all__ = ["AsyncClient", "list_streams"]

log = logging.getLogger("zeps.client")

_NOBLOCK = int(zmq.NOBLOCK)
_monotonic = time.monotonic
_DONE = done_receipt(AsyncReceipt)


class AsyncClient(ops.FrontEnd):
    """A peering with a ZEPS broker, attached to one stream, for asyncio.

    The arguments are :class:`~zeps.clients.Client`'s, ``create`` (readers never create
    streams) and ``max_frame`` (the longest frame read) included; ``context`` may be a
    ``zmq.asyncio.Context`` or a plain one.
    Nothing happens until ``await client.connect()`` or ``async with AsyncClient(...) as
    client``, which ATTACH and raise :class:`~zeps.clients.InvalidError` if the broker refuses
    the stream, :class:`~zeps.clients.ZepsTimeout` if no broker answers within ``timeout``.
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
        module, ctx = zmq_for(context, asyncio=True)
        self._callbacks: set = set()         # the tasks of a coroutine on_connection callback
        if on_connection is not None:
            on_connection = self._awaiting(on_connection)
        self._conn = Connection(self._p, self.endpoint, module, ctx, on_connection, curve)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional[asyncio.Task] = None
        self._changed: Optional[asyncio.Future] = None     # set when the I/O task made progress
        self._wake: Optional[asyncio.Future] = None        # set to wake the I/O task
        self._recheck_scheduled = False
        self._next_look = 0.0
        self._send_scheduled = False

    def _awaiting(self, callback):
        """``on_connection`` as the connection calls it: a coroutine function's coroutine (as
        nats-py's callbacks) runs as a task of the loop; what it raises is logged."""
        def call(event: ConnectionEvent) -> None:
            result = callback(event)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._callbacks.add(task)
                task.add_done_callback(self._callback_done)
        return call

    def _callback_done(self, task: asyncio.Future) -> None:
        self._callbacks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("zeps: the on_connection callback failed", exc_info=task.exception())

    # ------------------------------------------------------------------ connecting, closing

    async def connect(self) -> "AsyncClient":
        """Connect and ATTACH (once; later calls wait for the same). Returns the client.
        The call that started connecting, cancelled or failed, leaves the client closed."""
        if self._p.state is CLOSED:
            raise self._p.closed_as()
        started = self._task is None
        if started:
            self._loop = asyncio.get_running_loop()
            self._conn.open()
            lifetime.watch_fork(self)
            self._conn.send_queued()
            self._task = self._loop.create_task(self._io(), name=f"zeps I/O {self.stream!r}")
        try:
            await self._run(ops.connect(self))
        except BaseException:
            if started:
                self._shutdown()
            raise
        return self

    async def close(self, timeout: Optional[float] = None) -> None:
        """Detach and close, as :meth:`Client.close` (receipts still pending fail with
        :class:`~zeps.clients.ClientClosed`). Idempotent; cancelled, it still closes."""
        p = self._p
        if p.state is CLOSED:
            return
        try:
            if self._task is not None:
                await self._run(ops.detach(self, timeout, log))
        finally:
            self._shutdown()
        err, p.error = p.error, None
        if err is not None:
            raise err

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self.close()
        else:
            try:
                await self.close(timeout=min(self.timeout, 1.0))
            except Exception:
                pass

    def __del__(self):
        conn = getattr(self, "_conn", None)
        if conn is not None and conn.sock is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _forked(self) -> None:
        """In a child of ``os.fork()``: as :meth:`FrontEnd._forked
        <zeps.clients.operations.FrontEnd._forked>`; the I/O task and the loop are the parent's
        too, and stay referenced: finalized in the child, they would unregister the sockets from
        the epoll the child shares with the parent (a parent's delivery then waited 1 s)."""
        self._parents_io = (self._task, self._loop)
        super()._forked()
        self._task = self._changed = self._wake = None

    def _shutdown(self) -> None:
        lifetime.unwatch(self)
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._conn.close()
        self._p.close()
        if self._subscription is not None:
            self._subscription._ready.clear()
        self._notify()

    # ------------------------------------------------------------------ publishing

    async def publish(self, key: str, body: Union[bytes, bytearray, memoryview, str],
                      headers=None) -> AsyncReceipt:
        """Publish one message (with ``headers``, if given), as :meth:`Client.publish`; returns its
        :class:`~zeps.clients.AsyncReceipt` (``await receipt`` for its sequence, with confirms).

        Waits only when the socket is at its high-water mark, the client is reconnecting, or
        the peering was silent for ``heartbeat`` seconds; otherwise it lets the event loop run
        every 2 ms, before sending. Cancelled, the message was not sent."""
        frame = publish_frame(key, body, headers)
        p = self._p
        if len(frame) > FRAME_SLACK:                # perhaps longer than the broker reads
            if p.frame_limit is None:
                await self._run(ops.learn_limits(self, _monotonic()))
            ops.check_frame_size(self, frame)
        if headers and p.headers_offered is False:
            ops.check_headers(self)
        now = _monotonic()
        if now >= self._next_look:
            self._next_look = now + LOOK_INTERVAL
            await asyncio.sleep(0)
            now = _monotonic()
        r = AsyncReceipt(frame, self) if p.confirms else _DONE
        if not p.publish(frame, now, r):
            now = await self._run(ops.prepare_publish(self, now))
            p.publish(frame, now, r, False)
        if p.waiting or p.queue.max_batch is not None:
            # Natural batching: the message joins the queue, which leaves when this coroutine
            # next lets the event loop run (at once for a lone publish; a loop of publishes
            # fills a batch first), or as soon as a batch's worth has gathered.
            p.queue_publish(frame)
            if len(p.queue) < WRITABLE_BATCH and not p.outbox:
                self._send_queued_soon()
            elif self._conn.writable():
                self._send_queued()
            else:
                self._kick()
        else:
            try:
                self._conn.send(frame, _NOBLOCK)
            except zmq.Again:
                p.queue_publish(frame)
                self._kick()
        if not self._recheck_scheduled:
            self._after_send()
        return r

    async def publish_batch(self, messages: Iterable[Tuple[str, Union[bytes, str]]]) -> int:
        """Publish every ``(key, body)`` in order; returns how many (as :meth:`Client.publish_batch`)."""
        n = 0
        for key, body in messages:
            await self.publish(key, body)
            n += 1
        return n

    async def flush(self, timeout: Optional[float] = None) -> None:
        """Wait until the broker has processed every publish sent so far (as :meth:`Client.flush`)."""
        await self._run(ops.flush(self, timeout))

    async def wait_for_confirms(self, timeout: Optional[float] = None) -> int:
        """Wait until every publish so far is confirmed durable; the last confirmed sequence
        (as :meth:`Client.wait_for_confirms`)."""
        return await self._run(ops.wait_for_confirms(self, timeout))

    async def _wait_receipt(self, receipt: AsyncReceipt, timeout: Optional[float]) -> None:
        await self._run(ops.wait_receipt(self, receipt, timeout))

    # ------------------------------------------------------------------ subscribing, requests

    def subscribe(self, pattern: Union[str, Iterable[str]] = "", *, from_seq: Optional[int] = None,
                  from_time: Optional[TimeLike] = None, live: bool = False,
                  timeout: Optional[float] = None) -> Subscribing:
        """Subscribe, as :meth:`Client.subscribe` (same arguments, same errors, which come when
        the subscription is made: :class:`~zeps.clients.errors.NoStream` for a stream that does
        not exist). Returns a :class:`Subscribing`: ``await`` it for the client's
        :class:`AsyncSubscription`, or iterate it directly: ``async for msg in
        client.subscribe("eu.")``. With no start point it begins at the first message the
        stream keeps, where ``zeps subscribe`` begins live (``live=True`` for that)."""
        patterns = subscribe_args(pattern, from_seq, from_time, live, timeout)
        return Subscribing(self, (patterns, from_seq, from_time, live, timeout))

    async def _subscribe(self, patterns, from_seq, from_time, live, timeout) -> AsyncSubscription:
        await self._run(ops.subscribe(self, patterns, from_seq, from_time, live))
        if self._subscription is None:
            self._subscription = AsyncSubscription(self)
        if timeout is not None:
            self._subscription.timeout = timeout
        return self._subscription

    async def info(self, timeout: Optional[float] = None) -> StreamInfo:
        """``STREAM-INFO`` for the attached stream (as :meth:`Client.info`)."""
        return await self._run(ops.info(self, timeout))

    async def seq_at(self, when: TimeLike, timeout: Optional[float] = None) -> int:
        """``SEQ-AT-TIME`` (as :meth:`Client.seq_at`)."""
        return await self._run(ops.seq_at(self, when, timeout))

    async def list_streams(self, timeout: Optional[float] = None) -> Tuple[str, ...]:
        """``LIST-STREAMS`` (as :meth:`Client.list_streams`)."""
        return await self._run(ops.list_streams(self, timeout))

    async def snapshot(self, prefix="", timeout: Optional[float] = None):
        """As :meth:`Client.snapshot` (a :class:`~zeps.clients.snapshot.Snapshot`)."""
        from .snapshot_io import aread_snapshot
        conn = self._own_connection()
        return await aread_snapshot(self.endpoint, self.stream, prefix,
                                    timeout=self.timeout if timeout is None else timeout,
                                    context=conn.context, curve=conn.curve)

    def iter_snapshot(self, prefix="", timeout: Optional[float] = None):
        """As :meth:`Client.iter_snapshot`, for ``async for``."""
        from .snapshot_io import AsyncSnapshotIterator
        conn = self._own_connection()
        return AsyncSnapshotIterator(self.endpoint, self.stream, prefix,
                                     timeout=self.timeout if timeout is None else timeout,
                                     context=conn.context, curve=conn.curve)

    # ------------------------------------------------------------------ durable consumers

    async def add_consumer(self, name: str, patterns=("",), *, timeout: Optional[float] = None,
                           **settings) -> int:
        """As :meth:`Client.add_consumer`."""
        from .consumer_admin import add
        return await self._run(add(self, name, patterns, timeout, **settings))

    def consume(self, name: str, *, timeout: Optional[float] = None, batch: int = 512):
        """As :meth:`Client.consume`: an :class:`~zeps.clients.consumer_io.AsyncConsumer`, which
        joins on ``async with`` (or the first ``async for`` step, or ``await it.join()``)."""
        from .consumer_admin import member_options
        from .consumer_io import AsyncConsumer
        opts = member_options(self, None)
        opts["join_timeout"] = opts.pop("timeout")
        return AsyncConsumer(name=name, timeout=timeout, batch=batch, **opts)

    async def consumer_info(self, name: str, timeout: Optional[float] = None) -> dict:
        from .consumer_admin import info
        return await self._run(info(self, name, timeout))

    async def consumers(self, timeout: Optional[float] = None) -> Tuple[str, ...]:
        from .consumer_admin import names
        return await self._run(names(self, timeout))

    async def delete_consumer(self, name: str, timeout: Optional[float] = None) -> None:
        from .consumer_admin import delete
        await self._run(delete(self, name, timeout))

    # ------------------------------------------------------------------ driving operations

    async def _run(self, steps):
        """Drive an operation of :mod:`zeps.clients.operations`: await each of its waits."""
        try:
            wait = next(steps)
            while True:
                wait = steps.send(await self._until(*wait))
        except StopIteration as done:
            if self._p.need_reconnect is not None:
                self._kick()       # the operation decided to reconnect (bounds.Bounds.regrow)
            return done.value

    async def _until(self, cond, deadline: Optional[float]) -> bool:
        """Wait until ``cond()`` holds (True) or ``deadline`` passes (False)."""
        if cond():
            return True
        if self._task is None:
            if self._p.state is CLOSED:
                raise self._p.closed_as()
            raise ZepsError("the AsyncClient is not connected: use `async with AsyncClient(...)` "
                            "or `await client.connect()` first")
        waited = False
        while True:
            timeout = None
            if deadline is not None:
                timeout = deadline - _monotonic()
                if timeout <= 0 and waited:
                    return False
            if timeout is not None and timeout <= 0:
                # A deadline already past (timeout=0): let the loop run once all the same, as
                # the blocking client services its socket, so that a loop of such calls
                # (poll(0), wait_for_confirms(0)) lets the I/O task bring what came.
                await asyncio.sleep(0)
            else:
                changed = self._changed
                if changed is None:
                    changed = self._changed = self._loop.create_future()
                await asyncio.wait((changed,), timeout=timeout)
            waited = True
            if cond():
                return True
            if self._p.state is CLOSED:
                if self._p.forked_from is not None:
                    raise self._p.closed_as()
                raise ClientClosed("the client was closed")

    def _send_queued(self) -> None:
        """Send what the peering queued, as far as the socket takes it (no waiting); the I/O
        task sends the rest when the socket is writable again."""
        p = self._p
        if p.waiting and self._conn.sock is not None:
            self._conn.send_queued()
            self._after_send()
            if p.waiting:
                self._kick()       # the socket is full: the I/O task waits until it can send

    def _send_queued_soon(self) -> None:
        """:meth:`_send_queued` once the event loop runs again (natural batching)."""
        if not self._send_scheduled:
            self._send_scheduled = True
            self._loop.call_soon(self._send_queued_now)

    def _send_queued_now(self) -> None:
        self._send_scheduled = False
        self._send_queued()

    def _after_send(self) -> None:
        """A send on the socket can swallow the edge its file descriptor signals incoming
        frames with (ZMQ_FD is edge-triggered): once per loop iteration after sends, look at
        the socket's events and wake the I/O task if anything is waiting."""
        if not self._recheck_scheduled:
            self._recheck_scheduled = True
            self._loop.call_soon(self._recheck)

    def _recheck(self) -> None:
        self._recheck_scheduled = False
        if self._conn.sock is not None and self._conn.readable():
            self._kick()

    def _kick(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    async def _io(self) -> None:
        """The I/O task: service the socket, wake waiters, sleep until the socket or a timer
        (or a coroutine that sent something) needs it."""
        conn, p, loop = self._conn, self._p, self._loop
        try:
            while p.state is not CLOSED and conn.poller is not None:
                conn.service()
                self._notify()
                now = _monotonic()
                wait = max(min(p.next_timer(now) - now, 1.0), 0.0)
                wake = self._wake = loop.create_future()
                poll = conn.arm().poll(int(wait * 1000) + 1)
                try:
                    await asyncio.wait((poll, wake), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    self._wake = None
                    if poll.done():
                        if not poll.cancelled():
                            poll.exception()     # retrieved: a closed socket's poll may fail
                    else:
                        poll.cancel()
        except asyncio.CancelledError:
            if p.state is not CLOSED and p.forked_from is None:
                # Cancelled by another than close() (a shutdown cancelling every task, the end
                # of asyncio.run): nothing reads the socket any more, say so to every waiter.
                p.abort(ConnectionLost("the client's I/O task was cancelled (close the "
                                       "client before cancelling its tasks or ending its loop)"))
                self._notify()
            raise
        except Exception as e:     # a bug or a broken context: say so to every waiter
            if p.forked_from is not None:      # the parent's task, finalized in a forked child
                return
            log.exception("zeps: the I/O task of %s (stream %r) failed", self.endpoint, self.stream)
            p.abort(ConnectionLost(f"the client's I/O failed: {e!r}"))
            self._notify()


async def list_streams(endpoint: str = DEFAULT_ENDPOINT, *, timeout: float = 10.0,
                       context=None) -> Tuple[str, ...]:
    """Names of the streams a broker holds, as :func:`zeps.clients.list_streams`, for asyncio."""
    check_endpoint(endpoint)
    _, ctx = zmq_for(context, asyncio=True)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as e:
            raise ValueError(f"bad endpoint {endpoint!r}: {e}") from None
        deadline = _monotonic() + timeout
        if not await asend_within(sock, encode(c.ListStreams()), timeout):
            raise ZepsTimeout(f"no answer from a ZEPS broker at {endpoint} within "
                              f"{timeout:g}s (is it running?)")
        while True:
            left = deadline - _monotonic()
            if left <= 0:
                raise ZepsTimeout(f"no answer from a ZEPS broker at {endpoint} within "
                                  f"{timeout:g}s (is it running?)")
            if not await sock.poll(int(left * 1000) + 1):
                continue
            try:
                names = list_streams_answer(await sock.recv())
            except ProtocolError as e:
                raise ZepsError(f"bad answer from {endpoint}: {e}") from None
            if names is not None:
                return names
    finally:
        sock.close(0)
