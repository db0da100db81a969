"""Seeing inside the broker: the monitoring documents, the Prometheus metrics, the HTTP port,
the dashboard in a real browser, and ``zeps top``.

The documents (:mod:`zeps.broker.monitor`) and metrics are checked against a real
:class:`BrokerCore` over a real journal, driven in-process with an explicit clock; the port, the
dashboard and ``zeps top`` against a real broker process under load.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from prometheus_client.parser import text_string_to_metric_families

from zeps.broker.core import BrokerCore, CoreConfig
from zeps.broker import metrics as metrics_module
from zeps.broker.http import MAX_CONNECTIONS, MonitorServer
from zeps.broker.metrics import Metrics
from zeps.broker.monitor import MODES, Redactor, connz, streamz, varz
from zeps.cli.top import Sample, render
from zeps.clients import Client
from zeps.journal import DataDir, JournalConfig
from zeps.protocol import LATEST_LIVE, decode, deliver_cost, encode
from zeps.protocol import commands as c
from zeps.protocol.reasons import LABELS, label
from zeps.units import parse_address

from .cdp import Browser, find_chromium, number
from .conftest import REPO
from . import slowloris
from .rawclient import RawClient
from .property_examples import examples

KEY, BODY = "k.1", b"0123456789"
COST = deliver_cost(len(KEY), len(BODY))


class Core:
    """A BrokerCore over a real journal, its outbox collected per client, a clock the test sets."""

    def __init__(self, path, **config):
        self.datadir = DataDir(str(path), JournalConfig(fsync="never"))
        self.core = BrokerCore(self.datadir, CoreConfig(**config))
        self.now = 1000.0
        self.box: Dict[bytes, List[c.Command]] = {}

    def send(self, ident: bytes, *cmds) -> None:
        for cmd in cmds:
            frames = cmd if isinstance(cmd, list) else [encode(cmd)]
            self.core.receive(ident, frames, self.now)
            for name in self.core.take_opens():     # the shell opens journals off the loop
                self.datadir.journal(name)
                self.core.opened(name, None, self.now)
        self.collect()

    def collect(self) -> None:
        for ident, frame in self.core.take_outbox():
            self.box.setdefault(ident, []).append(decode(frame))

    def round(self) -> None:
        """One round of the shell: journal and route, then one replay batch each."""
        self.core.append_queued()
        self.collect()
        self.core.pump(self.now)
        self.collect()

    def publish(self, n: int, stream: str = "s", ident: bytes = b"pub") -> None:
        if ident not in self.core.sessions:
            self.send(ident, c.Attach(stream))
        for _ in range(n):
            self.send(ident, c.Publish(KEY, BODY))
        self.round()

    def invalids_sent(self) -> int:
        return sum(isinstance(m, c.Invalid) for box in self.box.values() for m in box)


@pytest.fixture
def core(tmp_path):
    h = Core(tmp_path / "data", replay_batch_records=4)
    yield h
    h.datadir.close()


def by_client(doc) -> Dict[str, dict]:
    return {row["client"]: row for row in doc["connections"]}


# ---------------------------------------------------------------------------- documents


def test_each_client_has_its_mode_position_and_lag(core):
    """A publisher, a live subscriber, one replaying, one out of credit, one whose pipe is
    full, one that only pinged: /connz names each one's mode and lag (head - next_seq + 1),
    /streamz and /varz count them by mode."""
    core.publish(10)                                             # head 10
    core.send(b"live", c.Attach("s"), c.Credit(1 << 20), c.Subscribe("", LATEST_LIVE))
    core.send(b"hist", c.Attach("s"), c.Subscribe("", 0), c.Credit(3 * COST))
    core.send(b"catch", c.Attach("s"), c.Subscribe("", 0), c.Credit(1 << 20))
    core.send(b"cong", c.Attach("s"), c.Credit(1 << 20), c.Subscribe("", LATEST_LIVE))
    core.send(b"ping", c.Ping())
    core.round()                    # replay batches of 4: hist takes 3, catch 4
    core.round()                    # hist finds it has no credit left; catch takes 4 more
    core.core.unsent(b"cong", encode(c.PingOk()), core.now)     # its pipe is full
    rows = by_client(connz(core.core, core.now + 2.5))
    got = {ident: (rows[ident.hex()]["mode"], rows[ident.hex()]["lag"],
                   rows[ident.hex()]["next_seq"])
           for ident in (b"pub", b"live", b"hist", b"catch", b"cong", b"ping")}
    assert got == {b"pub": ("not_subscribed", None, None),
                   b"live": ("live", 0, 11),
                   b"hist": ("historical", 7, 4),
                   b"catch": ("catching_up", 2, 9),
                   b"cong": ("congested", 0, 11),
                   b"ping": ("unattached", None, None)}
    assert rows[b"hist".hex()]["credit"] == 0 and rows[b"hist".hex()]["delivered"] == 3
    assert rows[b"pub".hex()]["published"] == 10
    assert rows[b"ping".hex()]["idle_s"] == 2.5

    st = streamz(core.core)["streams"][0]
    assert (st["name"], st["head_seq"], st["first_seq"], st["messages"]) == ("s", 10, 1, 10)
    assert st["clients"] == 5 and st["max_lag"] == 7
    assert st["modes"] == {"live": 1, "catching_up": 1, "historical": 1, "congested": 1,
                           "not_subscribed": 1}
    v = varz(core.core, core.now + 5, started=core.now)
    assert v["clients"] == 6 and v["uptime_s"] == 5
    assert v["modes"] == {m: 1 for m in MODES}

    core.round()                    # catch reaches the head: live again, in the same step
    assert by_client(connz(core.core, core.now))[b"catch".hex()]["mode"] == "live"


def test_traffic_counts_messages_and_credit_bytes_in_and_out(core, tmp_path):
    """Messages and bytes in (appended) and out (DELIVERs, live and replayed) per stream and
    since start; bytes are ZEPS/1 credit bytes, so a reader of everything has out == in. A
    stream closed as idle keeps its traffic in the broker's totals."""
    core.send(b"live", c.Attach("s"), c.Credit(1 << 20), c.Subscribe("", LATEST_LIVE))
    core.publish(20)
    core.send(b"late", c.Attach("s"), c.Subscribe("", 0), c.Credit(1 << 20))
    for _ in range(10):
        core.round()
    delivered = sum(isinstance(m, c.Deliver) for m in core.box[b"live"] + core.box[b"late"])
    assert delivered == 40
    st = streamz(core.core)["streams"][0]
    assert (st["in_msgs"], st["out_msgs"]) == (20, 40)
    assert (st["in_bytes"], st["out_bytes"]) == (20 * COST, 40 * COST)

    h = Core(tmp_path / "other", max_open_streams=1)
    try:
        h.publish(3, stream="a", ident=b"p1")
        h.send(b"p1", c.Detach())
        h.publish(2, stream="b", ident=b"p2")              # "a" is idle: closed to make room
        assert [s["name"] for s in streamz(h.core)["streams"]] == ["b"]
        v = varz(h.core, h.now)
        assert (v["in_msgs"], v["in_bytes"], v["streams_open"], v["streams"]) == (5, 5 * COST, 1, 2)
    finally:
        h.datadir.close()


def test_invalids_are_counted_by_reason_prefix(tmp_path):
    """Every INVALID the broker sends is counted once, under its reason's prefix (``other``
    without one); malformed frames are also counted as such."""
    h = Core(tmp_path / "d", max_subscriptions=1, max_message=100)
    try:
        h.send(b"a", c.Publish("k", b"x"))                              # not attached
        h.send(b"a", c.Attach("s"), c.Publish("k", b"x" * 101))         # publish rejected
        h.send(b"a", c.Subscribe("x", 0), c.Subscribe("y", 0))          # limit
        h.send(b"a", c.Subscribe("~(", 0))           # a second pattern: limit (checked first)
        h.send(b"b", [b"\x00garbage"], [b"\xaa\xa5\x01", b"two frames"])  # other x2
        h.send(b"a", c.Publish("k", b"x" * 90))
        h.send(b"r", c.Attach("s"), c.Subscribe("", 0), c.Credit(20))
        h.round()                        # "message 1 needs 100 bytes of credit": window too small
        h.send(b"g", c.Attach("s"), c.Subscribe("~a", LATEST_LIVE))
        for _ in range(3):               # as the matcher reports a regex that ran out of time
            h.core.streams["s"].regex_timed_out("~a", "k")
        h.send(b"a", c.Publish("k", b"x"))
        h.round()                        # the regex struck out: removed, with INVALID
        v = varz(h.core, h.now)
        assert v["invalid"] == {"not_attached": 1, "publish_rejected": 1, "limit": 2,
                                "pattern_removed": 1, "not_allowed": 0, "no_stream": 0,
                                "stream_recreated": 0, "producer_refused": 0,
                                "credit_window_too_small": 1, "other": 2}
        assert sum(v["invalid"].values()) == h.invalids_sent() == 8
        assert v["invalid_frames"] == 1
    finally:
        h.datadir.close()


CLIENTS = [b"c0", b"c1", b"c2"]
command_ops = hs.one_of(
    hs.tuples(hs.just("attach"), hs.sampled_from(CLIENTS), hs.sampled_from(["s", "t"])),
    hs.tuples(hs.just("publish"), hs.sampled_from(CLIENTS), hs.sampled_from(["a", "b"]),
              hs.integers(0, 60)),
    hs.tuples(hs.just("detach"), hs.sampled_from(CLIENTS)),
    hs.tuples(hs.just("publish"), hs.sampled_from(CLIENTS), hs.sampled_from(["a", "b", "ab"]),
              hs.integers(0, 130)),
    hs.tuples(hs.just("subscribe"), hs.sampled_from(CLIENTS), hs.sampled_from(["", "a", "~b$", "~("]),
              hs.sampled_from([0, 3, LATEST_LIVE])),
    hs.tuples(hs.just("credit"), hs.sampled_from(CLIENTS), hs.integers(0, 300)),
    hs.tuples(hs.just("timestamps"), hs.sampled_from(CLIENTS)),
    hs.tuples(hs.just("garbage"), hs.sampled_from(CLIENTS)),
    hs.tuples(hs.just("round"), hs.integers(1, 3)),
)


def _frames(op) -> List[bytes]:
    """The frames a client sends for one of ``command_ops``."""
    kind, args = op[0], op[2:]
    if kind == "garbage":
        return [b"\xaa\xa5\xff"]
    cmd = {"attach": c.Attach, "detach": c.Detach, "publish": lambda k, n: c.Publish(k, b"x" * n),
           "subscribe": c.Subscribe, "credit": c.Credit,
           "timestamps": c.DeliverTimestamps}[kind](*args)
    return [encode(cmd)]


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs.lists(command_ops, max_size=80))
def test_counters_match_every_frame_the_core_sends(ops):
    """Whatever clients do — good, refused or malformed — the counters equal what went out:
    INVALIDs by reason (each counted once), DELIVERs (live, replayed, with timestamps) and their
    credit bytes per stream, and messages and bytes in per stream = what the journal holds."""
    with tempfile.TemporaryDirectory() as tmp:
        h = Core(tmp, max_subscriptions=2, max_message=100, replay_batch_records=5)
        try:
            invalid: Dict[str, int] = {}
            out: Dict[str, List[int]] = {}
            # To start with: "s" and "t" hold 6 messages; c0 reads "s" live, c1 reads it from
            # the start with a small credit (replayed), c2 reads "t" with timestamps; the ops
            # may change all of that.
            for ident, stream in ((b"c0", "s"), (b"c2", "t")):
                for cmd in [c.Attach(stream)] + [c.Publish(k, b"y" * 7) for k in "abab.a"]:
                    h.core.receive(ident, [encode(cmd)], h.now)
            h.core.append_queued()
            for ident, cmds in ((b"c0", [c.Credit(2000), c.Subscribe("", LATEST_LIVE)]),
                                (b"c1", [c.Attach("s"), c.Subscribe("", 0), c.Credit(50)]),
                                (b"c2", [c.DeliverTimestamps(), c.Credit(500), c.Subscribe("a", 0)])):
                for cmd in cmds:
                    h.core.receive(ident, [encode(cmd)], h.now)
            h.core.take_outbox()
            for op in ops:
                # The stream each client is attached to as the frames are made (a DETACH
                # first delivers what was queued, to the client leaving too).
                streams = {i: s.stream for i, s in h.core.sessions.items() if s.stream}
                if op[0] == "round":
                    for _ in range(op[1]):
                        h.core.append_queued()
                        h.core.pump(h.now)
                else:
                    h.core.receive(op[1], _frames(op), h.now)
                    streams.update({i: s.stream for i, s in h.core.sessions.items() if s.stream})
                _tally(h, streams, invalid, out)
            h.core.append_queued()
            _tally(h, {i: s.stream for i, s in h.core.sessions.items()}, invalid, out)
            v = varz(h.core, h.now)
            assert {k: n for k, n in v["invalid"].items() if n} == invalid
            for st in streamz(h.core)["streams"]:
                sent = out.get(st["name"], [])
                assert (st["out_msgs"], st["out_bytes"]) == (len(sent), sum(sent))
                held = h.core.streams[st["name"]].journal.read_batch(1, 10_000, 1 << 30)
                assert st["in_msgs"] == st["head_seq"] == len(held)
                assert st["in_bytes"] == sum(deliver_cost(len(r.key.encode()), len(r.body))
                                             for r in held)
        finally:
            h.datadir.close()


def _tally(h: Core, attached: Dict[bytes, str], invalid: Dict[str, int],
           out: Dict[str, List[int]]) -> None:
    """Count the frames in the core's outbox: INVALIDs by reason label, DELIVER costs by the
    stream their client is attached to."""
    for ident, frame in h.core.take_outbox():
        cmd = decode(frame)
        if isinstance(cmd, c.Invalid):
            invalid[label(cmd.reason)] = invalid.get(label(cmd.reason), 0) + 1
        elif isinstance(cmd, (c.Deliver, c.DeliverTs)):
            out.setdefault(attached[ident], []).append(
                deliver_cost(len(cmd.key.encode()), len(cmd.body)))


def test_reason_labels():
    assert LABELS == ("not_attached", "publish_rejected", "limit", "pattern_removed",
                      "not_allowed", "credit_window_too_small", "no_stream", "stream_recreated",
                      "producer_refused", "other")
    assert label("PUBLISH rejected: not allowed: key ... may not publish") == "publish_rejected"
    assert label("limit: at most 1 subscriptions per client") == "limit"
    assert label("expected ATTACH") == "other"


def test_connz_sorts_pages_and_filters(core):
    core.publish(10)
    for i, credit in enumerate((2 * COST, 5 * COST, 1 << 20)):
        core.send(b"sub%d" % i, c.Attach("s"), c.Subscribe("", 0), c.Credit(credit))
    core.send(b"other", c.Attach("t"))
    for _ in range(5):
        core.round()
    doc = connz(core.core, core.now)                     # most behind first
    assert [(r["client"], r["lag"]) for r in doc["connections"]] == [
        (b"sub0".hex(), 8), (b"sub1".hex(), 5), (b"sub2".hex(), 0), (b"other".hex(), None),
        (b"pub".hex(), None)]
    page = connz(core.core, core.now, sort="client", limit=2, offset=1)
    assert page["total"] == 5 and [r["client"] for r in page["connections"]] == sorted(
        i.hex() for i in (b"sub0", b"sub1", b"sub2", b"other", b"pub"))[1:3]
    assert [r["client"] for r in connz(core.core, core.now, stream="t")["connections"]] == [
        b"other".hex()]
    with pytest.raises(ValueError, match="sort must be one of"):
        connz(core.core, core.now, sort="nonsense")


def test_a_broken_journal_is_reported_not_raised(core):
    """A stream whose journal cannot be read shows its error; the other numbers still come."""
    core.publish(3)
    st = core.core.streams["s"]
    st.journal.close()
    try:
        doc = streamz(core.core)["streams"][0]
        assert "closed" in doc["error"] and doc["in_msgs"] == 3
    finally:
        core.core.streams.pop("s")


def test_redaction_is_stable_under_one_key_and_chosen_by_the_options(core):
    """Redacted documents are the same under the same key and share nothing with another
    key's; ``--monitor-redact auto`` redacts with CURVE and no token, its key derived from the
    broker's secret (the same at every start), while ``yes`` without CURVE draws one."""
    from types import SimpleNamespace

    from zeps.cli.broker import monitor_redactor
    core.publish(3, stream="payroll")
    core.send(b"sub", c.Attach("payroll"), c.Subscribe("salary.", 0), c.Credit(1 << 20))
    core.round()
    one, same, other = Redactor(b"k" * 32), Redactor(b"k" * 32), Redactor(b"j" * 32)
    docs = [(connz(core.core, core.now, redact=r), streamz(core.core, redact=r))
            for r in (one, same, other)]
    assert docs[0] == docs[1]
    names = [{row["client"] for row in cz["connections"]} | {st["name"] for st in sz["streams"]}
             for cz, sz in docs]
    assert names[0] & names[2] == set() and len(names[0]) == 3
    assert "payroll" not in json.dumps(docs[0]) and "salary" not in json.dumps(docs[0])
    v = varz(core.core, core.now, about={"data_dir": "/srv/zeps", "pid": 1}, redact=one)
    assert "data_dir" not in v and v["pid"] == 1 and v["redacted"] is True

    curve = SimpleNamespace(secret=b"broker secret key in z85 form.........")
    for mode, has_curve, token, redacted in (("auto", False, None, False),
                                             ("auto", True, b"t" * 16, False),
                                             ("auto", True, None, True), ("yes", True, None, True),
                                             ("yes", False, b"t" * 16, True),
                                             ("no", True, None, False)):
        r = monitor_redactor(SimpleNamespace(monitor_redact=mode), curve if has_curve else None,
                             token)
        assert (r is not None) == redacted, (mode, has_curve, token)
    auto = SimpleNamespace(monitor_redact="auto")
    assert monitor_redactor(auto, curve, None).stream("s") == \
        monitor_redactor(auto, curve, None).stream("s")
    yes = SimpleNamespace(monitor_redact="yes")
    assert monitor_redactor(yes, None, None).stream("s") != \
        monitor_redactor(yes, None, None).stream("s")


# ---------------------------------------------------------------------------- metrics


def scrape(metrics: Metrics) -> Dict[tuple, float]:
    """Every sample of an exposition as {(name, sorted labels): value}."""
    out = {}
    for fam in text_string_to_metric_families(metrics.exposition().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_are_the_core_numbers(core):
    """/metrics says what /streamz and /connz say: head, traffic, clients by mode, lag per
    subscriber, confirms pending, INVALIDs by reason; the fsync histogram counts what the
    shell observed."""
    core.send(b"pub", c.Attach("s"), c.ConfirmSelect())
    core.publish(10)                                   # fsync=never: durable at once
    core.send(b"hist", c.Attach("s"), c.Subscribe("", 0), c.Credit(3 * COST))
    core.send(b"bad", c.Ping(), [b"junk"])
    core.round()
    core.round()                                       # hist: 3 taken, then out of credit
    m = Metrics(core.core)
    m.observe_fsync(0.002)
    m.observe_fsync(0.3)
    got = scrape(m)
    st = (("stream", "s"),)
    assert got[("zeps_stream_head_sequence", st)] == 10
    assert got[("zeps_stream_messages_in_total", st)] == 10
    assert got[("zeps_stream_messages_out_total", st)] == 3
    assert got[("zeps_stream_bytes_in_total", st)] == 10 * COST
    assert got[("zeps_messages_in_total", ())] == 10
    assert got[("zeps_subscriber_lag_messages", (("client", b"hist".hex()), ("stream", "s")))] == 7
    assert got[("zeps_clients", (("mode", "historical"), ("stream", "s")))] == 1
    assert got[("zeps_clients", (("mode", "not_subscribed"), ("stream", "s")))] == 1
    assert got[("zeps_clients", (("mode", "unattached"), ("stream", "")))] == 1
    assert got[("zeps_stream_confirms_pending", st)] == 0
    assert got[("zeps_invalid_total", (("reason", "other"),))] == 1
    assert got[("zeps_invalid_total", (("reason", "limit"),))] == 0
    assert got[("zeps_fsync_seconds_count", ())] == 2
    assert got[("zeps_fsync_seconds_bucket", (("le", "0.0025"),))] == 1
    assert got[("zeps_fsync_seconds_sum", ())] == pytest.approx(0.302)


def test_only_the_subscribers_most_behind_get_a_lag_series(core, monkeypatch):
    """Per-subscriber series are capped (MAX_LAG_SERIES): the most behind keep theirs, and the
    stream's max lag still covers everyone."""
    core.publish(10)
    core.send(b"far", c.Attach("s"), c.Subscribe("", 0), c.Credit(2 * COST))
    core.send(b"near", c.Attach("s"), c.Subscribe("", 0), c.Credit(8 * COST))
    core.send(b"live", c.Attach("s"), c.Credit(1 << 20), c.Subscribe("", LATEST_LIVE))
    for _ in range(4):
        core.round()
    monkeypatch.setattr(metrics_module, "MAX_LAG_SERIES", 2)
    got = scrape(Metrics(core.core))
    lags = {dict(labels)["client"]: v for (name, labels), v in got.items()
            if name == "zeps_subscriber_lag_messages"}
    assert lags == {b"far".hex(): 8, b"near".hex(): 2}
    assert got[("zeps_stream_max_lag_messages", (("stream", "s"),))] == 8


# ---------------------------------------------------------------------------- zeps top (pure)


def test_top_frame_shows_streams_clients_and_rates(core):
    """``render`` of two samples one second apart: stream rows with head and rates, client
    rows with mode, credit and lag."""
    core.send(b"hist", c.Attach("s"), c.Subscribe("", 0), c.Credit(3 * COST))
    core.publish(10)

    def sample(t):
        return Sample(t, varz(core.core, core.now), streamz(core.core), connz(core.core, core.now))

    first = sample(0.0)
    core.publish(30)
    frame = render(sample(2.0), first)
    lines = frame.splitlines()
    stream_row = next(line for line in lines if line.startswith("s "))
    cells = stream_row.split()                          # the size is two cells: "1.7 KiB"
    assert cells[:3] + cells[5:] == ["s", "40", "40", "15", "0", "0", "0", "1", "0", "37", "0"]
    client_row = next(line for line in lines if line.startswith(b"hist".hex()))
    assert client_row.split()[:7] == [b"hist".hex(), "s", "historical", "0", "B", "4", "37"]
    assert "in 15 msg/s" in frame and "clients 2: 1 historical, 1 not subscribed" in frame
    assert all(len(line) <= 30 for line in render(sample(3.0), None, width=30).splitlines())


# ---------------------------------------------------------------------------- the HTTP port


def test_monitor_address_forms():
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("8222") == ("127.0.0.1", 8222)
    assert parse_address("[::1]:8222") == ("::1", 8222)
    for bad in ("host:", "host:http", ":80", "1.2.3.4:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


class Wsgi:
    """A MonitorServer's WSGI application called directly (no socket), with a clock the test
    moves, a timer that says each document took ``cost`` seconds, and sleeps recorded."""

    def __init__(self, core, cost: float = 0.1, **options):
        self.now = 100.0
        self.ticks = 0
        self.cost = cost
        self.slept: List[float] = []
        self.server = MonitorServer(core, "127.0.0.1", 0, clock=lambda: self.now,
                                    timer=self._timer, sleep=self.slept.append, **options)

    def _timer(self) -> float:
        self.ticks += 1                     # read before and after making each document
        return self.ticks * self.cost

    def get(self, path: str, method: str = "GET"):
        target, _, qs = path.partition("?")
        answer = {}

        def start_response(status, headers):
            answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

        body = b"".join(self.server.app({"REQUEST_METHOD": method, "PATH_INFO": target,
                                         "QUERY_STRING": qs}, start_response))
        return answer["status"], answer["headers"], body


def test_making_documents_has_a_budget_per_second(core):
    """However many distinct queries arrive, documents are made for at most ``budget`` of each
    second; beyond it the answer is 503 with Retry-After, and the same query within the
    refresh period is answered from the last snapshot, free."""
    w = Wsgi(core.core, cost=0.1, budget=0.25)
    assert [w.get(f"/connz?offset={i}")[0] for i in range(4)] == [200, 200, 200, 503]
    status, headers, body = w.get("/connz?offset=9")
    assert (status, headers["Retry-After"]) == (503, "1")
    assert "retry in a second" in json.loads(body)["error"]
    assert w.get("/connz?offset=0")[0] == 200              # cached: costs nothing
    w.now += 1.0
    assert w.get("/connz?offset=9")[0] == 200              # a new second, a new budget


def test_a_document_slower_than_the_budget_is_paid_back_and_its_last_copy_served(core):
    """A document that took 0.6 s of a 0.25 s budget: the budget was a second's, so the next
    second made it again at once (a broker with many clients spent 40% of its time on them),
    and a query over budget got 503 though its last copy was there."""
    w = Wsgi(core.core, cost=0.6, budget=0.25)
    status, _h, first = w.get("/connz?offset=0")
    assert status == 200
    w.now += 0.3                                           # past the refresh, over budget
    assert w.get("/connz?offset=0")[::2] == (200, first)   # the last copy, not made again
    assert w.get("/connz?offset=1")[0] == 503              # nothing to give
    w.now += 1.0                                           # 0.6 - 1.3 x 0.25 > 0.25 still
    assert w.get("/connz?offset=1")[0] == 503
    w.now += 0.5                                           # paid back
    assert w.get("/connz?offset=1")[0] == 200


def test_streamz_has_a_default_page_as_connz_has(core):
    """``/streamz`` without ``limit`` lists at most 1024 streams, as ``/connz`` and
    ``/consumerz`` do (it listed every open stream, each one's journal stat'ed)."""
    for name in ("a", "b", "c"):
        core.send(b"c-" + name.encode(), c.Attach(name))
    w = Wsgi(core.core)
    doc = json.loads(w.get("/streamz")[2])
    assert (doc["limit"], doc["total"], len(doc["streams"])) == (1024, 3, 3)
    doc = json.loads(w.get("/streamz?limit=2&offset=1")[2])
    assert [st["name"] for st in doc["streams"]] == ["b", "c"]


def test_the_remembered_documents_are_bounded_in_bytes(core):
    """Documents are remembered up to ``cache_bytes`` in all besides the newest, the oldest
    made forgotten first (64 were kept whatever their size); a forgotten one is made again,
    a remembered one is served free."""
    for i in range(12):
        core.send(b"c%02d" % i, c.Attach("s"))
    w = Wsgi(core.core, cost=0.001, budget=10.0, cache_bytes=4000)
    sizes = {}
    for i in range(12):
        status, _h, body = w.get(f"/connz?offset={i}")
        assert status == 200
        sizes[i] = len(body)
        assert w.server._cache_bytes == sum(len(b) for _t, b in w.server._cache.values())
        assert w.server._cache_bytes - len(body) <= 4000
    kept = [k[-1] for k in w.server._cache]               # connz keys end with the offset
    assert kept == list(range(12 - len(kept), 12)) and 1 < len(kept) < 12
    made = w.ticks
    w.get(f"/connz?offset={kept[0]}")
    assert w.ticks == made                                # remembered: not made again
    w.get("/connz?offset=0")
    assert w.ticks == made + 2                            # forgotten: made again


def test_requests_beyond_the_rate_wait_their_turn(core):
    """A burst of 20 is served at once; each request after it sleeps one more 1/max_rate."""
    w = Wsgi(core.core, max_rate=100, burst=20)
    assert {w.get("/healthz")[0] for _ in range(24)} == {200}
    assert w.slept == pytest.approx([0.01, 0.02, 0.03, 0.04])
    w.now += 1.0                                           # the schedule caught up: no wait
    w.get("/healthz")
    assert len(w.slept) == 4


def test_requests_without_the_token_do_not_take_the_turns_of_those_with_it(core):
    """With a token, a flood without it (refused, or for the open pages) waits in a schedule
    of its own: the token's holder is served at once, and the flood is still held to the
    rate. (The token was checked after the wait: each refused request pushed back the
    holder's turn.)"""
    token = b"t" * 32
    w = Wsgi(core.core, max_rate=100, burst=20, token=token)
    for _ in range(20):
        assert w.get("/varz")[0] == 401
        assert w.get("/healthz")[0] == 200
    assert len(w.slept) == 20                     # 40 requests: 20 beyond the burst waited

    def get_with_token(path):
        target, _, qs = path.partition("?")
        answer = {}
        body = b"".join(w.server.app({"REQUEST_METHOD": "GET", "PATH_INFO": target,
                                      "QUERY_STRING": qs,
                                      "HTTP_AUTHORIZATION": "Bearer " + token.decode()},
                                     lambda status, headers: answer.update(status=status)))
        return int(answer["status"].split()[0]), body

    assert get_with_token("/varz")[0] == 200
    assert len(w.slept) == 20                     # no wait behind the flood
    assert w.get("/varz")[0] == 401
    assert w.slept[-1] == pytest.approx(0.21)     # the flood's own schedule went on


def _snapshot(page: bytes):
    """The documents a dashboard page came with (its #snapshot), or None."""
    import re
    m = re.search(rb'<script id="snapshot" type="application/json">(.*?)</script>', page, re.S)
    assert m, page[:400]
    return json.loads(m.group(1))


def test_the_dashboard_page_comes_with_its_first_poll(core):
    """Issue 17 item 12: ``/`` carries the documents of the page's first poll, the same as
    /varz, /streamz and /connz?sort=lag&limit=200 give, and in/out rates over the last second
    or more; a stream named ``</script>...`` stays data; none with a monitoring token."""
    evil = "</script><script>document.title='pwned'</script>"
    core.publish(3)
    core.publish(2, stream=evil, ident=b"evil")
    w = Wsgi(core.core, cost=0.0)
    page = w.get("/")[2]
    assert b"</script><script>" not in page and page.count(b"<script") == 2
    first = _snapshot(page)
    assert first["rates"] is None                      # no time has passed since the start
    assert first["varz"]["in_msgs"] == 5 and first["varz"]["uptime_s"] == 0
    assert {st["name"] for st in first["streamz"]["streams"]} == {"s", evil}
    assert len(first["connz"]["connections"]) == 2
    w.now += 0.3                                       # documents are made again (refresh)
    assert _snapshot(w.get("/")[2])["varz"] == json.loads(w.get("/varz")[2])
    core.publish(30)
    w.now += 2.0
    later = _snapshot(w.get("/")[2])
    assert later["streamz"] == json.loads(w.get("/streamz")[2])
    assert later["connz"] == json.loads(w.get("/connz?sort=lag&limit=200")[2])
    rates = later["rates"]                             # 30 messages over the 2 s since 0.3
    assert rates["in"] == pytest.approx(15.0) and rates["span_s"] == pytest.approx(2.0)
    assert rates["out"] == 0 and rates["inBytes"] == pytest.approx(30 * COST / 2)
    locked = Wsgi(core.core, token=b"t" * 32)
    assert _snapshot(locked.get("/")[2]) is None       # the page is served without the token


def monitor_url(broker) -> str:
    """The "monitoring on URL" line the broker prints after its "listening on" line."""
    got: List[bytes] = []      # (the line may already sit in the pipe's buffer: no select)
    reading = threading.Thread(target=lambda: got.append(broker.proc.stdout.readline()),
                               daemon=True)
    reading.start()
    reading.join(20)
    line = got[0].decode().strip() if got else ""
    assert line.startswith("monitoring on http://127.0.0.1:"), line
    return line.split("monitoring on ", 1)[1]


def get(url: str, method: str = "GET", headers=None, timeout: float = 10):
    """(status, headers, body) of one request; errors are answers too."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get_json(url: str) -> dict:
    status, _, body = get(url)
    assert status == 200, body
    return json.loads(body)


def wait_until(cond, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.05)


def test_monitoring_port_serves_json_metrics_and_clear_errors(start_broker):
    b = start_broker(None, "--monitor", "127.0.0.1:0", "--fsync", "interval")
    url = monitor_url(b)
    with Client(b.endpoint, "orders", confirms=True) as pub:
        for i in range(50):
            pub.publish(f"k.{i}", b"x" * 20)
        pub.wait_for_confirms(timeout=10)        # durable: the group fsync ran and was timed
        last = pub.info().last
    assert last == 50
    v = get_json(url + "/varz")
    assert v["endpoint"] == b.endpoint and v["monitor"] == url and v["in_msgs"] == 50
    assert v["pid"] == b.proc.pid and v["config"]["fsync"] == "interval"
    st = get_json(url + "/streamz")["streams"]
    assert [(s["name"], s["head_seq"], s["durable_seq"]) for s in st] == [("orders", 50, 50)]
    metrics = wait_until(lambda: (lambda t: t if "zeps_fsync_seconds_count" in t else None)(
        get(url + "/metrics")[2].decode()), what="metrics")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(metrics) for s in fam.samples}
    assert samples[("zeps_stream_head_sequence", (("stream", "orders"),))] == 50
    assert samples[("zeps_fsync_seconds_count", ())] >= 1
    assert samples[("zeps_messages_in_total", ())] == 50

    status, headers, body = get(url + "/")
    assert status == 200 and b"<title>ZEPS broker</title>" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert get(url + "/healthz")[0] == 200
    for path, code, reason in (("/nosuch", 404, "no page '/nosuch'"),
                               ("/connz?limit=lots", 400, "limit must be a whole number"),
                               # a digit that int() refuses, and more digits than it reads:
                               # each was a 500 and an error line in the broker's log
                               ("/connz?limit=%C2%B2", 400, "limit must be a whole number"),
                               ("/connz?offset=" + "0" * 5000, 400,
                                "offset must be a whole number"),
                               ("/connz?sort=age", 400, "sort must be one of"),
                               ("/streamz?verbose=1", 400, "unknown parameter 'verbose'")):
        status, headers, body = get(url + path)
        assert (status, headers["Content-Type"]) == (code, "application/json"), path
        assert reason in json.loads(body)["error"]
    status, headers, _ = get(url + "/varz", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    assert get(url + "/varz", method="HEAD")[:1] == (200,)
    assert b.stop() == 0


def test_a_bad_monitoring_address_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "zeps.broker", "--data-dir", str(tmp_path / "d"),
                        "--endpoint", "tcp://127.0.0.1:*", "--monitor", "localhost:http"],
                       capture_output=True, text=True, cwd=REPO, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "zeps: error: argument --monitor: bad port in address 'localhost:http' "
        "(use HOST:PORT, port 0 to 65535)"]


def test_a_taken_monitoring_port_is_one_line_and_exit_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "zeps.broker", "--data-dir",
                            str(tmp_path / "d"), "--endpoint", "tcp://127.0.0.1:*",
                            "--monitor", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, cwd=REPO, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1].startswith(
        f"zeps: error: cannot serve monitoring on 127.0.0.1:{port}: ")


@pytest.mark.slow
def test_hostile_http_clients_do_not_hurt_zeps_clients(start_broker):
    """More idle connections than the monitor serves at once, one that sends half a request
    and stops, and a client hammering /connz: publishers and subscribers go on as before, the
    monitor closes the idle connections itself (time limit) and answers again."""
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    host, port = url[len("http://"):].split(":")
    idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(80)]
    idle[0].sendall(b"GET /varz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                get(url + "/connz?offset=%d" % (time.monotonic_ns() % 1000))
            except OSError:
                pass

    hammering = threading.Thread(target=hammer, daemon=True)
    hammering.start()
    try:
        sub = RawClient(b.endpoint).attach("s").subscribe("", LATEST_LIVE, credit=1 << 20)
        with Client(b.endpoint, "s", confirms=True) as pub:
            for i in range(2000):
                pub.publish("k", b"%d" % i)
            pub.wait_for_confirms(timeout=20)
        assert [d.sequence for d in sub.delivers(2000, timeout=20)] == list(range(1, 2001))
        sub.close()
    finally:
        stop.set()
        hammering.join(15)
    # The broker closes connections idle for its limit (10 s); those waiting in the accept
    # queue meanwhile get their turn, and their 10 s, after.
    for s in idle:
        s.settimeout(40)
    closed = sum(1 for s in idle if _closed_by_peer(s))
    for s in idle:
        s.close()
    assert closed == len(idle)
    assert get_json(url + "/varz")["in_msgs"] == 2000


class Dribblers:
    """The slowloris attacker: ``n`` connections to the monitoring port, each sending one more
    byte of a request head that never ends whenever ``pace`` seconds have passed (its own
    select() times out in between; nothing sleeps). A connection the server closes is counted
    and opened again while ``reconnect`` is set.

    It runs in a process of its own (:func:`tests.slowloris.dribble`), as an attacker would: as
    a thread it would share the test's GIL with the well-behaved client, whose request would
    then wait behind the attacker's Python."""

    HEAD = b"GET /varz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 20_000

    def __init__(self, url: str, n: int, pace: float = 0.5):
        host, port = url[len("http://"):].split(":")
        ctx = multiprocessing.get_context("spawn")
        self._counts = ctx.Array("q", 3)                # rounds, closed, open
        self._reconnect, self._halt = ctx.Event(), ctx.Event()
        self._reconnect.set()
        self._proc = ctx.Process(target=slowloris.dribble, daemon=True, args=(
            (host, int(port)), n, pace, self.HEAD, self._counts, self._reconnect, self._halt))

    def start(self) -> None:
        self._proc.start()

    @property
    def rounds(self) -> int:
        """Times a byte was sent on every open connection."""
        return self._counts[0]

    @property
    def closed(self) -> int:
        """Connections the server closed."""
        return self._counts[1]

    def open_count(self) -> int:
        return self._counts[2]

    def stop_reconnecting(self) -> None:
        self._reconnect.clear()

    def is_alive(self) -> bool:
        return self._proc.is_alive()

    def stop(self) -> None:
        self._halt.set()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)


def raw_exchange(url: str, request: bytes, timeout: float = 20) -> bytes:
    """Send ``request`` on a new connection and read until the server closes it."""
    host, port = url[len("http://"):].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(request)
        except OSError:                    # it closed before taking it all: read its answer
            pass
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return got
            if not chunk:
                return got
            got += chunk


def test_request_heads_are_bounded_and_bodies_never_read(start_broker):
    """A request line over 8 KiB is 414, a head over 32 KiB 431, more than 100 header lines
    400, each with the connection closed; a request announcing a 1 GB body it never sends is
    answered at once (405 for a POST, 200 for a GET) and closed, the body unread."""
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    assert raw_exchange(url, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n").startswith(
        b"HTTP/1.1 414 ")
    answer = raw_exchange(url, head + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000)
                                                 for i in range(40)) + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ") and b"larger than 32768 bytes" in answer
    answer = raw_exchange(url, head + b"".join(b"X-%d: v\r\n" % i for i in range(101))
                          + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    answer = raw_exchange(url, b"POST /varz HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 1000000000\r\n\r\nabc")
    assert answer.startswith(b"HTTP/1.1 405 ") and answer.count(b"HTTP/1.1") == 1
    answer = raw_exchange(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                               b"Transfer-Encoding: chunked\r\n\r\n5\r\nab")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"status": "ok"}')
    assert get(url + "/healthz")[0] == 200


@pytest.mark.skipif(not hasattr(socket, "TCP_DEFER_ACCEPT"),
                    reason="TCP_DEFER_ACCEPT is Linux's; elsewhere a connection is taken at once")
def test_the_monitor_takes_a_connection_once_its_client_has_sent_something(core):
    """The listening socket defers each connection until its client sends (or about a second
    has passed): what keeps reconnecting slow clients from displacing a request still on its
    way (the slowloris test below shows the behaviour; this, that the option is set)."""
    server = MonitorServer(core.core, "127.0.0.1", 0).start()
    try:
        sock = server.server.socket
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT) >= 1
    finally:
        server.stop()


@pytest.mark.slow
def test_slowloris_connections_do_not_keep_healthz_waiting(start_broker):
    """More connections than the monitor serves at once, each dribbling one byte of a request
    head every half second (far below any per-read time limit), and reopened when closed: a
    well-behaved client still gets every /healthz answered (a new connection displaces the
    oldest incomplete request rather than waiting behind it). Once they stop coming back, each
    slow connection is closed by the deadline on the whole request head, although it never
    stopped sending."""
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    attacker = Dribblers(url, n=MAX_CONNECTIONS + 36)
    attacker.start()
    try:
        wait_until(lambda: attacker.rounds >= 2 or not attacker.is_alive(),
                   what="the slow connections dribbling")
        assert attacker.is_alive(), "the attacker's process ended (its error is in the output)"
        for _ in range(20):
            status, _, body = get(url + "/healthz", timeout=10)
            assert (status, json.loads(body)) == (200, {"status": "ok"})
        attacker.stop_reconnecting()
        wait_until(lambda: attacker.open_count() == 0, timeout=60,
                   what="every slow connection closed by the broker")
        assert attacker.is_alive()                     # (it dribbled until the end)
    finally:
        attacker.stop()
    assert get_json(url + "/varz")["clients"] == 0


MONITOR_ACL = """
[clients]
alice = "../keys/alice.key"
bob = "../keys/bob.key"

[[allow]]
clients = ["alice"]
publish = ["orders"]
subscribe = ["orders"]

[[allow]]
clients = ["bob"]
publish = ["payroll.secret"]
subscribe = ["payroll.secret"]
"""


@pytest.fixture
def curve_broker(start_broker, tmp_path):
    """A factory of brokers with CurveZMQ, an allow-list, an ACL and ``--monitor``: alice may
    use "orders" only; bob uses "payroll.secret" (hidden from alice's LIST-STREAMS), with a
    subscription to "salary.ceo"; each has published and subscribed when it returns."""
    from zeps.clients import CurveKeys
    keydir = tmp_path / "keys"
    for name in ("broker", "alice", "bob"):
        r = zeps("keys", "new", name, "--dir", str(keydir))
        assert r.returncode == 0, r.stderr
    allow = tmp_path / "allow"
    allow.mkdir()
    acl = tmp_path / "acl" / "acl.toml"
    acl.parent.mkdir()
    acl.write_text(MONITOR_ACL)
    clients = []

    def start(*monitor_args):
        b = start_broker(None, "--curve-secret", str(keydir / "broker.key_secret"), "--allow",
                         str(allow), "--acl", str(acl), "--monitor", "127.0.0.1:0",
                         *monitor_args)
        b.url = monitor_url(b)
        b.auth = {}
        if "--monitor-token" in monitor_args:
            token = Path(monitor_args[monitor_args.index("--monitor-token") + 1])
            b.auth = {"Authorization": "Bearer " + token.read_text().strip()}
        b.keys = {n: (keydir / f"{n}.key").read_text().split('public-key = "')[1].split('"')[0]
                  for n in ("alice", "bob")}
        for name, stream, pattern in (("alice", "orders", "eu."),
                                      ("bob", "payroll.secret", "salary.ceo")):
            curve = CurveKeys.from_files(str(keydir / "broker.key"),
                                         str(keydir / f"{name}.key_secret"))
            client = Client(b.endpoint, stream, confirms=True, curve=curve, timeout=10)
            clients.append(client)
            client.publish(pattern + "x", b"1")
            client.wait_for_confirms(timeout=10)
            client.subscribe(pattern, from_seq=1)
        wait_until(lambda: sum(bool(row["subscriptions"]) for row in get_json_auth(
            b.url + "/connz", b.auth)["connections"]) == 2, what="both clients subscribed")
        return b

    yield start
    for client in clients:
        client.close()


def test_with_curve_the_monitor_redacts_names_keys_patterns_and_paths(curve_broker, tmp_path):
    """CURVE and an ACL, no token: by default the JSON documents and /metrics name no stream
    (not even one the ACL hides from LIST-STREAMS), no client key or routing id, no pattern or
    path. Streams and clients are still told apart by stable hashes, which ``?stream=`` takes;
    a real name there finds nothing (no probing for hidden streams)."""
    b = curve_broker()
    pages = {path: get(b.url + path) for path in (
        "/varz", "/connz", "/streamz", "/metrics", "/connz?sort=stream", "/connz?sort=client",
        "/streamz?limit=1&offset=1")}
    assert {path: status for path, (status, _, _) in pages.items()} == dict.fromkeys(pages, 200)
    text = "\n".join(body.decode() for _, _, body in pages.values())
    secrets = ["payroll", "orders", "salary", "eu.", b.keys["alice"], b.keys["bob"],
               str(tmp_path), "data_dir"]
    assert [word for word in secrets if word in text] == []

    varz = json.loads(pages["/varz"][2])
    assert varz["redacted"] is True and varz["in_msgs"] == 2 and varz["clients"] == 2
    streams = json.loads(pages["/streamz"][2])["streams"]
    assert len(streams) == 2 and all(st["name"].startswith("stream:") for st in streams)
    assert sorted(st["head_seq"] for st in streams) == [1, 1]
    rows = json.loads(pages["/connz"][2])["connections"]
    assert {row["stream"] for row in rows} == {st["name"] for st in streams}
    assert all(row["user"].startswith("key:") and row["client"].startswith("client:")
               and len(row["subscriptions"]) == 1
               and row["subscriptions"][0].startswith("pattern:") for row in rows)
    assert len({row["user"] for row in rows}) == 2
    hashed = rows[0]["stream"]
    assert [r["stream"] for r in get_json(b.url + "/connz?stream=" + hashed)["connections"]] \
        == [hashed]
    for name in ("payroll.secret", "orders"):
        assert get_json(b.url + "/connz?stream=" + name)["total"] == 0
    metrics = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(pages["/metrics"][2].decode())
               for s in fam.samples}
    assert {dict(labels)["stream"] for name, labels in metrics
            if name == "zeps_stream_head_sequence"} == {st["name"] for st in streams}
    assert b.stop() == 0


def test_the_monitoring_token_is_required_when_set(curve_broker, tmp_path):
    """With --monitor-token, every page but /healthz and the dashboard's own files answers 401
    without ``Authorization: Bearer TOKEN`` (or with another token), 200 with it; with a token
    and CURVE, names are shown (the reader is known): --monitor-redact yes hides them too."""
    token = tmp_path / "monitor.token"
    token.write_text("s3cr3t-token-0123456789abcdef\n")
    b = curve_broker("--monitor-token", str(token))
    good = {"Authorization": "Bearer s3cr3t-token-0123456789abcdef"}
    for path in ("/varz", "/connz", "/streamz", "/metrics", "/nosuch"):
        for headers in ({}, {"Authorization": "Bearer s3cr3t-token-0123456789abcdeF"},
                        {"Authorization": "Basic czNjcjN0LXRva2Vu"},
                        {"Authorization": "Bearer"}):
            status, answer, body = get(b.url + path, headers=headers)
            assert (status, answer["WWW-Authenticate"]) == (401, 'Bearer realm="zeps"'), path
            assert b"payroll" not in body and "needs the monitoring token" in json.loads(
                body)["error"]
        assert get(b.url + path, headers=good)[0] == (404 if path == "/nosuch" else 200)
    assert get(b.url + "/varz", method="POST")[0] == 401
    for path in ("/healthz", "/", "/dashboard.js", "/dashboard.css"):
        status, _, body = get(b.url + path)
        assert status == 200 and b"payroll" not in body and b"orders" not in body, path
    streams = get_json_auth(b.url + "/streamz", good)["streams"]
    assert sorted(st["name"] for st in streams) == ["orders", "payroll.secret"]
    varz = get_json_auth(b.url + "/varz", good)
    assert varz["redacted"] is False and varz["data_dir"].startswith(str(tmp_path))
    assert b.stop() == 0

    both = curve_broker("--monitor-token", str(token), "--monitor-redact", "yes")
    assert get(both.url + "/streamz")[0] == 401
    text = get(both.url + "/streamz", headers=good)[2].decode()
    assert "payroll" not in text and text.count('"name": "stream:') == 2
    assert both.stop() == 0


def get_json_auth(url: str, headers) -> dict:
    status, _, body = get(url, headers=headers)
    assert status == 200, body
    return json.loads(body)


def test_bad_monitoring_tokens_are_one_line_and_exit_2(tmp_path):
    """A token file that is missing, too short or not one visible ASCII token: one line and
    exit status 2, before anything is opened."""
    short = tmp_path / "short"
    short.write_text("abc\n")
    spaced = tmp_path / "spaced"
    spaced.write_text("two words in a token file\n")
    for path, why in ((tmp_path / "missing", "cannot read"), (short, "16 to 1024 visible"),
                      (spaced, "16 to 1024 visible")):
        r = subprocess.run([sys.executable, "-m", "zeps.broker", "--data-dir",
                            str(tmp_path / "d"), "--endpoint", "tcp://127.0.0.1:*",
                            "--monitor", "127.0.0.1:0", "--monitor-token", str(path)],
                           capture_output=True, text=True, cwd=REPO, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert r.returncode == 2 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("zeps: error: --monitor-token: ")
        assert why in lines[0]
    r = zeps("top", "--monitor", "127.0.0.1:1", "--monitor-token", str(short), "--once")
    assert r.returncode == 2 and "16 to 1024 visible" in r.stderr


def _closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1024) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


# ---------------------------------------------------------------------------- zeps top (process)


def zeps(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeps", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_zeps_top_once_shows_the_broker(start_broker):
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    with Client(b.endpoint, "orders") as pub:
        for _ in range(120):
            pub.publish("eu.fr", b"x")
        pub.flush()
        slow = RawClient(b.endpoint).attach("orders").subscribe("", 0, credit=5 * 10)
        wait_until(lambda: get_json(url + "/connz")["connections"][0]["mode"] == "historical",
                   what="the slow subscriber is historical")
        r = zeps("top", "--monitor", url, "--once", "--interval", "0.1")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line.strip()}
    assert rows["orders"][1:3] == ["120", "120"]
    hist = get_json(url + "/connz")["connections"][0]
    assert rows[hist["client"]][1:3] == ["orders", "historical"]
    assert rows[hist["client"]][6] == f"{hist['lag']:,}"
    slow.close()

    r = zeps("top", "--monitor", "127.0.0.1:1", "--once")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("zeps: error: cannot reach http://127.0.0.1:1/varz")
    r = zeps("top", "--monitor", "ftp://host", "--once")
    assert r.returncode == 2 and r.stderr.startswith("zeps: error: argument --monitor: ")


def test_zeps_top_refreshes_until_ctrl_c_then_exits_130(start_broker):
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    proc = subprocess.Popen([sys.executable, "-m", "zeps", "top", "--monitor", url,
                             "--interval", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            preexec_fn=_sigint_as_a_terminal_sends_it)
    try:
        frames = 0
        deadline = time.monotonic() + 30
        while frames < 3 and time.monotonic() < deadline:   # three frames: it refreshes
            ready, _, _ = select.select([proc.stdout], [], [], 1)
            if ready:
                frames += proc.stdout.readline().startswith(b"ZEPS ")
        assert frames == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


# ---------------------------------------------------------------------------- the dashboard


def _dump_ids(html_text: str) -> Dict[str, str]:
    """The text of every element with an id in a DOM dump."""
    from html.parser import HTMLParser

    class Texts(HTMLParser):
        def __init__(self):
            super().__init__()
            self.open: List[tuple] = []
            self.texts: Dict[str, str] = {}

        def handle_starttag(self, tag, attrs):
            self.open.append((tag, dict(attrs).get("id")))

        def handle_endtag(self, tag):
            while self.open:
                t, ident = self.open.pop()
                if ident is not None:
                    self.texts.setdefault(ident, "")
                if t == tag:
                    break

        def handle_data(self, data):
            for _, ident in self.open:
                if ident is not None:
                    self.texts[ident] = self.texts.get(ident, "") + data

    p = Texts()
    p.feed(html_text)
    return {k: v.strip() for k, v in p.texts.items()}


def test_the_dashboard_s_first_frame_shows_the_broker(start_broker, tmp_path):
    """Issue 17 item 12: what a person does with a headless browser, ``chromium --headless
    --dump-dom`` and ``--screenshot``, takes the page at its load event, before its first poll
    came back: it showed "connecting…" and "—" everywhere. The page now comes with its first
    poll's documents and draws them before it has loaded."""
    exe = find_chromium()
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; "
                    "'make test' installs it)")
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    evil = "</script><script>document.title='pwned'</script>"
    with Client(b.endpoint, "orders") as pub, Client(b.endpoint, evil) as other:
        for i in range(20):
            pub.publish(f"k.{i}", b"x" * 100)
        other.publish("k", b"x")
        pub.flush()
        other.flush()
        # (the rates of the first frame need the monitor up for 0.2 s at least)
        wait_until(lambda: get_json(url + "/varz")["uptime_s"] >= 0.5, what="0.5 s of uptime")
        flags = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-extensions", "--disable-background-networking",
                 "--window-size=1360,1000"]
        with tempfile.TemporaryDirectory(prefix="zeps-chromium-") as profile:
            dump = subprocess.run([*flags, f"--user-data-dir={profile}", "--dump-dom", url + "/"],
                                  capture_output=True, text=True, timeout=120)
        shot = tmp_path / "dashboard-first-frame.png"
        with tempfile.TemporaryDirectory(prefix="zeps-chromium-") as profile:
            subprocess.run([*flags, f"--user-data-dir={profile}", f"--screenshot={shot}",
                            url + "/"], capture_output=True, timeout=120, cwd=tmp_path)
    print(f"\ndashboard first frame: {shot}")
    assert dump.returncode == 0, dump.stderr[-2000:]
    texts = _dump_ids(dump.stdout)
    assert texts["status"] == "up", texts
    main = ("endpoint", "uptime", "clients", "streams-open", "rate-in", "rate-out", "confirms",
            "invalids")
    assert not [k for k in main if texts.get(k, "—") in ("", "—")], texts
    assert texts["streams-open"] == "2" and texts["clients"] == "2"
    assert texts["rate-in"].endswith("/s") and "21 total" in texts["bytes-in"]
    assert "connecting" not in dump.stdout and "pwned" not in texts.get("title", "")
    assert dump.stdout.count(evil) == 0                  # escaped in the snapshot, text in the table
    assert shot.stat().st_size > 10_000


def test_dashboard_in_a_real_browser_shows_what_the_json_says(start_broker, tmp_path):
    """Headless Chromium loads the dashboard while a publisher, a live subscriber and a slow
    (historical) one work the broker; once the load stops, the page shows the same streams,
    head sequences and client modes as the JSON. A stream name made of markup is shown as text
    and runs nothing. The screenshot is kept in the test's directory for a person to look at."""
    exe = find_chromium()
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; "
                    "'make test' installs it)")
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    evil = '<img src=x onerror="document.title=\'pwned\'">'
    with Client(b.endpoint, evil) as c_evil:
        c_evil.publish("k", b"x")
        c_evil.flush()
    stop = threading.Event()
    errors: List[BaseException] = []

    def publish(stream: str, pause: float):
        try:
            with Client(b.endpoint, stream, confirms=True) as pub:
                i = 0
                while not stop.is_set():
                    pub.publish(f"k.{i % 7}", b"x" * 100)
                    i += 1
                    if i % 50 == 0:
                        time.sleep(pause)
                pub.wait_for_confirms(timeout=20)
        except BaseException as exc:
            errors.append(exc)

    def read_live(subscribed: threading.Event):
        try:
            with Client(b.endpoint, "orders", create=True) as sub:
                messages = sub.subscribe("", live=True)
                subscribed.set()
                while not done.is_set():
                    messages.poll(0.1)
        except BaseException as exc:
            errors.append(exc)

    done = threading.Event()                         # the live reader reads until the end
    subscribed = threading.Event()
    reader = threading.Thread(target=read_live, args=(subscribed,), daemon=True)
    reader.start()
    assert subscribed.wait(20)
    slow = RawClient(b.endpoint).attach("orders").subscribe("", 0, credit=1000)
    workers = [threading.Thread(target=publish, args=("orders", 0.01), daemon=True),
               threading.Thread(target=publish, args=("metrics.cpu", 0.05), daemon=True)]
    for w in workers:
        w.start()
    browser = Browser(exe)
    try:
        browser.navigate(url + "/")
        polls = "Number(document.getElementById('updated').dataset.polls)"
        browser.wait_for(polls, check=lambda n: n >= 5, timeout=60)       # chart under load
        busy = browser.evaluate("document.getElementById('rate-in').textContent")
        stop.set()
        for w in workers:
            w.join(30)
        assert not errors, errors
        # Wait until the broker is still (two equal snapshots a poll apart), then two more
        # polls of the page, so that both show the same state.
        def still():
            first = get_json(url + "/streamz")["streams"]
            time.sleep(0.3)
            return first == get_json(url + "/streamz")["streams"]
        wait_until(still, what="the broker at rest")
        seen = browser.evaluate(polls)
        browser.wait_for(polls, check=lambda n: n >= seen + 2, timeout=30)
        page_streams = browser.evaluate("""[...document.querySelectorAll('#streams tbody tr')]
            .map(tr => [tr.dataset.stream,
                        tr.querySelector('[data-field=head_seq]').textContent,
                        tr.querySelector('[data-field=messages]').textContent])""")
        page_clients = browser.evaluate("""[...document.querySelectorAll('#connections tbody tr')]
            .map(tr => [tr.dataset.client, tr.querySelector('[data-field=stream]').textContent,
                        tr.querySelector('[data-mode]').dataset.mode,
                        tr.querySelector('[data-field=lag]').textContent])""")
        injected = browser.evaluate("[document.title, document.querySelectorAll('main img').length]")
        shot = browser.screenshot(tmp_path / "dashboard.png")
        streams = get_json(url + "/streamz")["streams"]
        clients = get_json(url + "/connz")["connections"]
    finally:
        stop.set()
        done.set()
        browser.close()
        slow.close()
    reader.join(20)
    print(f"\ndashboard screenshot: {shot}")
    assert sorted((n, number(h), number(m)) for n, h, m in page_streams) == sorted(
        (s["name"], s["head_seq"], s["messages"]) for s in streams)
    assert {s["name"] for s in streams} == {"orders", "metrics.cpu", evil}
    assert sorted((cid, st, mode, number(lag)) for cid, st, mode, lag in page_clients) == sorted(
        (x["client"], x["stream"] or "—", x["mode"], x["lag"]) for x in clients)
    modes = sorted(x["mode"] for x in clients if x["stream"] == "orders")
    assert modes == ["historical", "live"]
    assert busy not in ("—", "0/s")                 # the page saw the load as it happened
    assert injected == ["ZEPS broker", 0]
    assert shot.stat().st_size > 10_000


def _sigint_as_a_terminal_sends_it() -> None:
    """In the child, before exec: SIGINT back to its default, so that Python makes it
    KeyboardInterrupt even when this test run was started in the background (a shell without
    job control starts background commands with SIGINT ignored, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
