"""Measuring: repetitions summarised as median with min-max, and worker processes started together.

A :class:`Figure` holds the values of one measurement's repetitions; the report prints it as
``median (min-max)`` and divides medians for the ratio to its baseline.

:func:`run_workers` runs functions in forked processes that wait on a shared start signal; it
returns each worker's result, when the start signal was given and when the last worker ended
(``time.monotonic`` is one clock for every process of the machine, so workers report when they
finished).
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

_FORK = multiprocessing.get_context("fork")


@dataclass
class Figure:
    """One measured quantity (msg/s, ms, MB) over its repetitions."""

    unit: str
    values: List[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def text(self) -> str:
        """``median (min-max)`` in the figure's unit, numbers sized for reading."""
        if not self.values:
            return "—"
        med = fmt(self.median)
        if len(self.values) == 1:
            return f"{med} {self.unit}"
        return f"{med} ({fmt(min(self.values))}–{fmt(max(self.values))}) {self.unit}"


def fmt(x: float) -> str:
    """A figure with sensible digits: 1,234,567 / 12.3 / 0.123."""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def ratio(a: Optional[Figure], b: Optional[Figure]) -> str:
    """``a``'s median divided by ``b``'s, e.g. ``2.31×``; ``—`` when either is missing."""
    if a is None or b is None or not a.values or not b.values or b.median == 0:
        return "—"
    return f"{a.median / b.median:.2f}×"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank) of already sorted values."""
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


def step_times(n: int, once: Callable[[], object],
               before: Optional[Callable[[], object]] = None) -> List[float]:
    """Call ``once()`` ``n`` times and return how long each call took, in microseconds;
    ``before()``, if given, runs ahead of each call, untimed."""
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        if before is not None:
            before()
        t = clock()
        once()
        out.append((clock() - t) / 1000)
    return out


def _worker(fn, args, ready, go, out, index) -> None:
    try:
        prepared = fn(*args, ready=ready, go=go)
        out.put((index, "ok", prepared, time.monotonic()))
    except BaseException:                       # the parent reports it and stops the run
        out.put((index, "error", traceback.format_exc(), time.monotonic()))


class WorkerError(RuntimeError):
    """A worker process failed; the message carries its traceback."""


def run_workers(jobs: Sequence[Tuple[Callable, tuple]], timeout: float) -> Tuple[list, float, float]:
    """Run ``fn(*args, ready=..., go=...)`` for every ``(fn, args)`` in its own forked process.

    Each worker prepares (connects, subscribes), calls ``ready()`` and then ``go()``, which blocks
    until every worker is ready (``go(seconds)`` waits at most that long and says whether the
    start was given); its return value is collected. Returns (results in job order, the start
    signal's time, the last worker's end; ``time.monotonic``). Raises :class:`WorkerError` if a
    worker fails or the whole takes longer than ``timeout``.
    """
    n = len(jobs)
    ready_q, out = _FORK.Queue(), _FORK.Queue()
    go_event = _FORK.Event()
    procs = []
    for i, (fn, args) in enumerate(jobs):
        p = _FORK.Process(target=_worker, daemon=True,
                          args=(fn, args, lambda i=i: ready_q.put(i), go_event.wait, out, i))
        procs.append(p)
    deadline = time.monotonic() + timeout
    results: list = [None] * n
    try:
        for p in procs:
            p.start()
        for _ in range(n):
            _get(ready_q, out, deadline)
        t0 = time.monotonic()
        go_event.set()
        end = t0
        for _ in range(n):
            index, status, value, finished = _get(out, None, deadline)
            if status != "ok":
                raise WorkerError(f"worker {index} failed:\n{value}")
            results[index] = value
            end = max(end, finished)
        return results, t0, end
    finally:
        for p in procs:
            p.join(timeout=max(0.1, min(10.0, deadline - time.monotonic())))
            if p.is_alive():
                p.kill()
                p.join()


def _get(q, errors, deadline: float):
    """The next item of ``q``; a worker error seen on ``errors`` meanwhile is raised."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WorkerError("workers did not finish in time")
        try:
            return q.get(timeout=min(left, 0.5))
        except queue.Empty:
            if errors is not None:
                try:
                    index, status, value, _ = errors.get_nowait()
                except queue.Empty:
                    continue
                raise WorkerError(f"worker {index} ended before every worker was ready "
                                  f"({status}):\n{value}") from None


class Holder:
    """``fn(*args, ready=..., stop=...)`` in a forked process that holds connections open.

    ``fn`` opens what it holds, calls ``ready(info)`` and then ``stop()``, which blocks until the
    holder is left (a context manager: entering waits for ``ready``, leaving ends it).
    """

    def __init__(self, fn: Callable, *args, timeout: float = 300.0):
        self._q = _FORK.Queue()
        self._stop = _FORK.Event()
        self._timeout = timeout
        self.proc = _FORK.Process(target=self._main, args=(fn, args), daemon=True)
        self.info = None

    def _main(self, fn, args) -> None:
        try:
            fn(*args, ready=lambda info=None: self._q.put(("ok", info)), stop=self._stop.wait)
        except BaseException:
            self._q.put(("error", traceback.format_exc()))

    def __enter__(self) -> "Holder":
        self.proc.start()
        try:
            status, self.info = self._q.get(timeout=self._timeout)
        except queue.Empty:
            self.__exit__()
            raise WorkerError("holder was not ready in time") from None
        if status != "ok":
            self.__exit__()
            raise WorkerError(f"holder failed:\n{self.info}")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
