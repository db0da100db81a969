"""What the fault tests measure of a broker process, and how they wait for it.

Linux only: RSS and open descriptors come from ``/proc/PID``. Waiting is always on a condition
with a deadline (:func:`wait_for`), never a sleep "long enough". Latency is measured with the
broker and the test under a real-time policy (:func:`realtime`).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Callable, Iterator, Sequence, TypeVar

from bench.measure import cpu_seconds

T = TypeVar("T")


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MiB (``VmRSS`` of ``/proc/PID/status``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    """Descriptors a process has open (entries of ``/proc/PID/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def tcp_in_flight(port: int):
    """``(connections, bytes)``: the established tcp connections to ``port`` on this host (the
    listener's side of each), and the bytes the kernel still holds in them, sent or received
    but not yet read, on both sides (``/proc/net/tcp``'s tx_queue and rx_queue)."""
    conns = queued = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] != "01":                                  # ESTABLISHED only
                continue
            local = int(fields[1].split(":")[1], 16)
            remote = int(fields[2].split(":")[1], 16)
            if port in (local, remote):
                tx, rx = (int(x, 16) for x in fields[4].split(":"))
                queued += tx + rx
                conns += local == port
    return conns, queued


def wait_for(probe: Callable[[], T], ok: Callable[[T], bool], timeout: float,
             interval: float = 0.05) -> T:
    """Call ``probe`` until ``ok(value)`` or ``timeout`` seconds passed; return the last value
    (the caller asserts on it, so a failure shows what was measured)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if ok(value) or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


@contextlib.contextmanager
def realtime(*pids: int) -> Iterator[bool]:
    """Run every thread of the processes ``pids`` under ``SCHED_FIFO`` for the ``with`` block,
    then back under the normal policy; yields False (and changes nothing) where that is not
    permitted.

    For latency measurements on a shared machine: a broker's isolation is what they are about,
    not the other jobs that preempt the broker or the test for tens or hundreds of ms. (Threads
    the processes start inside the block inherit the policy; a busy real-time thread cannot
    lock the machine up: Linux keeps 5% of each CPU for the others.)"""
    def apply(policy: int, priority: int) -> bool:
        ok = True
        for pid in pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except FileNotFoundError:
                continue
            for tid in tids:
                try:
                    os.sched_setscheduler(int(tid), policy, os.sched_param(priority))
                except ProcessLookupError:
                    pass
                except PermissionError:
                    ok = False
        return ok

    ok = apply(os.SCHED_FIFO, 10)
    if not ok:
        apply(os.SCHED_OTHER, 0)
    try:
        yield ok
    finally:
        if ok:
            apply(os.SCHED_OTHER, 0)


class PeakRss:
    """``with PeakRss(pid) as p:`` samples a process's RSS every ``interval`` seconds in a
    thread; ``p.peak`` is the highest value seen (MiB), ``p.baseline`` the first."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid = pid
        self.interval = interval
        self.baseline = self.peak = rss_mb(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            self._done.wait(self.interval)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self.pid))


def _steal_and_total() -> tuple:
    """(steal, all) jiffies of every CPU since boot (first line of ``/proc/stat``)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (values[7] if len(values) > 7 else 0), sum(values[:8])


class MachineShare:
    """``with MachineShare(pid) as m:`` measures what a block of time gave a process: ``m.cpu``,
    the process's CPU seconds per wall second (1.0: one core, busy all along), and
    ``m.steal``, the fraction of the machine's CPU time that the hypervisor gave to other
    virtual machines (the ``steal`` column of ``/proc/stat``). A latency figure taken while
    ``steal`` was high says more about the neighbours than about the broker."""

    def __init__(self, pid: int):
        self.pid = pid
        self.cpu = self.steal = 0.0

    def __enter__(self) -> "MachineShare":
        self._t0 = time.monotonic()
        self._cpu0 = cpu_seconds(self.pid)
        self._steal0, self._all0 = _steal_and_total()
        return self

    def __exit__(self, *exc) -> None:
        wall = max(time.monotonic() - self._t0, 1e-9)
        self.cpu = (cpu_seconds(self.pid) - self._cpu0) / wall
        steal, total = _steal_and_total()
        self.steal = (steal - self._steal0) / max(total - self._all0, 1)
