"""The systems the suite drives, one module each, all with the same two worker functions.

* :mod:`.zeps_sdk`  — ZEPS through its SDK (:class:`zeps.clients.Client`): the Python user's view
  (``publish_batch`` of 100, or ``publish()`` per message);
* :mod:`.zeps_raw`  — ZEPS through bare pyzmq DEALER sockets and pre-encoded frames: the server's
  capacity (the fastest client there is for it);
* :mod:`.redis_py`  — Redis Streams through redis-py with hiredis (XADD pipelined by 100, or one
  XADD per call; XREAD);
* :mod:`.nats_py`   — NATS JetStream through nats-py (file storage);
* :mod:`.zmq_proxy` — ZeroMQ's own C++ XSUB/XPUB proxy: no journal, no sequence (the floor).

Every module has::

    publish(conn, stream, *, size, seconds, rate=0.0, confirms=False, end=False, ready, go) -> int
    consume(conn, stream, *, expect=None, from_start=False, latency=False, ready, go)
        -> (count, delays_ns)

``publish`` sends messages of ``size`` bytes for ``seconds`` (flat out, stopping early after
``limit`` messages rounded up to :data:`BURST`, cycling through the :func:`messages` of that size
(:data:`POOL` different bodies under :data:`POOL_KEYS` keys, the same for every system: no system
gains from one repeated key and body); or paced at ``rate``
messages/s with its send time in the first 8 bytes of each body), then waits until the server has
them (confirmed durable with ``confirms``), then, with ``end``, one end marker (routing key
:data:`END_KEY`); it returns how many it sent. ``consume`` reads live (or, ``from_start``, from
the first message) until the end marker or ``expect`` messages; with ``latency`` it returns each
message's delay from its send time. Both call ``ready()`` once connected and ``go()`` before the
measured part (see :func:`bench.measure.run_workers`).

``conn`` is what the system's server gives: an endpoint, a port, a URL. A module may also have
``prepare(conn, stream)`` (create the stream before the workers start) and ``settle(conn, stream,
total)`` (wait until the server has stored ``total`` messages, for publishers whose last call
does not say so); the measured time runs until ``settle`` returns; and ``drop(conn, stream)``
(delete a stream after its run, so that a long-lived server does not grow run after run).

A module whose client has more than one way to publish takes ``path=`` (the suite's
:class:`bench.scenarios.System` names it): ``zeps_sdk`` ``"batch"`` (``publish_batch`` of 100)
or ``"each"`` (``publish()`` per message), ``redis_py`` ``"pipeline"`` (100 XADDs per round
trip) or ``"each"`` (one XADD per call, its reply awaited).
"""
from __future__ import annotations

import functools
import itertools
import random
import os
import struct
import time
from typing import List, Tuple

#: Routing key (subject suffix) of ordinary messages and of the end marker.
KEY = "bench.key"
END_KEY = "bench.end"
#: A send time (``time.monotonic_ns``) at the start of a body.
STAMP = struct.Struct(">Q")
#: Flat-out publishers look at the clock once per this many messages.
BURST = 500
#: Different messages a flat-out publisher cycles through (a multiple of BURST and of 100, the
#: batch size of the SDK's publish_batch, of redis-py's pipeline and of raw PUBLISH-BATCH frames).
POOL = 1000
#: Different keys among them (``bench.k0`` ... ``bench.k63``: all match the prefix ``bench.``).
POOL_KEYS = 64


def body(size: int) -> bytes:
    """A body of ``size`` bytes (at least 8: a stamp may replace its head)."""
    return b"x" * max(size, STAMP.size)


@functools.lru_cache(maxsize=None)
def messages(size: int) -> List[Tuple[str, bytes]]:
    """:data:`POOL` messages ``(key, body)`` with bodies of ``size`` bytes (at least 8), each body
    different (seeded pseudo-random bytes: every system and every run gets the same ones), keys
    cycling through :data:`POOL_KEYS` names. Computed once: publishers pay nothing per message
    to vary them."""
    rnd = random.Random(size)
    n = max(size, STAMP.size)
    return [(f"bench.k{i % POOL_KEYS}", rnd.randbytes(n)) for i in range(POOL)]


def groups(size: int, per: int = 100) -> List[List[Tuple[str, bytes]]]:
    """:func:`messages` cut into lists of ``per`` (a divisor of :data:`POOL`)."""
    pool = messages(size)
    return [pool[i:i + per] for i in range(0, POOL, per)]


def bursts(items: list, per: int):
    """``items`` (a cycle of what a publisher sends) as an endless cycle of lists of ``per``: what
    one :func:`flat_out` burst sends."""
    return itertools.cycle([items[i:i + per] for i in range(0, len(items), per)])


def stamped(pad: bytes) -> bytes:
    """``pad`` with the current monotonic time in its first 8 bytes."""
    return STAMP.pack(time.monotonic_ns()) + pad[STAMP.size:]


def delay_ns(data, offset: int = 0) -> int:
    """Nanoseconds since the send time stamped at ``offset`` of ``data``."""
    return time.monotonic_ns() - STAMP.unpack_from(data, offset)[0]


def due_times(rate: float, seconds: float):
    """Yield when each message is due (``time.monotonic_ns``) at ``rate`` per second for
    ``seconds``, starting now."""
    start = time.monotonic_ns()
    step = 1e9 / rate
    for i in range(max(1, int(rate * seconds))):
        yield start + int(i * step)


#: How :func:`pace` waits for a message's due time: ``"sleep"`` (the default) or ``"spin"``.
#: A spinning pacer busy-waits the last 200 us before each due time, so at 10k msg/s it holds
#: a whole core; on a machine of 2 cores that leaves the server under test and the subscriber one
#: core between them, and the tail of every system then measures that sharing (issue 20: ZEPS
#: SDK p99 17-75 ms with it, 0.6-0.8 ms without, on the same machine). A program publishing
#: 10k msg/s does not spin, so the suite sleeps: a send that comes late (sleep overshoots by
#: tens of microseconds) leaves at once and the next is due on the same schedule, so the rate
#: holds and the delays are measured from each message's own send time. ``ZEPS_BENCH_PACER``
#: (``spin``) restores the spinning pacer for a comparison.
PACER = os.environ.get("ZEPS_BENCH_PACER", "sleep")


def pace(rate: float, seconds: float, pacer: str = ""):
    """Yield message numbers at ``rate`` per second for ``seconds``: each once its due time
    has come, waiting by :data:`PACER` (or ``pacer``: ``"sleep"`` or ``"spin"``)."""
    spin = (pacer or PACER) == "spin"
    if (pacer or PACER) not in ("sleep", "spin"):
        raise ValueError(f"no pacer {pacer or PACER!r} (sleep or spin)")
    mono, sleep = time.monotonic_ns, time.sleep
    for i, due in enumerate(due_times(rate, seconds)):
        now = mono()
        if spin:
            while now < due:
                if due - now > 200_000:
                    sleep((due - now - 100_000) / 1e9)
                now = mono()
        elif now < due:
            sleep((due - now) / 1e9)
        yield i


def flat_out(seconds: float, send_burst, limit=None) -> int:
    """Call ``send_burst()`` (which sends :data:`BURST` messages) until ``seconds`` have passed
    or at least ``limit`` messages were sent; return how many messages were sent."""
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline and (limit is None or n < limit):
        send_burst()
        n += BURST
    return n
