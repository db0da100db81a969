"""The broker, end to end: a real broker process, real DEALER sockets over tcp on 127.0.0.1."""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from zeps.journal import JournalReader, stream_dir_name
from zeps.protocol import commands as c
from zeps.protocol import LATEST_LIVE, decode, deliver_cost, encode

from .rawclient import RawClient


@pytest.fixture
def clients(broker):
    made = []

    def make():
        cl = RawClient(broker.endpoint)
        made.append(cl)
        return cl
    yield make
    for cl in made:
        cl.close()


def publish(cl, n, key="k", start=0, size=None):
    for i in range(start, start + n):
        body = (b"%d" % i) if size is None else b"x" * size
        cl.send(c.Publish(key if isinstance(key, str) else key(i), body))


# ------------------------------------------------------------------ grammar and INVALID

def test_handshake_and_every_simple_command(clients):
    a = clients()
    a.send(c.Ping())
    a.expect(c.PingOk)                       # PING before ATTACH is answered
    a.send(c.ListStreams())
    assert a.expect(c.ListStreamsOk).streams == ()
    a.attach("orders")
    a.send(c.Ping())
    a.expect(c.PingOk)
    a.send(c.StreamInfo())
    info = a.expect(c.StreamInfoOk)
    assert (info.first, info.last) == (1, 0)
    a.send(c.ConfirmSelect())
    assert a.expect(c.ConfirmSelectOk).published == 0
    publish(a, 3)
    conf = a.expect(c.Confirm)
    while conf.count < 3:
        conf = a.expect(c.Confirm)
    assert (conf.count, conf.sequence) == (3, 3)
    a.subscribe("", 0, credit=1 << 20)
    assert [(d.sequence, d.body) for d in a.delivers(3)] == [(1, b"0"), (2, b"1"), (3, b"2")]
    a.send(c.SeqAtTime(0))
    assert a.expect(c.SeqAtTimeOk).sequence == 1
    a.send(c.SeqAtTime(2**63))
    assert a.expect(c.SeqAtTimeOk).sequence == 4
    a.send(c.StreamInfo())
    info = a.expect(c.StreamInfoOk)
    assert (info.first, info.last) == (1, 3) and info.size > 0 and 0 < info.oldest <= info.newest
    a.send(c.ListStreams())
    assert a.expect(c.ListStreamsOk).streams == ("orders",)
    a.send(c.Detach())
    a.expect(c.DetachOk)
    a.attach("orders")                       # a peering can attach again after DETACH


@pytest.mark.parametrize("frames, reason", [
    ([b""], "empty frame"),
    ([b"\xaa\xa6\x08"], "bad signature"),
    ([bytes.fromhex("aaa50d")], "unknown command 13"),
    ([bytes.fromhex("aaa5050000")], "truncated CREDIT"),
    ([bytes.fromhex("aaa501045a45505800010173")], "ATTACH protocol must be ZEPS"),
    ([bytes.fromhex("aaa501045a45505300020173")], "ATTACH version 2 not supported"),
    ([encode(c.Ping()), encode(c.Ping())], "exactly one frame, got 2"),
    ([encode(c.Subscribe("", 0))], "not attached: SUBSCRIBE before ATTACH"),
    ([encode(c.Credit(5))], "not attached: CREDIT before ATTACH"),
    ([encode(c.Publish("k", b"v"))], "not attached: PUBLISH before ATTACH"),
    ([encode(c.Detach())], "not attached: DETACH before ATTACH"),
    ([encode(c.StreamInfo())], "not attached: STREAM-INFO before ATTACH"),
    ([encode(c.SeqAtTime(1))], "not attached: SEQ-AT-TIME before ATTACH"),
    ([encode(c.ConfirmSelect())], "not attached: CONFIRM-SELECT before ATTACH"),
    ([encode(c.Deliver(1, "k", b""))], "DELIVER is sent by the broker"),
    ([encode(c.AttachOk())], "ATTACH-OK is sent by the broker"),
    ([encode(c.Attach("bad\x00name"))], "contain no NUL"),
    ([encode(c.Attach(""))], "stream name must be"),
])
def test_invalid_before_attach(clients, frames, reason):
    a = clients()
    a.send_raw(*frames)
    inv = a.expect(c.Invalid)
    assert reason in inv.reason
    a.send(c.Ping())                         # the peering is still served
    a.expect(c.PingOk)


def test_invalid_when_attached(clients, broker):
    a = clients().attach("s")
    a.send(c.Attach("other"))
    assert "ATTACH while attached to stream 's'" in a.expect(c.Invalid).reason
    a.send(c.Subscribe("~(", 0))
    assert "bad regular expression" in a.expect(c.Invalid).reason
    a.send(c.Publish("k", b"x" * ((1 << 20) + 1)))
    assert a.expect(c.Invalid).reason.startswith("PUBLISH rejected: body of 1048577 bytes")
    a.send(c.Detach())
    a.expect(c.DetachOk)
    a.send(c.Credit(1))
    assert "not attached" in a.expect(c.Invalid).reason
    # Nothing rejected reached the journal.
    assert JournalReader(broker.data_dir / stream_dir_name("s")).info().last_seq == 0


def test_garbage_from_one_client_does_not_disturb_others(clients):
    pub, sub, bad = clients().attach("g"), clients().attach("g"), clients()
    sub.subscribe("", 0, credit=1 << 20)
    bad.attach("g")
    got = []
    for i in range(200):
        bad.send_raw(bytes([0xAA, 0xA5, 6, 200]) + b"\x01" * (i % 7))   # truncated PUBLISH
        bad.send_raw(b"\x00" * (i % 5))
        pub.send(c.Publish("k", b"%d" % i))
    got = sub.delivers(200)
    assert [d.sequence for d in got] == list(range(1, 201))
    reasons = set()
    for _ in range(400):
        reasons.add(bad.expect(c.Invalid).reason.split(":")[0])
    assert reasons <= {"truncated PUBLISH", "empty frame", "truncated frame", "bad signature"}
    bad.send(c.Ping())
    bad.expect(c.PingOk)


# ------------------------------------------------------------------ routing

def test_prefix_and_regex_routing(clients):
    pub = clients().attach("r")
    all_ = clients().attach("r").subscribe("", 0, credit=1 << 20)
    eu = clients().attach("r").subscribe("eu.", 0, credit=1 << 20)
    fr = clients().attach("r").subscribe(r"~\.fr$", 0, credit=1 << 20)
    both = clients().attach("r").subscribe("us.", 0).subscribe(r"~^eu\.(de|fr)$", 0, credit=1 << 20)
    keys = ["eu.fr", "eu.de", "us.ny", "us.fr", "eu.fr.paris", "asia"]
    for k in keys:
        pub.send(c.Publish(k, k.encode()))
    assert [d.key for d in all_.delivers(6)] == keys
    assert [d.key for d in eu.delivers(3)] == ["eu.fr", "eu.de", "eu.fr.paris"]
    assert [d.key for d in fr.delivers(2)] == ["eu.fr", "us.fr"]
    got = both.delivers(4)
    assert [d.key for d in got] == ["eu.fr", "eu.de", "us.ny", "us.fr"]     # once each, in order
    assert [d.sequence for d in got] == [1, 2, 3, 4]
    for cl in (eu, fr, both):
        assert cl.nothing()


def test_later_subscribe_never_rewinds_the_position(clients):
    pub = clients().attach("p")
    publish(pub, 5, key=lambda i: "a" if i % 2 == 0 else "b")     # a,b,a,b,a = 1..5
    sub = clients().attach("p").subscribe("a", 0, credit=1 << 20)
    assert [d.sequence for d in sub.delivers(3)] == [1, 3, 5]
    sub.subscribe("b", 0)                    # asks for history, but position is 6 now
    publish(pub, 2, key=lambda i: "b", start=5)
    assert [d.sequence for d in sub.delivers(2)] == [6, 7]
    assert sub.nothing()


# ------------------------------------------------------------------ latest, late joiners

def test_latest_zero_live_and_number(clients):
    pub = clients().attach("l")
    publish(pub, 10)
    first = clients().attach("l").subscribe("", 0, credit=1 << 20)
    assert [d.sequence for d in first.delivers(10)] == list(range(1, 11))
    mid = clients().attach("l").subscribe("", 6, credit=1 << 20)
    assert [d.sequence for d in mid.delivers(4)] == [7, 8, 9, 10]
    live = clients().attach("l").subscribe("", LATEST_LIVE, credit=1 << 20)
    assert live.nothing()
    publish(pub, 2, start=10)
    assert [d.sequence for d in live.delivers(2)] == [11, 12]
    ahead = clients().attach("l").subscribe("", 20, credit=1 << 20)       # starts at 21
    publish(pub, 10, start=12)
    assert [d.sequence for d in ahead.delivers(2)] == [21, 22]


def test_late_joiner_while_publishing_continuously_gets_no_gap_no_duplicate(clients, broker):
    stop = threading.Event()
    sent = [0]

    def publisher():
        p = RawClient(broker.endpoint, zmq.Context())
        p.attach("busy")
        while not stop.is_set() and sent[0] < 60000:
            for _ in range(100):
                p.send(c.Publish("k", b"%d" % sent[0]))
                sent[0] += 1
            time.sleep(0.002)
        p.send(c.StreamInfo())
        p.expect(c.StreamInfoOk)             # everything before it is journalled
        p.close()
        p.ctx.term()

    t = threading.Thread(target=publisher)
    t.start()
    while sent[0] < 3000:
        time.sleep(0.01)
    late = clients().attach("busy").subscribe("", 0, credit=1 << 30)
    got = []
    deadline = time.monotonic() + 60
    while sent[0] < 8000:
        got.extend(late.delivers(100))
    stop.set()
    t.join()
    total = sent[0]
    while len(got) < total and time.monotonic() < deadline:
        got.extend(late.delivers(min(1000, total - len(got))))
    assert [d.sequence for d in got] == list(range(1, total + 1))
    assert [d.body for d in got] == [b"%d" % i for i in range(total)]
    assert late.nothing()


# ------------------------------------------------------------------ credit

def test_tiny_credit_subscriber_gets_everything_eventually_fast_one_unaffected(clients):
    pub = clients().attach("c")
    fast = clients().attach("c").subscribe("", 0, credit=1 << 30)
    slow = clients().attach("c").subscribe("", 0)
    n, size = 3000, 100
    cost = deliver_cost(1, size)
    slow.send(c.Credit(cost * 3))
    publish(pub, n, size=size)
    t0 = time.monotonic()
    assert [d.sequence for d in fast.delivers(n)] == list(range(1, n + 1))
    fast_time = time.monotonic() - t0
    got = []
    while len(got) < n:
        batch = slow.delivers(min(3, n - len(got)))
        got.extend(batch)
        assert slow.nothing(0.0) or len(got) == n       # never more than its credit
        slow.send(c.Credit(cost * len(batch)))
    assert [d.sequence for d in got] == list(range(1, n + 1))
    assert fast_time < 10


def test_credit_is_spent_exactly_and_resumes_without_any_new_publish(clients):
    pub = clients().attach("cr")
    sub = clients().attach("cr").subscribe("", 0)
    publish(pub, 10, size=10)                      # cost of each: 8 + 1 + 1 + 10 = 20
    pub.send(c.StreamInfo())
    pub.expect(c.StreamInfoOk)
    assert sub.nothing()                           # no credit, nothing sent
    sub.send(c.Credit(20 * 4 + 19))                # enough for 4, not 5
    assert [d.sequence for d in sub.delivers(4)] == [1, 2, 3, 4]
    assert sub.nothing()
    sub.send(c.Credit(1))                          # now 20: the fifth goes, no PUBLISH needed
    assert [d.sequence for d in sub.delivers(1)] == [5]
    sub.send(c.Credit(1000))
    assert [d.sequence for d in sub.delivers(5)] == [6, 7, 8, 9, 10]
    publish(pub, 1, size=10, start=10)             # back to live
    assert [d.sequence for d in sub.delivers(1)] == [11]


# ------------------------------------------------------------------ time, expiry, restart

def test_replay_from_a_time(clients):
    pub = clients().attach("t")
    publish(pub, 5)
    pub.send(c.StreamInfo())
    pub.expect(c.StreamInfoOk)
    time.sleep(0.05)
    mark = time.time_ns()
    time.sleep(0.05)
    publish(pub, 5, start=5)
    sub = clients().attach("t")
    sub.send(c.SeqAtTime(mark))
    seq = sub.expect(c.SeqAtTimeOk).sequence
    assert seq == 6
    sub.subscribe("", seq - 1, credit=1 << 20)
    assert [d.body for d in sub.delivers(5)] == [b"5", b"6", b"7", b"8", b"9"]


def test_silent_client_is_told_detach_and_forgotten(start_broker):
    """A client silent for longer than --expiry gets S:DETACH, and is then a stranger. (Which
    activity counts as a sign of life is tested against the pure core with an explicit clock.)"""
    b = start_broker(None, "--expiry", "1s")
    a = RawClient(b.endpoint)
    a.attach("e")
    a.expect(c.Detach, timeout=15)                  # sent when the broker forgets it
    a.send(c.StreamInfo())
    assert a.expect(c.Invalid).reason == "not attached: STREAM-INFO before ATTACH"
    a.close()


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_sigkill_restart_continues_sequence_and_keeps_confirmed(start_broker, policy):
    b = start_broker(None, "--fsync", policy)
    pub = RawClient(b.endpoint).attach("k")
    pub.send(c.ConfirmSelect())
    pub.expect(c.ConfirmSelectOk)
    publish(pub, 500)
    confirmed = 0
    while confirmed < 500:
        confirmed = pub.expect(c.Confirm).count
    sub = RawClient(b.endpoint).attach("k").subscribe("", 0, credit=1 << 30)
    delivered = sub.delivers(500)
    b.kill()
    pub.close()
    sub.close()
    b.restart()
    pub = RawClient(b.endpoint).attach("k")
    pub.send(c.StreamInfo())
    assert pub.expect(c.StreamInfoOk).last == 500        # every confirmed message is there
    publish(pub, 3, start=500)
    sub = RawClient(b.endpoint).attach("k").subscribe("", delivered[-1].sequence, credit=1 << 30)
    assert [d.sequence for d in sub.delivers(3)] == [501, 502, 503]   # never reused
    pub.close()
    sub.close()


def test_second_broker_on_same_data_dir_fails_clearly(broker, start_broker):
    with pytest.raises(RuntimeError, match="in use|locked"):
        start_broker(broker.data_dir)


def test_sigterm_exits_cleanly(broker):
    cl = RawClient(broker.endpoint).attach("x")
    publish(cl, 3)
    cl.send(c.StreamInfo())
    cl.expect(c.StreamInfoOk)
    cl.close()
    assert broker.stop() == 0
    assert JournalReader(broker.data_dir / stream_dir_name("x")).info().last_seq == 3


REPO = Path(__file__).resolve().parent.parent
SYNC_FAIL = Path(__file__).resolve().parent / "syncfail"


@pytest.mark.parametrize("fsync", [["--fsync", "never"],
                                   ["--fsync", "interval", "--fsync-interval-ms", "3600000"]])
def test_sigterm_after_a_failed_last_sync_exits_1(start_broker, tmp_path, monkeypatch, fsync):
    """SIGTERM, and the broker's last sync of a stream fails (EIO: tests/syncfail, in the broker
    process only): what it was sent, confirmed already with --fsync never, may not be on disk,
    and the exit status says so (it was 0, the failure in one log line)."""
    flag = tmp_path / "fail"
    monkeypatch.setenv("PYTHONPATH", str(SYNC_FAIL))       # the broker's (conftest adds the repo)
    monkeypatch.setenv("ZEPS_SYNC_FAIL", str(flag))
    b = start_broker(None, *fsync)
    cl = RawClient(b.endpoint).attach("x")
    cl.send(c.ConfirmSelect())
    cl.expect(c.ConfirmSelectOk)
    publish(cl, 3)
    cl.send(c.StreamInfo())
    while True:
        got = cl.recv()
        if isinstance(got, c.StreamInfoOk):
            break
    assert got.last == 3
    cl.close()
    flag.touch()
    assert b.stop() == 1
    log = b.log()
    assert "fsync_failed" in log and "stream=x" in log, log
    assert "broker_stopped" in log and "unsynced" in log, log


def test_a_failed_sync_is_one_json_line_with_log_json(start_broker, tmp_path, monkeypatch):
    """--log-json: a periodic sync that fails (EIO: tests/syncfail) is the broker's own
    fsync_failed line, final for the stream until it is opened again (zeps/journal/
    durability.py), and every line on stderr is one JSON object (gevent's thread pool printed
    the failed task's traceback on stderr too, raw: nine lines of text among the JSON)."""
    flag = tmp_path / "fail"
    flag.touch()
    monkeypatch.setenv("PYTHONPATH", str(SYNC_FAIL))       # the broker's (conftest adds the repo)
    monkeypatch.setenv("ZEPS_SYNC_FAIL", str(flag))
    b = start_broker(None, "--log-json")
    cl = RawClient(b.endpoint).attach("x")
    cl.send(c.ConfirmSelect())
    cl.expect(c.ConfirmSelectOk)
    publish(cl, 1)
    refused = cl.recv(20)                 # its publish: no CONFIRM, but a refusal
    assert isinstance(refused, c.Invalid) and "journal sync failed" in refused.reason, refused
    flag.unlink()               # the disk syncs again, but what it dropped is not known
    publish(cl, 1)
    refused = cl.recv(20)
    assert isinstance(refused, c.Invalid) and "not known durable" in refused.reason, refused
    cl.close()
    assert b.stop() == 1                                   # its last sync fails too
    lines = b.log_path.read_text().splitlines()
    assert [line for line in lines if not _json_object(line)] == []
    assert "fsync_failed" in [json.loads(line)["event"] for line in lines], lines


def test_an_error_gevent_s_hub_reports_is_one_json_line_with_log_json():
    """A greenlet that raises (nothing of the broker's should; a bug may) is reported by
    gevent's hub: with the broker's logging and --log-json, one JSON line (it was a raw
    traceback on stderr)."""
    code = ("import gevent\n"
            "from zeps.cli.broker import configure_logging\n"
            "configure_logging(True, 'info')\n"
            "gevent.spawn(lambda: 1 / 0).join()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert [line for line in lines if not _json_object(line)] == []
    (event,) = [json.loads(line) for line in lines]
    assert event["event"] == "unhandled_error" and "ZeroDivisionError" in event["error"]
    assert "Traceback" in event["traceback"]


def _json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def test_disk_full_tells_the_publisher_and_delivers_nothing_half_written(start_broker):
    b = start_broker(None, "--fsync", "always", max_file_bytes=64 * 1024)
    pub = RawClient(b.endpoint).attach("full")
    sub = RawClient(b.endpoint).attach("full").subscribe("", 0, credit=1 << 30)
    other = RawClient(b.endpoint).attach("other")
    pub.send(c.ConfirmSelect())
    pub.expect(c.ConfirmSelectOk)
    body = b"y" * 1000
    invalid = None
    for _ in range(200):                                  # ~200 KB: well past the 64 KiB limit
        pub.send(c.Publish("k", body))
        pub.send(c.StreamInfo())
        while True:
            got = pub.recv()
            if isinstance(got, c.Invalid):
                invalid = got
            if isinstance(got, c.StreamInfoOk):
                break
        if invalid:
            break
    assert invalid is not None, "the journal never filled up"
    assert invalid.reason.startswith("PUBLISH rejected: journal append failed")
    last = got.last
    assert 0 < last < 200
    delivered = sub.delivers(last)
    assert [d.sequence for d in delivered] == list(range(1, last + 1))
    assert all(d.body == body for d in delivered)
    assert sub.nothing()                                  # nothing of the failed append
    for _ in range(3):                                    # one INVALID per rejected PUBLISH
        pub.send(c.Publish("k", body))
    pub.send(c.StreamInfo())
    answers = [pub.recv() for _ in range(4)]
    assert [type(a) for a in answers] == [c.Invalid] * 3 + [c.StreamInfoOk]
    assert answers[-1].last == last
    other.send(c.Ping())                                  # the broker keeps serving
    other.expect(c.PingOk)
    for cl in (pub, sub, other):
        cl.close()
    b.kill()
    r = JournalReader(b.data_dir / stream_dir_name("full"))
    assert [rec.sequence for rec in r.read_from(1)] == list(range(1, last + 1))



def test_corruption_in_an_old_segment_is_reported_to_the_replaying_client(start_broker):
    b = start_broker(None, "--segment-bytes", "4K")
    pub = RawClient(b.endpoint).attach("rot")
    for r in range(6):                              # separate batches: a batch is never split
        publish(pub, 20, size=100, start=20 * r)
        pub.send(c.StreamInfo())
        assert pub.expect(c.StreamInfoOk).last == 20 * (r + 1)
    pub.close()
    assert b.stop() == 0
    segments = sorted((b.data_dir / stream_dir_name("rot")).glob("*.log"))
    assert len(segments) >= 3
    first = segments[0]
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF                    # rot one byte in the middle of an old segment
    first.write_bytes(bytes(data))
    b.restart()
    sub = RawClient(b.endpoint).attach("rot").subscribe("", 0, credit=1 << 30)
    got = []
    while True:
        cmd = sub.recv()
        if isinstance(cmd, c.Invalid):
            break
        got.append(cmd.sequence)
    assert got == list(range(1, len(got) + 1)) and 0 < len(got) < 120   # the good part, in order
    assert cmd.reason.startswith(f"cannot replay from sequence {len(got) + 1}")
    late = RawClient(b.endpoint).attach("rot").subscribe("", 100, credit=1 << 30)
    assert [d.sequence for d in late.delivers(20)] == list(range(101, 121))   # others still served
    sub.close()
    late.close()


def test_a_stream_the_disk_cannot_hold_gets_invalid(clients, broker):
    (broker.data_dir / "blocked").write_text("a file where the stream's directory would go")
    a = clients()
    a.send(c.Attach("blocked"))
    reason = a.expect(c.Invalid).reason
    assert reason.startswith("cannot open stream 'blocked'")
    a.attach("fine")                             # still not attached, so it can attach elsewhere
    a.send(c.Ping())
    a.expect(c.PingOk)


def test_deliver_timestamps_live_and_replayed(clients):
    pub = clients().attach("ts")
    t0 = time.time_ns()
    publish(pub, 3)
    plain = clients().attach("ts")
    stamped = clients().attach("ts")
    stamped.send(c.DeliverTimestamps())
    stamped.expect(c.DeliverTimestampsOk)
    plain.subscribe("", 0, credit=1 << 20)
    cost = deliver_cost(1, 1)
    stamped.subscribe("", 0, credit=3 * cost)          # exactly 3 (the timestamp is not charged)
    got = [stamped.recv() for _ in range(3)]           # replayed from the journal
    assert all(isinstance(g, c.DeliverTs) for g in got)
    assert [(g.sequence, g.key, g.body) for g in got] == \
        [(d.sequence, d.key, d.body) for d in plain.delivers(3)]
    assert stamped.nothing()
    stamped.send(c.Credit(1 << 20))
    publish(pub, 2, start=3)                           # live
    live = [stamped.expect(c.DeliverTs) for _ in range(2)]
    assert [g.sequence for g in live] == [4, 5]
    assert [d.sequence for d in plain.delivers(2)] == [4, 5]   # the others still get DELIVER
    stamps = [g.timestamp for g in got + live]
    assert t0 <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= time.time_ns()


def test_retention_by_bytes_and_a_late_joiner_starts_at_the_first_kept(start_broker):
    b = start_broker(None, "--segment-bytes", "4K", "--retention-bytes", "12K")
    pub = RawClient(b.endpoint).attach("ret")
    for r in range(20):                             # 20 batches of ~2.6 KB: segments roll, old go
        publish(pub, 20, size=100, start=20 * r)
        pub.send(c.StreamInfo())
        info = pub.expect(c.StreamInfoOk)
    assert info.last == 400
    assert info.first > 1 and info.size <= 12 * 1024 + 4096   # whole old segments were deleted
    sub = RawClient(b.endpoint).attach("ret").subscribe("", 0, credit=1 << 30)
    got = sub.delivers(400 - info.first + 1)
    assert [d.sequence for d in got] == list(range(info.first, 401))
    assert sub.nothing()
    pub.close()
    sub.close()


def test_every_valid_stream_name_works_even_reserved_or_long_once_escaped(clients, broker):
    """'LOCK' is the data directory's lock file's name, and '/' * 86 or 'é' * 127 escape to more
    than 255 bytes: all are valid ZEPS names (1-255 bytes, no NUL) and must work, and survive a
    restart of the broker."""
    names = ["LOCK", "/" * 86, "\u00e9" * 127]
    for n in names:
        p = clients().attach(n)
        p.send(c.Publish("k", n.encode()), c.StreamInfo())
        assert p.expect(c.StreamInfoOk).last == 1
    broker.restart()
    q = clients()
    q.send(c.ListStreams())
    assert set(names) <= set(q.expect(c.ListStreamsOk).streams)
    for n in names:
        s = clients().attach(n).subscribe("", 0, credit=1 << 20)
        assert [d.body for d in s.delivers(1)] == [n.encode()]


def test_a_new_connection_claiming_a_closed_clients_id_gets_a_fresh_session(clients, broker):
    """A peer may pick its ROUTER routing id. The victim subscribes live and its connection
    closes; an attacker connecting with the same id must not inherit the session: it is a
    stranger, and nothing published afterwards reaches it."""
    ctx = zmq.Context.instance()

    def dealer(ident):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.ROUTING_ID, ident)
        s.connect(broker.endpoint)
        return s

    victim = dealer(b"victim-id")
    for cmd in (c.Attach("t"), c.Subscribe("", LATEST_LIVE), c.Credit(1 << 20), c.Ping()):
        victim.send(encode(cmd))
    got = []
    while not got or not isinstance(got[-1], c.PingOk):
        assert victim.poll(5000)
        got.append(decode(victim.recv()))
    victim.close(0)
    pub = clients().attach("t")
    attacker = None
    deadline = time.monotonic() + 10
    while attacker is None and time.monotonic() < deadline:
        s = dealer(b"victim-id")                   # the id is free once the broker saw the close
        s.send(encode(c.Ping()))
        if s.poll(1000):
            assert isinstance(decode(s.recv()), c.PingOk)
            attacker = s
        else:
            s.close(0)
    assert attacker is not None, "the broker never let a new connection use the id"
    publish(pub, 5)
    pub.send(c.StreamInfo())
    assert pub.expect(c.StreamInfoOk).last == 5
    attacker.send(encode(c.StreamInfo()))
    assert attacker.poll(5000)
    first = decode(attacker.recv())
    assert isinstance(first, c.Invalid) and first.reason.startswith("not attached"), first
    assert not attacker.poll(300), "the attacker received what was meant for the victim"
    attacker.close(0)
