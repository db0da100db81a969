"""Where a message's latency goes: per-stage timestamps along publish -> deliver, at a fixed rate.

    python -m bench.bench_stages [--rate 10000] [--seconds 2] [--size 100]
                                 [--client sdk|raw|sdk/raw|raw/sdk|proxy|pyproxy[+N]|pyloop
                                           |pycb|pycbw|pypoll[,...]]
                                 [--fsync interval]
                                 [--runs 1] [--summary | --table] [--pacer sleep|spin]

One publisher process paced at ``--rate`` (its send time, ``time.monotonic_ns``, the clock every
process of the machine shares, in the first 8 bytes of each body), one live subscriber process
and a broker process, each instrumented from the outside (bench-only wrappers installed in that
process before it starts; the broker's code is the checkout's, unchanged). Every message is
followed through these stamps, matched by its send time:

=====  ========================================================================================
P0     the publisher's clock read, just before ``Client.publish`` (raw: the DEALER's send)
P1     ``publish`` returned (the frame is in ZeroMQ's queue)
W      the broker's loop woke up from its wait (the last wake-up before B1; none when busy)
B1     the broker's core got the frame (``BrokerCore.receive``)
B2     the journal append of its round returned (``Journal.append_batch``, or ``append``)
B3     routing done: its DELIVER (or DELIVER-BATCH) is in the core's outbox
B4     the broker's socket took the round's outbox (``Broker._send`` returned; before the
       socket loops of zeps/broker/sockio.py: the socket took the frame)
S1     the subscriber's peering got the frame (``Peering.receive``; raw: ``recv`` returned)
S2     the application got the message (``Subscription.next`` returned; raw: as S1)
=====  ========================================================================================

Each process also records its garbage collections (``gc.callbacks``), the broker its fsyncs
(``Journal.sync``, in gevent's thread pool). The report gives each stage's p50 / p99 / p99.9,
then, for the messages whose end-to-end delay is at or above the p99 (and the p99.9), each
stage's mean share and how many of them overlapped a collection or an fsync, each process's CPU
per message, how often the broker's loop lost the CPU to another thread (its thread's
involuntary context switches per message), any wait of the broker's loop that outlasted a
message already sent to it, and the publisher's stalls (a send 1 ms or more later than due
after the one before: the host did not run a process that only sleeps and sends; the proxy's
runs count them too, and ``--table`` gives them per run).
``--client sdk/raw`` runs the SDK's publisher with the raw subscriber, ``raw/sdk`` the raw
publisher with the SDK's subscriber (which side of the SDK costs what, beside ``sdk`` and
``raw``). ``--client proxy`` runs the same paced publisher through ZeroMQ's XSUB/XPUB proxy (end
to end only); ``--client sdk,proxy`` runs both in turn within each run and says the SDK's p99
over the proxy's. ``--client pyproxy`` puts in the proxy's place the same forwarder written in
the broker's stack (pyzmq under gevent, ``zmq.green``, two greenlets that only forward): the
floor of a broker written in it, journal and routing aside; ``pyproxy+N`` the same forwarder
burning N µs of CPU per message after each send (where a middle process's CPU per message puts
the tail, on a given machine); ``pyloop`` the forwarder in the broker's earlier loop style (raw
pyzmq without blocking, one wait on gevent's hub for both sockets: a ``Waiter``, watchers
started and a timer made per wait); ``pycb`` the same forwarder in the broker's loop style (run
from the hub's callbacks of watchers started once, no wait set up per message): the floor of the
broker's shell; ``pycbw`` that one writing each published message to a file before it forwards
it (the floor of a broker whose round for one PUBLISH were compiled); ``pypoll`` the same loop
waiting in ZeroMQ's own ``zmq_poll`` instead of gevent's hub (what the shell would save without
gevent). ``--summary`` prints ``name=value`` figures (for ``python -m bench.ab``); ``--table``
one table of every run's end-to-end figures and CPU per message, a row per client, instead of
the stage tables.
``ZEPS_BENCH_BROKER_ARGS`` gives the broker more options (shell words, ``--io-scheduling
normal``: :func:`broker_options`). ``ZEPS_STAGES_PROFILE=FILE`` cProfiles the broker into
FILE; ``ZEPS_STAGES_GC`` tries garbage collector settings in the broker (``freeze``,
``T0[,T1[,T2]]`` thresholds, ``:``-separated).
"""
from __future__ import annotations

import argparse
from array import array
import gc
import multiprocessing
import os
import pickle
import queue
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import bench.systems
from bench.measure import cpu_seconds
from bench.systems import pace
# frame_stamps' names, imported once: imported at each call, they cost the stamped processes a
# few microseconds a frame, counted in the stages they stamp.
from zeps.protocol.batch import (DELIVER_BATCH_ID, DELIVER_HEAD_SIZE, PUBLISH_BATCH_ID,
                                 PUBLISH_HEAD_SIZE, walk)
from zeps.protocol.commands import Publish
from zeps.protocol.deliver import DELIVER_ID, DELIVER_TS_ID, KEYLEN_OFFSET, TS_SHIFT

STAMP_BYTES = 8
KEY = "bench.key"
END_KEY = "bench.end"

STAGES = (("publish call", "P0", "P1"), ("to broker wake-up", "P1", "W"),
          ("broker read", "W", "B1"), ("journal append", "B1", "B2"),
          ("route", "B2", "B3"), ("broker send", "B3", "B4"),
          ("to subscriber", "B4", "S1"), ("SDK hand-out", "S1", "S2"))


# ---------------------------------------------------------------------------------- probes

def gc_probe() -> list:
    """Record this process's collections as ``(start_ns, end_ns, generation)``."""
    events: list = []
    began = [0]

    def cb(phase, info):
        if phase == "start":
            began[0] = time.monotonic_ns()
        else:
            events.append((began[0], time.monotonic_ns(), info["generation"]))
    gc.callbacks.append(cb)
    return events


def first_times(pairs: array) -> Dict[int, int]:
    """``stamp, time, stamp, time, ...`` -> each stamp's first time. The stamped processes
    record into flat arrays (unsigned: a stamp is 8 bytes of a body) and build these dicts only
    after the run: a dict filled as the messages go resizes at 2/3 of each power of two
    (10,922, 21,845 and 43,690 messages), and on this host each resize of the four stamp dicts
    stalled the broker's round for about 6 ms (the proxy's runs, stamped in arrays, had no such
    stall; ad hoc, 2026-11-30). First wins for every stage: B2 to B4 were ``setdefault`` before
    (a stamp's later entries there are the same round's); B1 and S1 were last-wins dicts, and
    a stamp comes there once (the bench's publishers do not re-send)."""
    out: Dict[int, int] = {}
    for i in range(0, len(pairs), 2):
        out.setdefault(pairs[i], pairs[i + 1])
    return out


def frame_stamps(frame: bytes) -> List[int]:
    """The send times in the bodies of a PUBLISH, PUBLISH-BATCH, DELIVER, DELIVER-TS or
    DELIVER-BATCH frame (empty for anything else)."""
    if len(frame) < 3:
        return []
    kind = frame[2]
    if kind == Publish.ID:                                  # PUBLISH: keylen key bodylen body
        at = 3 + 1 + frame[3] + 4
        return [int.from_bytes(frame[at:at + 8], "big")]
    if kind in (DELIVER_ID, DELIVER_TS_ID):
        k = KEYLEN_OFFSET + (TS_SHIFT if kind == DELIVER_TS_ID else 0)
        at = k + 1 + frame[k] + 4
        return [int.from_bytes(frame[at:at + 8], "big")]
    if kind in (PUBLISH_BATCH_ID, DELIVER_BATCH_ID):
        head = PUBLISH_HEAD_SIZE if kind == PUBLISH_BATCH_ID else DELIVER_HEAD_SIZE
        count = int.from_bytes(frame[head - 4:head], "big")
        offs = walk(frame, head, len(frame), count, check_keys=False)
        out = []
        for start in offs[:-1]:
            at = start + 1 + frame[start] + 4
            out.append(int.from_bytes(frame[at:at + 8], "big"))
        return out
    return []


# ---------------------------------------------------------------------------------- broker

def _broker_child(argv: List[str]) -> int:
    """The broker, with stamps: ``bench_stages broker OUT_FILE <zeps broker arguments>``."""
    out_file, args = argv[0], argv[1:]
    from zeps.broker import server, core, stream
    from zeps.cli.broker import main
    from zeps.journal.journal import Journal

    mono = time.monotonic_ns
    b1, b2, b3, b4 = array("Q"), array("Q"), array("Q"), array("Q")     # stamp, time, ...
    wakes = array("Q")
    long_waits: List[tuple] = []
    syncs: List[tuple] = []
    gcs = gc_probe()
    in_round: List[int] = []

    receive = core.BrokerCore.receive

    def receive_stamped(self, identity, frames, now):
        t = mono()
        for s in frame_stamps(frames[0]):
            b1.extend((s, t))
            in_round.append(s)
        return receive(self, identity, frames, now)
    core.BrokerCore.receive = receive_stamped

    def append_stamped(append):          # B2: a round's journal append returned
        # Journal.append may call append_batch, and a round may append more than once: the
        # same stamps are recorded again, later; first_times keeps the first
        def stamped(self, *a, **kw):
            out = append(self, *a, **kw)
            t = mono()
            for s in in_round:
                b2.extend((s, t))
            return out
        return stamped
    Journal.append_batch = append_stamped(Journal.append_batch)
    Journal.append = append_stamped(Journal.append)      # a round's one PUBLISH (lone.py)

    append_queued = stream.Stream.append_queued

    def append_queued_stamped(self):
        r = append_queued(self)
        t = mono()
        for s in in_round:
            b3.extend((s, t))
        in_round.clear()
        return r
    stream.Stream.append_queued = append_queued_stamped

    def stamp_sent(data, t):
        if len(data) > 3 and data[:2] == b"\xaa\xa5":     # a frame, not a routing id
            for s in frame_stamps(data):
                b4.extend((s, t))

    if hasattr(server, "_send_raw"):         # a revision whose loop sent frame by frame (bench.ab)
        send_raw = server._send_raw

        def send_raw_stamped(sock, data, flags):
            r = send_raw(sock, data, flags)
            stamp_sent(data, mono())
            return r
        server._send_raw = send_raw_stamped
    else:                                    # the outbox goes out in one call (sockio.py)
        send = server.Broker._send

        def send_stamped(self, now):         # B4: when the round's send returned
            frames = [frame for _, frame in self.core.outbox]
            r = send(self, now)
            t = mono()
            for frame in frames:
                stamp_sent(frame, t)
            return r
        server.Broker._send = send_stamped

    if hasattr(server.Broker, "_wait"):      # a revision before the loop ran in the hub (bench.ab)
        wait = server.Broker._wait

        def wait_stamped(self, timeout):
            t = mono()
            r = wait(self, timeout)
            now = mono()
            wakes.append(now)
            if now - t > 20_000_000:                      # a long wait: was it woken?
                long_waits.append((t, now, timeout))
            return r
        server.Broker._wait = wait_stamped
    else:
        ready, idle = server.Broker._ready, server.Broker._idle
        asleep: List[tuple] = []             # (since, timeout) of the loop's current sleep

        def ready_stamped(self, which):      # a watcher or the timer fired: the loop woke
            now = mono()
            wakes.append(now)
            if asleep:
                t, timeout = asleep.pop()
                if now - t > 20_000_000:                  # a long sleep: was it woken?
                    long_waits.append((t, now, timeout))
            return ready(self, which)
        server.Broker._ready = ready_stamped

        def idle_stamped(self, timeout):     # the loop goes to sleep (unless more came)
            t = mono()
            r = idle(self, timeout)
            asleep[:] = [] if self._queued else [(t, timeout)]
            return r
        server.Broker._idle = idle_stamped

    sync = Journal.sync

    def sync_stamped(self):
        t = mono()
        try:
            return sync(self)
        finally:
            syncs.append((t, mono()))
    Journal.sync = sync_stamped

    profile = os.environ.get("ZEPS_STAGES_PROFILE")     # cProfile the broker into this file
    gc_try = os.environ.get("ZEPS_STAGES_GC")             # experiment: "freeze", "T0[,T1]"
    if gc_try:
        serve = server.Broker.serve_forever

        def serve_gc(self):
            for part in gc_try.split(":"):
                if part == "freeze":
                    gc.collect()
                    gc.freeze()
                else:
                    t = [int(x) for x in part.split(",")]
                    gc.set_threshold(*t, *gc.get_threshold()[len(t):])
            return serve(self)
        server.Broker.serve_forever = serve_gc
    try:
        if profile:
            import cProfile
            prof = cProfile.Profile()
            try:
                return prof.runcall(main, args)
            finally:
                prof.dump_stats(profile)
        return main(args)
    finally:
        with open(out_file, "wb") as f:
            pickle.dump(dict(B1=first_times(b1), B2=first_times(b2), B3=first_times(b3),
                             B4=first_times(b4), wakes=list(wakes), syncs=syncs, gc=gcs,
                             long_waits=long_waits), f)


def broker_options(environ=os.environ) -> List[str]:
    """More ``zeps broker`` options for the stamped broker, from ``ZEPS_BENCH_BROKER_ARGS``
    (shell words: ``--io-scheduling normal``), to pair a broker option against its default
    with ``bench.ab --after-env``."""
    import shlex
    return shlex.split(environ.get("ZEPS_BENCH_BROKER_ARGS", ""))


def start_broker(tmp: str, fsync: str, env=None):
    out = os.path.join(tmp, "broker-stamps.pickle")
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_stages", "broker", out,
                             "--endpoint", "tcp://127.0.0.1:*", "--data-dir",
                             os.path.join(tmp, "data"), "--fsync", fsync,
                             "--log-level", "warning",
                             *broker_options(os.environ if env is None else env)],
                            stdout=subprocess.PIPE, env=env)
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline().decode() if ready else ""
    if "listening on " not in line:
        proc.kill()
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, line.split("listening on ", 1)[1].split()[0], out


# ---------------------------------------------------------------------------------- clients

def _publisher(kind, endpoint, stream, rate, seconds, size, ready, go, out):
    gcs = gc_probe()
    pad = b"x" * max(0, size - STAMP_BYTES)
    mono = time.monotonic_ns
    p1 = array("q")             # send time, return time, ...: no object per message (no GC)
    if kind == "sdk":
        from zeps.clients import Client
        with Client(endpoint, stream, timeout=60) as cl:
            ready.set()
            go.wait()
            cpu = time.process_time()
            pub = cl.publish
            for _ in pace(rate, seconds):
                t = mono()
                pub(KEY, t.to_bytes(8, "big") + pad)
                p1.extend((t, mono()))
            cpu = time.process_time() - cpu
            cl.flush()
            pub(END_KEY, b"x" * 8)
            cl.flush()
    else:
        import zmq
        from bench.bench_broker import dealer, request
        from zeps.protocol import commands as c
        from zeps.protocol import encode_publish
        ctx = zmq.Context()
        s = dealer(ctx, endpoint)
        request(s, c.Attach(stream), c.AttachOk)
        ready.set()
        go.wait()
        cpu = time.process_time()
        send = s.send
        for _ in pace(rate, seconds):
            t = mono()
            send(encode_publish(KEY, t.to_bytes(8, "big") + pad))
            p1.extend((t, mono()))
        cpu = time.process_time() - cpu
        send(encode_publish(END_KEY, b"x" * 8))
        request(s, c.Ping(), c.PingOk)
        s.close()
        ctx.term()
    out.put(("pub", p1, gcs, cpu))


def _subscriber(kind, endpoint, stream, ready, go, out):
    gcs = gc_probe()
    mono = time.monotonic_ns
    s1 = array("Q")             # send time, time its frame came, ... (first_times)
    s2 = array("q")             # send time, time the application got it, ...
    if kind == "sdk":
        from zeps.clients import Client
        from zeps.clients.peering import Peering
        receive = Peering.receive

        def receive_stamped(self, frame, now):
            t = mono()
            for s in frame_stamps(frame):
                s1.extend((s, t))
            return receive(self, frame, now)
        Peering.receive = receive_stamped
        with Client(endpoint, stream, timeout=60, create=True) as cl:
            nxt = cl.subscribe("", live=True).next
            ready.set()
            go.wait()
            cpu = time.process_time()
            while True:
                msg = nxt(timeout=60)
                t = mono()
                if msg.key == END_KEY:
                    cpu = time.process_time() - cpu
                    break
                s2.extend((int.from_bytes(msg.body[:8], "big"), t))
    else:
        import zmq
        from bench.bench_broker import dealer, request
        from zeps.protocol import commands as c
        from zeps.protocol import encode
        from zeps.protocol.deliver import DELIVER_ID, KEY_OFFSET, KEYLEN_OFFSET
        ctx = zmq.Context()
        s = dealer(ctx, endpoint)
        request(s, c.Attach(stream), c.AttachOk)
        request(s, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
        s.send(encode(c.Credit(1 << 40)))
        ready.set()
        go.wait()
        cpu = time.process_time()
        end = END_KEY.encode()
        while True:
            frame = s.recv()
            t = mono()
            if frame[2] != DELIVER_ID:
                continue
            klen = frame[KEYLEN_OFFSET]
            if frame[KEY_OFFSET:KEY_OFFSET + klen] == end:
                cpu = time.process_time() - cpu
                break
            st = frame_stamps(frame)[0]
            s1.extend((st, t))
            s2.extend((st, t))
        s.close()
        ctx.term()
    out.put(("sub", first_times(s1), s2, gcs, cpu))


def _forwarder_sockets(zmq, out):
    """A forwarder's XSUB (publishers' side) and XPUB (subscribers' side) sockets, bound on
    127.0.0.1 with ``zmq`` (pyzmq or ``zmq.green``); their endpoints are put on ``out``."""
    ctx = zmq.Context()
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    xsub.bind("tcp://127.0.0.1:*")
    xpub.bind("tcp://127.0.0.1:*")
    out.put((xsub.getsockopt_string(zmq.LAST_ENDPOINT), xpub.getsockopt_string(zmq.LAST_ENDPOINT)))
    return xsub, xpub


def _proxy(out) -> None:
    import zmq
    xsub, xpub = _forwarder_sockets(zmq, out)
    zmq.proxy(xsub, xpub)


def _pyproxy(out, burn_us: int = 0) -> None:
    """The same XSUB/XPUB forwarder in the broker's stack (pyzmq under gevent, ``zmq.green``),
    doing nothing but forward: the floor of any broker written in it. ``burn_us``: CPU time to
    burn after each message sent (``time.thread_time_ns``)."""
    import gevent
    import zmq.green as zmq
    xsub, xpub = _forwarder_sockets(zmq, out)

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


def _pyloop(out) -> None:
    """The same forwarder in the broker's earlier loop style (``zeps.broker.server`` until the
    loop ran from the hub's callbacks, :func:`_pycb`): raw pyzmq reads and sends without
    blocking while ``ZMQ_EVENTS`` says a socket is readable, then one wait on the hub for both
    sockets' descriptors (a ``Waiter``, the watchers started and a timer made per wait), no
    greenlet per socket."""
    import gevent
    import zmq
    from gevent.hub import Waiter
    xsub, xpub = _forwarder_sockets(zmq, out)
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


def _pycb(out, write: bool = False) -> None:
    """:func:`_pyloop` run from the hub's own watcher callbacks, as the broker's loop is
    (``zeps.broker.server``): the descriptors' watchers stay started, and a socket's callback
    forwards in the hub's greenlet (no ``Waiter``, no timer, no watcher started or stopped, no
    greenlet switch per wait), another callback queued while ``ZMQ_EVENTS`` says a socket
    still has messages (ZMQ_FD is edge-triggered): the floor of the broker's shell, its core
    aside. With ``write``, each published message is written to a file (one ``os.write`` of
    its bytes, in /tmp as the broker's journal is, no fsync) before it is forwarded: the
    floor of a broker whose round for one PUBLISH were compiled, journal write kept."""
    import gevent
    import zmq
    xsub, xpub = _forwarder_sockets(zmq, out)
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


def _pypoll(out) -> None:
    """:func:`_pyloop` waiting in ZeroMQ's own poll instead of gevent's hub (``zmq.Poller``:
    one ``zmq_poll`` of both sockets, the GIL released; no Waiter, watchers, timer or greenlet
    switch): what the broker's shell would save without gevent, its other greenlets aside."""
    import zmq
    xsub, xpub = _forwarder_sockets(zmq, out)
    poller = zmq.Poller()
    poller.register(xsub, zmq.POLLIN)
    poller.register(xpub, zmq.POLLIN)
    nb, events, pollin = zmq.NOBLOCK, zmq.EVENTS, zmq.POLLIN
    while True:
        for a, b in ((xsub, xpub), (xpub, xsub)):
            while a.getsockopt(events) & pollin:
                b.send(a.recv(nb, copy=False), nb, copy=False)
        poller.poll(500)


def _proxy_publisher(front, rate, seconds, size, ready, go, out):
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


def _proxy_subscriber(back, ready, go, out):
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


def run_proxy(rate: float, seconds: float, size: int, forwarder=_proxy, *args) -> dict:
    """The same paced publisher through ZeroMQ's XSUB/XPUB proxy (no journal), or through
    ``forwarder(queue, *args)``: end to end only."""
    fork = multiprocessing.get_context("fork")
    q = fork.Queue()
    proxy = fork.Process(target=forwarder, args=(q, *args), daemon=True)
    proxy.start()
    clients = []
    try:
        front, back = q.get(timeout=30)
        rp, rs, go = fork.Event(), fork.Event(), fork.Event()
        pub = fork.Process(target=_proxy_publisher, args=(front, rate, seconds, size, rp, go, q))
        sub = fork.Process(target=_proxy_subscriber, args=(back, rs, go, q))
        pub.start()
        sub.start()
        clients += [pub, sub]
        _ready(rp, proxy, 60)
        _ready(rs, proxy, 60)
        time.sleep(0.2)
        cpu = cpu_seconds(proxy.pid)
        threads = _thread_cpu(proxy.pid)
        go.set()
        got = {}
        for _ in range(2):
            item = _result(q, proxy, seconds + 120)
            got[item[0]] = item[1]
            if item[0] == "sub":
                got["sub-cpu"] = item[2]
        cpu = cpu_seconds(proxy.pid) - cpu
        threads = _per_message(threads, _thread_cpu(proxy.pid), len(got["pub"]) // 2)
        pub.join()
        sub.join()
    finally:
        for p in clients:                         # a failed run's clients wait for nothing
            if p.is_alive():
                p.terminate()
        proxy.kill()
        proxy.join()
    p1 = dict(zip(got["pub"][::2], got["pub"][1::2]))
    s2 = dict(zip(got["sub"][::2], got["sub"][1::2]))
    e2e = sorted(s2[k] - k for k in p1 if k in s2)
    return {"n": len(e2e), "sent": len(p1), "e2e": {p: pct(e2e, p) for p in (50, 99, 99.9)},
            "cpu": {"proxy": cpu / len(p1), "subscriber": got["sub-cpu"] / len(p1)},
            "threads": threads, "pub_stalls": publisher_stalls(p1, int(1e9 / rate))}


# ---------------------------------------------------------------------------------- analysis

def pct(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


def _overlaps(events, lo, hi) -> bool:
    return any(a < hi and b > lo for a, b, *_ in events)


#: A paced send this much later (ns) than the one before it plus the pacing interval, or more:
#: the publisher was not run meanwhile.
STALL_NS = 1_000_000


def publisher_stalls(sends, every_ns: int) -> Tuple[int, int]:
    """``(how many, the longest in ns)`` of the gaps between two consecutive send times of a
    publisher paced every ``every_ns`` that are :data:`STALL_NS` or more longer than that: the
    host not running a process that only sleeps until a message is due and sends it."""
    t = sorted(sends)
    gaps = [b - a for a, b in zip(t, t[1:]) if b - a - every_ns >= STALL_NS]
    return len(gaps), max(gaps, default=0)


def analyse(pub, sub, broker, every_ns: int) -> dict:
    """Per-message stage stamps -> per-stage percentiles and the tail's make-up (``every_ns``:
    the publisher's pacing interval)."""
    import bisect
    p1 = dict(zip(pub["p1"][::2], pub["p1"][1::2]))
    s1, s2 = sub["s1"], dict(zip(sub["s2"][::2], sub["s2"][1::2]))
    wakes = broker["wakes"]
    rows = []
    for p0, p1t in p1.items():
        if p0 not in s2 or p0 not in broker["B1"]:
            continue
        st = {"P0": p0, "P1": p1t, "B1": broker["B1"][p0], "B2": broker["B2"].get(p0),
              "B3": broker["B3"].get(p0), "B4": broker["B4"].get(p0), "S1": s1.get(p0),
              "S2": s2[p0]}
        if None in st.values():
            continue
        i = bisect.bisect_right(wakes, st["B1"]) - 1
        w = wakes[i] if i >= 0 else 0
        st["W"] = w if w >= st["P1"] else st["P1"]     # busy when it came: no wake-up to wait
        rows.append(st)
    if len(rows) < 0.99 * len(p1):      # a stage's stamp missing: the figures would be biased
        raise SystemExit(f"only {len(rows)} of {len(p1)} messages were followed through every "
                         f"stage: a stamp of the broker's (bench_stages broker) misses a path")
    e2e = sorted(r["S2"] - r["P0"] for r in rows)
    out = {"n": len(rows), "sent": len(p1), "e2e": {p: pct(e2e, p) for p in (50, 99, 99.9)},
           "stages": {}, "tail": {}}
    for name, a, b in STAGES:
        d = sorted(r[b] - r[a] for r in rows)
        out["stages"][name] = {p: pct(d, p) for p in (50, 99, 99.9)}
        out["stages"][name]["mean"] = statistics.fmean(d)
    for p in (99, 99.9):
        cut = out["e2e"][p]
        slow = [r for r in rows if r["S2"] - r["P0"] >= cut]
        tail = {name: statistics.fmean(r[b] - r[a] for r in slow) for name, a, b in STAGES}
        tail["_n"] = len(slow)
        tail["_e2e"] = statistics.fmean(r["S2"] - r["P0"] for r in slow)
        tail["_gc_pub"] = sum(_overlaps(pub["gc"], r["P0"], r["P1"]) for r in slow)
        tail["_gc_broker"] = sum(_overlaps(broker["gc"], r["P1"], r["B4"]) for r in slow)
        tail["_gc_sub"] = sum(_overlaps(sub["gc"], r["B4"], r["S2"]) for r in slow)
        tail["_fsync"] = sum(_overlaps(broker["syncs"], r["P1"], r["B4"]) for r in slow)
        out["tail"][p] = tail
    start, end = min(r["P0"] for r in rows), max(r["S2"] for r in rows)
    out["gc_counts"] = {who: _gc_summary([e for e in d["gc"] if start <= e[0] <= end])
                        for who, d in (("publisher", pub), ("broker", broker), ("subscriber", sub))}
    out["fsyncs"] = len(broker["syncs"])
    out["pub_stalls"] = publisher_stalls(p1, every_ns)
    # waits of 20 ms or more that ended after a message of the run had reached the broker's
    # socket (P1) before the wait began: the loop slept while something was there to read
    p1s = sorted(p1.values())
    out["stuck_waits"] = [(b - a, timeout) for a, b, timeout in broker.get("long_waits", ())
                          if p1s and p1s[0] < a < p1s[-1]
                          and any(a > x and broker["B1"].get(k, 0) > a for k, x in p1.items())]
    span = max(r["S2"] for r in rows) - min(r["P0"] for r in rows)
    out["fsync_busy"] = sum(b - a for a, b in broker["syncs"]) / span if span else 0.0
    return out


def _gc_summary(events) -> str:
    if not events:
        return "none"
    by = {}
    for a, b, g in events:
        by.setdefault(g, []).append(b - a)
    return ", ".join(f"gen{g}: {len(v)} (max {max(v) / 1e3:.0f} us)" for g, v in sorted(by.items()))


def kinds(client: str) -> Tuple[str, str]:
    """The publisher's and the subscriber's kind (``sdk`` or ``raw``) of a broker's client:
    ``sdk``, ``raw``, or ``PUB/SUB`` (``sdk/raw``: the SDK's publisher, a raw subscriber)."""
    pub, mixed, sub = client.partition("/")
    if not mixed:
        sub = pub
    if pub not in ("sdk", "raw") or sub not in ("sdk", "raw"):
        raise ValueError(f"not a broker's client: {client!r}")
    return pub, sub


def run_once(kind: str, rate: float, seconds: float, size: int, fsync: str) -> dict:
    pub_kind, sub_kind = kinds(kind)
    fork = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="zeps-stages-") as tmp:
        proc, endpoint, stamps = start_broker(tmp, fsync)
        clients = []
        try:
            q = fork.Queue()
            rp, rs, go = fork.Event(), fork.Event(), fork.Event()
            sub = fork.Process(target=_subscriber,
                               args=(sub_kind, endpoint, "stages", rs, go, q))
            sub.start()
            clients.append(sub)
            _ready(rs, proc, 60)
            pub = fork.Process(target=_publisher,
                               args=(pub_kind, endpoint, "stages", rate, seconds, size, rp,
                                     go, q))
            pub.start()
            clients.append(pub)
            _ready(rp, proc, 60)
            time.sleep(0.2)
            cpu = cpu_seconds(proc.pid)
            threads_before = _thread_cpu(proc.pid)
            preempted = _preemptions(proc.pid)
            go.set()
            got = {}
            for _ in range(2):
                item = _result(q, proc, seconds + 120)
                got[item[0]] = item
            cpu = cpu_seconds(proc.pid) - cpu
            threads = _thread_cpu(proc.pid)
            preempted = _preemptions(proc.pid) - preempted
            pub.join()
            sub.join()
        finally:
            for p in clients:                     # a failed run's clients wait for nothing
                if p.is_alive():
                    p.terminate()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        with open(stamps, "rb") as f:
            broker = pickle.load(f)
    _, p1, pgc, pcpu = got["pub"]
    _, s1, s2, sgc, scpu = got["sub"]
    res = analyse({"p1": p1, "gc": pgc}, {"s1": s1, "s2": s2, "gc": sgc}, broker,
                  int(1e9 / rate))
    n = len(p1) // 2
    res["cpu"] = {"publisher": pcpu / n, "broker": cpu / n, "subscriber": scpu / n}
    res["threads"] = _per_message(threads_before, threads, n)
    res["preempted"] = preempted / n
    return res


def _alive(middle) -> None:
    """SystemExit if the middle process (the broker, a ``subprocess.Popen``; or a forwarder, a
    ``multiprocessing.Process``) has exited: its clients would wait for it until they time out."""
    code = middle.poll() if isinstance(middle, subprocess.Popen) else middle.exitcode
    if code is not None:
        raise SystemExit(f"the middle process exited (status {code}) during the run")


def _ready(event, middle, timeout: float) -> None:
    """Wait for a client's ``event`` while the middle process runs (SystemExit if it exits)."""
    deadline = time.monotonic() + timeout
    while not event.wait(1.0):
        _alive(middle)
        if time.monotonic() > deadline:
            return                       # as before: the run goes on, its result says


def _result(q, middle, timeout: float):
    """The next client's result from ``q``; SystemExit if the middle process exits meanwhile
    or nothing comes within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=1.0)
        except queue.Empty:
            _alive(middle)
            if time.monotonic() > deadline:
                raise SystemExit(f"no result from the clients within {timeout:.0f} s") from None


def _preemptions(pid: int) -> int:
    """How many times the broker's loop (its process's main thread, where the loop's greenlet
    runs) lost the CPU while it could have run on (involuntary context switches, /proc)."""
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        for line in f:
            if line.startswith("nonvoluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def _thread_cpu(pid: int) -> Dict[str, float]:
    """User + system CPU seconds of a process's threads, in three groups (/proc): ``loop`` its
    main thread (the broker's loop, the proxy's, the forwarder's), ``zmq`` ZeroMQ's background
    threads (``ZMQbg/...``: the I/O thread, the reaper) and ``other`` the rest (the broker's
    sync and pool threads). A thread that ended between two readings is not counted."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"loop": 0.0, "zmq": 0.0, "other": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:                      # ended meanwhile
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        fields = rest.split()
        group = "loop" if tid == str(pid) else "zmq" if name.startswith("ZMQbg/") else "other"
        out[group] += (int(fields[11]) + int(fields[12])) / tick
    return out


def _per_message(before: Dict[str, float], after: Dict[str, float], n: int) -> Dict[str, float]:
    return {k: max(0.0, after[k] - before[k]) / max(n, 1) for k in before}


def report(res: dict, title: str) -> str:
    us = lambda ns: f"{ns / 1e3:,.0f}"          # noqa: E731
    lines = [f"### {title}", "",
             f"{res['n']:,} of {res['sent']:,} messages followed end to end; "
             f"end-to-end p50 {us(res['e2e'][50])} us, p99 {us(res['e2e'][99])} us, "
             f"p99.9 {us(res['e2e'][99.9])} us", "",
             "| stage | p50 | p99 | p99.9 | mean | mean in the slowest 1% | "
             "mean in the slowest 0.1% |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, a, b in STAGES:
        s = res["stages"][name]
        lines.append(f"| {name} ({a}→{b}) | {us(s[50])} | {us(s[99])} | {us(s[99.9])} | "
                     f"{us(s['mean'])} | {us(res['tail'][99][name])} | "
                     f"{us(res['tail'][99.9][name])} |")
    lines.append("")
    for p in (99, 99.9):
        t = res["tail"][p]
        lines.append(f"* slowest messages (e2e >= p{p}): {t['_n']}, mean {us(t['_e2e'])} us; "
                     f"overlapping a collection: publisher {t['_gc_pub']}, broker "
                     f"{t['_gc_broker']}, subscriber {t['_gc_sub']}; an fsync: {t['_fsync']}")
    lines.append("* collections during the run: " + "; ".join(
        f"{k}: {v}" for k, v in res["gc_counts"].items())
                 + f"; fsyncs: {res['fsyncs']} (busy {res['fsync_busy']:.0%} of the run: the "
                 "share of slow messages that would overlap one by chance)")
    lines.append("* " + _stalls_text(res["pub_stalls"]))
    if res.get("stuck_waits"):
        lines.append("* the broker's loop slept while a message waited: " + ", ".join(
            f"{d / 1e6:.1f} ms (timeout {t * 1e3:.1f} ms)" for d, t in res["stuck_waits"]))
    lines.append("* CPU per message (us): " + ", ".join(
        f"{k} {v * 1e6:.1f}" for k, v in res["cpu"].items())
        + (" (the publisher's includes its pacing, which spins between messages)"
           if bench.systems.PACER == "spin" else ""))
    lines.append("* the broker's CPU per message by thread (us): " + _threads_text(res["threads"]))
    lines.append(f"* the broker's loop lost the CPU to another thread (involuntary context "
                 f"switches of its thread): {res['preempted']:.2f} per message")
    return "\n".join(lines)


def _stalls_text(stalls: Tuple[int, int]) -> str:
    n, longest = stalls
    return (f"the publisher's stalls (a paced send {STALL_NS / 1e6:g} ms or more later than "
            f"due after the one before): {n}, the longest gap {longest / 1e6:.1f} ms")


def _threads_text(threads: Dict[str, float]) -> str:
    return (f"main thread (the loop) {threads['loop'] * 1e6:.1f}, ZeroMQ's threads "
            f"{threads['zmq'] * 1e6:.1f}, others {threads['other'] * 1e6:.1f}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["broker"]:
        return _broker_child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--client", default="sdk",
                    help="sdk (the ZEPS SDK), raw (bare pyzmq DEALERs), proxy (ZeroMQ's "
                         "XSUB/XPUB proxy, end to end only), pyproxy (the same forwarder with "
                         "zmq.green), pyproxy+N (that one burning N µs of CPU per message) or "
                         "pyloop (the forwarder waiting on gevent's hub per message), pycb "
                         "(that forwarder run from the hub's callbacks: the broker's loop "
                         "style), pycbw (that one writing each message to a file), pypoll "
                         "(that loop waiting in zmq_poll); sdk/raw, raw/sdk (the SDK's "
                         "publisher, a raw subscriber, or the other way round); several, "
                         "comma-separated, run in turn within each run, their figures prefixed "
                         "with their names")
    ap.add_argument("--fsync", choices=("always", "interval", "never"), default="interval")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--pacer", choices=("sleep", "spin"), default=bench.systems.PACER,
                    help="how the publisher waits for each message's due time "
                         "(bench.systems.PACER; default sleep)")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--summary", action="store_true",
                     help="one line of name=value figures per run instead of the tables")
    how.add_argument("--table", action="store_true",
                     help="one table of every run's end-to-end figures and CPU per message "
                          "instead of the stage tables")
    args = ap.parse_args(argv)
    bench.systems.PACER = args.pacer       # the forked publishers pace with it
    if args.size < STAMP_BYTES:
        ap.error(f"--size must be at least {STAMP_BYTES}")
    clients = args.client.split(",")
    if not clients or any(c not in MIDDLE and not _forwarder(c) for c in clients):
        ap.error("--client: sdk, raw, sdk/raw, raw/sdk, proxy, pyproxy, pyproxy+N (N µs), "
                 "pyloop, pypoll, pycb or pycbw, comma-separated")
    rows: List[tuple] = []          # --table: (run, client, e2e, cpu, p99 ratio, middle's threads)
    for i in range(args.runs):
        p99 = {}
        for client in clients:
            head = f"{client}_" if len(clients) > 1 else ""
            forwarder = _forwarder(client)
            if forwarder:
                res = run_proxy(args.rate, args.seconds, args.size, *forwarder)
                e = res["e2e"]
                p99[client] = e[99]
                if args.table:
                    rows.append([i + 1, client, e, res["cpu"], None, res["threads"],
                                 res["pub_stalls"]])
                    continue
                if not args.summary:
                    print(f"### proxy, {args.rate:,.0f} msg/s, {args.size} B, {args.pacer} pacer, "
                          f"run {i + 1}\n\n"
                          f"The same paced publisher through ZeroMQ's XSUB/XPUB proxy: end to "
                          f"end p50 {e[50] / 1e3:,.0f} us, p99 {e[99] / 1e3:,.0f} us, p99.9 "
                          f"{e[99.9] / 1e3:,.0f} us; CPU per message (us): " + ", ".join(
                              f"{k} {v * 1e6:.1f}" for k, v in res["cpu"].items())
                          + "; the proxy's by thread: " + _threads_text(res["threads"])
                          + "; " + _stalls_text(res["pub_stalls"]) + "\n", flush=True)
                    continue
                print(f"{head}e2e_p50_us={e[50] / 1e3:.0f} {head}e2e_p99_us={e[99] / 1e3:.0f} "
                      f"{head}e2e_p99.9_us={e[99.9] / 1e3:.0f} " + " ".join(
                          f"{head}cpu_{k}_us={v * 1e6:.1f}" for k, v in res["cpu"].items())
                      + " " + " ".join(f"{head}cpu_middle_{k}_us={v * 1e6:.1f}"
                                       for k, v in res["threads"].items())
                      + f" {head}pub_stalls={res['pub_stalls'][0]}"
                      f" {head}pub_stall_max_us={res['pub_stalls'][1] / 1e3:.0f}", flush=True)
                continue
            res = run_once(client, args.rate, args.seconds, args.size, args.fsync)
            p99[client] = res["e2e"][99]
            if args.table:
                rows.append([i + 1, client, res["e2e"], res["cpu"], None, res["threads"],
                             res["pub_stalls"]])
                continue
            if args.summary:
                e, cpu = res["e2e"], res["cpu"]
                figs = [f"e2e_p50_us={e[50] / 1e3:.0f}", f"e2e_p99_us={e[99] / 1e3:.0f}",
                        f"e2e_p99.9_us={e[99.9] / 1e3:.0f}",
                        f"followed_share={res['n'] / max(res['sent'], 1):.3f}"]
                figs += [f"cpu_{k}_us={v * 1e6:.1f}" for k, v in cpu.items()]
                figs += [f"cpu_middle_{k}_us={v * 1e6:.1f}" for k, v in res["threads"].items()]
                figs.append(f"loop_preempted_per_msg={res['preempted']:.3f}")
                figs += [f"pub_stalls={res['pub_stalls'][0]}",
                         f"pub_stall_max_us={res['pub_stalls'][1] / 1e3:.0f}"]
                figs += [f"{a}{b}_p{p}_us={res['stages'][name][p] / 1e3:.0f}"
                         for name, a, b in STAGES for p in (50, 99)]
                figs += [f"{a}{b}_slowest1%_us={res['tail'][99][name] / 1e3:.0f}"
                         for name, a, b in STAGES]
                print(" ".join(head + f for f in figs), flush=True)
                continue
            print(report(res, f"{client}, {args.rate:,.0f} msg/s, {args.size} B, fsync="
                              f"{args.fsync}, {args.pacer} pacer, run {i + 1}; microseconds") + "\n",
                  flush=True)
        if "proxy" in p99 and p99["proxy"]:
            over = {c: p99[c] / p99["proxy"] for c in clients if c != "proxy"}
            if args.table:
                for row in rows:
                    if row[0] == i + 1:
                        row[4] = over.get(row[1], 1.0)
                continue
            if args.summary:
                print(" ".join(f"{c}_p99_over_proxy={r:.2f}" for c, r in over.items()),
                      flush=True)
            else:
                print("* p99 over the proxy's in this run: " + ", ".join(
                    f"{c} {r:.2f}" for c, r in over.items()) + "\n", flush=True)
    if args.table:
        print(table(rows, f"{args.rate:,.0f} msg/s, {args.size} B, fsync={args.fsync} (sdk, "
                          f"raw), {args.pacer} pacer"))
    return 0


#: What each client's middle process is, in ``--table``.
MIDDLE = {"sdk": "broker", "raw": "broker", "sdk/raw": "broker", "raw/sdk": "broker",
          "proxy": "proxy"}
CLIENT_NAMES = {"sdk": "ZEPS SDK", "raw": "ZEPS, raw pyzmq", "proxy": "ZeroMQ XSUB/XPUB proxy",
                "sdk/raw": "ZEPS, SDK publisher, raw subscriber",
                "raw/sdk": "ZEPS, raw publisher, SDK subscriber",
                "pyproxy": "forwarder in pyzmq + gevent",
                "pyloop": "forwarder waiting on the hub per message",
                "pypoll": "forwarder waiting in zmq_poll",
                "pycb": "forwarder in the broker's loop style (hub callbacks)",
                "pycbw": "the same forwarder, writing each message to a file"}
#: ``pyproxy`` or ``pyproxy+N``: the forwarder, burning N µs of CPU per message.
PYPROXY = re.compile(r"pyproxy(?:\+(\d+))?")


def _forwarder(client: str):
    """The middle process of a client that runs through a forwarder instead of the broker, as
    ``(function, its arguments after the queue)``; None for the broker's clients and unknown
    names."""
    if client == "proxy":
        return (_proxy,)
    if client == "pyloop":
        return (_pyloop,)
    if client == "pypoll":
        return (_pypoll,)
    if client == "pycb":
        return (_pycb,)
    if client == "pycbw":
        return (_pycb, True)
    burn = PYPROXY.fullmatch(client)
    return (_pyproxy, int(burn[1] or 0)) if burn else None


def client_name(client: str) -> str:
    burn = PYPROXY.fullmatch(client)
    if burn and burn[1]:
        return f"{CLIENT_NAMES['pyproxy']}, +{burn[1]} µs CPU per message"
    return CLIENT_NAMES[client]


def table(rows: List[tuple], what: str) -> str:
    """``--table``: a row per run and client, then each client's medians over the runs."""
    us = lambda ns: f"{ns / 1e3:,.0f}"          # noqa: E731
    cpu = lambda c, k: f"{c[k] * 1e6:.1f}" if k in c else "—"    # noqa: E731
    out = [f"{what}; end to end in microseconds, CPU per message in microseconds; the middle "
           "process is the broker, the proxy or the forwarder", "",
           "| run | path | p50 | p99 | p99.9 | CPU: middle | its main thread | its ZeroMQ "
           "threads | CPU: subscriber | p99 ÷ proxy's | publisher's stalls (longest, ms) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    stalls = lambda n, longest: f"{n:g} ({longest / 1e6:.1f})"    # noqa: E731
    for run, client, e, c, over, t, st in rows:
        middle = MIDDLE.get(client, "proxy")
        out.append(f"| {run} | {client_name(client)} | {us(e[50])} | {us(e[99])} | "
                   f"{us(e[99.9])} | {cpu(c, middle)} | {cpu(t, 'loop')} | {cpu(t, 'zmq')} | "
                   f"{cpu(c, 'subscriber')} | " + (f"{over:.2f}" if over is not None else "—")
                   + f" | {stalls(*st)} |")
    med = statistics.median
    for client in dict.fromkeys(r[1] for r in rows):
        mine = [r for r in rows if r[1] == client]
        overs = [r[4] for r in mine if r[4] is not None]
        out.append(f"| median | {client_name(client)} | "
                   + " | ".join(us(med(r[2][p] for r in mine)) for p in (50, 99, 99.9)) + " | "
                   + " | ".join(f"{med(r[i][k] for r in mine) * 1e6:.1f}"
                                if all(k in r[i] for r in mine) else "—"
                                for i, k in ((3, MIDDLE.get(client, "proxy")), (5, "loop"),
                                             (5, "zmq"), (3, "subscriber"))) + " | "
                   + (f"{med(overs):.2f}" if overs else "—") + " | "
                   + stalls(med(r[6][0] for r in mine), med(r[6][1] for r in mine)) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
