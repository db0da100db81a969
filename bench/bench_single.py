"""Single messages beside batches, in one run against one broker: ``Client.publish`` in a loop
vs ``Client.publish_batch`` of 100 (with and without confirms), and ``for msg in sub`` /
``sub.next()`` vs ``sub.batches()`` over the same stream (issue 20: each single-message path
should reach 60% of its batch path).

    python -m bench.bench_single [--n 100000] [--size 100] [--reps 1] [--summary]

Publishing: a fresh stream per measurement, the time from the first call until every message
is confirmed (``wait_for_confirms``) or processed (``flush``). Reading: ``--n`` messages
published first (``publish_batch`` of 1000), then each reader reads all of them from the first
with a fresh client. A table (median of ``--reps``), or with ``--summary`` one line of
``name=value`` figures (msg/s, and the ratios of medians), for ``python -m bench.ab``.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time

from bench.bench_broker import start_broker
from zeps.clients import Client

_streams = itertools.count()


def _publish(ep: str, n: int, body: bytes, confirms: bool, batch: bool) -> float:
    with Client(ep, f"single-{next(_streams)}", confirms=confirms, timeout=120) as cl:
        t = time.perf_counter()
        if batch:
            group = [("k", body)] * 100
            for _ in range(n // 100):
                cl.publish_batch(group)
        else:
            pub = cl.publish
            for _ in range(n):
                pub("k", body)
        if confirms:
            cl.wait_for_confirms()
        else:
            cl.flush()
        return n / (time.perf_counter() - t)


def _read(ep: str, stream: str, n: int, how: str) -> float:
    with Client(ep, stream, timeout=120) as cl:
        t = time.perf_counter()
        sub = cl.subscribe("")
        if how == "iter":
            i = 0
            for _m in sub:
                i += 1
                if i == n:
                    break
        elif how == "next":
            nxt = sub.next
            for _ in range(n):
                nxt()
        else:
            i = 0
            for b in sub.batches():
                i += len(b)
                if i >= n:
                    break
        return n / (time.perf_counter() - t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--summary", action="store_true",
                    help="one line of name=value figures (for python -m bench.ab)")
    args = ap.parse_args(argv)
    n = max(1000, args.n // 1000 * 1000)
    body = b"x" * args.size
    with tempfile.TemporaryDirectory(prefix="zeps-bench-single-") as tmp:
        proc, ep = start_broker(tmp, "interval")
        try:
            with Client(ep, "single-read", timeout=120) as cl:
                group = [("k", body)] * 1000
                for _ in range(n // 1000):
                    cl.publish_batch(group)
                cl.flush()
            figs: dict = {}
            for _ in range(args.reps):
                for confirms in (True, False):
                    c = "_confirms" if confirms else ""
                    figs.setdefault(f"publish{c}", []).append(_publish(ep, n, body, confirms, False))
                    figs.setdefault(f"publish_batch100{c}", []).append(
                        _publish(ep, n, body, confirms, True))
                for how in ("iter", "next", "batches"):
                    figs.setdefault(f"read_{how}", []).append(_read(ep, "single-read", n, how))
        finally:
            proc.terminate()
            proc.wait()
    med = {k: statistics.median(v) for k, v in figs.items()}
    if not args.summary:
        print(f"{n:,} messages of {args.size} B per measurement, one broker (fsync interval), "
              f"median of {args.reps} repetition(s); msg/s\n")
        print("| single-message path | msg/s | its batch path | msg/s | single ÷ batch |")
        print("|---|---:|---|---:|---:|")
        for single, batch, a, b in (
                ("`publish()` per message, confirms", "`publish_batch` of 100, confirms",
                 "publish_confirms", "publish_batch100_confirms"),
                ("`publish()` per message", "`publish_batch` of 100", "publish",
                 "publish_batch100"),
                ("`for msg in sub`", "`sub.batches()`", "read_iter", "read_batches"),
                ("`sub.next()`", "`sub.batches()`", "read_next", "read_batches")):
            print(f"| {single} | {med[a]:,.0f} | {batch} | {med[b]:,.0f} | "
                  f"{med[a] / med[b]:.2f} |")
        return 0
    print(" ".join(f"{k}={v:.0f}" for k, v in med.items()) + " "
          f"ratio_publish_confirms={med['publish_confirms'] / med['publish_batch100_confirms']:.3f} "
          f"ratio_publish={med['publish'] / med['publish_batch100']:.3f} "
          f"ratio_iter={med['read_iter'] / med['read_batches']:.3f} "
          f"ratio_next={med['read_next'] / med['read_batches']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
