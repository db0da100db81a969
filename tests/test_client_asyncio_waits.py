"""The asyncio client's waits that meet another task's (or a cancelled call's) work in flight,
against a real broker process on 127.0.0.1. Each test runs its coroutine with asyncio.run; waits
are on conditions with deadlines."""
from __future__ import annotations

import asyncio

import pytest

from zeps.clients import AsyncClient, Client, ConnectionLost, NoStream, ZepsTimeout
from zeps.clients.peering import CONNECTING

from .test_client_asyncio import eventually

FAST = {"timeout": 5.0, "heartbeat": 1.0}


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_a_publish_meeting_a_reads_attach_in_flight_creates_the_stream(broker):
    """A reader's client of a stream that does not exist: a read attaches only to a stream that
    exists (STREAM-EXPECT 0). A publish made while that ATTACH is in flight (another task's
    read, or a read cancelled meanwhile) attaches again once it is refused, creating the
    stream; a second read meeting it hears NoStream. (The publish waited for an ATTACH-OK that
    never came and raised ZepsTimeout after the client's timeout; the second read too.)"""
    async def main():
        async with AsyncClient(broker.endpoint, "fresh", confirms=True, **FAST) as c:
            reading = asyncio.ensure_future(c.info())
            other = asyncio.ensure_future(c.seq_at(0))
            await asyncio.sleep(0)                  # both run up to their wait: ATTACH is out
            in_flight = c._p.state is CONNECTING
            receipt = await c.publish("k", b"first")
            assert await receipt == 1
            for read in (reading, other):
                with pytest.raises(NoStream):
                    await read
        async with AsyncClient(broker.endpoint, "fresh2", confirms=True, **FAST) as c:
            reading = asyncio.ensure_future(c.info())
            await asyncio.sleep(0)
            in_flight = in_flight and c._p.state is CONNECTING
            reading.cancel()                        # cancelled, its ATTACH still in flight
            with pytest.raises(asyncio.CancelledError):
                await reading
            assert await (await c.publish("k", b"first")) == 1
            assert (await c.info()).last == 1
        return in_flight

    assert run(main())


def test_waiters_hear_that_the_io_task_was_cancelled(broker):
    """The I/O task cancelled by another than close() (a shutdown cancelling every task, the
    end of asyncio.run): every wait, and every later call, raises ConnectionLost; close()
    closes. (A read waited for ever, a request for its timeout, and the client stayed open
    with nothing reading its socket.)"""
    async def main():
        c = AsyncClient(broker.endpoint, "s", confirms=True, create=True, **FAST)
        await c.connect()
        sub = await c.subscribe()
        reading = asyncio.ensure_future(sub.next())          # no timeout: waits for ever
        receipt = await c.publish("k", b"x")
        await asyncio.sleep(0)
        io = c._task
        io.cancel()
        with pytest.raises(ConnectionLost, match="I/O task was cancelled"):
            await asyncio.wait_for(reading, 10)
        assert io.cancelled()
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(c.info(), 10)
        with pytest.raises(ConnectionLost):
            await c.publish("k", b"y")
        if not receipt.done():                              # its CONFIRM may have come first
            with pytest.raises(ConnectionLost):
                await receipt
        await c.close()
        assert c.closed

    run(main())


def test_a_coroutine_on_connection_callback_runs(broker):
    """nats-py's callbacks are coroutine functions: the AsyncClient runs one's coroutine as a
    task (it was called and its coroutine dropped, never awaited: the callback never ran)."""
    heard = []

    async def on_connection(event):
        await asyncio.sleep(0)
        heard.append(event.kind)

    async def main():
        async with AsyncClient(broker.endpoint, "s", create=True, on_connection=on_connection,
                               **FAST) as c:
            broker.kill()
            broker.restart()
            await eventually(lambda: heard == ["lost", "reconnected"])
            assert c.reconnects == 1

    run(main())


def test_a_loop_of_calls_with_timeout_0_lets_the_io_task_run(broker):
    """poll(0), wait_for_confirms(0), ...: a deadline already past still lets the event loop
    run once, as the blocking client services its socket, so a loop of them gets what
    arrives (they returned without an await: the loop, the I/O task and every other task
    never ran again, and such a loop spun for ever)."""
    async def main():
        loop = asyncio.get_running_loop()
        async with AsyncClient(broker.endpoint, "s", create=True, confirms=True,
                               **FAST) as c:
            sub = await c.subscribe()
            with Client(broker.endpoint, "s", **FAST) as other:
                other.publish("k", b"hello")
                other.flush()
            end = loop.time() + 10
            msg = None
            while msg is None and loop.time() < end:
                msg = await sub.poll(0)
            assert msg is not None and msg.body == b"hello"
            await c.publish("k", b"x")
            confirmed = None
            while confirmed is None and loop.time() < end:
                try:
                    confirmed = await c.wait_for_confirms(0)
                except ZepsTimeout:
                    pass
            assert confirmed == 2

    run(main())
