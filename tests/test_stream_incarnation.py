"""A stream deleted and created again is another stream (issue 15, finding 9).

Each stream has an *incarnation* (random, never 0), kept in its directory from the moment it is
made, by STREAM-CREATE or by a first ATTACH. A client learns it with STREAM-ID after ATTACH and,
when it attaches again, says STREAM-EXPECT first: that ATTACH then joins only that incarnation
and never creates the stream. The SDK does so after every reconnect, so a publisher whose stream
was deleted does not create it again and resolve its receipts against the new one (sequences
from 1 again), and a subscriber does not wait silently at a position the new stream will take
long to reach: both raise :class:`StreamDeleted` or :class:`StreamRecreated`.

The pure core first (tests/core_harness.py), then the real broker process with both SDK clients.
"""
from __future__ import annotations

import asyncio
import time

import pytest

from zeps.clients import AsyncClient, Client, admin, list_streams
from zeps.clients.errors import ConnectionLost, StreamDeleted, StreamRecreated
from zeps.clients.peering import FAILED, RECONNECT_SPACING
from zeps.journal import DataDir
from zeps.journal.settings import INCARNATION_FILE, StreamSettings, read_incarnation
from zeps.protocol import commands as c
from zeps.protocol.reasons import NO_STREAM, NOT_ATTACHED, STREAM_RECREATED

from .measure import wait_for
from .test_client_peering import feed, peering, publish, sent
from .core_harness import core_fixture, make_fixture  # noqa: F401  (the pure core's fixtures)


# ---------------------------------------------------------------- the journal: where it is kept

def test_every_stream_has_an_incarnation_kept_with_it(tmp_path):
    d = DataDir(tmp_path / "d")
    try:
        d.create("made", StreamSettings(max_message=100))       # STREAM-CREATE
        d.journal("attached")                                   # a first ATTACH
        made, attached = d.incarnation("made"), d.incarnation("attached")
        assert made and attached and made != attached
        for name, inc in (("made", made), ("attached", attached)):
            assert read_incarnation(d.stream_path(name)) == inc
        d.purge("made", 0)                                      # rewrites SETTINGS.json
        assert d.incarnation("made") == made
    finally:
        d.close()
    d = DataDir(tmp_path / "d")                                 # kept across a restart
    try:
        assert d.incarnation("made") == made and d.incarnation("attached") == attached
        d.delete("made")
        d.create("made", StreamSettings(max_message=100))
        d.delete("attached")
        d.journal("attached")
        assert d.incarnation("made") not in (0, made)           # created again: another one
        assert d.incarnation("attached") not in (0, attached)
    finally:
        d.close()


def test_a_stream_from_before_incarnations_gets_one_when_opened(tmp_path):
    d = DataDir(tmp_path / "d")
    try:
        d.journal("old")
        path = d.stream_path("old")
        d.release("old")
        (tmp_path / "d" / path.rsplit("/", 1)[1] / INCARNATION_FILE).unlink()
        first = d.incarnation("old")                            # chosen now, and kept
        d.release("old")
        assert first and d.incarnation("old") == first
    finally:
        d.close()


# ---------------------------------------------------------------- the core: STREAM-ID, -EXPECT

def _ask(core, ident, *cmds):
    core.send(ident, *cmds)
    return core.take(ident)


def test_stream_id_and_expect(core):
    [ok, sid] = _ask(core, b"a", c.Attach("s"), c.StreamId())
    assert isinstance(ok, c.AttachOk) and isinstance(sid, c.StreamIdOk) and sid.incarnation
    inc = sid.incarnation
    [r] = _ask(core, b"x", c.StreamId())                        # needs ATTACH
    assert isinstance(r, c.Invalid) and r.reason.startswith(NOT_ATTACHED), r
    # the same incarnation: attached as a plain ATTACH
    assert [type(m) for m in _ask(core, b"b", c.StreamExpect(inc), c.Attach("s"),
                                  c.StreamId())] == [c.StreamExpectOk, c.AttachOk, c.StreamIdOk]
    # the expectation holds for one ATTACH only; 0 is any incarnation, and creates nothing
    assert [type(m) for m in _ask(core, b"b", c.Detach(), c.Attach("s"), c.Detach(),
                                  c.StreamExpect(0), c.Attach("t"), c.StreamExpect(0),
                                  c.Attach("s"))] == \
        [c.DetachOk, c.AttachOk, c.DetachOk, c.StreamExpectOk, c.Invalid, c.StreamExpectOk,
         c.AttachOk]
    assert "t" not in core.core.catalogue
    # another incarnation: refused, not attached
    [ok, r] = _ask(core, b"c", c.StreamExpect(inc ^ 1), c.Attach("s"))
    assert isinstance(r, c.Invalid) and r.reason.startswith(STREAM_RECREATED), r
    assert f"{inc:016x}" in r.reason and core.core.sessions[b"c"].stream is None
    # the stream is deleted under an attached client: DETACH, and its re-ATTACH with the
    # incarnation it knew is refused and creates nothing
    [r] = _ask(core, b"admin", c.StreamDelete("s"))
    assert isinstance(r, c.StreamDeleteOk)
    assert [type(m) for m in core.take(b"a")] == [c.Detach]
    [ok, r] = _ask(core, b"a2", c.StreamExpect(inc), c.Attach("s"))
    assert isinstance(r, c.Invalid) and r.reason.startswith(NO_STREAM), r
    assert "s" not in core.core.catalogue and not core.datadir.has_stream("s")
    # created again (a plain ATTACH may): the old incarnation is refused as recreated
    [ok, sid] = _ask(core, b"d", c.Attach("s"), c.StreamId())
    assert sid.incarnation not in (0, inc)
    [ok, r] = _ask(core, b"a3", c.StreamExpect(inc), c.Attach("s"))
    assert isinstance(r, c.Invalid) and r.reason.startswith(STREAM_RECREATED), r


def test_expect_never_creates_even_with_auto_create_off(make):
    core = make(auto_create=False)
    [ok, r] = _ask(core, b"a", c.StreamExpect(12345), c.Attach("nope"))
    assert isinstance(r, c.Invalid) and r.reason.startswith(NO_STREAM), r
    assert not core.datadir.has_stream("nope")


# ---------------------------------------------------------------- the SDK's peering (pure)

def test_peering_learns_the_incarnation_and_reattaches_only_to_it():
    p = peering(confirms=True, incarnations=True)
    assert sent(p) == [c.StreamExpect(0), c.Attach("s")]   # a reader's: never creates
    feed(p, c.StreamExpectOk())
    feed(p, c.AttachOk())
    assert sent(p)[0] == c.StreamId()                   # first, before anything can change
    feed(p, c.StreamIdOk(0xABC))
    assert p.incarnation == 0xABC
    r = publish(p)
    p.connection_lost("the broker sent DETACH")         # e.g. the stream was deleted
    p.reconnect(RECONNECT_SPACING)
    assert sent(p) == [c.StreamExpect(0xABC), c.Attach("s")]
    feed(p, c.StreamExpectOk())
    feed(p, c.Invalid(f"{NO_STREAM}'s' (deleted since this client attached to it)"))
    assert p.state is FAILED and not p.tracker.unconfirmed
    assert isinstance(r.exception(), StreamDeleted) and r.exception().incarnation == 0xABC
    with pytest.raises(StreamDeleted):
        p.check()


def test_peering_fails_as_recreated_and_a_plain_broker_changes_nothing():
    p = peering(incarnations=True)
    sent(p)
    feed(p, c.StreamExpectOk())
    feed(p, c.AttachOk())
    feed(p, c.StreamIdOk(7))
    p.connection_lost("gone")
    p.reconnect(RECONNECT_SPACING)
    assert sent(p)[0] == c.StreamExpect(7)
    feed(p, c.StreamExpectOk())
    feed(p, c.Invalid(f"{STREAM_RECREATED}'s' was deleted and created again"))
    with pytest.raises(StreamRecreated):
        p.check()
    # a broker without STREAM-ID: the client re-attaches as before
    p = peering(incarnations=True)
    sent(p)
    feed(p, c.Invalid("unknown command 68"))                   # nor STREAM-EXPECT
    feed(p, c.AttachOk())
    feed(p, c.Invalid("unknown command 66"))
    assert p.incarnation == 0 and p.attached
    p.connection_lost("gone")
    p.reconnect(RECONNECT_SPACING)
    assert sent(p) == [c.Attach("s")]


# ---------------------------------------------------------------- the SDK against the broker

def _wait_for(what, cond, timeout=20.0):
    assert wait_for(cond, bool, timeout, interval=0.01), f"{what}: not within {timeout}s"


@pytest.mark.parametrize("idempotent", [True, False])
def test_sdk_clients_hear_their_stream_was_deleted(broker, idempotent):
    ep = broker.endpoint
    pub = Client(ep, "orders", confirms=True, timeout=5, idempotent=idempotent)
    sub = Client(ep, "orders", timeout=5)
    try:
        first = [pub.publish("k", b"%d" % i) for i in range(200)]
        assert pub.wait_for_confirms() == 200
        s = sub.subscribe("", from_seq=1)
        assert [s.next(timeout=10).sequence for _ in range(200)] == list(range(1, 201))
        admin.delete_stream(ep, "orders")
        # The publisher goes on publishing until it is told; no receipt it has resolves
        # against a new stream.
        later = []
        deadline = time.monotonic() + 20
        with pytest.raises(StreamDeleted) as info:
            while True:
                assert time.monotonic() < deadline, "the publisher was never told"
                later.append(pub.publish("k", b"after"))
        assert "orders" in str(info.value) and isinstance(info.value, ConnectionLost)
        for r in later:
            assert r.done() and isinstance(r.exception(), StreamDeleted), r.sequence
        assert [r.result(0) for r in first] == list(range(1, 201))
        with pytest.raises(StreamDeleted):                     # and it stays told
            pub.publish("k", b"again")
        # The subscriber at sequence 200 is told too, instead of waiting for ever.
        with pytest.raises(StreamDeleted):
            s.next(timeout=20)
        assert "orders" not in list_streams(ep)                # nobody made it again
    finally:
        pub.close(timeout=1)
        sub.close(timeout=1)


def test_sdk_subscriber_hears_its_stream_was_created_again_while_the_broker_was_down(broker):
    ep = broker.endpoint
    with Client(ep, "orders", confirms=True, timeout=5) as pub:
        for i in range(50):
            pub.publish("k", b"%d" % i)
        pub.wait_for_confirms()
    sub = Client(ep, "orders", timeout=5, heartbeat=0.5)
    try:
        s = sub.subscribe("", from_seq=1)
        assert s.next(timeout=10).sequence == 1
        broker.stop()
        d = DataDir(broker.data_dir)           # offline, as an operator would
        try:
            d.delete("orders")
            d.create("orders", StreamSettings())
        finally:
            d.close()
        broker.restart()
        with pytest.raises(StreamRecreated) as info:
            while True:                        # what it received before, then the error
                s.next(timeout=30)
        assert "orders" in str(info.value)
    finally:
        sub.close(timeout=1)


def test_async_clients_hear_their_stream_was_deleted(broker):
    ep = broker.endpoint

    async def main():
        async with AsyncClient(ep, "orders", confirms=True, timeout=5) as pub, \
                AsyncClient(ep, "orders", timeout=5) as sub:
            receipts = [await pub.publish("k", b"%d" % i) for i in range(100)]
            assert await pub.wait_for_confirms() == 100
            s = await sub.subscribe("", from_seq=1)
            assert [(await s.next(timeout=10)).sequence for _ in range(100)] == \
                list(range(1, 101))
            await asyncio.to_thread(admin.delete_stream, ep, "orders")
            later = []
            deadline = time.monotonic() + 20
            with pytest.raises(StreamDeleted):
                while True:
                    assert time.monotonic() < deadline, "the publisher was never told"
                    later.append(await pub.publish("k", b"after"))
                    await asyncio.sleep(0)
            for r in later:
                with pytest.raises(StreamDeleted):
                    await r
            assert [await r for r in receipts] == list(range(1, 101))
            with pytest.raises(StreamDeleted):
                await s.next(timeout=20)
        return await asyncio.to_thread(list_streams, ep)

    assert "orders" not in asyncio.run(main())
