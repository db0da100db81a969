"""The multicast receiver's pure core: datagrams and broker messages in, one ordered stream out.

:class:`Receiver` has no socket and no clock: the I/O shell (:class:`~zeps.multicast.subscriber.
MulticastSubscriber`, or an asyncio one) gives it every datagram from the group
(:meth:`Receiver.on_datagram`), every message of its unicast *feed* from the broker
(:meth:`Receiver.on_feed_message`), the broker's answers to its *head checks*
(:meth:`Receiver.on_broker_head`) and the time (:meth:`Receiver.tick` at
:meth:`Receiver.next_deadline`), then hands the messages in :attr:`Receiver.ready` to the
application, opens or closes the feed as :attr:`Receiver.want_feed` says (subscribing it from
:attr:`Receiver.feed_from`) and asks the broker for its stream's last sequence when
:attr:`Receiver.want_check` says so.

How it keeps the stream whole
-----------------------------
``position`` is the sequence up to which every message matching the pattern was handed. A
datagram entry says "no matching message lies between ``after`` and me". An entry *follows on*
when its ``after`` is ``position`` (or, before anything was handed, at most ``position``); it is
handed once the broker has confirmed that its sequence exists (below). Others wait in a bounded
buffer. A *gap* exists while the buffer's first entry does not follow on, or a HEAD (or a REF
entry for a message too large to be carried) names a sequence above ``position``. A gap left open
for ``reorder_wait`` seconds (at once after a REF, or for history when starting behind the head)
makes the receiver want its feed: a subscription from ``position + 1``. Feed messages and
buffered entries are merged by sequence (the feed is the broker's word: a buffered entry below
the feed's next message is dropped); the feed is dropped as soon as no gap is left. Anything
at or below ``position`` (a duplicated datagram, a message that came both ways) is dropped, so
sequences strictly increase.

Forged datagrams
----------------
Datagrams are not authenticated. The receiver hands nothing beyond ``confirmed``, the stream's
last sequence as the broker last told it (when starting, in head checks, and by the feed): an
entry beyond it waits while the receiver *checks* the head (one STREAM-INFO round trip for
everything that arrived before it). An entry or a HEAD that arrived before a check and names a
sequence beyond the head the broker then gave cannot be real: it is dropped and counted as
``forged``, as is an entry whose ``after`` lies below ``position`` once a message was handed (a
real entry never claims that a handed message does not exist). A HEAD or REF claim within the
broker's head opens the feed, which the broker fulfils; a claim the feed has not advanced
towards for ``claim_hold`` seconds is dropped, and claims are then ignored for
``claim_holdoff`` seconds. The loss meter ignores datagram numbers far from their session's
(:mod:`zeps.multicast.loss`), the silence is taken from the longest HEAD interval announced in
the last minute (at most one minute), and loss makes the receiver fall back at most once per
``fallback_holdoff``. A forged datagram may thus cost a head check or a repair from the broker,
never a gap, a stall or a lasting fallback. (One that copies a real message's sequence with other
contents, sent before the real one, is handed: only authentication would tell them apart.)

Heavy loss
----------
Datagram loss is measured per window of ``loss_window`` seconds from the datagram numbers
(:mod:`zeps.multicast.loss`). When a window with at least ``min_datagrams`` expected loses
``fallback_loss`` of them or more, or when no datagram comes for ``silence`` seconds (by default
three of the bridge's HEAD intervals, at least 1 s), the receiver falls back: its feed stays open
and carries every message, and datagrams are only counted. It returns after ``return_windows``
good windows with no bad one between them. A window in which the feed brought messages is judged
by them -- good if multicast also carried (as entries) all but ``return_loss`` of those the feed
brought in the window before -- and one in which it brought none by the datagram numbers --
good if they expected datagrams and lost at most ``return_loss`` of them (windows that expected
nothing do not count either way). On return it keeps the feed until multicast follows on from
``position`` -- a DATA datagram leaves nothing waiting in the buffer, or a HEAD announces nothing
beyond ``position`` -- then drops it.
"""
from __future__ import annotations

import heapq
from collections import deque

from zeps.clients.message import Message

from .config import ReceiverConfig, ReceiverStats
from .datagram import Data, ForeignDatagram, Head, MalformedDatagram, decode
from .fallback import LOSS, PATTERN, SILENCE, OtherPatterns, describe
from .handed import HandedLog
from .loss import DUPLICATE, FAR, LATE, LossMeter, Window
from .sender import DEFAULT_HEAD_INTERVAL

__all__ = ["FALLBACK", "MULTICAST", "Receiver", "ReceiverConfig", "ReceiverStats"]

MULTICAST, FALLBACK = "multicast", "fallback"
#: Memory a buffered entry costs beyond its key and body (estimate, for the buffer's bound).
_ENTRY_OVERHEAD = 200
#: The least default silence (s): a busy host can stall a process this long.
_MIN_SILENCE = 1.0
#: The longest HEAD interval a HEAD can announce (s): a forged one hides a dead bridge no longer.
_MAX_INTERVAL = 60.0
#: Seconds the longest HEAD interval announced is kept while HEADs announce shorter ones.
_INTERVAL_MEMORY = 60.0
#: Seconds before a head check that got no answer is tried again.
_CHECK_RETRY = 1.0
#: Head checks while the feed is open, at most one per this many seconds: the feed confirms what
#: it brings; a check is for an entry it never reaches (a forged one far ahead).
_FEED_CHECK_SPACING = 1.0
#: HEAD and REF claims beyond the confirmed head kept for the next check (the oldest go first).
_MAX_CLAIMS = 64
#: Sequences kept per window to judge multicast while in fallback.
_MAX_SAMPLES = 1 << 16
#: Multicast entries handed (their spans and contents) and sequences disputed, remembered.
_MAX_SPANS = 1024


class Receiver:
    """The receiver state machine of one stream and pattern.

    Args:
        stream, pattern: the receiver takes the datagrams of a bridge with exactly these
            (others are counted as ``foreign``); the feed subscribes ``pattern``.
        start_after: hand messages after this sequence (``from_seq - 1``; the stream's last
            sequence for "live").
        head: the stream's last sequence when starting, from the broker: history up to it is
            fetched at once, and multicast entries up to it need no head check.
        now: the current time (seconds, any monotonic origin).
        config: a :class:`ReceiverConfig`.
    """

    def __init__(self, stream: str, pattern: str, *, start_after: int, head: int, now: float,
                 config: ReceiverConfig | None = None):
        self.stream = stream
        self.pattern = pattern
        self.config = c = config or ReceiverConfig()
        #: Every matching message up to this sequence was handed (to :attr:`ready`).
        self.position = start_after
        self._start = start_after
        #: History to fetch: the stream's last sequence when starting.
        self.target = head
        #: The stream's last sequence as the broker last told it (start, head checks, feed).
        self.confirmed = head
        #: :data:`MULTICAST` or :data:`FALLBACK`.
        self.mode = MULTICAST
        #: Messages to hand to the application, in order.
        self.ready: deque[Message] = deque()
        self.stats = ReceiverStats()
        self._pending: dict[int, tuple[int, Message, int]] = {}   # seq -> (after, msg, arrival)
        self._heap: list[int] = []          # the pending sequences (and some dropped ones)
        self._pending_bytes = 0
        self._meter = LossMeter(c.loss_window, now,
                                hold=max(2 * c.loss_window, 3 * DEFAULT_HEAD_INTERVAL))
        self._gap_since: float | None = None
        self._urgent = head > start_after
        self._repairing = False
        self._joining = False
        self._good_windows = 0
        self._last_datagram = now
        self._interval = DEFAULT_HEAD_INTERVAL
        self._interval_until = now          # the first HEAD's interval replaces the default
        self._now = now
        # Head checks: datagrams are numbered as they arrive; a check covers those before it.
        self._arrivals = 0
        self._unconfirmed: deque[tuple[int, int]] = deque()         # (arrival, seq) buffered
        self._claims: deque[tuple[int, int, bool]] = deque()        # (arrival, seq, urgent)
        self._check_mark: int | None = None
        self._check_after = now
        self._feed_check_after = now
        # The HEAD or REF claim being repaired, and its clock.
        self._claim = 0
        self._claim_pos = start_after
        self._claim_deadline = now
        self._claims_from = now
        # Fallback: loss may cause one from this time; sequences to judge multicast by.
        self._fallback_ok_at = now
        self._mc_seen: set[int] = set()
        self._fed: list[int] = []
        self._fed_before: list[int] = []
        # What handed multicast entries said and carried, and sequences two entries disagreed
        # on (fetched instead).
        self._handed = HandedLog(_MAX_SPANS)
        self._disputed: set[int] = set()
        # Why it last fell back (zeps.multicast.fallback), and other bridges of its stream.
        self._others = OtherPatterns()
        #: The reason of the last fallback (``loss``, ``silence``, ``pattern``), or None.
        self.fallback_reason: str | None = None
        #: The last fallback's reason as a sentence, for the shells' log.
        self.fallback_detail = ""
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

    @property
    def want_check(self) -> bool:
        """True when the receiver needs the stream's last sequence from the broker (STREAM-INFO):
        call :meth:`check_started`, then :meth:`on_broker_head` with the answer (or
        :meth:`check_failed`). Also while the feed is wanted: its messages confirm what it
        reaches, but a forged entry far ahead, which it never reaches, counted as a gap and
        kept it wanted for good (a lasting fallback to unicast) until a check dropped it."""
        return (self.mode is MULTICAST and self._check_mark is None
                and self._now >= self._check_after and self._needs_check()
                and (not self.want_feed or self._now >= self._feed_check_after))

    def next_deadline(self) -> float:
        """The time by which :meth:`tick` must be called (a timer may fire then)."""
        t = self._meter.next_deadline()
        if self._gap_since is not None and not self._repairing:
            t = min(t, self._gap_since + self.config.reorder_wait)
        if self.mode is MULTICAST:
            t = min(t, self._last_datagram + self._silence())
            due = max(self._check_after, self._feed_check_after if self.want_feed else 0.0)
            if self._check_mark is None and due > self._now and self._needs_check():
                t = min(t, due)
        if self._claim > self.position:
            t = min(t, self._claim_deadline)
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
            if d.stream == self.stream:     # a bridge of this stream with another pattern
                st.other_pattern += 1
                self._others.seen(d.pattern)
            return
        self._others.own()
        self._now = now
        self._arrivals += 1
        kind = self._meter.observe(d.session, d.number, now)
        if kind is DUPLICATE:
            # Counted, not judged by its number: a forged datagram may have taken the number
            # first, so its contents are still used (a repeated entry changes nothing).
            st.duplicates += 1
        else:
            if kind is LATE:
                st.reordered += 1
            elif kind is FAR:
                st.far += 1
            st.datagrams += 1
            st.lost = self._meter.lost_total
            self._last_datagram = now
        if type(d) is Head:
            if kind is not DUPLICATE:
                self._note_interval(d.interval_ms, now)
            if d.head <= self.position:
                if not self._pending:
                    self._joining = False   # the bridge has sent nothing we lack
            elif self.mode is MULTICAST:
                self._claim_seq(d.head, False, now)
        else:
            fresh = self._take(d, now)
            self._drain()
            if fresh and self._buffer_follows_on():     # multicast data follows on from here
                self._joining = False
        self._update(now)

    def on_feed_message(self, msg: Message, now: float) -> None:
        """One message from the unicast feed (sequences increase, no gap from where it began)."""
        self._now = now
        seq = msg.sequence
        if seq > self.confirmed:
            self.confirmed = seq
            if self._claims:
                self._settle_claims(seq, -1, now)
        if seq <= self.position:
            self._drain()
            self._update(now)
            return
        heap, pending = self._heap, self._pending
        while heap and heap[0] < seq:       # multicast entries the feed says do not match
            s = heapq.heappop(heap)
            if s in pending:
                self._forget(s)
                self.stats.forged += 1
        self._hand(msg)
        self.stats.unicast += 1
        if seq in pending:
            heapq.heappop(heap)
            self._forget(seq)
        if self.mode is FALLBACK and len(self._fed) < _MAX_SAMPLES:
            self._fed.append(seq)
        self._drain()
        self._update(now)

    def check_started(self, now: float) -> None:
        """The shell asked the broker for the stream's last sequence (it covers every datagram
        received so far)."""
        self._now = now
        self._check_mark = self._arrivals
        if self.want_feed:
            self._feed_check_after = now + _FEED_CHECK_SPACING

    def on_broker_head(self, last: int, now: float) -> None:
        """The broker's answer to the head check: the stream's last sequence is ``last``."""
        mark = self._check_mark if self._check_mark is not None else -1
        self._check_mark = None
        self._now = now
        self.stats.checks += 1
        if last > self.confirmed:
            self.confirmed = last
        forged = 0
        uq, pending = self._unconfirmed, self._pending
        while uq and uq[0][0] <= mark:
            arrival, seq = uq.popleft()
            if seq > last:                  # arrived before the check, beyond the head: forged
                item = pending.get(seq)
                if item is not None and item[2] == arrival:
                    self._forget(seq)
                    forged += 1
        forged += self._settle_claims(last, mark, now)
        if forged:
            self.stats.forged += forged
            self._check_after = now + self.config.reorder_wait   # checks spaced under attack
        self._drain()
        self._update(now)

    def check_failed(self, now: float) -> None:
        """The head check got no answer (broker unreachable): it is tried again later."""
        self._now = now
        self._check_mark = None
        self._check_after = now + _CHECK_RETRY

    def tick(self, now: float) -> None:
        """Let time pass: reorder waits, claims, loss windows, silence."""
        self._update(now)

    # ------------------------------------------------------------------ internals

    def _follows(self, after: int) -> bool:
        """Whether an entry with this ``after`` follows on from :attr:`position`."""
        return after == self.position or (after < self.position and self.position == self._start)

    def _take(self, d: Data, now: float) -> bool:
        """Take the entries of a DATA datagram; whether any was beyond :attr:`position`."""
        st = self.stats
        fresh = False
        if self.mode is FALLBACK:           # only seen: the feed carries everything
            seen = self._mc_seen
            for e in d.entries:
                if e.sequence <= self.position:
                    st.stale += 1
                if len(seen) < _MAX_SAMPLES:
                    seen.add(e.sequence)
            return False
        limit = self.config.max_pending_bytes
        for e in d.entries:
            seq = e.sequence
            position = self.position
            if seq <= position:
                st.stale += 1
                self._check_deceived(e)
                continue
            fresh = True
            if e.ref:
                st.refs += 1
                self._claim_seq(seq, True, now)
                continue
            if seq in self._pending:
                after, m, _ = self._pending[seq]
                if (after, m.key, m.body, m.timestamp) != (e.after, e.key, e.body, e.timestamp):
                    self._dispute(seq, now)     # two versions: one is forged
                continue
            if seq in self._disputed:
                continue                    # the broker says which
            after = e.after
            if after < position and position != self._start:
                st.forged += 1              # "nothing between after and seq": yet one was handed
                continue
            if after == position or after < position:
                if not self._pending and seq <= self.confirmed:
                    # Follows on, confirmed, nothing waits: hand it now (no buffering).
                    self._hand_entry(after, Message(seq, e.key, e.body, e.timestamp, self.stream))
                    self._joining = False
                    continue
            size = len(e.key) + len(e.body) + _ENTRY_OVERHEAD
            if self._pending_bytes + size > limit:
                st.overflow += 1
                self._claim_seq(seq, False, now)    # fetch it (once the broker confirms it)
                continue
            self._pending_bytes += size
            self._pending[seq] = (after, Message(seq, e.key, e.body, e.timestamp, self.stream),
                                  self._arrivals)
            heapq.heappush(self._heap, seq)
            if seq > self.confirmed:
                self._unconfirmed.append((self._arrivals, seq))
        return fresh

    def _forget(self, seq: int) -> tuple[int, Message]:
        after, m, _ = self._pending.pop(seq)
        self._pending_bytes -= len(m.key) + len(m.body) + _ENTRY_OVERHEAD
        return after, m

    def _top(self) -> int | None:
        """The lowest buffered sequence (dropped ones are popped on the way)."""
        heap, pending = self._heap, self._pending
        while heap and heap[0] not in pending:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _buffer_follows_on(self) -> bool:
        top = self._top()
        return top is None or self._follows(self._pending[top][0])

    def _drain(self) -> None:
        """Hand every buffered entry that follows on from ``position`` and is confirmed."""
        heap, pending = self._heap, self._pending
        while heap:
            seq = heap[0]
            item = pending.get(seq)
            if item is None:                # dropped (forged)
                heapq.heappop(heap)
                continue
            if seq <= self.position:
                heapq.heappop(heap)
                self._forget(seq)
                continue
            after = item[0]
            if after > self.position:
                break                       # a gap
            if after < self.position and self.position != self._start:
                heapq.heappop(heap)         # denies a handed message: not real
                self._forget(seq)
                self.stats.forged += 1
                continue
            if seq > self.confirmed:
                break                       # waits for a head check
            heapq.heappop(heap)
            self._hand_entry(after, self._forget(seq)[1])
            self._joining = False

    def _hand(self, msg: Message) -> None:
        self.ready.append(msg)
        self.position = msg.sequence

    def _hand_entry(self, after: int, msg: Message) -> None:
        """Hand a multicast entry that follows on; remember the span it says is empty."""
        self._handed.note(max(after, self.position), msg)
        self._hand(msg)
        self.stats.multicast += 1

    def _check_deceived(self, e) -> None:
        """A stale entry: if it shows that a forged entry was handed in its place (this real
        one passed over), counted; the shells log it."""
        if self._handed.deceived(e):
            self.stats.deceived += 1

    def _dispute(self, seq: int, now: float) -> None:
        """Two entries for ``seq`` disagree: drop both, take ``seq`` from the broker."""
        self._forget(seq)
        self.stats.forged += 1
        if len(self._disputed) >= _MAX_SPANS:
            self._disputed = {s for s in self._disputed if s > self.position}
            if len(self._disputed) >= _MAX_SPANS:
                self._disputed.clear()      # (they are beyond position: taken from the feed)
        self._disputed.add(seq)
        self._claim_seq(seq, True, now)

    def _needs_check(self) -> bool:
        uq, pending, confirmed = self._unconfirmed, self._pending, self.confirmed
        while uq:
            arrival, seq = uq[0]
            item = pending.get(seq)
            if seq > confirmed and item is not None and item[2] == arrival:
                return True
            uq.popleft()
        return bool(self._claims)

    def _claim_seq(self, seq: int, urgent: bool, now: float) -> None:
        """A HEAD or REF says a matching message up to ``seq`` exists."""
        if seq > self.confirmed:
            if len(self._claims) >= _MAX_CLAIMS:
                self._claims.popleft()
            self._claims.append((self._arrivals, seq, urgent))
        else:
            self._accept_claim(seq, urgent, now)

    def _settle_claims(self, last: int, mark: int, now: float) -> int:
        """Claims waiting for a check, now that the broker's head is ``last``; the number found
        forged (beyond ``last``, arrived before the check of ``mark``)."""
        forged = 0
        keep: deque[tuple[int, int, bool]] = deque()
        for arrival, seq, urgent in self._claims:
            if seq <= last:
                self._accept_claim(seq, urgent, now)
            elif arrival <= mark:
                forged += 1
            else:
                keep.append((arrival, seq, urgent))
        self._claims = keep
        return forged

    def _accept_claim(self, seq: int, urgent: bool, now: float) -> None:
        if seq <= self.position or now < self._claims_from or self.mode is FALLBACK:
            return
        if self._claim <= self.position:    # none open: its clock starts
            self._claim_pos = self.position
            self._claim_deadline = now + self.config.claim_hold
        self._claim = max(self._claim, seq)
        if urgent:
            self._urgent = True

    def _note_interval(self, interval_ms: int, now: float) -> None:
        interval = min(max(interval_ms, 1) / 1000.0, _MAX_INTERVAL)
        if interval >= self._interval or now >= self._interval_until:
            self._interval = interval
            self._interval_until = now + _INTERVAL_MEMORY

    def _silence(self) -> float:
        s = self.config.silence
        return s if s is not None else max(3 * self._interval, _MIN_SILENCE)

    def _update(self, now: float) -> None:
        self._now = now
        c = self.config
        if self._claim:
            if self._claim <= self.position:
                self._claim = 0             # fulfilled
            elif self.position != self._claim_pos:
                self._claim_pos = self.position     # getting closer: more time
                self._claim_deadline = now + c.claim_hold
            elif now >= self._claim_deadline:
                self._claim = 0             # not borne out: drop it, ignore claims a while
                self._claims_from = now + c.claim_holdoff
                self.stats.unfulfilled += 1
        top = self._top()
        gap = ((top is not None and self._pending[top][0] > self.position)
               or self.target > self.position or self._claim > self.position)
        if not gap:
            self._gap_since = None
            self._urgent = False
            self._repairing = False
        elif not self._repairing:
            if self._gap_since is None:
                self._gap_since = now
            if self._urgent or now - self._gap_since >= c.reorder_wait:
                self._repairing = True
                if self.mode is MULTICAST:
                    self.stats.repairs += 1
        window = self._meter.roll(now)
        if window is not None:
            self._judge(window, now)
        if self.mode is MULTICAST and now - self._last_datagram >= self._silence():
            why = PATTERN if self._others.count else SILENCE
            self._fall_back(why, describe(why, stream=self.stream, pattern=self.pattern,
                                          silence=self._silence(), others=self._others))

    def _judge(self, w: Window, now: float) -> None:
        c = self.config
        if self.mode is MULTICAST:
            if (w.expected >= c.min_datagrams and w.rate >= c.fallback_loss
                    and now >= self._fallback_ok_at):
                self._fall_back(LOSS, describe(
                    LOSS, stream=self.stream, pattern=self.pattern, rate=w.rate,
                    expected=w.expected, window=c.loss_window, limit=c.fallback_loss))
                self._fallback_ok_at = now + c.fallback_holdoff
            return
        # Feed messages of the window before, against the entries multicast brought since then,
        # from the first of them multicast brought: its numbers can be forged, what it carried
        # cannot be taken away. Without such messages, the numbers judge.
        samples, self._fed_before, self._fed = self._fed_before, self._fed, []
        good = None
        if samples:
            seen = self._mc_seen
            first = next((i for i, s in enumerate(samples) if s in seen), None)
            if first is not None:
                judged = len(samples) - first
                missed = sum(1 for s in samples[first:] if s not in seen)
                good = missed <= c.return_loss * judged
            floor = samples[-1]
            self._mc_seen = {s for s in seen if s > floor}
        if good is None:
            if not w.expected:          # nothing was due (idle between HEADs): no verdict
                return
            good = w.rate <= c.return_loss
        self._good_windows = self._good_windows + 1 if good else 0
        if self._good_windows >= c.return_windows:
            self.mode = MULTICAST
            self._joining = True
            self.stats.returns += 1
            self._mc_seen = set()
            self._fed, self._fed_before = [], []

    def _fall_back(self, reason: str, detail: str) -> None:
        self.mode = FALLBACK
        self.stats.fallbacks += 1
        setattr(self.stats, "fallbacks_" + reason, getattr(self.stats, "fallbacks_" + reason) + 1)
        self.fallback_reason, self.fallback_detail = reason, detail
        self._good_windows = 0
        self._joining = False
        self._pending.clear()
        self._heap.clear()
        self._pending_bytes = 0
        self._unconfirmed.clear()
        self._claims.clear()
        self._claim = 0
        self._mc_seen = set()
        self._fed, self._fed_before = [], []
