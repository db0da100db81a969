"""Broker throughput, end to end over tcp on 127.0.0.1, beside a plain ZeroMQ proxy in the same run.

* ZEPS live: one publisher, one subscriber with ample credit, messages of ``--size`` bytes; time from
  the first PUBLISH to the last DELIVER (every message journalled before it is delivered).
* ZEPS replay: a late subscriber reads the whole stream back from the journal.
* Baseline: ZeroMQ's own XSUB/XPUB proxy (``zmq.proxy``) in a child process — the no-journal,
  no-sequence, drop-when-slow PUB-SUB that ZEPS replaces — with the same messages (HWM 0 so that
  it does not drop them either).

    python -m bench.bench_broker [--n 200000] [--size 100] [--fsync interval]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import select
import subprocess
import sys
import tempfile
import threading
import time

import zmq

from zeps.protocol import commands as c
from zeps.protocol import decode, encode, encode_publish


def start_broker(data_dir: str, fsync: str):
    proc = subprocess.Popen([sys.executable, "-m", "zeps.broker", "--endpoint", "tcp://127.0.0.1:*",
                             "--data-dir", data_dir, "--fsync", fsync, "--log-level", "warning"],
                            stdout=subprocess.PIPE)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    line = proc.stdout.readline().decode() if ready else ""
    if "listening on " not in line:
        proc.kill()
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, line.split("listening on ", 1)[1].split()[0]


def dealer(ctx, endpoint):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 0)
    s.connect(endpoint)
    return s


def request(sock, cmd, expect):
    sock.send(encode(cmd))
    while True:
        got = decode(sock.recv())
        if isinstance(got, expect):
            return got


def zeps_live(endpoint, n, size):
    ctx = zmq.Context()
    sub = dealer(ctx, endpoint)
    request(sub, c.Attach("bench"), c.AttachOk)
    request(sub, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
    sub.send(encode(c.Credit(1 << 62)))
    pub = dealer(ctx, endpoint)
    request(pub, c.Attach("bench"), c.AttachOk)
    frame = encode_publish("bench.key", b"x" * size)

    def publish():
        send = pub.send
        for _ in range(n):
            send(frame)

    t0 = time.perf_counter()
    th = threading.Thread(target=publish)
    th.start()
    last = 0
    recv = sub.recv
    for _ in range(n):
        f = recv()
        last = int.from_bytes(f[3:11], "big")
    dt = time.perf_counter() - t0
    th.join()
    assert last == n, last
    pub.close()
    sub.close()
    ctx.term()
    return dt


def zeps_replay(endpoint, n):
    ctx = zmq.Context()
    sub = dealer(ctx, endpoint)
    request(sub, c.Attach("bench"), c.AttachOk)
    t0 = time.perf_counter()
    request(sub, c.Subscribe("", 0), c.SubscribeOk)
    sub.send(encode(c.Credit(1 << 62)))
    last = 0
    for _ in range(n):
        last = int.from_bytes(sub.recv()[3:11], "big")
    dt = time.perf_counter() - t0
    assert last == n, last
    sub.close()
    ctx.term()
    return dt


def _proxy(front, back):
    ctx = zmq.Context()
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    for s in (xsub, xpub):
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
    xsub.bind(front)
    xpub.bind(back)
    zmq.proxy(xsub, xpub)


def zmq_proxy_baseline(n, size):
    front, back = "tcp://127.0.0.1:57471", "tcp://127.0.0.1:57472"
    proc = multiprocessing.Process(target=_proxy, args=(front, back), daemon=True)
    proc.start()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(back)
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.connect(front)
    # Wait until the subscription has reached the publisher through the proxy.
    while True:
        pub.send(b"warmup")
        if sub.poll(100):
            while sub.poll(50):
                sub.recv()
            break
    msg = b"bench.key" + b"x" * size
    t0 = time.perf_counter()
    th = threading.Thread(target=lambda: [pub.send(msg) for _ in range(n)])
    th.start()
    for _ in range(n):
        sub.recv()
    dt = time.perf_counter() - t0
    th.join()
    pub.close()
    sub.close()
    ctx.term()
    proc.terminate()
    return dt


def main(argv=None):
    ap = argparse.ArgumentParser(description="ZEPS broker throughput beside a plain ZeroMQ proxy")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--fsync", choices=("always", "interval", "never"), default="interval")
    args = ap.parse_args(argv)
    n, size = args.n, args.size
    rows = []
    base = zmq_proxy_baseline(n, size)
    rows.append(("baseline: ZeroMQ XSUB/XPUB proxy (no journal, no sequence)", n / base, n * size / base))
    with tempfile.TemporaryDirectory() as tmp:
        proc, endpoint = start_broker(tmp, args.fsync)
        try:
            live = zeps_live(endpoint, n, size)
            rows.append((f"ZEPS live publish->deliver (fsync={args.fsync})", n / live, n * size / live))
            replay = zeps_replay(endpoint, n)
            rows.append(("ZEPS replay from the journal (late joiner, latest=0)", n / replay, n * size / replay))
        finally:
            proc.terminate()
            proc.wait()
    print(f"{n} messages of {size} B, one publisher, one subscriber, tcp 127.0.0.1, {os.cpu_count()} cores\n")
    print("| path | msgs/s | MB/s |")
    print("|---|---:|---:|")
    for name, rate, bps in rows:
        print(f"| {name} | {rate:,.0f} | {bps / 1e6:.1f} |")


if __name__ == "__main__":
    main()
