"""``batch_frames`` on the optional C loop (``zeps.protocol._batchc.publish_frame``, issue 20)
against its definition, ``batch_frames_py``: for any messages, valid or not, and any limits, the
same ``(frame, count)`` sequence byte for byte, then the same exception (type and message) at
the same point, whether the messages come as a list, a tuple or any other iterable (read in
chunks: a frame that reaches a chunk's end is built again with the next one, so the frames do
not change).

Inputs: keys that are non-ASCII, empty, 255 and 256 bytes of UTF-8, lone surrogates, str
subclasses or not str at all; bodies that are bytes, str, bytearray, (non-contiguous)
memoryview, a bytes subclass (refused), a str subclass, an int; items that are tuples, lists,
tuple subclasses, too short, too long or not iterable; ``max_batch`` tiny (every message
alone), small, huge; ``max_body`` None, small, huge. Skips only where no C compiler is (as
tests/test_batchc.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.clients import batching as M
from zeps.protocol import codec
from zeps.protocol import commands as c

from . import compiled
from .property_examples import examples

batchc = compiled.batchc()      # the module itself, also under ZEPS_PURE_PYTHON=1


class Text(str):
    pass


class Blob(bytes):
    pass


class Buf(bytearray):
    pass


Pair = namedtuple("Pair", "key body")

good_keys = st.one_of(st.sampled_from(["", "k", "clé", "é" * 127 + "a", "x" * 255, Text("k"),
                                       Text("clé")]),
                      st.text(max_size=12))
good_bodies = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=20),
    st.binary(max_size=40).map(bytearray),
    st.binary(max_size=40).map(memoryview),
    st.binary(max_size=40).map(lambda b: memoryview(b)[::2]),      # not contiguous
    st.binary(max_size=40).map(Buf),
    st.text(max_size=10).map(Text))
good_st = st.tuples(st.tuples(good_keys, good_bodies), st.sampled_from(["tuple"] * 4 + ["list", "named"])
                    ).map(lambda t: _item(*t))
bad_st = st.one_of(
    st.tuples(st.tuples(st.sampled_from(["é" * 128, "x" * 256, "\ud800", "a\udcff", b"k", 7, None]),
                        good_bodies), st.just("tuple")),
    st.tuples(st.tuples(good_keys, st.one_of(st.binary(max_size=20).map(Blob),
                                              st.sampled_from(["\ud800", 42, None]))),
              st.just("tuple")),
    st.tuples(st.tuples(good_keys, good_bodies), st.sampled_from(["short", "long", "int"]))
).map(lambda t: _item(*t))


def _item(kb, shape):
    k, b = kb
    return {"tuple": (k, b), "list": [k, b], "named": Pair(k, b), "short": (k,),
            "long": (k, b, b), "int": 5}[shape]


@st.composite
def items_st(draw):
    """Messages, most of them good, and at most two that cannot be sent, anywhere."""
    items = draw(st.lists(good_st, max_size=40))
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), draw(bad_st))
    return items


good_items_st = st.lists(st.tuples(st.sampled_from(["", "k", "clé", "é" * 127 + "a"]),
                                   st.one_of(st.binary(max_size=60), st.text(max_size=20))),
                         max_size=60)
max_batch_st = st.one_of(st.integers(-2, 40), st.integers(40, 900), st.integers(900, 4000),
                         st.just(2**70))
max_body_st = st.one_of(st.none(), st.integers(-2, 80), st.just(2**70))


def _outcome(gen):
    """The frames a generator yields, then ("raised", type, message) or ("done",)."""
    out = []
    try:
        for frame, count in gen:
            assert type(frame) is bytes
            out.append((frame, count))
    except (TypeError, ValueError) as e:
        out.append(("raised", type(e), str(e)))
    else:
        out.append(("done",))
    return out


class _Chunk:
    """batch_frames reading an iterable ``n`` messages at a time."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.saved, M._CHUNK = M._CHUNK, self.n

    def __exit__(self, *exc):
        M._CHUNK = self.saved


@pytest.fixture(autouse=True, scope="module")
def _on_the_c_loop():
    """batch_frames on the C loop, also under ZEPS_PURE_PYTHON=1 (which only says that zeps
    does not use it; test_zeps_pure_python_... checks that)."""
    saved, M._c_frame = M._c_frame, batchc.publish_frame
    yield
    M._c_frame = saved


@settings(max_examples=examples(600), deadline=None)
@given(items_st(), max_batch_st, max_body_st)
def test_the_c_loop_yields_the_frames_and_raises_the_errors_of_batch_frames_py(
        items, max_batch, max_body):
    want = _outcome(M.batch_frames_py(items, max_batch, max_body))
    assert _outcome(M.batch_frames(items, max_batch, max_body)) == want
    assert _outcome(M.batch_frames(tuple(items), max_batch, max_body)) == want


@settings(max_examples=examples(300), deadline=None)
@given(items_st(), max_batch_st, max_body_st, st.integers(1, 7))
def test_an_iterable_read_in_chunks_gives_the_same_frames_and_errors(items, max_batch, max_body,
                                                                     chunk):
    want = _outcome(M.batch_frames_py(items, max_batch, max_body))
    with _Chunk(chunk):
        assert _outcome(M.batch_frames(iter(items), max_batch, max_body)) == want
        assert _outcome(M.batch_frames((x for x in items), max_batch, max_body)) == want


@settings(max_examples=examples(200), deadline=None)
@given(good_items_st, st.integers(12, 700), st.one_of(st.none(), st.integers(0, 100)),
       st.integers(1, 9))
def test_the_chunked_path_carries_every_message_in_order(items, max_batch, max_body, chunk):
    with _Chunk(chunk):
        frames = list(M.batch_frames(iter(items), max_batch, max_body))
    got = []
    for frame, count in frames:
        pubs = M.unbatch(frame) if count > 1 else [frame]
        assert len(pubs) == count
        got += [codec.decode(p) for p in pubs]
    assert all(type(p) is c.Publish for p in got)
    assert [(p.key, p.body) for p in got] == \
        [(k, b if isinstance(b, bytes) else b.encode()) for k, b in items]


def test_a_batch_is_cut_at_max_batch_entries_and_at_max_batch():
    items = [("k", b"")] * (M.MAX_BATCH_ENTRIES + 3)
    frames = list(M.batch_frames(items, 1 << 30, None))
    assert [n for _f, n in frames] == [M.MAX_BATCH_ENTRIES, 3]
    assert frames == list(M.batch_frames_py(items, 1 << 30, None))
    items = [("k", b"x" * 10)] * 5                # entry 16 bytes: 7 + 2 * 16 = 39
    assert [n for _f, n in M.batch_frames(items, 39, None)] == [2, 2, 1]
    assert [n for _f, n in M.batch_frames(items, 22, None)] == [1] * 5   # alone: PUBLISHes
    assert list(M.batch_frames(items, 22, None))[0][0][:3] == b"\xaa\xa5\x06"


def test_messages_before_a_bad_one_are_yielded_then_its_error_raised():
    for bad, error, text in [(("k", Blob(b"x")), TypeError, "body must be bytes or str, not Blob"),
                             ((b"k", b"x"), TypeError, "key must be str, not bytes"),
                             (("é" * 128, b"x"), ValueError, "key longer than 255 bytes"),
                             (("\ud800", b"x"), UnicodeEncodeError, "surrogates not allowed"),
                             (("k",), ValueError, "not enough values to unpack"),
                             (3, TypeError, "cannot unpack non-iterable int object")]:
        it = M.batch_frames([("a", b"1"), ("b", b"2"), bad, ("c", b"3")], 1000, None)
        frame, n = next(it)
        assert n == 2 and frame[2] == M.PUBLISH_BATCH_ID
        with pytest.raises(error, match=text):
            next(it)


def test_python_code_that_empties_the_list_midway_is_survived_as_in_python():
    items: list = []

    class Clearing(bytearray):
        def __bytes__(self):
            items.clear()                 # frees the pairs the C loop took before
            return b"cleared"

    def run(fn):
        items[:] = [("a", b"1" * 50), ("b", Clearing(b"x")), ("c", b"3"), ("d", b"4")]
        return _outcome(fn(items, 1000, None))

    want = run(M.batch_frames_py)
    assert want == [(M.publish_batch_head(2) + b"\x01a\x00\x00\x00\x32" + b"1" * 50
                     + b"\x01b\x00\x00\x00\x07cleared", 2), ("done",)]
    assert run(M.batch_frames) == want


def test_zeps_pure_python_makes_batch_frames_use_the_python_loop():
    code = "from zeps.clients import batching; print(batching._c_frame is None)"
    for env_value, want in (("1", "True"), ("0", "False")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "ZEPS_PURE_PYTHON": env_value}, check=True)
        assert out.stdout.split() == [want]


def test_limits_under_minus_one_are_taken_as_batch_frames_takes_them():
    """A max_batch near -2**63 (batch_frames clamps it to -1 before the C loop; publish_frame
    did not): max_batch - size - entry wrapped to near 2**63, and the messages that
    batch_frames_py sends alone, each too big for any batch, went in one PUBLISH-BATCH."""
    items = [("k", b"x")] * 3
    for max_batch, limit in ((-2**63, 2**62), (-2**63 + 20, 100), (-2**63, -2**63), (-5, 100)):
        frames, start = [], 0
        while start < len(items):
            frame, count = batchc.publish_frame(items, start, max_batch, limit, M._pair)
            frames.append((frame, count))
            start += count
        assert frames == list(M.batch_frames_py(items, max_batch, limit))
        assert [n for _f, n in frames] == [1, 1, 1]
