"""Live fan-out alone: the suite's fan-out scenario for ZEPS's SDK readers, beside ZeroMQ's proxy.

    python -m bench.bench_fanout [--subscribers 10] [--size 100] [--reps 3] [--summary]

What the suite's "Live fan-out" table measures (:mod:`bench.scenarios.fanout`: one publisher
flat out, ``--subscribers`` subscriber processes reading live, delivered messages per second,
all subscribers together), for the SDK's two readers (``next()`` and ``batches()``) and, as the
baseline in the same run, ZeroMQ's XSUB/XPUB proxy, without the rest of the suite: quick enough
to pair two revisions of the broker with ``python -m bench.ab`` (``--summary``: one line of
``name=value`` figures, the medians of the repetitions). Beside the rate, the middle process's
CPU (the broker's, the proxy's; all its threads, from /proc) per delivered message, over all the
repetitions: what the broker's share of the machine costs, which the rate hides when the
publisher or the subscribers are what the two cores run out for.
"""
from __future__ import annotations

import argparse

from bench import peers
from bench.measure import cpu_seconds
from bench.scenarios import PROXY, SDK, SDK_BULK, Settings
from bench.scenarios.fanout import _delivered
from bench.systems import zmq_proxy


def _with_cpu(system, server, conn, s: Settings, size: int, subs: int):
    """The scenario's figure, and the middle process's CPU microseconds per delivered message."""
    counted: list = []
    before = cpu_seconds(server.pid)
    fig = _delivered(system, conn, s, size, subs, counted)
    return fig, (cpu_seconds(server.pid) - before) * 1e6 / max(1, sum(counted))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subscribers", type=int, default=10)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--deliveries", type=int, default=Settings.fanout_deliveries,
                    help="messages delivered in all per run (each run publishes this / "
                         "subscribers; default the suite's)")
    ap.add_argument("--summary", action="store_true",
                    help="one line of name=value figures instead of the table")
    args = ap.parse_args(argv)
    if min(args.subscribers, args.reps) < 1 or args.deliveries < args.subscribers or \
            args.size < 16:
        ap.error("--subscribers and --reps must be at least 1, --deliveries at least "
                 "--subscribers, --size at least 16")
    s = Settings(reps=args.reps, fanout_deliveries=args.deliveries)
    figs, cpu = {}, {}
    with peers.zeps_broker() as b:
        for system in (SDK, SDK_BULK):
            figs[system], cpu[system] = _with_cpu(system, b, b.endpoint, s, args.size,
                                                  args.subscribers)
    with zmq_proxy.serve() as p:
        figs[PROXY], cpu[PROXY] = _with_cpu(PROXY, p, p.conn, s, args.size, args.subscribers)
    med = {x: f.median for x, f in figs.items()}
    if args.summary:
        print(f"next_msgs={med[SDK]:.0f} batches_msgs={med[SDK_BULK]:.0f} "
              f"proxy_msgs={med[PROXY]:.0f} next_cpu_broker_us={cpu[SDK]:.3f} "
              f"batches_cpu_broker_us={cpu[SDK_BULK]:.3f} proxy_cpu_proxy_us={cpu[PROXY]:.3f}")
        return 0
    print(f"{args.subscribers} subscribers, {args.size} B, {args.reps} repetitions; delivered "
          f"messages per second, all subscribers together (median, min-max)\n")
    print("| reader | delivered | ÷ proxy | the middle process's CPU per delivered message |")
    print("|---|---:|---:|---:|")
    for system, name in ((SDK, "ZEPS SDK, next()"), (SDK_BULK, "ZEPS SDK, batches()"),
                         (PROXY, "ZeroMQ XSUB/XPUB proxy")):
        print(f"| {name} | {figs[system].text()} | {med[system] / med[PROXY]:.2f} | "
              f"{cpu[system]:.3f} µs |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
