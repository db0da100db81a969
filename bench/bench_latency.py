"""Latency at a fixed rate: publish->deliver and publish->CONFIRM through the ZEPS broker, beside
publish->receive through ZeroMQ's own XSUB/XPUB proxy, in the same run.

    python -m bench.bench_latency [--rate 10000] [--seconds 3] [--size 100] [--fsync interval]

The publisher (its own process) sends at a fixed rate (paced on the monotonic clock, which all
processes of the machine share) with its send time in the body; the subscriber (this process)
records each message's delay. With confirms on, the publisher records the delay from each PUBLISH
to the CONFIRM that covers it (``fsync=interval`` makes that at most the interval plus the
broker's own work).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import struct
import sys
import tempfile
import time

import zmq

from bench.bench_broker import dealer, request, start_broker, start_proxy
from bench.systems import pace
from zeps.protocol import commands as c
from zeps.protocol import decode, encode, encode_publish

_TS = struct.Struct(">Q")


def _zeps_publisher(endpoint, stream, rate, n, size, go, confirms, out):
    ctx = zmq.Context()
    pub = dealer(ctx, endpoint)
    request(pub, c.Attach(stream), c.AttachOk)
    if confirms:
        request(pub, c.ConfirmSelect(), c.ConfirmSelectOk)
    pad = b"x" * max(0, size - 8)
    sent = []
    delays = []
    go.wait()
    acked = 0
    for _i in pace(rate, n / rate):
        t = time.monotonic_ns()
        sent.append(t)
        pub.send(encode_publish("lat", _TS.pack(t) + pad))
        while confirms and pub.poll(0):
            cmd = decode(pub.recv())
            if isinstance(cmd, c.Confirm):
                now = time.monotonic_ns()
                delays.extend(now - sent[k] for k in range(acked, cmd.count))
                acked = cmd.count
    while confirms and acked < n:
        cmd = decode(pub.recv())
        if isinstance(cmd, c.Confirm):
            now = time.monotonic_ns()
            delays.extend(now - sent[k] for k in range(acked, cmd.count))
            acked = cmd.count
    out.put(delays)
    pub.close()
    ctx.term()


def zeps_latency(endpoint, stream, rate, n, size, confirms):
    ctx = zmq.Context()
    sub = dealer(ctx, endpoint)
    request(sub, c.Attach(stream), c.AttachOk)
    request(sub, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
    sub.send(encode(c.Credit(1 << 40)))
    go, out = multiprocessing.Event(), multiprocessing.Queue()
    proc = multiprocessing.Process(target=_zeps_publisher,
                                   args=(endpoint, stream, rate, n, size, go, confirms, out))
    proc.start()
    time.sleep(0.3)
    go.set()
    delays = []
    recv = sub.recv
    for _ in range(n):
        frame = recv()
        now = time.monotonic_ns()
        klen = frame[11]
        delays.append(now - _TS.unpack_from(frame, 16 + klen)[0])
    confirm_delays = out.get()
    proc.join()
    sub.close()
    ctx.term()
    return delays, confirm_delays


def _proxy(out):
    """The proxy (default high-water marks) on two ephemeral ports of 127.0.0.1; ``(front,
    back)`` is put on ``out``."""
    ctx = zmq.Context()
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    xsub.bind("tcp://127.0.0.1:*")
    xpub.bind("tcp://127.0.0.1:*")
    out.put((xsub.getsockopt_string(zmq.LAST_ENDPOINT), xpub.getsockopt_string(zmq.LAST_ENDPOINT)))
    zmq.proxy(xsub, xpub)


def _proxy_publisher(front, rate, n, size, go, warm):
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.connect(front)
    while not warm.is_set():
        pub.send(b"warmup")
        time.sleep(0.05)
    go.wait()
    pad = b"x" * max(0, size - 8)
    for _ in pace(rate, n / rate):
        pub.send(b"L" + _TS.pack(time.monotonic_ns()) + pad)
    pub.close(linger=-1)
    ctx.term()


def proxy_latency(rate, n, size):
    proxy, front, back = start_proxy(_proxy)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"L")
    sub.setsockopt(zmq.SUBSCRIBE, b"warmup")
    sub.connect(back)
    go, warm = multiprocessing.Event(), multiprocessing.Event()
    pub = multiprocessing.Process(target=_proxy_publisher, args=(front, rate, n, size, go, warm))
    pub.start()
    while sub.recv() != b"warmup":
        pass
    warm.set()
    time.sleep(0.3)
    while sub.poll(0):
        sub.recv()
    go.set()
    delays = []
    while len(delays) < n:
        m = sub.recv()
        if m[:1] == b"L":
            delays.append(time.monotonic_ns() - _TS.unpack_from(m, 1)[0])
    pub.join()
    sub.close()
    ctx.term()
    proxy.terminate()
    proxy.join()
    return delays


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] / 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--fsync", choices=("always", "interval", "never"), default="interval")
    args = ap.parse_args(argv)
    n = max(10, int(args.rate * args.seconds))
    with tempfile.TemporaryDirectory() as tmp:
        proc, endpoint = start_broker(tmp, args.fsync)
        try:
            base = proxy_latency(args.rate, n, args.size)
            live, _ = zeps_latency(endpoint, "lat", args.rate, n, args.size, confirms=False)
            live_c, confirm = zeps_latency(endpoint, "latc", args.rate, n, args.size, confirms=True)
        finally:
            proc.terminate()
            proc.wait()
    print(f"{n} messages of {args.size} B at {args.rate:,.0f} msg/s, tcp 127.0.0.1, "
          f"{os.cpu_count()} cores, fsync={args.fsync}; latency in ms\n")
    print("| path | p50 | p99 | p99.9 | max |")
    print("|---|---:|---:|---:|---:|")
    for name, d in (("baseline: ZeroMQ XSUB/XPUB proxy, publish->receive", base),
                    ("ZEPS publish->deliver (live)", live),
                    ("ZEPS publish->deliver, publisher with confirms", live_c),
                    (f"ZEPS publish->CONFIRM (fsync={args.fsync})", confirm)):
        print(f"| {name} | {pct(d, 50):.3f} | {pct(d, 99):.3f} | {pct(d, 99.9):.3f} | "
              f"{max(d) / 1e6:.3f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
