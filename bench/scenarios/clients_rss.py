"""Server memory against connected clients.

The server's resident set size (RSS, from /proc) with no client, then with 10 ... 1000 clients
that each subscribe to one stream and stay connected (held by one process): ZEPS — raw pyzmq
DEALERs, each ATTACHed, SUBSCRIBEd live and granted 32 MiB of credit; Redis — redis-py
connections that each made one XREAD; JetStream — nats-py connections with one ordered push
consumer each. The stream holds no message. A fresh server for each count; the table gives the
median of the repetitions with their min–max, and the growth per client over the idle server.
"""
from __future__ import annotations

import asyncio

import zmq

from bench import peers
from bench.measure import Figure, Holder, ratio
from bench.report import Table, prose
from bench.scenarios import NATS, REDIS, Settings
from bench.systems import nats_py, redis_py, zeps_raw
from zeps.protocol import commands as c
from zeps.protocol import encode

STREAM = "rss"
MB = 1 << 20


def _zeps_clients(endpoint, n, *, ready, stop):
    ctx = zmq.Context()
    socks = []
    for _ in range(n):
        s = zeps_raw.attached(ctx, endpoint, STREAM)
        zeps_raw.request(s, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
        s.send(encode(c.Credit(zeps_raw.WINDOW)))
        socks.append(s)
    zeps_raw.request(socks[-1], c.Ping(), c.PingOk)     # the last CREDIT was read
    ready()
    stop()
    for s in socks:
        s.close()
    ctx.term()


def _redis_clients(port, n, *, ready, stop):
    conns = [redis_py.connect(port) for _ in range(n)]
    for r in conns:
        r.xread({STREAM: "0-0"}, count=1)
    ready()
    stop()
    for r in conns:
        r.close()


def _nats_clients(url, n, *, ready, stop):
    async def main():
        ncs = []
        for _ in range(n):
            nc = await nats_py.connect(url)
            await nc.jetstream().subscribe(f"{STREAM}.>", ordered_consumer=True)
            ncs.append(nc)
        await ncs[-1].flush()
        ready()
        stop()
        for nc in ncs:
            await nc.close()
    asyncio.run(main())


def _measure(s: Settings, start, holder, conn_of, counts, prepare=None):
    idle, with_clients = Figure("MiB"), {n: Figure("MiB") for n in counts}
    for _ in range(s.reps):
        for n in counts:
            with start() as server:
                conn = conn_of(server)
                if prepare:
                    prepare(conn, STREAM)
                idle.add(server.rss() / MB)
                with Holder(holder, conn, n, timeout=s.timeout):
                    with_clients[n].add(server.rss() / MB)
    return idle, with_clients


def run(s: Settings):
    rows = {}
    rows["ZEPS"] = _measure(s, peers.zeps_broker, _zeps_clients, lambda b: b.endpoint, s.clients)
    why = {"ZEPS": None, "Redis": REDIS.missing(), "JetStream": NATS.missing()}
    if not why["Redis"]:
        rows["Redis"] = _measure(s, peers.redis_server, _redis_clients, lambda r: r.port,
                                 s.clients)
    if not why["JetStream"]:
        rows["JetStream"] = _measure(s, peers.nats_server, _nats_clients, lambda n: n.endpoint,
                                     s.clients, nats_py.prepare)
    t = Table("Server RSS vs connected clients", prose(__doc__),
              ["system", "clients", "server RSS", "÷ with the fewest clients",
               "growth per client over idle"])
    for name in ("ZEPS", "Redis", "JetStream"):
        if name not in rows:
            t.add(name, "—", why[name], "—", "—")
            continue
        idle, figs = rows[name]
        t.add(name, 0, idle.text(), "—", "—")
        for n in s.clients:
            per = (figs[n].median - idle.median) * 1024 / n
            t.add(name, f"{n:,}", figs[n].text(), ratio(figs[n], figs[s.clients[0]]),
                  f"{per:.1f} KiB")
    return [t]
