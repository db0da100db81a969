"""The broker core, driven directly (no sockets) through random interleavings of publishes,
subscriptions, credit, rounds, DETACH / re-ATTACH, forget (the connection is gone), expiry, and
congestion (a client's pipe fills, so DELIVERs and replies come back through ``unsent``, and drains
again later), over a real journal in a temp dir.

What every client must see, whatever the interleaving (docs/protocol.md), for each of its
peerings (ATTACH to DETACH, forget or expiry):
* only messages whose key one of the peering's patterns matches, from the peering's start on;
* in strictly increasing sequence order: no gap, no duplicate, no reordering across the
  live/replay switches, the congestion rewinds or the re-ATTACHes;
* never more DELIVER bytes than the credit granted on that peering;
* the current peering, once given plenty of credit and a drained pipe, gets *exactly* its messages;
  an ended one got a prefix of them, and the core keeps nothing of it.

Each client message is received and its replies sent before the next one (a shell round per
message); several commands of one client in the same round are test_core.py's business.
"""
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.core_harness import Core
from zeps.matching import compile_pattern
from zeps.protocol import LATEST_LIVE, decode, deliver_cost
from zeps.protocol.batch import encode_publish_batch, entry_body, entry_key
from zeps.protocol import commands as c
from zeps.protocol.reasons import NOT_ATTACHED, WINDOW_TOO_SMALL
from .property_examples import examples

KEYS = ["a", "b", "ab", "ba", "c"]
PATTERNS = ["", "a", "b", "~b$", "~^(a|c)"]
CLIENTS = [b"s0", b"s1", b"s2", b"s3"]
BATCHING = {b"s2", b"s3"}       # send BATCH-SELECT with every ATTACH: DELIVER-BATCH
PUB = b"pub"
EXPIRY = 60.0

client = st.sampled_from(CLIENTS)
publish = st.tuples(st.just("publish"), st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 40)),
                                                 min_size=1, max_size=30),
                    st.booleans())               # as one PUBLISH-BATCH
subscribe = st.tuples(st.just("subscribe"), client,
                      st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2, unique=True),
                      st.one_of(st.just(0), st.just(LATEST_LIVE), st.integers(1, 80)), st.booleans())
credit = st.tuples(st.just("credit"), client,
                   st.one_of(st.integers(0, 60), st.integers(60, 400), st.just(5000)))
rounds = st.tuples(st.just("round"), st.integers(1, 3))
STEPS = {
    "publish": publish, "subscribe": subscribe, "credit": credit, "round": rounds,
    "detach": st.tuples(st.just("detach"), client),
    "forget": st.tuples(st.just("forget"), client),
    "expire": st.tuples(st.just("expire"), client),
    "congest": st.tuples(st.just("congest"), client, st.integers(0, 2)),
    "read": st.tuples(st.just("read"), client),
    "wait": st.tuples(st.just("wait"), st.sampled_from([0.004, 0.02, 0.3, 2.0])),
}
# The common steps come more often than the events that end a peering, so that most scripts
# deliver a good deal before their end.
WEIGHTS = {"publish": 4, "subscribe": 3, "credit": 4, "round": 4, "congest": 2, "read": 2,
           "wait": 1, "detach": 1, "forget": 1, "expire": 1}
ops = st.sampled_from([k for k, n in WEIGHTS.items() for _ in range(n)]).flatmap(STEPS.__getitem__)


class Peering:
    """One ATTACH of one client, as the test expects it and as the client saw it."""

    def __init__(self):
        self.start = None                 # first sequence it asked for (None: no SUBSCRIBE yet)
        self.patterns = []
        self.timestamps = False
        self.batches = False              # BATCH-SELECT was sent on this peering
        self.credit = 0                   # granted on this peering
        self.spent = 0                    # DELIVER bytes received on this peering
        self.received = []                # sequences, in arrival order


class Model:
    def __init__(self, tmp: str, segment_bytes: int):
        self.h = Core(tmp, segment_bytes=segment_bytes, expiry=EXPIRY, expiry_check=1.0,
                      max_held=4, replay_batch_records=7, replay_batch_bytes=300)
        self.msgs = {}                               # sequence -> (key, body size), as published
        self.current = {ident: None for ident in CLIENTS}   # the broker's view: attached peering
        self.ended = []                              # (ident, Peering) that are over
        self.invalid_due = {ident: 0 for ident in CLIENTS}  # commands sent while not attached
        self.h.send(PUB, c.Attach("s"))
        self.check_mail()

    # ------------------------------------------------------------------ client side
    def send(self, ident, cmd, check=True):
        self.h.now += 0.001
        self.h.send(ident, cmd)
        if check:
            self.check_mail()

    def command(self, ident, cmd, check=True):
        """A command that needs a peering: without one, the broker must answer INVALID."""
        if self.current[ident] is None:
            self.invalid_due[ident] += 1
        self.send(ident, cmd, check)

    def check_mail(self):
        self.read_mail()
        self.notice_broker_ends()

    def read_mail(self):
        """Read every mailbox; DELIVERs belong to the peering the broker has for the client."""
        for ident, got in list(self.h.box.items()):
            del self.h.box[ident]
            for cmd in got:
                if ident == PUB:
                    assert isinstance(cmd, (c.AttachOk, c.PingOk)), cmd
                elif isinstance(cmd, (c.Deliver, c.DeliverTs, c.DeliverBatch)):
                    p = self.current[ident]
                    assert p is not None and p.start is not None, f"{ident}: DELIVER outside a peering"
                    if isinstance(cmd, c.DeliverBatch):
                        assert p.batches, f"{ident}: DELIVER-BATCH without BATCH-SELECT"
                        messages = [(cmd.sequence + i, entry_key(cmd.entries, o),
                                     len(entry_body(cmd.entries, o)))
                                    for i, o in enumerate(cmd.offsets[:-1])]
                    else:
                        assert isinstance(cmd, c.DeliverTs) == p.timestamps, cmd
                        messages = [(cmd.sequence, cmd.key, len(cmd.body))]
                    for seq, key, size in messages:
                        assert self.msgs[seq] == (key, size)
                        p.received.append(seq)
                        p.spent += deliver_cost(len(key.encode()), size)
                    assert p.spent <= p.credit, f"{ident}: delivered beyond the credit"
                elif isinstance(cmd, c.BatchSelectOk):
                    assert ident in BATCHING, cmd
                elif isinstance(cmd, c.Invalid) and cmd.reason.startswith(WINDOW_TOO_SMALL):
                    pass    # advice about the credit held when it was sent, not an answer
                elif isinstance(cmd, c.Invalid):
                    assert cmd.reason.startswith(NOT_ATTACHED), cmd
                    self.invalid_due[ident] -= 1
                    assert self.invalid_due[ident] >= 0, f"{ident}: unexpected {cmd}"

    def notice_broker_ends(self):
        """Peerings the broker ended on its own: expiry, or too many held replies."""
        for name in ("client_expired", "client_unresponsive_forgotten"):
            for kw in self.h.logged(name):
                ident = bytes.fromhex(kw["client"])
                if self.current.get(ident) is not None:
                    self.end(ident, name)
        self.h.logs.clear()
        for ident, p in self.current.items():
            s = self.h.core.sessions.get(ident)
            attached = s is not None and s.stream == "s"
            assert attached == (p is not None), f"{ident}: the broker dropped it unannounced"

    def end(self, ident, why):
        event(f"peering ended: {why}")
        self.ended.append((ident, self.current[ident]))
        self.current[ident] = None
        left = self.h.leftovers(ident)
        assert left == [], f"{ident}: an ended peering left {left}"

    def head(self):
        return len(self.msgs)

    def wanted(self, p: Peering):
        """The sequences the peering asked for, up to the head."""
        return [s for s in range(p.start, self.head() + 1)
                if any(x.matches(self.msgs[s][0]) for x in p.patterns)]

    # ------------------------------------------------------------------ operations
    def do(self, op):
        kind = op[0]
        h = self.h
        if kind == "publish":
            if op[2]:
                self.send(PUB, decode(encode_publish_batch([(k, b"x" * n) for k, n in op[1]])))
            for key, size in op[1]:
                if not op[2]:
                    self.send(PUB, c.Publish(key, b"x" * size))
                self.msgs[len(self.msgs) + 1] = (key, size)   # the broker numbers them in order
        elif kind == "subscribe":
            _, ident, patterns, latest, timestamps = op
            if self.current[ident] is None:
                if ident in BATCHING:
                    self.send(ident, c.BatchSelect())
                self.current[ident] = Peering()
                self.current[ident].batches = ident in BATCHING
                self.send(ident, c.Attach("s"))
            p = self.current[ident]
            if p is None or p.start is not None:
                return                                 # one subscribe step per peering
            if timestamps:
                p.timestamps = True
                self.command(ident, c.DeliverTimestamps())
            h.core.append_queued()                     # SUBSCRIBE sees every earlier PUBLISH
            h.collect()
            self.check_mail()
            p.start = self.head() + 1 if latest == LATEST_LIVE else max(latest + 1, 1)
            p.patterns = [compile_pattern(x) for x in patterns]
            for x in patterns:                         # (a congested client may be forgotten
                self.command(ident, c.Subscribe(x, latest))    # for holding too many replies)
        elif kind == "credit":
            _, ident, amount = op
            if self.current[ident] is not None:
                self.current[ident].credit += amount
            self.command(ident, c.Credit(amount))
        elif kind == "round":
            for _ in range(op[1]):
                h.round()
                self.check_mail()
        elif kind == "detach":
            ident = op[1]
            if self.current[ident] is None:
                self.command(ident, c.Detach())
            else:
                self.send(ident, c.Detach(), check=False)
                self.read_mail()                       # DELIVERs before DETACH-OK: the old peering
                self.end(ident, "DETACH")
                self.notice_broker_ends()
        elif kind == "forget":
            ident = op[1]
            h.core.gone(ident)
            h.collect()
            self.read_mail()
            if self.current[ident] is not None:
                self.end(ident, "gone")
            assert h.traces(ident) == []
            self.notice_broker_ends()
        elif kind == "expire":
            # Everyone else speaks at the new time; only ``ident`` stays silent, long enough
            # to be expired whatever deliveries it took before (the first check may count them
            # as a sign of life; nothing is published or replayed before the second).
            ident = op[1]
            h.core.append_queued()
            h.collect()
            self.check_mail()
            for _ in range(2):
                h.now += EXPIRY + 2.0
                for other in [PUB] + CLIENTS:
                    if other != ident:
                        self.send(other, c.Ping())
                h.tick()
                self.check_mail()
            assert self.current[ident] is None and h.traces(ident) == []
        elif kind == "congest":
            h.pipe[op[1]] = op[2]
        elif kind == "read":
            h.pipe.pop(op[1], None)
        elif kind == "wait":
            h.now += op[1]

    def rounds_until_idle(self):
        for _ in range(10_000):
            more = self.h.round()
            self.check_mail()
            if not more:
                return
        raise AssertionError("replay never finished")

    def finish(self):
        h = self.h
        handed_back = [type(cmd).__name__ for _i, cmd in h.unsent]
        for kind in ("Deliver", "DeliverTs"):
            if kind in handed_back:
                event(f"{kind} handed back by the shell")
        if any(k not in ("Deliver", "DeliverTs") for k in handed_back):
            event("reply held")
        h.pipe.clear()                                 # every client reads again
        h.now += 10.0                                  # past any congestion backoff
        self.rounds_until_idle()
        for ident, p in self.current.items():          # no stall: credit for the next message
            if p is not None and p.start is not None:  # means the client has it, unasked
                missing = self.wanted(p)[len(p.received):]
                if missing:
                    key, size = self.msgs[missing[0]]
                    assert p.credit - p.spent < deliver_cost(len(key.encode()), size), \
                        f"{ident}: stalled before {missing[0]} with credit left"
        for ident, p in self.current.items():          # plenty of credit: everything must arrive
            if p is not None:
                p.credit += 1 << 30
                self.send(ident, c.Credit(1 << 30))
        self.rounds_until_idle()


# Passing takes ~10 s; a failure is shrunk for up to Hypothesis's own 300 s, hence the timeout.
@pytest.mark.timeout(420)
@settings(max_examples=examples(200), deadline=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(subscribe, credit), min_size=1, max_size=4),
       st.lists(ops, min_size=20, max_size=60),
       st.sampled_from([256, 1024, 1 << 20]))
def test_every_peering_gets_exactly_its_messages_in_order_within_credit(setup, script,
                                                                        segment_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        m = Model(tmp, segment_bytes)
        try:
            for sub, grant in setup:                   # subscribers to start with
                m.do(sub)
                m.do(("credit", sub[1], grant[2]))
            for op in script:
                m.do(op)
            m.finish()
        finally:
            m.h.close()
        for ident, p in m.ended + [(i, p) for i, p in m.current.items() if p is not None]:
            got = p.received
            assert got == sorted(set(got)), f"{ident}: out of order or duplicated: {got}"
            if p.start is None:
                assert got == []
                continue
            wanted = m.wanted(p)
            if m.current.get(ident) is p:
                assert got == wanted, f"{ident}: from {p.start} with {[x.text for x in p.patterns]}"
            else:
                assert got == wanted[:len(got)], f"{ident}: an ended peering got a gap or extras"
