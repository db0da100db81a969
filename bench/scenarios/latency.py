"""End-to-end latency at a fixed rate.

One publisher paced at ``latency_rate`` msg/s (it sleeps until each message is due:
``bench.systems.PACER``), one live subscriber; each message carries its send time (the
machine's monotonic clock, shared by every process) and the subscriber records its delay on
arrival.

ZEPS SDK and raw pyzmq ZEPS (fsync ``interval``, no confirms), redis-py (one XADD per message,
XREAD BLOCK), nats-py (core publish into the stream, ordered push consumer), and ZeroMQ's proxy
(no journal) as the floor. Percentiles of each repetition; the table gives the median of the
repetitions with their min–max, in milliseconds.
"""
from __future__ import annotations

from bench import peers
from bench.measure import Figure, percentile, ratio
from bench.report import Table, prose
from bench.scenarios import NATS, PROXY, RAW, REDIS, SDK, Settings, fresh_stream, pubsub
from bench.systems import zmq_proxy

PCTS = (50, 99, 99.9)


def _latency(system, conn, s: Settings, size: int):
    figs = {p: Figure("ms") for p in PCTS}
    for _ in range(s.reps):
        o = pubsub(system, conn, fresh_stream("latency"), s, size=size, consumers=1,
                   rate=s.latency_rate, seconds=s.latency_seconds, latency=True)
        if o.consumed != [o.stored]:
            raise RuntimeError(f"{system.label}: got {o.consumed} of {o.stored}")
        d = sorted(o.delays)
        for p in PCTS:
            figs[p].add(percentile(d, p) / 1e6)
    return figs


def run(s: Settings):
    figs = {}
    with peers.zeps_broker() as b:
        for size in s.sizes:
            figs[SDK, size] = _latency(SDK, b.endpoint, s, size)
            figs[RAW, size] = _latency(RAW, b.endpoint, s, size)
    if not REDIS.missing():
        with peers.redis_server() as r:
            for size in s.sizes:
                figs[REDIS, size] = _latency(REDIS, r.port, s, size)
    if not NATS.missing():
        with peers.nats_server() as n:
            for size in s.sizes:
                figs[NATS, size] = _latency(NATS, n.endpoint, s, size)
    with zmq_proxy.serve() as p:
        for size in s.sizes:
            figs[PROXY, size] = _latency(PROXY, p.conn, s, size)
    t = Table(f"End-to-end latency at {s.latency_rate:,.0f} msg/s",
              prose(__doc__),
              ["body", "system", "p50", "p99", "p99.9", "its p99 ÷ ZEPS SDK's"])
    for size in s.sizes:
        for x in (SDK, RAW, REDIS, NATS, PROXY):
            f = figs.get((x, size))
            if f is None:
                t.add(f"{size} B", x.label, x.missing(), "", "", "—")
                continue
            t.add(f"{size} B", x.label, *[f[p].text() for p in PCTS],
                  ratio(f[99], figs[SDK, size][99]))
    t.notes = [f"{s.latency_rate * s.latency_seconds:,.0f} messages per repetition; "
               "a ratio above 1 means a longer p99 than ZEPS SDK's."]
    return [t]
