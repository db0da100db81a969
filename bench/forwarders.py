"""The middle processes of ``bench.bench_stages`` other than the broker: ZeroMQ's XSUB/XPUB
proxy and the same forwarder written in Python in several loop styles (each a floor of some
part of the broker: see the ``--client`` names in :mod:`bench.bench_stages`), with the paced
publisher and the subscriber that run through them (end to end only); :func:`run_proxy` runs
one of them with its clients.
"""
from __future__ import annotations

from array import array
import multiprocessing
import os
import re
import tempfile
import time

from bench.middle import await_ready, drive, per_message, stop_clients
from bench.stamps import END_KEY, KEY, STAMP_BYTES, pct, publisher_stalls
from bench.systems import pace


def forwarder_sockets(zmq, out):
    """A forwarder's XSUB (publishers' side) and XPUB (subscribers' side) sockets, bound on
    127.0.0.1 with ``zmq`` (pyzmq or ``zmq.green``); their endpoints are put on ``out``."""
    ctx = zmq.Context()
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    xsub.bind("tcp://127.0.0.1:*")
    xpub.bind("tcp://127.0.0.1:*")
    out.put((xsub.getsockopt_string(zmq.LAST_ENDPOINT), xpub.getsockopt_string(zmq.LAST_ENDPOINT)))
    return xsub, xpub


def proxy(out) -> None:
    import zmq
    xsub, xpub = forwarder_sockets(zmq, out)
    zmq.proxy(xsub, xpub)


def pyproxy(out, burn_us: int = 0) -> None:
    """The same XSUB/XPUB forwarder in the broker's stack (pyzmq under gevent, ``zmq.green``),
    doing nothing but forward: the floor of any broker written in it. ``burn_us``: CPU time to
    burn after each message sent (``time.thread_time_ns``)."""
    import gevent
    import zmq.green as zmq
    xsub, xpub = forwarder_sockets(zmq, out)

    burn = burn_us * 1000
    cpu = time.thread_time_ns

    def forward(a, b):
        recv, send = a.recv, b.send
        while True:
            send(recv())
            if burn:
                until = cpu() + burn
                while cpu() < until:
                    pass

    gevent.joinall([gevent.spawn(forward, xsub, xpub), gevent.spawn(forward, xpub, xsub)])


def pyloop(out) -> None:
    """The same forwarder in the broker's earlier loop style (``zeps.broker.server`` until the
    loop ran from the hub's callbacks, :func:`pycb`): raw pyzmq reads and sends without
    blocking while ``ZMQ_EVENTS`` says a socket is readable, then one wait on the hub for both
    sockets' descriptors (a ``Waiter``, the watchers started and a timer made per wait), no
    greenlet per socket."""
    import gevent
    import zmq
    from gevent.hub import Waiter
    xsub, xpub = forwarder_sockets(zmq, out)
    hub = gevent.get_hub()
    watchers = [hub.loop.io(s.getsockopt(zmq.FD), 1) for s in (xsub, xpub)]
    nb, events, pollin = zmq.NOBLOCK, zmq.EVENTS, zmq.POLLIN
    while True:
        for a, b in ((xsub, xpub), (xpub, xsub)):
            while a.getsockopt(events) & pollin:
                b.send(a.recv(nb, copy=False), nb, copy=False)
        if xsub.getsockopt(events) & pollin or xpub.getsockopt(events) & pollin:
            continue                  # ZMQ_FD is edge-triggered: wait only when both are empty
        waiter = Waiter(hub)
        timer = hub.loop.timer(0.5)
        try:
            for i, w in enumerate(watchers):
                w.start(waiter.switch, i)
            timer.start(waiter.switch, -1)
            waiter.get()
        finally:
            for w in watchers:
                w.stop()
            timer.close()


def pycb(out, write: bool = False) -> None:
    """:func:`pyloop` run from the hub's own watcher callbacks, as the broker's loop is
    (``zeps.broker.server``): the descriptors' watchers stay started, and a socket's callback
    forwards in the hub's greenlet (no ``Waiter``, no timer, no watcher started or stopped, no
    greenlet switch per wait), another callback queued while ``ZMQ_EVENTS`` says a socket
    still has messages (ZMQ_FD is edge-triggered): the floor of the broker's shell, its core
    aside. With ``write``, each published message is written to a file (one ``os.write`` of
    its bytes, in /tmp as the broker's journal is, no fsync) before it is forwarded: the
    floor of a broker whose round for one PUBLISH were compiled, journal write kept."""
    import gevent
    import zmq
    xsub, xpub = forwarder_sockets(zmq, out)
    hub = gevent.get_hub()
    loop = hub.loop
    nb, events, pollin = zmq.NOBLOCK, zmq.EVENTS, zmq.POLLIN
    file = tempfile.TemporaryFile(prefix="zeps-stages-write-") if write else None
    fd = file.fileno() if file is not None else None
    os_write = os.write

    def forward(_=None):
        if fd is not None:
            while xsub.getsockopt(events) & pollin:
                data = xsub.recv(nb)
                os_write(fd, data)
                xpub.send(data, nb)
        for a, b in ((xsub, xpub), (xpub, xsub)):
            while a.getsockopt(events) & pollin:
                b.send(a.recv(nb, copy=False), nb, copy=False)
        if xsub.getsockopt(events) & pollin or xpub.getsockopt(events) & pollin:
            loop.run_callback(forward)

    watchers = [loop.io(s.getsockopt(zmq.FD), 1) for s in (xsub, xpub)]
    for i, w in enumerate(watchers):
        w.start(forward, i)
    forward()
    gevent.wait()


def pypoll(out) -> None:
    """:func:`pyloop` waiting in ZeroMQ's own poll instead of gevent's hub (``zmq.Poller``:
    one ``zmq_poll`` of both sockets, the GIL released; no Waiter, watchers, timer or greenlet
    switch): what the broker's shell would save without gevent, its other greenlets aside."""
    import zmq
    xsub, xpub = forwarder_sockets(zmq, out)
    poller = zmq.Poller()
    poller.register(xsub, zmq.POLLIN)
    poller.register(xpub, zmq.POLLIN)
    nb, events, pollin = zmq.NOBLOCK, zmq.EVENTS, zmq.POLLIN
    while True:
        for a, b in ((xsub, xpub), (xpub, xsub)):
            while a.getsockopt(events) & pollin:
                b.send(a.recv(nb, copy=False), nb, copy=False)
        poller.poll(500)


def proxy_publisher(front, rate, seconds, size, ready, go, out):
    import zmq
    pad = b"x" * max(0, size - STAMP_BYTES)
    mono = time.monotonic_ns
    p1 = array("q")
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUB)
    s.connect(front)
    ready.set()
    while not go.wait(0.01):              # a PUB drops what no subscription reached yet
        s.send(b"warmup")
    send = s.send
    key = KEY.encode()
    for _ in pace(rate, seconds):
        t = mono()
        send(key + t.to_bytes(8, "big") + pad)
        p1.extend((t, mono()))
    send(END_KEY.encode())
    s.close(linger=-1)
    ctx.term()
    out.put(("pub", p1))


def proxy_subscriber(back, ready, go, out):
    import zmq
    mono = time.monotonic_ns
    s2 = array("q")
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(back)
    while s.recv() != b"warmup":
        pass
    ready.set()
    go.wait()
    cpu = time.process_time()
    key, end, at = KEY.encode(), END_KEY.encode(), len(KEY)
    while True:
        m = s.recv()
        t = mono()
        if m == end:
            cpu = time.process_time() - cpu
            break
        if m[:at] == key:
            s2.extend((int.from_bytes(m[at:at + 8], "big"), t))
    s.close()
    ctx.term()
    out.put(("sub", s2, cpu))


def run_proxy(rate: float, seconds: float, size: int, forwarder=proxy, *args) -> dict:
    """The same paced publisher through ZeroMQ's XSUB/XPUB proxy (no journal), or through
    ``forwarder(queue, *args)``: end to end only."""
    fork = multiprocessing.get_context("fork")
    q = fork.Queue()
    middle = fork.Process(target=forwarder, args=(q, *args), daemon=True)
    middle.start()
    clients = []
    try:
        front, back = q.get(timeout=30)
        rp, rs, go = fork.Event(), fork.Event(), fork.Event()
        pub = fork.Process(target=proxy_publisher, args=(front, rate, seconds, size, rp, go, q))
        sub = fork.Process(target=proxy_subscriber, args=(back, rs, go, q))
        pub.start()
        sub.start()
        clients += [pub, sub]
        await_ready(rp, middle, 60)
        await_ready(rs, middle, 60)
        time.sleep(0.2)
        got, cpu, before, after, _ = drive(middle, q, go, seconds + 120)
        threads = per_message(before, after, len(got["pub"][1]) // 2)
        pub.join()
        sub.join()
    finally:
        stop_clients(clients)
        middle.kill()
        middle.join()
    (_, sends), (_, got_s2, sub_cpu) = got["pub"], got["sub"]
    p1 = dict(zip(sends[::2], sends[1::2]))
    s2 = dict(zip(got_s2[::2], got_s2[1::2]))
    e2e = sorted(s2[k] - k for k in p1 if k in s2)
    return {"n": len(e2e), "sent": len(p1), "e2e": {p: pct(e2e, p) for p in (50, 99, 99.9)},
            "cpu": {"proxy": cpu / len(p1), "subscriber": sub_cpu / len(p1)},
            "threads": threads, "pub_stalls": publisher_stalls(p1, int(1e9 / rate))}


#: ``pyproxy`` or ``pyproxy+N``: the forwarder, burning N µs of CPU per message.
PYPROXY = re.compile(r"pyproxy(?:\+(\d+))?")


def forwarder_of(client: str):
    """The middle process of a client that runs through a forwarder instead of the broker, as
    ``(function, its arguments after the queue)``; None for the broker's clients and unknown
    names."""
    if client == "proxy":
        return (proxy,)
    if client == "pyloop":
        return (pyloop,)
    if client == "pypoll":
        return (pypoll,)
    if client == "pycb":
        return (pycb,)
    if client == "pycbw":
        return (pycb, True)
    burn = PYPROXY.fullmatch(client)
    return (pyproxy, int(burn[1] or 0)) if burn else None
