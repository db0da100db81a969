"""The stamps of ``bench.bench_stages``: what they are, how a process records them, and how
a run's stamps become each stage's figures.

A stamped message's body starts with its send time (``time.monotonic_ns``, the clock every
process of the machine shares, :data:`STAMP_BYTES` bytes); :func:`frame_stamps` finds them in any
frame of the path. Each process records ``stamp, time`` pairs into flat arrays during the run
(:func:`first_times` makes them dicts after it) and its garbage collections
(:func:`gc_probe`); :func:`analyse` matches them by stamp into the stages (:data:`STAGES`).
"""
from __future__ import annotations

from array import array
import gc
import statistics
import time
from typing import Dict, List, Tuple

# frame_stamps' names, imported once: imported at each call, they cost the stamped processes a
# few microseconds a frame, counted in the stages they stamp.
from zeps.protocol.batch import (DELIVER_BATCH_ID, DELIVER_HEAD_SIZE, PUBLISH_BATCH_ID,
                                 PUBLISH_HEAD_SIZE, walk)
from zeps.protocol.commands import Publish
from zeps.protocol.deliver import DELIVER_ID, DELIVER_TS_ID, KEYLEN_OFFSET, TS_SHIFT

STAMP_BYTES = 8
KEY = "bench.key"
END_KEY = "bench.end"

STAGES = (("publish call", "P0", "P1"), ("to broker wake-up", "P1", "W"),
          ("broker read", "W", "B1"), ("journal append", "B1", "B2"),
          ("route", "B2", "B3"), ("broker send", "B3", "B4"),
          ("to subscriber", "B4", "S1"), ("SDK hand-out", "S1", "S2"))


def gc_probe() -> list:
    """Record this process's collections as ``(start_ns, end_ns, generation)``."""
    events: list = []
    began = [0]

    def cb(phase, info):
        if phase == "start":
            began[0] = time.monotonic_ns()
        else:
            events.append((began[0], time.monotonic_ns(), info["generation"]))
    gc.callbacks.append(cb)
    return events


def first_times(pairs: array) -> Dict[int, int]:
    """``stamp, time, stamp, time, ...`` -> each stamp's first time. The stamped processes
    record into flat arrays (unsigned: a stamp is 8 bytes of a body) and build these dicts only
    after the run: a dict filled as the messages go resizes at 2/3 of each power of two
    (10,922, 21,845 and 43,690 messages), and on this host each resize of the four stamp dicts
    stalled the broker's round for about 6 ms (the proxy's runs, stamped in arrays, had no such
    stall; ad hoc, 2026-11-30). First wins for every stage: B2 to B4 were ``setdefault`` before
    (a stamp's later entries there are the same round's); B1 and S1 were last-wins dicts, and
    a stamp comes there once (the bench's publishers do not re-send)."""
    out: Dict[int, int] = {}
    for i in range(0, len(pairs), 2):
        out.setdefault(pairs[i], pairs[i + 1])
    return out


def frame_stamps(frame: bytes) -> List[int]:
    """The send times in the bodies of a PUBLISH, PUBLISH-BATCH, DELIVER, DELIVER-TS or
    DELIVER-BATCH frame (empty for anything else)."""
    if len(frame) < 3:
        return []
    kind = frame[2]
    if kind == Publish.ID:                                  # PUBLISH: keylen key bodylen body
        at = 3 + 1 + frame[3] + 4
        return [int.from_bytes(frame[at:at + 8], "big")]
    if kind in (DELIVER_ID, DELIVER_TS_ID):
        k = KEYLEN_OFFSET + (TS_SHIFT if kind == DELIVER_TS_ID else 0)
        at = k + 1 + frame[k] + 4
        return [int.from_bytes(frame[at:at + 8], "big")]
    if kind in (PUBLISH_BATCH_ID, DELIVER_BATCH_ID):
        head = PUBLISH_HEAD_SIZE if kind == PUBLISH_BATCH_ID else DELIVER_HEAD_SIZE
        count = int.from_bytes(frame[head - 4:head], "big")
        offs = walk(frame, head, len(frame), count, check_keys=False)
        out = []
        for start in offs[:-1]:
            at = start + 1 + frame[start] + 4
            out.append(int.from_bytes(frame[at:at + 8], "big"))
        return out
    return []


def pct(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


def _overlaps(events, lo, hi) -> bool:
    return any(a < hi and b > lo for a, b, *_ in events)


#: A paced send this much later (ns) than the one before it plus the pacing interval, or more:
#: the publisher was not run meanwhile.
STALL_NS = 1_000_000


def publisher_stalls(sends, every_ns: int) -> Tuple[int, int]:
    """``(how many, the longest in ns)`` of the gaps between two consecutive send times of a
    publisher paced every ``every_ns`` that are :data:`STALL_NS` or more longer than that: the
    host not running a process that only sleeps until a message is due and sends it."""
    t = sorted(sends)
    gaps = [b - a for a, b in zip(t, t[1:]) if b - a - every_ns >= STALL_NS]
    return len(gaps), max(gaps, default=0)


def analyse(pub, sub, broker, every_ns: int) -> dict:
    """Per-message stage stamps -> per-stage percentiles and the tail's make-up (``every_ns``:
    the publisher's pacing interval)."""
    import bisect
    p1 = dict(zip(pub["p1"][::2], pub["p1"][1::2]))
    s1, s2 = sub["s1"], dict(zip(sub["s2"][::2], sub["s2"][1::2]))
    wakes = broker["wakes"]
    rows = []
    for p0, p1t in p1.items():
        if p0 not in s2 or p0 not in broker["B1"]:
            continue
        st = {"P0": p0, "P1": p1t, "B1": broker["B1"][p0], "B2": broker["B2"].get(p0),
              "B3": broker["B3"].get(p0), "B4": broker["B4"].get(p0), "S1": s1.get(p0),
              "S2": s2[p0]}
        if None in st.values():
            continue
        i = bisect.bisect_right(wakes, st["B1"]) - 1
        w = wakes[i] if i >= 0 else 0
        st["W"] = w if w >= st["P1"] else st["P1"]     # busy when it came: no wake-up to wait
        rows.append(st)
    if len(rows) < 0.99 * len(p1):      # a stage's stamp missing: the figures would be biased
        raise SystemExit(f"only {len(rows)} of {len(p1)} messages were followed through every "
                         f"stage: a stamp of the broker's (bench_stages broker) misses a path")
    e2e = sorted(r["S2"] - r["P0"] for r in rows)
    out = {"n": len(rows), "sent": len(p1), "e2e": {p: pct(e2e, p) for p in (50, 99, 99.9)},
           "stages": {}, "tail": {}}
    for name, a, b in STAGES:
        d = sorted(r[b] - r[a] for r in rows)
        out["stages"][name] = {p: pct(d, p) for p in (50, 99, 99.9)}
        out["stages"][name]["mean"] = statistics.fmean(d)
    for p in (99, 99.9):
        cut = out["e2e"][p]
        slow = [r for r in rows if r["S2"] - r["P0"] >= cut]
        tail = {name: statistics.fmean(r[b] - r[a] for r in slow) for name, a, b in STAGES}
        tail["_n"] = len(slow)
        tail["_e2e"] = statistics.fmean(r["S2"] - r["P0"] for r in slow)
        tail["_gc_pub"] = sum(_overlaps(pub["gc"], r["P0"], r["P1"]) for r in slow)
        tail["_gc_broker"] = sum(_overlaps(broker["gc"], r["P1"], r["B4"]) for r in slow)
        tail["_gc_sub"] = sum(_overlaps(sub["gc"], r["B4"], r["S2"]) for r in slow)
        tail["_fsync"] = sum(_overlaps(broker["syncs"], r["P1"], r["B4"]) for r in slow)
        out["tail"][p] = tail
    start, end = min(r["P0"] for r in rows), max(r["S2"] for r in rows)
    out["gc_counts"] = {who: _gc_summary([e for e in d["gc"] if start <= e[0] <= end])
                        for who, d in (("publisher", pub), ("broker", broker), ("subscriber", sub))}
    out["fsyncs"] = len(broker["syncs"])
    out["pub_stalls"] = publisher_stalls(p1, every_ns)
    # waits of 20 ms or more that ended after a message of the run had reached the broker's
    # socket (P1) before the wait began: the loop slept while something was there to read
    p1s = sorted(p1.values())
    out["stuck_waits"] = [(b - a, timeout) for a, b, timeout in broker.get("long_waits", ())
                          if p1s and p1s[0] < a < p1s[-1]
                          and any(a > x and broker["B1"].get(k, 0) > a for k, x in p1.items())]
    span = max(r["S2"] for r in rows) - min(r["P0"] for r in rows)
    out["fsync_busy"] = sum(b - a for a, b in broker["syncs"]) / span if span else 0.0
    return out


def _gc_summary(events) -> str:
    if not events:
        return "none"
    by = {}
    for a, b, g in events:
        by.setdefault(g, []).append(b - a)
    return ", ".join(f"gen{g}: {len(v)} (max {max(v) / 1e3:.0f} us)" for g, v in sorted(by.items()))
