"""ZEPS through bare pyzmq DEALER sockets: the broker's capacity, with the least client work.

Publishers send pre-encoded PUBLISH-BATCH frames of :data:`BATCH` messages flat out (the
suite's :func:`~bench.systems.messages`, cut into frames once before the start; paced ones,
for latency, send one PUBLISH per message) and end with PING (or, with confirms, wait for the
CONFIRM that covers every message); consumers BATCH-SELECT (latency probes stay on DELIVER),
SUBSCRIBE, keep a credit window granted and read DELIVER-BATCH frames without decoding more than
their count and last key (and the stamp, for latency).
"""
from __future__ import annotations

import time

import zmq

from bench.systems import END_KEY, KEY, BURST, body, bursts, delay_ns, flat_out, groups, pace, stamped
from zeps.protocol import commands as c
from zeps.protocol import decode, encode, encode_publish
from zeps.protocol.batch import (DELIVER_BATCH_ID, DELIVER_HEAD_SIZE, batch_cost, batch_count,
                                 encode_publish_batch, walk)
from zeps.protocol.reasons import NOT_ATTACHED
from zeps.protocol.deliver import DELIVER_ID, KEY_OFFSET, KEYLEN_OFFSET, frame_cost, sequence_of

#: Credit a consumer keeps granted (the broker's default --max-credit is 64 MiB).
WINDOW = 32 << 20
#: Messages per PUBLISH-BATCH a flat-out publisher sends (divides bench.systems.BURST).
BATCH = 100
_END = END_KEY.encode()


def dealer(ctx, endpoint: str):
    """A DEALER connected to ``endpoint`` that never drops what it receives."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 0)
    s.connect(endpoint)
    return s


def request(sock, cmd, expect):
    """Send ``cmd`` and return the first reply of type ``expect`` (other frames are skipped)."""
    sock.send(encode(cmd))
    while True:
        got = decode(sock.recv())
        if isinstance(got, c.Invalid):
            if got.reason.startswith(NOT_ATTACHED):
                raise NotAttached(got.reason)
            raise RuntimeError(f"broker refused {cmd.NAME}: {got.reason}")
        if isinstance(got, expect):
            return got


class NotAttached(RuntimeError):
    """The broker forgot the session right after ATTACH-OK."""


def attached(ctx, endpoint: str, stream: str, tries: int = 10):
    """A DEALER attached to ``stream``, checked with a STREAM-INFO (answered only while attached).

    The check is needed: the broker may forget a session that a new connection opened right
    after another connection closed (it can reuse the closed one's descriptor, and the broker
    handles the stale disconnect event after the new ATTACH); then the DEALER attaches again.
    """
    for _ in range(tries):
        s = dealer(ctx, endpoint)
        request(s, c.Attach(stream), c.AttachOk)
        try:
            request(s, c.StreamInfo(), c.StreamInfoOk)
            return s
        except NotAttached:
            s.close()
    raise NotAttached(f"the broker forgot {tries} sessions in a row right after ATTACH-OK")


def publish(endpoint, stream, *, size, seconds, rate=0.0, confirms=False, end=False, limit=None,
            ready, go):
    ctx = zmq.Context()
    s = attached(ctx, endpoint, stream)
    if confirms:
        request(s, c.ConfirmSelect(), c.ConfirmSelectOk)
    pad = body(size)
    cycle = bursts([encode_publish_batch(g) for g in groups(size, BATCH)], BURST // BATCH)
    ready()
    go()
    send = s.send
    if rate:
        n = 0
        for _ in pace(rate, seconds):
            send(encode_publish(KEY, stamped(pad)))
            n += 1
    else:
        def burst():
            for frame in next(cycle):
                send(frame)
        n = flat_out(seconds, burst, limit)
    if confirms:
        while True:
            got = decode(s.recv())
            if isinstance(got, c.Confirm) and got.count >= n:
                break
    else:
        request(s, c.Ping(), c.PingOk)
    if end:
        send(encode_publish(END_KEY, pad))
        request(s, c.Ping(), c.PingOk)
    s.close()
    ctx.term()
    return n


def consume(endpoint, stream, *, expect=None, from_start=False, latency=False, pattern="",
            ready, go):
    """As every system's ``consume``; ``pattern``: the one pattern to subscribe (default: all)."""
    ctx = zmq.Context()
    s = attached(ctx, endpoint, stream)
    if not latency:
        request(s, c.BatchSelect(), c.BatchSelectOk)
    request(s, c.Subscribe(pattern, 0 if from_start else c.LATEST_LIVE), c.SubscribeOk)
    ready()
    go()
    s.send(encode(c.Credit(WINDOW)))
    recv, send = s.recv, s.send
    credit_msg = encode(c.Credit(WINDOW // 2))
    used = 0
    n = 0
    delays = []
    while expect is None or n < expect:
        frame = recv()
        if frame[2] == DELIVER_BATCH_ID:
            count = batch_count(frame)
            used += batch_cost(frame)
            if used >= WINDOW // 2:
                send(credit_msg)
                used -= WINDOW // 2
            last = walk(frame, DELIVER_HEAD_SIZE, len(frame), count, check_keys=False)[-2]
            if frame[last] == len(_END) and frame[last + 1:last + 1 + len(_END)] == _END:
                n += count - 1
                break
            n += count
            continue
        if frame[2] != DELIVER_ID:             # not a DELIVER (e.g. a PING-OK): skip
            continue
        used += frame_cost(frame)
        if used >= WINDOW // 2:
            send(credit_msg)
            used -= WINDOW // 2
        klen = frame[KEYLEN_OFFSET]
        if klen == len(_END) and frame[KEY_OFFSET:KEY_OFFSET + klen] == _END:
            break
        n += 1
        if latency:
            delays.append(delay_ns(frame, KEY_OFFSET + klen + 4))
    s.close()
    ctx.term()
    return n, delays


def start_probes(endpoint, stream, length, fractions):
    """Seconds from SUBSCRIBE (at sequence ``1 + fraction * length``, with credit) to its first
    DELIVER, one fresh attached client per fraction."""
    ctx = zmq.Context()
    out = []
    for f in fractions:
        seq = 1 + int(f * length)
        s = attached(ctx, endpoint, stream)
        t = time.perf_counter()
        s.send(encode(c.Subscribe("", seq - 1)))
        s.send(encode(c.Credit(WINDOW)))
        while True:
            frame = s.recv()
            if frame[2] == DELIVER_ID:
                break
        out.append(time.perf_counter() - t)
        if sequence_of(frame) != seq:
            raise RuntimeError(f"replay from {seq} began at {sequence_of(frame)}")
        s.close()
    ctx.term()
    return out
