"""The broker core's work for one PUBLISH with warm and with cold CPU caches, beside a compiled
step measured the same two ways (issue 20).

    python -m bench.bench_cold [--n 5000] [--rounds 3] [--evict-mib 8] [--idle-streams 1000]
                               [--never-reading 1000]

Why each message's way through the broker (the stage table of ``bench_stages``: W→B4, about
100 µs at p50) takes several times the core's CPU time for it when measured back to back. In
one process, no sockets: a :class:`~zeps.broker.core.BrokerCore` over a real journal (fsync
``interval``, the latency scenario's) with one publisher and one live subscriber; a step is one
PUBLISH of 100 bytes received, journalled (its ``write`` included), routed, and its DELIVER
taken from the outbox, as the broker's shell does for a round of one message. Each step is
timed alone:

* **warm**: steps back to back, as a busy broker runs them;
* **cold**: after writing ``--evict-mib`` MiB (one byte per 64-byte line) between two steps, as
  the other processes and ZeroMQ's threads do on the broker's core between two messages at
  10k msg/s on a machine of two cores; the write is not timed.

The baseline is compiled code of a small working set, measured the same two ways: the journal's
CRC-32C (``google_crc32c``, C) of a 16 KiB buffer (a shorter step than the core's: one of the
same warm time would touch far more data, and data is what an eviction costs compiled code; the
table gives both the difference and the ratio). The kinds alternate in ``--rounds`` rounds;
percentiles of all steps of a kind, in microseconds.

The third kind is the same step on a core with ``--idle-streams`` other streams open, each with
a live subscriber: a round's work must not grow with the streams a broker holds (it did, until a
round visited every open stream's queue and replay list: 11.0 µs with one stream, 52.7 with
1,000, warm). The fourth is the same step beside ``--never-reading`` subscribers (each on a stream
of its own) whose pipes are full: congested clients, which must not cost the others a round's
scan of them each (75 µs, until their congestions ended from a heap of deadlines). The fifth is
the same step with ``--historical`` more subscribers of every key of the step's own stream that
never give credit: historical subscribers, which routing must not visit (each cost every
PUBLISH about 70 ns, until routing matched an index of the live subscribers alone).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import google_crc32c

from bench.measure import percentile, step_times
from zeps.broker.core import BrokerCore, CoreConfig
from zeps.journal import DataDir, JournalConfig
from zeps.protocol import commands as c
from zeps.protocol import encode, encode_publish

STREAM = "cold"
PUB, SUB = b"publisher", b"subscriber"


class _Core:
    """A core with a publisher and a live subscriber; :meth:`step` is one PUBLISH's round."""

    def __init__(self, path: str, idle_streams: int = 0, never_read: bool = False,
                 historical: int = 0):
        self.datadir = DataDir(path, JournalConfig(fsync="interval"))
        self.core = BrokerCore(self.datadir, CoreConfig(fsync="interval"),
                               log=lambda event, **kw: None)
        self.now = 1000.0
        self.delivered = 0
        self.frame = encode_publish("bench.key", b"x" * 100)
        self.full = set()                          # subscribers whose pipe is full: unsent
        for ident, cmd in ((PUB, c.Attach(STREAM)), (SUB, c.Attach(STREAM)),
                           (SUB, c.Subscribe("", c.LATEST_LIVE)), (SUB, c.Credit(1 << 40))):
            self.core.receive(ident, [encode(cmd)], self.now)
            self._round()
        for i in range(idle_streams):              # other streams, each with a live subscriber
            ident = b"idle%d" % i
            for cmd in (c.Attach(f"idle{i}"), c.Subscribe("", c.LATEST_LIVE), c.Credit(1 << 40)):
                self.core.receive(ident, [encode(cmd)], self.now)
                self._round()
            if never_read:                         # one message it does not take: congested
                self.full.add(ident)
                for cmd in (c.Attach(f"idle{i}"), c.Publish("k", b"x")):
                    self.core.receive(b"p" + ident, [encode(cmd)], self.now)
                    self._round()
        for i in range(historical):                # no credit: historical from the next PUBLISH
            for cmd in (c.Attach(STREAM), c.Subscribe("", c.LATEST_LIVE)):
                self.core.receive(b"hist%d" % i, [encode(cmd)], self.now)
                self._round()
        self.delivered = 0                         # the DELIVERs of the steps, from here on

    def _send(self) -> None:
        core = self.core
        for ident, frame in core.take_outbox():
            if ident in self.full:
                core.unsent(ident, frame, self.now)
            self.delivered += ident == SUB
        core.sent()

    def _round(self) -> None:
        done = self.core.round(self.now, self._send, False)
        for name in done.to_open:                  # the shell opens journals in its pool
            self.datadir.journal(name)
            self.core.opened(name, None, self.now)
            self.core.round(self.now, self._send, False)

    def step(self) -> None:
        self.now += 0.0001
        core = self.core
        core.receive(PUB, [self.frame], self.now)
        core.round(self.now, self._send, False)
        core.next_deadline()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000, help="steps of each kind per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--evict-mib", type=int, default=8,
                    help="MiB written between two cold steps (default 8)")
    ap.add_argument("--idle-streams", type=int, default=1000,
                    help="the same step on a core with this many other streams open, each with "
                         "a live subscriber (0: not measured; default 1000)")
    ap.add_argument("--never-reading", type=int, default=1000,
                    help="the same step on a core with this many subscribers (each on a stream "
                         "of its own) that never read (0: not measured; default 1000)")
    ap.add_argument("--historical", type=int, default=1000,
                    help="the same step with this many subscribers of every key of the same "
                         "stream that never give credit (0: not measured; default 1000)")
    ap.add_argument("--summary", action="store_true",
                    help="one line of name=value figures (p50s; for bench.ab) instead of the table")
    args = ap.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or args.evict_mib < 1 or min(
            args.idle_streams, args.never_reading, args.historical) < 0:
        ap.error("--n, --rounds and --evict-mib must be at least 1, --idle-streams, "
                 "--never-reading and --historical at least 0")
    tmp = tempfile.mkdtemp(prefix="zeps-bench-cold-")
    core = crowded = congested = behind = None
    try:
        core = _Core(os.path.join(tmp, "one"))
        if args.idle_streams:
            crowded = _Core(os.path.join(tmp, "crowded"), args.idle_streams)
        if args.never_reading:
            congested = _Core(os.path.join(tmp, "congested"), args.never_reading, True)
        if args.historical:
            behind = _Core(os.path.join(tmp, "historical"), historical=args.historical)
        buf = bytes(16 << 10)
        crc = google_crc32c.value
        lines = bytearray(args.evict_mib << 20)
        zeros = bytes(len(lines) // 64)

        def evict():
            lines[::64] = zeros

        kinds = {"broker core: one PUBLISH received, journalled, routed (Python)": core.step,
                 "baseline: CRC-32C of 16 KiB (C)": lambda: crc(buf)}
        names = ["core", "crc"]
        if crowded is not None:
            kinds[f"the same, {args.idle_streams:,} other streams open (Python)"] = crowded.step
            names.append("crowded")
        if congested is not None:
            kinds[f"the same, {args.never_reading:,} subscribers of other streams that never "
                  f"read (Python)"] = congested.step
            names.append("congested")
        if behind is not None:
            kinds[f"the same, {args.historical:,} subscribers of the stream that give no "
                  f"credit (Python)"] = behind.step
            names.append("historical")
        for once in kinds.values():                   # warm up
            step_times(500, once)
        got = {(k, cold): [] for k in kinds for cold in (False, True)}
        for _ in range(args.rounds):
            for k, once in kinds.items():
                for cold in (False, True):
                    got[(k, cold)] += step_times(args.n, once, evict if cold else None)
        expected = 500 + 2 * args.n * args.rounds
        for c_ in (core, crowded, congested, behind):
            if c_ is not None and c_.delivered != expected:
                raise SystemExit(f"the subscriber got {c_.delivered} DELIVERs of {expected}")
        if args.summary:
            print(" ".join(f"{name}_{'cold' if cold else 'warm'}_p50_us="
                           f"{percentile(sorted(got[(k, cold)]), 50):.2f}"
                           for name, k in zip(names, kinds) for cold in (False, True)))
            return 0
        print(f"{args.n} steps of each kind x {args.rounds} rounds; cold: {args.evict_mib} MiB "
              f"written between two steps; microseconds per step\n")
        print("| step | warm p50 | warm p99 | cold p50 | cold p99 | cold − warm (p50) | "
              "cold ÷ warm (p50) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for k in kinds:
            w, cd = sorted(got[(k, False)]), sorted(got[(k, True)])
            w50, c50 = percentile(w, 50), percentile(cd, 50)
            print(f"| {k} | {w50:.1f} | {percentile(w, 99):.1f} | {c50:.1f} | "
                  f"{percentile(cd, 99):.1f} | {c50 - w50:.1f} | {c50 / w50:.2f} |")
    finally:
        for c_ in (core, crowded, congested, behind):
            if c_ is not None:
                c_.datadir.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
