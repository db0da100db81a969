"""The asyncio client (zeps.clients.AsyncClient) against a real broker process on 127.0.0.1.

Each test runs its coroutine with asyncio.run (no plugin needed). Waits are on conditions with
deadlines: a message arriving, a receipt resolving, a task being inside a call."""
from __future__ import annotations

import asyncio

import pytest

import zmq
import zmq.asyncio

from tests.ports import fixed_ports
from zeps.clients import (AsyncClient, AsyncReceipt, Client, ClientClosed, InvalidError,
                          ZepsError, ZepsTimeout)
from zeps.clients.aio import list_streams
from zeps.protocol import commands as c
from zeps.protocol.batch import encode_entries
from zeps.protocol.codec import decode, encode, publish_frame_limit
from zeps.protocol.reasons import NOT_ATTACHED, PUBLISH_REJECTED

FAST = {"timeout": 5.0, "heartbeat": 1.0}


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def read(sub, n, timeout=10.0):
    """n messages (each within timeout), checking that sequences strictly increase."""
    out = []
    for _ in range(n):
        m = await sub.next(timeout)
        assert not out or m.sequence > out[-1].sequence
        out.append(m)
    return out


async def eventually(cond, timeout=10.0):
    """Wait (yielding to the loop) until cond() holds; fail after timeout."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached in time"
        await asyncio.sleep(0.005)


# ------------------------------------------------------------------ basics

def test_publish_confirm_and_history_then_live(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "orders", confirms=True, **FAST) as pub:
            receipts = [await pub.publish("eu.fr", b"m%d" % i) for i in range(5)]
            receipts.append(await pub.publish("eu.de", "text é"))
            assert await pub.publish_batch([("us.ny", b"b")] * 4) == 4
            assert await pub.wait_for_confirms() == 10
            # one publisher on the stream: every receipt knows its exact sequence
            assert [await r for r in receipts] == [1, 2, 3, 4, 5, 6]
            assert all(isinstance(r, AsyncReceipt) and r.done() for r in receipts)
        async with AsyncClient(broker.endpoint, "orders", **FAST) as sub_client:
            got = []
            async for msg in sub_client.subscribe("eu."):      # history first...
                got.append(msg)
                if len(got) == 6:
                    break
            with Client(broker.endpoint, "orders", **FAST) as other:     # ...then live
                other.publish("eu.it", b"live")
            sub = await sub_client.subscribe("eu.")              # the same subscription
            live = await sub.next(10)
        assert [m.sequence for m in got] == [1, 2, 3, 4, 5, 6]
        assert got[5].text == "text é" and got[0].timestamp > 0
        assert (live.sequence, live.key, live.body) == (11, "eu.it", b"live")
        assert sub.position == 11

    run(main())


def test_same_messages_as_the_blocking_client(broker):
    with Client(broker.endpoint, "s", confirms=True, **FAST) as c:
        c.publish_batch((f"k{i % 3}", b"%d" % i) for i in range(50))
        c.wait_for_confirms()
    with Client(broker.endpoint, "s", **FAST) as c:
        sub = c.subscribe(["k1", "k2"], from_seq=10)
        blocking = [sub.next(10) for _ in range(27)]

    async def main():
        async with AsyncClient(broker.endpoint, "s", **FAST) as c:
            return await read(await c.subscribe(["k1", "k2"], from_seq=10), 27)

    assert run(main()) == blocking


def test_from_time_live_info_and_list_streams(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "t", confirms=True, **FAST) as c:
            for i in range(3):
                await c.publish("k", b"%d" % i)
            await c.wait_for_confirms()
            info = await c.info()
            assert (info.first, info.last, info.stream) == (1, 3, "t")
            assert await c.seq_at(0) == 1
            assert await c.seq_at(info.newest + 1) == 4              # none that recent: last + 1
            assert "t" in await c.list_streams()
            assert "t" in await list_streams(broker.endpoint, timeout=5)
            async with AsyncClient(broker.endpoint, "t", **FAST) as live_client:
                live = await live_client.subscribe(live=True)
                assert await live.poll(0.2) is None
                await c.publish("k", b"new")
                assert (await live.next(10)).sequence == 4
            async with AsyncClient(broker.endpoint, "t", **FAST) as late:
                sub = await late.subscribe(from_time=info.newest + 1)
                assert [m.sequence for m in await read(sub, 1)] == [4]
                assert await sub.poll(0.2) is None

    run(main())


def test_reading_in_batches_gives_every_message_once(start_broker, tmp_path):
    broker = start_broker(tmp_path / "data", "--max-message", "1K")   # a 32 KiB window holds
    n = 3000

    async def main():
        async with AsyncClient(broker.endpoint, "abulk", **FAST) as pub:
            for i in range(n):
                await pub.publish("k", b"%100d" % i)
            await pub.flush()
            async with AsyncClient(broker.endpoint, "abulk", credit_window=32 << 10,
                                   **FAST) as cl:
                sub = await cl.subscribe()
                got = [m.sequence for m in await read(sub, 5)]
                async for b in sub.batches(timeout=10):
                    assert len(b) >= 1 and sub.position == b.last
                    got += list(b.sequences)
                    if got[-1] >= n - 5:
                        break
                got += [m.sequence for m in await read(sub, n - len(got))]
                with pytest.raises(ZepsTimeout):
                    await sub.next_batch(0.2)                # nothing more was published
                return got

    assert run(main()) == list(range(1, n + 1))


# ------------------------------------------------------------------ errors

def test_rejected_publish_and_bad_regex_are_invalid_errors(start_broker, tmp_path):
    b = start_broker(tmp_path / "d", "--max-message", "1K")

    async def main():
        async with AsyncClient(b.endpoint, "s", confirms=True, **FAST) as c:
            ok1 = await c.publish("k", b"ok1")
            big = await c.publish("k", b"z" * 5000)                # over --max-message
            ok2 = await c.publish("k", b"ok2")
            with pytest.raises(InvalidError) as e:
                await c.wait_for_confirms()
            assert e.value.reason.startswith(PUBLISH_REJECTED) and e.value.command == "PUBLISH"
            with pytest.raises(InvalidError):
                await big                                        # its receipt says so too
            assert await c.wait_for_confirms() == 2               # the others are durable
            assert (await ok1, await ok2) == (1, 2)
            with pytest.raises(InvalidError) as e:
                await c.subscribe("~(")
            assert "bad regular expression" in e.value.reason and e.value.command == "SUBSCRIBE"
            with pytest.raises(InvalidError):
                async for _ in c.subscribe("~)"):
                    pass
            assert [m.body for m in await read(await c.subscribe(""), 2)] == [b"ok1", b"ok2"]

    run(main())


def test_a_message_longer_than_the_broker_reads_is_refused_at_once(start_broker, tmp_path):
    """As with the blocking client: ValueError at once, nothing sent, the client goes on."""
    b = start_broker(tmp_path / "d")
    unread = b"y" * (publish_frame_limit(1 << 20) - 9 + 1)

    async def main():
        async with AsyncClient(b.endpoint, "s", confirms=True, **FAST) as c:
            with pytest.raises(ValueError, match="over the --max-message of 1048576 bytes"):
                await c.publish("k", unread)
            with pytest.raises(ValueError):
                await c.publish_batch([("k", b"one"), ("k", unread), ("k", b"never")])
            await c.publish("k", b"two")
            assert await c.wait_for_confirms() == 2
            assert [m.body for m in await read(await c.subscribe(""), 2)] == [b"one", b"two"]

    run(main())


def test_argument_errors_timeouts_and_close(broker):
    async def main():
        c = AsyncClient(broker.endpoint, "s", create=True, **FAST)
        with pytest.raises(ZepsError, match="not connected"):
            await c.info()
        await c.connect()
        with pytest.raises(ValueError):
            c.subscribe(from_seq=3, live=True)
        with pytest.raises(TypeError):
            await c.publish("k", 42)
        with pytest.raises(ZepsError):
            await c.wait_for_confirms()                            # needs confirms=True
        sub = await c.subscribe(timeout=0.2)
        loop = asyncio.get_running_loop()
        t = loop.time()
        with pytest.raises(ZepsTimeout):
            async for _ in sub:                                    # sub.timeout per step
                pass
        assert 0.15 < loop.time() - t < 3
        with pytest.raises(ZepsTimeout) as e:
            await sub.next(0.1)
        assert isinstance(e.value, TimeoutError)
        await c.publish("k", b"before close")
        await c.close()
        await c.close()
        assert c.closed and not c.attached
        with pytest.raises(ClientClosed):
            await c.publish("k", b"after")
        assert [m async for m in sub] == []                       # iteration ends once closed
        with Client(broker.endpoint, "s", **FAST) as check:       # close() flushed the publish
            assert check.info().last == 1

    run(main())


def test_a_closed_client_leaves_no_descriptor_watched_by_the_loop(broker):
    """Closed, a client unregisters its socket and its monitor from the event loop. Left
    registered, a closed descriptor stays in the loop's selector, and the next socket given its
    number (the next client's, in the same loop) is never watched: that client saw its frames
    only on its I/O task's 1 s timer and waited out close()'s DETACH-OK (the multicast receiver,
    which opens and closes clients in one loop, fell behind)."""
    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(2):                   # the second client may reuse the first's numbers
            c = AsyncClient(broker.endpoint, "s", create=True, **FAST)
            await c.connect()
            sub = await c.subscribe()
            assert await sub.poll(0.05) is None          # the I/O task waited on the sockets
            fds = [s.getsockopt(zmq.FD) for s in c._conn._owned]
            await c.close()
            assert [loop.remove_reader(fd) for fd in fds] == [False, False]

    run(main())


def test_unreachable_broker_times_out():
    port = fixed_ports()    # free, and outside the ephemeral range: the client cannot connect to itself

    async def main():
        c = AsyncClient(f"tcp://127.0.0.1:{port}", "s", timeout=0.3)
        with pytest.raises(ZepsTimeout, match="no answer"):
            await c.connect()
        assert c.closed
        with pytest.raises(ZepsTimeout):
            await list_streams(f"tcp://127.0.0.1:{port}", timeout=0.3)

    run(main())


# ------------------------------------------------------------------ cancellation

def test_a_cancelled_read_loses_nothing(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "s", create=True, **FAST) as c, \
                AsyncClient(broker.endpoint, "s", **FAST) as pub:
            sub = await c.subscribe()
            for _ in range(3):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(sub.next(), 0.05)      # cancelled while waiting
            await pub.publish("k", b"1")
            await pub.publish("k", b"2")
            assert [m.body for m in await read(sub, 2)] == [b"1", b"2"]
            assert await sub.poll(0.2) is None                     # and nothing twice

    run(main())


def test_a_cancelled_request_does_not_steal_the_next_reply(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "s", confirms=True, **FAST) as c:
            await c.publish("k", b"x")
            await c.wait_for_confirms()
            task = asyncio.ensure_future(c.seq_at(0))
            await asyncio.sleep(0)              # the task runs up to its wait: SEQ-AT-TIME is out
            task.cancel()                                          # ...and its caller goes away
            with pytest.raises(asyncio.CancelledError):
                await task
            info = await c.info()                                  # the stale reply is not this one's
            assert info.last == 1
            await c.publish("k", b"y")
            waiting = asyncio.ensure_future(c.wait_for_confirms())
            await asyncio.sleep(0)                                 # waiting for the CONFIRM...
            waiting.cancel()                                       # ...given up
            await c.publish("k", b"z")
            assert await c.wait_for_confirms() == 3               # still counting right

    run(main())


def test_a_publish_cancelled_while_reconnecting_is_not_sent(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "s", confirms=True, **FAST) as c:
            await c.publish("k", b"before")
            assert await c.wait_for_confirms() == 1
            broker.kill()
            await eventually(lambda: not c.attached)               # the disconnect is seen
            stuck = asyncio.ensure_future(c.publish("k", b"never"))
            await asyncio.sleep(0.2)
            assert not stuck.done()                                # waits for the peering
            stuck.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            broker.restart()
            await c.publish("k", b"after")
            assert await c.wait_for_confirms(10) == 2
            sub = await c.subscribe()
            assert [m.body for m in await read(sub, 2)] == [b"before", b"after"]
            assert await sub.poll(0.3) is None
            assert c.reconnects >= 1

    run(main())


def test_tasks_share_one_client(broker):
    async def main():
        async with AsyncClient(broker.endpoint, "s", confirms=True, create=True, **FAST) as c:
            sub = await c.subscribe()

            async def reader():
                return [m.sequence for m in await read(sub, 200)]

            async def writer():
                for i in range(200):
                    await c.publish("k", b"%d" % i)
                return await c.wait_for_confirms()

            got, last = await asyncio.gather(reader(), writer())
            assert got == list(range(1, 201)) and last == 200

    run(main())


# ------------------------------------------------------------------ reconnect

def test_reconnect_after_broker_restart_no_gap_no_duplicate(broker):
    """A subscriber with a small window and a confirming publisher, both asyncio, while the
    broker is SIGKILLed and restarted mid-stream."""
    n = 600

    async def main():
        async with AsyncClient(broker.endpoint, "s", credit_window=8 << 10, create=True,
                               **FAST) as sc, \
                AsyncClient(broker.endpoint, "s", confirms=True, **FAST) as pc:
            sub = await sc.subscribe()

            async def publisher():
                for i in range(n):
                    await pc.publish("k", b"%d" % i)
                    if i % 50 == 49:
                        await pc.wait_for_confirms(20)
                return await pc.wait_for_confirms(20)

            pub_task = asyncio.ensure_future(publisher())
            got, bodies = [], set()
            while len(bodies) < n:                # at-least-once: re-sent ones may come twice
                got.append(await sub.next(20))
                bodies.add(int(got[-1].body))
                if len(got) == 200:
                    broker.kill()
                    broker.restart()
            await pub_task
            assert sc.reconnects >= 1 and pc.reconnects >= 1
            return got, bodies

    got, bodies = run(main(), timeout=120)
    seqs = [m.sequence for m in got]
    assert seqs == list(range(1, len(seqs) + 1))                 # no gap, no duplicate
    assert bodies == set(range(n))


@pytest.mark.parametrize("forget", [c.Detach(), c.Invalid(f"{NOT_ATTACHED}CREDIT before ATTACH")],
                         ids=["S:DETACH", "INVALID not attached"])
def test_a_broker_that_forgets_the_client_gets_a_new_attach_and_a_resume(forget):
    """The broker side is a scripted ROUTER socket: it attaches the client, delivers 1 and 2,
    then forgets it. The client must come back on a new connection, re-subscribe from 2 (the
    last message it handed out) and go on with 3."""
    async def main():
        ctx = zmq.asyncio.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        port = router.bind_to_random_port("tcp://127.0.0.1")

        async def expect(cls):
            ident, frame = await asyncio.wait_for(router.recv_multipart(), 10)
            cmd = decode(frame)
            assert isinstance(cmd, cls), cmd
            return ident, cmd

        async def answer(ident, cmd):
            await router.send_multipart([ident, encode(cmd)])

        client = AsyncClient(f"tcp://127.0.0.1:{port}", "s", timestamps=False, timeout=5,
                             heartbeat=30)
        try:
            connecting = asyncio.ensure_future(client.connect())
            ident, _ = await expect(c.ReasonsSelect)
            await answer(ident, c.Invalid("unknown command 62"))   # a broker without it
            _, cmd = await expect(c.StreamExpect)             # a reader: whichever exists
            assert cmd.incarnation == 0
            await answer(ident, c.StreamExpectOk())
            await expect(c.Attach)
            await answer(ident, c.AttachOk())
            await expect(c.StreamId)
            await answer(ident, c.StreamIdOk(9))                    # the stream's incarnation
            await expect(c.Limits)
            await answer(ident, c.Invalid("unknown command 44"))   # a broker without LIMITS
            await expect(c.BatchSelect)
            await answer(ident, c.Invalid("unknown command 56"))   # ... nor batches
            await expect(c.StreamDescribe)
            await answer(ident, c.Invalid("unknown command 54"))
            await expect(c.HeadersSelect)
            await answer(ident, c.Invalid("unknown command 70"))   # ... nor headers
            await connecting
            subscribing = asyncio.ensure_future(client.subscribe(""))
            _, cmd = await expect(c.Subscribe)
            assert cmd.latest == 0
            await answer(ident, c.SubscribeOk())
            sub = await subscribing
            await expect(c.Credit)
            for seq in (1, 2):
                await answer(ident, c.Deliver(seq, "k", b"%d" % seq))
            assert [m.sequence for m in await read(sub, 2)] == [1, 2]

            await answer(ident, forget)                       # the broker forgets the client
            again, _ = await expect(c.ReasonsSelect)
            assert again != ident                             # a new connection
            await answer(again, c.ReasonsSelectOk())               # a broker with it
            _, cmd = await expect(c.StreamExpect)             # the same stream, or none
            assert cmd.incarnation == 9
            await answer(again, c.StreamExpectOk())
            await expect(c.Attach)
            await answer(again, c.AttachOk())
            await expect(c.Limits)
            await answer(again, c.LimitsOk(100, 1 << 20))           # a broker with LIMITS
            await expect(c.BatchSelect)
            await answer(again, c.BatchSelectOk(1 << 20))          # and batches
            await expect(c.StreamDescribe)
            await answer(again, c.StreamDescribeOk(1, 2, 0, 0, 0, 0, 0, 0, 0))
            await expect(c.HeadersSelect)
            await answer(again, c.HeadersSelectOk(255, 65536))     # and headers
            _, cmd = await expect(c.Subscribe)
            assert (cmd.pattern, cmd.latest) == ("", 2)       # resumes after the last handed
            await answer(again, c.SubscribeOk())
            await expect(c.Credit)
            await answer(again, c.DeliverBatch(7, 3, 2, encode_entries([("k", b"3"), ("k", b"4")])))
            assert [(m.sequence, m.body, m.timestamp) for m in await read(sub, 2)] == [
                (3, b"3", 7), (4, b"4", 7)]
            assert client.reconnects == 1

            closing = asyncio.ensure_future(client.close())
            await expect(c.Detach)
            await answer(again, c.DetachOk())
            await closing
        finally:
            await client.close(timeout=0.1)
            router.close(0)
            ctx.term()

    run(main())
