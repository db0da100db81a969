"""NATS JetStream through nats-py: a file-storage stream per run, subjects ``<stream>.<key>``.

Publishing without confirms is a core NATS publish (``nc.publish``, no ack) into the stream's
subject (nothing comes back), then ``flush()``; :func:`settle` waits until the stream holds
every message, or all it will: JetStream drops core publishes it cannot take in time, and the
suite counts those as lost. The end marker is always published with an acknowledgement. With
confirms it is ``js.publish_async`` (acks awaited together, as nats-py allows) and
``publish_async_completed()``. Consumers are ordered push consumers (flow control, one
subscription, read with ``async for``): ``DeliverPolicy.NEW`` for live, ``ALL`` from the start (a
pull consumer fetching 1000 at a time was no faster here). nats-server 2.9 has no fsync setting
(``sync_interval`` came with 2.10): its file store writes to the OS and syncs on its own schedule.
"""
from __future__ import annotations

import asyncio
import time

try:
    import nats
    from nats.js.api import ConsumerConfig, DeliverPolicy, StorageType
except ImportError:   # not installed: bench.peers.missing('nats') says so, nothing here runs
    nats = ConsumerConfig = DeliverPolicy = StorageType = None

from bench.systems import END_KEY, KEY, BURST, POOL, body, bursts, delay_ns, due_times, messages, stamped

TIMEOUT = 120.0
#: Seconds without growth after which a stream is taken to hold all it will.
QUIET = 2.0


def _run(coro):
    return asyncio.run(coro)


async def connect(url: str):
    """A nats-py connection that does not reconnect (a lost server is an error here)."""
    return await nats.connect(url, max_reconnect_attempts=0, pending_size=8 << 20)


def prepare(url, stream) -> None:
    """Create the stream (file storage, no limits)."""
    async def main():
        nc = await connect(url)
        await nc.jetstream().add_stream(name=stream, subjects=[f"{stream}.>"],
                                        storage=StorageType.FILE)
        await nc.close()
    _run(main())


def drop(url, stream) -> None:
    """Delete ``stream`` (after its run)."""
    async def main():
        nc = await connect(url)
        await nc.jetstream().delete_stream(stream)
        await nc.close()
    _run(main())


def settle(url, stream, total):
    """Wait until the stream holds ``total`` messages, or has not grown for :data:`QUIET`
    seconds: JetStream drops core publishes it cannot take in time. Returns (messages stored,
    ``time.monotonic()`` when the last of them was seen)."""
    async def main():
        nc = await connect(url)
        js = nc.jetstream()
        seen, since = -1, time.monotonic()
        while True:
            n = (await js.stream_info(stream)).state.messages
            now = time.monotonic()
            if n >= total:
                break
            if n != seen:
                seen, since = n, now
            elif now - since > QUIET:
                n, now = seen, since
                break
            await asyncio.sleep(0.002)
        await nc.close()
        return n, now
    return _run(main())


def publish(url, stream, *, size, seconds, rate=0.0, confirms=False, end=False, limit=None,
            ready, go):
    async def main():
        nc = await connect(url)
        js = nc.jetstream()
        subject = f"{stream}.{KEY}"
        pad = body(size)
        cycle = bursts([(f"{stream}.{key}", data) for key, data in messages(size)], BURST)
        ready()
        go()
        n = 0
        if rate:
            for due in due_times(rate, seconds):
                while True:                    # sleep on the loop: the flusher must run
                    wait = due - time.monotonic_ns()
                    if wait <= 0:
                        break
                    await asyncio.sleep(wait / 1e9 if wait > 200_000 else 0)
                await nc.publish(subject, stamped(pad))
                n += 1
        else:
            send = js.publish_async if confirms else nc.publish
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and (limit is None or n < limit):
                for subj, data in next(cycle):
                    await send(subj, data)
                n += BURST
        if confirms:
            await js.publish_async_completed()
        await nc.flush(timeout=TIMEOUT)
        if end:                                # acknowledged: it must not be dropped
            await js.publish(f"{stream}.{END_KEY}", pad, timeout=TIMEOUT)
        await nc.close()
        return n
    return _run(main())


def consume(url, stream, *, expect=None, from_start=False, latency=False, ready, go):
    async def main():
        nc = await connect(url)
        js = nc.jetstream()
        end_subject = f"{stream}.{END_KEY}"

        async def subscribe(policy):
            return await js.subscribe(f"{stream}.>", ordered_consumer=True, deliver_policy=policy,
                                      pending_bytes_limit=1 << 30, pending_msgs_limit=1 << 22)
        sub = None if from_start else await subscribe(DeliverPolicy.NEW)
        ready()
        go()
        if sub is None:
            sub = await subscribe(DeliverPolicy.ALL)
        n = 0
        delays = []
        if expect != 0:
            async for msg in sub.messages:     # twice the rate of next_msg() here
                if msg.subject == end_subject:
                    break
                n += 1
                if latency:
                    delays.append(delay_ns(msg.data))
                if n == expect:
                    break
        await nc.close()
        return n, delays
    return _run(main())


def fill(url, stream, n, size) -> None:
    """Add ``n`` messages to ``stream`` with core publishes (the :func:`messages` cycled),
    publishing again what JetStream dropped until it holds them all."""
    async def main(count):
        nc = await connect(url)
        pool = [(f"{stream}.{key}", data) for key, data in messages(size)]
        for i in range(count):
            await nc.publish(*pool[i % POOL])
        await nc.flush(timeout=TIMEOUT)
        await nc.close()

    async def stored():
        nc = await connect(url)
        got = (await nc.jetstream().stream_info(stream)).state.messages
        await nc.close()
        return got
    target = _run(stored()) + n
    have = target - n
    while have < target:
        _run(main(target - have))
        have, _ = settle(url, stream, target)


def start_probes(url, stream, length, fractions):
    """Seconds from creating an ordered consumer at sequence ``1 + fraction * length``
    (``DeliverPolicy.BY_START_SEQUENCE``) to its first message."""
    async def main():
        nc = await connect(url)
        js = nc.jetstream()
        out = []
        for f in fractions:
            seq = 1 + int(f * length)
            t = time.perf_counter()
            sub = await js.subscribe(f"{stream}.>", ordered_consumer=True,
                                     config=ConsumerConfig(
                                         deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                         opt_start_seq=seq))
            msg = await sub.next_msg(timeout=TIMEOUT)
            out.append(time.perf_counter() - t)
            if msg.metadata.sequence.stream != seq:
                raise RuntimeError(f"consumer from {seq} began at {msg.metadata.sequence.stream}")
            await sub.unsubscribe()
        await nc.close()
        return out
    return _run(main())
