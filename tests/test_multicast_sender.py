"""The bridge's pure core (zeps/multicast/sender.py): packing, chaining, numbering, HEADs, REFs."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zeps.multicast import datagram as dg
from zeps.multicast.sender import DEFAULT_DATAGRAM, Sender


def sender(**kw):
    args = {"session": 42, "start_after": 0, "now": 0.0}
    args.update(kw)
    return Sender("s", "", **args)


def run(s, messages):
    """Feed (seq, key, body) messages, flush; return the decoded DATA datagrams and raw sizes."""
    raw = []
    for seq, key, body in messages:
        raw += s.add(seq, key, body, 1000 + seq)
    last = s.flush()
    raw += [last] if last is not None else []
    return [dg.decode(d) for d in raw], [len(d) for d in raw]


def test_default_fits_a_1500_byte_mtu():
    assert DEFAULT_DATAGRAM == 1500 - 20 - 8


def test_packs_up_to_the_size_and_chains_every_message():
    s = sender(start_after=10)
    msgs = [(seq, f"k{seq}", b"x" * 100) for seq in range(11, 111, 2)]   # pattern gaps
    decoded, sizes = run(s, msgs)
    assert max(sizes) <= DEFAULT_DATAGRAM
    assert len(decoded) > 1 and all(len(d.entries) > 5 for d in decoded[:-1])
    entries = [e for d in decoded for e in d.entries]
    assert [(e.sequence, e.key, e.body, e.timestamp) for e in entries] == [
        (seq, key, body, 1000 + seq) for seq, key, body in msgs]
    assert [e.after for e in entries] == [10] + [e.sequence for e in entries[:-1]]
    assert [d.number for d in decoded] == list(range(1, len(decoded) + 1))
    assert {(d.session, d.stream, d.pattern) for d in decoded} == {(42, "s", "")}
    assert s.head == 109 and s.messages == 50 and s.datagrams == len(decoded)


def test_a_message_too_large_goes_out_as_a_ref():
    s = sender(max_datagram=200)
    decoded, sizes = run(s, [(1, "a", b"small"), (2, "b", b"x" * 500), (3, "c", b"small")])
    entries = [e for d in decoded for e in d.entries]
    assert entries == [dg.Entry(1, 0, 1001, "a", b"small"), dg.Entry(2, 1, ref=True),
                       dg.Entry(3, 2, 1003, "c", b"small")]
    assert s.refs == 1 and s.messages == 2 and max(sizes) <= 200


def test_the_largest_message_that_fits_is_carried():
    limit = 300
    fits = limit - dg.header_size("s", "") - dg.entry_size(1, 0)
    s = sender(max_datagram=limit)
    decoded, sizes = run(s, [(1, "k", b"y" * fits), (2, "k", b"y" * (fits + 1))])
    assert sizes[0] == limit and not decoded[0].entries[0].ref
    assert decoded[1].entries[0].ref


def test_heads_at_start_then_every_interval_busy_or_idle_after_the_data():
    s = sender(start_after=5, head_interval=1.0, now=100.0)
    first = s.tick(100.0)
    assert [dg.decode(d) for d in first] == [dg.Head(42, 1, "s", "", 5, 1000)]
    assert s.tick(100.5) == [] and s.next_deadline() == 101.0
    assert s.add(6, "k", b"v", None) == []                    # waiting in a partial datagram
    out = [dg.decode(d) for d in s.tick(101.0)]
    assert isinstance(out[0], dg.Data) and out[0].entries[0].sequence == 6
    assert out[1] == dg.Head(42, 3, "s", "", 6, 1000)          # after the data it announces
    assert [dg.decode(d) for d in s.tick(102.5)] == [dg.Head(42, 4, "s", "", 6, 1000)]  # idle


def test_old_sequences_are_ignored():
    s = sender(start_after=5)
    assert s.add(5, "k", b"", 0) == [] and s.add(3, "k", b"", 0) == []
    assert s.flush() is None and s.head == 5


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="datagram size must be from"):
        sender(max_datagram=30)
    with pytest.raises(ValueError, match="to 65507 bytes"):
        sender(max_datagram=70000)
    with pytest.raises(ValueError, match="head interval"):
        sender(head_interval=0)


@given(st.lists(st.tuples(st.integers(1, 5), st.text(max_size=10), st.integers(0, 3000)),
                max_size=60), st.integers(60, 2000))
def test_every_datagram_fits_and_decodes_to_the_input(spec, limit):
    s = sender(max_datagram=limit)
    msgs, seq = [], 0
    for step, key, size in spec:
        seq += step
        msgs.append((seq, key, bytes(size)))
    decoded, sizes = run(s, msgs)
    assert all(n <= limit for n in sizes)
    entries = [e for d in decoded for e in d.entries]
    assert [e.sequence for e in entries] == [m[0] for m in msgs]
    for e, (_, key, body) in zip(entries, msgs):
        assert e.ref or (e.key, e.body) == (key, body)
        assert e.ref == (dg.header_size("s", "") + dg.entry_size(len(key.encode()), len(body))
                         > limit)
