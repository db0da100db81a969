"""Ingest.

Publishers flat out into one stream, until the server has every message.

For each body size, 1 and 4 publishers (each its own process) and the broker's fsync policy
``interval`` (ZEPS's group commit every 50 ms; Redis AOF ``appendfsync everysec``) or ``always``
(ZEPS: an fsync per written batch; Redis: ``appendfsync always``). Rate = messages stored /
(start signal -> the last publisher's flush, or its last CONFIRM or reply, returned, and the
server holds every message). Every publisher cycles through the same 1,000 different bodies
under 64 keys, prepared before the start signal. Each column names its client path; tables
compare like with like: 100 messages per call, one call per message, and each server driven by
its fastest client.

The servers of one fsync policy run side by side (idle while another is measured) and every
repetition measures each column in turn, so the figures of a row were taken minutes apart at
most, under the same load.
"""
from __future__ import annotations

import contextlib

from bench import peers
from bench.measure import Figure, ratio
from bench.report import Table, prose
from bench.scenarios import (NATS, PROXY, RAW, REDIS, REDIS_EACH, SDK, SDK_EACH, Settings, System,
                             fresh_stream, pubsub)
from bench.systems import redis_benchmark, redis_py, zmq_proxy

REDIS_FSYNC = {"interval": "everysec", "always": "always"}
NOT_MEASURED = "not measured"
NO_FSYNC = "no fsync setting in nats-server 2.9"

# Columns: (key, label). The key names what is measured, the label the client path.
BATCH_COLS = [
    ("sdk", "ZEPS SDK, publish_batch(100), no confirms"),
    ("sdk+c", "ZEPS SDK, publish_batch(100) + wait_for_confirms()"),
    ("redis", "Redis, redis-py pipeline of 100 XADD (every XADD answered)"),
]
EACH_COLS = [
    ("sdk1", "ZEPS SDK, publish() per message, no confirms"),
    ("sdk1+c", "ZEPS SDK, publish() per message + wait_for_confirms()"),
    ("redis1", "Redis, redis-py xadd() per call (each reply awaited)"),
    ("nats", "JetStream, nats-py nc.publish() (core, no ack)"),
    ("nats+c", "JetStream, nats-py js.publish_async() + acks awaited"),
]
CAP_COLS = [
    ("raw", "ZEPS, raw pyzmq PUBLISH-BATCH of 100, no confirms"),
    ("raw+c", "ZEPS, raw pyzmq PUBLISH-BATCH of 100 + CONFIRM"),
    ("rbench", "redis-benchmark -P 100 XADD, one connection per publisher"),
    ("proxy", "ZeroMQ XSUB/XPUB proxy (no journal, no confirms)"),
]
LABELS = dict(BATCH_COLS + EACH_COLS + CAP_COLS)


def _rate(system: System, conn, s: Settings, losses: list, **kw) -> float:
    """Messages the server stored per second; what it dropped is noted in ``losses``. The
    stream is dropped afterwards where the system can (outside the measured time)."""
    stream = fresh_stream("ingest")
    o = pubsub(system, conn, stream, s, **kw)
    if hasattr(system.module, "drop"):
        system.module.drop(conn, stream)
    if o.lost:
        losses.append(f"{system.label}{', with acks' if kw.get('confirms') else ''}, "
                      f"{kw['size']} B, {kw['publishers']} publisher(s): {o.lost:,} of "
                      f"{o.published:,} messages ({o.lost / o.published:.0%}) never stored")
    return o.stored / o.seconds


def _redis_benchmark(port: int, s: Settings, size: int, connections: int) -> float:
    stream = fresh_stream("ingest")
    rate = redis_benchmark.xadd(port, stream, int(s.seconds * 150_000), size, connections)
    if not peers.missing("redis"):
        redis_py.drop(port, stream)
    return rate


def _measures(fsync, size, pubs, zb, rs, ns, px, s, losses):
    """(column key, function giving one rate) for every column measurable in this pass."""
    kw = dict(size=size, publishers=pubs)
    out = [
        ("sdk", lambda: _rate(SDK, zb.endpoint, s, losses, **kw)),
        ("sdk+c", lambda: _rate(SDK, zb.endpoint, s, losses, confirms=True, **kw)),
        ("sdk1", lambda: _rate(SDK_EACH, zb.endpoint, s, losses, **kw)),
        ("sdk1+c", lambda: _rate(SDK_EACH, zb.endpoint, s, losses, confirms=True, **kw)),
        ("raw", lambda: _rate(RAW, zb.endpoint, s, losses, **kw)),
        ("raw+c", lambda: _rate(RAW, zb.endpoint, s, losses, confirms=True, **kw)),
        ("proxy", lambda: _rate(PROXY, px.conn, s, losses, consumers=1, **kw)),
    ]
    if rs is not None and not peers.missing("redis"):
        out += [("redis", lambda: _rate(REDIS, rs.port, s, losses, **kw)),
                ("redis1", lambda: _rate(REDIS_EACH, rs.port, s, losses, **kw))]
    if rs is not None and not peers.missing("redis-benchmark"):
        out.append(("rbench", lambda: _redis_benchmark(rs.port, s, size, pubs)))
    if ns is not None:
        out += [("nats", lambda: _rate(NATS, ns.endpoint, s, losses, **kw)),
                ("nats+c", lambda: _rate(NATS, ns.endpoint, s, losses, confirms=True, **kw))]
    return out


def run(s: Settings):
    points = [(size, pubs) for size in s.sizes for pubs in s.publishers]
    figs, losses, slow = {}, [], {}
    redis_why, bench_why, nats_why = (peers.missing("redis"), peers.missing("redis-benchmark"),
                                      peers.missing("nats"))
    for fsync in ("interval", "always"):
        with contextlib.ExitStack() as stack:
            zb = stack.enter_context(peers.zeps_broker(fsync))
            rs = None if redis_why and bench_why else stack.enter_context(
                peers.redis_server(REDIS_FSYNC[fsync]))
            ns = stack.enter_context(peers.nats_server()) \
                if fsync == "interval" and not nats_why else None
            px = stack.enter_context(zmq_proxy.serve())
            for _ in range(s.reps):
                for size, pubs in points:
                    for key, measure in _measures(fsync, size, pubs, zb, rs, ns, px, s, losses):
                        figs.setdefault((key, size, pubs, fsync), Figure("msg/s")).add(measure())
            if rs is not None:
                slow[fsync] = (rs.log_count(peers.REDIS_SLOW_FSYNC),
                               rs.log_count(peers.REDIS_AOF_REWRITE))

    def cell(key, size, pubs, fsync):
        f = figs.get((key, size, pubs, fsync))
        if f is not None:
            return f.text()
        if key.startswith("nats"):
            return nats_why or NO_FSYNC
        if key.startswith("redis"):
            return redis_why or NOT_MEASURED
        if key == "rbench":
            return bench_why or NOT_MEASURED
        return NOT_MEASURED

    def r(a, b, size, pubs, fsync):
        return ratio(figs.get((a, size, pubs, fsync)), figs.get((b, size, pubs, fsync)))

    head = ["body", "publishers", "fsync"]
    batch = Table("Ingest — 100 messages per call (the Python user's view)", prose(__doc__),
                  head + [label for _, label in BATCH_COLS]
                  + ["SDK no confirms ÷ redis-py", "SDK + confirms ÷ redis-py"])
    each = Table("Ingest — one call per message (the Python user's view)",
                 "The same publishers calling once per message. ZEPS's `publish()` returns "
                 "before the broker answers (the SDK batches what it has not sent yet); "
                 "redis-py's `xadd()` waits for each reply; nats-py's `nc.publish()` is buffered "
                 "by its client, `js.publish_async()` has its acks awaited together at the end, "
                 "as `wait_for_confirms()` does.",
                 head + [label for _, label in EACH_COLS]
                 + ["ZEPS publish() ÷ nats-py nc.publish()",
                    "ZEPS publish() + confirms ÷ nats-py publish_async() + acks",
                    "ZEPS publish() + confirms ÷ redis-py xadd()"])
    cap = Table("Ingest — server capacity",
                "Each server driven by its fastest client: pre-encoded frames (ZEPS), Redis's C "
                "client (`redis-benchmark`, as many connections as there are publishers; its "
                "values carry a random number each, `-r`), and ZeroMQ's C++ proxy with one "
                "consumer counting what arrives (the floor with no journal). JetStream has no "
                "faster client here than nats-py: its figures above are client-bound.",
                head + [label for _, label in CAP_COLS]
                + ["ZEPS raw ÷ redis-benchmark", "ZEPS raw ÷ proxy"])
    for size, pubs in points:
        for fsync in ("interval", "always"):
            row = (f"{size} B", pubs, fsync)
            batch.add(*row, *[cell(k, size, pubs, fsync) for k, _ in BATCH_COLS],
                      r("sdk", "redis", size, pubs, fsync), r("sdk+c", "redis", size, pubs, fsync))
            each.add(*row, *[cell(k, size, pubs, fsync) for k, _ in EACH_COLS],
                     r("sdk1", "nats", size, pubs, fsync), r("sdk1+c", "nats+c", size, pubs, fsync),
                     r("sdk1+c", "redis1", size, pubs, fsync))
            cap.add(*row, *[cell(k, size, pubs, fsync) for k, _ in CAP_COLS],
                    r("raw", "rbench", size, pubs, fsync), r("raw", "proxy", size, pubs, fsync))
    batch.notes = ["Redis answers every XADD: durable per `appendfsync` when the reply comes, "
                   "so its rows compare with ZEPS's with confirms."]
    each.notes = [
        "JetStream (nats-server 2.9) syncs its file store on its own schedule, with no setting "
        "for it: its figures sit in the `interval` rows; `always` does not exist there. Without "
        "acks the time runs until the stream holds every message.",
    ] + [f"Rate of what was stored; dropped by the server: {x}." for x in losses]
    for fsync, (stalls, rewrites) in slow.items():
        batch.notes.append(
            f"redis-server (`appendfsync {REDIS_FSYNC[fsync]}`), in the `{fsync}` runs: "
            f"\"Asynchronous AOF fsync is taking too long\" logged {stalls} time(s) (each time "
            f"the disk held its writes back), {rewrites} AOF rewrite(s) (a forked child writing "
            f"the whole dataset; every run's stream is deleted after it, so the dataset stays "
            f"small).")
    cap.notes = ["`redis-benchmark` times itself (first request to last reply)."]
    return [batch, each, cap]
