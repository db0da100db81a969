"""Routing cost against the number of subscriptions.

One raw pyzmq publisher flat out (100 B, key ``bench.key``) and one raw subscriber with the
pattern that matches it (prefix ``bench.``, or regex ``~^bench\\.``); another client holds K-1
more patterns of the same kind on the stream that match nothing (``x<i>.`` / ``~^x<i>\\.``) with
credit granted, so the broker tests every message against K patterns. The broker runs with
``--max-subscriptions``, ``--max-regex-subscriptions`` and ``--max-regex-per-stream`` raised to
allow them. Reported: delivered msg/s and the time per message relative to K = 1 (the routing
cost). ZEPS only: Redis Streams have no server-side filter (every reader reads the whole
stream); NATS subject routing is not measured here.
"""
from __future__ import annotations

import zmq

from bench import peers
from bench.measure import Figure, Holder, ratio
from bench.report import Table, prose
from bench.scenarios import RAW, Settings, fresh_stream, pubsub
from bench.systems import zeps_raw
from zeps.protocol import commands as c
from zeps.protocol import decode, encode

SIZE = 100
#: SUBSCRIBEs sent before their replies are read.
PIPELINE = 100


def _patterns(kind: str, k: int):
    return [f"x{i}." if kind == "prefix" else f"~^x{i}\\." for i in range(k)]


def _hold_patterns(endpoint, stream, patterns, *, ready, stop):
    ctx = zmq.Context()
    s = zeps_raw.attached(ctx, endpoint, stream)
    # Pipelined by PIPELINE: a client that sends 10,000 requests before reading any reply is
    # one that does not read, and the broker forgets it once it holds more than 256 replies
    # it cannot send (--client-queue; docs/operations.md).
    for lo in range(0, len(patterns), PIPELINE):
        part = patterns[lo:lo + PIPELINE]
        for p in part:
            s.send(encode(c.Subscribe(p, c.LATEST_LIVE)))
        for _ in part:
            got = decode(s.recv())
            if not isinstance(got, c.SubscribeOk):
                raise RuntimeError(f"SUBSCRIBE refused: {got}")
    s.send(encode(c.Credit(zeps_raw.WINDOW)))
    ready()
    stop()
    s.close()
    ctx.term()


def _matching(kind: str):
    return "bench." if kind == "prefix" else "~^bench\\."


def run(s: Settings):
    most = max(s.prefix_subs)
    flags = ["--max-subscriptions", str(most + 10), "--max-regex-subscriptions",
             str(max(s.regex_subs) + 10), "--max-regex-per-stream", str(max(s.regex_subs) + 10)]
    figs = {}
    with peers.zeps_broker(extra=flags) as b:
        for kind, counts in (("prefix", s.prefix_subs), ("regex", s.regex_subs)):
            for k in counts:
                f = figs[kind, k] = Figure("msg/s")
                for _ in range(s.reps):
                    stream = fresh_stream("routing")
                    with Holder(_hold_patterns, b.endpoint, stream, _patterns(kind, k - 1)):
                        o = pubsub(RAW, b.endpoint, stream, s, size=SIZE, consumers=1,
                                   options={"pattern": _matching(kind)})
                    f.add(o.consumed[0] / o.seconds)
    t = Table("Routing cost vs subscriptions", prose(__doc__),
              ["patterns", "K", "delivered msg/s", "time per message ÷ K = 1"])
    for kind, counts in (("prefix", s.prefix_subs), ("regex", s.regex_subs)):
        for k in counts:
            t.add(kind, f"{k:,}", figs[kind, k].text(), ratio(figs[kind, counts[0]], figs[kind, k]))
    return [t]

