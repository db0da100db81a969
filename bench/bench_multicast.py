"""Multicast fan-out beside the broker's unicast fan-out, in one run.

For R = 1 and R = 10 receivers, one publisher publishes N messages of SIZE bytes to a fresh
stream as fast as it can, and R receiver processes read them live:

* multicast: a bridge (``python -m zeps.multicast bridge``) sends them to one group; each
  receiver is a :class:`~zeps.clients.MulticastSubscriber` (repairs from the broker included);
* unicast (the baseline): each receiver subscribes to the broker with
  :meth:`Client.subscribe` (``live=True``).

Reported: delivered msgs/s (R x N over the time from the first publish to the last receiver's
Nth message), the slowest receiver's rate, and the CPU seconds the bridge and the broker spent:
what more receivers cost the sending side. Multicast runs inside a private network namespace:
the script re-executes itself under ``unshare -n`` (needs root), with loopback up and
224.0.0.0/4 routed to it.

    python -m bench.bench_multicast [--n 50000] [--size 100]
"""
from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import cpu_seconds

REPO = Path(__file__).resolve().parent.parent
GROUP = "239.192.9.9:9999"
_NETNS = "ip link set lo up && ip route add 224.0.0.0/4 dev lo"
_INSIDE = "ZEPS_BENCH_NETNS"


def start(args, what: str):
    """A child process and the first line it prints (its ready line)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen(args, stdout=subprocess.PIPE, env=env, cwd=str(REPO))
    ready, _, _ = select.select([p.stdout], [], [], 30)
    line = p.stdout.readline().decode() if ready else ""
    if not line:
        p.kill()
        raise SystemExit(f"{what} did not start")
    return p, line


def receiver_main(mode: str, endpoint: str, stream: str, n: int) -> None:
    """One receiver process: print 'ready', read n messages, print what it measured (JSON)."""
    from dataclasses import asdict

    from zeps.clients import Client, MulticastSubscriber

    if mode == "multicast":
        sub = MulticastSubscriber(GROUP, endpoint, stream, live=True)
    else:
        client = Client(endpoint, stream)
        sub = client.subscribe(live=True)
    print("ready", flush=True)
    got, last = 0, 0
    while got < n:
        m = sub.next(timeout=120)
        if m.sequence <= last:
            raise SystemExit(f"out of order: {m.sequence} after {last}")
        last = m.sequence
        got += 1
    done = time.monotonic()
    stats = asdict(sub.stats) if mode == "multicast" else {}
    sub.close()
    print(json.dumps({"done": done, "stats": stats}), flush=True)


def one_run(endpoint: str, broker_pid: int, mode: str, receivers: int, n: int, size: int):
    from zeps.clients import Client, admin

    stream = f"{mode}{receivers}"
    admin.create_stream(endpoint, stream)          # the bridge and receivers read: they do not
    bridge = None
    if mode == "multicast":
        bridge, _ = start([sys.executable, "-m", "zeps.multicast", "bridge", "--endpoint",
                           endpoint, "--stream", stream, "--group", GROUP], "the bridge")
    procs = [start([sys.executable, "-m", "bench.bench_multicast", "--receiver", mode, endpoint,
                    stream, str(n)], "a receiver")[0] for _ in range(receivers)]
    body = b"x" * size
    cpu_broker = cpu_seconds(broker_pid)
    cpu_bridge = cpu_seconds(bridge.pid) if bridge else 0.0
    t0 = time.monotonic()
    with Client(endpoint, stream) as pub:
        for _ in range(n):
            pub.publish("k", body)
        pub.flush()
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"a {mode} receiver failed ({p.returncode})")
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    cpu_broker = cpu_seconds(broker_pid) - cpu_broker
    if bridge:
        cpu_bridge = cpu_seconds(bridge.pid) - cpu_bridge
        bridge.terminate()
        bridge.wait(30)
    elapsed = max(r["done"] for r in results) - t0
    totals = {}
    for r in results:
        for k, v in r["stats"].items():
            totals[k] = totals.get(k, 0) + v
    return {"mode": mode, "receivers": receivers, "msgs_per_s": receivers * n / elapsed,
            "slowest_per_s": n / elapsed, "cpu_broker": cpu_broker, "cpu_bridge": cpu_bridge,
            "unicast": totals.get("unicast", 0), "fallbacks": totals.get("fallbacks", 0),
            "repairs": totals.get("repairs", 0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--receiver", nargs=4, metavar=("MODE", "ENDPOINT", "STREAM", "N"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.receiver:
        mode, endpoint, stream, n = a.receiver
        receiver_main(mode, endpoint, stream, int(n))
        return 0
    if os.environ.get(_INSIDE) != "1":
        if shutil.which("unshare") is None:
            raise SystemExit("needs unshare (util-linux) and root for a private network namespace")
        env = dict(os.environ, **{_INSIDE: "1"})
        cmd = f"{_NETNS} && exec {sys.executable} -m bench.bench_multicast {' '.join(sys.argv[1:])}"
        return subprocess.call(["unshare", "-n", "sh", "-c", cmd], env=env, cwd=str(REPO))

    from bench.bench_broker import start_broker

    with tempfile.TemporaryDirectory() as tmp:
        broker, endpoint = start_broker(tmp, "interval")
        try:
            rows = [one_run(endpoint, broker.pid, mode, r, a.n, a.size)
                    for r in (1, 10) for mode in ("unicast", "multicast")]
        finally:
            broker.terminate()
            broker.wait(30)
    print(f"\n{a.n} messages of {a.size} B per run, live, receivers in separate processes, "
          f"tcp + UDP multicast on loopback in a private namespace, {os.cpu_count()} cores\n")
    print("| receivers | path | delivered msgs/s | slowest receiver msgs/s | broker CPU s | "
          "bridge CPU s | from broker (repairs, fallbacks) |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for r in rows:
        path = ("multicast (bridge)" if r["mode"] == "multicast"
                else "unicast (broker fan-out)")
        extra = (f"{r['unicast']} ({r['repairs']}, {r['fallbacks']})"
                 if r["mode"] == "multicast" else "all")
        print(f"| {r['receivers']} | {path} | {r['msgs_per_s']:,.0f} | "
              f"{r['slowest_per_s']:,.0f} | {r['cpu_broker']:.2f} | "
              f"{r['cpu_bridge']:.2f} | {extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
