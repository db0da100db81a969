"""The stamped broker of ``bench.bench_stages``: the checkout's ``zeps broker``, run with
bench-only wrappers around its loop, core and journal that record the stamps W, B1 to B4 (see
:mod:`bench.bench_stages`), its fsyncs and its garbage collections, written to a file when it
exits. ``python -m bench.bench_stages broker OUT_FILE <zeps broker arguments>`` runs it;
:func:`start_broker` starts it for a run.
"""
from __future__ import annotations

from array import array
import gc
import os
import pickle
import select
import subprocess
import sys
import time
from typing import List

from bench.stamps import first_times, frame_stamps, gc_probe


def broker_child(argv: List[str]) -> int:
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

    rounds = array("I")                   # messages of each journalling of a round (B3)

    def append_queued_stamped(self):
        rounds.append(len(in_round))
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
                             long_waits=long_waits, rounds=list(rounds)), f)


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
