"""The systems the suite drives, one module each, all with the same two worker functions.

* :mod:`.zeps_sdk`  — ZEPS through its SDK (:class:`zeps.clients.Client`): the Python user's view;
* :mod:`.zeps_raw`  — ZEPS through bare pyzmq DEALER sockets and pre-encoded frames: the server's
  capacity (the fastest client there is for it);
* :mod:`.redis_py`  — Redis Streams through redis-py with hiredis (XADD pipelined by 100, XREAD);
* :mod:`.nats_py`   — NATS JetStream through nats-py (file storage);
* :mod:`.zmq_proxy` — ZeroMQ's own C++ XSUB/XPUB proxy: no journal, no sequence (the floor).

Every module has::

    publish(conn, stream, *, size, seconds, rate=0.0, confirms=False, end=False, ready, go) -> int
    consume(conn, stream, *, expect=None, from_start=False, latency=False, ready, go)
        -> (count, delays_ns)

``publish`` sends messages of ``size`` bytes for ``seconds`` (flat out, stopping early after
``limit`` messages rounded up to :data:`BURST`, or paced at ``rate``
messages/s with its send time in the first 8 bytes of each body), then waits until the server has
them (confirmed durable with ``confirms``), then, with ``end``, one end marker (routing key
:data:`END_KEY`); it returns how many it sent. ``consume`` reads live (or, ``from_start``, from
the first message) until the end marker or ``expect`` messages; with ``latency`` it returns each
message's delay from its send time. Both call ``ready()`` once connected and ``go()`` before the
measured part (see :func:`bench.measure.run_workers`).

``conn`` is what the system's server gives: an endpoint, a port, a URL. A module may also have
``prepare(conn, stream)`` (create the stream before the workers start) and ``settle(conn, stream,
total)`` (wait until the server has stored ``total`` messages, for publishers whose last call
does not say so); the measured time runs until ``settle`` returns.
"""
from __future__ import annotations

import struct
import time

#: Routing key (subject suffix) of ordinary messages and of the end marker.
KEY = "bench.key"
END_KEY = "bench.end"
#: A send time (``time.monotonic_ns``) at the start of a body.
STAMP = struct.Struct(">Q")
#: Flat-out publishers look at the clock once per this many messages.
BURST = 500


def body(size: int) -> bytes:
    """A body of ``size`` bytes (at least 8: a stamp may replace its head)."""
    return b"x" * max(size, STAMP.size)


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


def pace(rate: float, seconds: float):
    """Yield message numbers at ``rate`` per second for ``seconds`` (sleeps, then busy-waits the
    last 100 us: sleep granularity is coarse)."""
    for i, due in enumerate(due_times(rate, seconds)):
        while True:
            now = time.monotonic_ns()
            if now >= due:
                break
            if due - now > 200_000:
                time.sleep((due - now - 100_000) / 1e9)
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
