"""client.snapshot() / iter_snapshot() against a real broker (issue 18 item 4): the entries are
every live key's latest message, ``seq`` is what a subscription resumes from with no gap and no
duplicate, a stream without the index is refused with the broker's reason, a missing stream is
NoStream (a reader never creates one), and asyncio does the same."""
from __future__ import annotations

import asyncio

import pytest

from zeps.clients import AsyncClient, Client
from zeps.clients.errors import InvalidError, NoStream


def fill(endpoint, stream="kv"):
    with Client(endpoint, stream, confirms=True) as pub:
        for i in range(50):
            pub.publish(f"k.{i:02}", f"v{i}".encode())
        pub.publish("k.01", b"new")
        pub.publish("k.02", b"")                       # deleted
        pub.publish("other", b"o")
        pub.wait_for_confirms(10)


def test_snapshot_then_subscribe_from_its_seq(start_broker):
    b = start_broker(None, "--key-index")
    fill(b.endpoint)
    with Client(b.endpoint, "kv", confirms=True) as c:
        snap = c.snapshot("k.")
        got = snap.as_dict()
        assert len(snap) == 49 and snap.seq == 53
        assert got["k.01"] == b"new" and "k.02" not in got and "other" not in got
        assert [m.key for m in snap] == sorted(got)
        c.publish("k.03", b"after")
        c.wait_for_confirms(10)
        sub = c.subscribe("k.", from_seq=snap.seq + 1)
        m = sub.next(timeout=10)
        assert (m.sequence, m.key, m.body) == (54, "k.03", b"after")
        it = c.iter_snapshot(["other", "k.0"])
        keys = [m.key for m in it]
        assert keys == [f"k.0{i}" for i in (0, 1, 3, 4, 5, 6, 7, 8, 9)] + ["other"]
        assert it.seq == 54


def test_refusals(start_broker):
    b = start_broker()
    fill(b.endpoint, "plain")
    with Client(b.endpoint, "plain") as c:
        with pytest.raises(InvalidError, match="no key index"):
            c.snapshot()
    from zeps.clients.snapshot_io import read_snapshot
    with pytest.raises(NoStream):
        read_snapshot(b.endpoint, "missing", timeout=10)
    with Client(b.endpoint, "plain") as c:
        assert "missing" not in c.list_streams()


def test_asyncio(start_broker):
    b = start_broker(None, "--key-index")
    fill(b.endpoint)

    async def main():
        async with AsyncClient(b.endpoint, "kv") as c:
            snap = await c.snapshot("")
            keys = [m.key async for m in c.iter_snapshot("other")]
            return snap, keys

    snap, keys = asyncio.run(main())
    assert len(snap) == 50 and snap.seq == 53 and keys == ["other"]


@pytest.mark.parametrize("max_message, sizes", [
    (1 << 20, (540_000, 1_000_000)),          # half the front end's window, then the largest
    (4 << 20, (2_000_000, 3_500_000))])       # the SDK's window (4 MiB) under two large ones
def test_large_entries_of_any_size_do_not_stall_a_snapshot(start_broker, max_message, sizes):
    """Entries up to the broker's --max-message, the first too small to have its credit granted
    back by the half-window rule and the second larger than what the broker then held: the
    snapshot (blocking, and a KVMap's) waited for an entry the broker waited for credit to send,
    until the timeout."""
    from zeps.clients import KVMap
    b = start_broker(None, "--key-index", "--max-message", str(max_message))
    with Client(b.endpoint, "big", confirms=True, create=True) as c:
        for i, n in enumerate(sizes):
            c.publish(f"k{i}", bytes([65 + i]) * n)
        c.wait_for_confirms(30)
        snap = c.snapshot(timeout=10)
        assert [(m.key, len(m.body)) for m in snap] == [(f"k{i}", n) for i, n in enumerate(sizes)]
        assert snap.seq == len(sizes)
    with KVMap(b.endpoint, "big", timeout=10) as kv:
        assert len(kv.get("k1")) == sizes[1]
