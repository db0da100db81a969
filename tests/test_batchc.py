"""The optional C loops (``zeps.protocol._batchc``, issue 20) against their pure-Python
definitions: for any input, valid or not, the same result or the same reason.

- ``walk``: entries laid out validly, then cut, padded, with a forged length or a key that is
  not UTF-8, over ``bytes``, ``bytearray`` and ``memoryview``, from any start: the same offsets
  or the same :class:`BadEntries` text as :func:`zeps.protocol.batch.walk_py`.
- ``build_rows``: the same :class:`Message` objects as ``build_messages_py`` (keys that are not
  UTF-8 included: U+FFFD as ``decode("utf-8", "replace")``), equal, hashed and pickled alike.
- ``key_body_columns``: the columns of ``MessageBatch`` built in Python.
- offsets that are not a frame's (a caller's bug) give ValueError, never a crash; offsets that
  Python code run by the garbage collector shortens midway are not read past.
- ``ZEPS_PURE_PYTHON=1`` makes zeps use the Python loops (a fresh interpreter says so).

The C module is built by ``setup.py`` wherever there is a C compiler; these tests skip only on
a machine without one (then zeps runs on the Python loops, which every other test exercises).
"""
from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zeps.clients.message import Message, build_messages_py
from zeps.protocol import batch as B
from zeps.protocol.headers import NO_HEADERS
from . import compiled
from .property_examples import examples

batchc = compiled.batchc()      # the module itself, also under ZEPS_PURE_PYTHON=1

keys_st = st.one_of(st.text(max_size=20).map(lambda t: t.encode()[:255]),
                    st.binary(max_size=12))          # binary keys: some are not UTF-8
entries_st = st.lists(st.tuples(keys_st, st.binary(max_size=40)), min_size=1, max_size=30)


def _entries(items) -> bytes:
    return b"".join(bytes((len(k),)) + k + len(b).to_bytes(4, "big") + b for k, b in items)


def _both(fn_c, fn_py, *args):
    """(("ok", result) or ("err", reason)) of each."""
    out = []
    for f in (fn_c, fn_py):
        try:
            out.append(("ok", f(*args)))
        except B.BadEntries as e:
            out.append(("err", str(e)))
    return out


def _c_walk(buf, start, end, count, check_keys):
    try:
        return batchc.walk(buf, start, end, count, check_keys)
    except ValueError as e:
        raise B.BadEntries(str(e)) from None


@settings(max_examples=examples(400), deadline=None)
@given(entries_st, st.binary(max_size=9), st.binary(max_size=9), st.integers(-3, 3),
       st.booleans(), st.sampled_from(["bytes", "bytearray", "memoryview"]),
       st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255))))
def test_walk_gives_the_offsets_or_the_reason_of_the_python_walk(items, before, after, dcount,
                                                                 check_keys, kind, damage):
    body = bytearray(_entries(items))
    if damage is not None:                                    # one byte changed anywhere
        pos, val = damage
        body[pos % len(body)] = val
    buf = bytes(before) + bytes(body) + bytes(after)
    start, end = len(before), len(before) + len(body)
    count = max(1, len(items) + dcount)
    buf = {"bytes": buf, "bytearray": bytearray(buf), "memoryview": memoryview(buf)}[kind]
    if count * B.MIN_ENTRY > end - start:
        return                                   # refused by walk() before either loop runs
    c, py = _both(_c_walk, B.walk_py, buf, start, end, count, check_keys)
    assert c == py


@settings(max_examples=examples(200), deadline=None)
@given(entries_st)
def test_walk_is_the_dispatcher_over_the_c_loop(items):
    ent = _entries(items)
    for check in (False, True):
        assert _both(B.walk, B.walk_py, ent, 0, len(ent), len(items), check)[0] == \
            _both(B.walk_py, B.walk_py, ent, 0, len(ent), len(items), check)[0]


def test_a_key_that_is_not_utf8_is_named_as_the_python_walk_names_it():
    ent = _entries([(b"ok", b"1"), (b"\xff\xfe", b"2"), (b"\xc3", b"3")])
    with pytest.raises(B.BadEntries, match="the key of entry 1 is not valid UTF-8"):
        B.walk(ent, 0, len(ent), 3)
    assert B.walk(ent, 0, len(ent), 3, check_keys=False) == B.walk_py(ent, 0, len(ent), 3, False)


@settings(max_examples=examples(300), deadline=None)
@given(entries_st, st.integers(0, 2**64 - 1) | st.integers(2**64 - 8, 2**64 + 8)
       | st.integers(-(2**70), 2**70), st.one_of(st.none(), st.integers(0, 2**63)),
       st.one_of(st.none(), st.text(max_size=8)), st.integers(0, 7))
@example([(b"k", b"1"), (b"l", b"2")], 2**63, None, None, 0)        # past int64: was OverflowError
@example([(b"k", b"1"), (b"l", b"2"), (b"m", b"")], 2**64 - 2, None, None, 0)   # first + i past u64
@example([(b"k", b"1"), (b"l", b"2")], 2**64 + 3, None, None, 0)    # the rest of a batch cut there
@example([(b"k", b"1"), (b"l", b"2")], -3, None, None, 0)
def test_build_rows_builds_the_messages_build_messages_py_builds(items, first, ts, stream, pad):
    """Any first sequence: the wire's u64 (before, the C loop took a signed one and raised
    OverflowError from 2**63), first + i past 2**64 - 1, and any other int (the rest of a batch
    cut past the last u64, MessageBatch.cut), each the Python int build_messages_py gives."""
    frame = bytes(pad) + _entries(items)
    offs = B.walk_py(frame, pad, len(frame), len(items), False)
    got = batchc.build_rows(Message, frame, offs, first, ts, stream, NO_HEADERS)
    want = build_messages_py(frame, offs, first, ts, stream)
    assert got == want
    assert all(type(m) is Message for m in got)
    assert [hash(m) for m in got] == [hash(m) for m in want]
    assert pickle.loads(pickle.dumps(got)) == want
    assert [(m.sequence, m.key, m.body, m.timestamp, m.stream, m.headers) for m in got] == \
        [(first + i, k.decode("utf-8", "replace"), b, ts, stream, NO_HEADERS)
         for i, (k, b) in enumerate(items)]


def test_a_batch_cut_past_the_last_u64_sequence_gives_the_rest_its_sequences():
    """A DELIVER-BATCH whose first sequence is 2**64 - 1 and that holds three entries (a broker
    that lies), cut after its first message as Peering.take cuts a batch at a credit top-up: the
    rest starts at 2**64, which the C loop refused with OverflowError (found by review)."""
    from zeps.clients.message import MessageBatch
    frame = _entries([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    offs = B.walk_py(frame, 0, len(frame), 3, False)
    head, _cost, rest = MessageBatch.from_frame(frame, offs, 2**64 - 1, None, None).cut(0, 1, 1)
    assert [m.sequence for m in head] == [2**64 - 1]
    assert [(m.sequence, m.key) for m in rest.messages] == [(2**64, "b"), (2**64 + 1, "c")]


@settings(max_examples=examples(200), deadline=None)
@given(entries_st)
def test_key_body_columns_are_the_columns_built_in_python(items):
    frame = _entries(items)
    offs = B.walk_py(frame, 0, len(frame), len(items), False)
    keys, bodies = batchc.key_body_columns(frame, offs)
    assert keys == [k.decode("utf-8", "replace") for k, _ in items]
    assert bodies == [b for _, b in items]


@pytest.mark.parametrize("offsets", [[], [0, 10**6], [5, 0], [-1, 3], [0, 2], ["x", 4]])
def test_offsets_that_are_not_the_frames_are_refused_not_read(offsets):
    frame = _entries([(b"k", b"body")])
    with pytest.raises((ValueError, TypeError)):
        batchc.build_rows(Message, frame, offsets, 1, None, None, NO_HEADERS)
    with pytest.raises((ValueError, TypeError)):
        batchc.key_body_columns(frame, offsets)


def test_build_rows_takes_first_as_an_int_only():
    """An int subclass's ``__add__`` ran inside the C loop, over the borrowed offsets: one
    that emptied them made the loop read freed memory (a segfault)."""
    items = [(b"k%d" % i, b"v" * 10) for i in range(200)]
    frame = _entries(items)
    offsets = B.walk(frame, 0, len(frame), len(items))

    class Evil(int):
        def __add__(self, other):
            offsets.clear()
            return 0

    with pytest.raises(TypeError):
        batchc.build_rows(Message, frame, offsets, Evil(-1), None, None, NO_HEADERS)
    assert len(batchc.build_rows(Message, frame, offsets, -1, None, None, NO_HEADERS)) == 200


def test_build_rows_takes_only_a_tuple_subclass_without_fields():
    frame = _entries([(b"k", b"body")])

    class WithDict(tuple):
        pass

    for cls in (list, WithDict, int):
        with pytest.raises(TypeError):
            batchc.build_rows(cls, frame, [0, len(frame)], 1, None, None, NO_HEADERS)


def test_zeps_pure_python_makes_zeps_use_the_python_loops():
    code = ("from zeps.protocol import speedups, batch; "
            "print(speedups.C_LOOPS, batch._c_walk is None)")
    for env_value, want in (("1", "False True"), ("0", "True False")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "ZEPS_PURE_PYTHON": env_value}, check=True)
        assert out.stdout.split() == want.split()


@settings(max_examples=examples(100), deadline=None)
@given(entries_st, st.integers(0, 2**40))
def test_a_message_batch_gives_the_same_columns_and_messages_on_either_loops(items, first):
    """MessageBatch on the C loops and on the Python ones (what a machine without a compiler,
    or ZEPS_PURE_PYTHON=1, runs): the same keys, bodies and messages."""
    from zeps.clients import message as M
    frame = bytes(23) + _entries(items)
    offs = B.walk_py(frame, 23, len(frame), len(items), False)

    def read():
        b = M.MessageBatch.from_frame(frame, offs, first, 7, "s")
        keys, bodies = b.keys, b.bodies
        return keys, bodies, M.MessageBatch.from_frame(frame, offs, first, 7, "s").messages

    saved = M._batchc
    M._batchc = batchc
    try:
        with_c = read()
    finally:
        M._batchc = saved
    M._batchc = None
    try:
        with_python = read()
    finally:
        M._batchc = saved
    assert with_c == with_python


def test_a_count_no_list_can_hold_is_a_memory_error():
    """count + 1 wrapped for a count of 2**63 - 1: the offsets list was asked for -2**63
    entries (a SystemError, "bad argument to internal function")."""
    frame = _entries([(b"k", b"body")])
    for count in (2**63 - 1, 2**61):
        with pytest.raises(MemoryError):
            batchc.walk(frame, 0, len(frame), count, False)


@pytest.mark.parametrize("which", ["build_rows", "key_body_columns"])
def test_offsets_the_collector_shortens_midway_are_not_read_past(which):
    """Python code that the garbage collector runs while the loop allocates (a gc callback
    here; a finalizer does the same) halved the caller's offsets list: the loop, which had
    taken its length before, read past the end of the list (a segfault). It reads a copy."""
    items = [(b"k%d" % i, b"v" * 10) for i in range(2000)]
    frame = _entries(items)
    offsets = B.walk(frame, 0, len(frame), len(items))

    def halve(phase, info):
        if phase == "start" and len(offsets) > 2:
            del offsets[len(offsets) // 2:]

    hold = [[] for _ in range(200)]   # no list left to reuse: a new list can start a collection
    threshold = gc.get_threshold()
    gc.callbacks.append(halve)
    gc.set_threshold(1)
    try:
        if which == "build_rows":
            got = batchc.build_rows(Message, frame, offsets, 0, None, None, NO_HEADERS)
            keys = [m.key for m in got]
            assert [m.sequence for m in got] == list(range(len(got)))
        else:
            keys, bodies = batchc.key_body_columns(frame, offsets)
            assert bodies == [b"v" * 10] * len(keys)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(halve)
    del hold
    assert keys and keys == ["k%d" % i for i in range(len(keys))]


def test_a_failed_allocation_is_a_memory_error_never_a_bad_key_or_a_crash():
    """Each function, its k-th allocation failing (CPython's test hook): the result, or
    MemoryError. walk took a MemoryError decoding a key for the key's UTF-8 error: "the key
    of entry 1 is not valid UTF-8", of a valid key."""
    items = [(b"k", b"v"), ("\u00fc".encode(), b"x" * 20), (b"k", b"")]
    frame = _entries(items)
    offsets = B.walk(frame, 0, len(frame), len(items))
    calls = {
        "walk": lambda: batchc.walk(frame, 0, len(frame), len(items), True),
        "build_rows": lambda: batchc.build_rows(Message, frame, offsets, 2**64 - 2, 1, "s",
                                                NO_HEADERS),
        "key_body_columns": lambda: batchc.key_body_columns(frame, offsets),
    }
    compiled.each_allocation_failing(calls, 40)
