"""Drive a real :class:`BrokerCore` in-process: commands in, decoded frames out, a clock the test
moves, and a model of each client's pipe; no sockets, no sleeps.

The harness does exactly what the I/O shell (``zeps/broker/server.py``) does around the core, so a
test can play any interleaving the shell can produce:

* :meth:`Core.send` hands one ZeroMQ message to :meth:`BrokerCore.receive` at ``now``;
* :meth:`Core.collect` sends the outbox like ``Broker._send``: a client whose pipe is full (see
  :attr:`Core.pipe`) gets that frame and every later frame of the batch handed back with
  :meth:`BrokerCore.unsent`; everything else is decoded into the client's mailbox;
* :meth:`Core.round` runs :meth:`BrokerCore.round` -- the one definition of a round, the shell's
  too -- with :meth:`Core.collect` as its ``send``; the journals it names are synced before the
  next round, which confirms them (the shell's sync greenlet runs between rounds).
"""
from __future__ import annotations

import pytest

from zeps.broker.core import BrokerCore, CoreConfig
from zeps.journal import DataDir, JournalConfig
from zeps.protocol import commands as c
from zeps.protocol import decode, deliver_cost, encode
from zeps.protocol.batch import entry_key

#: JournalConfig fields a test may set through :class:`Core` (everything else is CoreConfig's).
_JOURNAL_FIELDS = ("segment_bytes", "retention_bytes", "max_record_bytes", "index_interval_bytes",
                   "key_index", "max_producers")


def messages_of(m: c.Command) -> list[tuple]:
    """(sequence, key) of each message a decoded DELIVER, DELIVER-TS or DELIVER-BATCH carries."""
    if isinstance(m, (c.Deliver, c.DeliverTs)):
        return [(m.sequence, m.key)]
    if isinstance(m, c.DeliverBatch):
        return [(m.sequence + i, entry_key(m.entries, m.offsets[i])) for i in range(m.count)]
    return []


class Core:
    """A BrokerCore over a real journal in ``path``, a mailbox per client and a test-driven clock.

    ``fsync`` is both the journals' policy and the core's (the core times ``interval`` syncs).
    ``pipe[ident] = n`` says the client's pipe takes ``n`` more frames before it is full (absent:
    it takes everything); each frame sent to it lowers ``n``.
    """

    def __init__(self, path, *, fsync: str = "never", **config):
        jconf = {k: config.pop(k) for k in list(config) if k in _JOURNAL_FIELDS}
        self.datadir = DataDir(str(path), JournalConfig(fsync=fsync, **jconf))
        self.logs: list[tuple] = []             # (event, fields) the core logged
        self.core = BrokerCore(self.datadir, CoreConfig(fsync=fsync, **config),
                               log=lambda event, **kw: self.logs.append((event, kw)))
        self.now = 1000.0
        self.box: dict[bytes, list[c.Command]] = {}
        self.pipe: dict[bytes, int] = {}
        self.unsent: list[tuple] = []          # (ident, decoded command) handed back, in order
        self.to_sync: list = []              # journals the last round named, not yet synced
        self.compactions: list = []          # (job, result, error) of the compactions run

    # ------------------------------------------------------------------ input
    def send(self, ident: bytes, *cmds: c.Command) -> None:
        """Each command as one ZeroMQ message from ``ident``, then send the outbox."""
        for cmd in cmds:
            self.core.receive(ident, [encode(cmd)], self.now)
            self.open_streams()
        self.collect()

    def send_frames(self, ident: bytes, frames: list[bytes]) -> None:
        """One ZeroMQ message of any frames from ``ident``, then send the outbox."""
        self.core.receive(ident, frames, self.now)
        self.open_streams()
        self.collect()

    def open_streams(self, names=None) -> None:
        """Open the journals the core asked for, at once (the shell does it in its thread
        pool; here the disk is instant), and hand each result back."""
        for name in self.core.take_opens() if names is None else names:
            error = None
            try:
                self.datadir.journal(name)
            except Exception as exc:
                error = exc
            self.core.opened(name, error, self.now)

    # ------------------------------------------------------------------ output (the shell's _send)
    def collect(self) -> None:
        """Send the outbox as ``Broker._send`` does, through the modelled pipes."""
        out = self.core.take_outbox()
        if not out:                  # as the shell: nothing taken, nothing reported
            return
        blocked: set[bytes] = set()
        for ident, frame in out:
            room = self.pipe.get(ident)
            if ident in blocked or room == 0:
                blocked.add(ident)
                self.unsent.append((ident, decode(frame)))
                self.core.unsent(ident, frame, self.now)
                continue
            if room is not None:
                self.pipe[ident] = room - 1
            self.box.setdefault(ident, []).append(decode(frame))
        self.core.sent()
        if self.core.outbox:
            self.collect()

    # ------------------------------------------------------------------ rounds
    def round(self) -> bool:
        """One round of the core (:meth:`BrokerCore.round`, the shell's order), sending through
        the modelled pipes. The journals a round names are kept in :attr:`to_sync`, synced
        before the next round and confirmed by it, as the shell's sync greenlet does (between
        rounds). True if replay has more."""
        synced = bool(self.to_sync)
        for st in self.to_sync:
            st.journal.sync()
        done = self.core.round(self.now, self.collect, synced)
        self.to_sync = list(done.to_sync)
        if done.to_open:
            self.open_streams(done.to_open)
            self.collect()
        if done.to_compact:
            self.compact(done.to_compact)
        return done.more

    def compact(self, jobs) -> None:
        """Run the compactions a round named, at once (the shell runs them in its thread
        pool), and hand each result back; :attr:`compactions` keeps (job, result, error)."""
        from zeps.journal import compaction
        for job in jobs:
            result = error = None
            try:
                result = compaction.run(job.path, job.sealed, interval=job.interval,
                                        fsync=job.fsync)
            except Exception as exc:
                error = exc
            self.compactions.append((job, result, error))
            self.core.compacted(job, result, error)
        self.collect()

    def drain(self) -> None:
        """Rounds until no replay work is left."""
        for _ in range(10_000):
            if not self.round():
                return
        raise AssertionError("replay never finished")


    def tick(self) -> list:
        """Run the core's timers at ``now``, send what they produced; the streams to fsync."""
        due = self.core.tick(self.now)
        self.collect()
        return due

    def sync_and_confirm(self, streams) -> None:
        """What the shell's sync greenlet and the next round do: fsync, then CONFIRM."""
        for st in streams:
            st.journal.sync()
        self.to_sync = [st for st in self.to_sync if st not in streams]
        self.core.confirm()
        self.collect()

    # ------------------------------------------------------------------ reading the mailboxes
    def take(self, ident: bytes) -> list[c.Command]:
        return self.box.pop(ident, [])

    def kinds(self, ident: bytes) -> list[type]:
        return [type(m) for m in self.take(ident)]

    def delivered(self, ident: bytes) -> list[tuple]:
        """(sequence, key) of the messages of the DELIVER, DELIVER-TS and DELIVER-BATCH frames in
        the mailbox (which is emptied)."""
        return [pair for m in self.take(ident) for pair in messages_of(m)]

    # ------------------------------------------------------------------ helpers
    def publish(self, *keys: str, body: bytes = b"x", ident: bytes = b"pub",
                stream: str = "s") -> None:
        """Publish ``keys`` from ``ident`` (attached to ``stream`` first if needed), one round."""
        if ident not in self.core.sessions:
            self.send(ident, c.Attach(stream))
            self.take(ident)
        for k in keys:
            self.core.receive(ident, [encode(c.Publish(k, body))], self.now)
        self.round()

    def subscriber(self, ident: bytes, pattern: str = "", latest: int = c.LATEST_LIVE,
                   credit: int = 1 << 30, stream: str = "s") -> None:
        """ATTACH, CREDIT, SUBSCRIBE; the replies are checked and taken."""
        self.send(ident, c.Attach(stream), c.Credit(credit), c.Subscribe(pattern, latest))
        assert self.kinds(ident) == [c.AttachOk, c.SubscribeOk]

    def logged(self, event: str) -> list[dict]:
        """The fields of every ``event`` the core logged."""
        return [kw for e, kw in self.logs if e == event]

    def traces(self, ident: bytes) -> list[str]:
        """Every place of the core that still holds anything of ``ident`` (a forgotten client:
        nothing at all)."""
        found = self.leftovers(ident)
        if ident in self.core.sessions:
            found.append("session")
        if ident in self.core.congested:
            found.append("congested")
        return found

    def leftovers(self, ident: bytes) -> list[str]:
        """What the core still holds of ``ident``'s peering (after DETACH: nothing). A session
        kept, unattached and empty, only to send the replies it holds is not a leftover."""
        found = []
        s = self.core.sessions.get(ident)
        if s is not None:
            for what, value, empty in (("state", s.state, "NEW"), ("stream", s.stream, None),
                                       ("subscriptions", s.subscriptions, []),
                                       ("credit", s.credit, 0), ("confirms", s.confirms, False),
                                       ("unconfirmed", list(s.unconfirmed), []),
                                       ("timestamps", s.timestamps, False)):
                if value != empty:
                    found.append(f"session {what}={value!r}")
            if ident in self.core.congested and not s.held:
                found.append("congested with nothing held")
        for name, st in self.core.streams.items():
            for place in ("sessions", "catching_up", "confirming"):
                if ident in getattr(st, place):
                    found.append(f"{name}.{place}")
            if any(pub.identity == ident for pub, _k, _b in st.queued_publishes):
                found.append(f"{name}.pending")
            subscribed = sum(len(other.subscriptions) for other in st.sessions.values())
            if len(st.index) != subscribed:          # a pattern of a session that left
                found.append(f"{name}.index has {len(st.index)} entries for {subscribed} patterns")
            live = {i for i, o in st.sessions.items() if o.live}
            if st.live_set.ids != live:              # routing would miss or visit someone
                found.append(f"{name}.live_set {sorted(st.live_set.ids)} for the live "
                             f"{sorted(live)}")
        return found

    def close(self) -> None:
        self.datadir.close()


@pytest.fixture(name="core")
def core_fixture(tmp_path):
    """A :class:`Core` with the default configuration (journals: fsync=never)."""
    h = Core(tmp_path / "data")
    yield h
    h.close()


@pytest.fixture(name="make")
def make_fixture(tmp_path):
    """``make(**config)``: a :class:`Core` with that configuration, closed after the test."""
    made = []

    def factory(**config) -> Core:
        h = Core(tmp_path / f"data{len(made)}", **config)
        made.append(h)
        return h

    yield factory
    for h in made:
        h.close()


def reasons(h: Core, ident: bytes) -> list:
    """The reasons of the INVALIDs the core sent ``ident`` (taken from its outbox)."""
    return [m.reason for m in h.take(ident) if isinstance(m, c.Invalid)]


def cost(key: str, body: bytes = b"x") -> int:
    """Credit one DELIVER of ``key``/``body`` costs."""
    return deliver_cost(len(key.encode()), len(body))
