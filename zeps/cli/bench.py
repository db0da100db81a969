"""``zeps bench``: publish/subscribe rate and latency against a running broker (like ``nats bench``).

Publishers and subscribers are separate processes on this machine, each with its own SDK
client. Subscribers subscribe live first; then every publisher sends ``--msgs / --pub`` messages
of ``--size`` bytes (as fast as it can, or at ``--rate`` messages per second in all) with its send
time (the machine's monotonic clock, shared by every process here) in the body, and each subscriber
records each message's delay. Prints the rates and the latency percentiles; ``--json`` prints one
JSON object instead.
"""
from __future__ import annotations

import json
import multiprocessing
import struct
import time

from .common import UsageError, _add_common, _add_endpoint, _positive_int, _stream_name

_TS = struct.Struct(">Q")
#: The largest --size (a broker's largest --max-message) and the most processes of a kind.
MAX_SIZE = 1 << 30
MAX_PROCESSES = 256


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="measure publish/subscribe rate and latency against a broker",
                       description=__doc__.split("\n\n", 1)[1].replace("\n", " "))
    p.add_argument("stream", metavar="STREAM", type=_stream_name, nargs="?", default="bench",
                   help="the stream to use (default 'bench'; messages stay in its journal)")
    p.add_argument("--msgs", type=_positive_int, default=100_000, help="messages in all")
    p.add_argument("--size", type=int, default=100, help="body size in bytes (at least 8)")
    p.add_argument("--pub", type=int, default=1, help="publisher processes (default 1)")
    p.add_argument("--sub", type=int, default=1, help="subscriber processes (default 1)")
    p.add_argument("--rate", type=float, default=0, help="messages per second in all (0: flat out)")
    p.add_argument("--confirm", action="store_true", help="publishers wait for confirms")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_endpoint(p)
    _add_common(p)
    p.set_defaults(func=cmd_bench)


def _child(kind: str, *args) -> None:
    """A child's work (``pub`` or ``sub``; a module-level function, as ``spawn`` needs); an
    error is put on its queues for the parent to say in one line (a child's traceback, then
    the parent's after 32 s, were all a broker that was down got; found by review)."""
    try:
        (_publisher if kind == "pub" else _subscriber)(*args)
    except BaseException as e:          # noqa: BLE001 - the parent reports it, exit 1
        error = ("error", f"{type(e).__name__}: {e}")
        args[-1].put(error)             # out (a publisher's), ready (a subscriber's) ...
        if kind == "sub":
            args[-2].put(error)         # ... and out


def _publisher(endpoint, stream, n, size, rate, confirm, timeout, curve, go, out):
    from zeps.clients import Client
    pad = b"x" * (size - 8)
    with Client(endpoint, stream, confirms=confirm, timeout=timeout, curve=curve) as c:
        go.wait()
        t0 = time.monotonic_ns()
        step = 1e9 / rate if rate else 0
        for i in range(n):
            if step:
                due = t0 + int(i * step)
                while time.monotonic_ns() < due:
                    time.sleep(max(0.0, (due - time.monotonic_ns()) / 1e9 - 0.0001))
            c.publish("bench", _TS.pack(time.monotonic_ns()) + pad)
        if confirm:
            c.wait_for_confirms()
        else:
            c.flush()
        out.put(("pub", n, (time.monotonic_ns() - t0) / 1e9))


def _subscriber(endpoint, stream, n, timeout, curve, out, ready):
    from zeps.clients import Client
    delays = []
    # create=True: the subscribers start before the publishers, and wait for them
    with Client(endpoint, stream, timeout=timeout, curve=curve, create=True) as c:
        sub = c.subscribe("", live=True)
        ready.put(("ready",))
        t0 = None
        for _ in range(n):
            msg = sub.next(timeout=max(timeout, 30.0))
            now = time.monotonic_ns()
            if t0 is None:
                t0 = now
            delays.append(now - _TS.unpack_from(msg.body)[0])
        out.put(("sub", n, (time.monotonic_ns() - t0) / 1e9, delays))


def _pct(values, p):
    return values[min(len(values) - 1, int(p / 100 * len(values)))] / 1e6 if values else None


def _result(queue, timeout: float, what: str):
    """The next item a child put on ``queue``, or its error said in one line (exit 1)."""
    import queue as queues
    from zeps.clients import ZepsError, ZepsTimeout
    try:
        item = queue.get(timeout=timeout)
    except queues.Empty:
        raise ZepsTimeout(f"no {what} within {timeout:g}s") from None
    if item[0] == "error":
        raise ZepsError(f"a bench process failed: {item[1]}")
    return item


def cmd_bench(args) -> int:
    if not 8 <= args.size <= MAX_SIZE:
        raise UsageError(f"--size must be from 8 (the send time rides in the body) to {MAX_SIZE}")
    if not 1 <= args.pub <= MAX_PROCESSES or not 0 <= args.sub <= MAX_PROCESSES:
        raise UsageError(f"--pub must be from 1 to {MAX_PROCESSES} and --sub from 0 to "
                         f"{MAX_PROCESSES}")
    if args.msgs < args.pub:
        raise UsageError("--msgs must be at least --pub (each publisher sends some)")
    per_pub = args.msgs // args.pub
    total = per_pub * args.pub
    ctx = multiprocessing.get_context("spawn")
    go, ready, out = ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_child, daemon=True,
                         args=("sub", args.endpoint, args.stream, total, args.connect_timeout,
                               args.curve, out, ready))
             for _ in range(args.sub)]
    procs += [ctx.Process(target=_child, daemon=True,
                          args=("pub", args.endpoint, args.stream, per_pub, args.size,
                                args.rate / args.pub if args.rate else 0, args.confirm,
                                args.connect_timeout, args.curve, go, out))
              for _ in range(args.pub)]
    for p in procs:
        p.start()
    try:
        for _ in range(args.sub):
            _result(ready, args.connect_timeout + 30, "subscriber ready")
        go.set()
        results = [_result(out, max(600.0, args.connect_timeout), "result") for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    pubs = [r for r in results if r[0] == "pub"]
    subs = [r for r in results if r[0] == "sub"]
    pub_rate = total / max(r[2] for r in pubs)
    delays = sorted(d for r in subs for d in r[3])
    report = {"stream": args.stream, "messages": total, "size": args.size,
              "publishers": args.pub, "subscribers": args.sub, "confirm": args.confirm,
              "publish_msgs_per_s": round(pub_rate),
              "deliver_msgs_per_s": round(sum(r[1] / r[2] for r in subs)) if subs else None,
              "latency_ms": {"p50": _pct(delays, 50), "p99": _pct(delays, 99),
                             "p99.9": _pct(delays, 99.9),
                             "max": delays[-1] / 1e6 if delays else None}}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{total:,} messages of {args.size} B, {args.pub} publisher(s), {args.sub} "
          f"subscriber(s){', confirmed' if args.confirm else ''}, stream {args.stream!r}")
    print(f"  publish   {pub_rate:>12,.0f} msgs/s  {pub_rate * args.size / 1e6:8.1f} MB/s")
    if subs:
        d = report["deliver_msgs_per_s"]
        lat = report["latency_ms"]
        print(f"  deliver   {d:>12,.0f} msgs/s  (all subscribers together)")
        print(f"  latency   p50 {lat['p50']:.3f} ms  p99 {lat['p99']:.3f} ms  "
              f"p99.9 {lat['p99.9']:.3f} ms  max {lat['max']:.3f} ms")
    return 0
