"""Journal benchmark: ``python -m bench.bench_journal [--quick]``.

Prints markdown tables:

1. append throughput for 100 B and 1 KiB bodies under each fsync policy, side by side with a
   plain buffered file (``open(path, "ab")`` + ``write``) receiving the very same record bytes in
   the same batches (and, for ``always``, the same ``fdatasync`` per batch);
2. read throughput from sequence 1 (``read_batch`` loop, ``read_from`` iterator, and a
   ``JournalReader``) beside a plain read of the same file bytes;
3. batch records: appending 100-message batches as one ``PublishBatch`` each (one batch
   record), as one with a producer id and first pseq (an idempotent producer's batch) and as
   100 ``(key, body)`` pairs (100 records), and reading them back with
   ``read_chunks`` (batch records whole) versus ``read_batch`` (a Record per message);
4. ``read_from`` start time, ``read_batch(seq, 1)`` and ``seq_at`` in a 10-million-record
   journal versus a 10k-record one (O(log n) lookups), with how long the big one took to build.

Everything is written under a temporary directory (``--dir`` to choose where) and deleted.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from zeps.journal import Journal, JournalConfig, JournalReader
from zeps.journal.record import encode_batch
from zeps.protocol.batch import encode_publish_batch
from zeps.protocol.codec import decode

MB = 1e6


def make_batch(n: int, body_size: int):
    body = bytes(random.Random(body_size).getrandbits(8) for _ in range(body_size))
    return [(f"orders.eu.{i % 97}", body) for i in range(n)]


def record_bytes(batch, first_seq: int) -> bytes:
    parts, _ = encode_batch(batch, first_seq, time.time_ns(), 1 << 30)
    return b"".join(parts)


def bench_append(base: str, policy: str, body: int, batch_size: int, total: int):
    """(journal rec/s, journal MB/s, plain rec/s, plain MB/s) for one configuration."""
    batch = make_batch(batch_size, body)
    n_batches = max(1, total // batch_size)
    total = n_batches * batch_size
    cfg = JournalConfig(fsync=policy)
    d = tempfile.mkdtemp(dir=base)
    j = Journal.open(os.path.join(d, "s"), cfg)
    t0 = last_sync = time.perf_counter()
    for _ in range(n_batches):
        j.append_batch(batch)
        if policy == "interval" and time.perf_counter() - last_sync >= 0.05:
            j.sync()                              # the broker's group commit, every 50 ms
            last_sync = time.perf_counter()
    if policy == "interval":
        j.sync()
    dt = time.perf_counter() - t0
    size = j.info().size_bytes
    j.close()
    shutil.rmtree(d)
    # plain buffered file, the same bytes in the same batches
    chunk = record_bytes(batch, 1)
    path = os.path.join(base, "plain.bin")
    sync_every = policy == "always"
    last_sync = time.monotonic()
    t0 = time.perf_counter()
    with open(path, "ab") as f:
        for _ in range(n_batches):
            f.write(chunk)
            if sync_every:
                f.flush()
                os.fdatasync(f.fileno())
            elif policy == "interval" and time.monotonic() - last_sync >= 0.05:
                f.flush()
                os.fdatasync(f.fileno())
                last_sync = time.monotonic()
        if policy == "interval":
            f.flush()
            os.fdatasync(f.fileno())
    pdt = time.perf_counter() - t0
    psize = os.path.getsize(path)
    os.unlink(path)
    return total / dt, size / dt / MB, total / pdt, psize / pdt / MB, total


def bench_read(base: str, body: int, total: int):
    d = tempfile.mkdtemp(dir=base)
    sd = os.path.join(d, "s")
    batch = make_batch(1000, body)
    with Journal.open(sd, JournalConfig(fsync="never")) as j:
        for _ in range(total // 1000):
            j.append_batch(batch)
        size = j.info().size_bytes
        n = j.last_seq
        # warm the page cache once
        for f in os.listdir(sd):
            with open(os.path.join(sd, f), "rb") as fh:
                while fh.read(1 << 20):
                    pass
        rows = []
        t0 = time.perf_counter()
        s, got = 1, 0
        while True:
            recs = j.read_batch(s, 1000, 1 << 20)
            if not recs:
                break
            got += len(recs)
            s = recs[-1].sequence + 1
        dt = time.perf_counter() - t0
        assert got == n
        rows.append(("Journal.read_batch(seq, 1000) loop", n / dt, size / dt / MB))
        t0 = time.perf_counter()
        got = sum(1 for _ in j.read_from(1))
        dt = time.perf_counter() - t0
        assert got == n
        rows.append(("Journal.read_from(1) iterator", n / dt, size / dt / MB))
        r = JournalReader(sd)
        t0 = time.perf_counter()
        got = sum(1 for _ in r.read_from(1))
        dt = time.perf_counter() - t0
        assert got == n
        rows.append(("JournalReader.read_from(1) iterator", n / dt, size / dt / MB))
        r.close()
    logs = sorted(f for f in os.listdir(sd) if f.endswith(".log"))
    t0 = time.perf_counter()
    nbytes = 0
    for f in logs:
        with open(os.path.join(sd, f), "rb") as fh:
            while True:
                b = fh.read(1 << 20)
                if not b:
                    break
                nbytes += len(b)
    dt = time.perf_counter() - t0
    rows.append(("plain file read (1 MiB chunks, no parsing)", n / dt, nbytes / dt / MB))
    shutil.rmtree(d)
    return rows, n, size


def bench_batches(base: str, body: int, total: int, batch_size: int = 100):
    """Rows (what, messages/s, MB/s of log) appending ``total`` messages in batches of
    ``batch_size`` as one PublishBatch each (decoded by the codec, as the broker gets it), as
    one PublishBatch with a producer id and first pseq each (an idempotent producer's batch, as
    the broker appends it) and as pairs, then reading them back with read_chunks and
    read_batch."""
    pairs = make_batch(batch_size, body)
    cmd = decode(encode_publish_batch(pairs))
    n_batches = max(1, total // batch_size)
    total = n_batches * batch_size
    rows = []
    dirs = {}
    for label, items, producer in (
            ("PublishBatch (1 batch record)", [cmd], False),
            ("producer PublishBatch (1 batch record, pid + pseq)", [cmd], True),
            (f"{batch_size} (key, body) pairs ({batch_size} records)", pairs, False)):
        d = tempfile.mkdtemp(dir=base)
        sd = os.path.join(d, "s")
        prods = [[("bench-producer", 1 + k * batch_size)] if producer else None
                 for k in range(n_batches)]
        with Journal.open(sd, JournalConfig(fsync="never")) as j:
            t0 = time.perf_counter()
            for k in range(n_batches):
                j.append_batch(items, prods[k])
            dt = time.perf_counter() - t0
            size = j.info().size_bytes
            assert j.last_seq == total
        rows.append((f"append_batch, {label}", total / dt, size / dt / MB))
        dirs[label] = (d, sd, size)
    for label, (d, sd, size) in dirs.items():
        with JournalReader(sd) as r:
            for how in ("read_chunks", "read_batch"):
                read = getattr(r, how)
                t0 = time.perf_counter()
                s, got = 1, 0
                while True:
                    chunk = read(s, 1000, 1 << 20)
                    if not chunk:
                        break
                    last = chunk[-1]
                    got += last.last_sequence + 1 - s
                    s = last.last_sequence + 1
                dt = time.perf_counter() - t0
                assert got == total
                rows.append((f"{how}(seq, 1000) loop, log of {label}", total / dt,
                             size / dt / MB))
        shutil.rmtree(d)
    return rows, total


def build_journal(path: str, n: int, body: int, batch_size: int = 10000):
    batch = make_batch(batch_size, body)
    t0 = time.perf_counter()
    with Journal.open(path, JournalConfig(fsync="never")) as j:
        left = n
        while left > 0:
            k = min(batch_size, left)
            j.append_batch(batch if k == batch_size else batch[:k])
            left -= k
        info = j.info()
    return time.perf_counter() - t0, info


def time_lookups(path: str, n: int, probes: int, reader: bool):
    """Median and max microseconds of read_from(s) first record, read_batch(s, 1), seq_at(t)."""
    rnd = random.Random(42)
    view = JournalReader(path) if reader else Journal.open(path, JournalConfig(fsync="never"))
    try:
        info = view.info()
        seqs = [rnd.randint(1, n) for _ in range(probes)]
        out = {}
        times = []
        for s in seqs:
            t0 = time.perf_counter()
            rec = next(iter(view.read_from(s)))
            times.append(time.perf_counter() - t0)
            assert rec.sequence == s
        out["read_from"] = times
        times = []
        for s in seqs:
            t0 = time.perf_counter()
            rec = view.read_batch(s, 1)[0]
            times.append(time.perf_counter() - t0)
            assert rec.sequence == s
        out["read_batch"] = times
        times = []
        span = info.newest_ts - info.oldest_ts
        for _ in range(probes):
            t = info.oldest_ts + rnd.randint(0, max(span, 1))
            t0 = time.perf_counter()
            q = view.seq_at(t)
            times.append(time.perf_counter() - t0)
            assert 1 <= q <= n + 1
        out["seq_at"] = times
    finally:
        view.close()
    return {k: (statistics.median(v) * 1e6, max(v) * 1e6) for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    ap.add_argument("--dir", default=None, help="where to put temporary journals")
    ap.add_argument("--big", type=int, default=None,
                    help="records in the big journal (default 10,000,000; 1,000,000 with --quick)")
    ap.add_argument("--probes", type=int, default=None, help="lookups per measurement")
    args = ap.parse_args(argv)
    q = args.quick
    big_n = args.big or (1_000_000 if q else 10_000_000)
    probes = args.probes or (200 if q else 1000)
    base = tempfile.mkdtemp(prefix="zeps-bench-journal-", dir=args.dir)
    try:
        print(f"# ZEPS journal benchmark ({'quick' if q else 'full'})\n")
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, temp dir {base}\n")
        print("## Append (records/s and MB/s of on-disk record bytes)\n")
        print("| body | fsync | batch | records | journal rec/s | journal MB/s "
              "| plain file rec/s | plain file MB/s | journal / plain |")
        print("|---|---|---|---|---|---|---|---|---|")
        runs = [("always", 1, 300 if q else 2000), ("always", 100, 3000 if q else 50000),
                ("interval", 100, 30000 if q else 500000),
                ("never", 100, 30000 if q else 500000),
                ("never", 1000, 30000 if q else 500000)]
        for body in (100, 1024):
            for policy, bs, total in runs:
                if body == 1024:
                    total = max(bs, total // 3)
                jr, jm, pr, pm, n = bench_append(base, policy, body, bs, total)
                print(f"| {body} B | {policy} | {bs} | {n:,} | {jr:,.0f} | {jm:,.1f} | "
                      f"{pr:,.0f} | {pm:,.1f} | {jr / pr:.2f} |", flush=True)
        print("\nplain file: the same encoded record bytes, written per batch with "
              "`open(path, 'ab').write()` (+ `fdatasync` per batch for `always`, every 50 ms for "
              "`interval`); the journal also encodes the DELIVER frames and CRCs.\n")
        print("## Read from sequence 1 (page cache warm)\n")
        print("| body | records | reader | rec/s | MB/s |")
        print("|---|---|---|---|---|")
        for body in (100, 1024):
            total = (100_000 if q else 1_000_000) // (1 if body == 100 else 3)
            rows, n, size = bench_read(base, body, total)
            for name, rps, mbs in rows:
                print(f"| {body} B | {n:,} | {name} | {rps:,.0f} | {mbs:,.1f} |", flush=True)
        print("\n## Batch records (fsync never, 100-message batches)\n")
        print("| body | messages | what | messages/s | MB/s |")
        print("|---|---|---|---|---|")
        for body in (100, 1024):
            total = (100_000 if q else 1_000_000) // (1 if body == 100 else 3)
            rows, n = bench_batches(base, body, total)
            for name, rps, mbs in rows:
                print(f"| {body} B | {n:,} | {name} | {rps:,.0f} | {mbs:,.1f} |", flush=True)
        print("\n## Lookups: big journal vs small journal\n")
        small = os.path.join(base, "small")
        sdt, sinfo = build_journal(small, 10_000, 100, 1000)
        bigp = os.path.join(base, "big")
        bdt, binfo = build_journal(bigp, big_n, 100)
        print(f"built the {big_n:,}-record journal (100 B bodies, batches of 10,000, "
              f"fsync never) in {bdt:.1f} s ({big_n / bdt:,.0f} rec/s): "
              f"{binfo.size_bytes / 1e9:.2f} GB in {binfo.segments} segments of 256 MiB\n")
        print(f"{probes} random probes each; microseconds, median (max)\n")
        print("| journal | opened as | read_from(s) first record | read_batch(s, 1) | seq_at(t) |")
        print("|---|---|---|---|---|")
        for label, path, n in (("10,000 records", small, 10_000),
                               (f"{big_n:,} records", bigp, big_n)):
            for reader in (False, True):
                r = time_lookups(path, n, probes, reader)
                cells = " | ".join(f"{r[k][0]:.0f} ({r[k][1]:.0f})"
                                   for k in ("read_from", "read_batch", "seq_at"))
                print(f"| {label} | {'JournalReader' if reader else 'Journal'} | {cells} |",
                      flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
