"""One client can never hurt the others (issue 8, "Found, to fix"): one process test per item,
each with a hostile client against a real broker (tests/conftest.py) on 127.0.0.1.

Where a test found the broker still failing, it is kept and marked ``xfail(strict=True)`` with
the reason: it turns into a failure (XPASS) the day the broker is fixed, and the marker goes.
Figures are printed (``pytest -s``) and recorded in docs/operations.md, "Reliability".
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import zmq

from zeps.protocol import LATEST_LIVE, decode, encode
from zeps.protocol import commands as c
from zeps.protocol.deliver import deliver_cost
from zeps.protocol.reasons import LIMIT, WINDOW_TOO_SMALL

from .hostile import CATASTROPHIC
from .measure import PeakRss, open_fds, realtime, rss_mb, wait_for
from .pair import Pair
from .rawclient import RawClient

U64_MAX = 2**64 - 1


def _report(name: str, **figures) -> None:
    print(f"\n[isolation] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


@pytest.fixture
def clients_factory(broker):
    made = []

    def make(ctx=None):
        cl = RawClient(broker.endpoint, ctx)
        made.append(cl)
        return cl
    yield make
    for cl in made:
        cl.close()


def _confirmed_publisher(endpoint: str, stream: str, ctx=None) -> RawClient:
    pub = RawClient(endpoint, ctx).attach(stream)
    pub.send(c.ConfirmSelect())
    pub.expect(c.ConfirmSelectOk)
    return pub


def _publish_windowed(pub: RawClient, n: int, body: bytes, window: int = 200) -> None:
    """Publish ``n`` messages keeping at most ``window`` unconfirmed (the broker's inbound
    queue stays small: what grows is then what the test is about)."""
    confirmed = 0
    for i in range(n):
        pub.send(c.Publish("k", body))
        while i + 1 - confirmed > window:
            confirmed = pub.expect(c.Confirm, timeout=30).count
    while confirmed < n:
        confirmed = pub.expect(c.Confirm, timeout=30).count


# ------------------------------------------------------------------ 1. credit is not memory

HOG_MESSAGES, HOG_BODY = 10_000, 10 << 10          # ~100 MB


def test_unlimited_credit_never_read_keeps_rss_bounded_and_then_reads_everything(start_broker):
    """A client grants 2^64-1 credit and never reads while ~100 MB are published: the broker's
    RSS stays under baseline + --client-queue (1000) x 10 KiB + 16 MiB (the publisher's 200
    unconfirmed messages, one replay batch, allocator slack), because a full pipe drops the
    client to replay. Later it reads (granting what it consumed, as any reader does) and gets
    all 10,000 messages in order with no gap."""
    b = start_broker(None)
    pid = b.proc.pid
    hog = RawClient(b.endpoint, zmq.Context()).attach("big").subscribe("", 0, credit=U64_MAX)
    pub = _confirmed_publisher(b.endpoint, "big")
    with PeakRss(pid) as rss:
        _publish_windowed(pub, HOG_MESSAGES, b"h" * HOG_BODY)
    baseline, peak = rss.baseline, rss.peak
    bound = baseline + 1000 * HOG_BODY / (1 << 20) + 16
    got = 0
    while got < HOG_MESSAGES:
        d = hog.expect(c.Deliver, timeout=10)
        got += 1
        assert d.sequence == got
        hog.send(c.Credit(deliver_cost(1, len(d.body))))
    assert hog.nothing()
    _report("unlimited credit, never read", published_mb=round(HOG_MESSAGES * HOG_BODY / 1e6),
            rss_baseline_mb=round(baseline, 1), rss_peak_mb=round(peak, 1),
            rss_bound_mb=round(bound, 1))
    assert peak <= bound, f"RSS peaked at {peak:.1f} MiB, bound {bound:.1f} MiB"
    hog.close()
    pub.close()


def test_a_client_that_granted_unlimited_credit_once_reads_everything(start_broker):
    """Credit is additive (docs/protocol.md): 2^64-1 granted once is enough for any stream.
    70 MB are published; the client, which never grants again, must get all of it."""
    b = start_broker(None)
    pub = _confirmed_publisher(b.endpoint, "unlimited")
    n, size = 1100, 64 << 10
    _publish_windowed(pub, n, b"u" * size, window=50)
    reader = RawClient(b.endpoint).attach("unlimited").subscribe("", 0, credit=U64_MAX)
    got = 0
    try:
        while got < n:
            assert reader.expect(c.Deliver, timeout=5).sequence == got + 1
            got += 1
    except TimeoutError:
        pass
    assert got == n, f"stalled after {got} of {n} messages ({got * size >> 20} MiB)"


@pytest.mark.parametrize("messages, body_kib", [(10_000, 10), (100, 1000)],
                         ids=["10KiB", "1000KiB"])
def test_a_publisher_sending_flat_out_keeps_broker_memory_bounded(start_broker, messages,
                                                                  body_kib):
    """A publisher sends ~100 MB (10,000 messages of 10 KiB, or 100 of 1000 KiB) without waiting
    for anything: the broker reads only as fast as it journals, and what waits meanwhile stays
    under 32 MiB whatever the message size (the ROUTER's read-ahead is a byte bound,
    ``CoreConfig.receive_hwm``, not 10,000 messages: it parked ~100 MB here)."""
    b = start_broker(None)
    pid = b.proc.pid
    pub = RawClient(b.endpoint, zmq.Context()).attach("flat-out")
    body = b"f" * (body_kib << 10)
    with PeakRss(pid) as rss:
        for _ in range(messages):
            pub.send(c.Publish("k", body))
        pub.send(c.StreamInfo())               # answered once everything before it is journalled
        assert pub.expect(c.StreamInfoOk, timeout=60).last == messages
    baseline, peak = rss.baseline, rss.peak
    _report("publisher flat out", published_mb=round(messages * len(body) / 1e6),
            body_kib=body_kib, rss_baseline_mb=round(baseline, 1), rss_peak_mb=round(peak, 1))
    pub.close()
    assert peak <= baseline + 32, f"RSS peaked at {peak:.1f} MiB, baseline {baseline:.1f} MiB"


# ------------------------------------------------------------------ 2. regexes

@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_regex_that_may_backtrack_is_refused_at_subscribe(clients_factory, pattern):
    """`~(a|a)+$` and its kind get INVALID at SUBSCRIBE (never reach the matcher); the client
    is still served and a linear regex is accepted."""
    cl = clients_factory().attach("re")
    cl.send(c.Subscribe(pattern, 0))
    reason = cl.expect(c.Invalid).reason
    assert "may backtrack" in reason and repr(pattern[1:]) in reason, reason
    _report("catastrophic regex", pattern=pattern, reason=repr(reason))
    cl.subscribe(r"~^(eu|us)\.[a-z]+$", 0, credit=1 << 20)
    pub = clients_factory().attach("re")
    pub.send(c.Publish("eu.fr", b"1"), c.Publish("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", b"2"))
    assert [d.key for d in cl.delivers(1)] == ["eu.fr"]


REGEX_FLOOD = 10_000


def _flood_regexes(cl: RawClient, n: int) -> list:
    """Send ``n`` distinct regex SUBSCRIBEs, pipelined 500 at a time (a client that sends
    thousands of requests without reading any answer is forgotten once its queue and 256 held
    replies are full: tests/test_core_congestion.py); return the answers, in order."""
    answers = []
    for start in range(0, n, 500):
        for i in range(start, min(start + 500, n)):
            cl.send(c.Subscribe(f"~^k\\.{i}$", 0))
        answers.extend(cl.recv(120) for _ in range(start, min(start + 500, n)))
    return answers


def test_ten_thousand_regex_subscribes_get_limit_after_the_limit(clients_factory):
    """One client sends 10,000 distinct regex SUBSCRIBEs: the first 16 (--max-regex-subscriptions)
    are accepted, every later one gets INVALID "limit: ...", and the client is still served."""
    cl = clients_factory().attach("flood")
    answers = _flood_regexes(cl, REGEX_FLOOD)
    ok = [a for a in answers if isinstance(a, c.SubscribeOk)]
    refused = [a for a in answers if isinstance(a, c.Invalid)]
    assert len(ok) == 16 and answers[:16] == ok
    assert len(refused) == REGEX_FLOOD - 16
    assert all(a.reason.startswith(LIMIT) and "16 regex subscriptions per client" in a.reason
               for a in refused), refused[0]
    cl.send(c.Ping())
    cl.expect(c.PingOk)
    _report("regex SUBSCRIBEs", sent=REGEX_FLOOD, accepted=len(ok), refused=len(refused),
            reason=repr(refused[0].reason))


def _pair_rate(pair: Pair, n: int) -> float:
    """Messages a second the pair moves, publishing ``n`` flat out and reading them all."""
    start = time.monotonic()
    first = pair.sent
    pair.publish(n)
    assert pair.wait_all(60), f"{len(pair.received)} of {pair.sent}"
    assert not pair.problems, pair.problems[:3]
    return (pair.sent - first) / (time.monotonic() - start)


def test_a_regex_subscribe_flood_leaves_another_streams_rate_alone(broker):
    """While one client floods 10,000 regex SUBSCRIBEs, a well-behaved pair on another stream
    keeps at least a quarter of the rate it had before (broker and test under SCHED_FIFO)."""
    pair = Pair(broker.endpoint)
    flooder = RawClient(broker.endpoint, zmq.Context()).attach("flood")
    answers: list = []
    try:
        with realtime(broker.proc.pid, os.getpid()):
            _pair_rate(pair, 2000)                              # warm up
            # The best of a few short windows on each side: one window is a tenth of a second,
            # which one stall of this shared machine (or of this process, whose flooder thread
            # shares its GIL) can halve; a broker that starves the pair slows every window.
            before = max(_pair_rate(pair, 2000) for _ in range(3))
            flood = threading.Thread(target=lambda: answers.extend(_flood_regexes(flooder, REGEX_FLOOD)))
            flood.start()
            during = _pair_rate(pair, 2000)                     # begins with the flood
            for _ in range(2):
                rate = _pair_rate(pair, 2000)
                if not flood.is_alive():                        # only windows inside the flood
                    break
                during = max(during, rate)
            flooding = flood.is_alive()
            flood.join(120)
        _report("regex SUBSCRIBE flood", pair_rate_before=round(before),
                pair_rate_during=round(during), flood_still_running_at_the_end=flooding)
        assert len(answers) == REGEX_FLOOD
        # The flooder's refused SUBSCRIBEs are as cheap as the pair's PUBLISHes now (limits come
        # before any compile), so the one loop shares itself between two clients busy at full
        # speed; what must not come back is the old collapse (118k -> 36 msg/s).
        assert during >= before / 4, f"pair rate {during:.0f}/s during the flood, {before:.0f}/s before"
    finally:
        pair.close()
        flooder.close()


# ------------------------------------------------------------------ 4. many streams

def test_many_streams_release_descriptors_and_confirms_keep_flowing(start_broker):
    """With --max-open-streams 20, a client attaches, publishes and detaches on 500 streams:
    the broker's open descriptors stay bounded (20 journals x 4 files + a margin), nothing is
    lost on the way, and a confirmed publish on the first stream still gets its CONFIRM."""
    b = start_broker(None, "--max-open-streams", "20")
    pid = b.proc.pid
    first = _confirmed_publisher(b.endpoint, "many-0")
    first.send(c.Publish("k", b"before"))
    assert first.expect(c.Confirm).count == 1
    baseline = open_fds(pid)
    hopper = RawClient(b.endpoint)
    most = baseline
    for i in range(1, 501):
        hopper.attach(f"many-{i}")
        hopper.send(c.Publish("k", b"%d" % i), c.StreamInfo())
        assert hopper.expect(c.StreamInfoOk).last == 1
        hopper.send(c.Detach())
        hopper.expect(c.DetachOk)
        most = max(most, open_fds(pid))
    first.send(c.Publish("k", b"after"))
    conf = first.expect(c.Confirm, timeout=10)
    assert (conf.count, conf.sequence) == (2, 2)
    for i in (1, 250, 500):                                   # released streams reopen intact
        r = RawClient(b.endpoint).attach(f"many-{i}").subscribe("", 0, credit=1 << 20)
        assert [(d.sequence, d.body) for d in r.delivers(1)] == [(1, b"%d" % i)]
        r.close()
    _report("many streams", streams=501, fds_baseline=baseline, fds_most=most,
            fds_bound=baseline + 20 * 4 + 16)
    assert most <= baseline + 20 * 4 + 16
    assert "fsync_failed" not in b.log_path.read_text()
    hopper.close()
    first.close()


def test_max_streams_answers_invalid_limit(start_broker):
    """--max-streams 3: a fourth stream in use at once is refused with INVALID "limit: ...",
    the streams in use keep working, and once one is left the new stream can be attached."""
    b = start_broker(None, "--max-streams", "3")
    users = [RawClient(b.endpoint).attach(f"ms-{i}") for i in range(3)]
    extra = RawClient(b.endpoint)
    extra.send(c.Attach("ms-new"))
    reason = extra.expect(c.Invalid).reason
    assert reason.startswith(LIMIT) and "3 streams" in reason, reason
    _report("--max-streams 3", reason=repr(reason))
    extra.attach("ms-1")                                 # a stream in use: fine
    extra.send(c.Publish("k", b"x"), c.StreamInfo())
    assert extra.expect(c.StreamInfoOk).last == 1
    extra.send(c.Detach())
    extra.expect(c.DetachOk)
    users[0].send(c.Detach())
    users[0].expect(c.DetachOk)
    extra.attach("ms-new")                               # a slot was freed
    for cl in users + [extra]:
        cl.close()


class StalledByDirectoryFsync(AssertionError):
    """The stream-creation test's failure: the pair stopped while a directory fsync of a
    stream's creation was held (the broker's loop waited for the disk; issue 16 fixed it)."""


FSYNC_GATE = Path(__file__).resolve().parent / "fsyncgate"


def test_a_client_creating_streams_does_not_stall_others(start_broker, tmp_path, monkeypatch):
    """A client ATTACHes a new stream name while a pair runs on its own stream: while the
    creation waits for the disk to fsync the new directory, the pair's messages keep flowing;
    then the creation completes and 100 more pipelined creations are all answered, the pair
    losing nothing.

    The disk is made as slow as the test wants (tests/fsyncgate/sitecustomize.py, in the broker
    process only): every directory fsync waits while the test holds it. The old form of this
    test measured the pair's p99 on whatever disk was underneath, so on a fast disk (tmpfs, a
    good SSD) it passed with the loop still blocked by each fsync; held open, the fsync blocks
    the loop for as long as the test waits, whatever the disk, and only a broker that fsyncs
    off its loop lets the pair move meanwhile. The test waits for conditions with deadlines and
    asserts no latency: a stalled pair raises StalledByDirectoryFsync; a crash or a timeout
    anywhere else is a plain failure too."""
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(FSYNC_GATE))      # the broker's (conftest adds the repo)
    monkeypatch.setenv("ZEPS_FSYNC_GATE", str(gate))
    b = start_broker(None)
    pair = Pair(b.endpoint)
    creator = RawClient(b.endpoint, zmq.Context())
    hold = gate / "hold"
    try:
        pair.start_paced(0.002)
        assert wait_for(lambda: len(pair.received), lambda n: n >= 200, timeout=30) >= 200
        hold.touch()
        try:
            creator.send(c.Attach("new-0"))
            assert wait_for((gate / "started").exists, bool, timeout=30), \
                f"creating a stream fsynced no directory\n{b.log()}"
            before = len(pair.received)
            moved = wait_for(lambda: len(pair.received) - before, lambda n: n >= 250,
                             timeout=10)
            held = len((gate / "started").read_text().split())
        finally:
            hold.unlink()
        assert isinstance(creator.recv(30), c.AttachOk)
        _report("new stream, its directory fsync held", pair_messages_meanwhile=moved,
                directory_fsyncs_held=held)
        if moved < 250:
            raise StalledByDirectoryFsync(
                f"the pair moved {moved} messages in 10 s while a new stream's directory fsync "
                "was held: the broker's loop waits for the disk")
        creator.send(c.Detach())
        for i in range(1, 101):
            creator.send(c.Attach(f"new-{i}"), c.Detach())
        for _ in range(201):
            assert isinstance(creator.recv(60), (c.AttachOk, c.DetachOk))
        pair.stop_paced()
        assert pair.wait_all() and not pair.problems, pair.problems[:3]
    finally:
        if hold.exists():
            hold.unlink()
        pair.close()
        creator.close()


# ------------------------------------------------------------------ 7. too big for the window

def _too_big_then_granted(cl: RawClient, cost: int) -> None:
    """``cl`` was told message 2 is too big: crumbs of credit bring no second INVALID, enough
    credit brings message 2 and 3, in order."""
    for _ in range(5):
        cl.send(c.Credit(1))
    assert cl.nothing()                                      # told once, not at every grant
    cl.send(c.Credit(cost))
    assert [(d.sequence, d.body[:1]) for d in cl.delivers(2)] == [(2, b"B"), (3, b"a")]


def test_a_message_larger_than_the_credit_window_gets_invalid_once(clients_factory):
    """A raw subscriber catching up from the journal, whose credit (1,000 bytes) can never fit
    a 5,000-byte message, gets one INVALID saying so, not silence, and no second one while it
    grants crumbs; once it grants enough it gets that message and the rest, in order."""
    pub = clients_factory().attach("win")
    pub.send(c.Publish("k", b"small"), c.Publish("k", b"B" * 5000), c.Publish("k", b"after"),
             c.StreamInfo())
    pub.expect(c.StreamInfoOk)
    late = clients_factory().attach("win").subscribe("", 0, credit=1000)
    assert [d.body for d in late.delivers(1)] == [b"small"]
    reason = late.expect(c.Invalid).reason
    cost = deliver_cost(1, 5000)
    assert reason.startswith(f"{WINDOW_TOO_SMALL}message 2 needs {cost} bytes of credit"), reason
    assert "ever held at once (1000)" in reason
    _too_big_then_granted(late, cost)
    _report("message over the credit window, replaying", reason=repr(reason))


def test_a_live_subscriber_is_told_when_a_message_exceeds_its_window(clients_factory):
    """The same for a live subscriber (SUBSCRIBE latest=2^64-1, 1,000 bytes of credit): the
    5,000-byte message brings the INVALID without the client doing anything."""
    pub = clients_factory().attach("win")
    live = clients_factory().attach("win").subscribe("", LATEST_LIVE, credit=1000)
    pub.send(c.Publish("k", b"small"), c.Publish("k", b"B" * 5000), c.Publish("k", b"after"))
    assert [d.body for d in live.delivers(1)] == [b"small"]
    reason = live.expect(c.Invalid).reason
    assert reason.startswith(f"{WINDOW_TOO_SMALL}message 2 needs {deliver_cost(1, 5000)} bytes "
                             f"of credit"), reason
    _too_big_then_granted(live, deliver_cost(1, 5000))
    _report("message over the credit window, live", reason=repr(reason))


# ------------------------------------------------------------------ 6. vanished clients

def test_a_reader_that_never_sends_stays_and_a_silent_client_gets_detach(start_broker):
    """--expiry 2s: a subscriber that only reads (deliveries keep flowing, it never sends) is
    kept for 3 expiry periods and misses nothing; a client that neither sends nor receives is
    told S:DETACH and forgotten."""
    b = start_broker(None, "--expiry", "2s")
    pub = RawClient(b.endpoint).attach("alive")
    reader = RawClient(b.endpoint).attach("alive").subscribe("", 0, credit=1 << 30)
    silent = RawClient(b.endpoint).attach("alive")
    start = time.monotonic()
    sent = 0
    got = []
    detached = False
    while time.monotonic() - start < 6.0 or not detached:     # at least 3 expiry periods
        assert time.monotonic() - start < 20, "the silent client was never told DETACH"
        pub.send(c.Publish("k", b"%d" % sent))
        sent += 1
        while not reader.nothing(0.02):
            cmd = reader.recv()
            assert isinstance(cmd, c.Deliver), f"the reader got {cmd!r}"
            got.append(cmd.sequence)
        if not detached and not silent.nothing(0):
            assert isinstance(silent.recv(), c.Detach)
            detached = True
    while len(got) < sent:
        got.extend(d.sequence for d in reader.delivers(sent - len(got)))
    assert got == list(range(1, sent + 1))
    silent.send(c.StreamInfo())
    assert silent.expect(c.Invalid).reason.startswith("not attached")
    for cl in (pub, reader, silent):
        cl.close()


def test_detached_and_expired_clients_free_their_session_at_once(start_broker):
    """--max-clients 1: after a clean DETACH, or after the broker told a silent client DETACH,
    the next client is served (nothing of the old session is held)."""
    b = start_broker(None, "--max-clients", "1", "--expiry", "1s")
    a = RawClient(b.endpoint).attach("one")
    a.send(c.Detach())
    a.expect(c.DetachOk)
    a.close()
    bcl = RawClient(b.endpoint)
    bcl.attach("one")                                    # a's session was freed by its DETACH
    bcl.expect(c.Detach, timeout=15)                     # silent: expired and told
    ccl = RawClient(b.endpoint)
    ccl.attach("one")
    ccl.close()
    bcl.close()


# ------------------------------------------------------------------ 8. memory after load

def _round_stream(i: int) -> str:
    """The stream of client ``i`` of a round: the ones that will vanish (every fourth) are on
    r0, where the publisher publishes, so the broker soon finds out they are gone."""
    return "r0" if i % 4 == 0 else f"r{i % 10}"


def _round_of_clients(ctx, endpoint: str, n: int, publisher: RawClient, rnd: int) -> int:
    """``n`` new connections ATTACH (retrying while --max-clients refuses them: the previous
    round's sessions are not freed yet), SUBSCRIBE live and grant credit; one message reaches
    the ones on stream r0; then three quarters DETACH and one quarter just vanish (the broker
    finds out when it next sends to them, or when they expire). Everyone pings every 0.5 s while
    waiting. Returns how many ATTACHes had to be retried."""
    socks = []
    for i in range(n):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send(encode(c.Attach(_round_stream(i))))
        socks.append(s)
    index = {s: i for i, s in enumerate(socks)}
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    pending, retry_at, retries = set(socks), {}, 0
    deadline = time.monotonic() + 60
    next_ping = time.monotonic() + 0.5
    while pending:
        assert time.monotonic() < deadline, f"round {rnd}: {len(pending)} clients never served"
        for s, _ in poller.poll(20):
            while True:
                try:
                    cmd = decode(s.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
                if isinstance(cmd, c.AttachOk):
                    s.send(encode(c.Subscribe("", LATEST_LIVE)))
                    s.send(encode(c.Credit(1 << 20)))
                elif isinstance(cmd, c.SubscribeOk):
                    pending.discard(s)
                elif isinstance(cmd, c.Invalid):
                    assert cmd.reason.startswith(LIMIT), cmd.reason
                    retries += 1
                    retry_at[s] = time.monotonic() + 0.1
                else:
                    assert isinstance(cmd, c.PingOk), cmd
        now = time.monotonic()
        for s, t in list(retry_at.items()):
            if t <= now:
                del retry_at[s]
                s.send(encode(c.Attach(_round_stream(index[s]))))
        if now > next_ping:         # the publisher and the ones served early stay alive
            next_ping = now + 0.5
            publisher.send(c.Ping())
            publisher.expect(c.PingOk)
            for s in socks:
                if s not in pending:
                    s.send(encode(c.Ping()))
    publisher.send(c.Publish("k", b"round %d" % rnd))
    for i, s in enumerate(socks):
        if _round_stream(i) == "r0":
            while True:
                assert s.poll(10_000), f"round {rnd}: client {i} got nothing"
                cmd = decode(s.recv())
                if isinstance(cmd, c.Deliver):
                    assert cmd.body == b"round %d" % rnd
                    break
                assert isinstance(cmd, c.PingOk), cmd
    for i, s in enumerate(socks):
        if i % 4:
            s.send(encode(c.Detach()))
    for i, s in enumerate(socks):
        if i % 4:
            while True:
                assert s.poll(10_000)
                if isinstance(decode(s.recv()), c.DetachOk):
                    break
    for s in socks:
        s.close(0)
    return retries


def test_clients_attaching_and_leaving_in_rounds_do_not_grow_the_broker(start_broker):
    """Rounds of 1,000 clients (--max-clients 1001, so a round is only served once the previous
    round's sessions are freed; --expiry 2s frees the vanished ones the broker did not notice)
    attach, subscribe, receive, then detach or vanish: the broker's RSS after round 5 is within
    10% of its RSS after round 1."""
    b = start_broker(None, "--max-clients", "1001", "--expiry", "2s")
    pid = b.proc.pid
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 4096)          # closed sockets of a round may not be reaped yet
    publisher = RawClient(b.endpoint, ctx).attach("r0")
    rss, retries = [], []

    def rss_now() -> float:                 # (the publisher pings: --expiry is 2 s)
        publisher.send(c.Ping())
        publisher.expect(c.PingOk)
        return rss_mb(pid)

    for rnd in range(1, 6):
        retries.append(_round_of_clients(ctx, b.endpoint, 1000, publisher, rnd))
        publisher.send(c.Publish("k", b"after round %d" % rnd), c.StreamInfo())
        publisher.expect(c.StreamInfoOk)      # sent to the vanished: the broker forgets them
        if rnd == 1:
            rss.append(rss_now())
        else:
            rss.append(wait_for(rss_now, lambda v: v <= rss[0] * 1.1, timeout=5))
    _report("rounds of 1,000 clients", rss_mb=[round(x, 1) for x in rss], attach_retries=retries)
    publisher.close()
    ctx.term()
    assert rss[-1] <= rss[0] * 1.1, f"RSS after round 1: {rss[0]:.1f} MiB, after round 5: {rss[-1]:.1f} MiB"
