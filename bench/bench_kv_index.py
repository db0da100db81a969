"""Last-value index benchmark (issue 18, item 1): ``python -m bench.bench_kv_index [--keys N]``.

For ``N`` distinct keys (default 10^6; keys ``kv.<n>``, 10 bytes and more, bodies of 32 bytes) it
prints the command and:

1. the append rate into a journal with the index and without it (the index's cost per message);
2. the memory of the index: the resident set (RSS, ``/proc/self/statm``) of a fresh process
   before and after opening the journal, divided by ``N`` (bytes per key, everything included:
   the ``dict``, the keys, the packed values, the sorted key list);
3. the time to open the journal (rebuild the index) from its checkpoint (the state after a
   clean close) and from the log alone (no checkpoint: the state after a crash that lost it),
   each in a fresh process;
4. the checkpoint: its size, the time to write it at close, and the copy taken on the caller's
   thread at a roll (what the broker's loop pays; the encoding and writing run in a thread);
5. ``latest(key)`` and the first 1,000 messages of a prefix snapshot (per key);
6. compaction beside a writer (issue 18 item 2): a compacted stream of ``N`` messages over
   ``N / 10`` keys; while a thread compacts its sealed segments, the main thread (as the
   broker's loop) appends one message and reads it back every millisecond, a calm
   publish->deliver pair at the journal: that pair's p50/p99/max with and without the
   compaction running, and the compaction's time and bytes. (The broker runs the compaction the
   same way, off its loop; this measures what sharing the process - the GIL - costs the loop.)

Everything is written under a temporary directory (``--dir`` to choose where) and deleted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BODY = b"x" * 32
BATCH = 1000


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fill(path: str, n: int, key_index: bool) -> float:
    """Append ``n`` messages with distinct keys; returns messages per second."""
    from zeps.journal import Journal, JournalConfig
    j = Journal.open(path, JournalConfig(fsync="never", key_index=key_index))
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        j.append_batch([(f"kv.{k}", BODY) for k in range(i, min(n, i + BATCH))])
    dt = time.perf_counter() - t0
    j.close()
    return n / dt


def child(path: str) -> None:
    """In a fresh process: RSS before and after opening the journal, and the time it took."""
    from zeps.journal import Journal, JournalConfig
    import zeps.journal.lastvalue  # noqa: F401  (imported before the baseline)
    before = rss()
    t0 = time.perf_counter()
    j = Journal.open(path, JournalConfig(fsync="never", key_index=True))
    dt = time.perf_counter() - t0
    after = rss()
    n = j.key_count()
    t1 = time.perf_counter()
    keys, d = j._keys.copy_state()
    copy = time.perf_counter() - t1
    del keys, d
    t2 = time.perf_counter()
    for i in range(0, n, max(1, n // 1000)):
        j.latest(f"kv.{i}")
    latest = (time.perf_counter() - t2) / 1000
    t3 = time.perf_counter()
    got = 0
    for _ in j.snapshot("kv.1").records():
        got += 1
        if got == 1000:
            break
    snap = (time.perf_counter() - t3) / max(got, 1)
    t4 = time.perf_counter()
    j._keys_upto = 0                        # force the checkpoint at close
    j.close()
    close = time.perf_counter() - t4
    print(json.dumps({"open_s": dt, "rss_delta": after - before, "keys": n, "copy_s": copy,
                      "latest_s": latest, "snapshot_per_key_s": snap, "close_s": close}))


def pair_latencies(j, seconds: float, stop=None):
    """Append one message and read it back every ms for ``seconds`` (or until ``stop()``):
    the latencies in seconds."""
    out = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end and not (stop is not None and stop()):
        t0 = time.perf_counter()
        r = j.append(f"calm.{i % 10}", BODY)
        got = j.read_batch(r.sequence, 1)
        out.append(time.perf_counter() - t0)
        assert got[0].sequence == r.sequence
        i += 1
        time.sleep(max(0.0, 0.001 - (time.perf_counter() - t0)))
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def bench_compaction(base: str, n: int) -> None:
    import threading
    from zeps.journal import Journal, JournalConfig, compaction
    from zeps.journal import settings as stream_settings
    path = os.path.join(base, "compact")
    os.makedirs(path)
    stream_settings.write(path, stream_settings.StreamSettings(compact=True))
    j = Journal.open(path, JournalConfig(fsync="never", segment_bytes=4 << 20))
    keys = max(1, n // 10)
    for i in range(0, n, BATCH):
        j.append_batch([(f"kv.{k % keys}", BODY) for k in range(i, min(n, i + BATCH))])
    calm = pair_latencies(j, 2.0)
    done = []
    result = []

    def compact():
        try:
            result.append(compaction.compact(path, j.segment_seqs()[:-1]))
        except BaseException as exc:            # said below, not 600 s of pairs first
            result.append(exc)
        finally:
            done.append(time.perf_counter())
    t = threading.Thread(target=compact)
    t0 = time.perf_counter()
    t.start()
    during = pair_latencies(j, 600.0, stop=lambda: bool(done))
    t.join()
    res = result[0]
    if isinstance(res, BaseException):
        raise RuntimeError("the compaction beside the writer failed") from res
    j.reload_segments(res.segments)
    j.close()
    print(f"\ncompaction beside a writer: {n:,} messages over {keys:,} keys, 4 MiB segments\n")
    print("| calm pair (append + read back, every ms) | p50 | p99 | max | pairs |\n|---|---|---|---|---|")
    for name, xs in (("without compaction", calm), ("during compaction", during)):
        if not xs:      # a small journal can be compacted before the first pair is taken
            print(f"| {name} | — | — | — | 0 (compaction finished before the first pair) |")
            continue
        print(f"| {name} | {pct(xs, .5) * 1e6:.0f} µs | {pct(xs, .99) * 1e6:.0f} µs | "
              f"{max(xs) * 1e6:.0f} µs | {len(xs)} |")
    print(f"\ncompaction: {done[0] - t0:.2f} s, {len(res.segments)} segments rewritten, "
          f"{res.bytes_before / 2**20:.1f} -> {res.bytes_after / 2**20:.1f} MiB, "
          f"{res.removed:,} messages removed")


def run_child(path: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.bench_kv_index", "--child", path],
                         capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=10**6, help="distinct keys (default 10^6)")
    ap.add_argument("--dir", default=None, help="where to write (a temporary directory in it)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    n = args.keys
    print(f"$ {' '.join(['python -m bench.bench_kv_index'] + sys.argv[1:])}")
    base = tempfile.mkdtemp(dir=args.dir, prefix="zeps-kv-bench-")
    try:
        plain = fill(os.path.join(base, "plain"), n, False)
        path = os.path.join(base, "kv")
        indexed = fill(path, n, True)
        print(f"\n{n:,} distinct keys, {len(BODY)}-byte bodies, batches of {BATCH}\n")
        print("| measure | value |\n|---|---|")
        print(f"| append, no index | {plain:,.0f} msg/s |")
        print(f"| append, with the index | {indexed:,.0f} msg/s "
              f"({(1 / indexed - 1 / plain) * 1e6:+.2f} µs per message) |")
        ck = [f for f in os.listdir(path) if f.endswith(".keys")]
        size = os.path.getsize(os.path.join(path, ck[0])) if ck else 0
        warm = run_child(path)
        print(f"| open (index from its checkpoint) | {warm['open_s']:.2f} s |")
        print(f"| RSS of the index | {warm['rss_delta'] / 2**20:.1f} MiB: "
              f"{warm['rss_delta'] / n:.0f} bytes per key |")
        print(f"| checkpoint file | {size / 2**20:.1f} MiB ({size / n:.1f} bytes per key) |")
        print(f"| checkpoint written at close | {warm['close_s']:.2f} s |")
        print(f"| copy taken on the caller's thread at a roll | {warm['copy_s'] * 1e3:.0f} ms |")
        print(f"| latest(key) | {warm['latest_s'] * 1e6:.1f} µs |")
        print(f"| prefix snapshot, records(), per key | {warm['snapshot_per_key_s'] * 1e6:.1f} µs |")
        for f in os.listdir(path):
            if f.endswith(".keys"):
                os.unlink(os.path.join(path, f))
        cold = run_child(path)
        print(f"| open (index rebuilt from the log, no checkpoint) | {cold['open_s']:.2f} s |")
        print(f"| RSS of the index rebuilt from the log | {cold['rss_delta'] / n:.0f} bytes "
              f"per key |")
        bench_compaction(base, n)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
