"""One client's protocol state, as pure code (no sockets, no clock of its own).

In the style of h11, a :class:`Session` only knows the ZEPS/1 grammar and the client's own
state. The broker core feeds it each decoded command with :meth:`Session.accept`, which either
moves the state machine on or raises :class:`ProtocolViolation` with the reason that goes back in
INVALID. What a command *does* (routing, journal, replies) is the core's and the stream's job.

States::

    NEW --ATTACH--> ATTACHED --DETACH--> NEW      (Stream.attach / Stream.detach make the moves)
    (PING and LIST-STREAMS are fine in every state, as the reference broker answers PING early)

The subscriber half of the state is plain data that ``stream.py`` reads and writes:

* ``subscriptions`` — (pattern, start) pairs: a pattern applies to sequences >= its start;
* ``next_seq`` — the client's position: the next sequence it may be sent (0 = not subscribed);
* ``credit`` — bytes the client has granted and not yet used;
* ``live`` — True while the client is fed from the live flow, False while it is "historical"
  (only ``next_seq`` is remembered; the journal feeds it when it has credit).
"""
from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional, Tuple

from zeps.protocol import commands as c, encode
from zeps.protocol.reasons import NOT_ATTACHED, PUBLISH_REJECTED, Reason  # noqa: F401 (re-exported)

NEW = "NEW"
ATTACHED = "ATTACHED"

#: The broker's DETACH (the grammar's S:DETACH): a client is told its peering is over (expired, or
#: its stream deleted).
DETACH_FRAME = encode(c.Detach())

#: Commands a client may send in any state.
_ANY_STATE = (c.Ping, c.ListStreams, c.ListStreamsPage, c.Limits, c.StreamCreate, c.StreamDelete,
              c.StreamPurge, c.StreamDescribe, c.BatchSelect, c.ReasonsSelect, c.StreamExpect,
              c.HeadersSelect, c.StreamCreateX, c.StreamSettingsGet)
#: Commands that need an attached stream.
_ATTACHED_ONLY = (c.Subscribe, c.Credit, c.Publish, c.Detach, c.SeqAtTime, c.StreamInfo,
                  c.ConfirmSelect, c.DeliverTimestamps, c.Producer, c.PublishBatch, c.StreamId,
                  c.PublishHeaders, c.Snapshot, c.ConsumerAdd, c.Consume, c.Ack, c.Nak,
                  c.Progress, c.ConsumerInfo, c.ConsumerList, c.ConsumerDelete)



def bad_stream_name(name: str) -> Optional[str]:
    """Why ``name`` cannot name a stream (the one check of ATTACH and the administration
    commands; the codec already bounds it to 255 bytes), or None."""
    if not name or "\x00" in name:
        return "stream name must be 1 to 255 bytes and contain no NUL"
    return None


class ProtocolViolation(Exception):
    """A command that is not allowed now; ``reason`` (a :class:`Reason`, or a text) is what the
    client is told, ``str()`` its text."""

    def __init__(self, reason):
        self.reason = Reason.of(reason)
        super().__init__(self.reason.text)


class Session:
    __slots__ = ("identity", "state", "stream", "last_seen", "subscriptions", "next_seq", "expect",
                 "credit", "live", "future_start", "confirms", "published", "confirmed", "unconfirmed",
                 "timestamps", "reasons", "congested_until", "backoff", "held", "delivered",
                 "delivered_seen", "credit_peak", "told_too_big", "user", "may_publish",
                 "may_subscribe", "producer", "pseq_next", "producer_refusal", "producer_ids",
                 "headers", "snapshot", "consumer",
                 "batches", "budget", "budget_at", "waiting")

    def __init__(self, identity: bytes, now: float):
        self.identity = identity
        self.state = NEW
        self.stream: Optional[str] = None
        self.last_seen = now
        self.expect: Optional[int] = None   # STREAM-EXPECT: the incarnation the next ATTACH
        #                                     must find (0: any; None: it may create the stream)
        # Congestion (the connection's send pipe was full): no DELIVER is produced for the client
        # before ``congested_until``; replies meanwhile wait in ``held`` (bounded by the core).
        self.congested_until = 0.0
        self.backoff = 0.0
        self.held: Deque[bytes] = deque()
        self.delivered = 0              # DELIVERs produced for the client (liveness, stats)
        self.delivered_seen = 0         # ``delivered`` at the last expiry check
        self.user: Optional[str] = None  # the CurveZMQ public key (Z85) it authenticated with
        self.batches = False            # BATCH-SELECT: DELIVER-BATCH, on every later peering too
        self.reasons = False            # REASONS-SELECT: ERROR instead of INVALID, from then on
        self.headers = False            # HEADERS-SELECT: DELIVER-H for messages with headers
        self.budget = float("inf")      # see spend(): starts full
        self.producer_ids: set = set()  # producer ids registered on this connection (capped)
        self.budget_at = now
        #: While its ATTACH waits for the stream's journal to open (off the loop): the messages
        #: it sent since, handled in order once the ATTACH is answered (bounded); else None.
        self.waiting: Optional[List[List[bytes]]] = None
        self._reset_stream_state()

    def _reset_stream_state(self) -> None:
        self.subscriptions: List[Tuple[object, int]] = []
        self.next_seq = 0
        self.credit = 0
        self.live = False
        self.future_start = 0           # highest pattern start; above next_seq => check per pattern
        self.confirms = False
        self.published = 0              # PUBLISH accepted (appended) on this peering
        self.confirmed = 0              # the count of its last CONFIRM
        # (count, sequence) not yet durable, and refusals waiting behind them (.confirms)
        self.unconfirmed: Deque[tuple] = deque()
        self.timestamps = False         # send DELIVER-TS instead of DELIVER
        self.credit_peak = 0            # most credit held at once: the client's window, in effect
        self.told_too_big = 0           # last sequence reported as larger than that window
        self.may_publish = True         # rights on the attached stream (the ACL, at ATTACH)
        self.may_subscribe = True
        self.producer: Optional[str] = None   # idempotent producer id (PRODUCER), or None
        self.pseq_next = 0              # producer sequence of this peering's next PUBLISH
        #: Why this peering's publishes are refused (fenced, out of order: a reasons.Reason),
        #: until a PRODUCER that is accepted; None: they are not.
        self.producer_refusal = None
        self.snapshot = None            # the SNAPSHOT under way (broker/snapshots.py), or None
        self.consumer = None            # the consumer it joined (broker/groups.py), or None

    # --------------------------------------------------------------- the grammar
    def accept(self, cmd: c.Command, now: float) -> None:
        """Check ``cmd`` against the grammar; raise :class:`ProtocolViolation` if not allowed now.

        This only *checks*: the transitions themselves (:meth:`attached`, :meth:`detached`) are
        made by the stream the client joins or leaves, which must first undo what it holds for the
        client (index entries, replay and confirm queues) while the session still describes it."""
        self.last_seen = now
        if isinstance(cmd, _ANY_STATE):
            return
        if isinstance(cmd, c.Attach):
            if self.state == ATTACHED:
                raise ProtocolViolation(f"ATTACH while attached to stream {self.stream!r}; DETACH first")
            why = bad_stream_name(cmd.stream)
            if why:
                raise ProtocolViolation(why)
            return
        if isinstance(cmd, _ATTACHED_ONLY):
            if self.state != ATTACHED:
                raise ProtocolViolation(Reason.not_attached(cmd.NAME))
            return
        raise ProtocolViolation(f"{cmd.NAME} is sent by the broker, not by a client")

    # --------------------------------------------------------------- transitions (called by Stream)
    def spend(self, now: float, rate: float, burst: int) -> bool:
        """Take one from the client's budget for commands whose cost is not per message (a
        token bucket: ``burst`` at once, refilled at ``rate`` a second); False if it is empty."""
        tokens = min(float(burst), self.budget + (now - self.budget_at) * rate)
        self.budget_at = now
        if tokens < 1.0:
            self.budget = tokens
            return False
        self.budget = tokens - 1.0
        return True

    def attached(self, stream: str) -> None:
        """NEW -> ATTACHED to ``stream``, with a fresh peering state."""
        self.state = ATTACHED
        self.stream = stream
        self._reset_stream_state()

    def detached(self) -> None:
        """ATTACHED -> NEW: nothing of the peering is left (subscriptions, credit, confirms)."""
        self.state = NEW
        self.stream = None
        self._reset_stream_state()

    # --------------------------------------------------------------- subscriber helpers
    @property
    def subscribed(self) -> bool:
        return self.next_seq > 0

    def add_subscription(self, pattern, start: int) -> None:
        """Add a pattern from ``start`` (already clamped by the stream, see docs/protocol.md)."""
        for i, (p, s) in enumerate(self.subscriptions):
            if p.text == pattern.text:
                self.subscriptions[i] = (p, min(s, start))
                break
        else:
            self.subscriptions.append((pattern, start))
        if self.next_seq == 0:
            self.next_seq = start
        self.future_start = max(s for _, s in self.subscriptions)

    def has_pattern(self, text: str) -> bool:
        return any(p.text == text for p, _ in self.subscriptions)

    def regex_count(self) -> int:
        return sum(1 for p, _ in self.subscriptions if p.kind == "regex")

    def remove_pattern(self, text: str) -> bool:
        """Drop a pattern (the stream removes it from its index); True if it was there."""
        kept = [(p, s) for p, s in self.subscriptions if p.text != text]
        if len(kept) == len(self.subscriptions):
            return False
        self.subscriptions = kept
        self.future_start = max((s for _, s in kept), default=0)
        return True

    def takes_all_from(self) -> Optional[int]:
        """The first sequence from which a pattern of this client takes every key (the empty
        prefix), or None."""
        starts = [start for pattern, start in self.subscriptions
                  if pattern.kind == "prefix" and not pattern.prefix]
        return min(starts) if starts else None

    def takes_all(self, sequence: int) -> bool:
        """Does a pattern of this client take every key from ``sequence`` on (the empty prefix)?"""
        for pattern, start in self.subscriptions:
            if start <= sequence and pattern.kind == "prefix" and not pattern.prefix:
                return True
        return False

    def accepts(self, key: str, sequence: int) -> bool:
        """Does any of this client's patterns that applies at ``sequence`` match ``key``?"""
        for pattern, start in self.subscriptions:
            if sequence >= start and pattern.matches(key):
                return True
        return False
