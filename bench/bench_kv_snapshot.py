"""Current state per key (issue 18): a late joiner reads the current value of every one of N
keys, ZEPS beside JetStream KV (nats-py) and Redis (redis-py), in the same run.

* ZEPS: a broker with ``--key-index``; the N keys are published with ``publish_batch`` (100 B
  bodies, then a second value for every tenth key); timed: ``Client.snapshot("")`` from the call
  to its last entry (the broker streams it under the client's credit, SNAPSHOT-END last).
* Redis: one hash (HSET pipelined by 1,000, the same keys and values); timed: HSCAN with COUNT
  1,000 to the end (the streaming read; HGETALL would build the whole answer in the server).
* JetStream KV: a bucket (history 1); the keys are put (``kv.put``'s publish, with a 60 s
  timeout) 1,000 at a time concurrently; timed: ``kv.watchall()`` until its
  end-of-initial-values marker (the values of every key, as a KV watcher gets them).

Loading is not timed. Each figure is keys per second of the read; every server is started here
on 127.0.0.1 and stopped.

    python -m bench.bench_kv_snapshot [--keys 100000]
"""
from __future__ import annotations

import argparse
import asyncio
import time

from bench.peers import nats_server, redis_server, versions, zeps_broker

BODY = 100


def keys_values(n: int):
    """N keys and their current values (every tenth key was written twice: its second value)."""
    for i in range(n):
        yield f"key.{i:07d}", (b"%07d-" % i) * (BODY // 8) + (b"2" if i % 10 == 0 else b"1")


def zeps(n: int) -> float:
    from zeps.clients import Client
    with zeps_broker(extra=("--key-index",)) as server:
        with Client(server.endpoint, "kv", create=True, confirms=True, timeout=60) as pub:
            items = list(keys_values(n))
            first = [(k, v[:-1] + b"0") for k, v in items[::10]]
            for chunk in (first, items):
                for i in range(0, len(chunk), 1000):
                    pub.publish_batch(chunk[i:i + 1000])
            pub.wait_for_confirms(120)
        with Client(server.endpoint, "kv", timeout=60) as reader:
            t0 = time.perf_counter()
            snap = reader.snapshot("")
            elapsed = time.perf_counter() - t0
        assert len(snap) == n, (len(snap), n)
        assert dict((m.key, m.body) for m in snap) == dict(keys_values(n))
    return n / elapsed


def redis(n: int) -> float:
    import redis as redis_py
    with redis_server() as server:
        r = redis_py.Redis(host="127.0.0.1", port=server.port)
        items = list(keys_values(n))
        pipe = r.pipeline(transaction=False)
        for i, (k, v) in enumerate(items):
            pipe.hset("kv", k, v)
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        t0 = time.perf_counter()
        got = {}
        cursor = 0
        while True:
            cursor, part = r.hscan("kv", cursor, count=1000)
            got.update(part)
            if cursor == 0:
                break
        elapsed = time.perf_counter() - t0
        assert len(got) == n
        r.close()
    return n / elapsed


def jetstream(n: int) -> float:
    import nats

    async def run(url: str) -> float:
        nc = await nats.connect(url)
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="kv", history=1)
        items = [(k.replace("key.", "key-"), v) for k, v in keys_values(n)]
        for i in range(0, n, 1000):
            # kv.put is a publish on $KV.<bucket>.<key>; with its own timeout, as a bucket of
            # 10^6 keys makes the server slow to answer 1,000 puts at once
            await asyncio.gather(*(js.publish(f"$KV.kv.{k}", v, timeout=60)
                                   for k, v in items[i:i + 1000]))
        t0 = time.perf_counter()
        watcher = await kv.watchall()
        got = 0
        while True:
            try:
                entry = await watcher.updates(timeout=60)
            except nats.errors.TimeoutError:
                raise RuntimeError(f"kv.watchall() stalled after {got:,} of {n:,} keys (no "
                                   f"update for 60 s)") from None
            if entry is None:
                break
            got += 1
        elapsed = time.perf_counter() - t0
        await watcher.stop()
        await nc.close()
        assert got == n, (got, n)
        return n / elapsed

    with nats_server() as server:
        return asyncio.run(run(server.endpoint))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    args = ap.parse_args(argv)
    print(f"### Snapshot of {args.keys:,} keys ({BODY} B values), a late joiner's read\n")
    print("| system | read path | keys/s | ZEPS ÷ it |")
    print("|---|---|---:|---:|")
    z = zeps(args.keys)
    rows = [("ZEPS SDK", "`Client.snapshot(\"\")` (SNAPSHOT, under credit)", z)]
    for name, path, fn in (("Redis, redis-py", "HSCAN COUNT 1000 of one hash", redis),
                           ("JetStream KV, nats-py", "`kv.watchall()` to its end marker",
                            jetstream)):
        try:
            rows.append((name, path, fn(args.keys)))
        except Exception as exc:                     # a missing peer is said, not fatal
            print(f"| {name} | {path} | not measured: {exc} | — |")
    for name, path, rate in rows:
        print(f"| {name} | {path} | {rate:,.0f} | {z / rate:.2f}× |")
    v = versions()
    print("\n" + ", ".join(f"{k} {val}" for k, val in v.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
