"""The machine's own stalls: how often, and how long, a thread that only reads the clock loses its
CPU, with nothing of ZEPS running (issue 20).

    python -m bench.bench_hiccups [--seconds 30] [--threshold-ms 1] [--modes normal,fifo]

Why: every path of the latency scenario, ZeroMQ's proxy included, stalls now and then for a
few milliseconds (``bench_tail``), and such stalls set a run's p99.9. This measures the machine
alone, in the manner of jHiccup: one process per CPU, pinned to it, reads the monotonic clock
in a loop and records every gap of ``--threshold-ms`` or more between two reads (the time it
did not run). Per mode, in turn:

* ``normal``: the spinners under the normal policy, as the broker and its clients run: any
  thread or kernel thread of the machine can take their CPU;
* ``fifo``: the spinners under ``SCHED_FIFO`` at priority 1 (where the system allows it): no
  thread of the normal class, kernel threads included, can take their CPU while they spin.
  What is left is interrupts, real-time kernel threads (``migration/N``) and the hypervisor.
  Each spins 9 ms and sleeps 1 ms, to stay under the kernel's limit on real-time threads
  (``/proc/sys/kernel/sched_rt_runtime_us``: throttled, a spinner would lose 50 ms a second).
  A sleep is not counted, but its overrun is: a thread of the normal class that got the CPU
  during the sleep and kept it past its end (on a kernel without preemption it keeps it until
  it yields) is a stall from the sleep's end.

Per CPU: the stalls per second of spinning at or above 1, 2 and 3 ms (from the threshold), their
median and longest, the share of the time lost in them, and the CPU's steal time from
``/proc/stat`` per second of the mode's run (the hypervisor's own count of the time it ran
something else). The last row of each mode: the stalls of all CPUs at once (every spinner
stopped over the same interval), per second of the shortest spinner's spinning; under ``fifo``
the CPUs' sleeps do not line up, so that rate is a little low.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import statistics
import sys
import time
from array import array
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

#: A stall: when it began and how long it lasted, in ns of the monotonic clock.
Interval = Tuple[int, int]
#: ``fifo`` mode: spin this long, then sleep SLEEP_NS (not counted).
SPIN_NS = 9_000_000
SLEEP_NS = 1_000_000


def spin(seconds: float, threshold_ns: int, fifo: bool, clock=time.perf_counter_ns,
         sleep=time.sleep) -> Tuple[List[Interval], int]:
    """Read ``clock`` for ``seconds``; return the gaps of ``threshold_ns`` or more between two
    reads as ``(start, length)`` and the ns spun. With ``fifo``, spin ``SPIN_NS`` at a time with
    a sleep of ``SLEEP_NS`` between: the sleep is neither a gap nor time spun, but its overrun
    (the time past ``SLEEP_NS`` before the spinner ran again, while something else had the
    CPU) is both, a gap from when the sleep was due to end."""
    gaps = array("q")
    start = prev = clock()
    end = start + int(seconds * 1e9)
    burst_start, spun = start, 0
    burst_end = min(start + SPIN_NS, end) if fifo else end
    while True:
        t = clock()
        if t - prev >= threshold_ns:
            gaps.append(prev)
            gaps.append(t - prev)
        prev = t
        if t >= burst_end:
            spun += t - burst_start
            if t >= end:
                break
            sleep(SLEEP_NS / 1e9)
            burst_start = prev = clock()
            overrun = burst_start - t - SLEEP_NS
            if overrun > 0:
                spun += overrun
                if overrun >= threshold_ns:
                    gaps.append(t + SLEEP_NS)
                    gaps.append(overrun)
            burst_end = min(prev + SPIN_NS, end)
    return [(gaps[i], gaps[i + 1]) for i in range(0, len(gaps), 2)], spun


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> List[Interval]:
    """The intervals covered by both ``a`` and ``b`` (each sorted, none overlapping)."""
    out: List[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][0] + a[i][1], b[j][0] + b[j][1])
        if e > s:
            out.append((s, e - s))
        if a[i][0] + a[i][1] < b[j][0] + b[j][1]:
            i += 1
        else:
            j += 1
    return out


def all_at_once(per_cpu: Sequence[Sequence[Interval]]) -> List[Interval]:
    """The intervals during which every CPU's spinner was stalled."""
    if not per_cpu:
        return []
    out = list(per_cpu[0])
    for gaps in per_cpu[1:]:
        out = intersect(out, gaps)
    return out


class Figures(NamedTuple):
    """One CPU's (or all CPUs') stalls over ``spun_s`` seconds of spinning."""

    per_s: Dict[float, float]           # threshold in ms -> stalls at or above it per second
    longest_ms: Optional[float]
    median_ms: Optional[float]
    lost: float                         # share of the time spent stalled


def figures(gaps: Sequence[Interval], spun_ns: int, thresholds_ms: Sequence[float]) -> Figures:
    spun_s = spun_ns / 1e9
    lengths = [n / 1e6 for _s, n in gaps]
    per_s = {t: sum(1 for x in lengths if x >= t) / spun_s if spun_s else 0.0
             for t in thresholds_ms}
    return Figures(per_s, max(lengths) if lengths else None,
                   statistics.median(lengths) if lengths else None,
                   sum(n for _s, n in gaps) / spun_ns if spun_ns else 0.0)


def steal_ms(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, float]:
    """Each CPU's steal time between two readings of :func:`read_steal`, in ms."""
    tick = 1000 / os.sysconf("SC_CLK_TCK")
    return {cpu: (after[cpu] - before[cpu]) * tick for cpu in before if cpu in after}


def read_steal(path: str = "/proc/stat") -> Dict[str, int]:
    """Each CPU's steal time in clock ticks (``cpuN`` lines, the 8th number); {} if unreadable."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0].startswith("cpu") and parts[0] != "cpu" and len(parts) > 8:
                    out[parts[0][3:]] = int(parts[8])
    except OSError:
        pass
    return out


def _spinner(cpu: int, seconds: float, threshold_ns: int, fifo: bool, go, q) -> None:
    try:
        os.sched_setaffinity(0, {cpu})
        if fifo:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            except (OSError, AttributeError) as e:
                go.wait(60)
                q.put((cpu, None, 0, f"SCHED_FIFO refused ({e})"))
                return
        if not go.wait(60):
            return                                       # the parent is gone
        gaps, spun = spin(seconds, threshold_ns, fifo)
    except Exception as e:  # noqa: BLE001 - said in the report, never a hang of the parent
        q.put((cpu, None, 0, f"{type(e).__name__}: {e}"))
        return
    q.put((cpu, gaps, spun, None))


def run_mode(cpus: Sequence[int], seconds: float, threshold_ns: int, fifo: bool):
    """Spin on every CPU at once; ``({cpu: (gaps, spun_ns)}, steal in ms per second of the run
    per CPU, why not measured or None)``."""
    ctx = multiprocessing.get_context("fork")
    go, q = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_spinner, args=(cpu, seconds, threshold_ns, fifo, go, q),
                         daemon=True) for cpu in cpus]
    for p in procs:
        p.start()
    before, since = read_steal(), time.monotonic()
    go.set()
    results = [q.get(timeout=seconds + 60) for _ in procs]
    after, elapsed = read_steal(), time.monotonic() - since
    for p in procs:
        p.join(10)
    refused = next((r[3] for r in results if r[3] is not None), None)
    steal = {cpu: ms / elapsed for cpu, ms in steal_ms(before, after).items()}
    return {cpu: (gaps, spun) for cpu, gaps, spun, _r in results}, steal, refused


def _ms(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="per mode (default 30)")
    ap.add_argument("--threshold-ms", type=float, default=1.0,
                    help="the shortest gap counted as a stall (default 1)")
    ap.add_argument("--modes", default="normal,fifo", help="normal, fifo or both (default)")
    ap.add_argument("--gaps", action="store_true",
                    help="after the table, list each stall of 2 ms (or the threshold, if higher) or "
                         "more: its mode, CPU, start "
                         "(s of CLOCK_MONOTONIC, as `perf sched record -k CLOCK_MONOTONIC` "
                         "stamps its events) and length")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not (math.isfinite(args.seconds) and 0 < args.seconds <= 3600) or not (
            math.isfinite(args.threshold_ms) and 0.01 <= args.threshold_ms <= 1000) or not (
            modes and all(m in ("normal", "fifo") for m in modes)):
        ap.error("--seconds must be above 0 and at most 3600, --threshold-ms from 0.01 to 1000, "
                 "--modes normal and/or fifo")
    cpus = sorted(os.sched_getaffinity(0))
    threshold_ns = int(args.threshold_ms * 1e6)
    thresholds = sorted({args.threshold_ms, max(args.threshold_ms, 2.0),
                         max(args.threshold_ms, 3.0)})
    print("### The machine's own stalls, nothing of ZEPS running\n")
    print(f"One spinner per CPU ({len(cpus)}), {args.seconds:g} s a mode; a stall: a gap of "
          f"{args.threshold_ms:g} ms or more between two reads of the clock; per second of "
          f"spinning; steal from /proc/stat over the mode's run.\n")
    cols = " | ".join(f"stalls ≥ {t:g} ms per s" for t in thresholds)
    print(f"| mode | CPU | {cols} | median (ms) | longest (ms) | time lost | steal (ms per s) |")
    print("|---|---|" + "---:|" * (len(thresholds) + 4))
    listed = []
    for mode in modes:
        per_cpu, steal, refused = run_mode(cpus, args.seconds, threshold_ns, mode == "fifo")
        if refused is not None:
            print(f"| {mode} | — | not measured: {refused} |")
            continue
        rows = [(str(cpu), gaps, spun, steal.get(str(cpu))) for cpu, (gaps, spun)
                in sorted(per_cpu.items())]
        listed += [(start, mode, cpu, length) for cpu, (gaps, _s) in per_cpu.items()
                   for start, length in gaps if length >= max(2_000_000, threshold_ns)]
        spun_all = min(spun for _c, (_g, spun) in per_cpu.items())
        rows.append(("all at once", all_at_once([g for _c, (g, _s) in sorted(per_cpu.items())]),
                     spun_all, None))
        for label, gaps, spun, st in rows:
            f = figures(gaps, spun, thresholds)
            rates = " | ".join(f"{f.per_s[t]:.2f}" for t in thresholds)
            st_text = "—" if st is None else f"{st:.2f}"
            print(f"| {mode} | {label} | {rates} | {_ms(f.median_ms)} | {_ms(f.longest_ms)} | "
                  f"{f.lost * 100:.2f}% | {st_text} |")
    if args.gaps:
        print(f"\nStalls of {max(2.0, args.threshold_ms):g} ms or more (mode, CPU, start in s of "
              f"CLOCK_MONOTONIC, ms):\n")
        for start, mode, cpu, length in sorted(listed):
            print(f"    {mode} {cpu} {start / 1e9:.6f} {length / 1e6:.3f}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
