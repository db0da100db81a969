"""A subscriber that never takes what it asked for: its cost to the publisher and to the broker.

An SDK publisher publishes 100 B messages flat out into a fresh stream (fsync ``interval``)
alone, then with a subscriber to that stream that SUBSCRIBEs live and never grants credit (bare
pyzmq), then with an SDK subscriber that never reads (its 8 MiB credit window fills, then its
credit is zero), interleaved in each repetition. Reported: the publish rate and its ratio to the
publisher alone, the broker's RSS after the run and how much it grew during it. ZEPS only:
Redis Streams and JetStream pull consumers are pulled, so a reader that does not read is
unknown to the server.
"""
from __future__ import annotations

import zmq

from bench import peers
from bench.measure import Figure, Holder, ratio
from bench.report import Table, prose
from bench.scenarios import SDK, Settings, fresh_stream, pubsub
from bench.systems import zeps_raw
from zeps.clients import Client
from zeps.protocol import commands as c

SIZE = 100
MB = 1 << 20


def _zero_credit(endpoint, stream, *, ready, stop):
    ctx = zmq.Context()
    s = zeps_raw.attached(ctx, endpoint, stream)
    zeps_raw.request(s, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
    ready()
    stop()
    s.close()
    ctx.term()


def _never_reads(endpoint, stream, *, ready, stop):
    with Client(endpoint, stream, create=True) as cl:      # before the publisher: it creates it
        cl.subscribe("", live=True)
        ready()
        stop()


CASES = (("publisher alone", None),
         ("+ a subscriber with zero credit (SUBSCRIBE, no CREDIT)", _zero_credit),
         ("+ an SDK subscriber that never reads", _never_reads))


def run(s: Settings):
    rate = {name: Figure("msg/s") for name, _ in CASES}
    rss = {name: Figure("MiB") for name, _ in CASES}
    growth = {name: Figure("MiB") for name, _ in CASES}
    with peers.zeps_broker() as b:
        for _ in range(s.reps):
            for name, holder in CASES:
                stream = fresh_stream("zerocredit")
                before = b.rss()
                if holder is None:
                    o = pubsub(SDK, b.endpoint, stream, s, size=SIZE)
                else:
                    with Holder(holder, b.endpoint, stream):
                        o = pubsub(SDK, b.endpoint, stream, s, size=SIZE)
                after = b.rss()
                rate[name].add(o.published / o.seconds)
                rss[name].add(after / MB)
                growth[name].add((after - before) / MB)
    alone = CASES[0][0]
    t = Table("A zero-credit subscriber's cost", prose(__doc__),
              ["case", "SDK publish rate", "÷ publisher alone", "broker RSS after",
               "broker RSS growth during the run"])
    for name, _ in CASES:
        t.add(name, rate[name].text(), ratio(rate[name], rate[alone]), rss[name].text(),
              growth[name].text())
    return [t]
