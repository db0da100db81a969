"""The broker core: every client's :class:`Session`, every :class:`Stream`, and the dispatch
between them. No sockets: the I/O shell (``server.py``) hands it ``(identity, frames)`` with
:meth:`BrokerCore.receive` and sends whatever it leaves in :attr:`BrokerCore.outbox`.

A round is one method, :meth:`BrokerCore.round`: the shell hands over what it read with
:meth:`BrokerCore.receive`, then calls ``round(now, send, synced)``, which runs the steps in their
one order and calls the shell's ``send`` wherever frames must go out before the next step; it
returns a :class:`Round` saying whether replay work remains, which journals to fsync and which to
open.

"No sockets" is not "no disk": the core calls the journal library, whose appends (one write per
stream a round), segment rolls (their fsync), retention's unlinks, and the administration
commands' directory work run on the loop. Opening a journal (a new stream's directory and
fsyncs, or a closed one's recovery) does not: the shell does it in its thread pool
(``attaching.py``), and so does the group fsync (``Round.to_sync``).

Here: input and dispatch, subscribing, the per-peering options, the round. The other handlers
live beside it as mixins, each in the file named after its concept: joining and leaving streams
and the open streams (``attaching.py``), keys and the ACL (``access.py``), publishing and
idempotent producers (``publishing.py``), listing and stream administration (``admin.py``),
congestion — frames the shell could not send (``congestion.py``) — the timers (``timers.py``)
and message headers (``headers.py``).
"""
from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from zeps.matching import PatternError, compile_pattern
from zeps.matching.patterns import REGEX_MARKER
from zeps.protocol import ProtocolError, commands as c, decode, encode
from zeps.protocol.batch import PUBLISH_BATCH_ID
from zeps.protocol.codec import FRAME_SLACK, publish_frame_limit
from zeps.protocol.deliver import SIGNATURE

from zeps.protocol.reasons import Reason

from .access import Access
from .admin import StreamAdministration
from .attaching import MAX_WAITING, Attachment
from .catalogue import StreamCatalogue
from .congestion import Congestion
from .consuming import SAVE_BURST, SIDE_RATE, Consuming, SyncStore
from .headers import HeadersHandling
from .outstanding import Budget
from .publishing import Publishing
from .session import ATTACHED, ProtocolViolation, Session
from .snapshots import Snapshots
from .sweeps import Sweep
from .timers import COMPACTION_SLICE, EXPIRY_SLICE, RETENTION_SLICE, Timers
from .worklists import Worklists
from .stream import COUNTERS, Stream

Outbox = List[Tuple[bytes, bytes]]


@dataclass(frozen=True)
class Round:
    """What a round leaves the shell to do."""
    more: bool                  # replay work remains: run the next round without waiting
    to_sync: Sequence[Stream]   # journals to fsync (off the loop), then ``round(synced=True)``
    to_open: Sequence[str]      # streams to open (off the loop), then :meth:`BrokerCore.opened`
    #: compactions to run (off the loop, one at a time), then :meth:`BrokerCore.compacted`
    to_compact: Tuple = ()


#: The round that leaves the shell nothing to do (shared: a Round is immutable).
IDLE_ROUND = Round(False, (), (), ())

_PING_OK = encode(c.PingOk())
_DELIVER_TIMESTAMPS_OK = encode(c.DeliverTimestampsOk())
_REASONS_SELECT_OK = encode(c.ReasonsSelectOk())
_PUBLISH_BATCH_ID = bytes([PUBLISH_BATCH_ID])




@dataclass
class CoreConfig:
    expiry: float = 60.0                  # seconds of silence before a client is forgotten
    expiry_check: float = 1.0             # how often silence is checked
    fsync: str = "interval"               # the journals' policy: the core times "interval" syncs
    fsync_interval: float = 0.05          # seconds between group fsyncs (fsync=interval)
    retention_check: float = 10.0         # seconds between retention passes
    compaction_check: float = 30.0        # seconds between looks for compacted streams to clean
    congestion_backoff: float = 0.01      # first wait after a client's pipe was full (doubles)
    congestion_backoff_max: float = 1.0
    max_held: int = 256                   # replies held for a congested client before it is forgotten
    # Limits (each refusal is an INVALID whose reason starts with reasons.LIMIT)
    max_streams: int = 10_000             # streams in use (with clients) at once
    max_open_streams: int = 1000          # journals kept open; idle ones beyond are closed (LRU)
    max_clients: int = 10_000             # sessions (connections that spoke) at once
    max_subscriptions: int = 1024         # patterns per client
    max_regex_subscriptions: int = 16     # regex patterns per client
    max_regex_per_stream: int = 128       # distinct regexes matched per published key on a stream
    max_producer_ids: int = 16            # distinct producer ids one connection may register
    max_producer_ids_per_key: int = 1000  # producer ids bound to one CurveZMQ key per stream
    max_credit: int = 64 << 20            # the credit window the broker advises (LIMITS-OK)
    regex_strikes: int = 3                # timeouts before a regex subscription is removed
    max_message: int = 1 << 20            # largest body accepted in a PUBLISH (a stream may lower it)
    max_batch: int = 1 << 20              # largest PUBLISH-BATCH frame (BATCH-SELECT-OK tells it)
    auto_create: bool = True              # ATTACH creates a missing stream (else "no stream")
    max_total_streams: int = 100_000      # streams stored (on disk) at once: creation beyond is refused
    max_total_consumers: int = 100_000    # durable consumers in memory at once: adding beyond is refused
    # outstanding messages of every durable consumer (a few hundred B each): beyond, consumers
    # are paused
    max_total_outstanding: int = 4_194_304
    # Commands whose cost is not per message (listing, stream administration) are paid from a
    # per-client budget: ``admin_burst`` at once, then ``admin_rate`` a second.
    admin_rate: float = 20.0
    admin_burst: int = 20
    regex_timeout: float = 0.005          # seconds per regex match
    replay_batch_records: int = 1000
    replay_batch_bytes: int = 1 << 20
    max_unread: int = 8 << 20             # bytes read off one connection and not yet handled

    def max_frame(self) -> int:
        """The largest frame a client may send (the shell sets it as the socket's
        ``ZMQ_MAXMSGSIZE``: a peer sending more is disconnected before the broker holds it).
        It is the largest PUBLISH (head, a 255-byte key, ``max_message`` of body) or
        PUBLISH-BATCH, with room to spare so that a frame just over a limit still gets an
        INVALID that says which."""
        return max(publish_frame_limit(self.max_message), self.max_batch + FRAME_SLACK)

    def receive_hwm(self) -> int:
        """The ROUTER's ``ZMQ_RCVHWM``: how many messages libzmq reads ahead off one connection
        before it leaves the rest in the kernel and the sender blocks. libzmq counts messages,
        not bytes, so the count is the byte bound ``max_unread`` over the largest frame: what a
        client sending flat out parks in the broker stays under ``max_unread`` whatever its
        message size (at least 8 messages, and never more than 10,000, the old setting).
        A small read-ahead costs no throughput: the loop reads at most ``DRAIN_MAX`` messages a
        round anyway, over all connections (docs/operations.md)."""
        return max(8, min(10_000, self.max_unread // self.max_frame()))


class BrokerCore(Attachment, Access, Publishing, StreamAdministration, Congestion, Timers,
                 HeadersHandling, Snapshots, Consuming):
    def __init__(self, datadir, config: Optional[CoreConfig] = None,
                 log: Optional[Callable[..., None]] = None):
        self.datadir = datadir
        self.config = config or CoreConfig()
        self.log = log or (lambda *a, **k: None)
        self.sessions: Dict[bytes, Session] = {}
        self.streams: Dict[str, Stream] = {}
        self.outbox: Outbox = []
        self.work = Worklists()          # the streams with work: a round visits those only
        self.congested: Dict[bytes, Session] = {}
        # (congested_until, order, identity) of each congestion, ended in that order: a heap
        # (congestion.py); an entry whose client is no longer congested until then is dropped
        self.congestion_ends: List[Tuple[float, int, bytes]] = []
        self._congestion_order = itertools.count()
        self._to_free: List[Session] = []                 # detached: freed by sent()
        #: (identity, outbox length) of each peering ended since the outbox was last taken:
        #: its DELIVERs before that position are marked stale then (congestion.py)
        self._ended: List[Tuple[bytes, int]] = []
        # a freed session's admin budget and producer ids, until its connection is gone
        self._spent: Dict[bytes, tuple] = {}
        # LIST-STREAMS-PAGE tokens for names a key may not read: key -> {token: name}, the
        # newest LIST_TOKENS of each key (admin.py)
        self.list_tokens: Dict[str, "OrderedDict[str, str]"] = {}
        self._recovering: Dict[bytes, Session] = {}        # uncongested, backoff not yet reset
        self.acl = None                                    # zeps.broker.acl.Acl; None = open
        self.users: Dict[bytes, str] = {}                  # routing id -> authenticated key
        self.allowed_keys: Optional[FrozenSet[str]] = None  # CURVE allow-list; None: not known
        self.revoked: Dict[bytes, bool] = {}               # ids of revoked keys -> ERROR chosen
        self.bad_frames: Dict[bytes, int] = {}            # malformed frames not yet logged
        self.bad_frames_other = 0
        self.bad_frames_total = 0                          # since start (stats)
        self.invalids: Counter = Counter()                 # INVALIDs sent, by reasons.label
        self.released_counts = dict.fromkeys(COUNTERS, 0)  # traffic of streams since closed
        #: The timers' passes over the sessions (expiry) and the open streams (retention, the
        #: compaction check), in slices of bounded size (zeps/broker/sweeps.py).
        self._expiry_sweep: Sweep = Sweep(self.config.expiry_check, EXPIRY_SLICE)
        self._retention_sweep: Sweep = Sweep(self.config.retention_check, RETENTION_SLICE)
        self._compaction_sweep: Sweep = Sweep(self.config.compaction_check, COMPACTION_SLICE)
        self._next_sync = float("-inf")
        self.queued = 0                    # messages published since the last append_queued()
        self.now = float("-inf")           # the time of the message being handled
        self.catalogue = StreamCatalogue(datadir.streams())   # every stored stream's name
        #: Streams whose journal the shell opens off the loop, and the ATTACHes waiting for each.
        self.opening: Dict[str, List[Tuple[Session, c.Attach, Optional[int]]]] = {}
        self._to_open: List[str] = []
        self.snapshotting: Dict[bytes, object] = {}       # SNAPSHOTs under way (snapshots.py)
        #: Durable consumers (consuming.py): stream -> name -> Group, loaded on first use;
        #: ``consumer_store`` saves them (the shell's Saver, off the loop).
        self.consumers: Dict[str, dict] = {}
        self.consumers_held = 0          # how many, of every stream (max_total_consumers)
        #: Their outstanding messages, over all of them (max_total_outstanding; outstanding.py).
        self.outstanding = Budget(self.config.max_total_outstanding)
        self.consumer_store = SyncStore(sync=self.config.fsync != "never")
        #: The consumers with timers or unsaved changes: all a consumer tick visits.
        self.consumers_ticking: Dict[object, None] = {}
        #: The consumers with members: all the pump step visits (a member joins them to it).
        self.consumers_pumping: Dict[object, None] = {}
        self.consumers_turn = 0          # the pump step starts one further each round
        #: stream -> its journal's end (next sequence) when first opened since the broker
        #: started, while its consumers are not loaded: a cursor past it was lost to a power
        #: loss (consuming.py, ``_rewind``). One int a stream, dropped when they are loaded.
        self.journal_ends: Dict[str, int] = {}
        self.dead_letter_publisher = Session(b"\x00dead-letter", 0.0)
        #: Dead-letter streams being opened for a consumer, and those whose open failed.
        self.dead_letter_opens: Set[str] = set()
        self.dead_letter_failed: Dict[str, BaseException] = {}
        self._next_consumer_tick = float("-inf")
        self.save_tokens = float(SAVE_BURST)             # consumers' saves (consuming.py)
        self.save_side_tokens = float(SIDE_RATE)
        self.save_tokens_at = 0.0

    # ------------------------------------------------------------------ input
    def receive(self, identity: bytes, frames: List[bytes], now: float) -> None:
        """Handle one ZeroMQ message from a client (frames after the ROUTER identity)."""
        s = self.sessions.get(identity)
        if s is not None and s.waiting is not None:   # after an ATTACH that waits: in order
            s.last_seen = now
            if len(s.waiting) < MAX_WAITING:
                s.waiting.append(frames)
            else:
                self._invalid(identity, Reason.limit("max_waiting", MAX_WAITING))
            return
        if s is not None and s.congested_until:
            mark = len(self.outbox)              # its replies wait behind those it holds
            self._receive(identity, frames, now)
            if s.congested_until and self.sessions.get(identity) is s:
                self._hold_replies(s, mark)
            return
        self._receive(identity, frames, now)

    def _receive(self, identity: bytes, frames: List[bytes], now: float) -> None:
        self.now = now
        if self.revoked and identity in self.revoked:     # its key was removed: refuse all
            self._refuse_revoked(identity)
            return
        if len(frames) != 1:
            self._invalid(identity, f"a ZEPS command is exactly one frame, got {len(frames)}")
            return
        frame = frames[0]
        if (frame[2:3] == _PUBLISH_BATCH_ID and frame[:2] == SIGNATURE
                and self._batch_refused(identity, frame)):
            return
        try:
            cmd = decode(frame)
        except ProtocolError as exc:
            self._invalid(identity, str(exc))
            self._note_bad_frame(identity, str(exc))
            return
        session = self.sessions.get(identity)
        if session is None:
            if len(self.sessions) >= self.config.max_clients:
                self._invalid(identity, Reason.limit("max_clients", self.config.max_clients))
                return
            session = self.sessions[identity] = Session(identity, now)
            session.user = self.users.get(identity)
            if self._spent:
                spent = self._spent.pop(identity, None)
                if spent is not None:
                    session.budget, session.budget_at, session.producer_ids = spent
        elif session.state is ATTACHED and (type(cmd) is c.Publish or type(cmd) is c.PublishBatch):
            session.last_seen = now                   # hot path: the grammar allows it
            if type(cmd) is c.Publish:
                self._on_publish(session, cmd)
            else:
                self._on_publish_batch(session, cmd)
            return
        try:
            session.accept(cmd, now)
        except ProtocolViolation as exc:
            self._invalid(identity, exc.reason)
            return
        self._dispatch(_HANDLERS.get(type(cmd)), session, cmd)

    def _dispatch(self, handler, session: Session, cmd) -> None:
        identity = session.identity
        if handler is not None:
            try:
                handler(self, session, cmd)
            except Exception as exc:   # one client's request must never stop the broker
                self.log("internal_error", client=identity.hex(), command=cmd.NAME,
                         error=f"{type(exc).__name__}: {exc}")
                self._invalid(identity, Reason.failed(f"{cmd.NAME} failed in the broker", exc))

    def _invalid(self, identity: bytes, reason: Reason | str) -> None:
        """Refuse: INVALID with the reason's text, or to a client that sent REASONS-SELECT, ERROR
        with its code and fields (a text is coded by its prefix: ``Reason.of``)."""
        reason = Reason.of(reason)
        s = self.sessions.get(identity)
        self.outbox.append((identity, reason.frame(s is not None and s.reasons)))
        self.invalids[reason.label] += 1

    def _note_bad_frame(self, identity: bytes, reason: str) -> None:
        """Log malformed frames aggregated: the first from a client in each expiry-check
        period at once, the rest as one ``invalid_frames`` line per client at the next tick."""
        n = self.bad_frames.get(identity)
        if n is None:
            if len(self.bad_frames) >= 1000:             # a flood of new identities: count only
                self.bad_frames_other += 1
                return
            self.bad_frames[identity] = 0
            self.log("invalid_frame", client=identity.hex(), reason=reason)
        else:
            self.bad_frames[identity] = n + 1
        self.bad_frames_total += 1

    # ------------------------------------------------------------------ handlers
    def _on_ping(self, s: Session, cmd) -> None:
        # A barrier: every PUBLISH before it has its answer (CONFIRM count or INVALID) first.
        if s.stream is not None:
            st = self.streams.get(s.stream)
            if st is not None and st.queued_publishes:
                st.append_queued()
        self.outbox.append((s.identity, _PING_OK))

    def _on_subscribe(self, s: Session, cmd: c.Subscribe) -> None:
        if not s.may_subscribe:
            self._invalid(s.identity, Reason.not_allowed(self.acl.who(s.user), "subscribe", s.stream))
            return
        if s.consumer is not None:
            self._invalid(s.identity, "SUBSCRIBE on a consumer's member (use another peering)")
            return
        cfg = self.config
        stream = self.streams[s.stream]
        text = cmd.pattern
        if not s.has_pattern(text):        # the limits first: a refusal costs no compile
            why = None
            if len(s.subscriptions) >= cfg.max_subscriptions:
                why = Reason.limit("max_subscriptions", cfg.max_subscriptions)
            elif text.startswith(REGEX_MARKER):
                if s.regex_count() >= cfg.max_regex_subscriptions:
                    why = Reason.limit("max_regex_subscriptions", cfg.max_regex_subscriptions)
                elif (not stream.index.has_regex(text)
                      and stream.index.regex_count() >= cfg.max_regex_per_stream):
                    why = Reason.limit("max_regex_per_stream", cfg.max_regex_per_stream)
            if why:
                self._invalid(s.identity, why)
                return
        try:
            pattern = compile_pattern(text, timeout=cfg.regex_timeout,
                                      on_timeout=stream.regex_timed_out, check_backtracking=True)
        except PatternError as exc:
            self._invalid(s.identity, str(exc))
            return
        stream.subscribe(s, pattern, cmd.latest)

    def _on_credit(self, s: Session, cmd: c.Credit) -> None:
        # Credit is additive and only a number here: what the broker queues for a client is
        # bounded by its connection's high-water mark (--client-queue), whatever it granted.
        self.streams[s.stream].credit(s, cmd.credit)
        if s.snapshot is not None:
            self.snapshot_resume(s)
        elif s.consumer is not None:
            s.consumer.asleep = False

    def _on_reasons_select(self, s: Session, cmd) -> None:
        s.reasons = True                 # _invalid sends it ERROR from now on
        self.outbox.append((s.identity, _REASONS_SELECT_OK))

    def _on_batch_select(self, s: Session, cmd) -> None:
        s.batches = True
        self.outbox.append((s.identity, encode(c.BatchSelectOk(self.config.max_batch))))

    def _on_seq_at_time(self, s: Session, cmd: c.SeqAtTime) -> None:
        seq = self.streams[s.stream].seq_at(cmd.timestamp)
        self.outbox.append((s.identity, encode(c.SeqAtTimeOk(seq))))

    def _on_stream_info(self, s: Session, cmd) -> None:
        self.outbox.append((s.identity, encode(self.streams[s.stream].info())))

    def _on_confirm_select(self, s: Session, cmd) -> None:
        if not s.confirms:              # those appended before await no CONFIRM (.confirms)
            s.confirmed = s.published
        s.confirms = True
        stream = self.streams[s.stream]
        stream.append_queued()          # publishes before the select are counted in `published`
        self.outbox.append((s.identity, encode(c.ConfirmSelectOk(s.published))))

    def _on_limits(self, s: Session, cmd) -> None:
        self.outbox.append((s.identity, encode(c.LimitsOk(self.config.max_message,
                                                          self.config.max_credit))))

    def _on_deliver_timestamps(self, s: Session, cmd) -> None:
        s.timestamps = True
        self.outbox.append((s.identity, _DELIVER_TIMESTAMPS_OK))


    # ------------------------------------------------------------------ rounds
    def round(self, now: float, send: Callable[[], None], synced: bool = False) -> Round:
        """One round, after the shell handed over what it read (:meth:`receive`). The order:

        1. :meth:`append_queued`: one journal append per stream for the queued publishes, then live
           routing; ``send()``;
        2. :meth:`pump`: congestion whose time is up ends, then one journal batch for each
           subscriber catching up; if ``synced`` (a group fsync finished since the last round),
           :meth:`confirm`; ``send()``;
        3. :meth:`tick`: the timers, after the sends, so that they see what could not go out;
           ``send()`` if they produced anything.

        ``send`` is the shell's: it takes :meth:`take_outbox`, reports what did not go out
        (:meth:`unsent`, :meth:`gone`) and calls :meth:`sent`; it is called only when the
        outbox holds something (at a low rate most rounds route one message and have one
        send)."""
        self.append_queued()
        if self.outbox:
            send()
        more = self.pump(now)
        if synced:
            self.confirm()
        if self.outbox:
            send()
        to_sync = self.tick(now)
        if self.outbox:
            send()
        opens = self.take_opens() if self._to_open else ()
        jobs = self.take_compactions()
        if not (more or to_sync or opens or jobs):
            return IDLE_ROUND          # most rounds at a low rate: nothing for the shell
        return Round(more, to_sync, opens, jobs)

    def append_queued(self) -> None:
        """Journal every stream's queued publishes, then route them live."""
        self.queued = 0
        if self.work.publishes:
            todo = list(self.work.publishes.values())
            self.work.publishes.clear()
            for st in todo:
                if st.queued_publishes:
                    st.append_queued()

    def pump(self, now: float) -> bool:
        """End congestion whose time is up, then one replay batch per catching-up subscriber.
        True if more replay work remains."""
        if self.congested:
            self._uncongest(now)
        more = False
        if self.work.replays:
            replays = self.work.replays
            for name, st in list(replays.items()):
                if st.catching_up and st.pump():
                    more = True
                if not st.catching_up and replays.get(name) is st:
                    del replays[name]
        if self.snapshotting and self.pump_snapshots():
            more = True
        if self.consumers_pumping and self.pump_consumers(now):
            more = True
        return more

    def confirm(self) -> None:
        """CONFIRM what became durable (the shell calls it after a group fsync)."""
        confirms = self.work.confirms
        for name, st in list(confirms.items()):
            if st.confirming:
                st.confirm()
            if not st.confirming and confirms.get(name) is st:
                del confirms[name]

    def take_outbox(self) -> Outbox:
        """The frames to send, in order; the outbox is emptied (streams share the same list).
        After sending them (and reporting what did not go out) the shell calls :meth:`sent`."""
        if self._ended:
            self._mark_stale()
        out = self.outbox[:]
        self.outbox.clear()
        return out

    def sent(self) -> None:
        """The shell sent the batch it took. A client whose congestion ended and whose pipe
        took everything since starts its next backoff from the first step again (else a client
        congested now and then would wait the maximum every time). Sessions that ended with
        DETACH are freed now that their DETACH-OK went out (one whose DETACH-OK could not go
        out holds it, and waits)."""
        if self._recovering:
            for s in self._recovering.values():
                s.backoff = 0.0
            self._recovering.clear()
        if not self._to_free:
            return
        free, self._to_free = self._to_free, []
        for s in free:
            if s.stream is None and not s.held and not s.congested_until \
                    and s.waiting is None and self.sessions.get(s.identity) is s:
                del self.sessions[s.identity]
                if s.producer_ids or s.budget < self.config.admin_burst:
                    # what the connection spent stays its own: a session made again after a
                    # DETACH started with a full admin budget and no producer ids (a client
                    # bypassed --admin-rate and --max-producer-ids by ATTACH and DETACH)
                    self._spent[s.identity] = (s.budget, s.budget_at, s.producer_ids)

    # ------------------------------------------------------------------ connections
    def gone(self, identity: bytes) -> None:
        """The shell learnt that the client's connection is gone."""
        self._spent.pop(identity, None)
        self.users.pop(identity, None)
        self.revoked.pop(identity, None)
        self.forget(identity)

    def claimed(self, identity: bytes) -> None:
        """Another connection (another CurveZMQ key) claimed the routing id: the old one is
        gone, and nothing made for it may reach the new one. The frames for it waiting in the
        outbox (replies to what it sent in the same round) are dropped: the id is the new
        connection's now (their DELIVERs' peerings are marked first, the positions noted
        for that being the outbox's). They are sifted after the session is forgotten: its
        DETACH appends what the round queued on its stream, routed to it too (DELIVERs of a
        stream the new key may not read went to it: found by review)."""
        self.gone(identity)
        if self._ended:
            self._mark_stale()
        out = self.outbox
        if any(who == identity for who, _f in out):
            out[:] = [e for e in out if e[0] != identity]     # the streams share this list

    def forget(self, identity: bytes) -> None:
        """Drop a client entirely (expired, unresponsive, or its connection is gone)."""
        s = self.sessions.pop(identity, None)
        if s is None:
            return
        self.congested.pop(identity, None)
        self._recovering.pop(identity, None)
        if s.stream is not None:
            st = self.streams.get(s.stream)
            if st is not None:
                st.detach(s)
            self._end_peering(s)


_HANDLERS = {
    c.Ping: BrokerCore._on_ping,
    c.ListStreams: BrokerCore._on_list_streams,
    c.ListStreamsPage: BrokerCore._on_list_streams_page,
    c.Attach: BrokerCore._on_attach,
    c.StreamId: BrokerCore._on_stream_id,
    c.StreamExpect: BrokerCore._on_stream_expect,
    c.Detach: BrokerCore._on_detach,
    c.Subscribe: BrokerCore._on_subscribe,
    c.Credit: BrokerCore._on_credit,
    c.Publish: BrokerCore._on_publish,
    c.SeqAtTime: BrokerCore._on_seq_at_time,
    c.StreamInfo: BrokerCore._on_stream_info,
    c.ConfirmSelect: BrokerCore._on_confirm_select,
    c.DeliverTimestamps: BrokerCore._on_deliver_timestamps,
    c.BatchSelect: BrokerCore._on_batch_select,
    c.ReasonsSelect: BrokerCore._on_reasons_select,
    c.PublishBatch: BrokerCore._on_publish_batch,
    c.StreamCreate: BrokerCore._on_stream_create,
    c.StreamDescribe: BrokerCore._on_stream_describe,
    c.StreamPurge: BrokerCore._on_stream_purge,
    c.StreamDelete: BrokerCore._on_stream_delete,
    c.StreamCreateX: BrokerCore._on_stream_create_x,
    c.StreamSettingsGet: BrokerCore._on_stream_settings,
    c.Limits: BrokerCore._on_limits,
    c.Producer: BrokerCore._on_producer,
    c.HeadersSelect: BrokerCore._on_headers_select,
    c.PublishHeaders: BrokerCore._on_publish_headers,
    c.Snapshot: BrokerCore._on_snapshot,
    c.ConsumerAdd: BrokerCore._on_consumer_add,
    c.Consume: BrokerCore._on_consume,
    c.Ack: BrokerCore._on_ack,
    c.Nak: BrokerCore._on_nak,
    c.Progress: BrokerCore._on_progress,
    c.ConsumerInfo: BrokerCore._on_consumer_info,
    c.ConsumerList: BrokerCore._on_consumer_list,
    c.ConsumerDelete: BrokerCore._on_consumer_delete,
}
