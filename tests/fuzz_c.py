"""A hostile-argument fuzz of the three optional C extensions, to run under AddressSanitizer
and UndefinedBehaviorSanitizer (not a test: pytest does not collect it).

Every function of each module's ``PyMethodDef`` table (``zeps.protocol._batchc``,
``zeps.journal._journalc``, ``zeps.broker._sockc``) is called with wrong types, extreme and
non-int integers, truncated and corrupted buffers, counts and lengths that lie, positions
outside the buffer or not aligned, empty inputs, and Python code that changes a list midway.
Each call must return or raise an ordinary exception (a ``SystemError`` is reported); where the
Python twin defines the result for the same arguments (``walk_py``, ``build_messages_py``,
``batch_frames_py``, ``plain_record_py``) both must agree. ``--oom`` instead fails each
allocation of a valid call in turn (``_testcapi.set_nomemory``): the result or MemoryError.

Not passed, by design: a socket handle that is not a live socket's (``_sockc`` uses it as the
pointer it is, as ctypes would) and function addresses to ``_sockc.bind``.

Run from the checkout, with the extensions built instrumented::

    CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \\
      LDFLAGS="-fsanitize=address,undefined" python setup.py build_ext --inplace --force
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) \\
      ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \\
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \\
      FUZZ_ITERS=2000 FUZZ_SEED=1 python -m tests.fuzz_c [--oom] [batchc] [journalc] [sockc]

(``detect_leaks=0``: CPython itself leaks at exit; ``allocator_may_return_null=1``: a call asked
for a list of 2**40 items raises MemoryError instead of stopping the run.) Then rebuild normally.
The exit status is 1 when something was reported; a crash or a sanitizer report stops the run.
"""
# ruff: noqa: B023 - each lambda below is called in the iteration that makes it
from __future__ import annotations

import collections
import gc
import os
import random
import struct
import sys
import time

import numpy as np
import zmq

from zeps.broker import sockio
from zeps.clients import batching
from zeps.clients.message import NO_HEADERS, Message, build_messages_py
from zeps.journal import _journalc as jc
from zeps.journal import plainrun
from zeps.journal.record.encoder import encode_batch, plain_record_py
from zeps.protocol import _batchc as bc
from zeps.protocol import batch as B
from zeps.protocol.commands import PublishBatch
from zeps.protocol.headers import encode_block

ITERS = int(os.environ.get("FUZZ_ITERS", "2000"))
R = random.Random(int(os.environ.get("FUZZ_SEED", "1")))
STATS: collections.Counter = collections.Counter()
FINDINGS: list = []


def report(what, *args):
    FINDINGS.append(what)
    print("FINDING:", what, *[repr(a)[:300] for a in args], flush=True)


def call(f, *args):
    """``("ok", result)`` or ``("err", type name, text)``; a SystemError is reported (but
    publish_frame's own, for a ``pair`` that does not return a 2-tuple)."""
    try:
        r = f(*args)
        STATS[f.__name__ + ": ok"] += 1
        return ("ok", r)
    except SystemError as e:
        if str(e) != "pair() must return a 2-tuple":
            report(f"SystemError from {f.__name__}", e, args)
        return ("err", "SystemError", str(e))
    except BaseException as e:       # noqa: BLE001 - any exception is an answer here
        if isinstance(e, KeyboardInterrupt):
            raise
        STATS[f.__name__ + ": " + type(e).__name__] += 1
        return ("err", type(e).__name__, str(e))


def outcome(f, *args):
    try:
        return ("ok", f(*args))
    except Exception as e:           # noqa: BLE001
        return ("err", "ValueError" if isinstance(e, B.BadEntries) else type(e).__name__, str(e))


class Idx:
    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


class IntSub(int):
    pass


class StrSub(str):
    pass


class BytesSub(bytes):
    pass


class BadBool:
    def __bool__(self):
        raise RuntimeError("bool")


class Contains:
    def __init__(self, f):
        self.f = f

    def __contains__(self, x):
        return self.f(x)


class Pair2:
    def __iter__(self):
        return iter(("k", b"b"))


EXTREME = [0, 1, -1, 2, 3, 5, 7, 8, 15, 16, 17, 23, 24, 28, 32, 255, 256, 4096, 2**31 - 1, 2**31,
           2**32 - 1, 2**32, 2**62, -2**62, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64 - 1, 2**64,
           10**30, -10**30]
NONINT = [None, 1.5, "3", b"3", [], True, IntSub(3), Idx(3), Idx(-1), Idx(2**70), object()]


def any_int(near=()):
    c = R.random()
    if near and c < 0.5:
        return R.choice(near) + R.choice([0, 0, 1, -1, 2, -2, 4, -4, 5, R.randint(-300, 300)])
    return R.choice(EXTREME) if c < 0.9 else R.choice(NONINT)


def noncontig(b):
    return memoryview(bytes(b) * 2 or b"ab")[::2]


def any_buf(b):
    """``b`` as a bytearray, a (non-contiguous, offset) memoryview, a str, an int32 array..."""
    return R.choice([
        lambda: bytearray(b), lambda: memoryview(b), lambda: noncontig(b),
        lambda: b.decode("latin-1"), lambda: None, lambda: memoryview(b)[1:] if b else b"",
        lambda: np.frombuffer(b[:len(b) // 4 * 4], dtype=np.int32), lambda: b, lambda: b])()


def mutate(b):
    b = bytearray(b)
    for _ in range(R.randint(0, 4)):
        op = R.randrange(6)
        if op == 0 and b:
            b[R.randrange(len(b))] = R.randrange(256)
        elif op == 1 and b:
            del b[R.randrange(len(b)):]
        elif op == 2:
            b += os.urandom(R.randint(0, 8))
        elif op == 3 and len(b) >= 4:
            i = R.randrange(len(b) - 3)
            b[i:i + 4] = R.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\0\0\0\0",
                                   b"\x80\0\0\0", b"\x40\0\0\0", b"\xc0\0\0\x10"])
        elif op == 4 and b:
            b[R.randrange(len(b))] ^= 1 << R.randrange(8)
        elif op == 5 and len(b) > 8:
            i = R.randrange(len(b) - 8)
            b[i:i + 8] = R.choice([b"\xff" * 8, b"\x7f" + b"\xff" * 7, b"\0" * 8, b"\x80" + b"\0" * 7])
    return bytes(b)


def rand_key():
    return R.choice(["", "k", "ü", "a" * 255, "é" * 127, "\U0001F600", "key.%d" % R.randrange(9)])


def rand_entries():
    """(count, entries), keys UTF-8 or (a third of the time) not."""
    n = R.randint(1, 6)
    if R.random() < 0.3:
        keys = [os.urandom(R.randint(0, 5)) for _ in range(n)]
    else:
        keys = [rand_key().encode() for _ in range(n)]
    bodies = [os.urandom(R.choice([0, 1, 5, 40])) for _ in range(n)]
    return n, b"".join(bytes([len(k)]) + k + struct.pack(">I", len(v)) + v
                       for k, v in zip(keys, bodies))


# ------------------------------------------------------------------------------------ batchc

def fuzz_batchc():
    for _ in range(ITERS):
        # walk, against walk_py where batch.walk would call it
        n, raw = rand_entries()
        pre = os.urandom(R.choice([0, 3, 7, 23]))
        buf = mutate(pre + raw) if R.random() < 0.5 else pre + raw
        start, end = any_int((len(pre), 0, len(buf))), any_int((len(buf), len(pre) + len(raw)))
        count = any_int((n, 1))
        ck = R.choice([True, False, 1, 0, None, "x", BadBool()])
        b = any_buf(buf) if R.random() < 0.2 else buf
        got = call(bc.walk, b, start, end, count, ck)
        if (type(b) is bytes and all(type(x) is int for x in (start, end, count))
                and type(ck) is bool and 0 <= start <= end < 2**62 and 1 <= count
                and count * B.MIN_ENTRY <= end - start):
            want = outcome(B.walk_py, b, start, end, count, ck)
            if got != want:
                report("walk differs from walk_py", (b, start, end, count, ck), got, want)
        # build_rows and key_body_columns over a walked frame, against their Python twins
        n, raw = rand_entries()
        frame = os.urandom(R.choice([0, 23])) + raw
        offs = B.walk(frame, len(frame) - len(raw), len(frame), n, False)
        first = R.choice([0, 5, 2**63, 2**64 - 3, 2**64 - 1, 2**64, -3, 10**30])
        got = call(bc.build_rows, Message, frame, offs, first, 7, "s", NO_HEADERS)
        want = outcome(build_messages_py, frame, offs, first, 7, "s")
        if got != want:
            report("build_rows differs from build_messages_py", (frame, offs, first), got, want)
        got = call(bc.key_body_columns, frame, offs)
        want = ("ok", ([frame[o + 1:o + 1 + frame[o]].decode("utf-8", "replace") for o in offs[:-1]],
                       [frame[s + 5 + frame[s]:e] for s, e in zip(offs, offs[1:])]))
        if got[0] != "ok" or tuple(got[1]) != want[1]:
            report("key_body_columns differs", (frame, offs), got, want)
        # ... and over offsets, frames and classes that are not those
        bad = R.choice([
            lambda: [any_int((len(frame), 0)) if R.random() < 0.3 else o for o in offs],
            lambda: [any_int((len(frame),)) for _ in range(R.randint(0, 5))],
            lambda: tuple(offs), lambda: [], lambda: offs[::-1], lambda: offs[:1],
            lambda: [IntSub(o) for o in offs], lambda: np.array(offs)])()
        fr = R.choice([frame, mutate(frame), frame[:len(frame) // 2], b"", any_buf(frame)])
        cls = R.choice([Message, Message, tuple, list, int, None, type("T", (tuple,), {}),
                        type("S", (tuple,), {"__slots__": ()})])
        call(bc.build_rows, cls, fr, bad, any_int((0,)), any_int(), None, ())
        call(bc.key_body_columns, fr, bad)
        # publish_frame, against batch_frames_py's first frame
        items = [rand_item() for _ in range(R.randint(0, 8))]
        if R.random() < 0.3:
            items = tuple(items)
        start = R.randrange(len(items)) if items and R.random() < 0.7 else any_int((0, len(items)))
        mb = R.choice([7, 12, 40, 100, 300, 2**62, -1]) if R.random() < 0.6 else any_int((7, 300))
        lim = R.choice([0, 5, 50, 2**62, -1]) if R.random() < 0.6 else any_int((50, -1))
        pair = R.choice([batching._pair] * 4 + [None, len, lambda it: (1, 2, 3), lambda it: (
            items.clear() if isinstance(items, list) else None) or ("k", b"v")])
        got = call(bc.publish_frame, items, start, mb, lim, pair)
        if (pair is batching._pair and type(start) is int and 0 <= start < len(items)
                and type(mb) is int and type(lim) is int and -1 <= min(mb, lim)
                and max(mb, lim) <= 2**62):
            want = outcome(lambda: next(batching.batch_frames_py(items[start:], mb, lim)))
            if got[:2] != want[:2] or (got[0] == "ok" and tuple(got[1]) != tuple(want[1])):
                report("publish_frame differs from batch_frames_py", (items, start, mb, lim),
                       got, want)
    for f, argss in ((bc.walk, [(), (b"",), (b"", 0, 0, 2**63 - 1, False)]),
                     (bc.build_rows, [(), (None,) * 7, (Message, b"", [0], 0, 0, 0, 0)]),
                     (bc.key_body_columns, [(), (b"", None), (b"\0\0\0\0\0", [0, 5, 5])]),
                     (bc.publish_frame, [(), ([], 0, 1, 1, None), ({"k": b""}, 0, 9, 9, len)])):
        for args in argss:
            call(f, *args)


def rand_item():
    key = R.choice(["", "k", "üüü", "a" * 255, "a" * 256, "\ud800", StrSub("s"), 3, b"k", None])
    body = R.choice([b"", b"x" * R.randint(0, 50), "text", "tëxt", bytearray(b"ba"),
                     memoryview(b"mv"), noncontig(b"nc"), BytesSub(b"bs"), 5, None, "\udfff",
                     StrSub("ss")])
    return R.choice([(key, body)] * 6 + [[key, body], (key, body, 3), Pair2(), 7, "ab"])


# ---------------------------------------------------------------------------------- journalc

def rand_block():
    items = []
    for _ in range(R.randint(1, 5)):
        c = R.randrange(4)
        if c < 2:
            items.append((rand_key()[:8], os.urandom(R.randint(0, 40))))
        elif c == 2:
            items.append((rand_key()[:8], os.urandom(5), encode_block([("h", b"v")])))
        else:
            ms = [(rand_key()[:8], os.urandom(R.randint(0, 9))) for _ in range(R.randint(2, 4))]
            items.append(PublishBatch(len(ms), B.encode_entries(ms)))
    producers = R.choice([None, None, [("p" * R.randint(1, 40), 1 + i) for i in range(len(items))]])
    seq = R.choice([0, 5, 2**63 - 10, 2**62])
    raw, _recs = encode_batch(items, seq, 1000 + R.randint(-5, 5), 1 << 20, producers)
    return b"".join(raw), seq


def i64(values):
    """``values`` as an int64 array, or (a third of the time) as one it must refuse or read
    as such: not aligned, uint64, int32, float64, bytes, strided, a list."""
    a = np.array(values, dtype=np.int64)
    return R.choice([
        lambda: np.frombuffer(b"\0" + a.tobytes(), dtype=np.int64, offset=1, count=len(a)),
        lambda: a.astype(np.uint64), lambda: a.astype(np.int32), lambda: a.astype(np.float64),
        lambda: a.tobytes(), lambda: a[::2], lambda: list(values)] + [lambda: a] * 14)()


def fuzz_journalc():
    for _ in range(ITERS):
        raw, seq = rand_block()
        buf = mutate(raw) if R.random() < 0.6 else raw
        if R.random() < 0.2:
            buf = buf[:R.randrange(len(buf) + 1)]
        b = any_buf(buf) if R.random() < 0.15 else buf
        L = len(buf)
        call(jc.walk, b, any_int((L, 0)))
        walked, after = jc.walk(buf, L)
        good = list(np.frombuffer(walked, dtype=np.int64))
        pos = R.choice([
            lambda: good, lambda: good[::-1],
            lambda: [R.choice([0, 1, L, L - 1, L - 15, L - 16, L - 17, -1, -16, 2**62, 2**63 - 1,
                               -2**63]) for _ in range(R.randint(0, 4))],
            lambda: [p + R.randint(-20, 20) for p in good],
            lambda: sorted(R.randrange(-5, L + 5) for _ in range(R.randint(0, 5)))])()
        P = i64(pos)
        last_ts = R.choice([None, None, 999, 1005, 2**63 - 1, -2**63, 2**70, -2**70, "x", Idx(5)])
        call(jc.kinds, b, P)
        call(jc.check_plain, b, P, any_int((seq,)), last_ts, R.choice([True, False, BadBool()]))
        call(jc.first_bad_crc, b, P, any_int((after, L)))
        starts = [R.randrange(L + 1) if R.random() < 0.8 else R.choice([-1, L + 1, 2**63 - 1, -2**63])
                  for _ in range(R.randint(0, 5))]
        ends = [max(-2**63, min(2**63 - 1, s + R.choice([0, 1, 5, -1, L, 2**62])))
                if R.random() < 0.3 else R.randrange(L + 1) for s in starts]
        call(jc.compact, b, i64(starts), i64(ends[:len(ends) - (R.random() < 0.1)]))
        limit = any_int((L, 0, 16, 32)) if R.random() < 0.5 else L
        sizes = plainrun.plain_capacity(max(0, min(L, limit if type(limit) is int else 0)))
        outs = [R.choice([bytearray(s)] * 17 + [bytearray(max(0, s - 1)), bytes(s),
                                                memoryview(bytearray(s + 1))[1:]]) for s in sizes]
        call(jc.fused_columns, b, limit, R.choice([seq, seq, any_int((seq,))]), last_ts,
             R.choice([True, False]), R.choice([seq, seq, any_int((seq, 0))]),
             R.choice([-1, -1, any_int((seq, seq + 2, -1))]), *outs)
        s, t = any_int((0, 2**64 - 1)), any_int((0, 2**64 - 1))
        key = R.choice([b"", b"k", b"k" * 255, b"k" * 256, "k", bytearray(b"k"), BytesSub(b"k")])
        body = R.choice([b"", os.urandom(R.randint(0, 30)), "b", memoryview(b"b")])
        got = call(jc.plain_record, s, t, key, body)
        if (type(s) is int and type(t) is int and 0 <= min(s, t) and max(s, t) < 2**64
                and type(key) is bytes and len(key) <= 255 and type(body) is bytes):
            want = outcome(plain_record_py, s, t, key, body)
            if got != want:
                report("plain_record differs from plain_record_py", (s, t, key, body), got, want)
        for f in (jc.crc32c, jc.crc32c_table, jc.valid_utf8):
            call(f, any_buf(buf))
    for f in (jc.walk, jc.kinds, jc.check_plain, jc.first_bad_crc, jc.compact, jc.fused_columns,
              jc.crc32c, jc.valid_utf8, jc.crc32c_table, jc.plain_record):
        for args in ((), (None,), (b"", None, None), (1, 2, b"", b"", 5), (Idx(3), 0, b"", b"")):
            call(f, *args)


# ------------------------------------------------------------------------------------- sockc

def fuzz_sockc():
    sc, why = sockio.load_c()
    if sc is None:
        print("zeps.broker._sockc not bound:", why)
        return
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.bind("inproc://fuzz-c")
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.ROUTING_ID, b"d1")
    dealer.connect("inproc://fuzz-c")
    pub = ctx.socket(zmq.PUB)           # reading it, or sending on a SUB, is a libzmq error
    pub.bind("inproc://fuzz-c-pub")
    sub = ctx.socket(zmq.SUB)
    sub.connect("inproc://fuzz-c-pub")
    h = router.underlying
    handles = [h] * 5 + [0, None, "x", 2**64, -2**70, 1.0, IntSub(h)]
    try:
        for _ in range(ITERS // 4):
            while router.poll(0) and R.random() < 0.7:        # keep its queue short
                router.recv(zmq.NOBLOCK)
            for _ in range(R.randint(0, 5)):
                try:
                    dealer.send_multipart([b"x" * R.randint(0, 5)] * R.randint(1, 3), zmq.NOBLOCK)
                except zmq.Again:
                    break
            time.sleep(0.001)
            known = R.choice([{b"d1"}, set(), None, [b"d1"], b"d1", 5, Contains(lambda x: 1 / 0),
                              Contains(lambda x: True)])
            args = [R.choice(handles), known, any_int((1, 4)), any_int((1 << 20, 0)),
                    any_int((0, 8)), R.choice([True, False, BadBool(), None])]
            call(sc.drain, *args[:R.choice([6, 6, 6, 5, 0])])
            call(sc.skip, R.choice(handles), any_int((1, 3)))
            call(sc.readable, R.choice(handles))
            out = [R.choice([(b"d1", b"hello"), (b"zz", b"x"), (b"d1",), b"d1", (b"d1", 5),
                             ("d1", b"x"), (b"d1", memoryview(b"mv")), (b"d1", noncontig(b"nc")),
                             (bytearray(b"d1"), b"y"), [b"d1", b"x"]]) for _ in range(R.randint(0, 4))]
            n = len(out)
            blocked = R.choice([None, set(), {b"d1"}, 5, Contains(lambda x: out.clear()),
                                Contains(lambda x: 1 / 0),
                                Contains(lambda x: out.append((b"d1", b"z")))])
            start = any_int((0, n))
            got = call(sc.send_all, R.choice(handles), out, start, blocked)
            if got[0] == "ok" and type(start) is int and start <= n < got[1][0]:
                report("send_all went past the pairs out held when called", got)
            while dealer.poll(0):
                dealer.recv_multipart()
            call(sc.drain, pub.underlying, set(), 3, 100, R.choice([0, 1]), R.choice([True, False]))
            call(sc.skip, pub.underlying, 2)
            call(sc.send_all, sub.underlying, [(b"a", b"b")], 0, None)
        for args in [(), (0,) * 10, (1,) * 9, ("x",) * 10]:
            call(sc.bind, *args)
    finally:
        for s in (router, dealer, pub, sub):
            s.close(0)
        ctx.term()


# ------------------------------------------------------------------------------- allocations

def fuzz_allocations(which):
    """Each function with valid arguments, its k-th allocation (only it, then all from it on)
    failing: the result, or MemoryError."""
    try:
        import _testcapi
    except ImportError:
        print("no _testcapi in this Python: --oom cannot run")
        return
    entries = [("k%d" % i, b"v" * i) for i in range(5)] + [("ü", b"x")]
    frame = b"\0" * 23 + B.encode_entries(entries)
    offs = B.walk(frame, 23, len(frame), len(entries))
    raw, _ = encode_batch([("k", b"body"), ("k2", b"b" * 40),
                           PublishBatch(4, B.encode_entries([("a", b"1"), ("b", b"22")] * 2))],
                          5, 1000, 1 << 20, None)
    buf = b"".join(raw)
    walked, after = jc.walk(buf, len(buf))
    pos = np.frombuffer(walked, dtype=np.int64).copy()
    sizes = plainrun.plain_capacity(len(buf))
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://fuzz-c-oom")
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.ROUTING_ID, b"d")
    dealer.connect("inproc://fuzz-c-oom")
    sc, _ = sockio.load_c()
    h = router.underlying

    def refill():
        while router.poll(0):
            router.recv(zmq.NOBLOCK)
        dealer.send(b"one")
        dealer.send_multipart([b"a", b"b", b"c"])
        dealer.send(b"two")
        router.poll(100)

    cases = {
        "batchc": {
            "walk": lambda: bc.walk(frame, 23, len(frame), len(entries), True),
            "build_rows": lambda: bc.build_rows(Message, frame, offs, 2**64 - 3, 1, "s", NO_HEADERS),
            "key_body_columns": lambda: bc.key_body_columns(frame, offs),
            "publish_frame": lambda: bc.publish_frame(
                [("k", b"x" * 10)] * 5 + [("big", b"y" * 500), ["k", "tëxt"],
                                          ("k", bytearray(b"b")), ("k", memoryview(b"m"))],
                0, 100, 100, batching._pair)},
        "journalc": {
            "walk": lambda: jc.walk(buf, len(buf)),
            "kinds": lambda: jc.kinds(buf, pos),
            "check_plain": lambda: jc.check_plain(buf, pos, 5, 999, True),
            "first_bad_crc": lambda: jc.first_bad_crc(buf, pos, after),
            "compact": lambda: jc.compact(buf, pos, pos + 10),
            "fused_columns": lambda: jc.fused_columns(buf, len(buf), 5, None, True, 0, -1,
                                                      *[bytearray(s) for s in sizes])[:8],
            "plain_record": lambda: jc.plain_record(5, 6, b"key", b"body")},
        "sockc": {} if sc is None else {
            "readable": lambda: sc.readable(h),
            "drain": lambda: sc.drain(h, {b"d"}, 10, 1 << 20, 2, False)[:2],
            "send_all": lambda: sc.send_all(h, [(b"d", b"x"), (b"d", bytearray(b"y")),
                                                (b"nobody", b"z")], 0, None)}}
    try:
        for module, fns in cases.items():
            if which and module not in which:
                continue
            for name, f in fns.items():
                if module == "sockc":
                    refill()
                want = f()
                seen = set()
                for k in range(120):
                    for stop in (k + 1, 0):
                        if module == "sockc":
                            refill()
                        gc.collect()
                        gc.disable()
                        _testcapi.set_nomemory(k, stop)
                        try:
                            got = f()
                            seen.add("ok")
                            if module != "sockc" and got != want:
                                report(f"{module}.{name}: {got!r} where an allocation failed, "
                                       f"{want!r} else")
                        except MemoryError:
                            seen.add("MemoryError")
                        except Exception as e:       # noqa: BLE001
                            seen.add(type(e).__name__)
                            if module != "sockc":    # (a socket's own error is an answer)
                                report(f"{module}.{name}: {e!r} where an allocation failed")
                        finally:
                            _testcapi.remove_mem_hooks()
                            gc.enable()
                print(f"{module}.{name}: {sorted(seen)}", flush=True)
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()


def main(argv):
    which = {a for a in argv if not a.startswith("-")}
    t0 = time.time()
    if "--oom" in argv:
        fuzz_allocations(which)
    else:
        for name, f in (("batchc", fuzz_batchc), ("journalc", fuzz_journalc), ("sockc", fuzz_sockc)):
            if not which or name in which:
                t = time.time()
                f()
                print(f"{name}: {time.time() - t:.1f}s", flush=True)
        for k, v in sorted(STATS.items()):
            print(f"  {k} {v}")
    print(f"{len(FINDINGS)} finding(s) in {time.time() - t0:.1f}s")
    return 1 if FINDINGS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
