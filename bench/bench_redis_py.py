"""What bounds the suite's redis-py ingest baseline: pipeline depth, client work, connection setup.

One redis-server (AOF on, ``appendfsync everysec``, as in the suite's ``interval`` rows) and one
client in this process, XADDing the suite's messages (:func:`bench.systems.messages`, 100 B by
default) for ``--seconds`` per row, rows interleaved ``--runs`` times, median:

* redis-py with hiredis, one ``xadd()`` per call (its reply awaited), and pipelines
  (``transaction=False``) of 10, 100 (the suite's) and 1000 XADDs per round trip;
* the client's own work for a pipeline of 100, with no server: building the 100 commands and
  packing them (``pack_commands``, hiredis's ``pack_command``);
* the floor of any Python client: the same 100 XADDs packed once beforehand, sent over a plain
  socket and their replies parsed by ``hiredis.Reader``;
* connecting (``redis.Redis(...)`` and a PING): in the suite it happens before the start signal,
  outside the measured time.

    python -m bench.bench_redis_py [--seconds 1] [--runs 3] [--size 100]
"""
from __future__ import annotations

import argparse
import itertools
import socket
import statistics
import sys
import time

from bench import peers
from bench.systems import messages


def _rate(fn, seconds):
    """(messages per second, client CPU µs per message) of calling ``fn()`` (which sends some
    messages and returns how many) for ``seconds``; at least once (a process descheduled past
    a short deadline before its first call would otherwise divide by no message)."""
    n = 0
    w, p = time.perf_counter(), time.process_time()
    deadline = w + seconds
    while True:
        n += fn()
        if time.perf_counter() >= deadline:
            break
    return n / (time.perf_counter() - w), (time.process_time() - p) / n * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args(argv)
    why = peers.missing("redis")
    if why:
        print(f"redis: {why}", file=sys.stderr)
        return 2
    import hiredis
    import redis

    pool = [{k: b} for k, b in messages(args.size)]
    stream = "bench"
    rows = {}
    with peers.redis_server("everysec") as srv:
        r = redis.Redis(host="127.0.0.1", port=srv.port)
        r.ping()
        cycle = itertools.cycle(pool)

        def pipelined(depth):
            pipe = r.pipeline(transaction=False)

            def go():
                for _ in range(depth):
                    pipe.xadd(stream, next(cycle))
                pipe.execute()
                return depth
            return go

        def each():
            for _ in range(100):
                r.xadd(stream, next(cycle))
            return 100

        conn = r.connection_pool.get_connection()

        def pack_only():
            cmds = [("XADD", stream, "*", *next(iter(f.items()))) for f in
                    (next(cycle) for _ in range(100))]
            conn.pack_commands(cmds)
            return 100

        blob = b"".join(conn.pack_commands(
            [("XADD", stream, "*", *next(iter(f.items()))) for f in pool[:100]]))
        sock = socket.create_connection(("127.0.0.1", srv.port))
        reader = hiredis.Reader()

        def floor():
            sock.sendall(blob)
            got = 0
            while got < 100:
                reader.feed(sock.recv(1 << 16))
                while reader.gets() is not False:
                    got += 1
            return 100

        def connect():
            c = redis.Redis(host="127.0.0.1", port=srv.port)
            c.ping()
            c.close()
            return 1

        paths = [
            ("redis-py xadd() per call (each reply awaited)", each),
            ("redis-py pipeline of 10 XADD", pipelined(10)),
            ("redis-py pipeline of 100 XADD (the suite's)", pipelined(100)),
            ("redis-py pipeline of 1000 XADD", pipelined(1000)),
            ("plain socket, 100 pre-packed XADDs per round trip, hiredis.Reader", floor),
        ]
        for _ in range(args.runs):
            for label, fn in paths:
                rows.setdefault(label, []).append(_rate(fn, args.seconds))
                r.delete(stream)
            rows.setdefault("client work only: build and pack 100 XADDs (no server)", []).append(
                _rate(pack_only, args.seconds / 4))
            rows.setdefault("connect: redis.Redis() + PING + close", []).append(
                _rate(connect, args.seconds / 4))
        sock.close()
        r.close()
    print(f"{args.size} B bodies (1,000 different, 64 keys), redis-server with appendfsync "
          f"everysec, one client process; {args.seconds:g} s per row, median of {args.runs} "
          f"interleaved runs\n")
    print("| path | per second | client CPU µs per message (per connection) |")
    print("|---|---:|---:|")
    for label, got in rows.items():
        rate = statistics.median(x for x, _ in got)
        cpu = statistics.median(y for _, y in got)
        unit = "connections" if label.startswith("connect") else "msg"
        print(f"| {label} | {rate:,.0f} {unit}/s | {cpu:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
