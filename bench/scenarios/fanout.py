"""Live fan-out.

One publisher flat out, 1 / 10 / 50 subscribers (each its own process) reading live.

Delivered rate = subscribers x messages / (start signal -> the last subscriber has read the end
marker that follows the last message). A run publishes for the suite's publishing time but at
most ``fanout_deliveries / subscribers`` messages, so that a run costs about the same at any
fan-out. Python user's view: ZEPS SDK subscribers (``Client.subscribe(live=True)``, read with
``next()``, and in bulk with ``batches()``), redis-py
(XREAD), nats-py (ordered push consumers). Server capacity: raw pyzmq ZEPS clients, and
ZeroMQ's proxy as the floor with no journal; Redis and JetStream have no faster Python client,
so their capacity is the client-bound figure of the first view.
"""
from __future__ import annotations

from typing import Optional

from bench import peers
from bench.measure import Figure, ratio
from bench.report import Table, prose
from bench.scenarios import (NATS, PROXY, RAW, REDIS, SDK, SDK_BULK, Settings, fresh_stream,
                             pubsub)
from bench.systems import zmq_proxy


def _delivered(system, conn, s: Settings, size: int, subs: int,
               counted: Optional[list] = None) -> Figure:
    """Delivered msg/s of each repetition (``counted``, if given, gets each one's deliveries)."""
    f = Figure("msg/s")
    for _ in range(s.reps):
        o = pubsub(system, conn, fresh_stream("fanout"), s, size=size, consumers=subs,
                   limit=s.fanout_deliveries // subs)
        if any(n != o.stored for n in o.consumed):
            raise RuntimeError(f"{system.label}: subscribers got {o.consumed} of {o.stored}")
        f.add(sum(o.consumed) / o.seconds)
        if counted is not None:
            counted.append(sum(o.consumed))
    return f


def run(s: Settings):
    figs = {}
    points = [(size, subs) for size in s.sizes for subs in s.fanout]
    with peers.zeps_broker() as b:
        for size, subs in points:
            figs[SDK, size, subs] = _delivered(SDK, b.endpoint, s, size, subs)
            figs[SDK_BULK, size, subs] = _delivered(SDK_BULK, b.endpoint, s, size, subs)
            figs[RAW, size, subs] = _delivered(RAW, b.endpoint, s, size, subs)
    if not REDIS.missing():
        with peers.redis_server() as r:
            for size, subs in points:
                figs[REDIS, size, subs] = _delivered(REDIS, r.port, s, size, subs)
    if not NATS.missing():
        with peers.nats_server() as n:
            for size, subs in points:
                figs[NATS, size, subs] = _delivered(NATS, n.endpoint, s, size, subs)
    with zmq_proxy.serve() as p:
        for size, subs in points:
            figs[PROXY, size, subs] = _delivered(PROXY, p.conn, s, size, subs)
    systems = (SDK, SDK_BULK, REDIS, NATS, RAW, PROXY)
    t = Table("Live fan-out", prose(__doc__),
              ["body", "subscribers"] + [x.reader for x in systems]
              + ["SDK next() ÷ redis-py", "SDK next() ÷ nats-py", "SDK batches() ÷ redis-py",
                 "ZEPS raw ÷ proxy"])
    for size, subs in points:
        cells = [figs[x, size, subs].text() if (x, size, subs) in figs else x.missing()
                 for x in systems]
        g = figs.get
        t.add(f"{size} B", subs, *cells, ratio(g((SDK, size, subs)), g((REDIS, size, subs))),
              ratio(g((SDK, size, subs)), g((NATS, size, subs))),
              ratio(g((SDK_BULK, size, subs)), g((REDIS, size, subs))),
              ratio(g((RAW, size, subs)), g((PROXY, size, subs))))
    t.notes = ["Delivered messages per second, all subscribers together; every subscriber "
               "process shares the machine's cores with the server and the publisher."]
    return [t]
