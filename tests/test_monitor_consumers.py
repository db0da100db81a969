"""Durable consumers in the monitoring documents, /metrics, the dashboard and ``zeps top``
(issue 19, item 4): per consumer its lag in messages and seconds, pending acknowledgements,
members, redeliveries and dead letters, computed from a real :class:`BrokerCore` with real
members (tests/core_harness.py), scraped through the real ``prometheus-client`` exposition and
served by the real WSGI application of the monitoring port; names hashed when redacted; the
per-consumer series bounded."""
from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from zeps.broker import metrics as metrics_module
from zeps.broker.metrics import Metrics
from zeps.broker.monitor import Redactor, connz, consumerz, streamz, varz
from zeps.cli.top import Sample, render
from zeps.protocol import commands as c
from zeps.protocol.consumer import pack_ranges, ranges_of

from .core_harness import Core
from .test_monitor import Wsgi

T0 = 1_700_000_000 * 10**9            # the journal's clock (ns), moved by the test


def scrape(metrics: Metrics) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(metrics.exposition().decode())
            for s in fam.samples}


@pytest.fixture
def h(tmp_path):
    """Stream "s": messages 1..10 stamped T0 + 0 s .. T0 + 9 s; consumer "work" (max_deliver
    2, dead letters to "dead") with members a and b; consumer "idle" without members; a plain
    subscriber. Member a acknowledged what it got but one it NAKed twice (dead-lettered); b
    holds its messages."""
    core = Core(tmp_path / "data")
    wall = [T0]
    core.datadir._clock = lambda: wall[0]            # no journal is open yet
    for i in range(10):
        wall[0] = T0 + i * 10**9
        core.publish(f"k.{i}")
    core.send(b"admin", c.Attach("s"),
              c.ConsumerAdd("work", patterns=("k.",), max_deliver=2, dead_letter="dead",
                            max_ack_pending=3),
              c.ConsumerAdd("idle"))
    assert [type(m) for m in core.take(b"admin")] == [c.AttachOk, c.ConsumerAddOk,
                                                      c.ConsumerAddOk]
    for m in (b"a", b"b"):
        core.send(m, c.Attach("s"), c.Credit(1 << 20), c.Consume("work"))
        assert [type(x) for x in core.take(m)] == [c.AttachOk, c.ConsumeOk]
    core.subscriber(b"plain")
    core.drain()
    got_a = [s for s, _k in core.delivered(b"a")]
    got_b = [s for s, _k in core.delivered(b"b")]
    assert len(got_a) == len(got_b) == 3             # max_ack_pending 3 each
    core.send(b"a", c.Ack(pack_ranges(ranges_of(got_a[1:]))))
    for _ in range(2):                               # the first of a's: NAKed until dead
        core.send(b"a", c.Nak(got_a[0], 0))
        core.drain()
        again = [s for s, _k in core.delivered(b"a")]
        if got_a[0] in again:
            others = [s for s in again if s != got_a[0]]
            core.send(b"a", c.Ack(pack_ranges(ranges_of(others))))
    core.drain()
    core.a, core.b = got_a, got_b
    yield core
    core.close()


def group(h, name):
    return h.core.consumers["s"][name]


def test_consumerz_says_what_consumer_info_says_for_every_consumer(h):
    """Each row of /consumerz is CONSUMER-INFO's document; lag is head - floor, lag_seconds the
    age of the first message above the floor against the newest (stamped by the test's
    clock), pending what the members hold; ordered by lag, pending or name; filtered by
    stream."""
    work, idle = group(h, "work"), group(h, "idle")
    st = h.core.streams["s"]
    doc = consumerz(h.core)
    assert doc["total"] == 2 and [r["name"] for r in doc["consumers"]] == ["idle", "work"]
    rows = {r["name"]: r for r in doc["consumers"]}
    for name, g in (("work", work), ("idle", idle)):
        assert rows[name] == h.core.consumer_info(st, g)
    assert (rows["idle"]["lag"], rows["idle"]["lag_seconds"], rows["idle"]["members"],
            rows["idle"]["pending"]) == (10, 9.0, 0, 0)
    w = rows["work"]
    assert w["members"] == 2 and w["pending"] == work.pending > 0
    assert w["dead_lettered"] == 1 and w["redelivered"] >= 1
    assert w["lag"] == 10 - work.floor > 0
    assert w["lag_seconds"] == pytest.approx(10 - 1 - work.floor)   # message floor+1 at T0+floor s
    assert [r["name"] for r in consumerz(h.core, sort="pending")["consumers"]] == ["work", "idle"]
    assert [r["name"] for r in consumerz(h.core, sort="stream")["consumers"]] == ["idle", "work"]
    page = consumerz(h.core, limit=1, offset=1)
    assert (page["total"], [r["name"] for r in page["consumers"]]) == (2, ["work"])
    assert consumerz(h.core, stream="other")["total"] == 0
    with pytest.raises(ValueError):
        consumerz(h.core, sort="idle")


def test_members_streams_and_the_broker_name_their_consumers(h):
    """A member's client document names its consumer (None for others); the stream counts
    its consumers, and so does /varz."""
    rows = {r["client"]: r for r in connz(h.core, h.now)["connections"]}
    assert rows[b"a".hex()]["consumer"] == rows[b"b".hex()]["consumer"] == "work"
    assert rows[b"plain".hex()]["consumer"] is None
    assert {s["name"]: s["consumers"] for s in streamz(h.core)["streams"]}["s"] == 2
    assert varz(h.core, h.now)["consumers"] == 2


def test_a_caught_up_consumer_has_no_lag(h):
    """Everything acknowledged: lag 0 and lag_seconds 0."""
    h.send(b"b", c.Ack(pack_ranges(ranges_of(h.b))))
    for _ in range(5):
        h.drain()
        for m in (b"a", b"b"):
            seqs = [s for s, _k in h.delivered(m)]
            if seqs:
                h.send(m, c.Ack(pack_ranges(ranges_of(seqs))))
    row = next(r for r in consumerz(h.core)["consumers"] if r["name"] == "work")
    assert (row["lag"], row["lag_seconds"], row["pending"], row["outstanding"]) == (0, 0.0, 0, 0)


def test_metrics_have_a_series_set_per_consumer(h):
    """/metrics: lag, lag seconds, pending, outstanding, members per consumer and its counters
    (delivered, acked, redelivered, dead-lettered, dropped, bad acks), as /consumerz says;
    the stream's consumer count."""
    h.send(b"a", c.Ack(pack_ranges([(1000, 1000)])))          # not held: a bad ack
    got = scrape(Metrics(h.core))
    rows = {r["name"]: r for r in consumerz(h.core)["consumers"]}
    for name in ("work", "idle"):
        lab = (("consumer", name), ("stream", "s"))
        r = rows[name]
        assert got[("zeps_consumer_lag_messages", lab)] == r["lag"]
        assert got[("zeps_consumer_lag_seconds", lab)] == r["lag_seconds"]
        assert got[("zeps_consumer_pending", lab)] == r["pending"]
        assert got[("zeps_consumer_outstanding", lab)] == r["outstanding"]
        assert got[("zeps_consumer_members", lab)] == r["members"]
        for key in ("delivered", "acked", "redelivered", "dead_lettered", "dropped", "bad_acks"):
            assert got[(f"zeps_consumer_{key}_total", lab)] == r[key], key
    work = (("consumer", "work"), ("stream", "s"))
    assert got[("zeps_consumer_dead_lettered_total", work)] == 1
    assert got[("zeps_consumer_bad_acks_total", work)] == 1
    assert got[("zeps_consumer_members", work)] == 2
    assert got[("zeps_stream_consumers", (("stream", "s"),))] == 2


def test_only_the_consumers_most_behind_get_series(h, monkeypatch):
    """Per-consumer series are capped (MAX_CONSUMER_SERIES): the most behind keeps its own;
    the stream still counts every consumer."""
    monkeypatch.setattr(metrics_module, "MAX_CONSUMER_SERIES", 1)
    got = scrape(Metrics(h.core))
    named = {dict(labels)["consumer"] for (name, labels), _v in got.items()
             if name.startswith("zeps_consumer_")}
    assert named == {"idle"}
    assert got[("zeps_stream_consumers", (("stream", "s"),))] == 2


def test_redacted_documents_and_metrics_name_no_consumer(h):
    """With a Redactor, the consumer, its stream, its dead-letter stream and its patterns are
    stable hashes in /consumerz, /connz and /metrics; the names appear nowhere."""
    r = Redactor(b"k" * 32)
    doc = consumerz(h.core, redact=r, stream=r.stream("s"))
    rows = {row["name"]: row for row in doc["consumers"]}
    assert set(rows) == {r.consumer("work"), r.consumer("idle")}
    w = rows[r.consumer("work")]
    assert w["stream"] == r.stream("s") and w["config"]["dead_letter"] == r.stream("dead")
    assert w["config"]["patterns"] == [r.pattern("k.")] and w["config"]["name"] == w["name"]
    clients = {x["client"]: x for x in connz(h.core, h.now, redact=r)["connections"]}
    assert clients[r.client(b"a")]["consumer"] == r.consumer("work")
    exposition = Metrics(h.core, r).exposition().decode()
    text = json.dumps(doc) + json.dumps(connz(h.core, h.now, redact=r)) + exposition
    for name in ('"work"', '"idle"', '"dead"', '"k."', '"s"'):
        assert name not in text, name
    assert f'consumer="{r.consumer("work")}"' in exposition


def test_the_monitoring_port_serves_consumerz_and_the_dashboard_its_first_poll(h):
    """/consumerz through the WSGI application: paged, sorted, bad queries answered 400; the
    dashboard page comes with the same document its poll asks for."""
    w = Wsgi(h.core, cost=0.0)
    status, _headers, body = w.get("/consumerz?sort=pending&limit=1")
    assert status == 200
    doc = json.loads(body)
    assert (doc["total"], [r["name"] for r in doc["consumers"]]) == (2, ["work"])
    assert json.loads(w.get("/consumerz?stream=s")[2])["total"] == 2
    for bad in ("/consumerz?sort=idle", "/consumerz?limit=x", "/consumerz?who=1"):
        status, _h, body = w.get(bad)
        assert status == 400 and json.loads(body)["error"], bad
    page = w.get("/")[2]
    from .test_monitor import _snapshot
    assert _snapshot(page)["consumerz"] == json.loads(w.get("/consumerz?sort=lag&limit=100")[2])


def test_top_shows_the_consumers_most_behind(h):
    """``zeps top``'s frame has a consumer section (lag, lag seconds, pending, acks per second,
    redelivered, dead) when the broker has consumers, and none otherwise."""
    def sample(t):
        return Sample(t, varz(h.core, h.now), streamz(h.core), connz(h.core, h.now),
                      consumerz(h.core))

    first = sample(0.0)
    h.send(b"b", c.Ack(pack_ranges(ranges_of(h.b))))
    frame = render(sample(1.0), first)
    lines = frame.splitlines()
    header = next(line for line in lines if line.startswith("STREAM  CONSUMER"))
    assert header.split() == ["STREAM", "CONSUMER", "MEMBERS", "LAG", "LAG", "S", "PENDING",
                              "ACKS/S", "REDELIVERED", "DEAD"]
    idle = next(line for line in lines if line.startswith("s ") and " idle " in line)
    assert idle.split()[:6] == ["s", "idle", "0", "10", "9.0", "0"]
    work = next(line for line in lines if line.startswith("s ") and " work " in line)
    g = group(h, "work")
    assert work.split()[2:4] == ["2", str(10 - g.floor)]
    assert work.split()[6] == "3" and work.split()[-1] == "1"    # b's 3 acks in 1 s; 1 dead
    bare = Sample(1.0, varz(h.core, h.now), streamz(h.core), connz(h.core, h.now))
    assert "CONSUMER" not in render(bare, None)
