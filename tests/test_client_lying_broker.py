"""The SDK against a broker that lies (tests/fakebroker.py: a raw ROUTER speaking the codec).

* A frame over the client's bound (its sockets' ``ZMQ_MAXMSGSIZE``: the credit window plus
  slack, or ``max_frame``) is never read: ZeroMQ drops the connection, and the application
  hears :class:`~zeps.clients.errors.FrameTooLarge` (it used to read whatever came: a 256 MiB
  frame took a client to ~686 MiB before a timeout). Every socket has the bound, reconnects'
  too; an honest broker is never cut off (a delivery as large as the window comes).
* A DELIVER at or below the last one received is dropped, counted, and earns no credit back
  (it used to be granted back, so a broker repeating itself was paid for it for ever).
"""
from __future__ import annotations

import asyncio

import pytest
import zmq

from tests.fakebroker import MB, FakeBroker
from tests.measure import wait_for
from zeps.clients import AsyncClient, Client
from zeps.clients.bounds import FRAME_SLACK, frame_bound
from zeps.clients.errors import FrameTooLarge
from zeps.clients.window import largest_cost
from zeps.protocol import commands as c
from zeps.protocol.deliver import deliver_cost, encode_deliver


def _deliver(seq: int, cost: int, key: bytes = b"k") -> bytes:
    """A DELIVER of sequence ``seq`` whose credit cost is ``cost``."""
    return encode_deliver(seq, key, b"x" * (cost - deliver_cost(len(key), 0)))


def test_a_frame_over_the_bound_is_never_read_and_says_so_on_every_connection():
    window = 2 * MB
    with FakeBroker(limits=(MB // 2, 64 * MB)) as b, \
            Client(b.endpoint, "s", credit_window=window, timeout=5, heartbeat=30) as client:
        sub = client.subscribe("", from_seq=0)
        assert client._conn.sock.getsockopt(zmq.MAXMSGSIZE) == frame_bound(window)
        b.send(b"\xaa\xa5" + b"\0" * (frame_bound(window) - 1))        # one byte too many
        with pytest.raises(FrameTooLarge) as e:
            sub.next(timeout=10)
        assert str(frame_bound(window)) in str(e.value) and b.endpoint in str(e.value)
        # The client goes on, on a new socket with the same bound: the broker lies again.
        b.send(_deliver(1, 64 * MB), after_credits=2)
        with pytest.raises(FrameTooLarge):
            sub.next(timeout=10)
        # An honest delivery as large as the window comes whole.
        b.send(_deliver(1, window), after_credits=3)
        msg = sub.next(timeout=10)
        assert msg.sequence == 1 and deliver_cost(1, len(msg.body)) == window
        assert len(b.idents) == 3


def test_the_asyncio_client_hears_of_a_frame_over_the_bound_too():
    async def main():
        with FakeBroker() as b:
            client = AsyncClient(b.endpoint, "s", timeout=5, heartbeat=30)
            await client.connect()
            try:
                sub = await client.subscribe("", from_seq=0)
                b.send(_deliver(1, 256 * MB))
                with pytest.raises(FrameTooLarge):
                    await sub.next(timeout=10)
            finally:
                await client.close()
    asyncio.run(main())


def test_a_window_grown_by_limits_ok_gets_a_socket_that_reads_its_largest_message():
    """LIMITS-OK grows a 1 MiB window to fit 4 MiB messages: the credit is granted on a new
    connection, whose bound fits the grown window, never on the old one."""
    with FakeBroker(limits=(4 * MB, 64 * MB)) as b, \
            Client(b.endpoint, "s", credit_window=MB, timeout=5, heartbeat=30) as client:
        sub = client.subscribe("", from_seq=0)
        grown = 2 * largest_cost(4 * MB)
        wait_for(lambda: sub.poll(0.05), lambda _: b.credits, 10)
        assert b.credits == [grown] and len(b.idents) == 2
        b.send(_deliver(1, deliver_cost(255, 4 * MB), key=b"k" * 255))
        assert len(sub.next(timeout=10).body) == 4 * MB


def test_max_frame_caps_the_window_and_is_the_bound():
    with FakeBroker(limits=(16 * MB, 64 * MB)) as b, \
            Client(b.endpoint, "s", max_frame=4 * MB, timeout=5, heartbeat=30) as client:
        sub = client.subscribe("", from_seq=0)
        wait_for(lambda: sub.poll(0.05), lambda _: b.credits, 10)
        assert b.credits == [4 * MB - FRAME_SLACK] and len(b.idents) == 1
        assert client._conn.sock.getsockopt(zmq.MAXMSGSIZE) == 4 * MB
    with pytest.raises(ValueError, match="max_frame"):
        Client("tcp://127.0.0.1:1", "s", max_frame=1000)


def test_duplicates_are_dropped_counted_and_earn_no_credit():
    """Window 10,000 bytes, messages of 1,000: the broker repeats 1 and 2 twice. The
    application gets 1, 2, 3 once each and the repeats earn nothing back: the only CREDIT the
    broker hears (before the flush's PING) is the first grant."""
    with FakeBroker(limits=None) as b, \
            Client(b.endpoint, "s", credit_window=10_000, timeout=5, heartbeat=30) as client:
        sub = client.subscribe("", from_seq=0)
        for seq in (1, 2, 1, 2, 1, 2, 3):
            b.send(_deliver(seq, 1000))
        assert [sub.next(timeout=10).sequence for _ in range(3)] == [1, 2, 3]
        client.flush(timeout=10)
        assert b.credits == [10_000]
        assert client.duplicates == 4
        assert sub.poll(0) is None


def test_duplicates_worth_half_the_window_make_the_client_start_over():
    """Repeats that used half the window (the top-up) end the peering: a new connection
    re-subscribes after the last message handed, with the whole window again."""
    with FakeBroker(limits=None) as b, \
            Client(b.endpoint, "s", credit_window=10_000, timeout=5, heartbeat=30) as client:
        sub = client.subscribe("", from_seq=0)
        b.send(_deliver(1, 1000))
        assert sub.next(timeout=10).sequence == 1
        for _ in range(5):
            b.send(_deliver(1, 1000))
        wait_for(lambda: sub.poll(0.05), lambda _: len(b.idents) == 2, 10)
        assert b.wait(lambda b: len(b.credits) == 2)
        assert b.credits == [10_000, 10_000] and client.duplicates == 5
        assert [cmd for _, cmd in b.heard if isinstance(cmd, c.Subscribe)][-1].latest == 1
