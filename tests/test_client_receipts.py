"""What Client.publish returns: a Receipt that resolves to the message's sequence on CONFIRM
(real broker process on 127.0.0.1; the journal is the reference)."""
from __future__ import annotations

import pytest

from zeps.clients import Client, ClientClosed, InvalidError, Receipt, ZepsTimeout
from zeps.journal import JournalReader, stream_dir_name

FAST = {"timeout": 5.0, "heartbeat": 1.0}


def journal_bodies(broker, stream):
    return {r.sequence: r.body for r in
            JournalReader(broker.data_dir / stream_dir_name(stream)).read_from(1)}


def test_one_publisher_gets_the_exact_sequence_of_every_message(broker):
    with Client(broker.endpoint, "s", confirms=True, **FAST) as c:
        receipts = [c.publish("k", b"m%d" % i) for i in range(300)]
        assert all(isinstance(r, Receipt) for r in receipts)
        assert receipts[-1].result(5) == 300                   # waits for its CONFIRM
        assert all(r.done() for r in receipts)
        assert [r.result() for r in receipts] == list(range(1, 301))
    assert journal_bodies(broker, "s") == {i + 1: b"m%d" % i for i in range(300)}


def test_interleaved_publishers_get_true_sequences_or_none(broker):
    """Two clients publishing into one stream: a receipt's sequence, when known, is the one the
    journal holds its message under; the last publish of each client is always known."""
    with Client(broker.endpoint, "s", confirms=True, **FAST) as a, \
            Client(broker.endpoint, "s", confirms=True, **FAST) as b:
        ra, rb = [], []
        for i in range(200):
            ra.append(a.publish("k", b"a%d" % i))
            rb.append(b.publish("k", b"b%d" % i))
            if i % 40 == 39:
                a.wait_for_confirms()
                b.wait_for_confirms()
        a.wait_for_confirms()
        b.wait_for_confirms()
    journal = journal_bodies(broker, "s")
    for name, receipts in (("a", ra), ("b", rb)):
        known = [(i, r.result()) for i, r in enumerate(receipts) if r.result() is not None]
        assert all(journal[seq] == b"%s%d" % (name.encode(), i) for i, seq in known)
        assert receipts[-1].result() is not None


def test_without_confirms_the_receipt_is_done_and_the_sequence_unknown(broker):
    with Client(broker.endpoint, "s", **FAST) as c:
        r = c.publish("k", b"x")
        assert r.done() and r.result() is None and r.sequence is None and r.exception() is None


def test_a_rejected_message_fails_its_receipt_only(start_broker, tmp_path):
    b = start_broker(tmp_path / "d", "--max-message", "1K")
    with Client(b.endpoint, "s", confirms=True, **FAST) as c:
        ok1, big, ok2 = c.publish("k", b"ok"), c.publish("k", b"z" * 5000), c.publish("k", b"ok")
        with pytest.raises(InvalidError) as e:
            big.result(5)
        assert e.value.command == "PUBLISH" and isinstance(big.exception(), InvalidError)
        assert (ok1.result(5), ok2.result(5)) == (1, 2)


def test_a_rejected_message_is_told_from_a_stored_one_of_a_longer_frame(start_broker, tmp_path):
    """The rejected publish was taken to be the one of the longest frame: a stored one with a
    200-byte key and a body at the limit failed, and the rejected one, a byte over with a
    1-byte key, resolved to the stored one's sequence. The rejection names the body's size."""
    b = start_broker(tmp_path / "d", "--max-message", "1000")
    with Client(b.endpoint, "s", confirms=True, **FAST) as c:
        stored = c.publish("k" * 200, b"a" * 1000)
        rejected = c.publish("z", b"b" * 1001)
        plain = c.publish("h", b"c" * 1001, headers={"x": "y"})      # over with headers too
        assert stored.result(5) == 1
        for r in (rejected, plain):
            with pytest.raises(InvalidError, match="over the broker's limit of 1000"):
                r.result(5)
    assert journal_bodies(b, "s") == {1: b"a" * 1000}


def test_a_receipt_times_out_then_fails_when_the_client_closes(start_broker, tmp_path):
    b = start_broker(tmp_path / "d", "--fsync-interval-ms", "600000")   # no CONFIRM in this test
    c = Client(b.endpoint, "s", confirms=True, **FAST)
    r = c.publish("k", b"x")
    with pytest.raises(ZepsTimeout, match="not confirmed"):
        r.result(0.2)
    assert not r.done()
    c.close()
    with pytest.raises(ClientClosed):
        r.result()
