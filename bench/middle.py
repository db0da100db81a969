"""The process in the middle of a latency path (the broker, the ZeroMQ proxy, a forwarder),
seen from outside while a benchmark runs: its threads' CPU (/proc), how often its loop lost the
CPU, and waiting on its clients without outliving it (a client that waits for a middle process
that exited would wait until its own time-out).
"""
from __future__ import annotations

import os
import queue
import subprocess
import time
from typing import Dict

from bench.measure import cpu_seconds


def alive(middle) -> None:
    """SystemExit if the middle process (the broker, a ``subprocess.Popen``; or a forwarder, a
    ``multiprocessing.Process``) has exited: its clients would wait for it until they time out."""
    code = middle.poll() if isinstance(middle, subprocess.Popen) else middle.exitcode
    if code is not None:
        raise SystemExit(f"the middle process exited (status {code}) during the run")


def await_ready(event, middle, timeout: float) -> None:
    """Wait for a client's ``event`` while the middle process runs (SystemExit if it exits)."""
    deadline = time.monotonic() + timeout
    while not event.wait(1.0):
        alive(middle)
        if time.monotonic() > deadline:
            return                       # as before: the run goes on, its result says


def next_result(q, middle, timeout: float):
    """The next client's result from ``q``; SystemExit if the middle process exits meanwhile
    or nothing comes within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=1.0)
        except queue.Empty:
            alive(middle)
            if time.monotonic() > deadline:
                raise SystemExit(f"no result from the clients within {timeout:.0f} s") from None


def preemptions(pid: int) -> int:
    """How many times the broker's loop (its process's main thread, where the loop's greenlet
    runs) lost the CPU while it could have run on (involuntary context switches, /proc)."""
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        for line in f:
            if line.startswith("nonvoluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def thread_cpu(pid: int) -> Dict[str, float]:
    """User + system CPU seconds of a process's threads, in three groups (/proc): ``loop`` its
    main thread (the broker's loop, the proxy's, the forwarder's), ``zmq`` ZeroMQ's background
    threads (``ZMQbg/...``: the I/O thread, the reaper) and ``other`` the rest (the broker's
    sync and pool threads). A thread that ended between two readings is not counted."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"loop": 0.0, "zmq": 0.0, "other": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:                      # ended meanwhile
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        fields = rest.split()
        group = "loop" if tid == str(pid) else "zmq" if name.startswith("ZMQbg/") else "other"
        out[group] += (int(fields[11]) + int(fields[12])) / tick
    return out


def per_message(before: Dict[str, float], after: Dict[str, float], n: int) -> Dict[str, float]:
    return {k: max(0.0, after[k] - before[k]) / max(n, 1) for k in before}


def drive(middle, q, go, timeout: float):
    """Let a run's two clients go and take their results from ``q`` while the middle process
    runs, reading its CPU around them: ``(each result by its first item, the process's CPU
    seconds, its threads' CPU seconds before and after (:func:`thread_cpu`), how often its loop
    lost the CPU (:func:`preemptions`))``."""
    pid = middle.pid
    cpu, threads, preempted = cpu_seconds(pid), thread_cpu(pid), preemptions(pid)
    go.set()
    got = {}
    for _ in range(2):
        item = next_result(q, middle, timeout)
        got[item[0]] = item
    return (got, cpu_seconds(pid) - cpu, threads, thread_cpu(pid), preemptions(pid) - preempted)


def stop_clients(clients) -> None:
    """Terminate those of a run's client processes still running (a failed run's: they wait
    for nothing)."""
    for p in clients:
        if p.is_alive():
            p.terminate()
