"""Exactly-once publishing end to end: a confirmed publisher (the SDK's default producer id and
producer sequences) keeps publishing while the broker is SIGKILLed and restarted 20 times; every
message it got a confirm for is in the journal on disk exactly once, and none is missing.

Needs the broker's PRODUCER support (the broker de-duplicates re-sent publishes): without it
the re-sends after each crash store some messages twice, which is what this test catches."""
from __future__ import annotations

import collections


from zeps.clients import Client
from zeps.clients.errors import InvalidError
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


def test_on_a_full_disk_each_receipt_tells_whether_its_message_is_stored(start_broker, tmp_path):
    """The broker's files may not grow past 64 KiB (a real EFBIG, as a full disk fails writes)
    and it fsyncs every 200 ms: a publish refused while the ones before it wait for that fsync
    is answered in order with their CONFIRMs, so the receipts that resolved are exactly the
    messages in the journal, and the failed ones are not there. (Its refusal came first, and
    the SDK, guessing which publish it answered, failed the first stored one and confirmed the
    lost one in its place: 15 stored, and the receipts of 15 lost ones resolved.)"""
    b = start_broker(tmp_path / "data", "--fsync-interval-ms", "200", max_file_bytes=64 * 1024)
    bodies = [b"%05d" % i + b"y" * 995 for i in range(120)]
    with Client(b.endpoint, "full", confirms=True, timeout=30) as pub:
        receipts = [pub.publish("k", body) for body in bodies]
        for r in receipts:
            try:
                r.result(timeout=30)
            except InvalidError:                        # "PUBLISH rejected: journal append ..."
                pass
        assert all(r.done() for r in receipts)
    b.stop()
    stored = journal_bodies(tmp_path / "data", "full")
    confirmed = [body for body, r in zip(bodies, receipts) if r.exception() is None]
    assert 0 < len(stored) < len(bodies), "the journal filled up part of the way"
    assert confirmed == stored
    assert [r.sequence for r in receipts if r.exception() is None] == \
        list(range(1, len(stored) + 1)), "each stored message's receipt has its sequence"
