"""What makes the p99.9: the slow messages of the suite's latency path, grouped into stalls.

    python -m bench.bench_tail [--rate 10000] [--seconds 10] [--reps 2] [--threshold-ms 2]

The suite's latency scenario (:mod:`bench.scenarios.latency`: one publisher paced at ``--rate``,
100 B bodies stamped with their send time, one live subscriber) for the ZEPS SDK, the raw
pyzmq clients against the same broker, and ZeroMQ's XSUB/XPUB proxy, in turn within each of
``--reps`` repetitions of ``--seconds``. The subscriber records each message's delay in the
order the messages were sent (one publisher, delivered in order), so a message's index over
the rate is when it was sent. Messages at or above ``--threshold-ms`` that follow one another
within 100 messages (10 ms at 10k msg/s) are one stall (:func:`stalls`).

Per run: the p99 and p99.9, the stalls per second, the median time from one stall's start to
the next one's, their height (the slowest delay of each; median and max), the share of all
messages from a stall's first slow message to its last, and the p99.9 of the messages outside
them. When every system's stalls come at the same pace and height, they are the host's rather
than one system's. A run of 3 s (the suite's: 30,000 messages) has 30 messages in its p99.9;
its two to four stalls hold more than that at 10k msg/s, so they set its p99.9.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from typing import List, NamedTuple, Sequence

from bench import peers
from bench.measure import percentile
from bench.scenarios import PROXY, RAW, SDK, Settings, fresh_stream, pubsub
from bench.systems import zmq_proxy

#: Slow messages this many or fewer apart belong to one stall.
GAP = 100


class Stall(NamedTuple):
    """Slow messages close together: the indices of the first and the last, how many of the
    messages between them (both included) were slow, and the largest delay among them."""

    first: int
    last: int
    slow: int
    worst: int


def stalls(delays: Sequence[int], threshold: int, gap: int = GAP) -> List[Stall]:
    """The stalls in ``delays`` (in the messages' order): delays at or above ``threshold``,
    those at most ``gap`` messages apart grouped into one."""
    out: List[Stall] = []
    cur = None
    for i, d in enumerate(delays):
        if d < threshold:
            continue
        if cur is not None and i - cur[1] <= gap:
            cur = (cur[0], i, cur[2] + 1, max(cur[3], d))
        else:
            if cur is not None:
                out.append(Stall(*cur))
            cur = (i, i, 1, d)
    if cur is not None:
        out.append(Stall(*cur))
    return out


def outside(delays: Sequence[int], found: Sequence[Stall]) -> List[int]:
    """The delays of the messages outside every stall (from its first slow message to its
    last)."""
    keep = [True] * len(delays)
    for s in found:
        keep[s.first:s.last + 1] = [False] * (s.last + 1 - s.first)
    return [d for d, k in zip(delays, keep) if k]


def summary(delays: Sequence[int], rate: float, threshold: int) -> dict:
    """One run's figures (delays in ns; times in ms and s; None where there is nothing to
    measure: no delays, no stall, one stall for the time between two)."""
    if not delays:
        return {"p99": None, "p99.9": None, "per_s": 0.0, "every_s": None, "height": None,
                "highest": None, "share": 0.0, "p99.9_outside": None}
    d = sorted(delays)
    found = stalls(delays, threshold)
    rest = sorted(outside(delays, found))
    seconds = len(delays) / rate
    starts = [s.first / rate for s in found]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    spanned = sum(s.last + 1 - s.first for s in found)
    return {"p99": percentile(d, 99) / 1e6, "p99.9": percentile(d, 99.9) / 1e6,
            "per_s": len(found) / seconds,
            "every_s": statistics.median(gaps) if gaps else None,
            "height": statistics.median(s.worst for s in found) / 1e6 if found else None,
            "highest": max(s.worst for s in found) / 1e6 if found else None,
            "share": spanned / len(delays),
            "p99.9_outside": percentile(rest, 99.9) / 1e6 if rest else None}


def _ms(x) -> str:
    return "—" if x is None else f"{x:.3f}" if x < 1 else f"{x:.2f}"


def _s(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threshold-ms", type=float, default=2.0)
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.reps < 1 or args.threshold_ms <= 0:
        ap.error("--rate, --seconds, --reps and --threshold-ms must be positive")
    threshold = int(args.threshold_ms * 1e6)
    s = Settings()
    rows = []
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(peers.zeps_broker())
        proxy = stack.enter_context(zmq_proxy.serve()).conn
        systems = ((SDK, broker.endpoint), (RAW, broker.endpoint), (PROXY, proxy))
        for rep in range(1, args.reps + 1):
            for system, conn in systems:
                o = pubsub(system, conn, fresh_stream("tail"), s, size=100, consumers=1,
                           rate=args.rate, seconds=args.seconds, latency=True)
                if o.consumed != [o.stored]:
                    raise RuntimeError(f"{system.label}: got {o.consumed} of {o.stored}")
                rows.append((rep, system.label, summary(o.delays, args.rate, threshold)))
    n = int(args.rate * args.seconds)
    print(f"### The latency path's stalls, {args.rate:,.0f} msg/s\n")
    print(f"About {n:,} messages of 100 B per run, {args.reps} repetition(s), the systems in "
          f"turn within each; a stall: messages of {args.threshold_ms:g} ms or more, at most "
          f"{GAP} messages apart; delays in ms, times in s.\n")
    print("| run | system | p99 | p99.9 | stalls per s | from one stall to the next (median) "
          "| stall height, median (max) | messages in stalls | p99.9 outside them |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for rep, label, f in rows:
        height = "—" if f["height"] is None else f"{_ms(f['height'])} ({_ms(f['highest'])})"
        print(f"| {rep} | {label} | {_ms(f['p99'])} | {_ms(f['p99.9'])} | {f['per_s']:.2f} | "
              f"{_s(f['every_s'])} | {height} | {f['share'] * 100:.2f}% | "
              f"{_ms(f['p99.9_outside'])} |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
