"""The consumer side of a client: :class:`Subscription` (blocking) and :class:`AsyncSubscription`.

Both hand out messages from the ready messages they take from the peering a few hundred at a
time (``operations.fill``); what they share is in :class:`_Messages`. The blocking one hands
them through an ``itertools.chain`` (C code per message, Python per fill; issue 20).
"""
from __future__ import annotations

from collections import deque
from itertools import chain
from operator import length_hint as _length_hint
from typing import AsyncIterator, Iterator, List, Optional, Tuple

from . import operations as ops
from .errors import ClientClosed, ClientForked, ZepsTimeout
from .message import Message, MessageBatch

__all__ = ["Subscription", "AsyncSubscription", "Subscribing", "subscribe_args"]

_chain_from = chain.from_iterable
_next = next
_SPENT = iter(())          # the ready messages' iterator while none are ready


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
    """What both subscriptions share: their client, their timeout, the batches taken for
    ``next_batch``. Each keeps its own ready messages (see :class:`Subscription`)."""

    __slots__ = ("_client", "timeout", "_batches")

    def __init__(self, client):
        self._client = client
        #: Seconds each step of iterating may wait (None: for ever).
        self.timeout: Optional[float] = None
        # Taken from the client, not yet handed out, for next_batch. The ready messages (next,
        # poll) and these batches: at most one of the two holds anything, each reader
        # empties the other's first, so order is kept when a program uses both.
        self._batches: deque = deque()

    @property
    def client(self):
        """The client this subscription reads from."""
        return self._client

    @property
    def patterns(self) -> Tuple[str, ...]:
        """Patterns subscribed so far (OR-ed)."""
        return tuple(self._client._p.patterns)

    def _timed_out(self, timeout) -> ZepsTimeout:
        return ZepsTimeout(f"no message on stream {self._client.stream!r} within {timeout:g}s")

    def __repr__(self) -> str:
        return (f"<zeps.{type(self).__name__} stream={self._client.stream!r} "
                f"patterns={self.patterns!r} position={self.position}>")


def _raising(error: BaseException):
    """An iterator that raises ``error`` once, then is exhausted: what :class:`_Feed` gives a
    ``chain`` instead of raising, so that the chain lives on (a chain whose source raises is
    finished for good; one whose current iterator raises is not)."""
    raise error
    yield                                   # a generator (unreachable)


class _Feed:
    """The source of the ``itertools.chain`` that :class:`Subscription` hands messages
    through: each step gives the subscription's ready messages (an iterator the chain then
    steps through in C, message by message), filling them from the client first when they
    are all handed. The errors of filling are given as an iterator raising them (the chain
    goes on after one, as the subscription did); ``ClientClosed`` ends a ``for`` loop's chain
    (``ends``) and is raised by ``next()``'s (``ClientForked`` is raised by both)."""

    __slots__ = ("_sub", "_ends")

    def __init__(self, sub: "Subscription", ends: bool):
        self._sub = sub
        self._ends = ends

    def __iter__(self) -> "_Feed":
        return self

    def __next__(self):
        sub = self._sub
        try:
            return sub._refill(sub.timeout if self._ends else sub._wait)
        except ClientClosed as e:
            if self._ends and not isinstance(e, ClientForked):
                raise StopIteration from None
            return _raising(e)
        except BaseException as e:          # ZepsTimeout, the client's errors, Ctrl-C
            return _raising(e)


class Subscription(_Messages):
    """Messages of a client's subscriptions, in strictly increasing sequence order.

    Obtained from :meth:`Client.subscribe`; a client has exactly one Subscription, whatever the
    number of patterns (a message matching several patterns comes once). Three ways to read:

    * ``for msg in sub:`` -- blocks for each message; ends (``StopIteration``) once the client
      is closed. With ``sub.timeout`` set (``client.subscribe(..., timeout=5)``), a step that
      waits longer than that raises :class:`ZepsTimeout` instead of blocking for ever;
    * ``sub.next(timeout=None)`` -- the next :class:`Message`, or :class:`ZepsTimeout` after
      ``timeout`` seconds (``None`` = wait for ever);
    * ``sub.poll(timeout=0.0)`` -- the next :class:`Message`, or ``None`` after ``timeout``;
    * ``sub.next_batch(timeout=None)`` / ``for batch in sub.batches():`` -- the messages that
      have arrived, as one :class:`MessageBatch` (columns ``sequences``, ``keys``, ``bodies``,
      or ``to_arrow()`` for a pyarrow record batch; or iterate it): a DELIVER-BATCH from the
      broker is handed as it came, with nothing built per message, which is several times
      faster than message by message for programs that handle messages in bulk. The ways
      can be mixed; each goes on where the other stopped.

    Reading is what grants the broker credit: the client tops the credit up as messages are
    handed to you, so reading slowly makes the broker replay from the journal rather than
    queue. (The subscription takes received messages from the client a few hundred at a time
    and hands them out one by one.) Errors of the client (for example
    :class:`~zeps.clients.InvalidError`) are raised from these calls too.

    ``iter(sub)`` is an iterator of its own (an ``itertools.chain``: each message is handed
    by C code, the subscription's Python runs once per few hundred messages; issue 20), which
    reads from the same ready messages as ``next(sub)``, ``sub.next()`` and ``sub.poll()``.
    """

    # The ready messages: a list taken from the client at once (``_msgs``) and the one
    # iterator over it (``_cur``) that every reader steps: ``for`` loops (through chains of
    # _Feed), next, poll, next_batch; ``_base`` is the position before the list.
    __slots__ = ("_msgs", "_cur", "_base", "_wait", "_nexts")

    def __init__(self, client):
        super().__init__(client)
        self._msgs: List[Message] = []
        self._cur = iter(self._msgs)
        self._base = 0
        self._wait: Optional[float] = None          # the timeout of the next() under way
        self._nexts = _chain_from(_Feed(self, False))

    @property
    def position(self) -> int:
        """Sequence of the last message handed to the application (0 if none yet)."""
        handed = len(self._msgs) - _length_hint(self._cur)
        return self._msgs[handed - 1].sequence if handed else self._base

    @property
    def buffered(self) -> int:
        """Messages received from the broker and not yet read by the application."""
        return (self._client._p.buffered_messages + _length_hint(self._cur)
                + sum(len(b) for b in self._batches))

    def _ready(self, msgs: List[Message], position: int) -> None:
        """Make ``msgs`` the ready messages, all before handed up to ``position``."""
        self._base = position
        self._msgs = msgs
        self._cur = iter(msgs)

    def _drop(self) -> None:
        """The client is closed: what was not handed is not (a ``for`` loop stepping the
        ready messages stops with them)."""
        if self._client._p.forked_from is not None:
            self._batches.clear()           # the parent hands them out
        position = self.position
        self._msgs.clear()                  # stops every iterator over it
        self._ready([], position)

    def _unbatch(self) -> bool:
        """Make the batches taken for ``next_batch`` the ready messages (``next`` reads on
        where ``next_batch`` stopped); False if there were none."""
        if not self._batches:
            return False
        msgs = [m for b in self._batches for m in b.messages]
        self._batches.clear()
        self._ready(msgs, self.position)
        return True

    def _refill(self, timeout: Optional[float]):
        """The ready messages' iterator once it has some left, filled from the client if all
        were handed; :class:`ZepsTimeout` after ``timeout`` seconds."""
        if _length_hint(self._cur) or self._batches and self._unbatch():
            return self._cur
        handed = self._msgs
        if handed:                          # free the messages handed before building more
            self._base = handed[-1].sequence
            self._msgs = []
            self._cur = _SPENT
        msgs: List[Message] = []
        if not self._client._fill(msgs, timeout):
            raise self._timed_out(timeout)
        self._msgs = msgs                   # the position stays: nothing was handed meanwhile
        self._cur = cur = iter(msgs)
        return cur

    def _ready_batch(self) -> Optional[MessageBatch]:
        """The ready messages not handed yet as one batch, or the oldest batch already
        taken; None if there is neither."""
        if _length_hint(self._cur):
            batch = MessageBatch(list(self._cur))
        elif self._batches:
            batch = self._batches.popleft()
        else:
            return None
        self._ready([], batch.last)
        return batch

    def next(self, timeout: Optional[float] = None) -> Message:
        """Return the next message; raise :class:`ZepsTimeout` if none comes within ``timeout``
        seconds (``None``: wait for ever)."""
        self._wait = timeout
        return _next(self._nexts)

    def poll(self, timeout: Optional[float] = 0.0) -> Optional[Message]:
        """Return the next message, or ``None`` if none comes within ``timeout`` seconds."""
        msg = _next(self._cur, None)
        if msg is None:
            if not self._unbatch():
                msgs: List[Message] = []
                if not self._client._fill(msgs, timeout):
                    return None
                self._ready(msgs, self.position)
            msg = _next(self._cur)
        return msg

    def next_batch(self, timeout: Optional[float] = None) -> MessageBatch:
        """The messages that have arrived (at least one; waits for one up to ``timeout``
        seconds, ``None`` = for ever, then :class:`ZepsTimeout`), as one
        :class:`MessageBatch`: at most half the credit window's worth, so that the broker
        gets credit back while you handle it."""
        while True:
            batch = self._ready_batch()
            if batch is not None:
                return batch
            if not self._client._fill(self._batches, timeout, True):
                raise self._timed_out(timeout)

    def batches(self, timeout: Optional[float] = None) -> Iterator[MessageBatch]:
        """``for batch in sub.batches():`` -- :meth:`next_batch` until the client is closed;
        each step raises :class:`ZepsTimeout` after ``timeout`` seconds (default: the
        subscription's ``timeout``) when set."""
        t = self.timeout if timeout is None else timeout
        while True:
            try:
                yield self.next_batch(t)
            except ClientForked:
                raise
            except ClientClosed:
                return

    def __iter__(self) -> Iterator[Message]:
        return _chain_from(_Feed(self, True))

    def __next__(self) -> Message:
        msg = _next(self._cur, None)
        if msg is not None:
            return msg
        try:
            return self.next(self.timeout)
        except ClientForked:
            raise
        except ClientClosed:
            raise StopIteration from None

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
    ``sub.timeout`` seconds when set), ``await sub.next(timeout)``, ``await sub.poll(timeout)``,
    and in bulk ``await sub.next_batch(timeout)`` / ``async for batch in sub.batches()`` (see
    :class:`Subscription`). A cancelled read loses nothing."""

    # The ready messages: taken from the client, not yet handed (a deque several tasks may
    # fill and read), and the position.
    __slots__ = ("_ready", "_position")

    def __init__(self, client):
        super().__init__(client)
        self._ready: deque = deque()
        self._position = 0

    @property
    def position(self) -> int:
        """Sequence of the last message handed to the application (0 if none yet)."""
        return self._position

    @property
    def buffered(self) -> int:
        """Messages received from the broker and not yet read by the application."""
        return (self._client._p.buffered_messages + len(self._ready)
                + sum(len(b) for b in self._batches))

    def _drop(self) -> None:
        self._ready.clear()
        if self._client._p.forked_from is not None:
            self._batches.clear()           # the parent hands them out

    def _unbatch(self) -> bool:
        """Move the batches taken for ``next_batch`` to the message queue (``next`` reads on
        where ``next_batch`` stopped); False if there were none."""
        if not self._batches:
            return False
        for b in self._batches:
            self._ready.extend(b.messages)
        self._batches.clear()
        return True

    def _ready_batch(self) -> Optional[MessageBatch]:
        """The oldest batch already taken, or the messages ``next`` has not handed yet, as
        one batch; None if there is neither."""
        if self._ready:
            batch = MessageBatch(self._ready)
            self._ready.clear()
        elif self._batches:
            batch = self._batches.popleft()
        else:
            return None
        self._position = batch.last
        return batch

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
            if not self._unbatch() and not await self._client._run(
                    ops.fill(self._client, ready, timeout)):
                return None
        msg = ready.popleft()
        self._position = msg.sequence
        return msg

    async def next_batch(self, timeout: Optional[float] = None) -> MessageBatch:
        """As :meth:`Subscription.next_batch`."""
        while True:
            batch = self._ready_batch()
            if batch is not None:
                return batch
            if not await self._client._run(ops.fill(self._client, self._batches, timeout,
                                                    True)):
                raise self._timed_out(timeout)

    async def batches(self, timeout: Optional[float] = None) -> AsyncIterator[MessageBatch]:
        """``async for batch in sub.batches():`` -- as :meth:`Subscription.batches`."""
        t = self.timeout if timeout is None else timeout
        while True:
            try:
                yield await self.next_batch(t)
            except ClientForked:
                raise
            except ClientClosed:
                return

    def __aiter__(self) -> "AsyncSubscription":
        return self

    async def __anext__(self) -> Message:
        if self._ready:
            msg = self._ready.popleft()
            self._position = msg.sequence
            return msg
        try:
            return await self.next(self.timeout)
        except ClientForked:
            raise
        except ClientClosed:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        """Close the client (a subscription cannot be cancelled alone in ZEPS/1)."""
        await self._client.close()
