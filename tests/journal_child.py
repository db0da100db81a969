"""Child process for the journal's multi-process tests (run as ``python tests/journal_child.py
MODE ...``). Modes:

* ``append DIR SEGMENT_BYTES`` - fsync="always" writer that appends batches forever and prints
  each durable sequence (flushed) so the parent can SIGKILL it mid-append.
* ``write DIR COUNT SEGMENT_BYTES RETENTION_BYTES`` - fsync="never" writer of COUNT records in
  batches of varying size, with tiny segments (rolls often), printing "done" at the end.
* ``read DIR COUNT TIMEOUT`` - JournalReader that follows the stream until it saw COUNT
  records, checking each one; prints a JSON summary.
* ``fsize DIR LIMIT`` - sets RLIMIT_FSIZE to LIMIT bytes with SIGXFSZ ignored, so writes past it
  fail with EFBIG (a real "disk full" without root), appends until JournalFullError, checks
  the journal, lifts the limit and appends again; prints a JSON summary.

Record bodies are derived from the sequence (see :func:`body_for`) so any reader can check
that a record is the one it claims to be.
"""
from __future__ import annotations

import json
import os
import random
import resource
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zeps.journal import (Journal, JournalConfig, JournalFullError,  # noqa: E402
                          JournalReader)


def body_for(seq: int) -> bytes:
    return (b"%d|" % seq) * (1 + seq % 37)


def key_for(seq: int) -> str:
    return f"k.{seq % 11}"


def batch(next_seq: int, n: int):
    return [(key_for(s), body_for(s)) for s in range(next_seq, next_seq + n)]


def check(rec) -> None:
    if rec.body != body_for(rec.sequence) or rec.key != key_for(rec.sequence):
        raise SystemExit(f"record {rec.sequence} has wrong content: {rec!r}")


def mode_append(path: str, segment_bytes: int) -> None:
    cfg = JournalConfig(fsync="always", segment_bytes=segment_bytes, index_interval_bytes=512)
    j = Journal.open(path, cfg)
    print(f"start {j.next_seq}", flush=True)
    rnd = random.Random(os.getpid())
    while True:
        j.append_batch(batch(j.next_seq, rnd.randint(1, 40)))
        print(j.durable_seq, flush=True)


def mode_write(path: str, count: int, segment_bytes: int, retention_bytes: int) -> None:
    cfg = JournalConfig(fsync="never", segment_bytes=segment_bytes, index_interval_bytes=512,
                        retention_bytes=retention_bytes or None)
    rnd = random.Random(7)
    with Journal.open(path, cfg) as j:
        print("ready", flush=True)
        while j.next_seq <= count:
            n = min(rnd.randint(1, 60), count - j.next_seq + 1)
            j.append_batch(batch(j.next_seq, n))
            if rnd.random() < 0.3:
                time.sleep(0.001)
    print("done", flush=True)


def mode_read(path: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.isdir(path):
        time.sleep(0.01)
        if time.monotonic() > deadline:
            raise SystemExit("stream never appeared")
    r = JournalReader(path)
    seen = 0
    last = 0
    it = r.read_from(1, end_seq=count, follow=True, poll_interval=0.005,
                     stop=lambda: time.monotonic() > deadline)
    missed = 0
    for rec in it:
        if rec.sequence <= last:
            raise SystemExit(f"sequence went from {last} to {rec.sequence}")
        if rec.sequence - last - 1 != it.missed - missed or (it.missed and not it.gap):
            raise SystemExit(f"hole from {last} to {rec.sequence} not reported as a gap")
        missed = it.missed
        check(rec)
        last = rec.sequence
        seen += 1
    print(json.dumps({"seen": seen, "last": last, "gap": it.gap, "missed": it.missed}),
          flush=True)


def mode_fsize(path: str, limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cfg = JournalConfig(fsync="always", segment_bytes=1 << 30)
    j = Journal.open(path, cfg)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    log = j._active.log_path
    result = {}
    while True:
        before = (j.next_seq, os.path.getsize(log))
        try:
            j.append_batch(batch(j.next_seq, 25))
        except JournalFullError as e:
            result.update(error=str(e), errno=e.errno, next_seq=j.next_seq,
                          state_unchanged=(j.next_seq, os.path.getsize(log)) == before,
                          size=os.path.getsize(log))
            break
    # the journal is still consistent and readable
    recs = list(j.read_from(1))
    result["readable"] = len(recs)
    result["all_ok"] = [r.sequence for r in recs] == list(range(1, j.next_seq))
    for r in recs:
        check(r)
    # still full: fails again, cleanly
    try:
        j.append_batch(batch(j.next_seq, 25))
        result["second_failed"] = False
    except JournalFullError:
        result["second_failed"] = True
    # limit lifted: appends again
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    recs = j.append_batch(batch(j.next_seq, 3))
    result["after_lift"] = [r.sequence for r in recs]
    result["durable"] = j.durable_seq
    j.close()
    print(json.dumps(result), flush=True)


def main(argv) -> None:
    mode = argv[1]
    if mode == "append":
        mode_append(argv[2], int(argv[3]))
    elif mode == "write":
        mode_write(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif mode == "read":
        mode_read(argv[2], int(argv[3]), float(argv[4]))
    elif mode == "fsize":
        mode_fsize(argv[2], int(argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
