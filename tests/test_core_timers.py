"""The broker core's timers, driven in-process with an explicit clock (tests/core_harness.py):
``tick(now)`` runs expiry and retention on their schedule and names the journals to fsync
(``fsync=interval``: the streams with unsynced records, once per interval); ``next_deadline()``
tells the shell when to wake.
"""
from __future__ import annotations

import os

import pytest

from tests.core_harness import Core, make_fixture  # noqa: F401 (fixtures)
from zeps.protocol import commands as c

INTERVAL = 0.05


def streams_to_sync(h: Core) -> list:
    return sorted(st.name for st in h.tick())


def test_tick_names_the_streams_with_unsynced_records_once_per_interval(make):
    h = make(fsync="interval", fsync_interval=INTERVAL, expiry_check=1e9, retention_check=1e9)
    assert streams_to_sync(h) == []
    h.publish("k1", stream="s", ident=b"ps")
    h.send(b"pt", c.Attach("t"))                     # open, nothing written
    h.now += INTERVAL
    assert streams_to_sync(h) == ["s"]
    assert streams_to_sync(h) == [], "twice in one interval"
    h.publish("k1", stream="t", ident=b"pt")
    h.now += INTERVAL - 0.001
    assert streams_to_sync(h) == []
    h.now += 0.001
    assert streams_to_sync(h) == ["s", "t"], "s was not synced: it is named again"
    h.sync_and_confirm(h.core.streams.values())
    h.now += INTERVAL
    assert streams_to_sync(h) == [], "nothing unsynced"


@pytest.mark.parametrize("fsync", ["never", "always"])
def test_tick_names_nothing_to_sync_unless_the_policy_is_interval(make, fsync):
    h = make(fsync=fsync)
    h.publish("k1")
    for _ in range(3):
        assert h.tick() == []
        h.now += 1.0


def test_next_deadline_is_the_soonest_timer(make):
    h = make(fsync="interval", fsync_interval=INTERVAL, expiry_check=1.0, retention_check=10.0,
             congestion_backoff=0.01)
    assert h.core.next_deadline() == float("-inf"), "a fresh core: every timer is due"
    h.tick()
    assert h.core.next_deadline() == h.now + INTERVAL
    h.subscriber(b"x")
    h.pipe[b"x"] = 0
    h.publish("k1")                                  # its DELIVER does not fit: congested
    assert h.core.next_deadline() == h.now + 0.01
    quiet = make(fsync="never", expiry_check=1.0, retention_check=10.0)
    quiet.tick()
    assert quiet.core.next_deadline() == quiet.now + 1.0
    quiet.now += 1.0
    quiet.tick()                                     # expiry ran; retention is still 9 s away
    assert quiet.core.next_deadline() == quiet.now + 1.0


def count_retention_passes(h: Core, stream: str) -> list:
    """Wrap the real journal's ``apply_retention``; the list gets one entry per call."""
    journal = h.core.streams[stream].journal
    real = journal.apply_retention
    calls = []

    def apply_retention(*args, **kw):
        calls.append(h.now)
        return real(*args, **kw)

    journal.apply_retention = apply_retention
    return calls


def test_retention_runs_on_its_schedule_for_every_stream(make):
    h = make(retention_check=10.0, expiry_check=1.0, retention_bytes=1 << 20)
    h.publish("k1", stream="a", ident=b"pa")
    h.publish("k1", stream="b", ident=b"pb")
    passes = {name: count_retention_passes(h, name) for name in ("a", "b")}
    start = h.now
    for t in (0.0, 1.0, 9.9, 10.0, 15.0, 20.5):
        h.now = start + t
        h.tick()
    want = [start + 10.0, start + 20.5]     # the pass due at start ran in the publishes' round
    assert passes == {"a": want, "b": want}


def test_the_sync_timer_and_confirm_visit_only_the_streams_with_work(make, monkeypatch):
    """With many streams open and idle, the group fsync's timer looks only at the streams
    appended to since they were durable, and CONFIRM only at those whose publishers wait
    (worklists.py; issue 20: 1,000 idle streams cost each sync tick 0.3 ms); a deleted stream
    leaves both lists."""
    from zeps.broker.stream import Stream
    from zeps.journal.view import StreamView
    h = make(fsync="interval", fsync_interval=INTERVAL, expiry_check=1e9, retention_check=1e9)
    assert h.tick() == []                            # the first tick: nothing written yet
    for i in range(30):
        h.send(b"idle%d" % i, c.Attach(f"idle{i}"))
    h.send(b"pub", c.Attach("s"), c.ConfirmSelect())
    h.publish("k1", stream="s", ident=b"pub")
    h.publish("k1", stream="gone", ident=b"pg")
    looked, confirmed = [], []
    last_seq = StreamView.last_seq

    def spy_last_seq(journal):
        looked.append(os.path.basename(journal._dir))
        return last_seq.fget(journal)
    real_confirm = Stream.confirm

    def spy_confirm(st):
        confirmed.append(st.name)
        return real_confirm(st)
    monkeypatch.setattr(StreamView, "last_seq", property(spy_last_seq))
    monkeypatch.setattr(Stream, "confirm", spy_confirm)
    h.send(b"admin", c.StreamDelete("gone"))
    h.now += INTERVAL
    due = h.tick()
    assert [st.name for st in due] == ["s"]
    assert len(looked) == 1, looked
    h.sync_and_confirm(due)
    assert confirmed == ["s"]
    assert [m for m in h.take(b"pub") if isinstance(m, c.Confirm)] == [c.Confirm(1, 1)]
    looked.clear()
    h.now += INTERVAL
    assert h.tick() == [] and looked == ["s"], "found durable: it leaves the list"
    h.now += INTERVAL
    assert h.tick() == [] and looked == ["s"], "a durable stream is not looked at again"


def _eio(fd):
    raise OSError(5, "Input/output error")


def test_a_failed_sync_is_not_tried_again_and_what_it_left_waits_for_nothing(make, monkeypatch):
    """A stream's sync failed (final for its opening: zeps/journal/durability.py). It is not
    synced again at each interval (each failed at once and logged fsync_failed again, 20 lines
    a second, until a restart), and a producer's retry of the record the sync left not durable,
    confirmed at that record's sequence, is refused at once (it waited for the next failing
    sync: a sync it never got, once the stream is not synced again); found by review."""
    h = make(fsync="interval")
    p, q = b"p", b"q"
    h.send(p, c.Attach("s"), c.ConfirmSelect(), c.Producer("app", 1), c.Publish("k", b"one"))
    h.round()
    st = h.core.streams["s"]
    assert h.to_sync == [st]
    with monkeypatch.context() as m:                    # the shell's sync greenlet
        m.setattr(os, "fdatasync", _eio)
        with pytest.raises(Exception) as failed:
            st.journal.sync()
    h.core.sync_failed(st, failed.value)
    h.to_sync = []
    h.collect()
    assert "journal sync failed" in h.take(p)[-1].reason
    h.send(q, c.Attach("s"), c.ConfirmSelect(), c.Producer("app", 1))
    assert h.take(q)[-1] == c.ProducerOk(1), "the record is in the journal, not durable"
    h.send(q, c.Publish("k", b"one"))                  # a retry: a duplicate of it
    h.round()
    [refused] = h.take(q)
    assert "journal sync failed" in refused.reason, refused
    assert not st.confirming and h.to_sync == []
    for _ in range(3):
        h.now += h.core.config.fsync_interval
        h.round()
        assert h.to_sync == [], "not synced again"
    assert len(h.logged("fsync_failed")) == 1
