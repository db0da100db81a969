"""The suite's scenarios, one module each; every module has ``run(settings) -> [Table]``.

This module holds what they share: :data:`SYSTEMS` (how to start each server and which module
drives it), :class:`Settings` (counts and durations of a run) and :func:`pubsub`, one measured
run of publishers and consumers against one server.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import List, Optional, Tuple

from bench import peers
from bench.measure import run_workers
from bench.systems import nats_py, redis_py, zeps_raw, zeps_sdk, zeps_sdk_bulk, zmq_proxy


@dataclass(frozen=True)
class System:
    """A system as the report names it: its driver module and the peer it needs."""

    label: str
    module: object
    peer: Optional[str] = None            # key of bench.peers.NEEDS, None: always available
    path: Optional[str] = None            # the publishing path (``path=`` of its publish)
    reads: str = ""                       # its reading path, where tables show readers

    @property
    def reader(self) -> str:
        """The label of a column of its readers (fan-out, replay)."""
        return self.reads or self.label

    def missing(self) -> Optional[str]:
        return peers.missing(self.peer) if self.peer else None


SDK = System("ZEPS SDK", zeps_sdk, reads="ZEPS SDK, next()")
SDK_EACH = System("ZEPS SDK, publish() per message", zeps_sdk, path="each")
SDK_BULK = System("ZEPS SDK, batches()", zeps_sdk_bulk)
RAW = System("ZEPS, raw pyzmq", zeps_raw)
REDIS = System("Redis, redis-py", redis_py, "redis", reads="Redis, redis-py XREAD by 1000")
REDIS_EACH = System("Redis, redis-py xadd() per call", redis_py, "redis", path="each")
NATS = System("JetStream, nats-py", nats_py, "nats",
              reads="JetStream, nats-py ordered push consumer")
PROXY = System("ZeroMQ XSUB/XPUB proxy", zmq_proxy)


@dataclass(frozen=True)
class Settings:
    """Counts of one run: the full suite's defaults, or tiny ones (``quick``) for the smoke test."""

    quick: bool = False
    reps: int = 3
    seconds: float = 2.0               # publishing time of a throughput run
    sizes: Tuple[int, ...] = (100, 1024)
    replay_n: int = 1_000_000
    latency_rate: float = 10_000
    latency_seconds: float = 3.0
    fanout: Tuple[int, ...] = (1, 10, 50)
    fanout_deliveries: int = 500_000     # a fan-out run publishes at most this / subscribers
    publishers: Tuple[int, ...] = (1, 4)
    journal_lengths: Tuple[int, ...] = (10**4, 10**5, 10**6, 10**7)
    peer_journal_max: int = 10**7      # peers' streams are built up to this length
    start_probes: int = 30             # replay starts timed per length and repetition
    clients: Tuple[int, ...] = (10, 100, 1000)
    prefix_subs: Tuple[int, ...] = (1, 100, 10_000)
    regex_subs: Tuple[int, ...] = (1, 100)
    timeout: float = 600.0

    @classmethod
    def tiny(cls) -> "Settings":
        return cls(quick=True, reps=1, seconds=0.2, sizes=(100,), replay_n=2000,
                   latency_rate=500, latency_seconds=0.3, fanout=(1, 2), fanout_deliveries=20_000,
                   publishers=(1, 2), journal_lengths=(10**2, 10**3), peer_journal_max=10**3,
                   start_probes=3, clients=(2, 5),
                   prefix_subs=(1, 10), regex_subs=(1, 2), timeout=120.0)


_streams = itertools.count(1)


def fresh_stream(prefix: str) -> str:
    """A stream name not used before in this run (letters, digits and '-': valid everywhere)."""
    return f"{prefix}-{next(_streams)}"


@dataclass
class Outcome:
    """One run: messages published (``lost`` of them never stored by the server), messages each
    consumer got, delays (ns), seconds."""

    published: int
    consumed: List[int]
    delays: List[int]
    seconds: float
    lost: int = 0

    @property
    def stored(self) -> int:
        return self.published - self.lost


def pubsub(system: System, conn, stream: str, s: Settings, *, size: int, publishers: int = 1,
           consumers: int = 0, confirms: bool = False, rate: float = 0.0,
           seconds: Optional[float] = None, latency: bool = False,
           limit: Optional[int] = None, options: Optional[dict] = None) -> Outcome:
    """Publishers (each its own process) publish for ``seconds`` (at most ``limit`` messages
    each) while ``consumers`` (each its
    own process) read live until the end marker; the time runs from the start signal until the
    last of them is done and the server holds every message (or, for a server that may drop
    unacknowledged publishes, holds all it will: :attr:`Outcome.lost` counts the others).
    ``options``: more keyword arguments for the system's ``consume``."""
    mod = system.module
    if hasattr(mod, "prepare"):
        mod.prepare(conn, stream)
    end = consumers > 0
    path = {"path": system.path} if system.path else {}
    jobs = [(_publisher, (mod, conn, stream, size, seconds or s.seconds, rate, confirms, end, limit,
                          path)) for _ in range(publishers)]
    extra = dict(options or {})
    if mod is zmq_proxy:
        extra["ends"] = publishers
    jobs += [(_consumer, (mod, conn, stream, latency, extra)) for _ in range(consumers)]
    results, start, finish = run_workers(jobs, s.timeout)
    published = sum(results[:publishers])
    lost = 0
    if hasattr(mod, "settle"):
        expected = published + (publishers if end else 0)
        stored, when = mod.settle(conn, stream, expected)
        lost = expected - stored
        finish = max(finish, when)
    got = results[publishers:]
    return Outcome(published, [n for n, _ in got], [d for _, ds in got for d in ds],
                   finish - start, lost)


def _publisher(mod, conn, stream, size, seconds, rate, confirms, end, limit, path, *, ready, go):
    return mod.publish(conn, stream, size=size, seconds=seconds, rate=rate, confirms=confirms,
                       end=end, limit=limit, ready=ready, go=go, **path)


def _consumer(mod, conn, stream, latency, extra, *, ready, go):
    return mod.consume(conn, stream, latency=latency, ready=ready, go=go, **extra)


def replay(system: System, conn, stream: str, s: Settings, n: int) -> float:
    """Seconds one consumer takes to read the ``n`` messages of ``stream`` from the first."""
    results, start, finish = run_workers([(_replayer, (system.module, conn, stream, n))],
                                         s.timeout)
    if results[0][0] != n:
        raise RuntimeError(f"{system.label}: replay read {results[0][0]} of {n} messages")
    return finish - start


def _replayer(mod, conn, stream, n, *, ready, go):
    return mod.consume(conn, stream, expect=n, from_start=True, ready=ready, go=go)
