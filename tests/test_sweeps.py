"""The timers' passes in slices (zeps/broker/sweeps.py), alone and in the broker core: expiry
and retention visit at most a slice of the sessions or open streams per round, and still visit
each of them once a period.

Hostile angle: a client fleet up to ``max_clients`` (or as many streams) must not make one
round's timers visit all of them at once: every message routed meanwhile waits for it.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.core_harness import Core, make_fixture  # noqa: F401 (fixture)
from zeps.broker.sweeps import Sweep
from zeps.broker.timers import COMPACTION_SLICE, EXPIRY_SLICE, RETENTION_SLICE
from zeps.protocol import commands as c
from zeps.protocol import encode
from .property_examples import examples


# ---------------------------------------------------------------------------- the sweep alone


def test_a_sweep_of_one_slice_is_a_plain_timer():
    sw = Sweep(period=1.0, size=10)
    items = list(range(10))
    assert sw.take(5.0, lambda: items) == items
    assert sw.next_at == 6.0 and sw.passes == 1
    assert sw.take(5.9, lambda: items) == []                 # not due
    assert sw.take(6.0, lambda: items) == items and sw.next_at == 7.0 and sw.passes == 2


def test_a_sweep_spreads_a_pass_over_its_period_in_slices():
    sw = Sweep(period=1.0, size=4)
    items = list(range(10))                                   # 3 slices, a third apart
    now, seen, times = 0.0, [], []
    for _ in range(3):
        part = sw.take(now, lambda: items)
        assert 0 < len(part) <= 4
        seen += part
        times.append(now)
        now = sw.next_at
    assert seen == items and sw.pending == 0 and sw.passes == 1
    assert times == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert now == pytest.approx(1.0)                          # the next pass: a period later


def test_a_pass_visits_what_was_there_when_it_started():
    sw = Sweep(period=1.0, size=2)
    items = ["a", "b", "c"]
    assert sw.take(0.0, lambda: items) == ["a", "b"]
    items.append("d")                                         # came during the pass
    assert sw.take(sw.next_at, lambda: items) == ["c"]
    assert sw.take(sw.next_at, lambda: items) == ["a", "b"]   # in the next pass
    assert sw.take(sw.next_at, lambda: items) == ["c", "d"]


def test_an_empty_pass_comes_back_a_period_later():
    sw = Sweep(period=2.0, size=3)
    assert sw.take(1.0, list) == [] and sw.next_at == 3.0 and sw.pending == 0


def test_a_slice_holds_at_least_one_item():
    with pytest.raises(ValueError):
        Sweep(1.0, 0)


@settings(max_examples=examples(200), deadline=None)
@given(n=st.integers(0, 300), size=st.integers(1, 50), period=st.floats(0.01, 100.0))
def test_each_pass_hands_every_item_once_within_its_period(n, size, period):
    sw = Sweep(period, size)
    items = list(range(n))
    now = 0.0
    for _ in range(2):
        start = now
        got = []
        while True:
            part = sw.take(now, lambda: items)
            assert len(part) <= size
            got += part
            now = sw.next_at
            if not sw.pending:
                break
        assert sorted(got) == items
        assert now - start == pytest.approx(period)           # the next pass is a period on


# ---------------------------------------------------------------------------- in the core

EXPIRY = 10.0


def attach_clients(h: Core, n: int, stream=lambda i: "s") -> list:
    """``n`` clients attached (to ``stream(i)``), their replies taken; their identities."""
    idents = [b"c%d" % i for i in range(n)]
    for i, ident in enumerate(idents):
        h.core.receive(ident, [encode(c.Attach(stream(i)))], h.now)
    h.open_streams()
    h.collect()
    for ident in idents:
        h.take(ident)
    return idents


def count_calls(h: Core, method: str) -> list:
    """Wrap ``method`` of every open stream's journal: the list it returns gets the stream's
    name at each call (the real method still runs)."""
    calls = []
    for name, stream in h.core.streams.items():
        real = getattr(stream.journal, method)

        def counted(*args, name=name, real=real):
            calls.append(name)
            return real(*args)
        setattr(stream.journal, method, counted)
    return calls


def assert_one_pass_in_slices(h: Core, calls: list, period: float, size: int) -> None:
    """Tick at each deadline for ``period`` from now: no tick adds more than ``size`` to
    ``calls`` (see :func:`count_calls`), and over the period each open stream is in it once."""
    start = h.now
    while h.now < start + period:
        mark = len(calls)
        h.tick()
        assert len(calls) - mark <= size, f"one round looked at {len(calls) - mark} streams"
        h.now = h.core.next_deadline()
    assert sorted(calls) == sorted(h.core.streams)


def test_expiry_visits_a_slice_of_the_sessions_per_round(make):
    """2.5 slices of silent clients: no round forgets more than a slice of them, and all are
    forgotten within the expiry and one check period."""
    h = make(expiry=EXPIRY, expiry_check=1.0, retention_check=1e9)
    n = EXPIRY_SLICE * 5 // 2
    idents = attach_clients(h, n)
    start = h.now
    h.now = start + EXPIRY + 0.001                    # all silent past the expiry
    forgotten, ticks = 0, 0
    while forgotten < n and h.now <= start + EXPIRY + 1.0 + 1e-9:
        before = len(h.core.sessions)
        h.tick()
        ticks += 1
        now_gone = before - len(h.core.sessions)
        assert now_gone <= EXPIRY_SLICE, f"one round forgot {now_gone} sessions"
        forgotten += now_gone
        h.now = max(h.now, h.core.next_deadline())
    assert forgotten == n, f"{n - forgotten} silent sessions left after a check period"
    assert ticks >= 3
    assert all(h.take(ident) == [c.Detach()] for ident in idents)


def test_a_session_gone_during_a_pass_is_not_told_twice(make):
    h = make(expiry=EXPIRY, expiry_check=1.0, retention_check=1e9)
    idents = attach_clients(h, EXPIRY_SLICE + 10)
    h.now += EXPIRY + 0.001
    h.tick()                                          # the first slice: a thousand forgotten
    rest = [i for i in idents if i in h.core.sessions]
    assert len(rest) == 10
    h.core.gone(rest[0])                              # its connection closed meanwhile
    h.now = h.core.next_deadline()
    h.tick()
    assert h.take(rest[0]) == [] and rest[0] not in h.core.sessions
    assert all(h.take(i) == [c.Detach()] for i in rest[1:])


def test_retention_visits_a_slice_of_the_streams_per_round(make):
    """Retention looks at no more than a slice of the open streams per round, and at each of
    them once a retention period."""
    h = make(retention_check=10.0, expiry=1e9)
    attach_clients(h, RETENTION_SLICE * 2 + 5, lambda i: f"s{i}")
    assert_one_pass_in_slices(h, count_calls(h, "apply_retention"), 10.0, RETENTION_SLICE)


def test_the_compaction_check_looks_at_a_slice_of_the_streams_per_round(make):
    """Compacted streams, none with a new sealed segment: the check looks at no more than a
    slice of them per round, and at each once a period."""
    h = make(compaction_check=30.0, retention_check=1e9, expiry=1e9)
    n = COMPACTION_SLICE * 2 + 5
    for i in range(n):
        h.send(b"c%d" % i, c.StreamCreateX(f"kv{i}", 0, 0, 0, 8192, c.FLAG_COMPACT, 60_000, 250),
               c.Attach(f"kv{i}"))
    assert len(h.core.streams) == n
    looked = count_calls(h, "segment_seqs")
    h.now += 30.0                                     # a pass is due
    assert_one_pass_in_slices(h, looked, 30.0, COMPACTION_SLICE)


def test_while_a_compaction_runs_the_check_still_moves_its_deadline(make):
    """A job under way passes the check's slices over; its deadline moves on all the same (a
    deadline left in the past would wake the shell's loop at once, over and over)."""
    h = make(compaction_check=30.0, retention_check=1e9, expiry=1e9, segment_bytes=8192)
    h.send(b"a", c.StreamCreateX("kv", 0, 0, 0, 8192, c.FLAG_COMPACT, 60_000, 250))
    for i in range(400):                              # several sealed segments
        h.publish(f"k{i % 10}", body=b"value %05d" % i, ident=b"pub", stream="kv")
    h.now += 30.0
    h.core.tick(h.now)                                # names the job; the shell runs it
    assert h.core.compacting is not None
    for _ in range(3):
        deadline = h.core.next_deadline()
        assert deadline > h.now
        h.now = deadline
        h.core.tick(h.now)
    assert h.core.compacting is not None              # never handed back: still under way
