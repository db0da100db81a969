"""The broker shell's socket loops (``zeps.broker.sockio``): the C loops (``_sockc.c``) against
the Python ones that define them, over real libzmq sockets.

- ``drain``: the same messages from several clients (multi-frame ones among them) read in the
  same order, in the same chunks, with the same status (drained, a limit, a new identity, a
  message of several frames) and the same identity left to the caller, for any limits,
  ``ask_first`` and ``readable``; a round's loop as the broker runs it (a new identity's
  message read by the caller, its identity then known; a message of several frames dropped by
  ``skip``, a chunk at a time) reads everything exactly once.
- ``skip``: the same chunks in C and Python, and no frame kept (a message of 200,000 frames
  skipped in a few KiB).
- ``send_all``: the same ``(index, errno)`` answers and the same frames at each client, with a
  client's pipe filling (EAGAIN), an identity no connection has (EHOSTUNREACH) and blocked
  identities skipped; ``bytes``, ``bytearray`` and ``memoryview`` frames alike.
- ``readable``: ZMQ_EVENTS' answer, before and after a message came.
- Wrong arguments are a Python error, never a crash; ``ZEPS_PURE_PYTHON=1`` makes the broker
  use the Python loops (a fresh interpreter says so).

The sockets are ``inproc``, so that a message is on the ROUTER's side once ``send`` returned
and two ROUTERs fed the same way hold the same messages in the same order (over tcp the
broker's tests exercise the same loops end to end). The C module is built by ``setup.py``
wherever there is a C compiler; these tests skip only on a machine without one.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.broker import sockio
from . import compiled
from .property_examples import examples

compiled.c_module("zeps.broker._sockc", "Python socket loops")
_c, _why = sockio.load_c()
if _c is None:
    pytest.skip(f"the C socket loops cannot be bound here: {_why}", allow_module_level=True)

_names = itertools.count()

frames_st = st.lists(st.binary(max_size=40), min_size=1, max_size=3)
# (client index, frames) in the order they are sent
traffic_st = st.lists(st.tuples(st.integers(0, 2), frames_st), max_size=40)


class _Pair:
    """A ROUTER read by one of the loops, and its clients (DEALERs with fixed identities)."""

    def __init__(self, ctx, clients: int, compiled_loops: bool, sndhwm: int = 1000,
                 rcvhwm: int = 1000):
        self.addr = f"inproc://sockio-{next(_names)}"
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.router.setsockopt(zmq.SNDHWM, sndhwm)
        self.router.bind(self.addr)
        self.dealers = []
        for i in range(clients):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.ROUTING_ID, b"client-%d" % i)
            d.setsockopt(zmq.RCVHWM, rcvhwm)
            d.connect(self.addr)
            self.dealers.append(d)
        self.loops = sockio.SocketLoops(self.router, compiled=compiled_loops)

    def close(self):
        for s in [self.router, *self.dealers]:
            s.close(0)


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.term()


def _pairs(ctx, clients, **kw):
    return _Pair(ctx, clients, True, **kw), _Pair(ctx, clients, False, **kw)


def _feed(pair, traffic):
    for who, frames in traffic:
        pair.dealers[who].send_multipart(frames)


def _skip_all(pair, chunk: int) -> list:
    """Drop the rest of the message of several frames being read, ``chunk`` frames a call:
    each call's answer."""
    calls, more = [], True
    while more:
        read, more = pair.loops.skip(chunk)
        calls.append((read, more))
    return calls


def _round_trace(pair, known, max_n, max_bytes, ask_first, readable, chunk=2):
    """What one drain call answers, and the rest of the message it left, as the caller reads
    it: a new identity's frames, or the skip calls of a message of several frames."""
    got, status, ident = pair.loops.drain(known, max_n, max_bytes, ask_first, readable)
    rest = None
    if status == sockio.NEW:
        rest = pair.router.recv_multipart(zmq.NOBLOCK)
    elif status == sockio.PARTS:
        rest = _skip_all(pair, chunk)
    return got, status, ident, rest


def _as_read(ident, frames, skips=None):
    """A message as the broker ends up with it: one frame, or (first frame, frames in all)."""
    if skips is not None:
        return ident[0], (ident[1], 1 + sum(read for read, _more in skips))
    return ident, frames if len(frames) == 1 else (frames[0], len(frames))


@settings(max_examples=examples(150), deadline=None)
@given(traffic_st, st.integers(0, 3), st.integers(1, 50), st.integers(1, 200),
       st.integers(-2, 10), st.booleans(), st.integers(1, 3))
def test_drain_reads_the_same_messages_with_the_same_answers_in_c_and_python(
        traffic, known_n, max_n, max_bytes, ask_first, readable, chunk):
    ctx = zmq.Context()
    c_pair, py_pair = _pairs(ctx, 3)
    try:
        known_c = {b"client-%d" % i for i in range(known_n)}
        known_py = set(known_c)
        traces = []
        for pair, known in ((c_pair, known_c), (py_pair, known_py)):
            _feed(pair, traffic)
            trace = []
            for _ in range(len(traffic) + 2):
                got, status, ident, rest = _round_trace(pair, known, max_n, max_bytes,
                                                        ask_first, readable, chunk)
                trace.append((got, status, ident, rest))
                if status == sockio.NEW:
                    known.add(ident)
                if status == sockio.DRAINED:
                    break
            traces.append(trace)
        assert traces[0] == traces[1]
        assert traces[0][-1][1] == sockio.DRAINED          # every call read at least one
        # everything was read once, in each client's order, by drain or by the caller
        read = []
        for got, status, ident, rest in traces[0]:
            read += [_as_read(i, f) for i, f in got]
            if status == sockio.NEW:
                read.append(_as_read(ident, rest))
            elif status == sockio.PARTS:
                read.append(_as_read(ident, None, rest))
                assert all(0 < r <= chunk for r, _more in rest) and not rest[-1][1]
        for who in range(3):
            ident = b"client-%d" % who
            assert [f for i, f in read if i == ident] == [
                _as_read(ident, f)[1] for w, f in traffic if w == who]
    finally:
        c_pair.close()
        py_pair.close()
        ctx.term()


def test_a_round_loop_reads_every_message_once_and_learns_new_identities(ctx):
    """The broker's use: chunks of at most 4, a new identity's first message read by the caller
    and its identity then known, a message of several frames dropped 3 frames a call; 3
    clients' 60 messages (every third of several frames), all read, each client's in order."""
    for compiled_loops in (True, False):
        pair = _Pair(ctx, 3, compiled_loops)
        sent = [(i % 3, [b"m%d" % i] + [b"x" * (i % 5)] * (i % 3 == 1) * (i % 7))
                for i in range(60)]
        _feed(pair, sent)
        known, read = set(), []
        while True:
            got, status, ident = pair.loops.drain(known, 4, 1 << 20, 8, False)
            read += [_as_read(i, f) for i, f in got]
            if status == sockio.DRAINED:
                break
            if status == sockio.NEW:
                read.append(_as_read(ident, pair.router.recv_multipart(zmq.NOBLOCK)))
                known.add(ident)
            elif status == sockio.PARTS:
                read.append(_as_read(ident, None, _skip_all(pair, 3)))
        assert sorted(known) == [b"client-0", b"client-1", b"client-2"]
        for who in range(3):
            ident = b"client-%d" % who
            mine = [f for i, f in read if i == ident]
            assert mine == [_as_read(ident, f)[1] for w, f in sent if w == who]
        pair.close()


def test_a_message_of_many_frames_is_skipped_a_chunk_at_a_time_keeping_none(ctx):
    """A message of 100,000 frames (any libzmq client can send one: ``send_multipart``) was
    read whole into a list, an object per frame; now drain stops at it with its first frame,
    and skip drops the rest ``max_n`` a call, allocating no frame (tracemalloc's peak over
    the skips: a few KiB, where the frames of 2 bytes and their list take about 4 MiB), then
    the next message."""
    import tracemalloc
    for compiled_loops in (True, False):
        pair = _Pair(ctx, 1, compiled_loops)
        pair.dealers[0].send_multipart([b"first"] + [b"xy"] * 99_999)
        pair.dealers[0].send(b"next")
        got, status, ident = pair.loops.drain({b"client-0"}, 10, 1 << 20, 0, False)
        assert (got, status, ident) == ([], sockio.PARTS, (b"client-0", b"first"))
        tracemalloc.start()
        try:
            calls = _skip_all(pair, 40_000)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert calls == [(40_000, True)] * 2 + [(19_999, False)]
        assert peak < 64 << 10, peak
        got, status, _ = pair.loops.drain({b"client-0"}, 10, 1 << 20, 0, False)
        assert (got, status) == ([(b"client-0", [b"next"])], sockio.DRAINED)
        pair.close()


def test_drain_stops_at_the_byte_limit_after_the_message_that_reached_it(ctx):
    """First frames of 10 bytes against limits of 20 and 25: the message that brings the bytes
    to the limit or past it is the chunk's last."""
    for compiled_loops in (True, False):
        pair = _Pair(ctx, 1, compiled_loops)
        _feed(pair, [(0, [b"a" * 10])] * 6)
        got, status, ident = pair.loops.drain({b"client-0"}, 100, 20, 0, False)
        assert (len(got), status, ident) == (2, sockio.LIMIT, None)
        got, status, ident = pair.loops.drain({b"client-0"}, 100, 25, 0, False)
        assert (len(got), status, ident) == (3, sockio.LIMIT, None)
        got, status, _ = pair.loops.drain({b"client-0"}, 100, 25, 0, False)
        assert (len(got), status) == (1, sockio.DRAINED)
        pair.close()


def test_readable_says_whether_a_message_waits(ctx):
    for compiled_loops in (True, False):
        pair = _Pair(ctx, 1, compiled_loops)
        assert pair.loops.readable() is False
        pair.dealers[0].send(b"hello")
        assert pair.loops.readable() is True
        pair.router.recv_multipart()
        assert pair.loops.readable() is False
        pair.close()


outbox_st = st.lists(st.tuples(st.sampled_from([b"client-0", b"client-1", b"nobody"]),
                               st.binary(max_size=30),
                               st.sampled_from([bytes, bytearray, memoryview])), max_size=30)


@settings(max_examples=examples(150), deadline=None)
@given(outbox_st, st.integers(0, 3), st.sets(st.sampled_from([b"client-0", b"client-1"])),
       st.booleans())
def test_send_all_sends_the_same_frames_with_the_same_answers_in_c_and_python(
        items, start, blocked, use_blocked):
    """A full pipe (each client takes a few messages: the ROUTER's SNDHWM and the client's
    RCVHWM of 1), an unknown identity, blocked identities: the broker's loop over the answers
    (an identity that failed is blocked from then on) in C and in Python."""
    ctx = zmq.Context()
    pairs = _pairs(ctx, 2, sndhwm=1, rcvhwm=1)
    try:
        results = []
        for pair in pairs:
            out = [(ident, kind(frame)) for ident, frame, kind in items]
            bl = set(blocked) if use_blocked else None
            answers, i = [], min(start, len(out))
            while i < len(out):
                i, errno = pair.loops.send_all(out, i, bl)
                answers.append((i, errno))
                if i < len(out):
                    if bl is None:
                        bl = set()
                    bl.add(out[i][0])
                    i += 1
            received = []
            for d in pair.dealers:
                mine = []
                while d.poll(0):
                    mine.append(d.recv(zmq.NOBLOCK))
                received.append(mine)
            results.append((answers, received))
        assert results[0] == results[1]
        for _, errno in results[0][0]:
            assert errno in (0, zmq.EAGAIN, zmq.EHOSTUNREACH)
    finally:
        for p in pairs:
            p.close()
        ctx.term()


def test_send_all_names_a_full_pipe_and_a_gone_client(ctx):
    for compiled_loops in (True, False):
        pair = _Pair(ctx, 1, compiled_loops, sndhwm=1, rcvhwm=1)
        out = [(b"nobody", b"x")] + [(b"client-0", b"m%d" % i) for i in range(50)]
        assert pair.loops.send_all(out, 0, None) == (0, zmq.EHOSTUNREACH)
        i, errno = pair.loops.send_all(out, 1, None)
        assert 1 < i < len(out) and errno == zmq.EAGAIN
        assert pair.loops.send_all(out, i + 1, {b"client-0"}) == (i + 1, 0)
        assert pair.loops.send_all([], 0, None) == (0, 0)
        pair.close()


def test_wrong_arguments_are_python_errors_not_crashes(ctx):
    pair = _Pair(ctx, 1, True)
    with pytest.raises(TypeError):
        pair.loops.send_all(((b"client-0", b"x"),), 0, None)       # not a list
    with pytest.raises(TypeError):
        pair.loops.send_all([b"client-0"], 0, None)                 # not a pair
    with pytest.raises(TypeError):
        pair.loops.send_all([(b"client-0", 5)], 0, None)            # not a buffer
    with pytest.raises(TypeError):
        pair.loops.drain({b"client-0"}, 1, 1)                       # arguments missing
    pair.dealers[0].send(b"x")
    with pytest.raises(TypeError):
        pair.loops.drain(5, 10, 100, 0, False)                      # known is no container
    with pytest.raises(ValueError):
        _c.readable(0)                                              # a null handle
    with pytest.raises(TypeError):
        pair.loops.skip()                                           # arguments missing
    with pytest.raises(TypeError):
        pair.loops.skip("many")                                     # no count
    with pytest.raises(ValueError):
        _c.skip(0, 5)                                               # a null handle
    with pytest.raises(ValueError):
        pair.loops.send_all([(b"client-0", b"x")], -1, None)        # read before the list
    # a membership test that empties the list: the pair it looked at was borrowed, and freed
    out = [(b"client-0" * 50, bytearray(b"frame")) for _ in range(3)]

    class Emptying:
        def __contains__(self, ident):
            out.clear()
            return False
    pair.loops.send_all(out, 0, Emptying())
    pair.close()


def test_an_argument_that_is_wrong_is_raised_before_more_python_code_runs(ctx):
    """drain converted all its arguments before it looked for an error: readable's __bool__
    ran with max_n's TypeError pending (a SystemError that hid it; an assertion in a debug
    interpreter)."""
    pair = _Pair(ctx, 1, True)
    called = []

    class Readable:
        def __bool__(self):
            called.append(True)
            return True

    try:
        for args in (("many", 100, 0), (10, "much", 0), (10, 100, None)):
            with pytest.raises(TypeError):
                pair.loops.drain(set(), *args, Readable())
        assert not called
    finally:
        pair.close()


def test_send_all_sends_the_pairs_out_holds_when_it_is_called(ctx):
    """A membership test that appends to out: send_all_py takes len(out) once, and the C loop,
    which read the length again before each pair, never ended for one that appends each time."""
    for compiled_loops in (True, False):
        pair = _Pair(ctx, 1, compiled_loops)
        out = [(b"client-0", b"x"), (b"client-0", b"y")]
        asked = []

        class Growing:
            def __contains__(self, ident, asked=asked, out=out):
                asked.append(ident)
                if len(asked) > 100:
                    raise RuntimeError("send_all is still sending")
                out.append((b"client-0", b"more"))
                return False

        try:
            assert pair.loops.send_all(out, 0, Growing()) == (2, 0)
            assert len(asked) == 2 and len(out) == 4
            assert [pair.dealers[0].recv() for _ in range(2)] == [b"x", b"y"]
            assert not pair.dealers[0].poll(50)
        finally:
            pair.close()


def test_the_c_loops_bind_only_to_the_libzmq_pyzmq_uses():
    """The library is told from the process's mapped files: the only libzmq, or among several
    the one beside pyzmq; else none (the broker then runs the Python loops)."""
    site = "/venv/lib/python3.11/site-packages"
    ours = f"{site}/pyzmq.libs/libzmq-2f02442c.so.5.2.5"
    other = "/usr/lib/x86_64-linux-gnu/libzmq.so.5.2.5"
    assert sockio.pick_libzmq(["/usr/lib/libc.so.6", ours, ours], site) == ours
    assert sockio.pick_libzmq([other], site) == other
    assert sockio.pick_libzmq([other, ours], site) == ours
    assert sockio.pick_libzmq([other, "/opt/x/libzmq.so.5"], site) is None
    assert sockio.pick_libzmq(["/usr/lib/libc.so.6", "[heap]"], site) is None
    assert sockio.pick_libzmq([other, ours], site + "/") == ours


def test_pure_python_makes_the_broker_use_the_python_loops():
    code = "from zeps.broker import sockio; print(sockio.C_LOOPS)"
    for env_value, want in (("1", "False"), ("0", "True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "ZEPS_PURE_PYTHON": env_value}, check=True)
        assert out.stdout.strip() == want


def _round_trip(endpoint: str) -> None:
    """A publisher, a live subscriber and a client that joins after them (its first message
    meets a round's reads among known clients'): every message delivered in order, every
    request answered. Among them, two clients send a message of 40,000 frames (more than two
    turns' ``SKIP_CHUNK``), one as its connection's first message, one after an ATTACH: each
    is refused by its count, and both go on to be served."""
    from zeps.broker.server import SKIP_CHUNK
    from zeps.protocol import commands as c
    from .rawclient import RawClient
    many = [b"x"] * 40_000
    assert len(many) > 2 * SKIP_CHUNK
    first = RawClient(endpoint)
    first.send_raw(*many)                     # its connection's first message
    pub = RawClient(endpoint).attach("loops")
    sub = RawClient(endpoint).attach("loops")
    sub.subscribe("", 0, credit=1 << 20)
    later = RawClient(endpoint).attach("loops")
    for i in range(50):
        pub.send(c.Publish("k", b"%d" % i))
        if i == 10:
            later.send_raw(*many)             # a message among the others'
    late = RawClient(endpoint).attach("loops")
    late.send(c.Ping())
    late.expect(c.PingOk)
    got = sub.delivers(50)
    assert [d.body for d in got] == [b"%d" % i for i in range(50)]
    for cl in (first, later):
        assert cl.expect(c.Invalid).reason == "a ZEPS command is exactly one frame, got 40000"
    first.attach("loops")
    for cl in (first, later):
        cl.send(c.Ping())
        cl.expect(c.PingOk)
    for cl in (pub, sub, late, first, later):
        cl.close()


@pytest.mark.skipif(os.environ.get("ZEPS_PURE_PYTHON") == "1",
                    reason="ZEPS_PURE_PYTHON=1 in this run's environment: the broker it starts "
                           "runs the Python loops (the next test's case)")
def test_the_broker_says_which_socket_loops_it_runs_and_serves_on_the_c_ones(start_broker,
                                                                              tmp_path):
    b = start_broker(tmp_path / "data")
    _round_trip(b.endpoint)
    assert "socket_loops=c" in b.log()                    # what the operator reads


def test_a_broker_on_the_python_socket_loops_serves_the_same(start_broker, tmp_path,
                                                             monkeypatch):
    """What a machine without a C compiler runs (ZEPS_PURE_PYTHON=1 in the broker's
    environment): the same traffic, served by the Python loops."""
    monkeypatch.setenv("ZEPS_PURE_PYTHON", "1")
    b = start_broker(tmp_path / "data")
    _round_trip(b.endpoint)
    assert "socket_loops=python" in b.log()


@pytest.mark.parametrize("compiled_loops", [True, False], ids=["c", "python"])
def test_drain_by_key_gives_a_known_identity_claimed_by_another_key_as_new(ctx, compiled_loops):
    """With CurveZMQ (``by_key``: ``known`` maps each identity to its connection's key), a
    message of a known identity from another key is NEW, left to the caller: a peer picks its
    own routing id, and one that claimed a closed client's before the broker read the close
    was served in that client's session, with its rights (found by review). The same key's
    messages are read as before."""
    from zmq.auth.thread import ThreadAuthenticator

    from .measure import wait_for
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
    spub, ssec = zmq.curve_keypair()
    router = ctx.socket(zmq.ROUTER)
    router.curve_server, router.curve_secretkey, router.curve_publickey = True, ssec, spub
    port = router.bind_to_random_port("tcp://127.0.0.1")
    loops = sockio.SocketLoops(router, compiled=compiled_loops)
    opened = []

    def dealer(keys):
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.curve_serverkey, d.curve_publickey, d.curve_secretkey = spub, keys[0], keys[1]
        d.setsockopt(zmq.ROUTING_ID, b"same-id")
        d.connect(f"tcp://127.0.0.1:{port}")
        opened.append(d)
        return d

    def drain(known):
        router.poll(200)
        return loops.drain(known, 10, 1 << 20, 10, False, True)

    alice, bob = zmq.curve_keypair(), zmq.curve_keypair()
    try:
        a = dealer(alice)
        a.send(b"first")
        got = wait_for(lambda: drain({}), lambda r: r[1] == sockio.NEW, 10)
        assert got == ([], sockio.NEW, b"same-id")
        frame = router.recv(copy=False)                 # the caller reads it, with its key
        assert frame.bytes == b"first" and frame.get("User-Id") == alice[0].decode()
        known = {b"same-id": alice[0].decode()}
        a.send(b"second")
        got = wait_for(lambda: drain(known), lambda r: r[0], 10)
        assert got[0] == [(b"same-id", [b"second"])]
        a.close(0)

        def bob_tries():                # refused while the ROUTER still has alice's connection
            dealer(bob).send(b"bob's")
            return drain(known)
        got = wait_for(bob_tries, lambda r: r[0] or r[1] == sockio.NEW, 20)
        assert got == ([], sockio.NEW, b"same-id"), "bob's message was read as alice's"
        frame = router.recv(copy=False)
        assert frame.bytes == b"bob's" and frame.get("User-Id") == bob[0].decode()
    finally:
        for d in opened:
            d.close(0)
        router.close(0)
        auth.stop()
