"""Round trips to a server that sleeps between requests: the floor under any latency figure
of a Python server on this machine.

    python -m bench.bench_wakeup [--n 3000] [--rounds 3]

One request at a time from a DEALER in this process (a request only once the previous answer
came back, so the server is idle and asleep when each one arrives), to:

* a ROUTER echo server in its own process, plain pyzmq (blocking ``recv_multipart``);
* the same echo server under gevent (``zmq.green``), as the broker's loop is;
* the ZEPS broker: PING -> PING-OK;
* the ZEPS broker: PUBLISH from one DEALER -> DELIVER to another (both in this process).

Interleaved ``--rounds`` times; the percentiles of all round trips of a kind, in microseconds.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile

import zmq

from bench.bench_broker import dealer, request, start_broker
from bench.measure import percentile, step_times
from zeps.protocol import commands as c
from zeps.protocol import encode, encode_publish

_ECHO = """
import sys
if sys.argv[1] == "green":
    import zmq.green as zmq
else:
    import zmq
s = zmq.Context().socket(zmq.ROUTER)
port = s.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
while True:
    s.send_multipart(s.recv_multipart())
"""


def _echo(kind: str):
    proc = subprocess.Popen([sys.executable, "-c", _ECHO, kind], stdout=subprocess.PIPE)
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        proc.wait()
        raise SystemExit(f"the {kind} echo server did not start: {line!r}")
    return proc, f"tcp://127.0.0.1:{int(line)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    ctx = zmq.Context()
    servers: list = []
    broker = None
    tmp = tempfile.mkdtemp(prefix="zeps-bench-wakeup-")
    try:        # started inside: a broker that does not start must not leave the echoes running
        for kind in ("plain", "green"):
            servers.append(_echo(kind))
        broker, endpoint = start_broker(tmp, "interval")
        plain, green = (dealer(ctx, ep) for _p, ep in servers)
        ping, pub, sub = dealer(ctx, endpoint), dealer(ctx, endpoint), dealer(ctx, endpoint)
        for s in (pub, sub):
            request(s, c.Attach("wakeup"), c.AttachOk)
        request(sub, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
        sub.send(encode(c.Credit(1 << 40)))
        ping_frame, publish_frame = encode(c.Ping()), encode_publish("k", b"x" * 100)

        def echo(sock):
            def once():
                sock.send(b"x")
                sock.recv()
            return once

        def broker_ping():
            ping.send(ping_frame)
            ping.recv()

        def publish_deliver():
            pub.send(publish_frame)
            sub.recv()

        kinds = {"pyzmq ROUTER echo (own process)": echo(plain),
                 "pyzmq ROUTER echo under gevent (zmq.green)": echo(green),
                 "ZEPS broker: PING -> PING-OK": broker_ping,
                 "ZEPS broker: PUBLISH -> DELIVER": publish_deliver}
        for once in kinds.values():                   # warm up
            step_times(200, once)
        got = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for k, once in kinds.items():
                got[k] += step_times(args.n, once)
        print(f"{args.n} round trips x {args.rounds} rounds, one at a time (the server idle "
              "when each arrives); microseconds\n")
        print("| to | p50 | p90 | p99 |")
        print("|---|---:|---:|---:|")
        for k, v in got.items():
            print(f"| {k} | {percentile(sorted(v), 50):.0f} | {percentile(sorted(v), 90):.0f} | "
                  f"{percentile(sorted(v), 99):.0f} |")
    finally:
        for p, _ep in servers:
            p.kill()
            p.wait()
        if broker is not None:
            broker.terminate()
            broker.wait()
        ctx.destroy(0)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
