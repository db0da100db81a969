"""What the journal's own housekeeping costs the thread that appends (the broker's loop): index
entries and segment rolls, one of issue 20's suspects for the latency tail.

    python -m bench.bench_roll [--rate 10000] [--seconds 8] [--segment-kib 1024] [--size 100]

One message per append, paced at ``--rate`` appends/s as the broker journals a paced publisher
(one message per round), into a journal of ``--segment-kib`` segments (small, so that it rolls
several times in a run; the broker's default is 256 MiB) under each fsync policy: ``interval``
with ``Journal.sync`` called every 50 ms from another thread (the broker's group commit) and
``always``. Each append is timed on the appending thread and put in one row by what it did
besides writing its record: nothing (the baseline), an index entry (every
``index_interval_bytes`` of log, two more ``os.write``), or a roll (``fdatasync`` of the sealed
segment except under ``never``, the producer snapshot written and synced, the new segment's files
created and the directory synced). The last lines say how often a roll comes with the broker's
default segment size at this rate and size.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

from bench.measure import percentile
from bench.systems import pace
from zeps.journal import Journal, JournalConfig

SYNC_INTERVAL = 0.05            # the broker's --fsync-interval default
DEFAULT_SEGMENT = JournalConfig().segment_bytes


def filesystem(path: str) -> str:
    """The type of the filesystem ``path`` is on (``/proc/mounts``): tmpfs makes every fsync
    free, and the figures meaningless for a disk."""
    best, kind = "", "?"
    real = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mount = parts[1]
            if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                best, kind = mount, parts[2]
    return kind


def run(base: str, policy: str, rate: float, seconds: float, segment: int, size: int):
    """{row: [microseconds, ...]} and the bytes one record takes in the log."""
    j = Journal.open(f"{base}/{policy}", JournalConfig(segment_bytes=segment, fsync=policy))
    stop = threading.Event()

    def syncer():
        while not stop.wait(SYNC_INTERVAL):
            j.sync()
    thread = threading.Thread(target=syncer, daemon=True)
    if policy == "interval":
        thread.start()
    rows = {"append only": [], "append + index entry": [], "append that rolled the segment": []}
    item = [("bench.key", b"x" * size)]
    perf = time.perf_counter_ns
    segs, entries = len(j._segs), len(j._active.index)
    try:
        for _ in pace(rate, seconds):
            t = perf()
            j.append_batch(item)
            dt = (perf() - t) / 1000
            if len(j._segs) != segs:
                segs, entries = len(j._segs), len(j._active.index)
                rows["append that rolled the segment"].append(dt)
            elif len(j._active.index) != entries:
                entries = len(j._active.index)
                rows["append + index entry"].append(dt)
            else:
                rows["append only"].append(dt)
        record = j._active.size // max(1, j.last_seq - j._active.first_seq + 1)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        j.close()
    return rows, record


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--segment-kib", type=int, default=1024)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--dir", default=None, help="where to put the journals (a real disk)")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="zeps-bench-roll-", dir=args.dir)
    try:
        print(f"One {args.size} B message per append at {args.rate:,.0f} appends/s for "
              f"{args.seconds:g} s per policy, {args.segment_kib} KiB segments, on "
              f"{filesystem(base)} ({os.path.dirname(base)}); "
              "microseconds on the appending thread\n")
        print("| fsync | append | count | p50 | p99 | max |")
        print("|---|---|---:|---:|---:|---:|")
        record = 0
        for policy in ("interval", "always"):
            rows, record = run(base, policy, args.rate, args.seconds, args.segment_kib << 10,
                               args.size)
            for name, v in rows.items():
                v.sort()
                cells = (" | ".join(f"{percentile(v, p):,.0f}" for p in (50, 99)) + f" | "
                         f"{v[-1]:,.0f}") if v else "— | — | —"
                print(f"| {policy} | {name} | {len(v):,} | {cells} |", flush=True)
        per_roll = DEFAULT_SEGMENT / (record * args.rate)
        print(f"\n* A record of a {args.size} B message takes {record} B of log: at "
              f"{args.rate:,.0f} msg/s a default segment ({DEFAULT_SEGMENT >> 20} MiB) rolls "
              f"every {per_roll:,.0f} s, once per {DEFAULT_SEGMENT // record:,} messages.")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
