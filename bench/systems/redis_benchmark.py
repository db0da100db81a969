"""Redis's own C client, ``redis-benchmark``: XADD pipelined by 100 over 50 connections.

The server-capacity figure for Redis Streams: the fastest client there is for it. Also the
quickest way to fill a stream with ``n`` entries (one field, named as the routing key).
"""
from __future__ import annotations

import subprocess

from bench.systems import KEY, body

PIPELINE = 100
CONNECTIONS = 50


def xadd(port: int, stream: str, n: int, size: int, timeout: float = 3600.0) -> float:
    """XADD ``n`` entries of a ``size``-byte value to ``stream``; the msg/s redis-benchmark
    reports (its own timing, from its first request to its last reply)."""
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(n),
            "-c", str(min(CONNECTIONS, max(1, n // PIPELINE))), "-P", str(PIPELINE), "--csv",
            "XADD", stream, "*", KEY, body(size).decode()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {proc.stderr.strip() or proc.stdout}")
    rows = [line.split('","') for line in proc.stdout.splitlines() if line.startswith('"')]
    data = [r for r in rows if r[0].strip('"') != "test"]
    if not data:
        raise RuntimeError(f"redis-benchmark printed no figure: {proc.stdout!r}")
    return float(data[-1][1].strip('"'))
