"""End-to-end latency at a fixed rate.

One publisher paced at ``latency_rate`` msg/s (it sleeps until each message is due:
``bench.systems.PACER``), one live subscriber; each message carries its send time (the
machine's monotonic clock, shared by every process) and the subscriber records its delay on
arrival.

ZEPS SDK and raw pyzmq ZEPS (fsync ``interval``, no confirms), redis-py (one XADD per message,
XREAD BLOCK), nats-py (core publish into the stream, ordered push consumer), and ZeroMQ's proxy
(no journal) as the floor. Percentiles of each repetition; the table gives the median of the
repetitions with their min–max, in milliseconds.

The servers run side by side (idle while another is measured), the previous scenarios' writes
are flushed to disk first (``os.sync``), and every repetition measures each system in turn, so
the figures of a row, and the ratios, were taken seconds apart, under the same load.
"""
from __future__ import annotations

import contextlib
import os

from bench import peers
from bench.measure import Figure, percentile, ratio
from bench.report import Table, prose
from bench.scenarios import NATS, PROXY, RAW, REDIS, SDK, Settings, fresh_stream, pubsub
from bench.systems import zmq_proxy

PCTS = (50, 99, 99.9)


def _repetition(system, conn, s: Settings, size: int, figs) -> None:
    """One repetition of ``system``: its percentiles added to ``figs``."""
    o = pubsub(system, conn, fresh_stream("latency"), s, size=size, consumers=1,
               rate=s.latency_rate, seconds=s.latency_seconds, latency=True)
    if o.consumed != [o.stored]:
        raise RuntimeError(f"{system.label}: got {o.consumed} of {o.stored}")
    d = sorted(o.delays)
    for p in PCTS:
        figs.setdefault(p, Figure("ms")).add(percentile(d, p) / 1e6)


def run(s: Settings):
    figs = {}
    os.sync()                       # what earlier scenarios wrote is not flushed during this one
    with contextlib.ExitStack() as stack:
        zb = stack.enter_context(peers.zeps_broker())
        conns = [(SDK, zb.endpoint), (RAW, zb.endpoint)]
        if not REDIS.missing():
            conns.append((REDIS, stack.enter_context(peers.redis_server()).port))
        if not NATS.missing():
            conns.append((NATS, stack.enter_context(peers.nats_server()).endpoint))
        conns.append((PROXY, stack.enter_context(zmq_proxy.serve()).conn))
        for _ in range(s.reps):
            for size in s.sizes:
                for system, conn in conns:
                    _repetition(system, conn, s, size, figs.setdefault((system, size), {}))
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
