"""Columnar batches (zeps/protocol/columns.py) beside today's row batches, in the same run.

Per-message cost of (a) building a PUBLISH-BATCH of 100 and of 1000 messages (100-byte ASCII
bodies, keys cycling through 16 names like ``eu.fr.paris.7``) with the row codec the SDK uses
today (``batch_frames``, what ``publish_batch`` sends; and ``encode_publish_batch``) vs
``encode_columns``; (b) decoding a DELIVER-BATCH of the same messages as the SDK does today
(``decode_deliver_batch``'s walk + ``MessageBatch`` keys and bodies, or its ``Message``
objects, or its ``to_arrow()`` record batch) vs ``decode_columns`` (every check, the columns as
views of the frame; numpy, and the pure-Python fallback) and ``to_arrow`` (a
``pyarrow.RecordBatch`` wrapping the frame, nothing copied), and Arrow to Python lists for
comparison; (c) what a broker would pay per message: today's walk of a PUBLISH-BATCH vs
``decode_columns`` of a PUBLISH-COLUMNS, turning it into the DELIVER-COLUMNS it would journal,
and converting between the layouts. The first row of each part is the baseline (1.00x);
faster than it is above 1.

    python -m bench.bench_columns [--n 200000]      (messages per measurement)
"""
from __future__ import annotations

import argparse
import timeit

from zeps.clients.batching import batch_frames, decode_deliver_batch
from zeps.clients.message import MessageBatch
from zeps.protocol import columns as C
from zeps.protocol.batch import (PUBLISH_HEAD_SIZE, deliver_batch_head, encode_entries,
                                 encode_publish_batch, walk)

BODY = 100
SIZES = (100, 1000)
KEYS = [f"eu.fr.paris.{i}" for i in range(16)]


def _best(fn, calls: int) -> float:
    """Seconds per call, best of 5."""
    return min(timeit.repeat(fn, number=calls, repeat=5)) / calls


def build_cases(size: int):
    keys = [KEYS[i % len(KEYS)] for i in range(size)]
    bodies = [bytes((48 + i % 64,)) * BODY for i in range(size)]
    pairs = list(zip(keys, bodies))
    row = encode_publish_batch(pairs)
    assert [f for f, _ in batch_frames(pairs, 1 << 22, None)] == [row]
    assert C.rows_from_columns(C.encode_columns(keys, bodies)) == row
    return [
        ("row: batch_frames (publish_batch today)",
         lambda: [f for f, _ in batch_frames(pairs, 1 << 22, None)]),
        ("row: encode_publish_batch", lambda: encode_publish_batch(pairs)),
        ("columns: encode_columns(keys, bodies)", lambda: C.encode_columns(keys, bodies)),
        ("columns: encode_columns from (key, body) pairs",
         lambda: C.encode_columns(*zip(*pairs))),
    ]


def decode_cases(size: int):
    keys = [KEYS[i % len(KEYS)] for i in range(size)]
    bodies = [bytes((48 + i % 64,)) * BODY for i in range(size)]
    ts, seq = 1_700_000_000_000_000_000, 1000
    row = deliver_batch_head(ts, seq, size) + encode_entries(list(zip(keys, bodies)))
    col = C.encode_columns(keys, bodies, sequence=seq, timestamp=ts)
    assert C.rows_from_columns(col) == row

    def row_lists():
        t, s, offs = decode_deliver_batch(row)
        b = MessageBatch.from_frame(row, offs, s, t, "s")
        return b.keys, b.bodies

    def row_messages():
        t, s, offs = decode_deliver_batch(row)
        return MessageBatch.from_frame(row, offs, s, t, "s").messages

    def row_arrow():
        t, s, offs = decode_deliver_batch(row)
        return MessageBatch.from_frame(row, offs, s, t, "s").to_arrow()

    def arrow_lists():
        rb = C.to_arrow(col)
        return rb.column(2).to_pylist(), rb.column(3).to_pylist()

    t, s, offs = decode_deliver_batch(row)
    b = MessageBatch.from_frame(row, offs, s, t, "s")
    assert (b.keys, b.bodies) == (keys, bodies) == arrow_lists()
    rb = row_arrow()
    assert (rb.column("key").to_pylist(), rb.column("body").to_pylist()) == (keys, bodies)
    return [
        ("row: walk + MessageBatch .keys/.bodies (SDK today)", row_lists),
        ("row: walk + MessageBatch .messages", row_messages),
        ("row: walk + MessageBatch .to_arrow() (keys and bodies copied, C)", row_arrow),
        ("columns: decode_columns (numpy checks, views)", lambda: C.decode_columns(col)),
        ("columns: decode_columns (pure-Python fallback)",
         lambda: C.decode_columns(col, use_numpy=False)),
        ("columns: to_arrow (checks + RecordBatch, zero copy)", lambda: C.to_arrow(col)),
        ("columns: to_arrow + to_pylist (Python objects)", arrow_lists),
    ]


def broker_cases(size: int):
    keys = [KEYS[i % len(KEYS)] for i in range(size)]
    bodies = [bytes((48 + i % 64,)) * BODY for i in range(size)]
    row = encode_publish_batch(list(zip(keys, bodies)))
    col = C.encode_columns(keys, bodies)
    return [
        ("row: walk of a PUBLISH-BATCH, keys checked (the broker today)",
         lambda: walk(row, PUBLISH_HEAD_SIZE, len(row), size)),
        ("columns: decode_columns of a PUBLISH-COLUMNS (every check)",
         lambda: C.decode_columns(col)),
        ("columns: PUBLISH-COLUMNS to DELIVER-COLUMNS (32-byte head, rest copied)",
         lambda: deliver_head(col, 1, 2)),
        ("convert: rows_from_columns (columns stored, rows sent)",
         lambda: C.rows_from_columns(col)),
        ("convert: columns_from_rows (rows stored, columns sent)",
         lambda: C.columns_from_rows(row)),
    ]


def deliver_head(frame: bytes, sequence: int, timestamp: int) -> bytes:
    """What a broker would journal for a checked PUBLISH-COLUMNS: the same bytes after a
    DELIVER-COLUMNS header."""
    head = C.HEAD.pack(b"\xaa\xa5", C.DELIVER_COLUMNS_ID, C.VERSION,
                       int.from_bytes(frame[4:8], "little"), timestamp, sequence,
                       int.from_bytes(frame[24:28], "little"), int.from_bytes(frame[28:32], "little"))
    return b"".join((head, memoryview(frame)[C.HEAD_SIZE:]))


def table(title: str, cases_of, n: int) -> None:
    print(f"## {title}\n")
    print("| operation | batch | ns/msg | msg/s (Arrow: rows/s) | vs row baseline |")
    print("|---|---:|---:|---:|---:|")
    for size in SIZES:
        calls = max(1, n // size)
        base = None
        for name, fn in cases_of(size):
            per_msg = _best(fn, calls) / size
            base = base or per_msg
            print(f"| {name} | {size} | {per_msg * 1e9:,.1f} | {1 / per_msg:,.0f} | "
                  f"{base / per_msg:.2f}x |", flush=True)
    print()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="messages per measurement")
    n = ap.parse_args(argv).n
    print(f"{BODY} B ASCII bodies, keys of {len(KEYS[0])}-{len(KEYS[-1])} B; {n:,} messages per "
          f"measurement, best of 5; numpy {'yes' if C.np is not None else 'no'}\n")
    table("Build a PUBLISH-BATCH (a): rows vs columns", build_cases, n)
    table("Decode a DELIVER-BATCH (b): rows to Python objects vs columns", decode_cases, n)
    table("What a broker would pay per PUBLISH (checks, and converting between layouts)",
          broker_cases, n)


if __name__ == "__main__":
    main()
