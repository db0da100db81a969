"""Compaction beside a calm publish->deliver pair, through the broker (issue 18, item 2):

    python -m bench.bench_compaction [--messages 300000] [--keys 1000] [--segment-bytes 1M]
                                     [--interval 0.002] [--seconds 5]

A compacted stream of ``--messages`` messages over ``--keys`` keys (bodies of 32 bytes) is
written into a data directory before the broker starts: all its sealed segments are dirty. The
broker (``--compaction-check 1``) starts on it, and a calm pair (one publisher, one subscriber,
a stream of its own, one message every ``--interval`` s, the send time in the body) runs
throughout, in this process's threads:

1. *without*: ``--seconds`` s of the pair alone (the broker compacts only the streams it has
   open, and nothing has opened the compacted one);
2. *during*: a client attaches to the compacted stream (the broker opens it), the next check
   names it and the broker compacts it in its thread pool; the window ends when the broker
   logs ``compacted``.

It prints the command, the pair's p50/p99/max latency in both windows (the same run, the same
broker), the compaction's time and the journal's size before and after. The pair's messages
must all arrive, in order; the run fails otherwise.
"""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import threading
import time

import zmq

from bench.bench_broker import dealer, request
from bench.measure import percentile
from bench.peers import zeps_broker
from zeps import units
from zeps.protocol import commands as c
from zeps.protocol import decode, encode_publish

_BODY = struct.Struct(">QQ")
STREAM = "kv"


def build(data: str, messages: int, keys: int, segment_bytes: int) -> int:
    """The compacted stream, written directly; its log bytes."""
    from zeps.journal import DataDir
    from zeps.journal.settings import StreamSettings
    dd = DataDir(data)
    dd.create(STREAM, StreamSettings(segment_bytes=segment_bytes, compact=True))
    j = dd.journal(STREAM)
    body = b"v" * 32
    for start in range(0, messages, 1000):
        j.append_batch([(f"kv.{i % keys}", body) for i in range(start, min(messages,
                                                                            start + 1000))])
    j.sync()
    dd.close()
    return log_bytes(dd_path(data))


def dd_path(data: str) -> str:
    from zeps.journal.names import stream_dir_name
    return os.path.join(data, stream_dir_name(STREAM))


def log_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if n.endswith(".log"))


class Pair:
    """A paced publisher and a subscriber on stream ``calm``, raw ZEPS/1."""

    def __init__(self, endpoint: str, interval: float):
        self.ctx = zmq.Context()
        self.sub = dealer(self.ctx, endpoint)
        request(self.sub, c.Attach("calm"), c.AttachOk)
        self.sub.send(encode_credit(1 << 28))
        request(self.sub, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
        self.pub = dealer(self.ctx, endpoint)
        request(self.pub, c.Attach("calm"), c.AttachOk)
        self.interval = interval
        self.sent = 0
        self.got: list = []            # (sent at ns, latency s)
        self.problems: list = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._pub, self._sub)]
        for t in self.threads:
            t.start()

    def _pub(self) -> None:
        nxt = time.monotonic()
        while not self.stop.is_set():
            self.pub.send(encode_publish("calm.k", _BODY.pack(self.sent, time.monotonic_ns())))
            self.sent += 1
            nxt += self.interval
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _sub(self) -> None:
        while True:
            if not self.sub.poll(200):
                if self.stop.is_set() and len(self.got) >= self.sent:
                    return
                continue
            cmd = decode(self.sub.recv())
            now = time.monotonic_ns()
            if not isinstance(cmd, c.Deliver):
                continue
            n, at = _BODY.unpack(cmd.body)
            if n != len(self.got):
                self.problems.append(f"message {n}, expected {len(self.got)}")
            self.got.append((at, (now - at) / 1e9))

    def window(self, t0: int, t1: int) -> list:
        return sorted(lat for at, lat in self.got if t0 <= at < t1)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        self.ctx.destroy(0)


def encode_credit(n: int) -> bytes:
    from zeps.protocol import encode
    return encode(c.Credit(n))


def stats(lat: list) -> str:
    if not lat:
        return "no messages"
    return (f"p50 {percentile(lat, 50) * 1e3:.2f} ms  p99 {percentile(lat, 99) * 1e3:.2f} ms  "
            f"max {lat[-1] * 1e3:.2f} ms  ({len(lat)} messages)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--segment-bytes", type=units.parse_size, default=1 << 20)
    ap.add_argument("--interval", type=float, default=0.002)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    print("command: python -m bench.bench_compaction " + " ".join(sys.argv[1:] if argv is None
                                                                  else argv))
    tmp = tempfile.mkdtemp(prefix="zeps-bench-compaction-")
    data = os.path.join(tmp, "data")
    t = time.perf_counter()
    before = build(data, args.messages, args.keys, args.segment_bytes)
    print(f"compacted stream: {args.messages} messages over {args.keys} keys, {before} log "
          f"bytes, built in {time.perf_counter() - t:.1f} s")
    broker = zeps_broker(extra=("--compaction-check", "1"), data_dir=data)
    pair = None
    try:
        pair = Pair(broker.endpoint, args.interval)
        time.sleep(1.0)                                     # warm-up, not measured
        t0 = time.monotonic_ns()
        time.sleep(args.seconds)
        t1 = time.monotonic_ns()
        ctx = zmq.Context()
        opener = dealer(ctx, broker.endpoint)
        request(opener, c.Attach(STREAM), c.AttachOk)       # the broker opens it: compacts
        deadline = time.monotonic() + args.timeout
        while broker.log_count("compacted") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        t2 = time.monotonic_ns()
        ctx.destroy(0)
        time.sleep(0.5)
        pair.close()
        if broker.log_count("compacted") == 0:
            print("no compaction within the timeout:\n" + broker.log_tail())
            return 1
        after = log_bytes(dd_path(data))
        print(f"pair without compaction: {stats(pair.window(t0, t1))}")
        print(f"pair during compaction:  {stats(pair.window(t1, t2))}")
        print(f"compaction: {(t2 - t1) / 1e9:.2f} s from the ATTACH to the broker's log line "
              f"(at most 1 s of it waiting for the check); log bytes {before} -> {after}")
        lost = pair.sent - len(pair.got)
        if pair.problems or lost:
            print(f"PAIR FAILED: {lost} lost, {pair.problems[:3]}")
            return 1
        return 0
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
