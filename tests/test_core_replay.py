"""Replay from the journal in the broker core, driven in-process (tests/core_harness.py): a
retention gap, a corrupt record, and the cost of a replay, which follows the client's credit.
"""
from __future__ import annotations

import glob
import os

from tests.core_harness import Core, core_fixture, cost, make_fixture  # noqa: F401 (fixtures)
from zeps.protocol import commands as c

SUB = b"sub"


def test_a_retention_gap_during_replay_skips_to_the_first_kept_without_error(make):
    h = make(segment_bytes=200, retention_bytes=400, replay_batch_records=2)
    h.publish("k1", "k2", "k3")
    h.subscriber(SUB, latest=0, credit=cost("k1") + cost("k2"))
    h.drain()
    assert h.delivered(SUB) == [(1, "k1"), (2, "k2")]
    for i in range(4, 41):                           # one batch each: segments roll, old ones go
        h.publish(f"k{i}")
    first = h.core.streams["s"].journal.first_seq
    assert first > 3
    h.send(SUB, c.Credit(1 << 20))
    h.drain()
    assert h.take(SUB) == [c.Deliver(i, f"k{i}", b"x") for i in range(first, 41)]
    assert h.logged("replay_gap") == [{"stream": "s", "wanted": 3, "first_kept": first}]
    for latest in (0, 1):                            # from 1 (or 2): the first kept
        h.subscriber(b"new%d" % latest, latest=latest)
        h.drain()
        assert h.delivered(b"new%d" % latest)[0] == (first, f"k{first}")


def counting_reads(h: Core, stream: str = "s") -> list:
    """Wrap the real journal's ``read_batch``: the list gets how many records each call read."""
    journal = h.core.stream(stream).journal
    real = journal.read_batch
    reads = []

    def read_batch(seq, **kw):
        records = real(seq, **kw)
        reads.append(len(records))
        return records

    journal.read_batch = read_batch
    return reads


def test_replay_reads_in_proportion_to_the_credit(core):
    keys = [f"k{i:03d}" for i in range(1000)]
    core.publish(*keys)
    reads = counting_reads(core)
    core.send(SUB, c.Attach("s"), c.Subscribe("", 0))
    for _ in range(1000):                            # CREDIT 1, a thousand times
        core.send(SUB, c.Credit(1))
        core.round()
    got = core.delivered(SUB)
    assert got == [(i + 1, k) for i, k in enumerate(keys[:1000 // cost(keys[0])])]
    assert sum(reads) <= 3 * 1000, f"{sum(reads)} records read for 1000 tiny grants"
    reads.clear()
    core.subscriber(b"rich", latest=0)
    core.drain()
    assert len(core.delivered(b"rich")) == 1000
    assert sum(reads) == 1000, "plenty of credit: each record read once"


def test_a_corrupt_record_stops_that_replay_with_invalid_and_serves_the_rest(make):
    h = make(segment_bytes=400)
    for r in range(6):                               # one batch each: a batch is never split
        h.publish(*[f"k{r}.{i}" for i in range(5)], body=b"y" * 20)
    logs = sorted(glob.glob(os.path.join(h.datadir.stream_path("s"), "*.log")))
    assert len(logs) >= 3
    with open(logs[0], "r+b") as f:                  # rot one byte in the oldest segment
        f.seek(os.path.getsize(logs[0]) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    h.subscriber(SUB, latest=0)
    h.drain()
    got = h.take(SUB)
    good = [m.sequence for m in got[:-1]]
    assert good == list(range(1, len(good) + 1)) and len(good) < 30, "the good part, in order"
    assert got[-1].reason.startswith(f"cannot replay from sequence {len(good) + 1}: ")
    assert [kw["sequence"] for kw in h.logged("replay_failed")] == [len(good) + 1]
    h.subscriber(b"late", latest=25)
    h.drain()
    assert [s for s, _k in h.delivered(b"late")] == [26, 27, 28, 29, 30], "others are served"


def test_routing_matches_only_live_subscribers_and_one_back_from_history_is_served_again(core):
    """A subscriber out of credit leaves the live set routing visits (a thousand that never
    give credit must not cost every PUBLISH a visit each, issue 20); its CREDIT brings it back
    through replay, then live, with no gap and no duplicate. The harness's leftovers check the
    live set against the sessions after every step of the property tests."""
    h = core
    h.subscriber(SUB, credit=cost("k1"))
    for i in range(50):                              # never give credit
        h.send(b"idle%d" % i, c.Attach("s"), c.Subscribe("", c.LATEST_LIVE))
        h.take(b"idle%d" % i)
    st = h.core.streams["s"]
    assert len(st.live_set.ids) == 51
    h.publish("k1", "k2", "k3")
    assert h.delivered(SUB) == [(1, "k1")]
    assert st.live_set.ids == set()                      # all out of credit: historical
    assert not any(h.take(b"idle%d" % i) for i in range(50))
    h.send(SUB, c.Credit(cost("k2") * 10))
    h.drain()
    assert h.delivered(SUB) == [(2, "k2"), (3, "k3")]
    assert st.live_set.ids == {SUB}                      # caught up: live again, alone
    h.publish("k4")
    assert h.delivered(SUB) == [(4, "k4")]
    assert [x for x in h.leftovers(SUB) if "index" in x] == []


def test_a_subscriber_going_live_and_back_costs_no_index_work_whatever_its_patterns(
        core, monkeypatch):
    """Hostile: a client of many patterns that runs out of credit at every message and gives
    one message's credit back each time flips between live and historical at every PUBLISH.
    A flip is O(1) (the live set), never a walk of its patterns through an index."""
    from zeps.matching import SubscriptionIndex
    h = core
    patterns = [f"k{i:04d}" for i in range(300)] + [""]
    h.send(SUB, c.Attach("s"))
    for p in patterns:
        h.send(SUB, c.Subscribe(p, c.LATEST_LIVE))
    h.take(SUB)
    st = h.core.streams["s"]
    calls = []
    for name in ("add", "remove"):
        real = getattr(SubscriptionIndex, name)
        monkeypatch.setattr(SubscriptionIndex, name,
                            lambda self, *a, _real=real, _name=name: (calls.append(_name),
                                                                      _real(self, *a)))
    got = []
    for i in range(1, 21):
        h.publish(f"m{i}")                            # no credit: historical
        assert not st.sessions[SUB].live
        h.send(SUB, c.Credit(cost(f"m{i}")))
        h.drain()                                     # replayed, caught up: live again
        assert st.sessions[SUB].live
        got += h.delivered(SUB)
    assert got == [(i, f"m{i}") for i in range(1, 21)]
    assert calls == []


def test_the_live_set_is_compacted_as_it_empties():
    """An intersection walks the smaller set's table, which a set keeps as it empties: a live
    set that held many ids and holds few is copied compact, and holds the same ids."""
    from zeps.broker.liveset import LiveSet
    live = LiveSet()
    ids = [b"c%d" % i for i in range(1000)]
    for i in ids:
        live.add(i)
    first = live.ids
    for i in ids[1:]:
        live.discard(i)
    assert live.ids == {b"c0"}
    assert live.ids is not first                     # copied on the way down
    assert live._peak < 1000
    for i in ids[:10]:
        live.add(i)
    assert live.ids == set(ids[:10])
