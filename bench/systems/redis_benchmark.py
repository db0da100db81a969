"""Redis's own C client, ``redis-benchmark``: XADD pipelined by 100 (``-P 100``).

The server-capacity figure for Redis Streams: the fastest client there is for it. Also the
quickest way to fill a stream with ``n`` entries (one field, named as the routing key). Each
value is different: it starts with ``__rand_int__``, which ``-r`` makes redis-benchmark replace
by a random 12-digit number per command (it cannot send the suite's pseudo-random bodies).
"""
from __future__ import annotations

import subprocess

from bench.systems import KEY

PIPELINE = 100
CONNECTIONS = 50
RANDOM = "__rand_int__"


def value(size: int) -> str:
    """A ``size``-byte value whose head redis-benchmark replaces by a random number."""
    return RANDOM + "x" * max(0, size - len(RANDOM))


def xadd(port: int, stream: str, n: int, size: int, connections: int = CONNECTIONS,
         timeout: float = 3600.0) -> float:
    """XADD ``n`` entries of a ``size``-byte value to ``stream`` over ``connections``
    connections; the msg/s redis-benchmark reports (its own timing, from its first request to
    its last reply)."""
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(n),
            "-c", str(min(connections, max(1, n // PIPELINE))), "-P", str(PIPELINE),
            "-r", "1000000000", "--csv", "XADD", stream, "*", KEY, value(size)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {proc.stderr.strip() or proc.stdout}")
    rows = [line.split('","') for line in proc.stdout.splitlines() if line.startswith('"')]
    data = [r for r in rows if r[0].strip('"') != "test"]
    if not data:
        raise RuntimeError(f"redis-benchmark printed no figure: {proc.stdout!r}")
    return float(data[-1][1].strip('"'))
