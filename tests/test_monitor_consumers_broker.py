"""Durable consumers on a real broker's monitoring port (issue 19, item 4): a member working
through the SDK shows up in /consumerz, /metrics and /connz over HTTP, and in the dashboard's
consumers table as headless Chromium draws it."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

import pytest

from zeps.clients import Client

from .cdp import Browser, find_chromium, number
from .test_monitor import get, get_json, monitor_url, wait_until


def test_a_working_consumer_on_the_monitoring_port_and_the_dashboard(start_broker):
    b = start_broker(None, "--monitor", "127.0.0.1:0")
    url = monitor_url(b)
    with Client(b.endpoint, "orders", confirms=True) as pub:
        for i in range(10):
            pub.publish(f"k.{i}", b"x")
        pub.wait_for_confirms(timeout=10)
    with Client(b.endpoint, "orders") as c:
        c.add_consumer("billing", max_ack_pending=5)
        c.add_consumer("audit")
        with c.consume("billing", timeout=10) as msgs:
            held = []
            while len(held) < 5:                     # max_ack_pending: 5 come, no more
                held += msgs.next_batch()
            for m in held[:3]:
                m.ack()
            msgs.next_batch()                        # sends the 3 acks; 3 more come

            def settled():
                doc = get_json(url + "/consumerz")
                rows = {r["name"]: r for r in doc["consumers"]}
                billing = rows.get("billing", {})
                return doc if (billing.get("acked"), billing.get("pending")) == (3, 5) else None

            doc = wait_until(settled, what="3 acknowledged, 5 held (max_ack_pending)")
            assert doc["total"] == 2 and [r["name"] for r in doc["consumers"]] == [
                "audit", "billing"]                   # the most behind first
            billing = doc["consumers"][1]
            assert (billing["stream"], billing["members"], billing["floor"], billing["lag"],
                    billing["redelivered"]) == ("orders", 1, 3, 7, 0)
            assert doc["consumers"][0]["lag"] == 10
            members = [x for x in get_json(url + "/connz")["connections"]
                       if x["consumer"] == "billing"]
            assert len(members) == 1 and members[0]["stream"] == "orders"
            status, _h, body = get(url + "/consumerz?sort=oldest")
            assert status == 400 and (b"sort must be one of lag, pending, outstanding, stream"
                                      in body)
            samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                       for fam in text_string_to_metric_families(
                           get(url + "/metrics")[2].decode()) for s in fam.samples}
            lab = (("consumer", "billing"), ("stream", "orders"))
            assert samples[("zeps_consumer_lag_messages", lab)] == 7
            assert samples[("zeps_consumer_pending", lab)] == 5
            assert samples[("zeps_consumer_acked_total", lab)] == 3
            assert samples[("zeps_consumer_members", lab)] == 1
            assert samples[("zeps_stream_consumers", (("stream", "orders"),))] == 2

            exe = find_chromium()
            if exe is None:
                pytest.skip("the JSON and metrics were checked; the dashboard part needs "
                            "Chromium (Debian: apt-get install chromium)")
            browser = Browser(exe)
            try:
                browser.navigate(url + "/")
                polls = "Number(document.getElementById('updated').dataset.polls)"
                browser.wait_for(polls, check=lambda n: n >= 1, timeout=30)
                rows = browser.evaluate("""[...document.querySelectorAll('#consumers tbody tr')]
                    .map(tr => [tr.dataset.stream, tr.dataset.consumer,
                                ...['members', 'lag', 'pending', 'acked', 'dead_lettered']
                                .map(f => tr.querySelector(`[data-field=${f}]`).textContent)])""")
            finally:
                browser.close()
            now = get_json(url + "/consumerz")["consumers"]
    assert [[st, name, *map(number, rest)] for st, name, *rest in rows] == [
        [r["stream"], r["name"], r["members"], r["lag"], r["pending"], r["acked"],
         r["dead_lettered"]] for r in now]
    assert b.stop() == 0
