"""What a subscriber's CPU per message does to everyone's tail: the same paced publisher and
broker, read by subscribers that differ only in their own work per message, in one run.

    python -m bench.bench_sub_cost [--rate 10000] [--seconds 6] [--reps 3] [--burn 15]

One broker (``python -m zeps.broker``, fsync ``interval``, its own session as in the suite), one
raw pyzmq publisher paced at ``--rate`` (``bench.systems.zeps_raw``: one PUBLISH per message, its
send time in the body), and in turn, within every repetition, three live subscribers of a fresh
stream:

* ``raw``: ``bench.systems.zeps_raw``'s reader (a blocking ``recv`` per DELIVER), the baseline;
* ``raw + burn``: the same reader spinning ``--burn`` microseconds of CPU per message before it
  records the delay (as much work as the SDK's reader adds, and nothing else different);
* ``sdk``: :class:`zeps.clients.Client` (``bench.systems.zeps_sdk``: ``sub.next()`` per message).

Each row gives the end-to-end delay percentiles (median of the repetitions, their min-max) and
the subscriber's CPU per message in its reading loop (user and system time of its process, from
the start signal to its last message). The publisher and the broker are the same code for
every row, so what differs between the rows is the subscriber's own work: on a machine of two
cores at 10k msg/s, ``raw + burn`` shows how much of the SDK's tail that work alone explains.
"""
from __future__ import annotations

import argparse
import itertools
import resource
import statistics
import sys
import time

from bench import peers
from bench.measure import percentile, run_workers
from bench.systems import zeps_raw, zeps_sdk

_streams = itertools.count()
KINDS = ("raw", "raw + burn", "sdk")


def _burning(burn_s: float):
    """``zeps_raw.consume`` with ``burn_s`` seconds of spinning per message: the delay of each
    message is recorded after its spin, as a reader that works on a message before the next
    (the patch lives in the subscriber's own forked process)."""
    clock = time.perf_counter

    def delay_after_burn(data, offset=0, _delay=zeps_raw.delay_ns):
        end = clock() + burn_s
        while clock() < end:
            pass
        return _delay(data, offset)

    def run(*a, **kw):
        zeps_raw.delay_ns = delay_after_burn
        return zeps_raw.consume(*a, **kw)
    return run


def _subscriber(kind, endpoint, stream, n, burn_s, *, ready, go):
    """One subscriber of ``kind``: (messages, delays, its (user, system) CPU per message from
    the start signal to its last message, in microseconds)."""
    consume = {"raw": zeps_raw.consume, "sdk": zeps_sdk.consume,
               "raw + burn": _burning(burn_s)}[kind]
    start = []

    def go_then_count():
        go()
        start.append(resource.getrusage(resource.RUSAGE_SELF))
    got, delays = consume(endpoint, stream, expect=n, latency=True, ready=ready,
                          go=go_then_count)
    end = resource.getrusage(resource.RUSAGE_SELF)
    return got, delays, ((end.ru_utime - start[0].ru_utime) / got * 1e6,
                         (end.ru_stime - start[0].ru_stime) / got * 1e6)


def _publisher(endpoint, stream, rate, seconds, *, ready, go):
    return zeps_raw.publish(endpoint, stream, size=100, seconds=seconds, rate=rate,
                            ready=ready, go=go)


def measure(kind: str, endpoint: str, rate: float, seconds: float, burn_s: float) -> dict:
    """One publisher and one subscriber of ``kind`` on a fresh stream (bench.measure's workers:
    both connected before the start signal); the subscriber's delay percentiles (ms) and CPU."""
    stream = f"subcost-{next(_streams)}"
    n = max(1, int(rate * seconds))
    (got, delays, cpu), _sent = run_workers(
        [(_subscriber, (kind, endpoint, stream, n, burn_s)),
         (_publisher, (endpoint, stream, rate, seconds))], timeout=seconds + 180)[0]
    if got != n:
        raise RuntimeError(f"{kind}: got {got} of {n} messages")
    d = sorted(delays)
    return {"p50": percentile(d, 50) / 1e6, "p99": percentile(d, 99) / 1e6,
            "p99.9": percentile(d, 99.9) / 1e6, "user": cpu[0], "sys": cpu[1]}


def _cell(values, fmt="{:.3f}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}–{fmt.format(max(values))})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--burn", type=float, default=15.0, help="microseconds of CPU per message")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.reps < 1 or args.burn < 0:
        ap.error("--rate, --seconds and --reps must be positive, --burn at least 0")
    figs = {k: [] for k in KINDS}
    with peers.zeps_broker() as broker:
        for _ in range(args.reps):
            for kind in KINDS:
                figs[kind].append(measure(kind, broker.endpoint, args.rate, args.seconds,
                                          args.burn / 1e6))
    n = max(1, int(args.rate * args.seconds))
    print(f"### A subscriber's work per message and the end-to-end tail, {args.rate:,.0f} msg/s\n")
    print(f"{n:,} messages of 100 B per measurement, {args.reps} repetition(s), raw pyzmq "
          f"publisher, fsync interval; delays in ms, the subscriber's CPU in microseconds per "
          f"message; median (min–max) of the repetitions.\n")
    print("| subscriber | p50 | p99 | p99.9 | its CPU, user | its CPU, system |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in KINDS:
        f = figs[kind]
        label = f"raw + {args.burn:g} µs burnt per message" if kind == "raw + burn" else kind
        print(f"| {label} | {_cell([x['p50'] for x in f])} | {_cell([x['p99'] for x in f])} | "
              f"{_cell([x['p99.9'] for x in f])} | {_cell([x['user'] for x in f], '{:.1f}')} | "
              f"{_cell([x['sys'] for x in f], '{:.1f}')} |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
