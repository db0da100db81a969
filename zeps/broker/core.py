"""The broker core: every client's :class:`Session`, every :class:`Stream`, and the dispatch
between them. No sockets: the I/O shell (``server.py``) hands it ``(identity, frames)`` with
:meth:`BrokerCore.receive` and sends whatever it leaves in :attr:`BrokerCore.outbox`.

Note (issue 16): over 600 lines (the dispatch of every command). Its split -- one method that
runs a round, the handlers by area -- waits until the features being written on this module
have landed.

A round is one method, :meth:`BrokerCore.round`: the shell hands over what it read with
:meth:`BrokerCore.receive`, then calls ``round(now, send, synced)``, which runs the steps in their
one order and calls the shell's ``send`` wherever frames must go out before the next step; it
returns a :class:`Round` saying whether replay work remains and which journals to fsync.

"No sockets" is not "no disk": the core calls the journal library, whose appends (one write per
stream a round), segment rolls (their fsync), retention's unlinks, and the administration
commands' directory work run on the loop. Opening a journal (a new stream's directory and
fsyncs, or a closed one's recovery) does not: the shell does it in its thread pool
(:meth:`BrokerCore._open_later`), and so does the group fsync (``Round.to_sync``).

Three concepts live beside it as mixins, each in the file named after it: stream administration
(``admin.py``), congestion — frames the shell could not send (``congestion.py``) — and the
timers (``timers.py``).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

from zeps.journal.record import MAX_PSEQ
from zeps.matching import PatternError, compile_pattern
from zeps.matching.patterns import REGEX_MARKER
from zeps.protocol import ProtocolError, commands as c, decode, encode
from zeps.protocol.batch import (MAX_BATCH_ENTRIES, MIN_ENTRY, PUBLISH_BATCH_ID, PUBLISH_HEAD,
                                 PUBLISH_HEAD_SIZE, entry_body)
from zeps.protocol.deliver import SIGNATURE

from zeps.protocol.reasons import NOT_ALLOWED, Reason

from .admin import StreamAdministration
from .catalogue import StreamCatalogue
from .congestion import Congestion
from .headers import HeadersHandling
from .session import ATTACHED, ProtocolViolation, Session
from .timers import Timers
from .stream import COUNTERS, Stream

Outbox = List[Tuple[bytes, bytes]]


@dataclass(frozen=True)
class Round:
    """What a round leaves the shell to do."""
    more: bool                  # replay work remains: run the next round without waiting
    to_sync: List[Stream]       # journals to fsync (off the loop), then ``round(synced=True)``
    to_open: List[str]          # streams to open (off the loop), then :meth:`BrokerCore.opened`

#: A listing page looks at this many names at most, and fits in one frame.
LIST_SCAN = 1024               # ~0.35 ms to page and encode (4096: 1.4 ms)
LIST_BYTES = 65535 - 16

_PING_OK = encode(c.PingOk())
_ATTACH_OK = encode(c.AttachOk())
_STREAM_EXPECT_OK = encode(c.StreamExpectOk())
_DETACH_OK = encode(c.DetachOk())
_DELIVER_TIMESTAMPS_OK = encode(c.DeliverTimestampsOk())
_REASONS_SELECT_OK = encode(c.ReasonsSelectOk())
_PUBLISH_BATCH_ID = bytes([PUBLISH_BATCH_ID])


def _pseq_exhausted(pseq: int) -> str:
    """Why a PUBLISH of an idempotent producer is refused when its producer sequence ``pseq``
    is past what a journal record can hold (a PRODUCER ``next`` near 2^64-1)."""
    return (f"producer sequence {pseq} is over 2^64-1 (PRODUCER with a lower next, or a new "
            f"producer id)")


#: What a client frame may exceed the limits by and still be read (and refused with a reason).
FRAME_SLACK = 64 << 10

#: Messages held for a client whose ATTACH waits for its stream to open; more get INVALID.
MAX_WAITING = 1024


@dataclass
class CoreConfig:
    expiry: float = 60.0                  # seconds of silence before a client is forgotten
    expiry_check: float = 1.0             # how often silence is checked
    fsync: str = "interval"               # the journals' policy: the core times "interval" syncs
    fsync_interval: float = 0.05          # seconds between group fsyncs (fsync=interval)
    retention_check: float = 10.0         # seconds between retention passes
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
    max_credit: int = 64 << 20            # the credit window the broker advises (LIMITS-OK)
    regex_strikes: int = 3                # timeouts before a regex subscription is removed
    max_message: int = 1 << 20            # largest body accepted in a PUBLISH (a stream may lower it)
    max_batch: int = 1 << 20              # largest PUBLISH-BATCH frame (BATCH-SELECT-OK tells it)
    auto_create: bool = True              # ATTACH creates a missing stream (else "no stream")
    max_total_streams: int = 100_000      # streams stored (on disk) at once: creation beyond is refused
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
        return max(3 + 1 + 255 + 4 + self.max_message, self.max_batch) + FRAME_SLACK

    def receive_hwm(self) -> int:
        """The ROUTER's ``ZMQ_RCVHWM``: how many messages libzmq reads ahead off one connection
        before it leaves the rest in the kernel and the sender blocks. libzmq counts messages,
        not bytes, so the count is the byte bound ``max_unread`` over the largest frame: what a
        client sending flat out parks in the broker stays under ``max_unread`` whatever its
        message size (at least 8 messages, and never more than 10,000, the old setting).
        A small read-ahead costs no throughput: the loop reads at most ``DRAIN_MAX`` messages a
        round anyway, over all connections (docs/operations.md)."""
        return max(8, min(10_000, self.max_unread // self.max_frame()))


class BrokerCore(StreamAdministration, Congestion, Timers, HeadersHandling):
    def __init__(self, datadir, config: Optional[CoreConfig] = None,
                 log: Optional[Callable[..., None]] = None):
        self.datadir = datadir
        self.config = config or CoreConfig()
        self.log = log or (lambda *a, **k: None)
        self.sessions: Dict[bytes, Session] = {}
        self.streams: Dict[str, Stream] = {}
        self.outbox: Outbox = []
        self.congested: Dict[bytes, Session] = {}
        self._to_free: List[Session] = []                 # detached: freed by sent()
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
        self._next_expiry = self._next_retention = self._next_sync = float("-inf")
        self.queued = 0                    # messages published since the last append_queued()
        self.now = float("-inf")           # the time of the message being handled
        self.catalogue = StreamCatalogue(datadir.streams())   # every stored stream's name
        #: Streams whose journal the shell opens off the loop, and the ATTACHes waiting for each.
        self.opening: Dict[str, List[Tuple[Session, c.Attach, Optional[int]]]] = {}
        self._to_open: List[str] = []

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

    def _batch_refused(self, identity: bytes, frame: bytes) -> bool:
        """A PUBLISH-BATCH is judged by its head before one entry is walked: its size against
        ``max_batch``, its count against :data:`MAX_BATCH_ENTRIES` and what the entries' bytes
        can hold, and the sender's state (attached) — each refused with *one* INVALID, whatever
        the count claims. So parsing costs at most one ``max_batch`` frame of at most
        ``MAX_BATCH_ENTRIES`` entries, and only for an attached client."""
        size = len(frame) - PUBLISH_HEAD_SIZE
        if size + PUBLISH_HEAD_SIZE > self.config.max_batch:
            why = (f"PUBLISH-BATCH of {len(frame)} bytes is over the broker's limit of "
                   f"{self.config.max_batch} (BATCH-SELECT-OK)")
        elif size < 0:
            return False                                  # the codec says why
        else:
            count = PUBLISH_HEAD.unpack_from(frame)[2]
            s = self.sessions.get(identity)
            if s is None or s.state is not ATTACHED:
                self._invalid(identity, Reason.not_attached("PUBLISH-BATCH"))
                return True
            if count > MAX_BATCH_ENTRIES:
                why = f"PUBLISH-BATCH of {count} entries is over the limit of {MAX_BATCH_ENTRIES}"
            elif count * MIN_ENTRY > size:
                why = f"PUBLISH-BATCH: {count} entries cannot fit in {size} bytes"
            else:
                return False
        self._invalid(identity, Reason.publish_rejected(why))
        self._note_bad_frame(identity, why)
        return True

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

    def _on_list_streams(self, s: Session, cmd) -> None:
        """LIST-STREAMS: the first page of LIST-STREAMS-PAGE (ZEPS/1 has no way to ask for more)."""
        if self._over_budget(s):
            return
        names, _next = self._list_page(s, "")
        self.outbox.append((s.identity, encode(c.ListStreamsOk(names))))

    def _on_list_streams_page(self, s: Session, cmd: c.ListStreamsPage) -> None:
        if self._over_budget(s):
            return
        names, after = self._list_page(s, cmd.after)
        self.outbox.append((s.identity, encode(c.ListStreamsPageOk(names, after))))

    def _list_page(self, s: Session, after: str):
        """From the catalogue in memory, never the disk: the names after ``after`` the client may
        read (a stream one may not read is not even named), looking at ``LIST_SCAN`` names at
        most, as many as fit in one frame."""
        acl = self.acl
        visible = (lambda n: True) if acl is None else (lambda n: acl.may_subscribe(s.user, n))
        return self.catalogue.page(after, visible, scan=LIST_SCAN, max_bytes=LIST_BYTES)

    def _over_budget(self, s: Session) -> bool:
        """Pay for one command whose cost is not per message; INVALID "limit: ..." if the
        client's budget is spent (it refills at ``admin_rate`` a second)."""
        cfg = self.config
        if s.spend(self.now, cfg.admin_rate, cfg.admin_burst):
            return False
        self._invalid(s.identity, Reason.limit("admin_rate", cfg.admin_rate))
        return True

    def _on_attach(self, s: Session, cmd: c.Attach) -> None:
        expect, s.expect = s.expect, None       # STREAM-EXPECT holds for this ATTACH only
        acl = self.acl
        if acl is not None and not acl.may_attach(s.user, cmd.stream):
            self._invalid(s.identity, Reason.not_allowed(acl.who(s.user), "attach", cmd.stream))
            return
        if cmd.stream not in self.catalogue:
            if expect is not None:   # joins only what exists; never makes it (again)
                self._invalid(s.identity, Reason.stream_deleted(cmd.stream) if expect
                              else Reason.no_stream(cmd.stream))
                return
            if not self.config.auto_create:
                self._invalid(s.identity, Reason.no_stream(cmd.stream, created_on_attach=False))
                return
            if acl is not None and not (acl.may_publish(s.user, cmd.stream)
                                        or acl.may_admin(s.user, cmd.stream)):
                # A reader does not create streams: it could fill max_total_streams with
                # empty ones and leave the publishers none.
                self._invalid(s.identity, Reason.not_allowed(acl.who(s.user), "create",
                                                             cmd.stream))
                return
            if self._too_many_streams(s):
                return
        if cmd.stream not in self.streams and len(self.streams) >= self.config.max_streams:
            self._release_idle_streams(self.config.max_streams - 1)
        if cmd.stream not in self.streams and len(self.streams) >= self.config.max_streams:
            self._invalid(s.identity, Reason.limit("max_streams", self.config.max_streams))
            return
        if cmd.stream not in self.streams and not self.datadir.is_open(cmd.stream):
            self._open_later(s, cmd, expect)     # the disk may be slow: not on the loop
            return
        try:
            stream = self.stream(cmd.stream)
            actual = self.datadir.incarnation(cmd.stream) if expect else 0
        except Exception as exc:   # JournalError, OSError: say why, stay unattached
            self._invalid(s.identity, Reason.failed(f"cannot open stream {cmd.stream!r}", exc))
            self.log("attach_failed", stream=cmd.stream, error=str(exc))
            return
        if expect and actual != expect:     # deleted and made again since the client knew it
            self._invalid(s.identity, Reason.stream_recreated(cmd.stream, expect, actual))
            return
        stream.attach(s)
        self._set_rights(s)
        self.outbox.append((s.identity, _ATTACH_OK))

    def _open_later(self, s: Session, cmd: c.Attach, expect: Optional[int]) -> None:
        """Opening a journal touches the disk (a new stream: its directory, files and their
        fsyncs; an existing one: its recovery), which may take as long as the disk likes: the
        shell does it off the loop (:attr:`Round.to_open`) and calls :meth:`opened`. The client
        waits; what it sends meanwhile is held, in order (:data:`MAX_WAITING`)."""
        waiting = self.opening.get(cmd.stream)
        if waiting is None:
            waiting = self.opening[cmd.stream] = []
            self._to_open.append(cmd.stream)
        waiting.append((s, cmd, expect))
        s.waiting = []

    def take_opens(self) -> List[str]:
        """The streams to open since the last call (each once, until :meth:`opened`)."""
        names, self._to_open = self._to_open, []
        return names

    def opened(self, name: str, error: Optional[BaseException], now: float) -> None:
        """The shell opened stream ``name``'s journal (``DataDir.journal``), or failed to with
        ``error``: the waiting ATTACHes are answered, then what each client sent meanwhile."""
        for s, cmd, expect in self.opening.pop(name, ()):
            if self.sessions.get(s.identity) is not s:
                continue                                  # forgotten meanwhile
            held, s.waiting = s.waiting or [], None
            if error is None:
                s.expect = expect
                self._on_attach(s, cmd)                   # the journal is open: no wait now
            else:
                self._invalid(s.identity, Reason.failed(f"cannot open stream {name!r}", error))
                self.log("attach_failed", stream=name, error=str(error))
            for frames in held:
                self.receive(s.identity, frames, now)

    def _on_stream_id(self, s: Session, cmd) -> None:
        """The attached stream's incarnation (kept in memory while the stream is open)."""
        inc = self.datadir.incarnation(s.stream)
        self.outbox.append((s.identity, encode(c.StreamIdOk(inc))))

    def _on_stream_expect(self, s: Session, cmd: c.StreamExpect) -> None:
        """The next ATTACH joins incarnation ``cmd.incarnation`` only (0: whichever exists),
        and creates nothing."""
        s.expect = cmd.incarnation
        self.outbox.append((s.identity, _STREAM_EXPECT_OK))

    def _set_rights(self, s: Session) -> None:
        acl = self.acl
        s.may_publish = acl is None or acl.may_publish(s.user, s.stream)
        s.may_subscribe = acl is None or acl.may_subscribe(s.user, s.stream)

    # ------------------------------------------------------------------ security
    def identify(self, identity: bytes, user: Optional[str]) -> None:
        """The shell learnt the key a connection authenticated with (CurveZMQ ``User-Id``)."""
        if user:
            self.users[identity] = user
            if self.allowed_keys is not None and user not in self.allowed_keys:
                self.revoked[identity] = False  # revoked between its handshake and now
            s = self.sessions.get(identity)
            if s is not None:
                s.user = user

    def set_allowed_keys(self, keys) -> None:
        """The CURVE allow-list (at start, and reloaded on SIGHUP): the public keys (Z85) that
        may connect. The authenticator judges only new handshakes, so a connection whose key is
        no longer among them is revoked here, as NATS closes a revoked user's connections: its
        session is forgotten (detached, subscriptions and peering gone), it is told so with one
        INVALID ``not allowed: ...``, and every later command on that connection is refused the
        same way, whatever the state (a new session cannot start on it). A key allowed again
        is served again (from a new ATTACH). Costs one look per connection, once per reload."""
        self.allowed_keys = allowed = frozenset(keys)
        before, self.revoked = self.revoked, {}
        for identity, user in self.users.items():
            if user not in allowed:          # its refusals stay ERROR if it chose them
                s = self.sessions.get(identity)
                self.revoked[identity] = before.get(identity, s is not None and s.reasons)
        for identity in self.revoked.keys() - before.keys():
            self.log("key_revoked", client=identity.hex(), key=self.users[identity])
            self.forget(identity)
            self._refuse_revoked(identity)

    def _refuse_revoked(self, identity: bytes) -> None:
        """INVALID (or ERROR, code NOT_ALLOWED, fields ``connect`` and no stream) to a
        connection whose key was revoked; it has no session to hold the choice."""
        user = self.users.get(identity)
        reason = Reason.key_revoked(self.acl.who(user) if self.acl is not None
                                    else f"client {user!r}")
        self.outbox.append((identity, reason.frame(self.revoked[identity])))
        self.invalids[reason.label] += 1

    def set_acl(self, acl) -> None:
        """New access rules (at start, or reloaded on SIGHUP) apply at once to attached clients:
        a client that lost the right to read loses its subscriptions, with INVALID; nobody is
        disconnected."""
        self.acl = acl
        for s in list(self.sessions.values()):
            if s.stream is None:
                continue
            self._set_rights(s)
            if not s.may_subscribe and s.subscriptions:
                st = self.streams.get(s.stream)
                if st is not None:
                    st.unsubscribe_all(s)
                self._invalid(s.identity, f"{NOT_ALLOWED}{acl.who(s.user)} may no longer read "
                                          f"stream {s.stream!r}: subscriptions removed")

    def _on_detach(self, s: Session, cmd) -> None:
        self.streams[s.stream].detach(s)     # routes what was queued first
        self._end_peering(s)
        self.outbox.append((s.identity, _DETACH_OK))
        self._to_free.append(s)          # a clean DETACH frees the session once DETACH-OK is out

    def _on_subscribe(self, s: Session, cmd: c.Subscribe) -> None:
        if not s.may_subscribe:
            self._invalid(s.identity, Reason.not_allowed(self.acl.who(s.user), "subscribe", s.stream))
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

    def _on_publish(self, s: Session, cmd: c.Publish) -> None:
        if not s.may_publish:
            self._reject(s, Reason.not_allowed(self.acl.who(s.user), "publish", s.stream))
            return
        limit, whose = self._body_limit(self.streams[s.stream])
        if len(cmd.body) > limit:
            self._reject(s, f"body of {len(cmd.body)} bytes is over the {whose}'s limit of {limit}")
            return
        if s.producer is not None:
            why = self._producer_refusal(s, 1)
            if why is not None:
                self._reject(s, why)
                return
        self.queued += 1
        self.streams[s.stream].publish(s, cmd.key, cmd.body)

    def _on_publish_batch(self, s: Session, cmd: c.PublishBatch) -> None:
        """Each entry counts as one PUBLISH (its size and count were checked before it was
        parsed: :meth:`_batch_refused`): a refused batch gets one INVALID per entry, and a
        PRODUCER peering's entries take one producer sequence each. An accepted batch is queued
        whole (journalled as one batch record, with its first producer sequence if any)."""
        stream = self.streams[s.stream]
        n = cmd.count
        why = None
        if not s.may_publish:
            why = Reason.not_allowed(self.acl.who(s.user), "publish", s.stream)
        elif s.producer is not None and (refused := self._producer_refusal(s, n)) is not None:
            why = refused
        else:
            limit, whose = self._body_limit(stream)
            # No body can be longer than the entries less the 5 fixed bytes of each entry.
            if len(cmd.entries) - 5 * n > limit:
                for i in range(n):
                    size = len(entry_body(cmd.entries, cmd.offsets[i]))
                    if size > limit:
                        why = (f"entry {i} of the batch: body of {size} bytes is over the "
                               f"{whose}'s limit of {limit}")
                        break
        if why is not None:
            for _ in range(n):
                self._reject(s, why)
            return
        self.queued += n
        stream.publish_batch(s, cmd)

    def _body_limit(self, stream: Stream):
        """The largest body ``stream`` takes and whose limit it is: the stream's own
        ``max_message`` where it is set and lower than the broker's ``--max-message``, else the
        broker's (a stream never takes more than the broker reads)."""
        own, broker = stream.max_message, self.config.max_message
        return (own, "stream") if 0 < own < broker else (broker, "broker")

    def _on_reasons_select(self, s: Session, cmd) -> None:
        s.reasons = True                 # _invalid sends it ERROR from now on
        self.outbox.append((s.identity, _REASONS_SELECT_OK))

    def _on_batch_select(self, s: Session, cmd) -> None:
        s.batches = True
        self.outbox.append((s.identity, encode(c.BatchSelectOk(self.config.max_batch))))

    def _reject(self, s: Session, why: Reason | str) -> None:
        """One INVALID for a PUBLISH not stored; it still uses up its producer sequence, as every
        PUBLISH after PRODUCER does (the client numbers them all)."""
        if s.producer is not None:
            s.pseq_next += 1
        self._invalid(s.identity, Reason.publish_rejected(why))

    def _on_seq_at_time(self, s: Session, cmd: c.SeqAtTime) -> None:
        seq = self.streams[s.stream].seq_at(cmd.timestamp)
        self.outbox.append((s.identity, encode(c.SeqAtTimeOk(seq))))

    def _on_stream_info(self, s: Session, cmd) -> None:
        self.outbox.append((s.identity, encode(self.streams[s.stream].info())))

    def _on_confirm_select(self, s: Session, cmd) -> None:
        s.confirms = True
        stream = self.streams[s.stream]
        stream.append_queued()          # publishes before the select are counted in `published`
        self.outbox.append((s.identity, encode(c.ConfirmSelectOk(s.published))))

    def _on_limits(self, s: Session, cmd) -> None:
        self.outbox.append((s.identity, encode(c.LimitsOk(self.config.max_message,
                                                          self.config.max_credit))))

    def _on_producer(self, s: Session, cmd: c.Producer) -> None:
        """Rights first (a client that may not publish has no use for a producer id), then the
        connection's limit of distinct ids (one client cannot fill the stream's producer table
        or evict others' state), then the stream's O(1) registration: binding, fencing, the
        out-of-order check (``Stream.register_producer``)."""
        if not s.may_publish:
            self._invalid(s.identity, Reason.not_allowed(self.acl.who(s.user), "publish", s.stream))
            return
        if not cmd.producer or cmd.next < 1:
            self._invalid(s.identity, "PRODUCER needs a producer id and a sequence from 1")
            return
        ids = s.producer_ids
        if cmd.producer not in ids and len(ids) >= self.config.max_producer_ids:
            self._invalid(s.identity, Reason.limit("max_producer_ids", self.config.max_producer_ids))
            return
        why, last = self.streams[s.stream].register_producer(s, cmd.producer, cmd.next)
        if why is not None:
            self._invalid(s.identity, why)
            return
        ids.add(cmd.producer)
        self.outbox.append((s.identity, encode(c.ProducerOk(last))))

    @staticmethod
    def _producer_refusal(s: Session, n: int):
        """Why the next ``n`` publishes of a PRODUCER peering are refused (fenced, out of
        order, or producer sequences past 2^64-1), or None."""
        if s.producer_refusal is not None:
            return s.producer_refusal
        if s.pseq_next + n - 1 > MAX_PSEQ:
            return _pseq_exhausted(s.pseq_next + n - 1)
        return None

    def _on_deliver_timestamps(self, s: Session, cmd) -> None:
        s.timestamps = True
        self.outbox.append((s.identity, _DELIVER_TIMESTAMPS_OK))


    # ------------------------------------------------------------------ streams
    def stream(self, name: str) -> Stream:
        """The stream, opened on first use; also marks it most recently used."""
        st = self.streams.pop(name, None)
        if st is not None:
            self.streams[name] = st                      # dict order is the LRU order
        else:
            st = Stream(name, self.datadir.journal(name), self.outbox,
                        replay_batch_records=self.config.replay_batch_records,
                        replay_batch_bytes=self.config.replay_batch_bytes,
                        regex_strikes=self.config.regex_strikes, log=self.log,
                        invalids=self.invalids, settings=self.datadir.settings(name))
            self.streams[name] = st
            self.catalogue.add(name)
            if len(self.streams) > self.config.max_open_streams:
                self._release_idle_streams(self.config.max_open_streams, spare=name)
        return st

    def _release_idle_streams(self, keep: int, spare: Optional[str] = None) -> None:
        """Close the least recently used streams that nobody uses (no client, nothing pending
        or unconfirmed; never ``spare``) until at most ``keep`` are open: each open journal
        holds file descriptors, and a broker with many streams must not run out of them."""
        excess = len(self.streams) - keep
        for name in list(self.streams):
            if excess <= 0:
                break
            st = self.streams[name]
            if name == spare or st.sessions or st.queued_publishes or st.confirming or st.catching_up:
                continue
            del self.streams[name]
            excess -= 1
            for counter in COUNTERS:
                self.released_counts[counter] += getattr(st, counter)
            try:
                self.datadir.release(name)
            except Exception as exc:                      # that stream's problem only
                self.log("stream_close_failed", stream=name, error=str(exc))

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
        (:meth:`unsent`, :meth:`gone`) and calls :meth:`sent`."""
        self.append_queued()
        send()
        more = self.pump(now)
        if synced:
            self.confirm()
        send()
        to_sync = self.tick(now)
        if self.outbox:
            send()
        return Round(more, to_sync, self.take_opens())

    def append_queued(self) -> None:
        """Journal every stream's queued publishes, then route them live."""
        self.queued = 0
        for st in self.streams.values():
            if st.queued_publishes:
                st.append_queued()

    def pump(self, now: float) -> bool:
        """End congestion whose time is up, then one replay batch per catching-up subscriber.
        True if more replay work remains."""
        if self.congested:
            self._uncongest(now)
        more = False
        for st in self.streams.values():
            if st.catching_up and st.pump():
                more = True
        return more

    def confirm(self) -> None:
        """CONFIRM what became durable (the shell calls it after a group fsync)."""
        for st in self.streams.values():
            if st.confirming:
                st.confirm()

    def take_outbox(self) -> Outbox:
        """The frames to send, in order; the outbox is emptied (streams share the same list).
        After sending them (and reporting what did not go out) the shell calls :meth:`sent`."""
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

    # ------------------------------------------------------------------ connections
    def gone(self, identity: bytes) -> None:
        """The shell learnt that the client's connection is gone."""
        self.users.pop(identity, None)
        self.revoked.pop(identity, None)
        self.forget(identity)

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
    c.Limits: BrokerCore._on_limits,
    c.Producer: BrokerCore._on_producer,
    c.HeadersSelect: BrokerCore._on_headers_select,
    c.PublishHeaders: BrokerCore._on_publish_headers,
}
