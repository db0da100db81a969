"""The I/O of a consumer member (:mod:`zeps.clients.consumer`): a DEALER socket of its own (and
its monitor, which tells at once that the connection closed), blocking (:class:`Consumer`) or
asyncio (:class:`AsyncConsumer`). ``Client.consume()`` / ``AsyncClient.consume()`` make them::

    with client.consume("billing") as msgs:         # joined (CONSUME-OK) when it returns
        for m in msgs:
            handle(m)
            m.ack()                                 # queued; sent with the next ones
        # or: for batch in msgs.batches(): ...; each batch's acks leave as one ACK

    async with client.consume("billing") as msgs:
        async for m in msgs:
            handle(m)
            m.ack()

``timeout``: the most seconds ``next()`` (each step of ``for``) waits for a message
(:class:`~zeps.clients.errors.ZepsTimeout`; None: for ever), and the wait for the broker's
answers while joining. If the connection drops, the member joins again on a new one (as many
times as it takes, like a client's reconnects): the broker gives every message not
acknowledged again, to this member or another (at-least-once); the messages received before and
not acknowledged are never acknowledged by this member (their ``ack()`` does nothing).
``close()`` (or leaving the ``with``) sends the acknowledgements queued and leaves the consumer
(DETACH): what it held unacknowledged goes to the other members at once. A member made before
``os.fork()`` cannot be used in the child (:class:`~zeps.clients.errors.ClientForked`: make a
new one there; :mod:`zeps.clients.lifetime`).
"""
from __future__ import annotations

import struct
import time
from typing import Iterator, List, Optional

import zmq

from . import lifetime
from .consumer import JOINED, ConsumerMessage, ConsumerPeering
from .delivery import TAKE_LIMIT
from .errors import ZepsTimeout
from .transport import check_endpoint, zmq_for

__all__ = ["Consumer", "AsyncConsumer"]

_MON_EVENT = struct.Struct("=HI")
_monotonic = time.monotonic
#: How long ``close()`` waits for DETACH-OK (the broker has every acknowledgement sent before).
#: How long (ms) a consumer closing unanswered lets its queued frames go out.
CLOSE_LINGER = 1000
CLOSE_WAIT = 2.0


class _Base:
    def __init__(self, endpoint: str, stream: str, name: str, *, timeout: Optional[float] = None,
                 heartbeat: float = 20.0, window: int = 8 << 20, batching: bool = True,
                 timestamps: bool = True, headers: bool = True, context=None, curve=None,
                 batch: int = TAKE_LIMIT, join_timeout: float = 10.0):
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError("batch must be a positive number of messages")
        if timeout is not None and not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.endpoint = check_endpoint(endpoint)
        self.member = ConsumerPeering(stream, name, window=window, heartbeat=heartbeat,
                                      timeout=join_timeout, batching=batching, headers=headers,
                                      timestamps=timestamps, now=_monotonic())
        self.member.wake = self._send_now
        self.timeout = timeout
        self.batch = batch
        self.context = context
        self.curve = curve
        self._sock = self._mon = self._raw = self._poller = None

    @property
    def name(self) -> str:
        return self.member.name

    @property
    def stream(self) -> str:
        return self.member.stream

    @property
    def reconnects(self) -> int:
        """How many times the member joined again after a lost connection."""
        return max(0, self.member.joins - 1)

    def _open(self, asyncio: bool) -> None:
        module, ctx = zmq_for(self.context, asyncio=asyncio)
        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.setsockopt(zmq.RCVHWM, 0)              # credit bounds what the broker sends
        if self.curve is not None:
            self.curve.apply(raw)
        mon = raw.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            raw.connect(self.endpoint)
        except zmq.ZMQError as e:
            raw.disable_monitor()
            mon.close(0)
            raw.close(0)
            raise ValueError(f"bad endpoint {self.endpoint!r}: {e}") from None
        self._raw = (raw, mon)
        lifetime.watch_fork(self)
        self._poller = module.Poller()
        self._poller.register(raw, zmq.POLLIN)
        self._poller.register(mon, zmq.POLLIN)
        if asyncio:       # NOBLOCK work through synchronous views; the asyncio ones to wait
            self._sock = zmq.Socket.shadow(raw.underlying)
            self._mon = zmq.Socket.shadow(mon.underlying)
        else:
            self._sock, self._mon = raw, mon

    def _close_socket(self, linger: int = 0) -> None:
        if self._raw is not None:
            raw, mon = self._raw
            self._raw = None
            self._sock = self._mon = self._poller = None
            try:
                raw.disable_monitor()
            except zmq.ZMQError:
                pass
            mon.close(0)
            raw.close(linger)

    def _forked(self) -> None:
        """In a child of ``os.fork()``: the socket is the parent's (:mod:`zeps.clients.lifetime`);
        forgotten without a call on it, and every call raises
        :class:`~zeps.clients.errors.ClientForked`. The sockets stay referenced, so that nothing
        in the child finalizes them."""
        self._abandoned = (self._raw, self._sock, self._mon, self._poller)
        lifetime.disown(*(self._raw or ()))
        self._raw = None
        self._sock = self._mon = self._poller = None
        self.member.forked(self._pid)

    def _send_now(self) -> None:
        """Send what the member queued, as far as the socket takes it without waiting."""
        m, sock = self.member, self._sock
        if sock is None or not m.outgoing:
            return
        frames = m.outgoing
        sent = 0
        try:
            for frame in frames:
                sock.send(frame, zmq.NOBLOCK)
                sent += 1
        except zmq.Again:
            pass
        del frames[:sent]
        if sent:
            m.last_send = _monotonic()

    def _service(self) -> None:
        """Read what came (monitor events, frames), rejoin when due, run timers, send."""
        m, now = self.member, _monotonic()
        if self._mon is not None:
            while True:
                try:
                    parts = self._mon.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if parts and len(parts[0]) >= 6 and \
                        _MON_EVENT.unpack_from(parts[0])[0] == zmq.EVENT_DISCONNECTED:
                    m.lost("connection closed by the broker", now)
        if self._sock is not None and m.need_rejoin is None:
            for _ in range(10_000):
                try:
                    frame = self._sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                m.receive(frame, now)
        if m.need_rejoin is not None:
            if now >= m.rejoin_at:
                self._close_socket()
                self._open(self._asyncio)
                m.rejoin(now)
        else:
            m.tick(now)
        self._send_now()

    def _ready(self, joined_only: bool) -> bool:
        m = self.member
        if m.error is not None or m.closed:
            return True
        if joined_only:
            return m.need_rejoin is None and m.state is JOINED
        return bool(m.buffered)

    def _check(self) -> None:
        m = self.member
        if m.error is not None:
            raise m.error

    def _pump_wait(self, joined_only: bool, deadline: Optional[float]) -> Optional[float]:
        """A step of ``_pump``: what came served; then the seconds to wait for more, or None:
        done (ready, or ``deadline`` passed: :meth:`_ready` says which)."""
        self._service()
        if self._ready(joined_only):
            return None
        left = None if deadline is None else deadline - _monotonic()
        if left is not None and left <= 0:
            return None
        return self._wait_for(left)

    def _wait_for(self, timeout: Optional[float]) -> float:
        """Seconds to poll for: until the member's next timer, the deadline, or 1 s."""
        now = _monotonic()
        wait = self.member.next_timer(now) - now
        if timeout is not None:
            wait = min(wait, timeout)
        return max(0.0, min(wait, 1.0))

    def _timed_out(self) -> ZepsTimeout:
        return ZepsTimeout(f"consumer {self.name!r} of stream {self.stream!r}: no message "
                           f"within {self.timeout:g}s")

    def _none(self, end: type) -> Exception:
        """What a read that got nothing raises: ``end`` (the end of the iteration, blocking or
        asyncio) once the member is closed, else :class:`ZepsTimeout`."""
        return end() if self.member.closed else self._timed_out()

    def _taken(self, limit: int, flush: bool) -> Optional[List[ConsumerMessage]]:
        """A step of a read: the messages the member has for the application (``limit`` at
        most; its error raised), its frames sent; None: nothing yet, wait for more."""
        m = self.member
        self._check()
        out = m.take(limit, _monotonic(), flush)
        self._send_now()
        return out if out or m.closed else None

    def _leave(self) -> bool:
        """The start of ``close()``: the member leaves (DETACH queued); False if it had."""
        m = self.member
        if m.closed:
            return False
        m.close(_monotonic())
        return True

    def _detaching(self, timeout: float) -> Iterator[float]:
        """``close()``'s wait for DETACH-OK (connected): what was queued sent, then each
        deadline to pump to (0.1 s apart) until the broker answers or ``timeout`` passes."""
        m = self.member
        if self._raw is not None and not m.closed:
            self._send_now()
            deadline = _monotonic() + timeout
            while not m.closed and _monotonic() < deadline:
                yield min(deadline, _monotonic() + 0.1)

    def _left(self) -> None:
        """The end of ``close()``, answered or not."""
        m = self.member
        # Not answered in time (a loaded broker): what was queued (the last ACK, DETACH) may
        # still be in the socket; it gets a moment to go out rather than being dropped.
        linger = 0 if m.closed else CLOSE_LINGER
        m.finish()
        self._close_socket(linger)
        lifetime.unwatch(self)


class Consumer(_Base):
    """Blocking: a member of consumer ``name`` (see the module docs). :meth:`join` (done by
    ``Client.consume``) connects and waits for CONSUME-OK; then iterate, :meth:`next`,
    :meth:`poll`, :meth:`next_batch` or :meth:`batches`."""

    _asyncio = False

    def join(self) -> "Consumer":
        """Connect and join (CONSUME); raises :class:`NoStream`, :class:`InvalidError` (no such
        consumer, ...) or :class:`ZepsTimeout`."""
        if self._raw is None and not self.member.closed:
            self._open(False)
            self._pump(True, None)
            self._check()
        return self

    def _pump(self, joined_only: bool, deadline: Optional[float]) -> bool:
        while True:
            wait = self._pump_wait(joined_only, deadline)
            if wait is None:
                return self._ready(joined_only)
            if self._raw is not None:
                self._poller.poll(int(wait * 1000) + 1)
            else:
                time.sleep(wait)

    def _take(self, limit: int, timeout: Optional[float], flush: bool) -> List[ConsumerMessage]:
        self.join()
        deadline = None if timeout is None else _monotonic() + timeout
        while True:
            out = self._taken(limit, flush)
            if out is not None:
                return out
            if not self._pump(False, deadline):
                return []

    def poll(self, timeout: Optional[float] = None) -> Optional[ConsumerMessage]:
        """The next message, or None after ``timeout`` seconds (None: the consumer's)."""
        out = self._take(1, self.timeout if timeout is None else timeout, False)
        return out[0] if out else None

    def next(self, timeout: Optional[float] = None) -> ConsumerMessage:
        """The next message; :class:`ZepsTimeout` after ``timeout`` (None: the consumer's)."""
        m = self.poll(timeout)
        if m is None:
            raise self._none(StopIteration)
        return m

    def next_batch(self, timeout: Optional[float] = None) -> List[ConsumerMessage]:
        """The messages buffered (at least one, at most ``batch``); the acknowledgements of the
        batch before leave first, as one ACK. ZepsTimeout as :meth:`next`."""
        out = self._take(self.batch, self.timeout if timeout is None else timeout, True)
        if not out:
            raise self._none(StopIteration)
        return out

    def __iter__(self):
        return self

    def __next__(self) -> ConsumerMessage:
        return self.next()

    def batches(self):
        """Lists of messages, as they come (see :meth:`next_batch`)."""
        while True:
            try:
                yield self.next_batch()
            except StopIteration:
                return

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Send the acknowledgements queued, leave the consumer (DETACH) and close. Idempotent."""
        if not self._leave():
            return
        try:
            for until in self._detaching(timeout):
                self._pump(False, until)
        finally:
            self._left()

    def __enter__(self) -> "Consumer":
        return self.join()

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_raw", None) is not None:
            try:
                self._close_socket()
            except Exception:
                pass


class AsyncConsumer(_Base):
    """asyncio: ``async with client.consume(name) as msgs: async for m in msgs`` (also
    ``await msgs.next()``, ``msgs.batches()`` for ``async for``)."""

    _asyncio = True

    async def join(self) -> "AsyncConsumer":
        if self._raw is None and not self.member.closed:
            self._open(True)
            await self._pump(True, None)
            self._check()
        return self

    async def _pump(self, joined_only: bool, deadline: Optional[float]) -> bool:
        import asyncio
        while True:
            wait = self._pump_wait(joined_only, deadline)
            if wait is None:
                return self._ready(joined_only)
            if self._raw is None:
                await asyncio.sleep(wait)
                continue
            await self._poller.poll(int(wait * 1000) + 1)

    async def _take(self, limit: int, timeout: Optional[float], flush: bool):
        await self.join()
        deadline = None if timeout is None else _monotonic() + timeout
        while True:
            out = self._taken(limit, flush)
            if out is not None:
                return out
            if not await self._pump(False, deadline):
                return []

    async def poll(self, timeout: Optional[float] = None) -> Optional[ConsumerMessage]:
        out = await self._take(1, self.timeout if timeout is None else timeout, False)
        return out[0] if out else None

    async def next(self, timeout: Optional[float] = None) -> ConsumerMessage:
        m = await self.poll(timeout)
        if m is None:
            raise self._none(StopAsyncIteration)
        return m

    async def next_batch(self, timeout: Optional[float] = None) -> List[ConsumerMessage]:
        out = await self._take(self.batch, self.timeout if timeout is None else timeout, True)
        if not out:
            raise self._none(StopAsyncIteration)
        return out

    def __aiter__(self):
        return self

    async def __anext__(self) -> ConsumerMessage:
        return await self.next()

    async def batches(self):
        while True:
            try:
                yield await self.next_batch()
            except StopAsyncIteration:
                return

    async def close(self, timeout: float = CLOSE_WAIT) -> None:
        if not self._leave():
            return
        try:
            for until in self._detaching(timeout):
                await self._pump(False, until)
        finally:
            self._left()

    async def __aenter__(self) -> "AsyncConsumer":
        return await self.join()

    async def __aexit__(self, *exc) -> None:
        await self.close()
