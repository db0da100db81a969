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
import statistics
import tempfile
import time

import zmq

from zeps.protocol import commands as c
from zeps.protocol import decode, encode, encode_publish

from bench.systems.zeps_raw import dealer


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


def request(sock, cmd, expect):
    sock.send(encode(cmd))
    while True:
        got = decode(sock.recv())
        if isinstance(got, expect):
            return got


def _zeps_publisher(endpoint, stream, n, size, go):
    ctx = zmq.Context()
    pub = dealer(ctx, endpoint)
    request(pub, c.Attach(stream), c.AttachOk)
    frame = encode_publish("bench.key", b"x" * size)
    go.wait()
    send = pub.send
    for _ in range(n):
        send(frame)
    request(pub, c.StreamInfo(), c.StreamInfoOk)
    pub.close()
    ctx.term()


def zeps_live(endpoint, stream, n, size):
    """Publisher in its own process; the subscriber here counts until the n-th DELIVER."""
    ctx = zmq.Context()
    sub = dealer(ctx, endpoint)
    request(sub, c.Attach(stream), c.AttachOk)
    request(sub, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
    sub.send(encode(c.Credit(1 << 62)))
    go = multiprocessing.Event()
    proc = multiprocessing.Process(target=_zeps_publisher, args=(endpoint, stream, n, size, go))
    proc.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    go.set()
    last = 0
    recv = sub.recv
    for _ in range(n):
        last = int.from_bytes(recv()[3:11], "big")
    dt = time.perf_counter() - t0
    proc.join()
    assert last == n, last
    sub.close()
    ctx.term()
    return dt


def zeps_replay(endpoint, stream, n):
    ctx = zmq.Context()
    sub = dealer(ctx, endpoint)
    request(sub, c.Attach(stream), c.AttachOk)
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


def _proxy(out):
    """The proxy on two ephemeral ports of 127.0.0.1; ``(front, back)`` is put on ``out``."""
    ctx = zmq.Context()
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    for s in (xsub, xpub):
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
    xsub.bind("tcp://127.0.0.1:*")
    xpub.bind("tcp://127.0.0.1:*")
    out.put((xsub.getsockopt_string(zmq.LAST_ENDPOINT), xpub.getsockopt_string(zmq.LAST_ENDPOINT)))
    zmq.proxy(xsub, xpub)


def start_proxy(target=None):
    """``target`` (default :func:`_proxy`) in a child process: (the process, front, back)."""
    q = multiprocessing.Queue()
    proxy = multiprocessing.Process(target=target or _proxy, args=(q,), daemon=True)
    proxy.start()
    try:
        front, back = q.get(timeout=30)
    except Exception:
        proxy.kill()
        proxy.join()
        raise SystemExit("the ZeroMQ proxy did not start (bind failed?)") from None
    return proxy, front, back


def _proxy_publisher(front, n, size, go, warm):
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.connect(front)
    while not warm.is_set():            # until the subscription has come through the proxy
        pub.send(b"warmup")
        time.sleep(0.05)
    go.wait()
    msg = b"bench.key" + b"x" * size
    send = pub.send
    for _ in range(n):
        send(msg)
    pub.close(linger=-1)
    ctx.term()


def zmq_proxy_baseline(n, size):
    proxy, front, back = start_proxy()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"bench.key")
    sub.connect(back)
    go, warm = multiprocessing.Event(), multiprocessing.Event()
    pub = multiprocessing.Process(target=_proxy_publisher, args=(front, n, size, go, warm))
    pub.start()
    sub.setsockopt(zmq.SUBSCRIBE, b"warmup")
    while sub.recv() != b"warmup":
        pass
    warm.set()
    time.sleep(0.3)
    while sub.poll(0):
        sub.recv()
    t0 = time.perf_counter()
    go.set()
    recv = sub.recv
    for _ in range(n):
        recv()
    dt = time.perf_counter() - t0
    pub.join()
    sub.close()
    ctx.term()
    proxy.terminate()
    proxy.join()
    return dt


def main(argv=None):
    ap = argparse.ArgumentParser(description="ZEPS broker throughput beside a plain ZeroMQ proxy")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--fsync", choices=("always", "interval", "never"), default="interval")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    n, size = args.n, args.size
    base, live, replay = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        proc, endpoint = start_broker(tmp, args.fsync)
        try:
            for run in range(args.runs):      # interleaved, so drift hits both sides alike
                base.append(zmq_proxy_baseline(n, size))
                live.append(zeps_live(endpoint, f"bench{run}", n, size))
                replay.append(zeps_replay(endpoint, f"bench{run}", n))
        finally:
            proc.terminate()
            proc.wait()
    med = statistics.median
    rows = [("baseline: ZeroMQ XSUB/XPUB proxy (no journal, no sequence)", n / med(base),
             n * size / med(base)),
            (f"ZEPS live publish->deliver (fsync={args.fsync})", n / med(live), n * size / med(live)),
            ("ZEPS replay from the journal (late joiner, latest=0)", n / med(replay), n * size / med(replay))]
    print(f"{n} messages of {size} B, one publisher process, one subscriber process, tcp 127.0.0.1, "
          f"{os.cpu_count()} cores, median of {args.runs} interleaved runs\n")
    print("| path | msgs/s | MB/s |")
    print("|---|---:|---:|")
    for name, rate, bps in rows:
        print(f"| {name} | {rate:,.0f} | {bps / 1e6:.1f} |")


if __name__ == "__main__":
    main()
