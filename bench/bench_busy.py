"""What a flood of publishes costs the broker's other work: its HTTP port's answers.

    python -m bench.bench_busy [--publishers 2] [--seconds 2] [--summary]

The broker's loop runs in gevent's hub (``zeps/broker/server.py``), beside the monitoring port
(``--monitor``), the greenlets that wait for the fsyncs and the signal handlers. ``--publishers``
processes publish flat out (``publish_batch`` of 1,000 messages of 100 B) for ``--seconds``
while this process asks ``/healthz`` every 10 ms and times each answer; the baseline, in the
same run, is the same requests to the same broker with nothing published. Reported: the
answers' p50, p90 and longest time, with and without the flood, and the publishers' messages
per second (what the flood got through meanwhile). ``--summary``: one line of ``name=value``
figures (for ``python -m bench.ab``).
"""
from __future__ import annotations

import argparse
import multiprocessing
import time
import urllib.request
from typing import List

from bench import peers
from bench.measure import percentile

BATCH = 1000
BODY = b"x" * 100
PAUSE = 0.01              # between two requests


def _publish(endpoint: str, until: float, out) -> None:
    from zeps.clients import Client
    n = 0
    with Client(endpoint, "flood") as cl:
        batch = [("k", BODY)] * BATCH
        while time.monotonic() < until:
            cl.publish_batch(batch)
            n += BATCH
        cl.flush()
    out.put(n)


def _answers(url: str, until: float) -> List[float]:
    """Milliseconds each ``/healthz`` took, asked every PAUSE seconds until ``until``."""
    took = []
    while time.monotonic() < until:
        t = time.monotonic()
        with urllib.request.urlopen(url + "/healthz", timeout=60) as r:
            r.read()
        took.append((time.monotonic() - t) * 1000)
        time.sleep(PAUSE)
    return sorted(took)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--publishers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--summary", action="store_true",
                    help="one line of name=value figures instead of the table")
    args = ap.parse_args(argv)
    if args.publishers < 1 or args.seconds <= 0:
        ap.error("--publishers must be at least 1 and --seconds above 0")
    ctx = multiprocessing.get_context("fork")
    with peers.zeps_broker(extra=("--monitor", "127.0.0.1:0")) as b:
        line = b.proc.stdout.readline().decode()
        if "monitoring on " not in line:
            raise SystemExit(f"no monitoring port: {line!r}")
        url = line.split("monitoring on ", 1)[1].strip()
        idle = _answers(url, time.monotonic() + args.seconds)
        out = ctx.Queue()
        start = time.monotonic()
        until = start + 0.3 + args.seconds          # the publishers connect meanwhile
        pubs = [ctx.Process(target=_publish, args=(b.endpoint, until, out))
                for _ in range(args.publishers)]
        for p in pubs:
            p.start()
        time.sleep(0.3)
        busy = _answers(url, until - PAUSE)
        published = sum(out.get(timeout=120) for _ in pubs)
        elapsed = time.monotonic() - start
        for p in pubs:
            p.join(60)
    rate = published / elapsed
    fig = {f"{name}_{k}_ms": percentile(v, p) if p else v[-1]
           for name, v in (("idle", idle), ("flood", busy))
           for k, p in (("p50", 50), ("p90", 90), ("max", None))}
    if args.summary:
        print(" ".join(f"{k}={v:.2f}" for k, v in fig.items()) + f" published_msgs={rate:.0f}")
        return 0
    print(f"/healthz every {PAUSE * 1000:g} ms for {args.seconds:g} s; {args.publishers} "
          f"publishers flat out meanwhile (publish_batch of {BATCH} x {len(BODY)} B): "
          f"{rate:,.0f} msg/s\n")
    print("| broker | answers | p50 (ms) | p90 (ms) | longest (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, v in (("idle (baseline)", idle), ("flooded", busy)):
        print(f"| {name} | {len(v)} | {percentile(v, 50):.2f} | {percentile(v, 90):.2f} | "
              f"{v[-1]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
