"""Prometheus counters never go down (issue 17, item 5): a STREAM-DELETE keeps the deleted
stream's traffic in the broker's totals (``zeps_messages_in_total`` ...) and reports what it
removed as series of their own (``zeps_streams_deleted_total``, ``zeps_messages_deleted_total``).

A real :class:`BrokerCore` over a real journal (tests/core_harness.py), scraped through the real
``prometheus-client`` exposition.
"""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from zeps.broker.metrics import Metrics
from zeps.broker.monitor import varz
from zeps.protocol import LATEST_LIVE
from zeps.protocol import commands as c

from .core_harness import Core

TOTALS = ("zeps_messages_in_total", "zeps_messages_out_total", "zeps_bytes_in_total",
          "zeps_bytes_out_total")


def scrape(metrics: Metrics) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(metrics.exposition().decode())
            for s in fam.samples}


def test_deleting_a_stream_keeps_the_totals_and_counts_what_it_removed(tmp_path):
    h = Core(tmp_path / "data", max_open_streams=2)
    try:
        h.send(b"sub", c.Attach("gone"), c.Credit(1 << 20), c.Subscribe("", LATEST_LIVE))
        h.publish(*["k"] * 7, stream="gone")
        h.publish("k", "k", ident=b"pub2", stream="kept")
        h.drain()
        # a third stream, closed as idle before it is deleted (its journal is not open)
        h.publish("k", "k", "k", ident=b"pub3", stream="idle")
        h.send(b"pub3", c.Detach())
        h.publish("k", ident=b"pub4", stream="other")       # max_open_streams=2: "idle" closes
        h.drain()
        m = Metrics(h.core)
        before = scrape(m)
        assert before[("zeps_messages_in_total", ())] == 13
        assert before[("zeps_messages_out_total", ())] == 7

        h.send(b"admin", c.StreamDelete("gone"), c.StreamDelete("idle"))
        assert h.kinds(b"admin") == [c.StreamDeleteOk, c.StreamDeleteOk]
        after = scrape(m)
        for name in TOTALS:                                 # monotonic: nothing taken back
            assert after[(name, ())] == before[(name, ())], name
        assert after[("zeps_streams_deleted_total", ())] == 2
        assert after[("zeps_messages_deleted_total", ())] == 10     # 7 in "gone", 3 in "idle"
        assert ("zeps_stream_messages_in_total", (("stream", "gone"),)) not in after
        v = varz(h.core, h.now)
        assert (v["in_msgs"], v["out_msgs"]) == (13, 7)

        h.publish("k", ident=b"pub5", stream="gone")        # made again: totals go on rising
        assert scrape(m)[("zeps_messages_in_total", ())] == 14
    finally:
        h.datadir.close()


def test_a_refused_delete_counts_nothing(tmp_path):
    h = Core(tmp_path / "data")
    try:
        h.publish("k", "k")
        h.send(b"admin", c.StreamDelete("nope"))
        assert h.kinds(b"admin") == [c.Invalid]
        got = scrape(Metrics(h.core))
        assert got[("zeps_streams_deleted_total", ())] == 0
        assert got[("zeps_messages_deleted_total", ())] == 0
        assert got[("zeps_messages_in_total", ())] == 2
    finally:
        h.datadir.close()
