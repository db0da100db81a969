"""ZeroMQ's own C++ XSUB/XPUB proxy (``zmq.proxy``): PUB-SUB with no journal and no sequence.

:func:`serve` runs the proxy in a child process on two ephemeral ports of 127.0.0.1; ``conn`` is
the pair ``(front, back)``: publishers connect PUB sockets to ``front``, consumers SUB sockets to
``back``. High-water marks are 0 everywhere so that it drops nothing either. A PUB socket drops
what no subscription has reached yet, so publishers send :data:`WARMUP` messages until the
start signal and consumers are ready only once one reached them. There is no stream: ``stream``
is ignored, and "from the start" or "confirms" do not exist (a consumer reads live; a publisher
ends with no acknowledgement).

The proxy's process leaves the suite's session for one of its own (``os.setsid``), as the servers
of :mod:`bench.peers` (ZEPS's broker, redis-server, nats-server) are started: Linux's scheduler,
where autogroup is on (``/proc/sys/kernel/sched_autogroup_enabled``: 1 on the project's machine),
shares the CPU between sessions first, so a server in the clients' session is scheduled with them
and one in a session of its own competes with them as a group. In alternating runs on the 2-core
machine of issue 20 the proxy's p99 was lower in the clients' session than in its own (the figures
are in the commit that made this change); the suite compared ZEPS's broker, in its own session,
with the proxy in the clients' until 2026-11-28.
"""
from __future__ import annotations

import multiprocessing
import os

import zmq

from bench.systems import END_KEY, KEY, BURST, body, bursts, delay_ns, flat_out, messages, pace, stamped

WARMUP = b"warmup"
_FORK = multiprocessing.get_context("fork")
_KEY, _END = KEY.encode(), END_KEY.encode()


def _proxy(out) -> None:
    os.setsid()                 # a session of its own, as every other server's (peers.Server)
    ctx = zmq.Context()
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    for s in (xsub, xpub):
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
    xsub.bind("tcp://127.0.0.1:*")
    xpub.bind("tcp://127.0.0.1:*")
    out.put((xsub.getsockopt_string(zmq.LAST_ENDPOINT), xpub.getsockopt_string(zmq.LAST_ENDPOINT)))
    zmq.proxy(xsub, xpub)


class Proxy:
    """The proxy's child process; ``conn`` is ``(front, back)``. A context manager."""

    def __init__(self):
        q = _FORK.Queue()
        self.proc = _FORK.Process(target=_proxy, args=(q,), daemon=True)
        self.proc.start()
        self.conn = q.get(timeout=30)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.kill()
        self.proc.join()

    def __enter__(self) -> "Proxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve() -> Proxy:
    return Proxy()


def publish(conn, stream, *, size, seconds, rate=0.0, confirms=False, end=False, limit=None,
            ready, go):
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.connect(conn[0])
    pad = body(size)
    cycle = bursts([key.encode() + data for key, data in messages(size)], BURST)
    ready()
    while not go(0.01):
        pub.send(WARMUP)
    send = pub.send
    if rate:
        n = 0
        for _ in pace(rate, seconds):
            send(_KEY + stamped(pad))
            n += 1
    else:
        def burst():
            for msg in next(cycle):
                send(msg)
        n = flat_out(seconds, burst, limit)
    if end:
        send(_END + pad)
    pub.close(linger=-1)
    ctx.term()
    return n


def consume(conn, stream, *, expect=None, from_start=False, latency=False, ends=1, ready, go):
    """As every system's ``consume``; ``ends``: end markers to wait for (one per publisher)."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(conn[1])
    while sub.recv() != WARMUP:
        pass
    ready()
    go()
    recv = sub.recv
    n = 0
    delays = []
    klen = len(_KEY)
    while expect is None or n < expect:
        m = recv()
        if m == WARMUP:
            continue
        if m[:len(_END)] == _END:
            ends -= 1
            if not ends:
                break
            continue
        n += 1
        if latency:
            delays.append(delay_ns(m, klen))
    sub.close()
    ctx.term()
    return n, delays
