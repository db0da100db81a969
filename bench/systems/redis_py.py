"""Redis Streams through redis-py with hiredis: XADD pipelined by 100 or one per call, XREAD by 1000.

A message is one stream entry with one field: its name is the routing key (the end marker's is
:data:`~bench.systems.END_KEY`), its value the body. Redis answers every XADD, so publishing
"with confirms" is the same as without (durable per the server's ``appendfsync``). Flat-out
publishers take one of two paths (``path=``): ``"pipeline"``, 100 XADDs per round trip
(``pipeline(transaction=False)``, as ``publish_batch`` of 100), or ``"each"``, one ``xadd()``
per call, each reply awaited; the field dictionaries are built before the start signal. Paced
publishers (latency) send one XADD per message, unpipelined. Consumers read with XREAD from
``0-0`` (the suite gives each run a fresh stream, so that is every message published after the
consumer was ready) and block at most 1 s per call.
"""
from __future__ import annotations

import time

try:
    import redis
except ImportError:   # not installed: bench.peers.missing('redis') says so, nothing here runs
    redis = None

from bench.systems import (END_KEY, KEY, BURST, POOL, body, bursts, delay_ns, flat_out, messages,
                           pace, stamped)

PIPELINE = 100
READ_COUNT = 1000
_KEY, _END = KEY.encode(), END_KEY.encode()


def connect(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port)


def publish(port, stream, *, size, seconds, rate=0.0, confirms=False, end=False, limit=None,
            path="pipeline", ready, go):
    r = connect(port)
    r.ping()
    pad = body(size)
    cycle = bursts([{key: data} for key, data in messages(size)], BURST)
    ready()
    go()
    if rate:
        n = 0
        for _ in pace(rate, seconds):
            r.xadd(stream, {KEY: stamped(pad)})
            n += 1
    elif path == "pipeline":
        pipe = r.pipeline(transaction=False)

        def burst():
            for i, fields in enumerate(next(cycle)):
                pipe.xadd(stream, fields)
                if i % PIPELINE == PIPELINE - 1:
                    pipe.execute()
        n = flat_out(seconds, burst, limit)
        pipe.execute()
    elif path == "each":
        xadd = r.xadd

        def burst():
            for fields in next(cycle):
                xadd(stream, fields)
        n = flat_out(seconds, burst, limit)
    else:
        raise ValueError(f"no publishing path {path!r}")
    if end:
        r.xadd(stream, {END_KEY: pad})
    r.close()
    return n


def consume(port, stream, *, expect=None, from_start=False, latency=False, ready, go):
    r = connect(port)
    r.ping()
    ready()
    go()
    last = b"0-0"
    n = 0
    delays = []
    while expect is None or n < expect:
        got = r.xread({stream: last}, count=READ_COUNT, block=None if from_start else 1000)
        if not got:
            continue
        entries = got[0][1]
        last = entries[-1][0]
        for _, fields in entries:
            if _END in fields:
                r.close()
                return n, delays
            n += 1
            if latency:
                delays.append(delay_ns(fields[_KEY]))
            if n == expect:
                break
    r.close()
    return n, delays


def drop(port, stream) -> None:
    """Delete ``stream`` (after its run: the server's memory and AOF do not grow run after run)."""
    r = connect(port)
    r.delete(stream)
    r.close()


def fill(port, stream, n, size) -> None:
    """Append ``n`` entries to ``stream`` (pipelined by 1000), the :func:`messages` cycled."""
    r = connect(port)
    pipe = r.pipeline(transaction=False)
    pool = [{key: data} for key, data in messages(size)]
    for i in range(n):
        pipe.xadd(stream, pool[i % POOL])
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    r.close()


def start_probes(port, stream, length, fractions):
    """Seconds of ``XRANGE stream <ms> + COUNT 1`` at ``fraction`` of the stream's time span
    (Redis entry IDs are milliseconds): where a reader starts from a position."""
    r = connect(port)
    info = r.xinfo_stream(stream)
    first = int(info["first-entry"][0].split(b"-")[0])
    last = int(info["last-entry"][0].split(b"-")[0])
    out = []
    for f in fractions:
        ms = first + int(f * (last - first))
        t = time.perf_counter()
        got = r.xrange(stream, min=str(ms), max="+", count=1)
        out.append(time.perf_counter() - t)
        if not got:
            raise RuntimeError(f"XRANGE from {ms} returned nothing")
    r.close()
    return out
