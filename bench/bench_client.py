"""Client SDK cost per message, over tcp on 127.0.0.1, beside a bare DEALER doing the same work.

Every path of the SDK a program publishes or reads with, in one process against one local broker
(``--fsync interval``), each row beside the others of the same run:

* publish: ``Client.publish`` per message, ``Client.publish_batch`` of 100, each with and without
  confirms (``wait_for_confirms()`` at the end), and ``batching=False`` (one PUBLISH frame per
  message, as before batches); the time runs until the broker has everything (``flush()``, or
  the last CONFIRM);
* replay of the stream just written from its first message: ``next()`` per message,
  ``batches()`` (a :class:`~zeps.clients.MessageBatch` per DELIVER-BATCH, its messages counted,
  none built), and ``next()`` with ``batching=False``;
* the same with the asyncio client (``AsyncClient``);
* baselines: a bare DEALER sending pre-encoded PUBLISH frames (one per message) or PUBLISH-BATCH
  frames of 100, then PING; a bare DEALER replaying (BATCH-SELECT, the whole stream's credit at
  once, frames counted).

Messages are the suite's (:func:`bench.systems.messages`: different bodies under 64 keys).
Reported per path: msg/s and the client process's CPU time per message (``time.process_time``:
every thread of this process, libzmq's I/O thread included), median of ``--runs`` interleaved
rounds.

    python -m bench.bench_client [--n 100000] [--size 100] [--runs 3]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import zmq

from bench.bench_broker import start_broker
from bench.systems import messages
from zeps.clients import AsyncClient, Client
from zeps.protocol import commands as c
from zeps.protocol import decode, encode, encode_publish
from zeps.protocol.batch import DELIVER_BATCH_ID, batch_count, encode_publish_batch

TIMEOUT = 120.0


def _stream(n, size):
    pool = messages(size)
    return [pool[i % len(pool)] for i in range(n)]


def _dealer(ep, stream):
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 0)
    s.connect(ep)
    s.send(encode(c.Attach(stream)))
    assert isinstance(decode(s.recv()), c.AttachOk)
    return s


def bare_publish(ep, stream, msgs, batch):
    s = _dealer(ep, stream)
    if batch:
        frames = [encode_publish_batch(msgs[i:i + 100]) for i in range(0, len(msgs), 100)]
    else:
        frames = [encode_publish(k, b) for k, b in msgs]
    send = s.send
    for f in frames:
        send(f)
    s.send(encode(c.Ping()))
    while not isinstance(decode(s.recv()), c.PingOk):
        pass
    s.close()


def bare_replay(ep, stream, msgs, _):
    s = _dealer(ep, stream)
    s.send(encode(c.BatchSelect()))
    s.send(encode(c.Subscribe("", 0)))
    s.send(encode(c.Credit(sum(12 + len(k) + len(b) for k, b in msgs))))
    got = 0
    while got < len(msgs):
        frame = s.recv()
        if frame[2] == DELIVER_BATCH_ID:
            got += batch_count(frame)
        elif isinstance(decode(frame), c.Deliver):
            got += 1
    s.close()


def sdk_publish(ep, stream, msgs, path, confirms=False, batching=True):
    with Client(ep, stream, confirms=confirms, batching=batching, timeout=TIMEOUT) as cl:
        if path == "batch":
            for i in range(0, len(msgs), 100):
                cl.publish_batch(msgs[i:i + 100])
        else:
            pub = cl.publish
            for k, b in msgs:
                pub(k, b)
        if confirms:
            cl.wait_for_confirms(timeout=TIMEOUT)
        else:
            cl.flush(timeout=TIMEOUT)


def sdk_replay(ep, stream, msgs, path, batching=True):
    n = len(msgs)
    with Client(ep, stream, batching=batching, timeout=TIMEOUT) as cl:
        sub = cl.subscribe("", from_seq=1)
        if path == "batches":
            got = 0
            for batch in sub.batches():
                got += len(batch)
                if got >= n:
                    break
        else:
            nxt = sub.next
            for _ in range(n):
                nxt(timeout=TIMEOUT)


async def _aio_publish(ep, stream, msgs, path, confirms=False, batching=True):
    async with AsyncClient(ep, stream, confirms=confirms, batching=batching,
                           timeout=TIMEOUT) as cl:
        if path == "batch":
            for i in range(0, len(msgs), 100):
                await cl.publish_batch(msgs[i:i + 100])
        else:
            for k, b in msgs:
                await cl.publish(k, b)
        if confirms:
            await cl.wait_for_confirms(timeout=TIMEOUT)
        else:
            await cl.flush(timeout=TIMEOUT)


async def _aio_replay(ep, stream, msgs, path, batching=True):
    n = len(msgs)
    async with AsyncClient(ep, stream, batching=batching, timeout=TIMEOUT) as cl:
        sub = await cl.subscribe("", from_seq=1)
        got = 0
        if path == "batches":
            async for batch in sub.batches():
                got += len(batch)
                if got >= n:
                    break
        else:
            async for _ in sub:
                got += 1
                if got == n:
                    break


def aio_publish(*args, **kw):
    asyncio.run(_aio_publish(*args, **kw))


def aio_replay(*args, **kw):
    asyncio.run(_aio_replay(*args, **kw))


# (label, function, its arguments after (ep, stream, msgs), the row whose stream it replays)
PUBLISH = [
    ("bare DEALER: PUBLISH per message (pre-encoded)", bare_publish, (False,)),
    ("bare DEALER: PUBLISH-BATCH of 100 (pre-encoded)", bare_publish, (True,)),
    ("SDK publish() per message", sdk_publish, ("each",)),
    ("SDK publish() per message, batching=False", sdk_publish, ("each", False, False)),
    ("SDK publish_batch(100)", sdk_publish, ("batch",)),
    ("SDK publish() per message + confirms", sdk_publish, ("each", True)),
    ("SDK publish() + confirms, batching=False", sdk_publish, ("each", True, False)),
    ("SDK publish_batch(100) + confirms", sdk_publish, ("batch", True)),
    ("asyncio publish() per message", aio_publish, ("each",)),
    ("asyncio publish_batch(100)", aio_publish, ("batch",)),
    ("asyncio publish() per message + confirms", aio_publish, ("each", True)),
    ("asyncio publish_batch(100) + confirms", aio_publish, ("batch", True)),
]
REPLAY = [
    ("bare DEALER: replay, DELIVER-BATCH counted", bare_replay, (None,)),
    ("SDK replay, next() per message", sdk_replay, ("next",)),
    ("SDK replay, batches()", sdk_replay, ("batches",)),
    ("SDK replay, next(), batching=False", sdk_replay, ("next", False)),
    ("asyncio replay, async for per message", aio_replay, ("next",)),
    ("asyncio replay, batches()", aio_replay, ("batches",)),
]


def timed(fn, *args):
    """(wall seconds, CPU seconds of this process) of ``fn(*args)``."""
    w, p = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - w, time.process_time() - p


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    msgs = _stream(args.n, args.size)
    results = {label: [] for label, _, _ in PUBLISH + REPLAY}
    with tempfile.TemporaryDirectory() as d:
        proc, ep = start_broker(d, "interval")
        try:
            for r in range(args.runs):
                # each round writes its streams, then replays one of them (written by
                # publish_batch: batch records of 100, what an SDK publishing in bulk stores)
                for i, (label, fn, extra) in enumerate(PUBLISH):
                    results[label].append(timed(fn, ep, f"p{r}-{i}", msgs, *extra))
                replayed = f"p{r}-{[x[0] for x in PUBLISH].index('SDK publish_batch(100)')}"
                for label, fn, extra in REPLAY:
                    results[label].append(timed(fn, ep, replayed, msgs, *extra))
        finally:
            proc.terminate()
            proc.wait()
    print(f"{args.n:,} messages of {args.size} B (1,000 different bodies, 64 keys), one local "
          f"broker (fsync interval), median of {args.runs} interleaved rounds; replays read the "
          f"stream `publish_batch(100)` wrote (batch records of 100)\n")
    print("| path | msg/s | client CPU µs per message |")
    print("|---|---:|---:|")
    for label, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(p for _, p in runs)
        print(f"| {label} | {args.n / wall:,.0f} | {cpu / args.n * 1e6:.2f} |")


if __name__ == "__main__":
    main()
