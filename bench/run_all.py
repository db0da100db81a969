"""``make bench``: every benchmark in ``bench/``, one after the other (never two at once: each
measures against its own baseline in the same run, and the machine has few cores).

    python -m bench.run_all [--quick] [--only NAME ...]

``suite`` is the benchmark suite beside Redis Streams, NATS JetStream and raw ZeroMQ
(:mod:`bench.suite`; it writes its report to ``bench/out/suite-*.md``); the others measure one
part each (codec, journal, Spark reader) or ZEPS alone beside a plain ZeroMQ baseline. Each
benchmark prints its own table (the figure beside its baseline); the outputs are also kept in
``bench/out/NAME.txt``. ``--quick`` gives every benchmark a small count: it checks that each
one runs and reports, which is what ``make test`` does through ``tests/test_bench_smoke.py``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (full arguments, quick arguments)
BENCHMARKS = {
    "bench_codec": ([], ["--n", "2000"]),
    "bench_journal": ([], ["--quick"]),
    "bench_broker": ([], ["--n", "2000"]),
    "bench_client": ([], ["--n", "2000"]),
    "bench_latency": ([], ["--rate", "1000", "--seconds", "0.5"]),
    "bench_wakeup": ([], ["--n", "200", "--rounds", "1"]),
    "suite": ([], ["--quick"]),
    "bench_spark": (["--n", "10000000"], ["--n", "20000"]),
}


def run(name: str, args, out_dir: Path, timeout: float) -> int:
    print(f"\n=== {name} {' '.join(args)}", flush=True)
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=str(HERE.parent),
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    sys.stdout.write(proc.stdout)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.txt").write_text(proc.stdout)
    print(f"=== {name}: exit {proc.returncode} in {time.monotonic() - started:.1f}s", flush=True)
    return proc.returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all")
    parser.add_argument("--quick", action="store_true", help="tiny counts: check each runs")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per benchmark, seconds")
    args = parser.parse_args(argv)
    failed = []
    for name, (full, quick) in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        if run(name, quick if args.quick else full, HERE / "out", args.timeout) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
