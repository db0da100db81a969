"""Durable consumers with explicit acks (issue 19): a group of 1 and of 4 members drains N
messages, ZEPS beside Redis Streams and JetStream, in the same run.

* ZEPS: a durable consumer (``Client.add_consumer``, explicit acks); each member is
  ``Client.consume(name)`` iterated by ``batches()``, every message ``.ack()``-ed (the SDK sends
  one ACK of ranges per batch).
* Redis (redis-py + hiredis): ``XGROUP CREATE``; each member loops ``XREADGROUP COUNT 100`` with
  the ``XACK`` of the previous batch in the same pipeline (one round trip per batch).
* JetStream (nats-py): a durable pull consumer (``AckExplicit``); each member loops
  ``fetch(100)`` and ``msg.ack()`` each message.

Every member is a process of its own (the machine's cores, not one interpreter's GIL). The N
messages (100 B bodies) are written before the clock starts; the members connect and wait; the
clock runs from "go" until the server says every message was acknowledged (ZEPS: the
consumer's floor; Redis: the group's last delivered id and an empty pending list; JetStream: the
consumer's ack floor), polled every 5 ms (the ZEPS broker runs with ``--admin-rate 1000`` so
that the watcher's CONSUMER-INFO polls are not refused). Servers run here on 127.0.0.1 and are
stopped.

    python -m bench.bench_consumers [--messages 200000]
"""
from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from bench.peers import REPO, nats_server, redis_server, versions, zeps_broker

BODY = b"x" * 100
POLL = 0.005
BATCH = 100


# ----------------------------------------------------------------------------- members

def member_zeps(endpoint: str) -> None:
    from zeps.clients import Client
    with Client(endpoint, "s") as client:
        client.info()
        ready()
        with client.consume("g") as con:
            for batch in con.batches():
                for m in batch:
                    m.ack()


def member_redis(port: str, name: str) -> None:
    import redis as redis_py
    r = redis_py.Redis(host="127.0.0.1", port=int(port))
    r.ping()
    ready()
    acks: list = []
    while True:
        pipe = r.pipeline(transaction=False)
        if acks:
            pipe.xack("s", "g", *acks)
        pipe.xreadgroup("g", name, {"s": ">"}, count=BATCH, block=100)
        got = pipe.execute()[-1]
        acks = [mid for _s, entries in (got or []) for mid, _f in entries]


def member_nats(url: str) -> None:
    import nats

    async def run():
        nc = await nats.connect(url)
        js = nc.jetstream()
        psub = await js.pull_subscribe("s", durable="g")
        await asyncio.get_running_loop().run_in_executor(None, ready)
        while True:
            try:
                msgs = await psub.fetch(BATCH, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                await m.ack()

    asyncio.run(run())


def ready() -> None:
    """A member is connected: say so, and wait for "go"."""
    print("ready", flush=True)
    input()


def start_members(kind: str, args, n: int):
    procs = []
    for i in range(n):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.bench_consumers", "--member", kind, *args, f"m{i}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(REPO), text=True))
    return procs


def go_and_time(procs, done) -> float:
    """Wait until every member is connected, say "go", time until ``done()``."""
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a member did not start")
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        while not done():
            time.sleep(POLL)
        return time.perf_counter() - t0
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ----------------------------------------------------------------------------- systems

def zeps(n: int, members: int) -> float:
    from zeps.clients import Client
    with zeps_broker(extra=("--admin-rate", "1000")) as server:   # the 5 ms polls of the watcher
        with Client(server.endpoint, "s", create=True, confirms=True, timeout=60) as pub:
            for i in range(0, n, 1000):
                pub.publish_batch([(f"k.{j}", BODY) for j in range(i, min(n, i + 1000))])
            pub.wait_for_confirms(120)
            pub.add_consumer("g", ack="explicit", max_ack_pending=10_000)
            procs = start_members("zeps", [server.endpoint], members)
            elapsed = go_and_time(procs, lambda: pub.consumer_info("g")["floor"] >= n)
    return n / elapsed


def redis(n: int, members: int) -> float:
    import redis as redis_py
    with redis_server() as server:
        r = redis_py.Redis(host="127.0.0.1", port=server.port)
        pipe = r.pipeline(transaction=False)
        last = None
        for i in range(n):
            pipe.xadd("s", {"k": f"k.{i}", "v": BODY})
            if i % 1000 == 999:
                last = pipe.execute()[-1]
        got = pipe.execute()
        last = got[-1] if got else last
        r.xgroup_create("s", "g", id="0")
        procs = start_members("redis", [str(server.port)], members)

        def done():
            info = [g for g in r.xinfo_groups("s") if g["name"] in (b"g", "g")][0]
            return info["last-delivered-id"] == last and info["pending"] == 0

        elapsed = go_and_time(procs, done)
        r.close()
    return n / elapsed


def jetstream(n: int, members: int) -> float:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig

    async def load(url):
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"])
        for i in range(0, n, 1000):
            await asyncio.gather(*(js.publish("s", BODY) for _ in range(i, min(n, i + 1000))))
        await js.add_consumer("S", ConsumerConfig(durable_name="g", ack_policy=AckPolicy.EXPLICIT,
                                                  max_ack_pending=10_000))
        return nc, js

    async def floor(js):
        info = await js.consumer_info("S", "g")
        return info.ack_floor.stream_seq

    with nats_server() as server:
        loop = asyncio.new_event_loop()
        nc, js = loop.run_until_complete(load(server.endpoint))
        procs = start_members("nats", [server.endpoint], members)
        elapsed = go_and_time(procs, lambda: loop.run_until_complete(floor(js)) >= n)
        loop.run_until_complete(nc.close())
        loop.close()
    return n / elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--member", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.member:
        kind, *rest = args.member
        {"zeps": lambda: member_zeps(rest[0]), "redis": lambda: member_redis(rest[0], rest[1]),
         "nats": lambda: member_nats(rest[0])}[kind]()
        return 0
    n = args.messages
    print(f"### A durable consumer with explicit acks: {n:,} messages of {len(BODY)} B, "
          f"drained by a group of 1 and of 4 members\n")
    print("| system | members | msg/s acknowledged | ZEPS ÷ it |")
    print("|---|---:|---:|---:|")
    results = {}
    for members in (1, 4):
        results[("ZEPS SDK", members)] = zeps(n, members)
    for name, fn in (("Redis, redis-py XREADGROUP + XACK pipelined", redis),
                     ("JetStream, nats-py pull consumer", jetstream)):
        for members in (1, 4):
            try:
                results[(name, members)] = fn(n, members)
            except Exception as exc:                  # a missing peer is said, not fatal
                results[(name, members)] = exc
    for (name, members), rate in results.items():
        z = results[("ZEPS SDK", members)]
        if isinstance(rate, Exception):
            print(f"| {name} | {members} | not measured: {rate} | — |")
        else:
            print(f"| {name} | {members} | {rate:,.0f} | {z / rate:.2f}× |")
    print("\n" + ", ".join(f"{k} {v}" for k, v in versions().items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
