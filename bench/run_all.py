"""``make bench``: every benchmark in ``bench/``, one after the other (never two at once: each
measures against its own baseline in the same run, and the machine has few cores).

    python -m bench.run_all [--quick] [--only NAME ...]

``suite`` is the benchmark suite beside Redis Streams, NATS JetStream and raw ZeroMQ
(:mod:`bench.suite`; it writes its report to ``bench/out/suite-*.md``); the others measure one
part each (codec, journal, Spark reader) or ZEPS alone beside a plain ZeroMQ baseline. Each
benchmark prints its own table (the figure beside its baseline); the outputs are also kept in
``bench/out/NAME.txt`` (what it printed, stderr too) and, for a full run that ended well,
``bench/out/NAME.md``: the run's header (time, exact command, machine, ``uptime`` before and
after) and what it printed on stdout, which ``python -m bench.report --take`` takes into
``bench/results`` and the docs (:mod:`bench.docs`). ``--quick`` gives every benchmark a small
count: it checks that each one runs and reports, which is what ``make test`` does through
``tests/test_bench_smoke.py``; its outputs are never taken into the docs.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

FLOOR_CLIENTS = "sdk,raw,pycb,pyproxy,pyproxy+10,pyproxy+20,proxy"
POLL_CLIENTS = "sdk,pyloop,pycb,pypoll,proxy"
MIXED_CLIENTS = "sdk,raw,sdk/raw,raw/sdk,proxy"
WRITE_CLIENTS = "sdk,pycb,pycbw,proxy"


def _stages_table(clients: str, runs: int, seconds: int = 3):
    """A ``bench_stages --table`` entry: ``clients`` in turn within each of ``runs``
    repetitions of ``seconds`` (quick: one of 0.3 s at 1,000 msg/s)."""
    return ("bench_stages", ["--client", clients, "--seconds", str(seconds), "--runs", str(runs),
                             "--table"],
            ["--client", clients, "--rate", "1000", "--seconds", "0.3", "--table"])


# name -> (module of bench/, full arguments, quick arguments). The suite writes its own report
# (bench/out/suite-*.md); bench_multicast needs root (a private network namespace).
BENCHMARKS = {
    "bench_codec": ("bench_codec", [], ["--n", "2000"]),
    "bench_columns": ("bench_columns", [], ["--n", "2000"]),
    "bench_journal": ("bench_journal", [], ["--quick"]),
    "bench_broker": ("bench_broker", [], ["--n", "2000"]),
    "bench_client": ("bench_client", [], ["--n", "2000"]),
    "bench_redis_py": ("bench_redis_py", [], ["--seconds", "0.1", "--runs", "1"]),
    "bench_latency": ("bench_latency", [], ["--rate", "1000", "--seconds", "0.5"]),
    "bench_wakeup": ("bench_wakeup", [], ["--n", "200", "--rounds", "1"]),
    "bench_roll": ("bench_roll", [], ["--seconds", "0.3", "--segment-kib", "64"]),
    "bench_stages": ("bench_stages", ["--client", "sdk,proxy", "--seconds", "3"],
                     ["--rate", "1000", "--seconds", "0.3"]),
    # the same with the spinning pacer of earlier runs (bench.systems.PACER), for comparison
    "bench_stages_spin": ("bench_stages", ["--client", "sdk,proxy", "--seconds", "3",
                                           "--pacer", "spin"],
                          ["--rate", "1000", "--seconds", "0.3", "--pacer", "spin"]),
    # the broker beside the proxy and the same forwarder in the broker's stack (pyzmq, gevent):
    # in the broker's loop style, with zmq.green, and that burning 10 and 20 µs more per message
    "bench_stages_floor": _stages_table(FLOOR_CLIENTS, 8),
    # the forwarder waiting on gevent's hub per message, run from its callbacks (the broker's
    # loop style), and waiting in zmq_poll
    "bench_stages_poll": _stages_table(POLL_CLIENTS, 8),
    # the broker and the proxy in turn, six times, with the paced publisher's own stalls
    "bench_stages_stalls": _stages_table("sdk,proxy", 6),
    # the same, 5 s a repetition, the broker's and subscriber's stamps in arrays (5c18a00)
    "bench_stages_tail": _stages_table("sdk,proxy", 8, seconds=5),
    # the broker with each pair of clients (the SDK's or raw publisher and subscriber), six times
    "bench_stages_clients": _stages_table(MIXED_CLIENTS, 6),
    # the broker beside the forwarder in its loop style, alone and writing each message to a
    # file (the floor of a compiled round for one PUBLISH), and the proxy, eight times
    "bench_stages_write": _stages_table(WRITE_CLIENTS, 8),
    "bench_cold": ("bench_cold", [], ["--n", "200", "--rounds", "1", "--idle-streams", "50",
                                        "--never-reading", "50", "--historical", "50"]),
    "bench_busy": ("bench_busy", [], ["--publishers", "1", "--seconds", "0.3"]),
    "bench_fanout": ("bench_fanout", [], ["--subscribers", "2", "--reps", "1",
                                          "--deliveries", "20000"]),
    "bench_timers": ("bench_timers", [], ["--sessions", "300", "--streams", "30",
                                          "--seconds", "12"]),
    "bench_single": ("bench_single", ["--n", "200000", "--reps", "3"], ["--n", "2000"]),
    "bench_tail": ("bench_tail", [], ["--rate", "1000", "--seconds", "0.3", "--reps", "1"]),
    "bench_sub_cost": ("bench_sub_cost", [], ["--rate", "1000", "--seconds", "0.3", "--reps", "1"]),
    # the machine alone: how often and how long a thread that only reads the clock loses its CPU
    "bench_hiccups": ("bench_hiccups", [], ["--seconds", "0.3"]),
    "suite": ("suite", [], ["--quick"]),
    "bench_spark": ("bench_spark", ["--n", "10000000"], ["--n", "20000"]),
    "bench_spark_batches": ("bench_spark", ["--n", "10000000", "--group", "100"],
                            ["--n", "20000", "--group", "100"]),
    "bench_multicast": ("bench_multicast", [], ["--n", "2000"]),
    "bench_kv_index": ("bench_kv_index", [], ["--keys", "20000"]),
    "bench_kv_snapshot": ("bench_kv_snapshot", ["--keys", "1000000"], ["--keys", "2000"]),
    "bench_consumers": ("bench_consumers", [], ["--messages", "2000"]),
    "bench_compaction": ("bench_compaction", [],
                         ["--messages", "20000", "--keys", "100", "--seconds", "0.5"]),
}
#: Benchmarks whose header names the peers' versions (they run redis-server or nats-server).
WITH_SERVERS = {"bench_redis_py", "bench_kv_snapshot", "bench_consumers"}
#: Benchmarks that need root; skipped (and said so) without it.
NEEDS_ROOT = {"bench_multicast"}
#: Heading levels an output's headings go down by in its .md (they sit under the docs' ###).
HEADING_SHIFT = 2


def markdown(stdout: str) -> str:
    """What a benchmark printed, as the body of its .md: its headings shifted down to sit under
    a section of the docs; an output without a table kept as it is, in a code block."""
    if "|---" not in stdout:
        return f"```\n{stdout.strip()}\n```\n"
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m[1]) + HEADING_SHIFT) + " ",
                  stdout.strip(), flags=re.M) + "\n"


def run(name: str, args, out_dir: Path, timeout: float, quick: bool = False) -> int:
    from bench import report
    module = BENCHMARKS[name][0]
    print(f"\n=== {name} {' '.join(args)}", flush=True)
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    when = datetime.datetime.now(datetime.timezone.utc)
    before = report.uptime()
    proc = subprocess.run([sys.executable, "-m", f"bench.{module}", *args], cwd=str(HERE.parent),
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)
    sys.stdout.write(proc.stdout)
    sys.stdout.write(proc.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.txt").write_text(proc.stdout + proc.stderr)
    elapsed = time.monotonic() - started
    if proc.returncode == 0 and not quick and module != "suite":
        command = shlex.join(["python", "-m", f"bench.{module}", *args])
        head = report.header(command, when, elapsed, before, servers=name in WITH_SERVERS)
        (out_dir / f"{name}.md").write_text(f"{head}\n{markdown(proc.stdout)}")
    print(f"=== {name}: exit {proc.returncode} in {elapsed:.1f}s", flush=True)
    return proc.returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all")
    parser.add_argument("--quick", action="store_true", help="tiny counts: check each runs")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per benchmark, seconds")
    args = parser.parse_args(argv)
    failed = []
    for name, (_, full, quick) in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        if name in NEEDS_ROOT and os.geteuid() != 0:
            print(f"\n=== {name}: skipped, it needs root (a private network namespace)")
            continue
        if run(name, quick if args.quick else full, HERE / "out", args.timeout,
               args.quick) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
