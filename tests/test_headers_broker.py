"""Message headers end to end (issue 18 item 7), against a real broker process: a message
published with headers reaches a headers subscriber with them, live and replayed after a
broker restart (blocking and asyncio SDK alike), and a plain ZEPS/1 subscriber without them;
headers over the limits get one INVALID each while a calm pair beside is unharmed."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.rawclient import RawClient
from zeps.clients import AsyncClient, Client, Headers
from zeps.protocol import commands as c

FAST = dict(timeout=10.0, heartbeat=30.0)
PUB = dict(FAST, confirms=True)
UUID = uuid.UUID("12345678-1234-5678-1234-567812345678").bytes
#: What a CHP KVSET carries (a UUID and "name=value" properties) and what an Event BUS event
#: carries (producer id, producer timestamp, UUID), as headers.
KVSET = {"uuid": UUID, "ttl": "30"}
EVENT = [("producer", b"svc-a"), ("producer-ts", b"2024-05-01T12:00:00Z"),
         ("uuid", str(uuid.UUID(bytes=UUID)).encode()), ("trace", b"1"), ("trace", b"2")]
WANT_KVSET = (("uuid", UUID), ("ttl", b"30"))
WANT_EVENT = tuple(EVENT)


def _publish(endpoint: str) -> None:
    with Client(endpoint, "s", **PUB) as pub:
        pub.publish("kv.a", b"v1", headers=KVSET)
        pub.publish("plain", b"no headers")
        pub.publish("ev.x", b"{}", headers=EVENT)
        pub.wait_for_confirms(10)


def _read(endpoint: str, n: int, **options):
    with Client(endpoint, "s", **FAST, **options) as sub:
        s = sub.subscribe()
        return [s.next(10) for _ in range(n)]


def _check(msgs, plain_ts: bool = True) -> None:
    assert [(m.sequence, m.key, m.body, m.headers) for m in msgs] == [
        (1, "kv.a", b"v1", WANT_KVSET), (2, "plain", b"no headers", ()),
        (3, "ev.x", b"{}", WANT_EVENT)]
    assert isinstance(msgs[0].headers, Headers) and msgs[0].headers.get("ttl") == b"30"
    assert msgs[2].headers.getall("trace") == [b"1", b"2"]
    assert msgs[0].timestamp and msgs[2].timestamp        # DELIVER-H always carries it
    assert bool(msgs[1].timestamp) is plain_ts


def _plain_zeps1(endpoint: str):
    raw = RawClient(endpoint).attach("s").subscribe("", 0, 1 << 20)
    try:
        return raw.delivers(3)
    finally:
        raw.sock.close()


def test_headers_live_replayed_after_a_restart_and_left_out_for_a_plain_subscriber(broker):
    with Client(broker.endpoint, "s", create=True, **FAST) as live:
        sub = live.subscribe()
        _publish(broker.endpoint)
        _check([sub.next(10) for _ in range(3)])
    plain = _plain_zeps1(broker.endpoint)
    assert plain == [c.Deliver(1, "kv.a", b"v1"), c.Deliver(2, "plain", b"no headers"),
                     c.Deliver(3, "ev.x", b"{}")]
    broker.kill()                                    # confirmed: durable, whatever the kill
    broker.restart()
    _check(_read(broker.endpoint, 3))                # DELIVER-H from the journal
    _check(_read(broker.endpoint, 3, batching=False, timestamps=False), plain_ts=False)
    assert _plain_zeps1(broker.endpoint) == plain
    from zeps.journal import JournalReader, stream_dir_name
    with JournalReader(broker.data_dir / stream_dir_name("s")) as r:
        assert [x.headers for x in r.read_from(1)] == [WANT_KVSET, (), WANT_EVENT]


def test_asyncio_publishes_and_reads_headers(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "s", create=True, **FAST) as sub_client:
            sub = await sub_client.subscribe()
            async with AsyncClient(broker.endpoint, "s", **PUB) as pub:
                await pub.publish("kv.a", b"v1", headers=KVSET)
                await pub.publish("plain", b"no headers")
                await pub.publish("ev.x", b"{}", headers=EVENT)
                await pub.wait_for_confirms(10)
            return [await sub.next(10) for _ in range(3)]

    _check(asyncio.run(asyncio.wait_for(main(), 60)))


@pytest.mark.parametrize("size, count", [(5, 256), (64 * 1024 + 1, 1), (2**32 - 1, 0xFFFF)],
                         ids=["256 headers", "64 KiB + 1", "2^32-1 bytes"])
def test_headers_over_the_limits_get_one_invalid_each_and_a_calm_pair_is_unharmed(
        broker, size, count):
    with Client(broker.endpoint, "s", create=True, **FAST) as calm_sub, \
            Client(broker.endpoint, "s", **PUB) as calm_pub:
        sub = calm_sub.subscribe()
        hostile = RawClient(broker.endpoint).attach("s")
        try:
            head = b"\xaa\xa5\x48" + size.to_bytes(4, "big") + count.to_bytes(2, "big")
            for i in range(3):
                hostile.send_raw(head + b"\x01a\x00\x00" + b"\x01k\x00\x00\x00\x00")
                calm_pub.publish("calm", b"%d" % i, headers={"n": b"%d" % i})
            got = [hostile.recv(10) for _ in range(3)]
            assert [type(m) for m in got] == [c.Invalid] * 3, got
            assert all("over the limit" in m.reason for m in got), got
            hostile.send(c.Ping())
            hostile.expect(c.PingOk)                  # one answer each, nothing more
            calm_pub.wait_for_confirms(10)
            msgs = [sub.next(10) for _ in range(3)]
            assert [(m.body, m.headers) for m in msgs] == [
                (b"%d" % i, (("n", b"%d" % i),)) for i in range(3)]
        finally:
            hostile.sock.close()


def test_publish_headers_that_cannot_be_sent_raise_before_anything_is_sent(broker):
    with Client(broker.endpoint, "s", **PUB) as pub:
        with pytest.raises(ValueError, match="over the limit of 255"):
            pub.publish("k", b"", headers=[("n", b"")] * 256)
        with pytest.raises(ValueError, match="1 to 255"):
            pub.publish("k", b"", headers={"": b"x"})
        with pytest.raises(TypeError):
            pub.publish("k", b"", headers={"n": 5})
        pub.publish("k", b"ok", headers={})           # empty: a plain PUBLISH
        pub.wait_for_confirms(10)
        assert pub.info().last == 1
