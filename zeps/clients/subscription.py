"""The consumer side of a client: :class:`Subscription` (blocking) and :class:`AsyncSubscription`.

Both hand out messages from a small ready queue that they fill from the peering a batch at a
time (``operations.fill``); what they share is in :class:`_Messages`.
"""
from __future__ import annotations

from collections import deque
from typing import Iterator, List, Optional, Tuple

from . import operations as ops
from .errors import ClientClosed, ZepsTimeout
from .message import Message

__all__ = ["Subscription", "AsyncSubscription", "Subscribing", "subscribe_args"]


def subscribe_args(pattern, from_seq, from_time, live, timeout) -> List[str]:
    """Check the arguments of ``subscribe()`` (both clients); return the patterns as a list."""
    if sum((from_seq is not None, from_time is not None, bool(live))) > 1:
        raise ValueError("give at most one of from_seq, from_time, live")
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    if not patterns:
        raise ValueError("no pattern given")
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(f"pattern must be str, not {type(p).__name__}")
        if len(p.encode("utf-8")) > 255:
            raise ValueError(f"pattern longer than 255 bytes: {p[:40]!r}...")
    if from_seq is not None and (isinstance(from_seq, bool) or not isinstance(from_seq, int)
                                 or from_seq < 0):
        raise ValueError("from_seq must be an integer >= 0")
    if timeout is not None and not timeout > 0:
        raise ValueError("timeout must be a positive number of seconds")
    return patterns


class _Messages:
    """What both subscriptions share: their client, their ready queue, their position."""

    __slots__ = ("_client", "timeout", "_ready", "_position")

    def __init__(self, client):
        self._client = client
        #: Seconds each step of iterating may wait (None: for ever).
        self.timeout: Optional[float] = None
        self._ready: deque = deque()        # taken from the client, not yet handed out
        self._position = 0

    @property
    def client(self):
        """The client this subscription reads from."""
        return self._client

    @property
    def patterns(self) -> Tuple[str, ...]:
        """Patterns subscribed so far (OR-ed)."""
        return tuple(self._client._p.patterns)

    @property
    def position(self) -> int:
        """Sequence of the last message handed to the application (0 if none yet)."""
        return self._position

    @property
    def buffered(self) -> int:
        """Messages received from the broker and not yet read by the application."""
        return len(self._client._p.buffer) + len(self._ready)

    def _timed_out(self, timeout) -> ZepsTimeout:
        return ZepsTimeout(f"no message on stream {self._client.stream!r} within {timeout:g}s")

    def __repr__(self) -> str:
        return (f"<zeps.{type(self).__name__} stream={self._client.stream!r} "
                f"patterns={self.patterns!r} position={self.position}>")


class Subscription(_Messages):
    """Messages of a client's subscriptions, in strictly increasing sequence order.

    Obtained from :meth:`Client.subscribe`; a client has exactly one Subscription, whatever the
    number of patterns (a message matching several patterns comes once). Three ways to read:

    * ``for msg in sub:`` -- blocks for each message; ends (``StopIteration``) once the client
      is closed. With ``sub.timeout`` set (``client.subscribe(..., timeout=5)``), a step that
      waits longer than that raises :class:`ZepsTimeout` instead of blocking for ever;
    * ``sub.next(timeout=None)`` -- the next :class:`Message`, or :class:`ZepsTimeout` after
      ``timeout`` seconds (``None`` = wait for ever);
    * ``sub.poll(timeout=0.0)`` -- the next :class:`Message`, or ``None`` after ``timeout``.

    Reading is what grants the broker credit: the client tops the credit up as messages are
    handed to you, so reading slowly makes the broker replay from the journal rather than
    queue. (The subscription takes received messages from the client a few dozen at a time
    and hands them out one by one.) Errors of the client (for example
    :class:`~zeps.clients.InvalidError`) are raised from these calls too.
    """

    __slots__ = ()

    def next(self, timeout: Optional[float] = None) -> Message:
        """Return the next message; raise :class:`ZepsTimeout` if none comes within ``timeout``
        seconds (``None``: wait for ever)."""
        msg = self.poll(timeout)
        if msg is None:
            raise self._timed_out(timeout)
        return msg

    def poll(self, timeout: Optional[float] = 0.0) -> Optional[Message]:
        """Return the next message, or ``None`` if none comes within ``timeout`` seconds."""
        ready = self._ready
        while True:
            try:
                msg = ready.popleft()
                break
            except IndexError:              # empty (perhaps emptied by another reader)
                if not self._client._fill(ready, timeout):
                    return None
        self._position = msg.sequence
        return msg

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        try:
            msg = self._ready.popleft()
        except IndexError:
            try:
                return self.next(self.timeout)
            except ClientClosed:
                raise StopIteration from None
        self._position = msg.sequence
        return msg

    def close(self) -> None:
        """Close the underlying client (a subscription cannot be cancelled alone in ZEPS/1)."""
        self._client.close()


class Subscribing:
    """What :meth:`~zeps.clients.AsyncClient.subscribe` returns: ``await`` it to make the subscription (its
    value is the client's :class:`AsyncSubscription`), or iterate it with ``async for``, which
    makes the subscription first. A cancelled ``await`` is retried by the next one."""

    __slots__ = ("_client", "_args", "_sub")

    def __init__(self, client, args):
        self._client = client
        self._args = args
        self._sub: Optional[AsyncSubscription] = None

    async def _made(self) -> "AsyncSubscription":
        if self._sub is None:
            self._sub = await self._client._subscribe(*self._args)
        return self._sub

    def __await__(self):
        return self._made().__await__()

    def __aiter__(self) -> "Subscribing":
        return self

    async def __anext__(self) -> Message:
        sub = self._sub if self._sub is not None else await self._made()
        return await sub.__anext__()


class AsyncSubscription(_Messages):
    """The messages of an :class:`~zeps.clients.AsyncClient`'s subscriptions, in strictly
    increasing sequence order (as :class:`Subscription`): ``async for msg in sub`` (ends once
    the client is closed; each step raises :class:`~zeps.clients.ZepsTimeout` after
    ``sub.timeout`` seconds when set), ``await sub.next(timeout)``, ``await sub.poll(timeout)``.
    A cancelled read loses nothing."""

    __slots__ = ()

    async def next(self, timeout: Optional[float] = None) -> Message:
        """The next message; :class:`~zeps.clients.ZepsTimeout` if none comes within ``timeout``
        seconds (None: wait for ever)."""
        msg = await self.poll(timeout)
        if msg is None:
            raise self._timed_out(timeout)
        return msg

    async def poll(self, timeout: Optional[float] = 0.0) -> Optional[Message]:
        """The next message, or None if none comes within ``timeout`` seconds."""
        ready = self._ready
        while not ready:
            if not await self._client._run(ops.fill(self._client, ready, timeout)):
                return None
        msg = ready.popleft()
        self._position = msg.sequence
        return msg

    def __aiter__(self) -> "AsyncSubscription":
        return self

    async def __anext__(self) -> Message:
        if self._ready:
            msg = self._ready.popleft()
            self._position = msg.sequence
            return msg
        try:
            return await self.next(self.timeout)
        except ClientClosed:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        """Close the client (a subscription cannot be cancelled alone in ZEPS/1)."""
        await self._client.close()
