"""Durable consumers in the broker core (issue 19, docs/consumers.md), driven in-process
(tests/core_harness.py): the position is kept and resumed, members share the messages (one
holder at a time), what is not acknowledged goes again (ack wait, NAK, a member leaving, its
pipe full), ``max_deliver`` ends in the dead-letter stream, ``max_ack_pending`` bounds a member
and not the others, per-key order, and what a hostile member can and cannot do."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from tests.core_harness import Core, core_fixture, make_fixture  # noqa: F401
from zeps.broker.groups import MAX_MEMBERS
from zeps.protocol import commands as c
from zeps.protocol.consumer import pack_ranges, ranges_of
from zeps.protocol.headers import headers_of
from .property_examples import examples

PUB = b"pub"


def setup(h: Core, n: int = 0, **add) -> None:
    """Stream "s" with ``n`` messages k.0 .. k.(n-1); consumer "g" added (settings ``add``)."""
    if n:
        h.publish(*[f"k.{i}" for i in range(n)])
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd("g", **add))
    got = h.take(b"admin")
    assert got[0] == c.AttachOk() and isinstance(got[1], c.ConsumerAddOk), got


def member(h: Core, ident: bytes, credit: int = 1 << 20, name: str = "g") -> c.ConsumeOk:
    h.send(ident, c.Attach("s"), c.Credit(credit), c.Consume(name))
    got = h.take(ident)
    assert got[0] == c.AttachOk() and isinstance(got[1], c.ConsumeOk), got
    return got[1]


def seqs(h: Core, ident: bytes) -> list:
    return [s for s, _k in h.delivered(ident)]


def ack(h: Core, ident: bytes, sequences) -> None:
    h.send(ident, c.Ack(pack_ranges(ranges_of(sequences))))


def group(h: Core, name: str = "g"):
    return h.core.consumers["s"][name]


def test_a_member_gets_everything_acks_and_a_new_member_resumes_after_the_acks(tmp_path):
    h = Core(tmp_path / "d")
    setup(h, 5)
    ok = member(h, b"m1")
    assert (ok.floor, ok.next) == (0, 1)
    h.drain()
    assert seqs(h, b"m1") == [1, 2, 3, 4, 5]
    ack(h, b"m1", [1, 2, 3])
    assert group(h).floor == 3
    h.send(b"m1", c.Detach())                       # 4 and 5 were not acknowledged
    h.now += 1
    h.tick()                                        # saved
    h.close()
    h = Core(tmp_path / "d")                        # a broker restart
    h.publish("k.5")
    ok = member(h, b"m2")
    assert ok.floor == 3
    h.drain()
    assert seqs(h, b"m2") == [4, 5, 6]
    info = group(h).out
    assert (info[4].deliveries, info[6].deliveries) == (2, 1)
    h.close()


def test_members_share_the_messages_each_held_by_one(core):
    h = core
    setup(h)
    for m in (b"a", b"b", b"c"):
        member(h, m)
    h.publish(*[f"k.{i}" for i in range(30)])
    h.drain()
    got = {m: seqs(h, m) for m in (b"a", b"b", b"c")}
    assert all(len(v) == 10 for v in got.values()), got            # in turn
    assert sorted(sum(got.values(), [])) == list(range(1, 31))     # each once
    for m, v in got.items():
        ack(h, m, v)
    assert group(h).floor == 30 and not group(h).out


def test_a_member_that_leaves_holding_messages_has_them_given_to_another(core):
    h = core
    setup(h, 6)
    member(h, b"a")
    member(h, b"b")
    h.drain()
    held_a = seqs(h, b"a")
    held_b = seqs(h, b"b")
    assert held_a and held_b
    ack(h, b"b", held_b)
    h.core.gone(b"a")                               # its connection is gone (a SIGKILL)
    h.drain()
    assert seqs(h, b"b") == held_a
    assert all(group(h).out[q].deliveries == 2 for q in held_a)
    ack(h, b"b", held_a)
    assert group(h).floor == 6


def test_the_ack_wait_passes_and_the_message_goes_again_progress_extends_it(core):
    h = core
    setup(h, 2, ack_wait_ms=1000)
    member(h, b"a")
    h.drain()
    assert seqs(h, b"a") == [1, 2]
    h.now += 0.6
    h.send(b"a", c.Progress(2))
    h.now += 0.5                                    # 1's wait passed, not 2's
    h.tick()
    h.drain()
    assert seqs(h, b"a") == [1]
    h.now += 0.6
    h.tick()
    h.drain()
    assert seqs(h, b"a") == [2]
    assert group(h).counters["redelivered"] == 2


def test_a_nak_with_a_delay_goes_again_not_before_it(core):
    h = core
    setup(h, 1)
    member(h, b"a")
    h.drain()
    assert seqs(h, b"a") == [1]
    h.send(b"a", c.Nak(1, 5000))
    h.now += 4
    h.tick()
    h.drain()
    assert seqs(h, b"a") == []
    h.now += 1.5
    h.tick()
    h.drain()
    assert seqs(h, b"a") == [1]
    h.send(b"a", c.Nak(1, 0))                       # at once
    h.drain()
    assert seqs(h, b"a") == [1]


def test_max_ack_pending_bounds_a_member_that_never_acks_and_not_the_others(core):
    h = core
    setup(h, 0, max_ack_pending=3)
    member(h, b"hog")
    member(h, b"ok")
    h.publish(*[f"k.{i}" for i in range(20)])
    for _ in range(10):
        h.drain()
        ack(h, b"ok", seqs(h, b"ok"))
        if group(h).next > 20:
            break
    hog = [q for q, o in group(h).out.items() if o.member == b"hog"]
    assert len(hog) == 3                            # never more than its bound
    assert group(h).next == 21 and len(group(h).out) == 3


def test_a_member_without_credit_gets_nothing_and_the_others_go_on(core):
    h = core
    setup(h)
    member(h, b"dry", credit=0)
    member(h, b"wet")
    h.publish(*[f"k.{i}" for i in range(5)])
    h.drain()
    assert seqs(h, b"dry") == [] and seqs(h, b"wet") == [1, 2, 3, 4, 5]


def test_max_deliver_then_the_dead_letter_stream(core):
    h = core
    setup(h, 1, max_deliver=2, dead_letter="dead")
    member(h, b"a")
    for _ in range(2):
        h.drain()
        assert seqs(h, b"a") == [1]
        h.send(b"a", c.Nak(1, 0))
    h.drain()
    assert seqs(h, b"a") == []                      # not a third time
    h.drain()                                       # "dead" opened meanwhile
    h.send(b"r", c.Attach("dead"), c.HeadersSelect(), c.Credit(1 << 20), c.Subscribe("", 0))
    h.drain()
    dead = [m for m in h.take(b"r") if isinstance(m, c.DeliverHeaders)]
    assert [(m.key, m.body) for m in dead] == [("k.0", b"x")]
    hd = headers_of(dead[0].block) if dead[0].block else dict(dead[0].headers)
    hd = dict(hd)
    assert (hd["zeps-stream"], hd["zeps-consumer"], hd["zeps-sequence"],
            hd["zeps-deliveries"]) == (b"s", b"g", b"1", b"2")
    assert group(h).counters["dead_lettered"] == 1 and group(h).floor == 1


def dead_letter_twice(h: Core, ident: bytes, name: str) -> None:
    """``ident`` joins consumer ``name`` (max_deliver=1) and NAKs what it got: dead-lettered."""
    member(h, ident, name=name)
    h.drain()
    for seq, _k in h.delivered(ident):
        h.send(ident, c.Nak(seq, 0))
    h.drain()
    h.drain()                                       # its dead-letter stream opened meanwhile


def test_a_dead_letter_stream_is_created_only_as_an_attach_would_create_it(make):
    """A consumer named a dead-letter stream, and dead-lettering created it past
    ``--auto-create no`` and ``max_total_streams`` (any client that may read one stream could
    create up to 1,024 streams a stream, one consumer each)."""
    h = make(auto_create=False)
    h.send(b"admin", c.StreamCreate("s"), c.Attach("s"),
           c.ConsumerAdd("g", max_deliver=1, dead_letter="dl"))
    got = h.take(b"admin")
    assert isinstance(got[-1], c.Invalid) and "STREAM-CREATE" in got[-1].reason, got
    h.send(b"admin", c.StreamCreate("dl"), c.ConsumerAdd("g", max_deliver=1, dead_letter="dl"))
    assert isinstance(h.take(b"admin")[-1], c.ConsumerAddOk)
    h.publish("k.0")
    dead_letter_twice(h, b"m", "g")
    assert group(h).counters["dead_lettered"] == 1
    assert len(h.core.catalogue) == 2 and "dl" in h.core.catalogue

    h = make(max_total_streams=2)                   # "s", and room for one more
    h.send(b"admin", c.Attach("s"), *[c.ConsumerAdd(f"g{i}", max_deliver=1,
                                                    dead_letter=f"dl{i}") for i in range(2)])
    assert [type(m) for m in h.take(b"admin")] == [c.AttachOk] + [c.ConsumerAddOk] * 2
    h.publish("k.0")
    dead_letter_twice(h, b"m0", "g0")               # dl0 is created: the limit is reached
    dead_letter_twice(h, b"m1", "g1")               # dl1 is not: the message is dropped
    assert len(h.core.catalogue) == 2 and "dl0" in h.core.catalogue
    assert group(h, "g0").counters["dead_lettered"] == 1
    assert group(h, "g1").counters["dropped"] == 1 and group(h, "g1").floor == 1
    assert [kw["to"] for kw in h.logged("consumer_dead_letter_dropped")] == ["dl1"]
    h.send(b"admin", c.ConsumerAdd("g2", dead_letter="dl2"))
    got = h.take(b"admin")[-1]
    assert isinstance(got, c.Invalid) and "stores at most 2 streams" in got.reason


def test_a_dead_letter_stream_that_cannot_be_opened_does_not_stop_the_consumer(core):
    """Its open failed, and the consumer tried again every round, delivering nothing else."""
    h = core
    setup(h, 5, max_deliver=1, dead_letter="dl")
    with open(h.datadir.stream_path("dl"), "w") as f:   # the dead-letter stream cannot open
        f.write("not a directory")
    member(h, b"a")
    h.drain()
    assert seqs(h, b"a") == [1, 2, 3, 4, 5]
    h.send(b"a", c.Nak(1, 0))                       # 1 goes to the dead-letter stream
    ack(h, b"a", [2, 3, 4, 5])
    h.publish("k.5", "k.6", "k.7")
    for _ in range(5):
        h.now += 0.2
        h.tick()
        h.drain()
    assert seqs(h, b"a") == [6, 7, 8]
    assert group(h).counters["dropped"] == 1
    assert [kw["sequence"] for kw in h.logged("consumer_dead_letter_dropped")] == [1]


def test_ack_none_a_message_its_members_pipe_did_not_take_goes_again(core):
    """ACK_NONE acknowledges a message as it is handed out; one whose DELIVER did not go out
    (the member's pipe full) was lost, yet counted delivered and acknowledged."""
    h = core
    setup(h, 3, ack=c.ACK_NONE)
    member(h, b"a")
    h.pipe[b"a"] = 1                                # the pipe takes one frame, then is full
    h.drain()
    first = seqs(h, b"a")
    h.pipe.pop(b"a")                                # the member reads again
    for _ in range(3):
        h.now += 1
        h.tick()
        h.drain()
    assert first + seqs(h, b"a") == [1, 2, 3]
    g = group(h)
    assert g.counters["delivered"] == g.counters["acked"] == 3 and g.floor == 3


def test_ack_none_with_key_order_goes_on_after_unsent_messages_and_a_restart(tmp_path):
    """ACK_NONE holds nothing, so per-key order holds nothing back; the messages its member's
    pipe did not take went again with no key known, and the consumer read nothing new after a
    restart (the count of unknown keys never came back to 0)."""
    h = Core(tmp_path / "d")
    setup(h, 3, ack=c.ACK_NONE, flags=c.CONSUMER_KEY_ORDER)
    member(h, b"a")
    h.pipe[b"a"] = 1
    h.drain()
    first = seqs(h, b"a")
    h.now += 1
    h.tick()                                        # saved with the unsent ones outstanding
    h.close()
    h = Core(tmp_path / "d")
    h.publish("k.3", "k.4")
    member(h, b"b")
    for _ in range(3):
        h.now += 1
        h.tick()
        h.drain()
    assert sorted(first + seqs(h, b"b")) == [1, 2, 3, 4, 5]
    h.close()


def test_an_existing_consumer_is_added_again_whatever_its_dead_letter_stream(make):
    """CONSUMER-ADD of an existing consumer with its settings is idempotent (a client restart
    adds it again), even once its dead-letter stream could no longer be created."""
    h = make(max_total_streams=2)
    add = c.ConsumerAdd("g", max_deliver=3, dead_letter="dl")
    h.send(b"admin", c.Attach("s"), add)
    assert [type(m) for m in h.take(b"admin")] == [c.AttachOk, c.ConsumerAddOk]
    h.send(b"other", c.Attach("t"))                 # another stream takes the last room
    assert [type(m) for m in h.take(b"other")] == [c.AttachOk]
    h.send(b"again", c.Attach("s"), add)
    assert [type(m) for m in h.take(b"again")] == [c.AttachOk, c.ConsumerAddOk]
    h.send(b"again", c.ConsumerAdd("new", dead_letter="dl"))
    got = h.take(b"again")[-1]
    assert isinstance(got, c.Invalid) and "stores at most 2 streams" in got.reason


def test_per_key_order_holds_across_a_restart(tmp_path):
    """The consumer's saved state has its outstanding messages, not their keys: after a restart
    all of them went out at once, several of one key to different members."""
    h = Core(tmp_path / "d")
    setup(h, 0, flags=c.CONSUMER_KEY_ORDER)
    member(h, b"a")
    member(h, b"b")
    h.publish("x", "x", "y", "x")                   # 1 x out, 2 x parked, 3 y out, 4 x parked
    h.drain()
    assert sorted(h.delivered(b"a") + h.delivered(b"b")) == [(1, "x"), (3, "y")]
    h.now += 1
    h.tick()                                        # saved: outstanding 1..4
    h.close()
    h = Core(tmp_path / "d")
    for m in (b"a", b"b", b"c"):
        member(h, m)
    h.drain()
    out = {m: h.delivered(m) for m in (b"a", b"b", b"c")}
    assert sorted(sum(out.values(), [])) == [(1, "x"), (3, "y")], out
    holder = next(m for m, got in out.items() if (1, "x") in got)
    for before, seq in ((1, 2), (2, 4)):            # x's next goes once the one before is acked
        ack(h, holder, [before])
        h.drain()
        got = {m: h.delivered(m) for m in (b"a", b"b", b"c")}
        assert sorted(sum(got.values(), [])) == [(seq, "x")], got
        holder = next(m for m, g in got.items() if g)
    h.close()


def test_saves_are_paid_from_a_budget_the_longest_unsaved_first(core, monkeypatch):
    """Each ACK makes its consumer due for a save, which costs in proportion to its outstanding
    messages (up to 65,536 each, 1,024 consumers a stream): four consumers of 2,000 pending
    messages, each acked once every tick, are saved within the budget (scaled down here to
    1,000 messages a second, 3,000 saved up), and each in turn."""
    h = core
    scaled_budget(h, monkeypatch)
    names = [f"g{i}" for i in range(4)]
    h.send(b"admin", c.Attach("s"), *[c.ConsumerAdd(n, max_ack_pending=2000,
                                                    ack_wait_ms=3_600_000) for n in names])
    assert [type(m) for m in h.take(b"admin")] == [c.AttachOk] + [c.ConsumerAddOk] * 4
    h.publish(*[f"k.{i}" for i in range(2000)])
    for i, n in enumerate(names):
        member(h, b"m%d" % i, name=n)
    for _ in range(20):
        h.drain()
    assert all(len(group(h, n).out) == 2000 for n in names)
    saves = []
    submit = h.core.consumer_store.submit
    monkeypatch.setattr(h.core.consumer_store, "submit", lambda d, config, state: (
        saves.append((h.now, config.name, 1 + len(state.outstanding))),
        submit(d, config, state)))
    start = h.now
    for t in range(100):                            # 10 s of ticks, every consumer dirty
        for i in range(4):
            ack(h, b"m%d" % i, [t + 1])
        h.now += 0.1
        h.tick()
    for now, _name, _cost in saves:                 # within the budget at every moment
        spent = sum(cost for when, _n, cost in saves if when <= now)
        assert spent <= 3000 + 250 + (1000 + 250) * (now - start)
    order = [name for _t, name, _c in saves]
    assert len(order) >= 5 and all(order.count(n) >= 1 for n in names)
    assert all(order[i] != order[i + 1] for i in range(len(order) - 1))   # in turn


def scaled_budget(h: Core, monkeypatch) -> None:
    """The save budget scaled down: 1,000 a second, 3,000 saved up; 250 for the others."""
    from zeps.broker import consuming
    monkeypatch.setattr(consuming, "SAVE_RATE", 1000)
    monkeypatch.setattr(consuming, "SAVE_BURST", 3000)
    monkeypatch.setattr(consuming, "SIDE_RATE", 250)
    h.core.save_tokens, h.core.save_side_tokens = 3000.0, 250.0


def test_a_large_consumer_waiting_for_its_save_does_not_hold_back_the_small_ones(core,
                                                                                  monkeypatch):
    """The longest unsaved consumer, too large to pay yet, stopped every save behind it: a
    consumer of one pending message was saved only when the large one was."""
    h = core
    scaled_budget(h, monkeypatch)
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd("big", max_ack_pending=2000,
                                                  ack_wait_ms=3_600_000),
           c.ConsumerAdd("small", max_ack_pending=1, ack_wait_ms=3_600_000))
    h.publish(*[f"k.{i}" for i in range(2100)])
    member(h, b"b", name="big")
    member(h, b"s", name="small")
    for _ in range(20):
        h.drain()
    saves = []
    submit = h.core.consumer_store.submit
    monkeypatch.setattr(h.core.consumer_store, "submit", lambda d, config, state: (
        saves.append((round(h.now - t0, 1), config.name)), submit(d, config, state)))
    t0 = h.now
    for _ in range(50):                             # 5 s: both acked every tick
        ack(h, b"b", [seqs_held(h, "big")[0]])
        ack(h, b"s", seqs_held(h, "small"))
        h.drain()
        h.now += 0.1
        h.tick()
    small = [when for when, name in saves if name == "small"]
    assert len(small) == 50                         # every tick
    assert 2 <= len([1 for _w, name in saves if name == "big"]) <= 4   # ~1.3 s apart


def seqs_held(h: Core, name: str) -> list:
    return sorted(group(h, name).out)


def test_a_save_queued_for_a_deleted_stream_does_not_bring_its_consumer_back(core):
    """A consumer's save still queued in the Saver when its stream is deleted and made again
    under the same name wrote the old consumer into the new stream (its old cursor with it)."""
    from zeps.journal.consumers import Saver, load_all
    h = core
    saver = h.core.consumer_store = Saver(sync=False)
    setup(h, 3)
    member(h, b"a")
    h.drain()
    saver.flush(10)
    with saver._cond:                               # the Saver's thread waits meanwhile
        ack(h, b"a", [1])
        h.now += 1
        h.tick()                                    # a save of "g" is queued
        h.send(b"admin", c.StreamDelete("s"), c.Attach("s"))     # deleted, made again
        assert [type(m) for m in h.take(b"admin")][-2:] == [c.StreamDeleteOk, c.AttachOk]
    assert saver.flush(10)
    saver.close()
    assert load_all(h.datadir.stream_path("s")) == {}


def test_per_key_order_one_message_of_a_key_out_at_a_time(core):
    h = core
    setup(h, 0, flags=c.CONSUMER_KEY_ORDER)
    member(h, b"a")
    member(h, b"b")
    h.publish("x", "x", "y", "x", "y")              # 1 x, 2 x, 3 y, 4 x, 5 y
    h.drain()
    out = {m: h.delivered(m) for m in (b"a", b"b")}
    firsts = sorted(sum(out.values(), []))
    assert firsts == [(1, "x"), (3, "y")]           # 2, 4 behind 1; 5 behind 3
    holder = next(m for m, v in out.items() if (1, "x") in v)
    ack(h, holder, [1])
    h.drain()
    got = sum((h.delivered(m) for m in (b"a", b"b")), [])
    assert got == [(2, "x")]


def test_acks_of_unknown_foreign_or_unheld_sequences_do_nothing(core):
    h = core
    setup(h, 4)
    member(h, b"a")
    member(h, b"b")
    h.drain()
    held_a, held_b = seqs(h, b"a"), seqs(h, b"b")
    ack(h, b"a", held_b)                            # b's messages: not a's to acknowledge
    ack(h, b"a", [999])                             # never delivered
    assert len(group(h).out) == 4
    assert group(h).counters["bad_acks"] >= 2
    h.send(b"a", c.Nak(held_b[0], 0), c.Progress(held_b[0]))
    assert group(h).out[held_b[0]].member == b"b"
    ack(h, b"b", held_b)
    ack(h, b"a", held_a)
    assert not group(h).out


def test_ack_nak_progress_without_consume_and_malformed_acks_are_refused(core):
    h = core
    setup(h, 1)
    h.send(b"x", c.Attach("s"), c.Ack(pack_ranges([(1, 1)])), c.Nak(1), c.Progress(1))
    got = h.take(b"x")
    assert [type(m) for m in got] == [c.AttachOk, c.Invalid, c.Invalid, c.Invalid]
    assert "without CONSUME" in got[1].reason
    member(h, b"m")
    h.send(b"m", c.Ack(b"\x00" * 15), c.Ack(bytes(16)), c.Ack(pack_ranges([(1, 1)]) * 1025))
    why = [m.reason for m in h.take(b"m") if isinstance(m, c.Invalid)]
    assert len(why) == 3 and "pairs" in why[0] and "0..0" in why[1] and "1024" in why[2]
    h.send(b"m", c.Consume("g"), c.Subscribe("", 0), c.Consume("nope"))
    why = [m.reason for m in h.take(b"m") if isinstance(m, c.Invalid)]
    assert len(why) == 3 and "already joined" in why[0] and "member" in why[1]


def test_consumer_add_is_idempotent_checks_its_settings_and_lists(core):
    h = core
    setup(h, 3, patterns=("k.",))
    h.send(b"admin", c.ConsumerAdd("g", patterns=("k.",)), c.ConsumerAdd("g"),
           c.ConsumerAdd("bad name"), c.ConsumerAdd("r", patterns=("~x",)),
           c.ConsumerAdd("d", dead_letter="s"), c.ConsumerAdd("n", start=c.START_NEW),
           c.ConsumerList())
    got = h.take(b"admin")
    assert got[0] == c.ConsumerAddOk(1)
    assert "other settings" in got[1].reason
    assert all(isinstance(m, c.Invalid) for m in got[2:5])
    assert got[5] == c.ConsumerAddOk(4)
    assert got[6] == c.ConsumerListOk(("g", "n"))
    h.send(b"admin", c.ConsumerInfo("g"))
    import json
    info = json.loads(h.take(b"admin")[0].info)
    assert (info["floor"], info["lag"], info["members"]) == (0, 3, 0)
    h.send(b"admin", c.ConsumerDelete("g"), c.ConsumerList())
    assert h.take(b"admin") == [c.ConsumerDeleteOk(), c.ConsumerListOk(("n",))]


def test_a_member_whose_pipe_is_full_gets_the_message_again_uncounted(core):
    h = core
    setup(h, 3)
    member(h, b"a")
    h.pipe[b"a"] = 1
    h.drain()
    assert seqs(h, b"a") == [1]
    out = group(h).out                              # 2 and 3 came back: held by nobody
    assert [(q, o.deliveries, o.member) for q, o in sorted(out.items())] == \
        [(1, 1, b"a"), (2, 0, None), (3, 0, None)]
    h.pipe.pop(b"a")
    h.now += 5
    h.drain()
    assert seqs(h, b"a") == [2, 3]
    assert all(o.deliveries == 1 for o in group(h).out.values())


def test_a_thousand_members_cost_a_quiet_round_nothing_and_are_bounded(make):
    h = make(max_clients=MAX_MEMBERS + 10)
    setup(h)
    for i in range(1000):
        h.core.receive(b"m%d" % i, [__import__("zeps.protocol").protocol.encode(c.Attach("s"))],
                       h.now)
    for i in range(1000):
        h.send(b"m%d" % i, c.Credit(1 << 16), c.Consume("g"))
        h.take(b"m%d" % i)
    h.publish(*[f"k.{i}" for i in range(100)])
    h.drain()
    got = sum((seqs(h, b"m%d" % i) for i in range(1000)), [])
    assert sorted(got) == list(range(1, 101))
    assert len(group(h).members) == 1000


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ack", "nak", "leave", "tick", "pub", "join"]),
                          st.integers(0, 2)), max_size=40))
def test_union_of_acks_is_exactly_what_was_published(tmp_path_factory, ops):
    """Whatever members do (ack, nak, leave, time passing), draining with a member that
    acknowledges everything ends with every published message acknowledged, and no message
    was held by two members at once."""
    h = Core(tmp_path_factory.mktemp("c"))
    try:
        setup(h, 5, ack_wait_ms=500)
        alive = {}
        published = 5
        n = 0
        for op, k in ops:
            m = b"m%d" % k
            if op == "join" and m not in alive:
                n += 1
                m2 = m + b"-%d" % n
                member(h, m2)
                alive[m] = m2
            elif op == "pub":
                h.publish("k.x")
                published += 1
            elif op == "tick":
                h.now += 0.6
                h.tick()
            elif m in alive:
                ident = alive[m]
                held = [q for q, o in group(h).out.items() if o.member == ident]
                if op == "ack" and held:
                    ack(h, ident, held[:2])
                elif op == "nak" and held:
                    h.send(ident, c.Nak(held[0], 0))
                elif op == "leave":
                    h.core.gone(ident)
                    del alive[m]
            h.drain()
            holders = [o.member for o in group(h).out.values() if o.member is not None]
            assert all(hh in group(h).members for hh in holders)
            for ident in alive.values():
                h.take(ident)
        member(h, b"final")
        for _ in range(50):
            h.now += 1
            h.tick()
            h.drain()
            ack(h, b"final", [q for q, o in group(h).out.items() if o.member == b"final"])
            if not group(h).out and group(h).next > published:
                break
        assert group(h).floor == published and not group(h).out
    finally:
        h.close()


def test_a_consumer_that_ran_dry_gets_what_is_published_later(core):
    h = core
    setup(h, 2)
    member(h, b"a")
    h.drain()
    assert seqs(h, b"a") == [1, 2]
    h.round()                                       # nothing to do: it waits
    h.publish("k.late")
    h.drain()
    assert seqs(h, b"a") == [3]


def test_a_position_below_what_retention_kept_starts_at_the_first_kept_and_says_so(make):
    h = make(segment_bytes=200, retention_bytes=400)
    setup(h, 3)
    member(h, b"a")
    h.drain()
    assert seqs(h, b"a") == [1, 2, 3]
    ack(h, b"a", [1])                               # 2, 3 outstanding
    h.send(b"a", c.Detach())
    for i in range(4, 41):                           # segments roll, the old ones go
        h.publish(f"k.{i}")
    first = h.core.streams["s"].journal.first_seq
    assert first > 4
    ok = member(h, b"b")
    assert ok.floor == first - 1 and ok.skipped == first - 2      # 2 .. first-1 were lost
    assert h.logged("consumer_skipped")[0]["first_kept"] == first
    h.drain()
    assert seqs(h, b"b") == list(range(first, 41))
    assert member(h, b"c").skipped == 0             # said once


def test_a_progress_flood_adds_nothing_to_the_broker_s_timers(core):
    h = core
    setup(h, 1, ack_wait_ms=1000)
    member(h, b"a")
    h.drain()
    assert seqs(h, b"a") == [1]
    for _ in range(1000):
        h.send(b"a", c.Progress(1))
    assert len(group(h).deadlines) == 1             # one entry, whatever it was told
    h.now += 0.9
    h.send(b"a", c.Progress(1))
    h.now += 0.5
    h.tick()
    h.drain()
    assert seqs(h, b"a") == []                      # extended: not given again yet
    h.now += 0.6
    h.tick()
    h.drain()
    assert seqs(h, b"a") == [1]
    assert len(group(h).deadlines) == 1


def test_rights_first_a_client_that_may_not_subscribe_is_refused_every_consumer_command(core):
    """Checked before anything else: a malformed setting, a missing consumer, nothing loaded."""
    from zeps.broker.acl import parse_acl
    h = core
    setup(h, 1)
    acl = ('[clients]\nw = "' + "W" * 40 + '"\n[[allow]]\nclients = ["w"]\npublish = ["s"]\n')
    h.core.set_acl(parse_acl(acl))
    h.core.identify(b"w", "W" * 40)
    h.send(b"w", c.Attach("s"), c.ConsumerAdd("bad name", max_ack_pending=0), c.Consume("g"),
           c.ConsumerInfo("nope"), c.ConsumerList(), c.ConsumerDelete("g"))
    got = h.take(b"w")
    assert got[0] == c.AttachOk()
    assert all(isinstance(r, c.Invalid) and r.reason.startswith("not allowed") for r in got[1:])
    assert len(got) == 6 and "g" in h.core.consumers["s"]
