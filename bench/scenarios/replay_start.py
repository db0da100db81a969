"""Replay start against the stream's length.

How long it takes to start reading a stream of 10^4 ... 10^7 messages (100 B) at a random
position: ZEPS — a fresh raw pyzmq client's SUBSCRIBE at sequence s with credit, until its first
DELIVER; Redis — ``XRANGE <ms> + COUNT 1`` at a random point of the stream's time span (its
entry IDs are milliseconds), redis-py; JetStream — an ordered consumer created at sequence s
(``DeliverPolicy.BY_START_SEQUENCE``) until its first message, nats-py. Each repetition times
``start_probes`` random positions and keeps their median; the table gives the median of the
repetitions with their min–max. ZEPS's stream is built once, growing, with the journal library
directly (not through the broker: 10^7 messages through the broker would take minutes), the
broker started on it at each length; Redis's with ``redis-benchmark``, JetStream's with nats-py.
"""
from __future__ import annotations

import os
import random
import statistics
import tempfile
import time

from bench import journals, peers
from bench.measure import Figure, ratio
from bench.report import Table, prose
from bench.scenarios import NATS, REDIS, Settings
from bench.systems import nats_py, redis_benchmark, redis_py, zeps_raw

SIZE = 100


def _figure(s: Settings, probe, conn, stream: str, length: int) -> Figure:
    """Median of ``probe(conn, stream, length, fractions)`` per repetition, in ms."""
    f = Figure("ms")
    rnd = random.Random(length)
    for _ in range(s.reps):
        times = probe(conn, stream, length, [rnd.random() for _ in range(s.start_probes)])
        f.add(statistics.median(times) * 1e3)
    return f


def run(s: Settings):
    figs, built = {}, []
    stream = "start"
    with tempfile.TemporaryDirectory(prefix="zeps-bench-start-") as d:
        data = os.path.join(d, "data")
        for length in s.journal_lengths:
            t = time.monotonic()
            journals.grow(data, stream, length, SIZE)
            built.append(time.monotonic() - t)
            with peers.zeps_broker(data_dir=data) as b:
                figs["ZEPS", length] = _figure(s, zeps_raw.start_probes, b.endpoint, stream, length)
    peer_lengths = [n for n in s.journal_lengths if n <= s.peer_journal_max]
    redis_why = REDIS.missing() or peers.missing("redis-benchmark")
    if not redis_why:
        with peers.redis_server() as r:
            have = 0
            for length in peer_lengths:
                redis_benchmark.xadd(r.port, stream, length - have, SIZE)
                have = length
                figs["Redis", length] = _figure(s, redis_py.start_probes, r.port, stream, length)
    nats_why = NATS.missing()
    if not nats_why:
        with peers.nats_server() as n:
            nats_py.prepare(n.endpoint, stream)
            have = 0
            for length in peer_lengths:
                nats_py.fill(n.endpoint, stream, length - have, SIZE)
                have = length
                figs["JetStream", length] = _figure(s, nats_py.start_probes, n.endpoint, stream,
                                                    length)
    why = {"ZEPS": None, "Redis": redis_why, "JetStream": nats_why}
    t = Table("Replay start vs stream length", prose(__doc__),
              ["system", "messages", "start", "÷ at the shortest"])
    for name in ("ZEPS", "Redis", "JetStream"):
        for length in s.journal_lengths:
            f = figs.get((name, length))
            cell = f.text() if f else why[name] or f"not built past {s.peer_journal_max:,}"
            t.add(name, f"{length:,}", cell, ratio(f, figs.get((name, s.journal_lengths[0]))))
    t.notes = [f"ZEPS's {s.journal_lengths[-1]:,}-message journal was built in "
               f"{sum(built):.1f} s in all (journal library, fsync never)."]
    return [t]
