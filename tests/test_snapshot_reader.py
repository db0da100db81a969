"""The snapshot reader's credit (zeps.clients.snapshot.SnapshotReader), pure: a model of the
broker's side sends each entry in key order once the credit it holds covers the entry's cost
(as ``zeps/broker/snapshots.py`` does) and waits otherwise. Whatever the entries' sizes up to
the broker's ``--max-message``, and whatever the reader's window, the snapshot ends: the broker
is never left waiting for credit while the reader has taken everything and waits for entries.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.clients.snapshot import SnapshotReader
from zeps.protocol import commands as c
from zeps.protocol import decode, encode
from zeps.protocol.consumer import DEAD_LETTER_HEADERS
from zeps.protocol.deliver import message_cost

from .property_examples import examples

MAX_CREDIT = 64 << 20


def run(window: int, max_message: int, sizes) -> SnapshotReader:
    """The reader against the model broker until SNAPSHOT-END or a stall (nothing to send,
    nothing to receive): returns the reader (``done`` says which). A size over
    ``max_message`` (by at most DEAD_LETTER_HEADERS) stands for a dead-lettered message, whose
    headers the broker added beyond the limit."""
    r = SnapshotReader("s", ("",), window)
    entries = [(f"k{i:05}".ljust(255, "k"), b"x" * n) for i, n in enumerate(sizes)]
    credit = 0
    seq = 0
    for cmd in (c.ReasonsSelectOk(), c.HeadersSelectOk(255, 65536), c.StreamExpectOk(),
                c.AttachOk(), c.LimitsOk(max_message, MAX_CREDIT)):
        r.receive(encode(cmd))
    while True:
        for frame in r.outgoing:                 # what the reader sent: its CREDITs count
            cmd = decode(frame)
            if isinstance(cmd, c.Credit):
                credit += cmd.credit
        r.outgoing.clear()
        sent = False
        while entries and credit >= message_cost(*entries[0]):
            key, body = entries.pop(0)
            credit -= message_cost(key, body)
            seq += 1
            r.receive(encode(c.SnapshotEntry(0, seq, key, body)))
            sent = True
        if not entries and not r.done:
            r.receive(encode(c.SnapshotEnd(seq, seq)))
        got = r.take()
        if r.done or not (sent or got or r.outgoing):
            return r


def test_an_entry_of_half_the_window_then_a_largest_one_does_not_stall():
    """The front end's window (max_value + 65 KiB) and two values under the limit: the first
    used less than half the window, so no credit went back, and the broker held less than the
    second cost."""
    max_message = 1 << 20
    r = run(max_message + (64 << 10) + 1024, max_message, [540_000, 1_000_000])
    assert r.done and r.count == 2


def test_a_dead_lettered_entry_over_the_limit_by_its_headers_does_not_stall():
    """The front end's window, an entry that leaves just over the largest publish's cost in
    the broker, then a dead-lettered one: the broker added its headers beyond the limit."""
    max_message = 1 << 20
    r = run(max_message + (64 << 10) + 1024, max_message, [65_736, max_message + 400])
    assert r.done and r.count == 2


def test_a_window_smaller_than_the_largest_entry_grows():
    r = run(4 << 20, 8 << 20, [5_000_000, 8 << 20, 10])
    assert r.done and r.count == 3 and r.window >= 2 * (8 << 20)


@given(window=st.integers(1 << 16, 8 << 20), max_message=st.integers(1, 4 << 20),
       data=st.data())
@settings(max_examples=examples(200), deadline=None)
def test_no_sizes_stall_a_snapshot(window, max_message, data):
    sizes = data.draw(st.lists(st.integers(0, max_message + DEAD_LETTER_HEADERS), min_size=1,
                               max_size=12))
    r = run(window, max_message, sizes)
    assert r.done and r.count == len(sizes)


def test_the_headers_a_dead_letter_adds_are_within_their_bound():
    """What ``consuming._dead_letter`` adds at most: a 255-byte stream name, a consumer name of
    MAX_CONSUMER_NAME, two 20-digit numbers, and the block's head."""
    from zeps.protocol.consumer import MAX_CONSUMER_NAME
    from zeps.protocol.headers import encode_block
    most = encode_block([("zeps-stream", b"s" * 255), ("zeps-consumer", b"c" * MAX_CONSUMER_NAME),
                         ("zeps-sequence", b"9" * 20), ("zeps-deliveries", b"9" * 20)])
    assert len(most) <= DEAD_LETTER_HEADERS


def test_a_broker_sending_beyond_the_credit_fails_the_snapshot():
    """A broker that ignores the reader's credit (a lying one: an honest broker sends an entry
    only when the credit it holds covers it) fails the snapshot at the first entry beyond it,
    as a subscriber's peering is dropped: what the reader holds is bounded by its window, not
    by what the broker pushes while the application iterates slowly (every entry was
    buffered, and the read loop of ``SnapshotIterator`` took all that came)."""
    window = 1 << 20
    r = SnapshotReader("s", ("",), window)
    for cmd in (c.ReasonsSelectOk(), c.HeadersSelectOk(255, 65536), c.StreamExpectOk(),
                c.AttachOk(), c.LimitsOk(64 << 10, MAX_CREDIT)):
        r.receive(encode(cmd))
    body = b"x" * (64 << 10)
    for seq in range(1, 41):                     # 2.5 MiB, none taken: the broker holds 1 MiB
        r.receive(encode(c.SnapshotEntry(0, seq, f"k{seq:03}", body)))
        if r.error is not None:
            break
    assert r.error is not None and "credit" in str(r.error), r.error
    assert sum(len(m.body) for m in r.buffered) <= window
    assert r.finished is False                   # the entries before it can still be taken
    r.take()
    assert r.finished
