"""The benchmark suite: ZEPS beside Redis Streams, NATS JetStream and raw ZeroMQ, in one run.

    python -m bench.suite [--quick] [--only SCENARIO ...] [--reps N] [--seconds S] [--out DIR]
                          [--summary]

Runs every scenario of :data:`SCENARIOS` one after the other (never two at once), starting and
stopping each server itself (127.0.0.1, ephemeral ports, temporary directories), and writes the
report to ``bench/out/suite-<UTC time>.md`` and ``bench/out/suite-latest.md``;
``python -m bench.report --take suite`` takes it into bench/results/suite.md and regenerates the
docs from it (:mod:`bench.docs`). ``--quick`` gives every scenario
tiny counts and one repetition: it checks that each one runs and reports (``make test`` does
that through tests/test_bench_smoke.py). A peer that is not installed is reported as such.
``--summary`` also prints the latency scenario's figures as ``name=value`` on one line
(:func:`bench.targets.latency_summary`), for ``python -m bench.ab -- -m bench.suite --only
latency --summary``: a change's effect on the issue's own measurement, run against the code
before it in turn.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

from bench import report
from bench.scenarios import Settings

#: Scenario modules of bench.scenarios, in the order they run.
SCENARIOS = ("ingest", "fanout", "replay", "latency", "zero_credit", "routing", "replay_start",
             "clients_rss")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts, one repetition")
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, metavar="SCENARIO",
                        help=f"run only these ({', '.join(SCENARIOS)})")
    parser.add_argument("--reps", type=int, help="repetitions of every measurement (default 3)")
    parser.add_argument("--seconds", type=float, help="publishing time of a throughput run")
    parser.add_argument("--out", type=Path, default=report.OUT,
                        help="directory of the report (default bench/out)")
    parser.add_argument("--summary", action="store_true",
                        help="also print the latency figures as name=value (for bench.ab)")
    args = parser.parse_args(argv)
    settings = Settings.tiny() if args.quick else Settings()
    if args.reps:
        settings = dataclasses.replace(settings, reps=args.reps)
    if args.seconds:
        settings = dataclasses.replace(settings, seconds=args.seconds)
    command = "python -m bench.suite " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    before = report.uptime()
    t0 = time.monotonic()
    sections, failed = [], []
    for name in SCENARIOS:
        if args.only and name not in args.only:
            continue
        print(f"--- {name}", flush=True)
        t = time.monotonic()
        try:
            tables = importlib.import_module(f"bench.scenarios.{name}").run(settings)
        except Exception:
            failed.append(name)
            text = traceback.format_exc()
            print(text, file=sys.stderr, flush=True)
            sections.append(f"<!-- scenario {name} -->\n### {name}\n\nFAILED:\n\n```\n{text}```\n")
            continue
        for table in tables:
            print(table.render(), flush=True)
        sections.append(f"<!-- scenario {name} -->\n" + "\n".join(t.render() for t in tables))
        print(f"--- {name}: {time.monotonic() - t:.1f}s", flush=True)
    text = (report.header(command, started, time.monotonic() - t0, before) + "\n"
            + "\n".join(sections))
    path = report.write(text, started, args.out)
    print(f"report: {os.path.relpath(path)}")
    if args.summary:
        from bench.targets import latency_summary
        print(latency_summary(text), flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
