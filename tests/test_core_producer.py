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


def test_a_rejected_publish_uses_up_its_producer_sequence_and_the_next_waits_for_producer(make):
    """A refused PUBLISH takes its producer sequence (the client numbers every publish), and
    nothing of the peering is stored above that hole until a PRODUCER from ``last + 1``: its
    later publishes are refused as out of order. (The next one was stored, and a client that
    re-attached before it read the refusal took the refused one for a stored duplicate: the
    broker's PRODUCER-OK names the highest stored.)"""
    h = make(fsync="always", max_message=4)
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-2", 1))
    h.send(P, c.Publish("k", b"toolong"), c.Publish("k", b"ok"))     # sequences 1 and 2
    h.round()
    first, second = h.take(P)[-2:]
    assert "body of 7 bytes" in first.reason and "out of order" in second.reason, second
    assert stored(h) == 0
    h.send(P, c.Producer("app-2", 2))
    assert h.take(P)[-1] == c.ProducerOk(0), "nothing stored above the hole"
    h.send(P, c.Publish("k", b"ok"))
    h.round()
    assert "out of order" in h.take(P)[-1].reason, "still past last + 1"
    h.send(P, c.Producer("app-2", 1), c.Publish("k", b"ok"))
    h.round()
    assert h.take(P)[-2:] == [c.ProducerOk(0), c.Confirm(1, 1)]


def test_producer_state_survives_a_restart_of_the_core(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.Producer("app-3", 1), c.Publish("k", b"x"), c.Publish("k", b"y"))
    h.round()
    path = h.datadir.path
    h.close()
    h2 = Core(path, fsync="always")          # a new core on the same data: the journal's state
    try:
        h2.send(P, c.Attach("s"), c.Producer("app-3", 2))
        assert h2.take(P)[-1] == c.ProducerOk(2)
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


def test_a_takeover_appends_what_the_old_peering_queued_first_then_fences_it(make):
    """A newer PRODUCER of the same id (a retried task, a reconnect) takes it over: the batch
    the old peering queued is appended before PRODUCER-OK (so ``last`` counts it and the retry
    of it is a duplicate), and the old peering's later publishes are refused as fenced, never
    confirmed as stored (issue 15, finding 5)."""
    h = make(fsync="always")
    other = b"other"
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-r", 1))
    h.take(P)
    h.send(P, batch("a", "b", "c"))                # pseqs 1..3, not yet flushed
    h.send(other, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-r", 2))
    assert h.take(other)[-1] == c.ProducerOk(3)
    assert h.take(P)[-1] == c.Confirm(3, 3)
    h.send(other, batch("b", "c", "d"))            # pseqs 2..4: only d is new
    h.send(P, batch("x", "y"), c.Publish("z", b"!"))   # fenced: each refused
    h.round()
    assert stored_records(h) == [(1, 3, "app-r", 1, ["a", "b", "c"]),
                                 (4, 1, "app-r", 4, ["d"])]
    assert h.take(other)[-1] == c.Confirm(3, 4)
    got = h.take(P)
    assert [type(m) for m in got] == [c.Invalid] * 3
    assert all(m.reason.startswith("PUBLISH rejected: producer refused: fenced:") for m in got)


def test_a_refused_producer_batch_uses_up_one_producer_sequence_per_entry(make):
    h = make(fsync="always", max_message=4)
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-x", 1))
    h.take(P)
    h.send(P, decode(encode_publish_batch([("k", b"too long"), ("j", b"ok")])))   # 1, 2
    h.send(P, batch("m", "n"))                                        # 3, 4: out of order
    h.round()
    got = h.take(P)
    assert [type(m) for m in got] == [c.Invalid] * 4 and "out of order" in got[2].reason
    h.send(P, c.Producer("app-x", 1), batch("m", "n"))                               # 1, 2
    h.round()
    assert stored_records(h) == [(1, 2, "app-x", 1, ["m", "n"])]


def test_producer_batch_state_survives_a_restart_without_snapshots(make):
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.Producer("app-s", 7), batch("a", "b", "c", "d"))    # 7 > 0 + 1
    h.send(P, c.Producer("app-s", 1), batch("a", "b", "c", "d"))                   # 1..4
    h.round()
    assert stored_records(h) == [(1, 4, "app-s", 1, ["a", "b", "c", "d"])]
    path = h.datadir.path
    h.close()
    sdir = next(os.path.join(r, "") for r, _d, files in os.walk(path)
                if any(f.endswith(".log") for f in files))
    for name in os.listdir(sdir):
        if name.endswith(".producers"):
            os.unlink(os.path.join(sdir, name))
    h2 = Core(path, fsync="always")                # rebuilt from the batch record alone
    try:
        h2.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-s", 3))
        assert h2.take(P)[-1] == c.ProducerOk(4)
        h2.send(P, batch("c", "d", "e"))           # 3, 4 stored already, 5 is new
        h2.round()
        assert stored_records(h2)[-1] == (5, 1, "app-s", 5, ["e"])
        assert h2.take(P)[-1] == c.Confirm(3, 5)
    finally:
        h2.close()


def test_producer_sequences_past_2_64_are_refused_and_other_publishers_are_not_hurt(make):
    """A producer at 2^64-1: the PUBLISH (or batch entries) whose producer sequence would pass
    2^64-1 get INVALID each, and another client's publishes of the same round are stored (the
    journal append is not failed for everyone). (Sequences only go up by one: the state is
    written into the journal to get there.)"""
    h = make(fsync="always")
    other = b"other"
    h.core.stream("s").journal.append_batch([("k", b"v")], [("edge", 2**64 - 2)])
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("edge", 2**64 - 1))
    h.send(other, c.Attach("s"), c.ConfirmSelect())
    assert h.take(P)[-1] == c.ProducerOk(2**64 - 2)
    h.take(other)
    h.send(P, batch("a", "b"))                     # 2^64-1 and 2^64: refused, both
    h.send(P, c.Publish("c", b"x"))                # 2^64+1: refused
    h.send(other, c.Publish("fine", b"x"))
    h.round()
    got = h.take(P)
    assert [type(m) for m in got] == [c.Invalid] * 3
    assert all("2^64-1" in m.reason for m in got[:2]) and "out of order" in got[2].reason
    assert h.take(other) == [c.Confirm(1, 2)]
    h.send(P, c.Producer("edge", 2**64 - 1), c.Publish("last", b"x"))   # exactly 2^64-1: fine
    h.round()
    assert stored_records(h)[1:] == [(2, 1, None, None, ["fine"]),
                                     (3, 1, "edge", 2**64 - 1, ["last"])]


def test_a_retry_after_a_takeover_is_confirmed_only_once_the_original_is_durable(make):
    """A producer re-sends on a new connection before its first connection's publishes were
    appended: its PRODUCER appends them first, so the retry is not stored again, and its
    CONFIRM waits, as the original's does, until the journal is durable, then names the
    original's sequence."""
    h = make(fsync="interval")
    other = b"other"
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-d", 1))
    h.take(P)
    h.send(P, c.Publish("k", b"a"), c.Publish("k", b"b"))       # pseqs 1, 2: queued
    h.send(other, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-d", 1))
    assert h.take(other)[-1] == c.ProducerOk(2)
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


def test_what_a_peering_queued_is_answered_before_a_takeover_is(make):
    """Every publish gets one answer: when the append of what the old peering queued fails,
    its publishes get INVALID before the new PRODUCER's PRODUCER-OK, which then says nothing
    is stored, and the new peering's publishes are new ones."""
    h = make(fsync="always", max_record_bytes=64)
    other = b"other"
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-f", 1))
    h.take(P)
    h.send(P, c.Publish("k", b"a"), c.Publish("k", b"x" * 60))   # the second breaks the append
    h.send(other, c.Attach("s"), c.ConfirmSelect(), c.Producer("app-f", 1))
    assert [type(m) for m in h.take(P)] == [c.Invalid, c.Invalid]
    assert h.take(other)[-1] == c.ProducerOk(0)
    h.send(other, c.Publish("k", b"a"))                           # pseq 1: new
    h.round()
    assert h.take(other) == [c.Confirm(1, 1)]
    assert stored_records(h) == [(1, 1, "app-f", 1, ["k"])]


# ---------------------------------------------------------------------------- issue 15: 4, 5, 6

def many_producers(h, n: int, stream: str = "s") -> None:
    """``n`` producer ids in the stream's producer table (appended straight to its journal)."""
    j = h.core.stream(stream).journal
    for first in range(0, n, 1000):
        k = min(1000, n - first)
        j.append_batch([("k", b"")] * k, [(f"other-{first + i}", 1) for i in range(k)])


def test_producer_costs_the_same_whatever_the_number_of_producers_known(make, monkeypatch):
    """Finding 4: each PRODUCER copied the whole producer table (10,000 ids: 2,000 PRODUCER a
    second took a CPU). PRODUCER, a producer's publishes and their de-duplication now look one
    id up: with 10,000 ids known, no copy of the table is ever made."""
    from zeps.journal import Journal
    from zeps.journal.producers import ProducerState
    h = make(fsync="always")
    many_producers(h, 10_000)

    def copied(*_a):
        raise AssertionError("the producer table was copied")
    monkeypatch.setattr(ProducerState, "as_dict", copied)
    monkeypatch.setattr(Journal, "producers", copied)
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("other-5", 2))
    assert h.take(P)[-1] == c.ProducerOk(1)
    h.send(P, c.Publish("k", b"a"), batch("b", "c"))        # 2, 3..4
    h.round()
    assert h.take(P)[-1] == c.Confirm(3, 10_003)
    for _ in range(100):
        h.send(P, c.Producer("other-5", 3))                 # 3, 4 stored already
    assert h.take(P) == [c.ProducerOk(4)] * 100
    h.send(P, c.Publish("k", b"c"), c.Publish("k", b"d"), c.Publish("k", b"e"))
    h.round()
    assert h.take(P)[-1] == c.Confirm(6, 10_004)
    assert h.core.streams["s"].journal.last_seq == 10_004


ACL = """
[clients]
reader = "{reader}"
writer = "{writer}"
other = "{other}"

[[allow]]
clients = ["reader"]
subscribe = ["s"]

[[allow]]
clients = ["writer", "other"]
publish = ["s"]
subscribe = ["s"]
"""
READER, WRITER, OTHER = "R" * 40, "W" * 40, "O" * 40


def secured(h, *idents_keys):
    from zeps.broker.acl import parse_acl
    h.core.set_acl(parse_acl(ACL.format(reader=READER, writer=WRITER, other=OTHER)))
    for ident, key in idents_keys:
        h.core.identify(ident, key)


def test_producer_needs_the_right_to_publish_checked_before_anything(make):
    """Finding 4: a client with only the right to subscribe got PRODUCER-OK. It is refused
    (not allowed), before the request is even looked at: a bad one gets the same answer, and
    nothing is done for it (the stream's queued publishes stay queued, no id is registered)."""
    h = make(fsync="always")
    reader, writer = b"reader", b"writer"
    secured(h, (reader, READER), (writer, WRITER))
    h.send(writer, c.Attach("s"), c.ConfirmSelect(), c.Producer("w", 1))
    assert h.take(writer)[-1] == c.ProducerOk(0)
    h.send(writer, c.Publish("k", b"queued"))               # queued, not yet appended
    h.send(reader, c.Attach("s"))
    h.take(reader)
    for cmd in (c.Producer("w", 1), c.Producer("mine", 1), c.Producer("", 0)):
        h.send(reader, cmd)
        [r] = h.take(reader)
        assert isinstance(r, c.Invalid) and r.reason.startswith("not allowed: "), r
        assert "publish" in r.reason
    stream = h.core.streams["s"]
    assert len(stream.queued_publishes) == 1, "a refused PRODUCER did no work (no flush)"
    assert h.core.sessions[reader].producer is None and "w" in stream.dedup.owners
    assert stream.dedup.owners["w"] is h.core.sessions[writer], "the writer was not fenced"
    h.round()
    assert h.take(writer) == [c.Confirm(1, 1)]


def test_a_jump_past_the_last_producer_sequence_is_refused_and_erases_nobody(make):
    """Finding 5: ``PRODUCER victim 2^63`` and one PUBLISH made every later publish of the
    victim a "duplicate", confirmed and never stored. A peering whose producer sequences would
    start past the producer's last + 1 now gets PRODUCER-OK (saying where the producer is) and
    each of its publishes is refused as out of order, nothing stored, nothing confirmed; the
    victim's publishes are all stored."""
    h = make(fsync="always")
    victim, hostile = b"victim", b"hostile"
    h.send(victim, c.Attach("s"), c.ConfirmSelect(), c.Producer("victim-id", 1))
    h.send(victim, c.Publish("v", b"1"))
    h.round()
    assert h.take(victim)[-1] == c.Confirm(1, 1)
    h.send(hostile, c.Attach("s"), c.ConfirmSelect(), c.Producer("victim-id", 2**63))
    assert h.take(hostile)[-1] == c.ProducerOk(1)
    h.send(hostile, c.Publish("x", b"evil"), batch("y", "z"))
    h.round()
    got = h.take(hostile)
    assert [type(m) for m in got] == [c.Invalid] * 3
    assert all(m.reason.startswith("PUBLISH rejected: producer refused: out of order: ")
               for m in got), got[0]
    assert stored(h) == 1
    # the victim was fenced by the newer PRODUCER: told so, not silently confirmed...
    h.send(victim, c.Publish("v", b"2"))
    h.round()
    [r] = h.take(victim)
    assert r.reason.startswith("PUBLISH rejected: producer refused: fenced: ")
    # ...and registering again (it takes the id back) its publishes are stored, all of them
    h.send(victim, c.Producer("victim-id", 2))
    assert h.take(victim) == [c.ProducerOk(1)]
    for i in range(50):
        h.send(victim, c.Publish("v", b"%d" % (i + 2)))
    h.round()
    assert h.take(victim)[-1] == c.Confirm(51, 51)
    assert stored(h) == 51
    assert h.core.streams["s"].journal.producer("victim-id")[0] == 51
    h.send(hostile, c.Publish("x", b"evil"))            # fenced in turn
    h.round()
    assert h.take(hostile)[0].reason.startswith("PUBLISH rejected: producer refused: fenced: ")


def test_a_new_producer_id_starts_at_1(make):
    """An id the stream does not know is at 0: its first peering starts at 1 (Kafka: a new
    producer's first sequence is 0), else its publishes are refused until it does."""
    h = make(fsync="always")
    h.send(P, c.Attach("s"), c.ConfirmSelect(), c.Producer("fresh", 5), c.Publish("k", b"a"))
    h.round()
    msgs = h.take(P)
    assert msgs[-2] == c.ProducerOk(0) and "out of order" in msgs[-1].reason
    h.send(P, c.Producer("fresh", 1), c.Publish("k", b"a"))
    h.round()
    assert h.take(P)[-1] == c.Confirm(1, 1)


def test_with_keys_a_producer_id_is_bound_to_the_key_that_used_it_first(make):
    """Finding 5, with CurveZMQ: an id whose records were stored under key A (or that a
    peering of key A holds now) is refused to key B - PRODUCER gets INVALID "producer refused:
    bound", A is not fenced, and B's publishes are not de-duplicated against A's. The binding
    is in the journal's producer state: it survives a restart (close snapshot)."""
    h = make(fsync="always")
    a, b, a2 = b"a", b"b", b"a-again"
    secured(h, (a, WRITER), (b, OTHER), (a2, WRITER))
    h.send(a, c.Attach("s"), c.ConfirmSelect(), c.Producer("orders-1", 1))
    assert h.take(a)[-1] == c.ProducerOk(0)
    h.send(b, c.Attach("s"), c.ConfirmSelect(), c.Producer("orders-1", 1))
    [r] = h.take(b)[-1:]
    assert isinstance(r, c.Invalid) and r.reason.startswith("producer refused: bound: "), r
    h.send(a, c.Publish("k", b"1"))
    h.round()
    assert h.take(a) == [c.Confirm(1, 1)], "A was not fenced"
    assert h.core.streams["s"].journal.producer("orders-1")[3] == WRITER
    h.send(a, c.Detach())
    h.send(b, c.Producer("orders-1", 1))                   # nobody holds it now: its records do
    assert isinstance(h.take(b)[-1], c.Invalid)
    h.send(a2, c.Attach("s"), c.ConfirmSelect(), c.Producer("orders-1", 2))   # the same key
    assert h.take(a2)[-1] == c.ProducerOk(1)
    path = h.datadir.path
    h.close()
    h2 = Core(path, fsync="always")
    try:
        secured(h2, (b, OTHER))
        h2.send(b, c.Attach("s"), c.Producer("orders-1", 1))
        assert h2.take(b)[-1].reason.startswith("producer refused: bound: ")
    finally:
        h2.close()


def test_one_connection_registers_a_bounded_number_of_producer_ids(make):
    """Finding 6: one client filled the table (10,000 ids) and so evicted a victim's state.
    A connection registers at most ``max_producer_ids`` distinct ids (INVALID "limit: ..."
    beyond, also across re-attaches); registering one of its ids again is fine."""
    h = make(fsync="always", max_producer_ids=4)
    h.send(P, c.Attach("s"))
    h.take(P)
    for i in range(4):
        h.send(P, c.Producer(f"id-{i}", 1))
        assert h.take(P) == [c.ProducerOk(0)]
    h.send(P, c.Producer("id-4", 1))
    [r] = h.take(P)
    assert isinstance(r, c.Invalid) and r.reason.startswith("limit: at most 4 producer ids"), r
    h.send(P, c.Detach(), c.Attach("s"), c.Producer("id-5", 1), c.Producer("id-0", 1))
    got = h.take(P)
    assert isinstance(got[-2], c.Invalid) and got[-1] == c.ProducerOk(0)
    h.send(b"another", c.Attach("s"), c.Producer("id-9", 1))
    assert h.take(b"another")[-1] == c.ProducerOk(0), "the limit is per connection"


def test_a_key_that_reconnects_evicts_only_its_own_producer_ids(make):
    """With CurveZMQ keys, a key that reconnects to pass the per-connection limit of ids
    (``max_producer_ids``) filled the journal's table (``max_producers``, least recently used
    dropped) and so pushed out the state of every other key's producers: a victim's retry was
    then stored twice. Each key keeps at most ``max_producer_ids_per_key`` ids on a stream; a
    new one takes the place of the key's own least recently used id. The victim's state stays,
    the hostile key's newest ids keep theirs, and its oldest are forgotten."""
    h = make(fsync="always", max_producers=8, max_producer_ids=2, max_producer_ids_per_key=3)
    victim, hostile = b"victim", b"hostile"
    secured(h, (victim, WRITER))
    h.send(victim, c.Attach("s"), c.ConfirmSelect(), c.Producer("orders", 1),
           c.Publish("k", b"1"))
    h.round()
    assert h.take(victim)[-1] == c.Confirm(1, 1)
    h.send(victim, c.Detach())
    for n in range(10):                               # 10 connections, 2 new ids each
        ident = b"hostile-%d" % n
        h.core.identify(ident, OTHER)
        h.send(ident, c.Attach("s"), c.ConfirmSelect())
        for i in (2 * n, 2 * n + 1):
            h.send(ident, c.Producer(f"h-{i}", 1), c.Publish("k", b"x"))
            h.round()
        assert h.take(ident)[-1] == c.Confirm(2, 2 * n + 3)
        h.send(ident, c.Detach())
        h.core.gone(ident)
    journal = h.core.streams["s"].journal
    assert journal.producers_bound_to(OTHER) == (3, "h-17")
    assert set(journal.producers()) == {"orders", "h-17", "h-18", "h-19"}
    h.send(victim, c.Attach("s"), c.ConfirmSelect(), c.Producer("orders", 1))
    assert h.take(victim)[-1] == c.ProducerOk(1), "the victim's state was kept"
    h.send(victim, c.Publish("k", b"1"))              # its retry: confirmed, not stored again
    h.round()
    assert h.take(victim)[-1] == c.Confirm(1, 1) and stored(h) == 21
    h.core.identify(hostile, OTHER)
    h.send(hostile, c.Attach("s"), c.Producer("h-2", 1))
    assert h.take(hostile)[-1] == c.ProducerOk(0), "forgotten: its own old id"


def test_a_key_whose_ids_are_all_in_use_is_refused_a_new_one(make):
    """Every id of the key is owned by a peering now: forgetting one would lose that peering's
    state, so the new id is refused (``limit: ``), and nothing is forgotten."""
    h = make(fsync="always", max_producer_ids_per_key=2)
    a, b, c2 = b"a", b"b", b"c"
    secured(h, (a, WRITER), (b, WRITER), (c2, WRITER))
    for ident, pid in ((a, "p-a"), (b, "p-b")):
        h.send(ident, c.Attach("s"), c.ConfirmSelect(), c.Producer(pid, 1),
               c.Publish("k", b"x"))
        h.round()
        assert isinstance(h.take(ident)[-1], c.Confirm)
    h.send(c2, c.Attach("s"), c.Producer("p-c", 1))
    [r] = h.take(c2)[-1:]
    assert isinstance(r, c.Invalid) and r.reason.startswith("limit: a key keeps at most 2 "), r
    assert set(h.core.streams["s"].journal.producers()) == {"p-a", "p-b"}
    h.send(a, c.Detach())                             # p-a's owner leaves: its place is free
    h.send(c2, c.Producer("p-c", 1))
    assert h.take(c2)[-1] == c.ProducerOk(0)
    assert h.core.streams["s"].journal.producer("p-a") is None


def test_an_idle_owner_does_not_keep_its_key_from_new_ids(make):
    """The key's least recently used id is owned by a peering that stays attached and idle:
    every new id of the key was refused, though others were free to forget. An id in use is
    passed over; the oldest free one goes."""
    h = make(fsync="always", max_producer_ids_per_key=3)
    idle, p1, p2, new = b"idle", b"p1", b"p2", b"new"
    secured(h, (idle, WRITER), (p1, WRITER), (p2, WRITER), (new, WRITER))
    for ident, pid in ((idle, "p-idle"), (p1, "p-1"), (p2, "p-2")):
        h.send(ident, c.Attach("s"), c.ConfirmSelect(), c.Producer(pid, 1),
               c.Publish("k", b"x"))
        h.round()
        assert isinstance(h.take(ident)[-1], c.Confirm)
    h.send(p1, c.Detach())
    h.send(p2, c.Detach())
    journal = h.core.streams["s"].journal
    assert journal.producers_bound_to(WRITER) == (3, "p-idle")
    h.send(new, c.Attach("s"), c.Producer("p-new", 1))
    assert h.take(new)[-1] == c.ProducerOk(0)
    assert journal.producer("p-idle") is not None and journal.producer("p-1") is None
