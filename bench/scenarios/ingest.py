"""Ingest.

Publishers flat out into one stream, until the server has every message.

For each body size, 1 and 4 publishers (each its own process), the broker's fsync policy
``interval`` (ZEPS's group commit every 50 ms; Redis AOF ``appendfsync everysec``) and ``always``
(ZEPS: an fsync per written batch; Redis: ``appendfsync always``), without and with confirms.
Rate = messages stored / (start signal -> the last publisher's flush, or its last CONFIRM,
returned, and the server holds every message).

Python user's view: ZEPS SDK, redis-py (pipelined by 100), nats-py. Server capacity: raw pyzmq
ZEPS publishers, ``redis-benchmark -P 100`` (50 connections), and ZeroMQ's proxy (no journal)
with one consumer counting what arrives.
"""
from __future__ import annotations


from bench import peers
from bench.measure import Figure, ratio
from bench.report import Table, prose
from bench.scenarios import NATS, PROXY, RAW, REDIS, SDK, Settings, fresh_stream, pubsub
from bench.systems import redis_benchmark, zmq_proxy

REDIS_FSYNC = {"interval": "everysec", "always": "always"}
NOT_MEASURED = "not measured"


def _rate(system, conn, s: Settings, losses: list, **kw) -> float:
    """Messages the server stored per second; what it dropped is noted in ``losses``."""
    o = pubsub(system, conn, fresh_stream("ingest"), s, **kw)
    if o.lost:
        losses.append(f"{system.label}, {kw['size']} B, {kw['publishers']} publisher(s): "
                      f"{o.lost:,} of {o.published:,} messages ({o.lost / o.published:.0%}) "
                      f"never stored")
    return o.stored / o.seconds


def _redis_benchmark(port: int, n: int, size: int) -> float:
    return redis_benchmark.xadd(port, fresh_stream("ingest"), n, size)


def _figure(s: Settings, measure, *args, **kw) -> Figure:
    """``measure(*args, **kw)`` (a rate) once per repetition."""
    f = Figure("msg/s")
    for _ in range(s.reps):
        f.add(measure(*args, **kw))
    return f


def run(s: Settings):
    configs = [(size, pubs, fsync, confirms) for size in s.sizes for pubs in s.publishers
               for fsync in ("interval", "always") for confirms in (False, True)]
    figs, losses = {}, []
    for fsync in ("interval", "always"):
        with peers.zeps_broker(fsync) as b:
            for size, pubs, f, confirms in configs:
                if f != fsync:
                    continue
                kw = dict(size=size, publishers=pubs, confirms=confirms)
                for name, system in (("sdk", SDK), ("raw", RAW)):
                    figs[name, size, pubs, fsync, confirms] = _figure(
                        s, _rate, system, b.endpoint, s, losses, **kw)
    redis_why, bench_why, nats_why = (peers.missing("redis"), peers.missing("redis-benchmark"),
                                      peers.missing("nats"))
    for fsync in ("interval", "always"):
        if redis_why and bench_why:
            break
        with peers.redis_server(REDIS_FSYNC[fsync]) as r:
            for size in s.sizes:
                n = int(s.seconds * 150_000)
                if not bench_why:
                    figs["rbench", size, fsync] = _figure(s, _redis_benchmark, r.port, n, size)
                for pubs in s.publishers:
                    if not redis_why:
                        figs["redis", size, pubs, fsync] = _figure(
                            s, _rate, REDIS, r.port, s, losses, size=size, publishers=pubs)
    if not nats_why:
        with peers.nats_server() as n:
            for size in s.sizes:
                for pubs in s.publishers:
                    for confirms in (False, True):
                        figs["nats", size, pubs, confirms] = _figure(
                            s, _rate, NATS, n.endpoint, s, losses, size=size, publishers=pubs,
                            confirms=confirms)
    with zmq_proxy.serve() as p:
        for size in s.sizes:
            for pubs in s.publishers:
                figs["proxy", size, pubs] = _figure(
                    s, _rate, PROXY, p.conn, s, losses, size=size, publishers=pubs, consumers=1)

    user = Table("Ingest — the Python user's view", prose(__doc__),
                 ["body", "publishers", "fsync", "confirms", SDK.label, REDIS.label, NATS.label,
                  "ZEPS SDK ÷ Redis", "ZEPS SDK ÷ JetStream"])
    cap = Table("Ingest — server capacity", "Each server driven by its fastest client; JetStream "
                "has no faster client here than nats-py, so its figures above are client-bound.",
                ["body", "publishers", "fsync", "confirms", RAW.label,
                 "redis-benchmark -P 100 XADD", PROXY.label + " (no journal)",
                 "ZEPS raw ÷ redis-benchmark", "ZEPS raw ÷ proxy"])
    for size, pubs, fsync, confirms in configs:
        sdk, raw = figs["sdk", size, pubs, fsync, confirms], figs["raw", size, pubs, fsync, confirms]
        rd = figs.get(("redis", size, pubs, fsync))
        nt = figs.get(("nats", size, pubs, confirms)) if fsync == "interval" else None
        rb = figs.get(("rbench", size, fsync))
        px = figs["proxy", size, pubs] if not confirms else None
        row = (f"{size} B", pubs, fsync, "yes" if confirms else "no")
        user.add(*row, sdk.text(), rd.text() if rd else redis_why or NOT_MEASURED,
                 nt.text() if nt else nats_why or "no fsync setting in nats-server 2.9",
                 ratio(sdk, rd), ratio(sdk, nt))
        cap.add(*row, raw.text(), rb.text() if rb else bench_why, px.text() if px else
                "no confirms", ratio(raw, rb), ratio(raw, px))
    user.notes = [
        "Redis answers every XADD: its rows with and without confirms are one measurement "
        "(durable per `appendfsync`).",
        "JetStream (nats-server 2.9) syncs its file store on its own schedule, with no setting "
        "for it: its figures sit in the `interval` rows; `always` does not exist there. Without "
        "confirms it is a core publish into the stream's subject (the time runs until the "
        "stream holds every message); with confirms, `js.publish_async` and "
        "`publish_async_completed()`.",
    ] + [f"Rate of what was stored; dropped by the server: {x}." for x in losses]
    cap.notes = [
        "redis-benchmark uses 50 connections whatever the publishers column says, and times "
        "itself; its rows with and without confirms are one measurement.",
        "The proxy row of a configuration with confirms is empty: a PUB socket gets no "
        "acknowledgement.",
    ]
    return [user, cap]
