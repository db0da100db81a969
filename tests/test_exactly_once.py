"""Exactly-once publishing end to end: a confirmed publisher (the SDK's default producer id and
producer sequences) keeps publishing while the broker is SIGKILLed and restarted 20 times; every
message it got a confirm for is in the journal on disk exactly once, and none is missing.

Needs the broker's PRODUCER support (the broker de-duplicates re-sent publishes): without it
the re-sends after each crash store some messages twice, which is what this test catches."""
from __future__ import annotations

import collections


from zeps.clients import Client
from zeps.journal import DataDir

CYCLES = 20
PER_CYCLE = 200


def journal_bodies(data_dir, stream):
    dd = DataDir(str(data_dir))
    try:
        with dd.reader(stream) as r:
            return [bytes(rec.body) for rec in r.read_from(1)]
    finally:
        dd.close()


def test_confirmed_messages_land_exactly_once_across_20_broker_sigkills(start_broker, tmp_path):
    data = tmp_path / "data"
    b = start_broker(data)
    receipts = []
    with Client(b.endpoint, "eo", confirms=True, timeout=30, heartbeat=5) as pub:
        assert pub.producer_id
        n = 0
        for _ in range(CYCLES):
            # Publish a burst and kill the broker while most of it is in flight or unconfirmed:
            # the client re-sends the unconfirmed ones after it reconnects.
            for _i in range(PER_CYCLE):
                n += 1
                receipts.append(pub.publish("k", b"m%06d" % n))
            b.kill()
            b.restart()
            pub.wait_for_confirms(timeout=60)           # reconnects, re-sends, gets confirms
        assert pub.reconnects >= CYCLES
        assert pub.producer_id                          # the broker took PRODUCER throughout
    assert all(r.done() and r.exception() is None for r in receipts)
    b.stop()
    counts = collections.Counter(journal_bodies(data, "eo"))
    published = [b"m%06d" % i for i in range(1, n + 1)]
    lost = [m for m in published if counts[m] == 0]
    duplicated = {m: k for m, k in counts.items() if k > 1}
    assert not lost, f"{len(lost)} confirmed message(s) lost, e.g. {lost[:5]}"
    assert not duplicated, f"{len(duplicated)} message(s) stored twice, e.g. {list(duplicated)[:5]}"
    assert sum(counts.values()) == n
