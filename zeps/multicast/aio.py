"""The asyncio multicast receiver: :class:`AsyncMulticastSubscriber`.

The same receiver as :class:`~zeps.multicast.subscriber.MulticastSubscriber` — the pure
:class:`~zeps.multicast.receiver.Receiver` makes every decision (gaps, reordering, duplicates,
the broker feed, head checks, fallback and return) — with asyncio I/O: the group's socket is read
through the event loop (``loop.add_reader``), history, repairs and fallback come from an
:class:`~zeps.clients.AsyncClient` subscription, and head checks are STREAM-INFO on a second
:class:`~zeps.clients.AsyncClient` (closed when unused for a while)::

    async with AsyncMulticastSubscriber("239.1.2.3:5000", "tcp://127.0.0.1:7470", "orders",
                                        "eu.") as sub:
        async for msg in sub:
            print(msg.sequence, msg.key, msg.body)

Cancelling an ``await sub.next()`` loses nothing: a message leaves the receiver only when it is
returned.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

from zeps.clients import AsyncClient, ConnectionLost, ZepsError, ZepsTimeout
from zeps.clients.defaults import DEFAULT_CREDIT_WINDOW, DEFAULT_HEARTBEAT
from zeps.clients import lifetime
from zeps.clients.errors import ClientClosed, StreamGone
from zeps.clients.message import Message
from zeps.units import TimeLike

from .receiver import Receiver, ReceiverConfig
from .subscriber import (DRAIN, FallbackLog, ReceiverShell, check_start, disable_forked,
                         drain_group, same_stream, start_after)
from .transport import DEFAULT_RCVBUF, check_interface, open_receiver, parse_group

__all__ = ["AsyncMulticastSubscriber"]

log = logging.getLogger("zeps.multicast")


class AsyncMulticastSubscriber(ReceiverShell):
    """Messages of ``stream`` matching ``pattern``, live from multicast ``group``, repaired from
    the broker at ``endpoint``; the arguments and guarantees of
    :class:`~zeps.multicast.subscriber.MulticastSubscriber`. Use ``async with`` (or
    ``await sub.start()`` and ``await sub.close()``)."""

    def __init__(self, group, endpoint: str, stream: str, pattern: str = "",
                 from_seq: Optional[int] = None, *, from_time: Optional[TimeLike] = None,
                 live: bool = False, interface: Optional[str] = None, timeout: float = 10.0,
                 heartbeat: float = DEFAULT_HEARTBEAT, credit_window: int = DEFAULT_CREDIT_WINDOW,
                 rcvbuf: int = DEFAULT_RCVBUF, config: Optional[ReceiverConfig] = None,
                 curve=None):
        self.group = parse_group(group)
        self.interface = check_interface(interface)
        check_start(pattern, from_seq, from_time, live)
        self.endpoint, self.stream, self.pattern = endpoint, stream, pattern
        self._start = (from_seq, from_time, live)
        self._client_args = {"timeout": timeout, "heartbeat": heartbeat, "curve": curve,
                             "credit_window": credit_window}
        self._rcvbuf = rcvbuf
        self._config = config
        self._core: Optional[Receiver] = None
        self._sock = None
        self._readable = asyncio.Event()
        self._feed: Optional[AsyncClient] = None
        self._feed_sub = None
        self._feed_retry_at = 0.0
        self._checker: Optional[AsyncClient] = None
        self._checker_used = 0.0
        self._deceived = 0
        self._fallbacks = FallbackLog()
        self._handed = 0
        self._closed = False
        self._forked_error: Optional[ClientClosed] = None
        self._incarnation: Optional[int] = None
        self._gone: Optional[StreamGone] = None

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> "AsyncMulticastSubscriber":
        """Find the start position from the broker and join the group."""
        from_seq, from_time, live = self._start
        async with AsyncClient(self.endpoint, self.stream, **self._client_args) as c:
            head = (await c.info()).last
            self._incarnation = c.incarnation
            at_time = None if from_time is None else await c.seq_at(from_time)
        after = start_after(head, live, at_time, from_seq)
        self._sock = open_receiver(self.group, self.interface, self._rcvbuf)
        self._core = Receiver(self.stream, self.pattern, start_after=after, head=head,
                              now=time.monotonic(), config=self._config)
        self._handed = after
        asyncio.get_running_loop().add_reader(self._sock.fileno(), self._readable.set)
        lifetime.watch_fork(self)
        return self

    def _forked(self) -> None:
        disable_forked(self)

    async def close(self) -> None:
        """Leave the group and close the feed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        lifetime.unwatch(self)
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
        await self._close_feed()
        await self._close_checker()

    async def __aenter__(self) -> "AsyncMulticastSubscriber":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ reading
    async def next(self, timeout: Optional[float] = None) -> Message:
        """The next message; :class:`ZepsTimeout` if none comes within ``timeout`` seconds."""
        msg = await self.poll(timeout)
        if msg is None:
            raise ZepsTimeout(f"no message on stream {self.stream!r} within {timeout:g}s")
        return msg

    async def poll(self, timeout: Optional[float] = 0.0) -> Optional[Message]:
        """The next message, or ``None`` if none comes within ``timeout`` seconds."""
        if self._closed or self._core is None:
            raise self._forked_error or ClientClosed("the multicast subscriber is closed (or "
                                                     "not started)")
        if self._gone is not None:
            raise self._gone
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = self._hand()
            if msg is not None:
                return msg
            now = time.monotonic()
            await self._reconcile(now)
            if core.ready:                  # a head check let messages through
                continue
            wait = self._wait(now, deadline)
            if wait is None:
                return None
            await self._step(wait)

    def __aiter__(self) -> "AsyncMulticastSubscriber":
        return self

    async def __anext__(self) -> Message:
        if self._closed:
            if self._forked_error is not None:
                raise self._forked_error
            raise StopAsyncIteration
        return await self.next(None)

    # ------------------------------------------------------------------ I/O
    async def _step(self, wait: float) -> None:
        core = self._core
        if self._feed_sub is not None:
            got = await self._read_feed(0.0) + self._read_group()
            if not got and self._feed_sub is not None:
                await self._wait_any(min(wait, 0.005))
        else:
            if self._feed is None and core.want_feed:
                wait = min(wait, max(self._feed_retry_at - time.monotonic(), 0.0))
            await self._wait_any(wait)
            self._read_group()
        core.tick(time.monotonic())

    async def _wait_any(self, wait: float) -> None:
        """Until the group's socket is readable, a feed message is there, or ``wait`` passes."""
        if self._readable.is_set():
            return
        waiters = [asyncio.ensure_future(self._readable.wait())]
        if self._feed_sub is not None:
            waiters.append(asyncio.ensure_future(self._feed_ready()))
        try:
            await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        if len(waiters) > 1 and waiters[1].done() and not waiters[1].cancelled():
            msg = waiters[1].result()
            if msg is not None:
                self._core.on_feed_message(msg, time.monotonic())

    async def _feed_ready(self):
        try:
            return await self._feed_sub.poll(None)
        except ConnectionLost:
            return None

    def _read_group(self) -> int:
        self._readable.clear()
        n = drain_group(self._core, self._sock)
        if n == DRAIN:
            self._readable.set()                  # more may be waiting
        return n

    async def _read_feed(self, wait: float) -> int:
        sub, core = self._feed_sub, self._core
        n = 0
        try:
            msg = await sub.poll(wait)
            while msg is not None:
                core.on_feed_message(msg, time.monotonic())
                n += 1
                if not core.want_feed:
                    break
                msg = await sub.poll(0.0)
        except ConnectionLost as e:
            await self._close_feed()
            self._feed_lost(e)
        return n

    async def _reconcile(self, now: float) -> None:
        want = self._core.want_feed
        if want and self._feed is None and now >= self._feed_retry_at:
            feed = AsyncClient(self.endpoint, self.stream, **self._client_args)
            try:
                await feed.connect()
                same_stream(self, feed)
                self._feed_sub = await feed.subscribe(self.pattern, from_seq=self._core.feed_from)
            except BaseException as e:
                self._feed_sub = None
                await _close(feed)
                self._feed_failed(e)
                return
            self._feed = feed
        elif not want and self._feed is not None:
            await self._close_feed()
        if self._core.want_check:
            await self._check(now)
        elif self._checker_idle(now):
            await self._close_checker()
        self._note()

    async def _check(self, now: float) -> None:
        """Ask the broker for the stream's last sequence: multicast entries up to it may go."""
        core = self._core
        core.check_started(now)
        try:
            if self._checker is None:
                checker = AsyncClient(self.endpoint, self.stream, **self._client_args)
                try:
                    await checker.connect()
                    same_stream(self, checker)
                except BaseException:
                    await _close(checker)
                    raise
                self._checker = checker
            last = (await self._checker.info()).last
        except (ZepsTimeout, ConnectionLost) as e:
            await self._close_checker()
            self._check_lost(e)
            return
        except BaseException:
            core.check_failed(time.monotonic())
            raise
        self._checker_used = time.monotonic()
        core.on_broker_head(last, self._checker_used)

    async def _close_feed(self) -> None:
        feed, self._feed, self._feed_sub = self._feed, None, None
        await _close(feed)

    async def _close_checker(self) -> None:
        checker, self._checker = self._checker, None
        await _close(checker)


async def _close(feed: Optional[AsyncClient]) -> None:
    if feed is not None:
        try:
            await feed.close(timeout=1.0)
        except ZepsError as e:
            log.debug("zeps multicast: closing the feed: %s", e)
