"""The multicast receiver's pure core: datagrams and broker messages in, one ordered stream out.

:class:`Receiver` has no socket and no clock: the I/O shell (:class:`~zeps.multicast.subscriber.
MulticastSubscriber`, or an asyncio one) gives it every datagram from the group
(:meth:`Receiver.on_datagram`), every message of its unicast *feed* from the broker
(:meth:`Receiver.on_feed_message`) and the time (:meth:`Receiver.tick` at
:meth:`Receiver.next_deadline`), then hands the messages in :attr:`Receiver.ready` to the
application and opens or closes the feed as :attr:`Receiver.want_feed` says, subscribing it
from :attr:`Receiver.feed_from`.

How it keeps the stream whole
-----------------------------
``position`` is the sequence up to which every message matching the pattern was handed. A
datagram entry says "no matching message lies between ``after`` and me", so an entry whose
``after`` is at most ``position`` is handed at once; others wait in a bounded buffer. A *gap*
exists while the buffer holds entries that cannot be handed, or a HEAD (or a REF entry for a
message too large to be carried) names a sequence above ``position``. A gap left open for
``reorder_wait`` seconds (at once after a REF, or for history when starting behind the head)
makes the receiver want its feed: a subscription from ``position + 1``. Feed messages and
buffered entries are merged by sequence; the feed is dropped as soon as no gap is left.
Anything at or below ``position`` (a duplicated datagram, a message that came both ways) is
dropped, so sequences strictly increase.

Heavy loss
----------
Datagram loss is measured per window of ``loss_window`` seconds from the datagram numbers
(:mod:`zeps.multicast.loss`). When a window with at least ``min_datagrams`` expected loses
``fallback_loss`` of them or more, or when no datagram comes for ``silence`` seconds (by default
three of the bridge's HEAD intervals, at least 1 s), the receiver falls back: its feed stays open and carries
every message, and datagrams are only counted. After ``return_windows`` windows that expected
datagrams and lost at most ``return_loss`` of them, with no lossier one between them (windows
that expected nothing do not count either way), it returns: it keeps the feed until multicast
follows on from ``position`` -- a DATA datagram leaves nothing waiting in the buffer, or a HEAD
announces nothing beyond ``position`` -- then drops it.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from zeps.clients.message import Message

from .datagram import Data, ForeignDatagram, Head, MalformedDatagram, decode
from .loss import DUPLICATE, LATE, LossMeter, Window
from .sender import DEFAULT_HEAD_INTERVAL

__all__ = ["FALLBACK", "MULTICAST", "Receiver", "ReceiverConfig", "ReceiverStats"]

MULTICAST, FALLBACK = "multicast", "fallback"
#: Memory a buffered entry costs beyond its key and body (estimate, for the buffer's bound).
_ENTRY_OVERHEAD = 200
#: The least default silence (s): a busy host can stall a process this long.
_MIN_SILENCE = 1.0


@dataclass(frozen=True)
class ReceiverConfig:
    """Tuning of a :class:`Receiver` (times in seconds, rates as fractions)."""

    reorder_wait: float = 0.02
    loss_window: float = 1.0
    fallback_loss: float = 0.2
    min_datagrams: int = 10
    return_loss: float = 0.02
    return_windows: int = 3
    #: Seconds without any datagram before falling back; ``None``: three HEAD intervals of the
    #: bridge (as its HEADs announce; 3 s before the first HEAD), at least 1 s.
    silence: float | None = None
    max_pending_bytes: int = 64 << 20

    def __post_init__(self):
        for name in ("reorder_wait", "loss_window"):
            value = getattr(self, name)
            if not (value >= 0 if name == "reorder_wait" else value > 0):
                raise ValueError(f"{name} must be a positive number of seconds")
        for name in ("fallback_loss", "return_loss"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a fraction from 0 to 1")
        if self.return_loss >= self.fallback_loss:
            raise ValueError("return_loss must be below fallback_loss")
        if self.min_datagrams < 1 or self.return_windows < 1:
            raise ValueError("min_datagrams and return_windows must be at least 1")
        if self.silence is not None and not self.silence > 0:
            raise ValueError("silence must be a positive number of seconds")
        if self.max_pending_bytes < 1:
            raise ValueError("max_pending_bytes must be positive")


@dataclass
class ReceiverStats:
    """What a receiver saw. Datagram counts: ``datagrams`` accepted (this stream and pattern,
    not duplicated), ``reordered`` (arrived after a later one), ``duplicates``, ``foreign``
    (another protocol, version, stream or pattern), ``malformed`` (did not decode), ``lost``
    (estimated from the numbers). Message counts: ``multicast`` and ``unicast`` (handed, by the
    way they came), ``stale`` (entries already handed), ``refs`` (too large to be carried),
    ``overflow`` (entries dropped because the buffer was full; fetched from the broker).
    Events: ``repairs`` (feed opened for a gap), ``fallbacks``, ``returns``."""

    datagrams: int = 0
    reordered: int = 0
    duplicates: int = 0
    foreign: int = 0
    malformed: int = 0
    lost: int = 0
    multicast: int = 0
    unicast: int = 0
    stale: int = 0
    refs: int = 0
    overflow: int = 0
    repairs: int = 0
    fallbacks: int = 0
    returns: int = 0


class Receiver:
    """The receiver state machine of one stream and pattern.

    Args:
        stream, pattern: the receiver takes the datagrams of a bridge with exactly these
            (others are counted as ``foreign``); the feed subscribes ``pattern``.
        start_after: hand messages after this sequence (``from_seq - 1``; the stream's last
            sequence for "live").
        head: the stream's last sequence when starting: history up to it is fetched at once.
        now: the current time (seconds, any monotonic origin).
        config: a :class:`ReceiverConfig`.
    """

    def __init__(self, stream: str, pattern: str, *, start_after: int, head: int, now: float,
                 config: ReceiverConfig | None = None):
        self.stream = stream
        self.pattern = pattern
        self.config = config or ReceiverConfig()
        #: Every matching message up to this sequence was handed (to :attr:`ready`).
        self.position = start_after
        #: The highest sequence known to exist (HEADs, REF entries, the start).
        self.target = head
        #: :data:`MULTICAST` or :data:`FALLBACK`.
        self.mode = MULTICAST
        #: Messages to hand to the application, in order.
        self.ready: deque[Message] = deque()
        self.stats = ReceiverStats()
        self._pending: dict[int, tuple[int, Message]] = {}
        self._heap: list[int] = []
        self._pending_bytes = 0
        self._meter = LossMeter(self.config.loss_window, now)
        self._gap_since: float | None = None
        self._urgent = head > start_after
        self._repairing = False
        self._joining = False
        self._good_windows = 0
        self._last_datagram = now
        self._interval = DEFAULT_HEAD_INTERVAL
        self._update(now)

    # ------------------------------------------------------------------ outputs

    @property
    def want_feed(self) -> bool:
        """True while the receiver needs its unicast feed from the broker."""
        return self.mode is FALLBACK or self._repairing or self._joining

    @property
    def feed_from(self) -> int:
        """The sequence a feed opened now subscribes from."""
        return self.position + 1

    def next_deadline(self) -> float:
        """The time by which :meth:`tick` must be called (a timer may fire then)."""
        t = self._meter.next_deadline()
        if self._gap_since is not None and not self._repairing:
            t = min(t, self._gap_since + self.config.reorder_wait)
        if self.mode is MULTICAST:
            t = min(t, self._last_datagram + self._silence())
        return t

    # ------------------------------------------------------------------ events

    def on_datagram(self, payload, now: float) -> None:
        """One datagram received from the group (any bytes: bad ones are counted)."""
        st = self.stats
        try:
            d = decode(payload)
        except ForeignDatagram:
            st.foreign += 1
            return
        except MalformedDatagram:
            st.malformed += 1
            return
        if d.stream != self.stream or d.pattern != self.pattern:
            st.foreign += 1
            return
        kind = self._meter.observe(d.session, d.number)
        if kind is DUPLICATE:
            st.duplicates += 1
            return
        if kind is LATE:
            st.reordered += 1
        st.datagrams += 1
        st.lost = self._meter.lost_total
        self._last_datagram = now
        if type(d) is Head:
            self._interval = d.interval_ms / 1000.0
            self.target = max(self.target, d.head)
            if d.head <= self.position and not self._heap:
                self._joining = False       # the bridge has sent nothing we lack
        else:
            self._take(d)
            self._drain()
            if not self._heap:          # multicast data follows on from here: feed not needed
                self._joining = False
        self._update(now)

    def on_feed_message(self, msg: Message, now: float) -> None:
        """One message from the unicast feed (sequences increase, no gap from where it began)."""
        seq = msg.sequence
        if seq <= self.position:
            return
        heap, pending = self._heap, self._pending
        while heap and heap[0] < seq:       # multicast entries below it: hand them first
            s = heapq.heappop(heap)
            _, m = self._forget(s)
            if s > self.position:
                self._hand(m)
                self.stats.multicast += 1
        self._hand(msg)
        self.stats.unicast += 1
        if seq in pending:
            heapq.heappop(heap)
            self._forget(seq)
        self._drain()
        self._update(now)

    def tick(self, now: float) -> None:
        """Let time pass: reorder waits, loss windows, silence."""
        self._update(now)

    # ------------------------------------------------------------------ internals

    def _take(self, d: Data) -> None:
        st = self.stats
        limit = self.config.max_pending_bytes
        for e in d.entries:
            seq = e.sequence
            if seq <= self.position:
                st.stale += 1
                continue
            self.target = max(self.target, seq)     # it exists, handed, buffered or not
            if (e.after <= self.position and not e.ref and not self._heap
                    and self.mode is MULTICAST):
                # Follows on, nothing waits: hand it now (the common case, no buffering).
                self._hand(Message(seq, e.key, e.body, e.timestamp, self.stream))
                st.multicast += 1
                self._joining = False
                continue
            if e.ref:
                st.refs += 1
                self._urgent = True
            elif self.mode is FALLBACK or seq in self._pending:
                continue
            else:
                size = len(e.key) + len(e.body) + _ENTRY_OVERHEAD
                if self._pending_bytes + size > limit:
                    st.overflow += 1
                    continue
                self._pending_bytes += size
                self._pending[seq] = (e.after, Message(seq, e.key, e.body, e.timestamp,
                                                       self.stream))
                heapq.heappush(self._heap, seq)

    def _forget(self, seq: int) -> tuple[int, Message]:
        after, m = self._pending.pop(seq)
        self._pending_bytes -= len(m.key) + len(m.body) + _ENTRY_OVERHEAD
        return after, m

    def _drain(self) -> None:
        """Hand every buffered entry that follows on from ``position``."""
        heap = self._heap
        while heap:
            seq = heap[0]
            if seq <= self.position:
                heapq.heappop(heap)
                self._forget(seq)
                continue
            after = self._pending[seq][0]
            if after > self.position:
                break
            heapq.heappop(heap)
            self._hand(self._forget(seq)[1])
            self.stats.multicast += 1
            self._joining = False

    def _hand(self, msg: Message) -> None:
        self.ready.append(msg)
        self.position = msg.sequence

    def _silence(self) -> float:
        s = self.config.silence
        return s if s is not None else max(3 * self._interval, _MIN_SILENCE)

    def _update(self, now: float) -> None:
        if not (self._heap or self.target > self.position):
            self._gap_since = None
            self._urgent = False
            self._repairing = False
        elif not self._repairing:
            if self._gap_since is None:
                self._gap_since = now
            if self._urgent or now - self._gap_since >= self.config.reorder_wait:
                self._repairing = True
                if self.mode is MULTICAST:
                    self.stats.repairs += 1
        window = self._meter.roll(now)
        if window is not None:
            self._judge(window)
        if self.mode is MULTICAST and now - self._last_datagram >= self._silence():
            self._fall_back()

    def _judge(self, w: Window) -> None:
        c = self.config
        if self.mode is MULTICAST:
            if w.expected >= c.min_datagrams and w.rate >= c.fallback_loss:
                self._fall_back()
            return
        if not w.expected:              # nothing was due (idle between HEADs): no verdict
            return
        if w.rate <= c.return_loss:
            self._good_windows += 1
        else:
            self._good_windows = 0
        if self._good_windows >= c.return_windows:
            self.mode = MULTICAST
            self._joining = True
            self.stats.returns += 1

    def _fall_back(self) -> None:
        self.mode = FALLBACK
        self.stats.fallbacks += 1
        self._good_windows = 0
        self._joining = False
        self._pending.clear()
        self._heap.clear()
        self._pending_bytes = 0
