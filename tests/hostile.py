"""Hostile ZEPS traffic for the fault tests: a seeded generator of bad, mutated and abusive
messages, and a child process that fires them at a broker (``python tests/hostile.py storm ...``).

:func:`hostile_messages` yields ZeroMQ messages (lists of frames) a careless or malicious client
could send: random bytes; valid frames of every command (server-only ones included) sent raw,
with flipped bytes, truncated, or followed by garbage; multi-frame messages; unknown command ids;
huge length fields; commands before ATTACH; and, between them, the abuse of the issue's "Found,
to fix" list done with well-formed commands: regexes that may backtrack, thousands of regex
subscriptions, ``CREDIT 1`` in a loop, ``CREDIT 2^64-1`` never read, ATTACH hopping between
streams, messages over the broker's ``--max-message``. It attaches only to :data:`STORM_STREAMS`
(creating a stream is tested on its own: see :func:`_flip`).

Child mode (one process, several DEALER connections)::

    python tests/hostile.py storm ENDPOINT SEED COUNT CONNECTIONS [MAX_MESSAGE [RATE]]

pre-generates COUNT messages, connects CONNECTIONS sockets, prints ``ready`` and waits for a
line on stdin, then sends them round-robin over the connections, at most RATE a second when
given (even-numbered connections read and count the broker's answers, odd ones never read).
Then every connection sends PING and reads up to its PING-OK (so when the child exits the broker
has handled all it sent), and it prints one JSON line: messages sent, answers read, and the
INVALID reasons the reading connections saw (by their text before the first ``:``, quote or
digit).
"""
from __future__ import annotations

import json
import os
import random
import re
import struct
import sys
import time
from typing import Iterator, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zeps.protocol import commands as c  # noqa: E402
from zeps.protocol import decode, encode  # noqa: E402

U64_MAX = 2**64 - 1
#: Regexes that may backtrack catastrophically: the broker must refuse them at SUBSCRIBE.
CATASTROPHIC = ["~(a|a)+$", "~(a+)+$", "~(a|aa)*b", r"~(\w+\s?)*$", "~(x+x+)+y"]
#: Stream names the storm attaches to (its own: never a well-behaved client's stream).
STORM_STREAMS = [f"storm-{i}" for i in range(12)]

_SAMPLES = None


def _samples() -> List[bytes]:
    """One valid encoding of every command, client and broker ones alike."""
    global _SAMPLES
    if _SAMPLES is None:
        _SAMPLES = [encode(cmd) for cmd in (
            c.Attach("storm-0"), c.AttachOk(), c.Subscribe("", 0), c.Subscribe("~^k", U64_MAX),
            c.SubscribeOk(), c.Credit(1000), c.Publish("k.1", b"body"), c.Deliver(1, "k", b"v"),
            c.Ping(), c.PingOk(), c.Detach(), c.DetachOk(), c.Invalid("nope"), c.SeqAtTime(1),
            c.SeqAtTimeOk(1), c.ConfirmSelect(), c.ConfirmSelectOk(0), c.Confirm(1, 1),
            c.StreamInfo(), c.StreamInfoOk(1, 2, 3, 4, 5), c.ListStreams(),
            c.ListStreamsOk(("a", "b")), c.DeliverTimestamps(), c.DeliverTimestampsOk(),
            c.DeliverTs(1, 2, "k", b"v"))]
    return _SAMPLES


def _flip(rng: random.Random, frame: bytes) -> bytes:
    """Flip 1 to 3 random bits. In an ATTACH only the head (signature, id, protocol, version)
    is hit: a flipped stream *name* is a valid ATTACH to a new stream, which the storm leaves to
    its own test (tests/test_isolation.py, new stream names)."""
    b = bytearray(frame)
    span = 10 if frame[2] == c.Attach.ID else len(b)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(span)
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def _huge_length(rng: random.Random) -> bytes:
    """A frame whose length field promises far more than it carries."""
    sig = b"\xaa\xa5"
    return rng.choice([
        sig + b"\x06\x03k.1" + struct.pack(">I", 0xFFFFFFFF) + b"short",        # PUBLISH body
        sig + b"\x06\xff" + b"k" * rng.randint(0, 20),                          # PUBLISH key
        sig + b"\x03\xff" + b"~" * rng.randint(0, 20),                          # SUBSCRIBE pattern
        sig + b"\x01\xff" + b"ZEPS",                                            # ATTACH protocol
        sig + b"\x01\x04ZEPS\x00\x01\xff" + b"s" * rng.randint(0, 20),          # ATTACH stream
        sig + b"\x07" + b"\x00" * 8 + b"\x01k" + struct.pack(">I", 0x7FFFFFFF),  # DELIVER
        sig + b"\x28\xff\xff" + b"\x01a" * rng.randint(0, 5),                   # LIST-STREAMS-OK
        sig + b"\x0c\xff" + b"r" * rng.randint(0, 20),                          # INVALID reason
    ])


def _abuse(rng: random.Random, max_message: int) -> List[bytes]:
    """A well-formed command used the way the issue's hostile clients used it."""
    # Subscribing a regex costs the broker a compile (~1 ms): a few, so the storm stays mostly
    # about malformed frames (tests/test_isolation.py floods regexes on purpose). Large
    # bodies are rare too.
    kind = rng.choices(range(11), weights=(10, 2, 2, 10, 10, 10, 10, 10, 10, 10, 1))[0]
    if kind == 0:
        return [encode(c.Attach(rng.choice(STORM_STREAMS)))]
    if kind == 1:
        return [encode(c.Subscribe(rng.choice(CATASTROPHIC), rng.choice([0, U64_MAX])))]
    if kind == 2:
        return [encode(c.Subscribe(f"~^k\\.{rng.randrange(100000)}$", 0))]    # regex flood
    if kind == 3:
        return [encode(c.Credit(1))]                                           # CREDIT 1 loop
    if kind == 4:
        return [encode(c.Credit(U64_MAX))]                                     # never read
    if kind == 5:
        return [encode(c.Subscribe("", rng.choice([0, U64_MAX, rng.randrange(1, 1000)])))]
    if kind == 6:
        return [encode(c.Publish(f"k.{rng.randrange(10)}", rng.randbytes(rng.randrange(64))))]
    if kind == 7:
        return [encode(c.Detach())]
    if kind == 8:
        return [encode(c.SeqAtTime(rng.choice([0, U64_MAX, rng.getrandbits(64)])))]
    if kind == 9:
        return [encode(rng.choice([c.ListStreams(), c.StreamInfo(), c.ConfirmSelect(),
                                   c.DeliverTimestamps(), c.Ping()]))]
    return [encode(c.Publish("big", bytes(max_message + rng.randrange(2))))]   # over the limit


def hostile_messages(seed: int, max_message: int = 1 << 16) -> Iterator[List[bytes]]:
    """An endless stream of hostile messages (each a list of frames), the same for the same
    ``seed``. ``max_message`` is the broker's ``--max-message``: the occasional large PUBLISH
    is that big, or one byte over (which the broker must reject)."""
    rng = random.Random(seed)
    samples = _samples()
    while True:
        kind = rng.randrange(100)
        if kind < 10:
            yield [rng.randbytes(rng.randrange(0, 64))]
        elif kind < 20:
            yield [rng.choice(samples)]                                    # server-only too
        elif kind < 40:
            yield [_flip(rng, rng.choice(samples))]
        elif kind < 52:
            frame = rng.choice(samples)
            yield [frame[:rng.randrange(len(frame))]]                      # truncated
        elif kind < 57:
            yield [rng.choice(samples) + rng.randbytes(rng.randrange(1, 16))]  # trailing bytes
        elif kind < 64:
            yield [rng.choice(samples) for _ in range(rng.randint(2, 4))]  # multi-frame
        elif kind < 70:
            yield [b"\xaa\xa5" + bytes((rng.choice([0, *range(13, 32), *range(44, 256)]),))
                   + rng.randbytes(rng.randrange(8))]                          # unknown id
        elif kind < 76:
            yield [_huge_length(rng)]
        else:
            yield _abuse(rng, max_message)


_REASON_HEAD = re.compile(r"^[^:0-9']*")


def reason_kind(reason: str) -> str:
    """An INVALID reason without its details, for counting (``truncated PUBLISH: ...`` ->
    ``truncated PUBLISH``)."""
    return _REASON_HEAD.match(reason).group(0).strip()


def storm(endpoint: str, seed: int, count: int, connections: int, max_message: int,
          rate: float) -> dict:
    """The child's work: see the module docstring."""
    import zmq

    gen = hostile_messages(seed, max_message)
    messages = [next(gen) for _ in range(count)]
    ctx = zmq.Context()
    socks = []
    for _ in range(connections):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDTIMEO, 60_000)
        s.connect(endpoint)
        socks.append(s)
    print("ready", flush=True)
    sys.stdin.readline()
    answers = 0
    reasons: dict = {}

    def drain(s):
        nonlocal answers
        while True:
            try:
                frame = s.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            answers += 1
            cmd = decode(frame)
            if isinstance(cmd, c.Invalid):
                k = reason_kind(cmd.reason)
                reasons[k] = reasons.get(k, 0) + 1

    start = time.monotonic()
    for i, msg in enumerate(messages):
        if rate and i % 100 == 0:                      # pacing: at most `rate` messages/s
            ahead = start + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        n = i % connections
        socks[n].send_multipart(msg)
        if n % 2 == 0 and i % 64 < connections:
            drain(socks[n])
    # Finally every connection, readers or not, PINGs and reads up to its PING-OK: when all
    # have it, the broker has handled everything this process sent.
    for s in socks:
        s.send(encode(c.Ping()))
    for n, s in enumerate(socks):
        while True:
            if not s.poll(60_000):
                raise SystemExit(f"no PING-OK on connection {n} within 60 s")
            answers += 1
            cmd = decode(s.recv())
            if isinstance(cmd, c.PingOk):
                break
            if isinstance(cmd, c.Invalid) and n % 2 == 0:
                k = reason_kind(cmd.reason)
                reasons[k] = reasons.get(k, 0) + 1
    for s in socks:
        s.close(0)
    ctx.term()
    return {"sent": count, "answers": answers, "reasons": reasons}


if __name__ == "__main__":
    if len(sys.argv) < 6 or sys.argv[1] != "storm":
        sys.exit("usage: hostile.py storm ENDPOINT SEED COUNT CONNECTIONS [MAX_MESSAGE [RATE]]")
    _endpoint, _seed, _count, _conns = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    _max = int(sys.argv[6]) if len(sys.argv) > 6 else 1 << 16
    _rate = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    print(json.dumps(storm(_endpoint, _seed, _count, _conns, _max, _rate)), flush=True)
