"""DELIVER-BATCH runs in the broker (zeps/broker/batching.py ``Runs``), pure: the frames built
from slices of the records, and shared by the subscribers whose runs are the same, are the bytes
the earlier implementation built from a copy of each subscriber's entries (kept below as the
reference), in the same order."""
from __future__ import annotations

from typing import Dict, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.broker.batching import ENTRY_OFFSET, MAX_RUN_BYTES, Runs
from zeps.protocol.batch import DELIVER_HEAD_SIZE, deliver_batch_head
from zeps.protocol.deliver import encode_deliver, sequence_of
from .property_examples import examples

SUBS = (b"s1", b"s2", b"s3")


class ReferenceRuns:
    """The runs as built before the frames were shared (each entry copied per subscriber)."""

    def __init__(self, outbox):
        self.outbox = outbox
        self.open: Dict[bytes, list] = {}       # ident -> [ts, first, next, parts, count, size, whole]

    def _run_for(self, ident: bytes, ts: int, seq: int) -> list:
        run = self.open.get(ident)
        if run is not None and (run[2] != seq or run[0] != ts or run[5] >= MAX_RUN_BYTES):
            self.close(ident)
            run = None
        if run is None:
            run = self.open[ident] = [ts, seq, seq, [], 0, 0, None]
        return run

    def add_frame(self, ident: bytes, ts: int, frame: bytes) -> None:
        seq = sequence_of(frame)
        run = self._run_for(ident, ts, seq)
        entry = frame[ENTRY_OFFSET:]
        run[3].append(entry)
        run[6] = None
        run[4] += 1
        run[5] += len(entry)
        run[2] = seq + 1

    def add_entries(self, ident: bytes, ts: int, seq: int, count: int, entries: bytes,
                    whole: Optional[bytes] = None) -> None:
        run = self._run_for(ident, ts, seq)
        run[6] = whole if run[4] == 0 else None
        run[3].append(entries)
        run[4] += count
        run[5] += len(entries)
        run[2] = seq + count

    def close(self, ident: bytes) -> None:
        run = self.open.pop(ident, None)
        if run is None:
            return
        if run[6] is not None:
            self.outbox.append((ident, run[6]))
        else:
            self.outbox.append((ident, deliver_batch_head(run[0], run[1], run[4])
                                + b"".join(run[3])))

    def close_all(self) -> None:
        for ident in list(self.open):
            self.close(ident)


def batch_record(seq: int, ts: int, messages):
    """A stored DELIVER-BATCH frame of ``messages`` from ``seq``, and its entries' offsets."""
    entries = [encode_deliver(seq + i, k.encode(), b)[ENTRY_OFFSET:]
               for i, (k, b) in enumerate(messages)]
    offsets = [DELIVER_HEAD_SIZE]
    for e in entries:
        offsets.append(offsets[-1] + len(e))
    return deliver_batch_head(ts, seq, len(entries)) + b"".join(entries), offsets


message = st.tuples(st.sampled_from(["a", "bb", "key.c"]), st.binary(max_size=12))
record = st.one_of(st.tuples(st.just("plain"), message),
                   st.tuples(st.just("batch"), st.lists(message, min_size=1, max_size=5)))
# per record and subscriber: what it takes (None: nothing; else entries i..j of the record),
# and whether its run is closed after that record (as routing does when it drops to historical)
choice = st.tuples(st.one_of(st.none(), st.tuples(st.integers(0, 4), st.integers(1, 5))),
                   st.booleans())


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(record, st.sampled_from([7, 8]),
                          st.lists(choice, min_size=len(SUBS), max_size=len(SUBS)),
                          st.booleans()),
                max_size=8))
def test_the_frames_are_the_reference_frames_in_the_same_order(steps):
    new_out, old_out = [], []
    new, old = Runs(new_out), ReferenceRuns(old_out)
    seq = 1
    for (kind, payload), ts, choices, mirror in steps:
        if mirror:          # the second subscriber takes what the first does: runs to share
            choices = [choices[0], choices[0]] + choices[2:]
        if kind == "plain":
            frame = encode_deliver(seq, payload[0].encode(), payload[1])
            count = 1
        else:
            frame, offsets = batch_record(seq, ts, payload)
            count = len(payload)
        for ident, (take, close) in zip(SUBS, choices):
            if take is not None:
                if kind == "plain":
                    new.add_frame(ident, ts, frame)
                    old.add_frame(ident, ts, frame)
                else:
                    i = min(take[0], count - 1)
                    j = max(i + 1, min(take[1], count))
                    whole = frame if (i, j) == (0, count) else None
                    new.add_entries(ident, ts, seq + i, j - i, frame, offsets[i], offsets[j],
                                    whole)
                    old.add_entries(ident, ts, seq + i, j - i, frame[offsets[i]:offsets[j]],
                                    whole)
            if close:
                new.close(ident)
                old.close(ident)
        seq += count
    new.close_all()
    old.close_all()
    assert new_out == old_out
    assert all(type(f) is bytes for _, f in new_out)


def test_subscribers_of_the_same_records_share_one_frame_built_once():
    out = []
    runs = Runs(out)
    records = []
    seq = 1
    for keys in (["a", "b"], ["c"], ["d", "e", "f"]):
        frame, offsets = batch_record(seq, 9, [(k, b"x") for k in keys])
        records.append((seq, len(keys), frame, offsets))
        seq += len(keys)
    for ident in SUBS:
        for first, n, frame, _ in records:
            runs.add_entries(ident, 9, first, n, frame, DELIVER_HEAD_SIZE, len(frame), frame)
    # a fourth subscriber takes only part of the second record's neighbours: its own frame
    first, n, frame, offsets = records[2]
    runs.add_entries(b"s4", 9, first + 1, 2, frame, offsets[1], offsets[3])
    runs.close_all()
    frames = dict(out)
    expected = deliver_batch_head(9, 1, 6) + b"".join(f[DELIVER_HEAD_SIZE:]
                                                        for _, _, f, _ in records)
    assert frames[b"s1"] == expected
    assert frames[b"s1"] is frames[b"s2"] is frames[b"s3"]       # built once, shared
    assert frames[b"s4"] == deliver_batch_head(9, 5, 2) + frame[offsets[1]:offsets[3]]


def test_a_run_of_one_whole_record_is_the_stored_frame_itself():
    out: List[tuple] = []
    runs = Runs(out)
    frame, _ = batch_record(1, 9, [("a", b"x"), ("b", b"y")])
    for ident in SUBS:
        runs.add_entries(ident, 9, 1, 2, frame, DELIVER_HEAD_SIZE, len(frame), frame)
    runs.close_all()
    assert all(f is frame for _, f in out) and len(out) == len(SUBS)


def test_a_long_part_alone_is_copied_once_into_the_same_bytes():
    out: List[tuple] = []
    runs = Runs(out)
    frame, offsets = batch_record(1, 9, [("a", b"x"), ("b", bytes(range(256)) * 20),
                                         ("c", b"z")])
    runs.add_entries(SUBS[0], 9, 2, 1, frame, offsets[1], offsets[2])      # 5 KiB, alone
    runs.add_entries(SUBS[1], 9, 2, 2, frame, offsets[1], offsets[3])
    runs.close_all()
    assert out == [(SUBS[0], deliver_batch_head(9, 2, 1) + frame[offsets[1]:offsets[2]]),
                   (SUBS[1], deliver_batch_head(9, 2, 2) + frame[offsets[1]:offsets[3]])]
    assert all(type(f) is bytes for _, f in out)
