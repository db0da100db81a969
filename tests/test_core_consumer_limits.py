"""The limits on durable consumers, each refused with INVALID "limit: ..." naming it (in-process,
tests/core_harness.py): consumers of one stream, members of one consumer, and durable consumers
held by the broker in all (``max_total_consumers``: each costs the broker memory for as long as
its stream is not deleted, and any client that may subscribe adds them)."""
from __future__ import annotations

from tests.core_harness import Core, make_fixture  # noqa: F401 (fixtures)
from zeps.broker import consuming
from zeps.protocol import commands as c

FAST_ADMIN = dict(admin_rate=1e9, admin_burst=10**6)     # CONSUMER-ADD is paid from it


def add(h: Core, stream: str, name: str):
    """CONSUMER-ADD ``name`` on ``stream``: its answer."""
    h.send(b"admin-" + stream.encode(), c.Attach(stream), c.ConsumerAdd(name))
    return h.take(b"admin-" + stream.encode())[-1]


def limit_of(reply) -> str:
    assert isinstance(reply, c.Invalid), reply
    assert reply.reason.startswith("limit: "), reply.reason
    return reply.reason


def test_a_streams_consumers_and_a_consumers_members_are_refused_beyond_their_limits(
        make, monkeypatch):
    monkeypatch.setattr(consuming, "MAX_CONSUMERS", 2)
    monkeypatch.setattr(consuming, "MAX_MEMBERS", 2)
    h = make(**FAST_ADMIN)
    assert isinstance(add(h, "s", "g1"), c.ConsumerAddOk)
    assert isinstance(add(h, "s", "g2"), c.ConsumerAddOk)
    assert limit_of(add(h, "s", "g3")) == "limit: a stream has at most 2 durable consumers"
    assert isinstance(add(h, "other", "g3"), c.ConsumerAddOk)     # per stream
    for m in (b"m1", b"m2", b"m3"):
        h.send(m, c.Attach("s"), c.Credit(1 << 20), c.Consume("g1"))
    assert [type(r) for r in h.take(b"m2")] == [c.AttachOk, c.ConsumeOk]
    assert limit_of(h.take(b"m3")[-1]) == "limit: a durable consumer has at most 2 members"
    assert h.logged("internal_error") == []


def test_the_broker_holds_at_most_max_total_consumers(make, tmp_path):
    h = make(max_total_consumers=3, **FAST_ADMIN)
    assert all(isinstance(add(h, s, n), c.ConsumerAddOk)
               for s, n in (("a", "g1"), ("a", "g2"), ("b", "g1")))
    full = "limit: the broker holds at most 3 durable consumers"
    assert limit_of(add(h, "b", "g2")) == full
    assert isinstance(add(h, "a", "g1"), c.ConsumerAddOk), "an existing one is not added"
    h.send(b"admin-b", c.ConsumerDelete("g1"))                    # a deletion frees its place
    assert isinstance(add(h, "b", "g2"), c.ConsumerAddOk)
    assert limit_of(add(h, "c", "g1")) == full
    h.send(b"admin-c", c.StreamDelete("a"))                       # so do a stream's, deleted
    assert h.take(b"admin-c")[-1] == c.StreamDeleteOk()
    assert isinstance(add(h, "c", "g1"), c.ConsumerAddOk)
    assert isinstance(add(h, "c", "g2"), c.ConsumerAddOk)
    assert limit_of(add(h, "c", "g3")) == full
    h.close()
    # Stored consumers count once their stream's are loaded (on its first consumer command).
    again = Core(tmp_path / "data0", max_total_consumers=3, **FAST_ADMIN)
    try:
        assert isinstance(add(again, "b", "g3"), c.ConsumerAddOk)     # b's one loaded: 2
        assert isinstance(add(again, "d", "g1"), c.ConsumerAddOk)     # 3
        again.send(b"admin-c", c.Attach("c"), c.ConsumerList())       # c's two loaded: 5
        assert again.take(b"admin-c")[-1] == c.ConsumerListOk(("g1", "g2"))
        assert limit_of(add(again, "d", "g2")) == full
    finally:
        again.close()
