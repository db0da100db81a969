"""Idempotent producers in the pure core: PRODUCER, duplicates dropped but counted and confirmed,
every PUBLISH after PRODUCER uses up one producer sequence, and the state is the journal's."""
from __future__ import annotations

import os

from zeps.journal import BatchRecord
from zeps.protocol import commands as c
from zeps.protocol import decode
from zeps.protocol.batch import encode_publish_batch

from .core_harness import Core, make_fixture  # noqa: F401 (the make fixture)

P = b"producer"


def stored(h):
    return h.core.streams["s"].journal.last_seq


def test_a_retry_of_what_the_stream_holds_is_confirmed_not_stored(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-1", 1))
    assert h.take(P)[-1] == c.ProducerOk(0)
    for i in range(3):
        h.send(P, c.Publish("k", b"%d" % i))
    h.round()
    assert stored(h) == 3
    assert h.take(P)[-1] == c.Confirm(3, 3)
    # the same producer reconnects and re-sends 2 and 3 (it did not see their CONFIRM)
    h.send(P, c.Detach())
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-1", 2))
    assert h.take(P)[-1] == c.ProducerOk(3)
    h.send(P, c.Publish("k", b"1"), c.Publish("k", b"2"), c.Publish("k", b"3"))
    h.round()
    assert stored(h) == 4, "only the new one (producer sequence 4) is stored"
    assert h.take(P)[-1].count == 3          # all three counted and confirmed


def test_a_rejected_publish_uses_up_its_producer_sequence(make):
    h = make(fsync="always", max_message=4)
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-2", 1))
    h.send(P, c.Publish("k", b"toolong"), c.Publish("k", b"ok"))     # sequences 1 and 2
    h.round()
    assert [type(m) for m in h.take(P)][-2:] == [c.Invalid, c.Confirm]
    h.send(P, c.Producer("app-2", 2))
    assert h.take(P)[-1] == c.ProducerOk(2), "the stored one had producer sequence 2"


def test_producer_state_survives_a_restart_of_the_core(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.Producer("app-3", 10), c.Publish("k", b"x"))
    h.round()
    path = h.datadir.path
    h.close()
    h2 = Core(path, fsync="always")          # a new core on the same data: the journal's state
    try:
        h2.send(P, c.Attach("s"), c.Producer("app-3", 10))
        assert h2.take(P)[-1] == c.ProducerOk(10)
    finally:
        h2.close()


# ---------------------------------------------------------------------------- PUBLISH-BATCH

def batch(*keys: str) -> c.PublishBatch:
    return decode(encode_publish_batch([(k, b"v" + k.encode()) for k in keys]))


def stored_records(h):
    """The stream's records as stored: (first sequence, count, producer, first pseq, keys)."""
    out = []
    for r in h.core.streams["s"].journal.read_chunks(1, max_records=1 << 20):
        if isinstance(r, BatchRecord):
            out.append((r.sequence, r.count, r.producer, r.pseq,
                        [r.key(i) for i in range(r.count)]))
        else:
            out.append((r.sequence, 1, r.producer, r.pseq, [r.key]))
    return out


def test_a_producer_batch_is_one_record_and_a_retried_batch_is_not_stored_twice(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-b", 1))
    h.take(P)
    h.send(P, batch("a", "b", "c"))
    h.round()
    assert stored_records(h) == [(1, 3, "app-b", 1, ["a", "b", "c"])]
    assert h.take(P)[-1] == c.Confirm(3, 3)
    h.send(P, c.Detach())
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-b", 1))   # retries it all
    assert h.take(P)[-1] == c.ProducerOk(3)
    h.send(P, batch("a", "b", "c"))
    h.round()
    assert stored_records(h) == [(1, 3, "app-b", 1, ["a", "b", "c"])], "not stored again"
    assert h.take(P)[-1] == c.Confirm(3, 3), "every entry counted, confirmed at the stored one"
    assert h.core.streams["s"].duplicates_total == 3


def test_a_partly_duplicate_batch_stores_only_the_new_tail_as_one_batch_record(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-t", 1))
    h.send(P, batch("a", "b"))
    h.round()
    h.take(P)
    h.send(P, c.Detach())
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-t", 2))
    assert h.take(P)[-1] == c.ProducerOk(2)
    sent = batch("b", "c", "d", "e")               # pseqs 2..5: 2 is stored already
    h.send(P, sent)
    h.round()
    assert stored_records(h) == [(1, 2, "app-t", 1, ["a", "b"]),
                                 (3, 3, "app-t", 3, ["c", "d", "e"])]
    tail = h.core.streams["s"].journal.read_chunks(3)[0]
    assert tail.frame.endswith(sent.entries[sent.offsets[1]:]), "entries copied, not re-encoded"
    assert h.take(P)[-1] == c.Confirm(4, 5), "all four entries counted"
    assert h.core.streams["s"].journal.producers()["app-t"] == (5, 5)
    h.send(P, c.Publish("f", b"x"))                # producer sequence 6
    h.round()
    assert stored_records(h)[-1] == (6, 1, "app-t", 6, ["f"])


def test_a_batch_and_its_retry_in_the_same_round_are_stored_once(make):
    h = make(fsync="always")
    other = b"other"
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-r", 1))
    h.send(other, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-r", 2))
    h.take(P), h.take(other)
    h.send(P, batch("a", "b", "c"))                # pseqs 1..3, not yet flushed
    h.send(other, batch("b", "c", "d"))            # pseqs 2..4: only d is new
    h.round()
    assert stored_records(h) == [(1, 3, "app-r", 1, ["a", "b", "c"]),
                                 (4, 1, "app-r", 4, ["d"])]
    assert h.take(P)[-1] == c.Confirm(3, 3)
    assert h.take(other)[-1].count == 3


def test_a_refused_producer_batch_uses_up_one_producer_sequence_per_entry(make):
    h = make(fsync="always", max_message=4)
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-x", 1))
    h.take(P)
    h.send(P, decode(encode_publish_batch([("k", b"too long"), ("j", b"ok")])))   # 1, 2
    h.send(P, batch("m", "n"))                                                      # 3, 4
    h.round()
    assert [type(m) for m in h.take(P)] == [c.Invalid, c.Invalid, c.Confirm]
    assert stored_records(h) == [(1, 2, "app-x", 3, ["m", "n"])]


def test_producer_batch_state_survives_a_restart_without_snapshots(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.Producer("app-s", 7), batch("a", "b", "c", "d"))
    h.round()
    path = h.datadir.path
    h.close()
    sdir = next(os.path.join(r, "") for r, _d, files in os.walk(path)
                if any(f.endswith(".log") for f in files))
    for name in os.listdir(sdir):
        if name.endswith(".producers"):
            os.unlink(os.path.join(sdir, name))
    h2 = Core(path, fsync="always")                # rebuilt from the batch record alone
    try:
        h2.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-s", 9))
        assert h2.take(P)[-1] == c.ProducerOk(10)
        h2.send(P, batch("c", "d", "e"))           # 9, 10 stored already, 11 is new
        h2.round()
        assert stored_records(h2)[-1] == (5, 1, "app-s", 11, ["e"])
        assert h2.take(P)[-1] == c.Confirm(3, 5)
    finally:
        h2.close()


def test_producer_sequences_past_2_64_are_refused_and_other_publishers_are_not_hurt(make):
    """A hostile producer starting at 2^64-1: the PUBLISH (or batch entries) whose producer
    sequence would pass 2^64-1 get INVALID each, and another client's publishes of the same
    round are stored (the journal append is not failed for everyone)."""
    h = make(fsync="always")
    other = b"other"
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("edge", 2**64 - 1))
    h.send(other, c.Attach("s"), c.ConfirmSelect())
    h.take(P), h.take(other)
    h.send(P, batch("a", "b"))                     # 2^64-1 and 2^64: refused, both
    h.send(P, c.Publish("c", b"x"))                # 2^64+1: refused
    h.send(other, c.Publish("fine", b"x"))
    h.round()
    got = h.take(P)
    assert [type(m) for m in got] == [c.Invalid] * 3
    assert all("2^64-1" in m.reason for m in got)
    assert h.take(other) == [c.Confirm(1, 1)]
    h.send(P, c.Producer("edge", 2**64 - 1), c.Publish("last", b"x"))   # exactly 2^64-1: fine
    h.round()
    assert stored_records(h) == [(1, 1, None, None, ["fine"]), (2, 1, "edge", 2**64 - 1, ["last"])]


def test_a_retry_queued_with_its_original_is_confirmed_only_once_the_original_is_durable(make):
    """A producer re-sends on a new connection before its first connection's publishes were
    appended (both in one round): the retry is not stored again, and its CONFIRM waits, as the
    original's does, until the journal is durable, then names the original's sequence."""
    h = make(fsync="interval")
    other = b"other"
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-d", 1))
    h.send(other, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-d", 1))
    h.take(P), h.take(other)
    h.send(P, c.Publish("k", b"a"), c.Publish("k", b"b"))       # pseqs 1, 2
    h.send(other, c.Publish("k", b"a"), c.Publish("k", b"b"))   # the retry: pseqs 1, 2
    h.send(other, c.Publish("k", b"c"))                          # pseq 3: new
    h.round()
    journal = h.core.streams["s"].journal
    assert [r.body for r in journal.read_batch(1)] == [b"a", b"b", b"c"]
    assert journal.durable_seq < 3
    assert h.take(P) == [] and h.take(other) == [], "nothing is durable yet"
    h.sync_and_confirm([h.core.streams["s"]])
    assert h.take(P) == [c.Confirm(2, 2)]
    assert h.take(other) == [c.Confirm(3, 3)]                  # its 3 publishes, up to seq 3


def test_a_retry_queued_with_its_original_is_refused_with_it_when_the_append_fails(make):
    """Every publish gets one answer: when the round's append fails, the original and the
    retry queued with it both get INVALID (nothing holds them), in their queue order."""
    h = make(fsync="always", max_record_bytes=64)
    other = b"other"
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-f", 1))
    h.send(other, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-f", 1))
    h.take(P), h.take(other)
    h.send(P, c.Publish("k", b"a"), c.Publish("k", b"x" * 60))   # the second breaks the append
    h.send(other, c.Publish("k", b"a"))                           # a retry of pseq 1
    h.round()
    assert [type(m) for m in h.take(P)] == [c.Invalid, c.Invalid]
    got = h.take(other)
    assert len(got) == 1 and got[0].reason.startswith("PUBLISH rejected: journal append failed")
    assert h.core.streams["s"].journal.last_seq == 0
