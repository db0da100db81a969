"""The blocking multicast receiver of the SDK: :class:`MulticastSubscriber`.

It joins a multicast group fed by a bridge (``zeps bridge multicast``), and hands the application
the stream's messages in order -- no gap, no duplicate -- fetching from the broker, over a
unicast :class:`~zeps.clients.Client`, whatever multicast did not bring: history before the first
datagram, lost datagrams, messages too large for a datagram, everything while loss is heavy.
Datagrams are not authenticated, so it hands no multicast message beyond the stream's last
sequence as the broker confirmed it: a second client (the *checker*) asks STREAM-INFO when
datagrams go beyond it (one round trip for all that came before), and is closed after
``CHECKER_IDLE`` seconds without use. The decisions are the pure
:class:`~zeps.multicast.receiver.Receiver`'s; this shell only does the I/O. Like
:class:`~zeps.clients.Client` it has no thread: it works inside your calls.
"""
from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterator

from zeps.clients import Client, ConnectionLost, ZepsError, ZepsTimeout
from zeps.clients.defaults import DEFAULT_CREDIT_WINDOW, DEFAULT_HEARTBEAT
from zeps.clients import lifetime
from zeps.clients.errors import ClientClosed, StreamGone, StreamRecreated, forked
from zeps.clients.message import Message
from zeps.matching import PatternError, compile_pattern
from zeps.units import TimeLike

from .datagram import MAX_SEQUENCE
from .receiver import Receiver, ReceiverConfig, ReceiverStats
from .transport import DEFAULT_RCVBUF, check_interface, open_receiver, parse_group

__all__ = ["MulticastSubscriber"]

log = logging.getLogger("zeps.multicast")

#: Datagrams read from the socket in one go before the feed gets its turn.
DRAIN = 512
#: While the feed is open, the longest wait on it before the group's socket is read again.
_FEED_SLICE = 0.005
#: Seconds before a feed that could not be opened (broker unreachable) is tried again.
_FEED_RETRY = 1.0
#: Seconds without a head check after which the checker's connection is closed.
CHECKER_IDLE = 15.0


def check_start(pattern, from_seq, from_time, live) -> None:
    """The receiver's pattern and start, as both receivers (blocking and asyncio) take them;
    :class:`ValueError` saying what is wrong."""
    if not isinstance(pattern, str) or len(pattern.encode("utf-8")) > 255:
        raise ValueError("pattern must be a string of at most 255 bytes")
    try:
        compile_pattern(pattern)
    except PatternError as e:
        raise ValueError(str(e)) from None
    if sum((from_seq is not None, from_time is not None, bool(live))) > 1:
        raise ValueError("give at most one of from_seq, from_time, live")
    if from_seq is not None and (isinstance(from_seq, bool) or not isinstance(from_seq, int)
                                 or not 0 <= from_seq <= MAX_SEQUENCE):
        raise ValueError("from_seq must be an integer from 0 to 2^64-1")


def start_after(head: int, live: bool, at_time: int | None, from_seq: int | None) -> int:
    """The sequence a receiver starts after, from the stream's ``head`` and its start (as
    :func:`check_start` took it): the head (``live``), the one before the first message at
    ``from_time`` (``at_time``: the broker's ``seq_at`` of it), or before ``from_seq`` (by
    default the first message the stream keeps)."""
    if live:
        return head
    if at_time is not None:
        return max(at_time - 1, 0)
    return max((from_seq or 1) - 1, 0)


def drain_group(core: Receiver, sock) -> int:
    """Hand the core the datagrams waiting on the group's socket, :data:`DRAIN` at the most;
    how many."""
    now = time.monotonic()
    n = 0
    while n < DRAIN:
        try:
            payload = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            break
        core.on_datagram(payload, now)
        n += 1
    return n


class ReceiverShell:
    """What the blocking and the asyncio receiver (:class:`MulticastSubscriber`,
    :class:`~zeps.multicast.aio.AsyncMulticastSubscriber`) share above their I/O: the core's
    counters and state, and the decisions of a read between its waits."""

    @property
    def stats(self) -> ReceiverStats:
        """Counters of datagrams and messages (see :class:`ReceiverStats`)."""
        return self._core.stats

    @property
    def mode(self) -> str:
        """``"multicast"``, or ``"fallback"`` while everything comes from the broker."""
        return self._core.mode

    @property
    def fallback_reason(self) -> str | None:
        """Why it last fell back: ``"loss"``, ``"silence"`` or ``"pattern"`` (a bridge of the
        stream with another pattern on the group; :mod:`zeps.multicast.fallback`), or None."""
        return self._core.fallback_reason

    @property
    def position(self) -> int:
        """Sequence of the last message handed to the application (where it starts - 1
        before the first)."""
        return self._handed

    def _hand(self) -> Message | None:
        """The next message the core has ready, handed to the application; None if none."""
        ready = self._core.ready
        if not ready:
            return None
        msg = ready.popleft()
        self._handed = msg.sequence
        return msg

    def _wait(self, now: float, deadline: float | None) -> float | None:
        """How long a read waits for I/O now: until the core's next deadline, or the read's
        ``deadline`` (None: none); None once that passed."""
        if deadline is not None and now >= deadline:
            return None
        wait = self._core.next_deadline() - now
        if deadline is not None:
            wait = min(wait, deadline - now)
        return max(wait, 0.0)

    def _feed_lost(self, e: ConnectionLost) -> None:
        """The feed was lost (and closed): a deleted stream is recorded and raised; otherwise
        logged, and the feed is opened again after :data:`_FEED_RETRY` seconds."""
        if isinstance(e, StreamGone):
            self._gone = e
            raise e
        log.warning("zeps multicast: feed from %s lost: %s", self.endpoint, e)
        self._feed_retry_at = time.monotonic() + _FEED_RETRY

    def _feed_failed(self, e: BaseException) -> None:
        """Opening the feed failed (and its client was closed): a broker out of reach is
        logged, and tried again after :data:`_FEED_RETRY` seconds; anything else is raised (a
        deleted stream recorded first)."""
        if isinstance(e, StreamGone):
            self._gone = e
        elif isinstance(e, (ZepsTimeout, ConnectionLost)):
            log.warning("zeps multicast: cannot reach the broker at %s for the stream's "
                        "missing messages (%s); retrying", self.endpoint, e)
            self._feed_retry_at = time.monotonic() + _FEED_RETRY
            return
        raise e

    def _check_lost(self, e: ZepsTimeout | ConnectionLost) -> None:
        """A head check got no answer (its checker closed): the core told; a deleted stream is
        recorded and raised, anything else logged (the core asks again)."""
        self._core.check_failed(time.monotonic())
        if isinstance(e, StreamGone):
            self._gone = e
            raise e
        log.warning("zeps multicast: cannot reach the broker at %s to check the stream's "
                    "head (%s); retrying", self.endpoint, e)

    def _checker_idle(self, now: float) -> bool:
        """The checker's connection went unused for :data:`CHECKER_IDLE` seconds."""
        return self._checker is not None and now - self._checker_used > CHECKER_IDLE

    def _note(self) -> None:
        """Log what the core noticed: real entries after forged ones, fallbacks."""
        self._deceived = note_deceived(self._core, self._deceived)
        self._fallbacks.note(self._core, self.group, self.endpoint)


class MulticastSubscriber(ReceiverShell):
    """Messages of ``stream`` matching ``pattern``, live from multicast ``group``, repaired from
    the broker at ``endpoint``.

    Args:
        group: ``"239.x.y.z:PORT"``, where a bridge of this stream and pattern sends.
        endpoint: the broker's endpoint (history, repairs, fallback).
        stream: the stream.
        pattern: the bridge's pattern (``""`` = every key). The receiver takes the datagrams of
            a bridge with exactly this stream and pattern; others on the group are counted as
            ``foreign`` and ignored.
        from_seq: start at this sequence. Without ``from_seq``, ``from_time`` or ``live``, it
            starts at the first message the stream keeps, as :meth:`Client.subscribe` does.
        from_time: start at the first message journalled at or after this time.
        live: only messages published after the constructor returns.
        interface: IPv4 address of the interface to join the group on.
        timeout: seconds to wait for the broker (as :class:`Client`).
        rcvbuf: receive buffer to ask the kernel for.
        config: a :class:`~zeps.multicast.receiver.ReceiverConfig` (reorder wait, loss
            thresholds of the fallback, buffer bound).

    Raises :class:`ValueError` for a bad group, interface, pattern or start, the SDK's errors
    when the broker does not answer (:class:`~zeps.clients.ZepsTimeout`) or refuses, and
    :class:`OSError` when the group cannot be joined. Reading raises
    :class:`~zeps.clients.StreamRecreated` (and goes on raising it) once the stream was deleted
    and created again, as a subscription of the SDK does.

    Reading (``next``, ``poll``, iteration) never skips a message: while a gap cannot be
    repaired because the broker is unreachable, messages after it wait, and a call that has to
    open the feed may block up to ``timeout`` seconds trying (then it retries every second).
    """

    def __init__(self, group, endpoint: str, stream: str, pattern: str = "",
                 from_seq: int | None = None, *, from_time: TimeLike | None = None,
                 live: bool = False, interface: str | None = None, timeout: float = 10.0,
                 heartbeat: float = DEFAULT_HEARTBEAT, credit_window: int = DEFAULT_CREDIT_WINDOW,
                 rcvbuf: int = DEFAULT_RCVBUF, config: ReceiverConfig | None = None,
                 curve=None):
        self.group = parse_group(group)
        self.interface = check_interface(interface)
        check_start(pattern, from_seq, from_time, live)
        self.endpoint = endpoint
        self.stream = stream
        self.pattern = pattern
        self._client_args = {"timeout": timeout, "heartbeat": heartbeat, "curve": curve,
                             "credit_window": credit_window}
        with Client(endpoint, stream, **self._client_args) as c:
            head = c.info().last
            self._incarnation = c.incarnation
            at_time = None if from_time is None else c.seq_at(from_time)
        after = start_after(head, live, at_time, from_seq)
        self._sock = open_receiver(self.group, self.interface, rcvbuf)
        self._core = Receiver(stream, pattern, start_after=after, head=head,
                              now=time.monotonic(), config=config)
        self._handed = after
        self._feed: Client | None = None
        self._feed_sub = None
        self._feed_retry_at = 0.0
        self._checker: Client | None = None
        self._checker_used = 0.0
        self._deceived = 0
        self._fallbacks = FallbackLog()
        self._closed = False
        self._forked_error: ClientClosed | None = None
        self._gone: StreamGone | None = None
        lifetime.watch_fork(self)

    def _forked(self) -> None:
        disable_forked(self)

    # ------------------------------------------------------------------ public API

    @property
    def feed_open(self) -> bool:
        """True while a unicast subscription to the broker is open."""
        return self._feed is not None

    def next(self, timeout: float | None = None) -> Message:
        """The next message; :class:`ZepsTimeout` if none comes within ``timeout`` seconds."""
        msg = self._next(timeout)
        if msg is None:
            raise ZepsTimeout(f"no message on stream {self.stream!r} within {timeout:g}s")
        return msg

    def poll(self, timeout: float | None = 0.0) -> Message | None:
        """The next message, or ``None`` if none comes within ``timeout`` seconds."""
        return self._next(timeout)

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        if self._closed:
            if self._forked_error is not None:
                raise self._forked_error
            raise StopIteration
        return self._next(None)

    def close(self) -> None:
        """Leave the group and close the feed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        lifetime.unwatch(self)
        self._close_feed()
        self._close_checker()
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<zeps.MulticastSubscriber {self.group[0]}:{self.group[1]} "
                f"stream={self.stream!r} pattern={self.pattern!r} mode={self.mode}>")

    # ------------------------------------------------------------------ I/O

    def _next(self, timeout: float | None) -> Message | None:
        if self._closed:
            raise self._forked_error or ClientClosed("the multicast subscriber is closed")
        if self._gone is not None:
            raise self._gone
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = self._hand()
            if msg is not None:
                return msg
            now = time.monotonic()
            self._reconcile(now)
            if core.ready:                  # a head check let messages through
                continue
            wait = self._wait(now, deadline)
            if wait is None:
                return None
            self._step(wait)

    def _step(self, wait: float) -> None:
        """Wait up to ``wait`` seconds for datagrams or feed messages and give them to the core."""
        core = self._core
        if self._feed_sub is not None:
            got = self._read_feed(0.0) + self._read_group()
            if not got and self._feed_sub is not None:
                self._read_feed(min(wait, _FEED_SLICE))
        else:
            if self._feed is None and core.want_feed:      # waiting to retry the feed
                wait = min(wait, max(self._feed_retry_at - time.monotonic(), 0.0))
            ready, _, _ = select.select([self._sock], [], [], wait)
            if ready:
                self._read_group()
        core.tick(time.monotonic())

    def _read_group(self) -> int:
        return drain_group(self._core, self._sock)

    def _read_feed(self, wait: float) -> int:
        sub, core = self._feed_sub, self._core
        n = 0
        try:
            msg = sub.poll(wait)
            while msg is not None:
                core.on_feed_message(msg, time.monotonic())
                n += 1
                if not core.want_feed:
                    break
                msg = sub.poll(0.0)
        except ConnectionLost as e:
            self._close_feed()
            self._feed_lost(e)
        return n

    def _reconcile(self, now: float) -> None:
        """Open or close the feed as the core wants."""
        want = self._core.want_feed
        if want and self._feed is None and now >= self._feed_retry_at:
            feed = None
            try:
                feed = Client(self.endpoint, self.stream, **self._client_args)
                same_stream(self, feed)
                self._feed_sub = feed.subscribe(self.pattern, from_seq=self._core.feed_from)
            except BaseException as e:
                self._feed_sub = None
                _close(feed)
                self._feed_failed(e)
                return
            self._feed = feed
        elif not want and self._feed is not None:
            self._close_feed()
        if self._core.want_check:
            self._check(now)
        elif self._checker_idle(now):
            self._close_checker()
        self._note()

    def _check(self, now: float) -> None:
        """Ask the broker for the stream's last sequence: multicast entries up to it may go."""
        core = self._core
        core.check_started(now)
        try:
            if self._checker is None:
                self._checker = Client(self.endpoint, self.stream, **self._client_args)
                same_stream(self, self._checker)
            last = self._checker.info().last
        except (ZepsTimeout, ConnectionLost) as e:
            self._close_checker()
            self._check_lost(e)
            return
        except BaseException:
            core.check_failed(time.monotonic())
            raise
        self._checker_used = time.monotonic()
        core.on_broker_head(last, self._checker_used)

    def _close_feed(self) -> None:
        feed, self._feed, self._feed_sub = self._feed, None, None
        _close(feed)

    def _close_checker(self) -> None:
        checker, self._checker = self._checker, None
        _close(checker)


def disable_forked(sub) -> None:
    """A receiver's copy in a child of ``os.fork()`` (its ``_forked``, blocking or asyncio): the
    group's socket is the parent's too (a read here takes the parent's datagrams) and so are
    the feed's; forgotten (kept referenced, never closed here: the asyncio one's stays
    registered with the parent's loop, whose epoll the child shares), what was ready is dropped
    (the parent hands it out), and every call raises :class:`~zeps.clients.ClientForked`
    (:mod:`zeps.clients.lifetime`)."""
    sub._forked_error = forked("multicast subscriber", sub._pid)
    sub._abandoned = (sub._sock, sub._feed, sub._checker)
    sub._feed = sub._feed_sub = sub._checker = None
    sub._closed = True
    sub._core.ready.clear()


def same_stream(sub, client) -> None:
    """A receiver's new client (its feed, its checker) attached to the stream the receiver
    started on, not to a stream of that name deleted and created again since (whose sequences
    start again: the feed would hand its messages after the old ones, as if they followed);
    :class:`~zeps.clients.StreamRecreated` otherwise, raised by this and every later read, as a
    subscription of the SDK raises it (the shells record it in ``_gone``)."""
    if client.incarnation is None or sub._incarnation is None:
        if sub._incarnation is None:
            sub._incarnation = client.incarnation
        return
    if client.incarnation != sub._incarnation:
        sub._gone = StreamRecreated(
            f"stream {sub.stream!r} was deleted and created again: its sequences are not the "
            f"ones this multicast subscriber knew", sub.stream, sub._incarnation)
        raise sub._gone


def note_deceived(core: Receiver, seen: int) -> int:
    """Log real entries that came after a forged one had been handed in their place (the
    receiver noticed afterwards); return the count now logged."""
    deceived = core.stats.deceived
    if deceived > seen:
        log.warning("zeps multicast: stream %r: %d real message(s) came after a forged "
                    "datagram had been handed in their place (%d in all): someone else sends "
                    "to the group; authenticate it or keep it on a network you control",
                    core.stream, deceived - seen, deceived)
    return deceived


class FallbackLog:
    """Logs each fallback of a receiver with its reason (zeps.multicast.fallback): at WARNING the
    first time for a reason, at INFO after that."""

    def __init__(self) -> None:
        self.seen = 0
        self.reasons: set[str] = set()

    def note(self, core: Receiver, group: tuple[str, int], endpoint: str) -> None:
        n = core.stats.fallbacks
        if n <= self.seen:
            return
        self.seen = n
        reason = core.fallback_reason
        level = logging.INFO if reason in self.reasons else logging.WARNING
        self.reasons.add(reason)
        log.log(level, "zeps multicast: stream %r pattern %r on %s:%d: falling back to the broker "
                "at %s (%s): %s", core.stream, core.pattern, group[0], group[1], endpoint, reason,
                core.fallback_detail)


def _close(feed: Client | None) -> None:
    """Close a feed client; it only reads, so an error while closing loses nothing."""
    if feed is not None:
        try:
            feed.close(timeout=1.0)
        except ZepsError as e:
            log.debug("zeps multicast: closing the feed: %s", e)
