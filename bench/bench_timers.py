"""How long the broker core's timers hold the loop, with many sessions and open streams.

    python -m bench.bench_timers [--sessions 10000] [--streams 1000] [--seconds 30]
                                 [--summary]

In one process, no sockets: a :class:`~zeps.broker.core.BrokerCore` over real journals with
``--sessions`` attached clients spread over ``--streams`` open streams (none silent long enough
to expire), whose timers run at each of their deadlines (:meth:`BrokerCore.next_deadline`, as
the shell wakes) over ``--seconds`` of the core's clock: expiry's look at the sessions (once
a second), retention's at the open streams (every ten seconds), the fsync schedule. Each
:meth:`BrokerCore.tick` is timed; reported: the longest, the 99th percentile and the number of
ticks, and the timers' time per second of the clock. A round's timer work is what every
message routed in that round waits for (issue 20): before the passes in slices
(``zeps/broker/sweeps.py``) one tick visited every session, or every open stream.

The baseline, in the same run, is the same core's work for one PUBLISH received, journalled
and routed to one live subscriber (the median of as many steps as ticks).
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time

from bench.measure import percentile
from zeps.broker.core import BrokerCore, CoreConfig
from zeps.journal import DataDir, JournalConfig
from zeps.protocol import commands as c
from zeps.protocol import encode, encode_publish


def _send(core) -> None:
    """What the shell's send does, every frame taken by its client."""
    core.take_outbox()
    core.sent()


def _crowded_core(path: str, sessions: int, streams: int):
    datadir = DataDir(path, JournalConfig(fsync="interval"))
    core = BrokerCore(datadir, CoreConfig(fsync="interval", max_clients=sessions + 2),
                      log=lambda event, **kw: None)
    now = 1000.0

    def run_round():
        done = core.round(now, lambda: _send(core), False)
        for name in done.to_open:                  # the shell opens journals in its pool
            datadir.journal(name)
            core.opened(name, None, now)
            core.round(now, lambda: _send(core), False)

    for i in range(sessions):
        core.receive(b"c%d" % i, [encode(c.Attach(f"s{i % streams}"))], now)
        if i % 100 == 99 or i == sessions - 1:
            run_round()
    for ident, frames in ((b"pub", [encode(c.Attach("s0"))]),
                          (b"sub", [encode(c.Attach("s0"))]),
                          (b"sub", [encode(c.Credit(1 << 40))]),
                          (b"sub", [encode(c.Subscribe("", c.LATEST_LIVE))])):
        core.receive(ident, frames, now)
        run_round()
    _send(core)
    if len(core.sessions) != sessions + 2 or len(core.streams) != streams:
        raise SystemExit(f"set-up: {len(core.sessions)} sessions, {len(core.streams)} streams")
    return datadir, core, now


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30.0, help="of the core's clock")
    ap.add_argument("--summary", action="store_true",
                    help="one line of name=value figures (for bench.ab) instead of the table")
    args = ap.parse_args(argv)
    if args.sessions < 1 or not 1 <= args.streams <= args.sessions or args.seconds <= 0:
        ap.error("--sessions at least 1, --streams from 1 to --sessions, --seconds above 0")
    tmp = tempfile.mkdtemp(prefix="zeps-bench-timers-")
    try:
        datadir, core, now = _crowded_core(os.path.join(tmp, "data"), args.sessions,
                                           args.streams)
        gc.collect()                                # as the broker after start-up (server.py)
        gc.freeze()
        clock = time.perf_counter
        ticks = []
        end = now + args.seconds
        core.tick(now)                              # the first passes start
        while True:
            now = max(now, core.next_deadline())
            if now > end:
                break
            t0 = clock()
            core.tick(now)
            ticks.append(clock() - t0)
            _send(core)
        frame = encode_publish("bench.key", b"x" * 100)
        steps = []
        for _ in range(len(ticks)):
            t0 = clock()
            core.receive(b"pub", [frame], now)
            core.round(now, lambda: _send(core), False)
            steps.append(clock() - t0)
        lost = len(core.sessions) != args.sessions + 2
        datadir.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if lost:
        raise SystemExit("sessions expired during the run")
    us = 1e6
    longest, p99 = max(ticks) * us, percentile(sorted(ticks), 99) * us
    per_s = sum(ticks) * us / args.seconds
    step = statistics.median(steps) * us
    if args.summary:
        print(f"tick_max_us={longest:.1f} tick_p99_us={p99:.1f} ticks={len(ticks)} "
              f"timers_us_per_s={per_s:.1f} publish_step_us={step:.2f}")
        return 0
    print(f"{args.sessions:,} sessions on {args.streams:,} open streams, {args.seconds:g} s of "
          f"the core's clock, the timers run at each deadline; microseconds\n")
    print("| figure | value |")
    print("|---|---:|")
    print(f"| longest tick (the timers' work in one round) | {longest:,.1f} |")
    print(f"| 99th percentile of the ticks | {p99:,.1f} |")
    print(f"| ticks | {len(ticks):,} |")
    print(f"| timers' time per second of the clock | {per_s:,.1f} |")
    print(f"| baseline: one PUBLISH's round, median | {step:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
