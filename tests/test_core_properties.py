"""The broker core, driven directly (no sockets) through random interleavings of publishes,
subscriptions, credit and rounds, over a real journal in a temp dir.

What every client must see, whatever the interleaving (docs/protocol.md):
* exactly the messages whose key one of its patterns matches, from its start sequence on;
* in strictly increasing sequence order: no gap, no duplicate, no reordering across the
  live/replay switches;
* never more DELIVER bytes than the credit it granted, at any moment.
"""
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from zeps.broker.core import BrokerCore, CoreConfig
from zeps.journal import DataDir, JournalConfig
from zeps.matching import compile_pattern
from zeps.protocol import commands as c
from zeps.protocol import LATEST_LIVE, decode, deliver_cost, encode

KEYS = ["a", "b", "ab", "ba", "c"]
PATTERNS = ["", "a", "b", "~b$", "~^(a|c)"]
CLIENTS = [b"s0", b"s1", b"s2", b"s3"]
PUB = b"pub"

ops = st.one_of(
    st.tuples(st.just("publish"), st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 40)),
                                           min_size=1, max_size=30)),
    st.tuples(st.just("subscribe"), st.sampled_from(CLIENTS),
              st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2, unique=True),
              st.one_of(st.just(0), st.just(LATEST_LIVE), st.integers(1, 80))),
    st.tuples(st.just("credit"), st.sampled_from(CLIENTS), st.integers(0, 400)),
    st.tuples(st.just("round"), st.integers(1, 3)),
)


class Harness:
    def __init__(self, tmp: str, segment_bytes: int):
        self.datadir = DataDir(tmp, JournalConfig(segment_bytes=segment_bytes, fsync="never"))
        self.core = BrokerCore(self.datadir, CoreConfig(replay_batch_records=7, replay_batch_bytes=300))
        self.now = 0.0
        self.keys = {}                                # sequence -> key, as published
        self.received = {ident: [] for ident in CLIENTS}
        self.credit = {ident: 0 for ident in CLIENTS}
        self.spent = {ident: 0 for ident in CLIENTS}
        self.expect = {}                              # ident -> (start, [pattern objects])
        for ident in CLIENTS + [PUB]:
            self.send(ident, c.Attach("s"))

    def send(self, ident, cmd):
        self.now += 0.001
        self.core.receive(ident, [encode(cmd)], self.now)
        self.collect()

    def collect(self):
        for ident, frame in self.core.take_outbox():
            cmd = decode(frame)
            if isinstance(cmd, c.Deliver):
                self.received[ident].append(cmd.sequence)
                self.spent[ident] += deliver_cost(len(cmd.key.encode()), len(cmd.body))
                assert self.spent[ident] <= self.credit[ident], "delivered beyond the credit"
                assert self.keys[cmd.sequence] == cmd.key
            else:
                assert not isinstance(cmd, c.Invalid), cmd

    def head(self):
        return len(self.keys)

    def do(self, op):
        kind = op[0]
        if kind == "publish":
            for key, size in op[1]:
                self.send(PUB, c.Publish(key, b"x" * size))
                self.keys[len(self.keys) + 1] = key   # the broker numbers them in order
        elif kind == "subscribe":
            _, ident, patterns, latest = op
            if ident in self.expect:
                return                                 # one subscribe step per client (see below)
            self.core.flush()                          # SUBSCRIBE sees every earlier PUBLISH
            start = self.head() + 1 if latest == LATEST_LIVE else max(latest + 1, 1)
            for p in patterns:
                self.send(ident, c.Subscribe(p, latest))
            self.expect[ident] = (start, [compile_pattern(p) for p in patterns])
        elif kind == "credit":
            _, ident, amount = op
            self.credit[ident] += amount
            self.send(ident, c.Credit(amount))
        elif kind == "round":
            for _ in range(op[1]):
                self.core.flush()
                self.collect()
                self.core.pump(self.now)
                self.collect()

    def finish(self):
        self.core.flush()
        self.collect()
        for ident in CLIENTS:                          # plenty of credit: everything must arrive
            self.credit[ident] += 1 << 30
            self.send(ident, c.Credit(1 << 30))
        for _ in range(10_000):
            more = self.core.pump(self.now)
            self.collect()
            if not more:
                break
        self.datadir.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=40), st.sampled_from([256, 1024, 1 << 20]))
def test_every_client_gets_exactly_its_messages_in_order_within_credit(script, segment_bytes):
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(tmp, segment_bytes)
        for op in script:
            h.do(op)
        h.finish()
        total = h.head()
        for ident in CLIENTS:
            got = h.received[ident]
            assert got == sorted(set(got)), f"{ident}: out of order or duplicated: {got}"
            if ident not in h.expect:
                assert got == []
                continue
            start, patterns = h.expect[ident]
            want = [s for s in range(start, total + 1) if any(p.matches(h.keys[s]) for p in patterns)]
            assert got == want, f"{ident}: from {start} with {[p.text for p in patterns]}"
