"""Client SDK overhead, over tcp on 127.0.0.1, beside a bare DEALER socket doing the same work.

* publish: ``Client.publish`` in a loop (then ``close()``, which waits until the broker has
  processed everything) vs. a bare DEALER sending pre-encoded PUBLISH frames then PING/PING-OK;
* publish + confirms: the same with ``confirms=True`` and ``wait_for_confirms()`` at the end;
* subscribe (replay): ``for msg in sub`` over the whole stream vs. a bare DEALER that SUBSCRIBEs,
  grants the credit of the whole stream at once and decodes every DELIVER with the codec;
* the same three with the asyncio client (``AsyncClient``: ``await publish``, ``async for``);
* each SDK row also with ``batching=False`` (plain PUBLISH / DELIVER, as before batches), in the
  same run against the same broker.

    python -m bench.bench_client [--n 100000] [--size 100]
"""
from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import zmq

from bench.bench_broker import start_broker
from zeps.clients import AsyncClient, Client
from zeps.protocol import commands as c
from zeps.protocol import decode, encode, encode_publish


def bare_publish(ep, stream, n, body):
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(ep)
    s.send(encode(c.Attach(stream)))
    assert isinstance(decode(s.recv()), c.AttachOk)
    frame = encode_publish("k", body)
    t = time.perf_counter()
    for _ in range(n):
        s.send(frame)
    s.send(encode(c.Ping()))
    while not isinstance(decode(s.recv()), c.PingOk):
        pass
    dt = time.perf_counter() - t
    s.close()
    return dt


def bare_subscribe(ep, stream, n, body):
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 0)
    s.connect(ep)
    s.send(encode(c.Attach(stream)))
    decode(s.recv())
    t = time.perf_counter()
    s.send(encode(c.Subscribe("", 0)))
    s.send(encode(c.Credit(n * (10 + len(body)))))
    got = 0
    while got < n:
        if isinstance(decode(s.recv()), c.Deliver):
            got += 1
    dt = time.perf_counter() - t
    s.close()
    return dt


def sdk_publish(ep, stream, n, body, confirms, batching=True):
    t = time.perf_counter()
    with Client(ep, stream, confirms=confirms, batching=batching) as cl:
        for _ in range(n):
            cl.publish("k", body)
        if confirms:
            cl.wait_for_confirms(timeout=120)
    return time.perf_counter() - t


def sdk_subscribe(ep, stream, n, batching=True):
    with Client(ep, stream, batching=batching) as cl:
        t = time.perf_counter()
        sub = cl.subscribe()
        for i, _ in enumerate(sub, 1):
            if i == n:
                break
        return time.perf_counter() - t


async def _aio_publish(ep, stream, n, body, confirms, batching=True):
    t = time.perf_counter()
    async with AsyncClient(ep, stream, confirms=confirms, batching=batching) as cl:
        for _ in range(n):
            await cl.publish("k", body)
        if confirms:
            await cl.wait_for_confirms(timeout=120)
    return time.perf_counter() - t


async def _aio_subscribe(ep, stream, n, batching=True):
    async with AsyncClient(ep, stream, batching=batching) as cl:
        t = time.perf_counter()
        i = 0
        async for _ in cl.subscribe():
            i += 1
            if i == n:
                break
        return time.perf_counter() - t


def aio_publish(ep, stream, n, body, confirms, batching=True):
    return asyncio.run(_aio_publish(ep, stream, n, body, confirms, batching))


def aio_subscribe(ep, stream, n, batching=True):
    return asyncio.run(_aio_subscribe(ep, stream, n, batching))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    body = b"x" * args.size
    n = args.n
    with tempfile.TemporaryDirectory() as d:
        proc, ep = start_broker(d, "interval")
        try:
            rows = [
                ("bare DEALER publish", bare_publish(ep, "bare", n, body)),
                ("SDK publish", sdk_publish(ep, "sdk", n, body, False)),
                ("SDK publish + confirms", sdk_publish(ep, "sdkc", n, body, True)),
                ("bare DEALER replay", bare_subscribe(ep, "bare", n, body)),
                ("SDK subscribe replay", sdk_subscribe(ep, "sdk", n)),
                ("asyncio publish", aio_publish(ep, "aio", n, body, False)),
                ("asyncio publish + confirms", aio_publish(ep, "aioc", n, body, True)),
                ("asyncio subscribe replay", aio_subscribe(ep, "aio", n)),
                ("SDK publish, no batching", sdk_publish(ep, "sdk1", n, body, False, False)),
                ("SDK publish + confirms, no b.", sdk_publish(ep, "sdkc1", n, body, True, False)),
                ("SDK replay, no batching", sdk_subscribe(ep, "sdk1", n, False)),
                ("asyncio publish, no batching", aio_publish(ep, "aio1", n, body, False, False)),
                ("asyncio pub + confirms, no b.", aio_publish(ep, "aioc1", n, body, True, False)),
                ("asyncio replay, no batching", aio_subscribe(ep, "aio1", n, False)),
            ]
        finally:
            proc.terminate()
            proc.wait()
    print(f"{n} messages of {args.size} bytes")
    for name, dt in rows:
        print(f"  {name:<30} {n / dt:>10,.0f} msg/s  ({dt:.2f} s)")


if __name__ == "__main__":
    main()
