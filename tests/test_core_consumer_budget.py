"""The broker's budget of outstanding messages over all durable consumers
(``max_total_outstanding``, zeps/broker/outstanding.py, docs/consumers.md "Bounds"), driven
in-process (tests/core_harness.py). Each consumer held at most 65,536 outstanding messages and
the broker 100,000 consumers, but nothing bounded their sum: members that take and never
acknowledge made the broker hold up to 6.5 billion (a few hundred bytes each). Now a full budget
pauses consumers (no new messages, nothing refused or lost) until acknowledgements, dead
letters or deletions free room; the last quarter is kept for consumers holding few; and the
count is what the consumers hold on every path (the property test), restarts included."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from tests.core_harness import Core, cost, make_fixture  # noqa: F401 (fixtures)
from zeps.broker import outstanding
from zeps.broker.monitor import consumerz, varz
from zeps.protocol import commands as c
from zeps.protocol.consumer import pack_ranges, ranges_of
from .property_examples import examples

FAST_ADMIN = dict(admin_rate=1e9, admin_burst=10**6)
PAUSED = ("limit: the broker holds at most {} outstanding messages of durable consumers (new "
          "messages wait for acknowledgements)")


def add(h: Core, name: str, **settings_) -> None:
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd(name, **settings_))
    assert isinstance(h.take(b"admin")[-1], c.ConsumerAddOk)


def join(h: Core, ident: bytes, name: str, credit: int = 1 << 30) -> None:
    h.send(ident, c.Attach("s"), c.Credit(credit), c.Consume(name))
    assert isinstance(h.take(ident)[-1], c.ConsumeOk)


def got(h: Core, ident: bytes) -> list:
    return [q for q, _k in h.delivered(ident)]


def ack(h: Core, ident: bytes, seqs) -> None:
    h.send(ident, c.Ack(pack_ranges(ranges_of(sorted(seqs)))))


def counted(h: Core) -> int:
    """What the consumers loaded hold, one by one."""
    return sum(len(g.out) for gs in h.core.consumers.values() for g in gs.values())


def info(h: Core, name: str) -> dict:
    return h.core.consumer_info(h.core.streams["s"], h.core.consumers["s"][name])


def test_a_full_budget_pauses_the_other_consumers_until_acks_and_deletes_free_room(make):
    """Three consumers whose members take 100 each (all their credit) and acknowledge nothing
    fill a budget of 300; a fourth consumer gets nothing (paused, and says why), though its
    messages are there; ten acknowledged give it ten, a member leaving frees nothing (what it
    held waits for its consumer's next member), and deleting a consumer gives the paused one
    its 100 more: in order, nothing skipped."""
    h = make(max_total_outstanding=300, **FAST_ADMIN)
    h.publish(*[f"k.{i}" for i in range(500)])
    hundred = sum(cost(f"k.{i}") for i in range(100))
    for name in ("h1", "h2", "h3"):
        add(h, name, max_ack_pending=1000)
        join(h, name.encode(), name, credit=hundred)
    h.drain()
    assert [len(got(h, n)) for n in (b"h1", b"h2", b"h3")] == [100, 100, 100]
    assert h.core.outstanding.held == 300
    add(h, "v", max_ack_pending=1000)
    join(h, b"v", "v")
    h.drain()
    assert got(h, b"v") == []
    assert info(h, "v")["paused"] == PAUSED.format(300)
    assert [kw["reason"] for kw in h.logged("consumers_paused")] == [PAUSED.format(300)]
    ack(h, b"h1", range(1, 11))
    h.drain()
    assert got(h, b"v") == list(range(1, 11))
    h.core.gone(b"h2")                                            # its 100 wait for h2's next
    h.drain()
    assert got(h, b"v") == [] and h.core.outstanding.held == 300
    # who holds them: members or not (h2 has none), and the broker's count
    assert [r["name"] for r in consumerz(h.core, sort="outstanding")["consumers"]] == [
        "h2", "h3", "h1", "v"]
    assert [r["name"] for r in consumerz(h.core, sort="pending")["consumers"]][-1] == "h2"
    assert varz(h.core, h.now)["consumer_outstanding"] == 300
    h.send(b"admin", c.ConsumerDelete("h3"))
    h.drain()
    assert got(h, b"v") == list(range(11, 111))
    assert info(h, "v")["paused"] == PAUSED.format(300)
    assert h.core.outstanding.held == counted(h) == 300
    ack(h, b"v", range(1, 111))
    h.drain()
    assert got(h, b"v") == list(range(111, 221))
    assert len(h.logged("consumers_paused")) == 1                 # once until half is free
    assert h.logged("internal_error") == []


def test_consumers_holding_many_leave_the_last_quarter_to_those_holding_few(make, monkeypatch):
    """A consumer whose member takes all it may and acknowledges nothing stops at three
    quarters of the budget; consumers holding fewer than SMALL go on from the rest."""
    monkeypatch.setattr(outstanding, "SMALL", 40)
    h = make(max_total_outstanding=400, **FAST_ADMIN)
    h.publish(*[f"k.{i}" for i in range(1000)])
    add(h, "big", max_ack_pending=65_536)
    join(h, b"big", "big")
    h.drain()
    assert len(got(h, b"big")) == 300
    assert info(h, "big")["paused"] == PAUSED.format(400)
    add(h, "small", max_ack_pending=30)
    join(h, b"small", "small")
    for first in (1, 31, 61):                    # it acknowledges, and goes on
        h.drain()
        seqs = got(h, b"small")
        assert seqs == list(range(first, first + 30))
        ack(h, b"small", seqs)
    h.drain()
    assert got(h, b"small") == list(range(91, 121)) and got(h, b"big") == []
    assert h.core.outstanding.held == 330


def test_room_freed_by_an_ack_goes_to_the_consumers_in_turn(make):
    """A consumer whose member acknowledges two messages at a time and takes two more at once
    did so before a paused consumer every time (the pump step took the consumers in the same
    order, the oldest first), and the paused one never got any; now they take turns."""
    h = make(max_total_outstanding=20, **FAST_ADMIN)
    h.publish(*[f"k.{i}" for i in range(200)])
    add(h, "a", max_ack_pending=1000)
    join(h, b"a", "a")
    h.drain()
    held = got(h, b"a")
    assert len(held) == 20
    add(h, "v", max_ack_pending=1000)
    join(h, b"v", "v")
    v = []
    for _ in range(10):
        ack(h, b"a", held[:2])
        del held[:2]
        h.drain()
        held += got(h, b"a")
        v += got(h, b"v")
    assert v == list(range(1, 11))
    assert len(held) == 10 and h.core.outstanding.held == 20


def test_a_restart_counts_what_the_consumers_files_hold(make, tmp_path):
    """Outstanding messages reloaded from a consumer's file count in the budget (even past a
    lower limit): the other consumers wait until they are acknowledged."""
    h = make(max_total_outstanding=300, **FAST_ADMIN)
    h.publish(*[f"k.{i}" for i in range(500)])
    add(h, "hog", max_ack_pending=300)
    join(h, b"hog", "hog")
    add(h, "v")
    h.drain()
    assert len(got(h, b"hog")) == 300
    h.core.save_consumers()
    h.close()
    again = Core(tmp_path / "data0", max_total_outstanding=200, **FAST_ADMIN)
    try:
        join(again, b"v", "v")                   # loads the stream's consumers: 300 held
        assert again.core.outstanding.held == counted(again) == 300
        again.drain()
        assert got(again, b"v") == []
        join(again, b"hog2", "hog")              # they go again, to hog's new member ...
        again.drain()
        assert got(again, b"hog2") == list(range(1, 301)) and got(again, b"v") == []
        ack(again, b"hog2", range(1, 201))       # ... and 100 left of 200: v may take 100
        again.drain()
        assert got(again, b"v") == list(range(1, 101))
        assert again.core.outstanding.held == counted(again) == 200
    finally:
        again.close()


OPS = st.sampled_from(["pub", "pub", "join", "join", "ack", "ack", "ack", "nak", "leave",
                       "tick", "tick", "choke", "delete", "add", "purge", "drop_stream"])


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(OPS, st.integers(0, 3)), min_size=5, max_size=50))
def test_the_count_is_what_the_consumers_hold_whatever_they_do(tmp_path_factory, ops):
    """Members take (and take again what expired or was NAKed: another member claims it),
    acknowledge, NAK, leave, have their pipe full; consumers (explicit, ack-all, per-key
    order, ack-none; a max_deliver) are deleted and added; the stream is purged or deleted:
    after every step the broker's count is the sum of what its consumers hold, and (with no
    restart and no pipe refusing) within the limit."""
    h = Core(tmp_path_factory.mktemp("b"), max_total_outstanding=25, **FAST_ADMIN)
    kinds = [dict(ack_wait_ms=500), dict(ack=c.ACK_ALL, ack_wait_ms=500),
             dict(flags=c.CONSUMER_KEY_ORDER, ack_wait_ms=500, max_deliver=2),
             dict(ack=c.ACK_NONE)]
    names = [f"g{k}" for k in range(4)]
    members: dict = {}                           # ident -> consumer name
    serial = 0
    choked = False
    try:
        h.publish(*[f"k.{i % 3}" for i in range(10)])
        for name, kind in zip(names, kinds):
            add(h, name, max_ack_pending=8, **kind)
            join(h, name.encode(), name)
            members[name.encode()] = name
        for op, k in ops:
            name = names[k]
            mine = [m for m, n in members.items() if n == name]
            g = h.core.consumers.get("s", {}).get(name)
            if op == "pub":
                h.publish(*[f"k.{i}" for i in range(k + 3)])
            elif op == "join" and g is not None:
                serial += 1
                ident = b"m%d" % serial
                join(h, ident, name)
                members[ident] = name
            elif op in ("ack", "nak") and mine and g is not None:
                held = sorted(q for q, o in g.out.items() if o.member == mine[-1])
                if held and op == "ack":
                    ack(h, mine[-1], held[:2 * k + 1])
                elif held:
                    h.send(mine[-1], c.Nak(held[0], 0))
            elif op == "leave" and mine:
                h.core.gone(mine[0])
                del members[mine[0]]
            elif op == "tick":
                h.now += 0.6
                h.tick()
            elif op == "choke" and mine:
                h.pipe[mine[0]] = k
                choked = True
            elif op == "delete" and g is not None:
                h.send(b"admin", c.ConsumerDelete(name))
                for m in mine:
                    del members[m]
            elif op == "add" and g is None:
                add(h, name, max_ack_pending=8, **kinds[k])
            elif op == "purge" and "s" in h.core.streams:
                h.send(b"admin", c.StreamPurge("s", h.core.streams["s"].journal.next_seq - 2))
            elif op == "drop_stream":
                h.send(b"admin", c.StreamDelete("s"))
                members.clear()
                h.publish("k.again", ident=b"pub%d" % serial)
                serial += 1
                for n2, kind in zip(names, kinds):
                    add(h, n2, max_ack_pending=8, **kind)
            h.drain()
            for ident in members:
                h.take(ident)
            h.take(b"admin")
            assert h.core.outstanding.held == counted(h)
            assert choked or h.core.outstanding.held <= 25
        for gs in list(h.core.consumers.values()):
            for name in list(gs):
                h.send(b"admin", c.ConsumerDelete(name))
        assert h.core.outstanding.held == counted(h) == 0
        assert h.logged("internal_error") == []
    finally:
        h.close()
