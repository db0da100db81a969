"""Replay.

One consumer reads a whole stream of ``replay_n`` messages from its first message.

The time runs from the start signal (the subscription is made inside it) to the last message.
ZEPS's stream is written with the journal library before the broker starts on it
(:mod:`bench.journals`); Redis's with ``redis-benchmark`` (redis-py without it), JetStream's with
nats-py core publishes. Python user's view: ZEPS SDK (``Client.subscribe()`` from the first
message, default credit window; read message by message with ``next()``, and in bulk with
``batches()``, counting each MessageBatch), redis-py (XREAD by 1000), nats-py (ordered push consumer,
``DeliverPolicy.ALL``). Server capacity: raw pyzmq ZEPS (one SUBSCRIBE, a 32 MiB credit window);
Redis and JetStream have no faster Python client.
"""
from __future__ import annotations

import os
import tempfile

from bench import journals, peers
from bench.measure import Figure, ratio
from bench.report import Table, prose
from bench.scenarios import NATS, RAW, REDIS, SDK, SDK_BULK, Settings, fresh_stream, replay
from bench.systems import nats_py, redis_benchmark, redis_py


def _rates(system, conn, stream, s: Settings, n: int) -> Figure:
    f = Figure("msg/s")
    for _ in range(s.reps):
        f.add(n / replay(system, conn, stream, s, n))
    return f


def run(s: Settings):
    n = s.replay_n
    figs = {}
    for size in s.sizes:
        stream = fresh_stream("replay")
        with tempfile.TemporaryDirectory(prefix="zeps-bench-replay-") as d:
            data = os.path.join(d, "data")
            journals.grow(data, stream, n, size)
            with peers.zeps_broker(data_dir=data) as b:
                figs[SDK, size] = _rates(SDK, b.endpoint, stream, s, n)
                figs[SDK_BULK, size] = _rates(SDK_BULK, b.endpoint, stream, s, n)
                figs[RAW, size] = _rates(RAW, b.endpoint, stream, s, n)
        if not REDIS.missing():
            with peers.redis_server() as r:
                if peers.missing("redis-benchmark"):
                    redis_py.fill(r.port, stream, n, size)
                else:
                    redis_benchmark.xadd(r.port, stream, n, size)
                figs[REDIS, size] = _rates(REDIS, r.port, stream, s, n)
        if not NATS.missing():
            with peers.nats_server() as ns:
                nats_py.prepare(ns.endpoint, stream)
                nats_py.fill(ns.endpoint, stream, n, size)
                figs[NATS, size] = _rates(NATS, ns.endpoint, stream, s, n)
    systems = (SDK, SDK_BULK, REDIS, NATS, RAW)
    t = Table(f"Replay of a {n:,}-message stream from its first message",
              prose(__doc__),
              ["body"] + [x.reader for x in systems]
              + ["SDK next() ÷ redis-py", "SDK next() ÷ nats-py", "SDK batches() ÷ redis-py",
                 "ZEPS raw ÷ redis-py"])
    for size in s.sizes:
        g = figs.get
        t.add(f"{size} B", *[figs[x, size].text() if (x, size) in figs else x.missing()
                             for x in systems],
              ratio(g((SDK, size)), g((REDIS, size))), ratio(g((SDK, size)), g((NATS, size))),
              ratio(g((SDK_BULK, size)), g((REDIS, size))), ratio(g((RAW, size)), g((REDIS, size))))
    return [t]
