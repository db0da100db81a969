"""KVMap / AsyncKVMap (issue 18 item 4): the pure state (tombstones, order, TTLs on an injected
clock) and the maps against a real broker: snapshot then live updates, read-your-writes,
watch, a ttl header every map honours, two maps agreeing, and a map that goes on after the
broker is killed and restarted (resumed from its last sequence + 1: nothing missed, nothing
twice)."""
from __future__ import annotations

import asyncio

import pytest

from zeps.clients import Client
from zeps.clients.kv import AsyncKVMap, Change, KVMap, KVState
from zeps.clients.message import Message
from zeps.protocol.headers import Headers

NS = 1_000_000_000


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def msg(seq, key, body, ts=1000 * NS, ttl=None):
    headers = Headers((("ttl", ttl.encode()),)) if ttl else Headers()
    return Message(seq, key, body, ts, "kv", headers)


def test_state_applies_in_order_with_tombstones_and_prefix():
    s = KVState("a.", Clock())
    s.load([msg(1, "a.1", b"x"), msg(3, "a.2", b"y")], 3)
    assert s.apply(msg(3, "a.1", b"dup")) is None               # applied already
    assert s.apply(msg(4, "a.1", b"z")) == Change("a.1", b"z", 4)
    assert s.apply(msg(5, "b.1", b"other")) is None and s.seq == 5
    assert s.apply(msg(6, "a.2", b"")) == Change("a.2", None, 6, True)
    assert {k: v[0] for k, v in s.values.items()} == {"a.1": b"z"}


def test_state_ttl_from_the_message_timestamp_on_the_injected_clock():
    clock = Clock(1000.0)
    s = KVState("", clock)
    s.apply(msg(1, "k", b"v", ts=1000 * NS, ttl="30"))
    s.apply(msg(2, "bad", b"v", ttl="soon"))                      # not a number: no ttl
    clock.t = 1029.9
    assert s.get("k") == b"v"
    clock.t = 1030.0
    assert s.get("k") is None and "k" not in s.values
    assert s.get("bad") == b"v"
    s.apply(msg(3, "k", b"again", ts=1100 * NS, ttl="5"))
    s.apply(msg(4, "k", b"kept", ts=1101 * NS))                   # a newer value without ttl
    clock.t = 2000.0
    assert s.get("k") == b"kept" and s.expire() == []


def test_map_snapshot_then_live_read_your_writes_and_watch(start_broker):
    b = start_broker(None, "--key-index")
    with Client(b.endpoint, "kv", confirms=True) as pub:
        pub.publish("cfg.a", b"1")
        pub.publish("cfg.b", b"2")
        pub.publish("cfg.b", b"")
        pub.publish("other", b"x")
        pub.wait_for_confirms(10)
    with KVMap(b.endpoint, "kv", "cfg.") as kv, KVMap(b.endpoint, "kv", "cfg.") as other:
        assert kv.to_dict() == {"cfg.a": b"1"} and kv.seq == 4
        seq = kv.put("cfg.c", "3")
        assert seq == 5 and kv.get("cfg.c") == b"3"               # read your writes
        kv.delete("cfg.a")
        assert "cfg.a" not in kv and kv.keys() == ["cfg.c"]
        with pytest.raises(KeyError):
            kv.put("nope", b"x")
        changes = list(other.watch(timeout=5))
        assert [(c.key, c.value, c.deleted) for c in changes] == [("cfg.c", b"3", False),
                                                                   ("cfg.a", None, True)]
        assert other.to_dict() == kv.to_dict()


def test_ttl_header_is_published_and_honoured_by_every_map(start_broker):
    b = start_broker(None, "--key-index")
    clock = Clock(0.0)
    with KVMap(b.endpoint, "kv", clock=clock) as kv:
        kv.put("session", b"s", ttl=30)
        clock.t = kv._state.values["session"][2] - 1
        assert kv.get("session") == b"s"
        with Client(b.endpoint, "kv") as c:
            m = c.subscribe("").next(timeout=10)
            assert m.headers.get("ttl") == b"30"
        late = KVMap(b.endpoint, "kv", clock=clock)               # from the snapshot
        assert late.get("session") == b"s"
        clock.t += 1
        assert kv.get("session") is None and late.get("session") is None
        late.close()


def test_a_map_resumes_across_a_broker_restart(start_broker):
    b = start_broker(None, "--key-index")
    with KVMap(b.endpoint, "kv", timeout=30) as kv, Client(b.endpoint, "kv",
                                                             confirms=True) as pub:
        kv.put("a", b"1")
        b.kill()
        b.restart()
        pub.publish("b", b"2")
        pub.publish("a", b"")
        last = pub.publish("c", b"3").result(30)
        got = []
        for ch in kv.watch(timeout=30):
            got.append((ch.key, ch.sequence))
            if ch.sequence == last:
                break
        assert got == [("b", 2), ("a", 3), ("c", 4)]
        assert kv.to_dict() == {"b": b"2", "c": b"3"}


def test_async_map(start_broker):
    b = start_broker(None, "--key-index")

    async def main():
        kv = await AsyncKVMap.open(b.endpoint, "kv")
        async with kv:
            await kv.put("x", b"1", ttl=60)
            await kv.put("y", b"2")
            await kv.delete("x")
            other = await AsyncKVMap.open(b.endpoint, "kv")
            got = await other.items(), await kv.get("y")
            await other.close()
            return got

    items, y = asyncio.run(main())
    assert items == [("y", b"2")] and y == b"2"
