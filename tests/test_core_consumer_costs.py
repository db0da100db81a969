"""What a durable consumer's bookkeeping costs the broker (docs/consumers.md "Bounds"), driven
in-process (tests/core_harness.py) or on the pure group (zeps/broker/groups.py): the timers of
messages acknowledged long before their deadline do not pile up."""
from __future__ import annotations

from types import SimpleNamespace

from tests.core_harness import Core, core_fixture, make_fixture  # noqa: F401
from zeps.broker.groups import HEAP_SLACK, Group, Member
from zeps.journal.consumers import ConsumerConfig, load_all
from zeps.protocol import commands as c, encode
from zeps.protocol.consumer import pack_ranges, ranges_of


def setup(h: Core, **add) -> None:
    """Stream "s", consumer "g" (settings ``add``), member "m" with all the credit it needs."""
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd("g", **add))
    assert isinstance(h.take(b"admin")[1], c.ConsumerAddOk)
    h.send(b"m", c.Attach("s"), c.Credit(1 << 30), c.Consume("g"))
    assert isinstance(h.take(b"m")[1], c.ConsumeOk)


def test_acknowledged_messages_leave_no_ack_deadlines_behind(core):
    """An ack wait of a day, every message acknowledged at once: the heap of ack deadlines
    stays within twice the outstanding messages plus HEAP_SLACK (it kept one entry per message
    handed out, for a day: 5,000 here, rate times ack wait in a broker)."""
    h = core
    setup(h, ack_wait_ms=86_400_000, max_ack_pending=65_536)
    g = h.core.consumers["s"]["g"]
    delivered = []
    for batch in range(10):
        h.publish(*[f"k.{batch}.{i}" for i in range(500)])
        h.drain()
        got = [q for q, _ in h.delivered(b"m")]
        delivered += got
        assert len(g.deadlines) <= 2 * len(g.out) + HEAP_SLACK
        h.send(b"m", c.Ack(pack_ranges(ranges_of(got))))
        assert len(g.deadlines) <= 2 * len(g.out) + HEAP_SLACK
        h.now += 1
        h.tick()
    assert delivered == list(range(1, 5001))
    assert not g.out and g.floor == 5000
    assert len(g.deadlines) <= HEAP_SLACK


def test_an_ack_deadline_still_fires_after_its_heap_was_rebuilt(core):
    """A message held while the others' stale entries are swept out goes again when its ack
    wait passes, once."""
    h = core
    setup(h, ack_wait_ms=60_000, max_ack_pending=65_536)
    g = h.core.consumers["s"]["g"]
    h.publish(*[f"k.{i}" for i in range(3000)])
    h.drain()
    assert [q for q, _ in h.delivered(b"m")] == list(range(1, 3001))
    h.send(b"m", c.Ack(pack_ranges(ranges_of(range(2, 3001)))))     # 1 is still held
    assert len(g.deadlines) <= 2 * len(g.out) + HEAP_SLACK
    h.now += 61
    h.tick()
    h.drain()
    assert h.delivered(b"m") == [(1, "k.0")]


def test_nak_delays_of_messages_dropped_since_do_not_pile_up():
    """Messages NAKed with a day's delay, then removed by retention: their delays go too."""
    g = Group("s", ConsumerConfig("g", max_ack_pending=65_536), 1)
    g.join(SimpleNamespace(identity=b"m"))
    m = g.members[b"m"]
    for seq in range(1, 3001):
        g.hand(seq, m, "k", 0.0)
        assert g.nak(b"m", seq, 86_400.0, 0.0)
    g.next = 3001                                   # the cursor is past them
    assert len(g.delayed) == 3000
    assert g.trim(3001) == 3000                     # retention removed them
    assert not g.out and len(g.delayed) <= HEAP_SLACK
    assert len(g.deadlines) <= HEAP_SLACK


class Watched(Member):
    """A member whose session is counted each time the pump looks at it (a visit)."""
    __slots__ = ("_session",)
    visits = 0

    def __init__(self, m: Member):
        self._session = m.session
        self.held = m.held

    @property
    def session(self):
        Watched.visits += 1
        return self._session


def test_idle_members_cost_a_round_one_visit_each_not_one_per_message(make):
    """1,000 members that never grant credit beside two that take everything: a round looks at
    each member once, plus once per message it hands out (it looked at every idle member for
    every message: 256,000 visits a round), and the two share the messages in turn."""
    idle = 1000
    h = make(max_clients=idle + 10)
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd("g", max_ack_pending=65_536))
    h.take(b"admin")
    for i in range(idle):
        h.core.receive(b"i%d" % i, [encode(c.Attach("s"))], h.now)
        h.core.receive(b"i%d" % i, [encode(c.Consume("g"))], h.now)
        if i in (300, 700):                          # the working ones, among the idle ones
            ident = b"w%d" % i
            h.core.receive(ident, [encode(c.Attach("s"))], h.now)
            h.core.receive(ident, [encode(c.Credit(1 << 30))], h.now)
            h.core.receive(ident, [encode(c.Consume("g"))], h.now)
    h.collect()
    g = h.core.consumers["s"]["g"]
    g.members = {ident: Watched(m) for ident, m in g.members.items()}
    h.publish(*[f"k.{i}" for i in range(2560)])
    got = {b"w300": [], b"w700": []}
    for _ in range(100):
        Watched.visits = 0
        more = h.round()
        handed = 0
        for ident, seqs in got.items():
            new = [q for q, _ in h.delivered(ident)]
            seqs += new
            handed += len(new)
        assert Watched.visits <= len(g.members) + 2 * handed, (Watched.visits, handed)
        if not more and handed == 0:
            break
    assert sorted(got[b"w300"] + got[b"w700"]) == list(range(1, 2561))
    assert len(got[b"w300"]) == len(got[b"w700"]) == 1280     # in turn


def test_a_consumer_tick_visits_only_the_consumers_with_timers_or_changes(make, monkeypatch):
    """1,024 consumers loaded, one of them busy: a tick looks at the busy one only (it looked
    at every loaded consumer of every stream ever named, every 100 ms); that one's ack wait
    still passes, its ACK is still saved, and once quiet it is not looked at either."""
    h = make(admin_rate=1e9, admin_burst=1e9)
    h.send(b"admin", c.Attach("s"), *[c.ConsumerAdd(f"g{j}", ack_wait_ms=1000)
                                      for j in range(1024)])
    assert sum(isinstance(m, c.ConsumerAddOk) for m in h.take(b"admin")) == 1024
    looked = []
    plain = Group.next_deadline
    monkeypatch.setattr(Group, "next_deadline", lambda g: looked.append(g) or plain(g))

    def tick() -> list:
        looked.clear()
        h.now += 0.2
        h.tick()
        h.drain()
        return [g.config.name for g in looked]

    assert tick() == []                              # each was saved when added: all quiet
    h.publish("k.0")
    h.send(b"m", c.Attach("s"), c.Credit(1 << 20), c.Consume("g7"))
    h.take(b"m")
    h.drain()
    assert h.delivered(b"m") == [(1, "k.0")]
    assert tick() == ["g7"]
    for _ in range(5):                               # the ack wait (1 s) passes: it goes again
        tick()
    assert h.delivered(b"m") == [(1, "k.0")]
    h.send(b"m", c.Ack(pack_ranges(ranges_of([1]))))
    assert tick() == ["g7"]                          # saved, and quiet from now on
    assert load_all(h.datadir.stream_path("s"))["g7"][1].next == 2
    assert tick() == [] and tick() == []
    h.send(b"admin", c.ConsumerDelete("g7"))         # deleted while busy: never saved again
    h.send(b"m2", c.Attach("s"), c.Credit(1 << 20), c.Consume("g8"))
    h.drain()
    h.send(b"admin", c.ConsumerDelete("g8"))
    assert tick() == [] and "g8" not in load_all(h.datadir.stream_path("s"))


class Counted(dict):
    """A consumer's ``out``, counting the outstanding messages a pass over it looks at."""
    n = 0

    def __iter__(self):
        for seq in dict.__iter__(self):
            Counted.n += 1
            yield seq


def test_a_consume_does_not_look_at_every_outstanding_message(make):
    """A member holds 4,096 messages; another client joins and leaves in a loop (ATTACH,
    CONSUME, DETACH: no budget, no bound but the socket's). A CONSUME looked at every
    outstanding message twice (the trim of what retention removed, the floor of CONSUME-OK):
    with 65,536 outstanding, 2.2 ms a loop against 0.04 without CONSUME, so a client sending
    it flat out held the broker about 370 ms of every 500-message round."""
    h = make()
    setup(h, max_ack_pending=65_536)
    h.publish(*[f"k.{i}" for i in range(4096)])
    h.drain()
    assert len(h.delivered(b"m")) == 4096
    g = h.core.consumers["s"]["g"]
    g.out = Counted(g.out)
    Counted.n = 0
    for _ in range(10):
        h.send(b"x", c.Attach("s"), c.Consume("g"), c.Detach())
        assert h.kinds(b"x") == [c.AttachOk, c.ConsumeOk, c.DetachOk]
    assert Counted.n < 100, Counted.n
    h.send(b"x", c.Attach("s"), c.Consume("g"))
    assert h.take(b"x")[1] == c.ConsumeOk(0, 4097, 0)
    h.send(b"m", c.Ack(pack_ranges(ranges_of(range(1, 101)))))
    h.send(b"x", c.Detach(), c.Attach("s"), c.Consume("g"))
    assert h.take(b"x")[2] == c.ConsumeOk(100, 4097, 0)       # the floor moved up


def test_a_trim_drops_the_outstanding_messages_below_the_first_kept_only():
    """What retention removed goes from the outstanding messages, found from the lowest up:
    those at or above the first kept message stay, the floor says the lowest of them."""
    config = ConsumerConfig(name="g", patterns=("",), start=c.START_ALL, start_value=0,
                            ack=c.ACK_EXPLICIT, ack_wait_ms=1000, max_deliver=0,
                            max_ack_pending=100, dead_letter="", flags=0)
    g = Group("s", config, 20, {3: 1, 9: 2, 12: 1, 15: 1})
    m = Member(SimpleNamespace(identity=b"m"))
    g.members[b"m"] = m
    assert g.pop_ready(0.0) == 3
    g.hand(3, m, "a", 0.0)
    assert g.floor == 2
    assert g.trim(12) == 2 and sorted(g.out) == [12, 15] and m.held == []
    assert g.floor == 11
    assert g.trim(30) == 12 and not g.out and g.floor == 29 and g.next == 30


class Asked(dict):
    """A consumer's ``members``, counting how often a round asks whether it has any."""
    n = 0

    def __len__(self):
        Asked.n += 1
        return dict.__len__(self)


def test_a_round_looks_only_at_the_consumers_with_members(make):
    """1,024 consumers (any client that may subscribe adds them, 20 a second a connection),
    one with a member: a round looked at every one of them, of every open stream (1,000 open
    streams of 1,024: about 28 ms a round, every client waiting). Then the consumer deleted
    with its member still attached is not looked at again."""
    h = make(admin_rate=1e9, admin_burst=1e9)
    h.send(b"admin", c.Attach("s"), *[c.ConsumerAdd(f"g{j}") for j in range(1024)])
    assert sum(isinstance(m, c.ConsumerAddOk) for m in h.take(b"admin")) == 1024
    h.send(b"m", c.Attach("s"), c.Credit(1 << 20), c.Consume("g7"))
    h.take(b"m")
    for g in h.core.consumers["s"].values():
        g.members = Asked(g.members)
    h.publish("k.0")
    Asked.n = 0
    h.round()
    assert h.delivered(b"m") == [(1, "k.0")]
    assert Asked.n <= 4, Asked.n
    h.send(b"m", c.ConsumerDelete("g7"))
    h.publish("k.1")
    Asked.n = 0
    h.round()
    assert Asked.n == 0 and not h.core.consumers_pumping
