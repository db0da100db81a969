"""Producer sequences in the journal (issue 9, the journal's part): ``append_batch(items,
producers=)`` stores ``(producer id, pseq)`` in the record, ``Journal.producers()`` is the last
pseq (and its record's sequence) of each id over the records the journal holds - maintained by
appends, rebuilt on open from a snapshot plus the records after it, after a crash exactly what
the recovered log holds, across retention, and bounded by ``max_producers``. Damaged records
with producer extensions are in test_journal_damage.py."""
from __future__ import annotations

import os
import shutil
from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeps.journal import InvalidRecordError, Journal, JournalConfig, JournalReader
from zeps.journal.producers import list_snapshots, snapshot_path
from zeps.journal.record import HEADER, encode_batch
from zeps.protocol.deliver import encode_deliver

import google_crc32c
from .property_examples import examples

SMALL = JournalConfig(segment_bytes=2048, index_interval_bytes=256, fsync="never")


def model(records, max_producers=10_000):
    """What producers() must be: the last (pseq, seq) of each id, least recently used dropped."""
    d = OrderedDict()
    for r in records:
        if r.producer is not None:
            d[r.producer] = (r.pseq, r.sequence)
            d.move_to_end(r.producer)
            if len(d) > max_producers:
                d.popitem(last=False)
    return dict(d)


def all_records(path):
    with JournalReader(path) as r:
        return list(r.read_from(1))


def fill(j, batches, start=0):
    """Batches mixing plain records and records of producers p0..p6."""
    out = []
    for b in range(start, start + batches):
        items = [(f"k{b}.{i}", bytes([b % 256]) * (20 + 7 * i)) for i in range(3)]
        prods = [None if (b + i) % 4 == 0 else (f"p{(b * 3 + i) % 7}", b * 10 + i + 1)
                 for i in range(3)]
        out += j.append_batch(items, prods)
    return out


def crash_copy(src, dst):
    """The files as a crash would leave them (the writer still open, nothing closed)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("LOCK"))
    return dst


def test_appended_producers_are_kept_with_their_records(tmp_path):
    with Journal.open(tmp_path / "s", SMALL) as j:
        recs = j.append_batch([("a", b"1"), ("b", b"2"), ("c", b"3"), ("d", b"4")],
                              [("alice", 5), None, ("bob", 1), ("alice", 6)])
        assert [(r.producer, r.pseq) for r in recs] == [("alice", 5), (None, None),
                                                        ("bob", 1), ("alice", 6)]
        assert j.producers() == {"bob": (1, 3), "alice": (6, 4)}
        j.append_batch([("e", b"5")])                      # a plain record changes nothing
        assert j.producers() == {"bob": (1, 3), "alice": (6, 4)}
        back = j.read_batch(1)
        assert [(r.producer, r.pseq) for r in back] == [(r.producer, r.pseq) for r in recs] + \
            [(None, None)]
        assert back[:4] == recs
        # the frame routed live and replayed is the plain DELIVER frame
        assert back[0].frame == encode_deliver(1, b"a", b"1")


def test_records_without_a_producer_are_byte_identical_to_the_old_format(tmp_path):
    """A record without a producer is length | crc(ts || frame) | ts | frame, whether
    ``producers`` is None or a list of None: existing journals and their replay are unchanged."""
    clock = iter(range(10**15, 10**16, 10))
    with Journal.open(tmp_path / "s", SMALL, clock=lambda: next(clock)) as j:
        r1 = j.append_batch([("k", b"body")])[0]
        r2 = j.append_batch([("k2", b"")], [None])[0]
    data = open(tmp_path / "s" / "00000000000000000001.log", "rb").read()
    expect = b""
    for r, key, body in ((r1, b"k", b"body"), (r2, b"k2", b"")):
        frame = encode_deliver(r.sequence, key, body)
        ts = r.timestamp.to_bytes(8, "big")
        expect += HEADER.pack(len(frame), google_crc32c.value(ts + frame), r.timestamp) + frame
    assert data == expect


@pytest.mark.parametrize("producers, why", [
    ([("a", 1)], "must be a list of 2"),
    ([("", 1), None], "1 to 255"),
    ([("x" * 256, 1), None], "1 to 255"),
    ([("é" * 128, 1), None], "256 bytes"),
    ([("a", 0), None], "pseq"),
    ([("a", 1 << 64), None], "pseq"),
    ([("a", True), None], "pseq"),
    ([("a", "1"), None], "pseq"),
    ([(b"a", 1), None], "must be str"),
    ([("a",), None], "pair"),
    ("ab", "must be a list"),
])
def test_bad_producers_are_refused_and_nothing_is_appended(tmp_path, producers, why):
    with Journal.open(tmp_path / "s", SMALL) as j:
        j.append_batch([("k", b"v")], [("a", 1)])
        with pytest.raises(InvalidRecordError, match=why):
            j.append_batch([("k", b"v"), ("k", b"w")], producers)
        assert j.next_seq == 2 and j.producers() == {"a": (1, 1)}
        assert len(j.read_batch(1)) == 1


def test_clean_restart_reads_no_record(tmp_path, caplog):
    """close() leaves a snapshot of the whole state; the next open uses it (and deletes it):
    here the old segments are corrupted, and nothing notices."""
    d = tmp_path / "s"
    with Journal.open(d, SMALL) as j:
        recs = fill(j, 60)
        want = j.producers()
    assert want == model(recs) and len(want) == 7
    assert len(list_snapshots(d)) > 3
    for name in sorted(n for n in os.listdir(d) if n.endswith(".log"))[:-1]:
        with open(d / name, "r+b") as f:
            f.write(b"\xff" * 64)
    with caplog.at_level("WARNING", logger="zeps.journal"):
        with Journal.open(d, SMALL) as j:
            assert j.producers() == want
            assert j.next_seq in list_snapshots(d)           # the close snapshot
    assert "producer" not in caplog.text


def test_a_crash_reads_at_most_snapshot_interval_bytes(tmp_path, caplog):
    """Inside one big segment, a snapshot every ``snapshot_interval_bytes``: after a crash only
    the records after the newest one are read (the segment's start is corrupted in the copy,
    unnoticed), and each such snapshot replaces the previous one."""
    cfg = JournalConfig(segment_bytes=1 << 20, index_interval_bytes=256, fsync="never",
                        snapshot_interval_bytes=3000)
    d = tmp_path / "s"
    j = Journal.open(d, cfg)
    fill(j, 60)
    assert len(j.segment_seqs()) == 1
    snaps = list_snapshots(d)
    assert len(snaps) == 1 and j.next_seq - snaps[0] < 3000 // 40
    c = crash_copy(d, tmp_path / "c")
    last = fill(j, 1, 60)[-1]
    want = model(all_records(d))
    with open(c / "00000000000000000001.log", "r+b") as f:
        f.write(b"\xff" * 100)
    j.close()
    with caplog.at_level("WARNING", logger="zeps.journal"):
        with Journal.open(c, cfg) as j:
            assert j.next_seq == last.sequence - 2
            assert j.producers() == model(all_records(d)[:j.next_seq - 1])
    assert "unreadable" not in caplog.text
    with Journal.open(d, cfg) as j:
        assert j.producers() == want


def test_after_a_crash_the_state_is_what_the_recovered_log_holds(tmp_path, caplog):
    """Crash copies (no close): the last segment snapshot plus the records after it - and only
    those: old segments are corrupted in the copy, and no error is logged. A torn last record
    is not counted."""
    d = tmp_path / "s"
    j = Journal.open(d, SMALL)
    fill(j, 50)
    c1 = crash_copy(d, tmp_path / "c1")
    last = j.append_batch([("z", b"torn")], [("p3", 10**6)])[0]
    assert j.producers()["p3"] == (10**6, last.sequence)
    c2 = crash_copy(d, tmp_path / "c2")
    j.close()
    logs = sorted(n for n in os.listdir(c2) if n.endswith(".log"))
    assert len(logs) > 3
    for c in (c1, c2):
        for name in logs[:-2]:
            with open(os.path.join(c, name), "r+b") as f:
                f.seek(40)
                f.write(b"\x00" * 32)
    # c2: tear the last record (the p3 one) at a byte inside its extension
    with open(os.path.join(c2, logs[-1]), "r+b") as f:
        size = f.seek(0, 2)
        f.truncate(size - last.size + 20)
    orig = all_records(d)
    for c in (c1, c2):
        with caplog.at_level("WARNING", logger="zeps.journal"):
            with Journal.open(c, SMALL) as j:
                got = j.producers()
                n = j.last_seq
        assert n == last.sequence - 1
        assert got == model(orig[:n])
        assert got["p3"] != (10**6, last.sequence)
    assert "unreadable" not in caplog.text


def test_state_survives_retention(tmp_path):
    """A producer that published only in segments retention deleted is still known, live, after
    a clean restart and after a crash."""
    cfg = JournalConfig(segment_bytes=2048, index_interval_bytes=256, fsync="never",
                        retention_bytes=5000)
    d = tmp_path / "s"
    j = Journal.open(d, cfg)
    early = j.append_batch([("k", b"early")], [("early-bird", 42)])[0]
    fill(j, 80)
    assert j.first_seq > early.sequence             # its record was deleted
    want = j.producers()
    assert want["early-bird"] == (42, early.sequence)
    c = crash_copy(d, tmp_path / "crash")
    j.close()
    for path in (d, c):
        with Journal.open(path, cfg) as j:
            assert j.producers() == want
    # a retention-deleted segment's snapshot goes with it: kept segments have one, and the
    # one at no segment start (close, or every snapshot_interval_bytes) is in the last segment
    with Journal.open(d, cfg) as j:
        firsts = j.segment_seqs()
        snaps = list_snapshots(d)
        assert set(snaps[1:]) <= set(firsts) and snaps[0] >= firsts[-1]


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage", "empty", "wrong name"])
def test_a_bad_snapshot_is_ignored(tmp_path, damage, caplog):
    """The newest snapshot damaged: the previous one is used (and the records after it); all
    damaged: the whole log is scanned. Same state either way."""
    d = tmp_path / "s"
    j = Journal.open(d, SMALL)
    fill(j, 60)
    want = j.producers()
    c = crash_copy(d, tmp_path / "c")
    j.close()
    snaps = list_snapshots(c)
    assert len(snaps) > 3

    def spoil(upto):
        p = snapshot_path(str(c), upto)
        data = open(p, "rb").read()
        if damage == "truncated":
            data = data[:len(data) // 2]
        elif damage == "flipped":
            data = data[:20] + bytes([data[20] ^ 1]) + data[21:]
        elif damage == "garbage":
            data = bytes(range(256)) * 3
        elif damage == "empty":
            data = b""
        else:                              # a valid snapshot under another segment's name
            data = open(snapshot_path(str(c), snaps[-1]), "rb").read()
        with open(p, "wb") as f:
            f.write(data)
    spoil(snaps[0])
    with caplog.at_level("WARNING", logger="zeps.journal"):
        with Journal.open(c, SMALL) as j:
            assert j.producers() == want
    assert "ignoring producer snapshot" in caplog.text
    assert snaps[0] not in list_snapshots(c)          # deleted
    for upto in list_snapshots(c):
        spoil(upto)
    with Journal.open(c, SMALL) as j:
        assert j.producers() == want


def test_a_snapshot_past_the_recovered_log_is_not_used(tmp_path):
    """fsync="never" and a machine crash: a snapshot can survive records it describes. Its
    state must not be used (it would claim pseqs the log no longer holds)."""
    d = tmp_path / "s"
    with Journal.open(d, SMALL) as j:
        recs = fill(j, 40)
    upto = list_snapshots(d)[0]
    # lose the tail: cut the log back to the middle of the last segment
    logs = sorted(n for n in os.listdir(d) if n.endswith(".log"))
    os.truncate(d / logs[-1], 0)
    with Journal.open(d, SMALL) as j:
        n = j.last_seq
        assert n < upto - 1
        assert j.producers() == model(recs[:n])
    assert upto not in list_snapshots(d)


def test_producers_beyond_the_limit_are_dropped_least_recently_used_first(tmp_path):
    cfg = JournalConfig(segment_bytes=1024, index_interval_bytes=256, fsync="never",
                        max_producers=3)
    d = tmp_path / "s"
    with Journal.open(d, cfg) as j:
        recs = []
        for i, pid in enumerate(["a", "b", "c", "a", "d", "e", "a", "f"] * 5):
            recs += j.append_batch([("k", b"x" * 60)], [(pid, i + 1)])
        want = j.producers()
        assert want == model(recs, 3) and list(want) == ["e", "a", "f"]
        c = crash_copy(d, tmp_path / "c")
    for path in (d, c):
        with Journal.open(path, cfg) as j:
            assert j.producers() == want
            assert list(j.producers()) == list(want)    # the same recency order


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(
    st.lists(st.one_of(st.none(), st.tuples(st.sampled_from(["a", "b", "ccc", "é"]),
                                            st.integers(1, (1 << 64) - 1))),
             min_size=1, max_size=6),
    st.sampled_from(["reopen", "crash"])), max_size=25),
    limit=st.integers(1, 5))
def test_state_always_matches_the_log(tmp_path_factory, ops, limit):
    """Any mix of batches, clean reopens and crashes (with rolls, snapshots, retention):
    producers() is always the model of the records written."""
    cfg = JournalConfig(segment_bytes=600, index_interval_bytes=128, fsync="never",
                        max_producers=limit, retention_bytes=2000)
    base = tmp_path_factory.mktemp("prop")
    d = base / "s"
    written = []
    j = Journal.open(d, cfg)
    k = 0
    for op in ops:
        if op == "reopen":
            j.close()
            j = Journal.open(d, cfg)
        elif op == "crash":
            k += 1
            c = crash_copy(d, base / f"c{k}")
            j.close()
            d = c
            j = Journal.open(d, cfg)
        else:
            written += j.append_batch([("k", b"b" * 50)] * len(op), op)
        assert j.producers() == model(written, limit)
    j.close()


def test_encode_batch_puts_the_extension_inside_the_crc():
    parts, recs = encode_batch([("k", b"v")], 9, 1234, 1 << 20, [("pid", 7)])
    data = b"".join(parts)
    length, crc, ts = HEADER.unpack_from(data)
    frame = encode_deliver(9, b"k", b"v")
    assert length == 0x80000000 | len(frame)
    ext = bytes([3]) + b"pid" + (7).to_bytes(8, "big")
    assert data[16:] == ext + frame and crc == google_crc32c.value(data[8:])
    assert recs[0].size == len(data) and (recs[0].producer, recs[0].pseq) == ("pid", 7)


# ---------------------------------------------------------------------------- issue 15: 4, 5, 6

def test_one_producer_is_looked_up_without_copying_the_table(tmp_path):
    """``producer(pid)`` is what the broker asks on each PRODUCER: one dictionary lookup, never
    a copy of the table (``producers()`` copies; a table of 10,000 ids made each PRODUCER cost
    a 10,000-entry copy, issue 15 finding 4)."""
    clock = iter(range(10**15, 10**16, 10))
    with Journal.open(tmp_path / "s", SMALL, clock=lambda: next(clock)) as j:
        j.append_batch([("k", b"v")] * 3, [("a", 1), ("b", 7), ("a", 2)])
        pseq, seq, ts, key = j.producer("a")
        assert (pseq, seq, key) == (2, 3) + (None,) and ts >= 10**15
        assert j.producer("b")[:2] == (7, 2)
        assert j.producer("nobody") is None
        # the copy is never made on the lookup path
        import zeps.journal.producers as mod
        calls = []
        real = mod.ProducerState.as_dict
        mod.ProducerState.as_dict = lambda self: calls.append(1) or real(self)
        try:
            j.producer("a")
        finally:
            mod.ProducerState.as_dict = real
        assert calls == []


def test_producers_older_than_the_max_age_are_forgotten(tmp_path):
    """Eviction by age as well as by count (Kafka's producer.id.expiration.ms): with the
    journal's clock injected, an id whose last record is older than ``producer_max_age_ms`` is
    not known to a lookup at once, and dropped at the next append; the rebuilt state after a
    restart is the same (the records' timestamps are the clock)."""
    now = [10**18]
    cfg = JournalConfig(segment_bytes=2048, index_interval_bytes=256, fsync="never",
                        producer_max_age_ms=1000)
    d = tmp_path / "s"
    j = Journal.open(d, cfg, clock=lambda: now[0])
    j.append_batch([("k", b"v")], [("old", 5)])
    now[0] += 600 * 10**6                                  # 600 ms later
    j.append_batch([("k", b"v")], [("young", 3)])
    assert j.producer("old")[0] == 5
    now[0] += 500 * 10**6                                  # old is 1.1 s old, young 0.5 s
    assert j.producer("old") is None, "too old for a lookup"
    assert j.producer("young")[0] == 3
    assert set(j.producers()) == {"old", "young"}, "a lookup drops nothing"
    j.append_batch([("k", b"v")])                          # no producer: nothing dropped yet
    j.append_batch([("k", b"v")], [("new", 1)])            # an append drops it
    assert list(j.producers()) == ["young", "new"]
    want = j.producers()
    c = crash_copy(d, tmp_path / "c")
    j.close()
    for path in (d, c):
        with Journal.open(path, cfg, clock=lambda: now[0]) as j2:
            assert j2.producers() == want
    with Journal.open(d, JournalConfig(segment_bytes=2048, producer_max_age_ms=None),
                      clock=lambda: now[0] + 10**15) as j3:
        assert j3.producer("young")[0] == 3, "no age limit: kept however old"


def test_a_binding_is_kept_in_the_snapshots_and_survives_appends(tmp_path):
    """``bind_producer`` ties a known id to a key (not one it does not know, and never a second
    key); appends keep it; a clean restart (the close snapshot) and a roll keep it."""
    d = tmp_path / "s"
    with Journal.open(d, SMALL) as j:
        j.bind_producer("a", "KEY-A")                      # not known yet: nothing
        j.append_batch([("k", b"v")], [("a", 1)])
        assert j.producer("a")[3] is None
        j.bind_producer("a", "KEY-A")
        j.bind_producer("a", "KEY-B")                      # bound already: unchanged
        j.append_batch([("k", b"v")], [("a", 2)])
        assert j.producer("a")[3] == "KEY-A"
        fill(j, 30)                                        # rolls (snapshots at each)
        assert j.producer("a")[3] == "KEY-A"
    with Journal.open(d, SMALL) as j:
        assert j.producer("a")[:1] + j.producer("a")[3:] == (2, "KEY-A")


def test_a_version_1_snapshot_is_still_read(tmp_path):
    """Snapshots written before timestamps and keys (``ZEPSPRD1``) load: the ids are known,
    unbound, and as old as the time they are loaded."""
    import struct
    body = struct.pack(">8sQI", b"ZEPSPRD1", 10, 2)
    for pid, pseq, seq in (("x", 4, 3), ("y", 9, 8)):
        body += bytes((len(pid),)) + pid.encode() + struct.pack(">QQ", pseq, seq)
    data = body + struct.pack(">I", google_crc32c.value(body))
    from zeps.journal.producers import ProducerState
    st = ProducerState.decode(data, 10, 100, max_age_ns=5, v1_ts=777)
    assert st.as_dict() == {"x": (4, 3), "y": (9, 8)}
    assert st.get("y") == (9, 8, 777, None)
    assert st.get("y", now_ns=782) is not None and st.get("y", now_ns=783) is None
    again = ProducerState.decode(st.encode(10), 10, 100)
    assert again.get("x") == (4, 3, 777, None)


@given(ops=st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 9), st.integers(0, 40), st.sampled_from("AB-")),
    st.tuples(st.just("forget"), st.integers(0, 9)),
    st.tuples(st.just("expire"), st.integers(0, 60)),
    st.tuples(st.just("reload"),)), max_size=60),
    limit=st.integers(1, 6))
@settings(max_examples=examples(200), deadline=None)
def test_the_ids_bound_to_each_key_follow_every_change_of_the_state(ops, limit):
    """``bound_to(key)`` (what the broker's per-key bound asks, O(1)) always counts the ids of
    the state bound to the key and names the least recently used of them, whatever was
    appended (and bound, as the broker binds an id after its first record, or by a client
    without a key), forgotten, dropped as least recently used or by age, or reloaded from a
    snapshot."""
    from zeps.journal.producers import ProducerState
    state = ProducerState(limit, max_age_ns=20)
    seq = ts = 0
    for op in ops:
        if op[0] == "append":
            seq += 1
            ts = max(ts, op[2])
            state.observe(f"p{op[1]}", seq, seq, ts)
            if op[3] != "-":
                state.bind(f"p{op[1]}", op[3])
        elif op[0] == "forget":
            state.forget(f"p{op[1]}")
        elif op[0] == "expire":
            state.expire(op[1])
        else:
            state = ProducerState.decode(state.encode(seq + 1), seq + 1, limit, 20)
        entries = list(state._d.items())
        for key in "AB":
            ids = [pid for pid, e in entries if e[3] == key]
            assert state.bound_to(key) == (len(ids), ids[0] if ids else None)
