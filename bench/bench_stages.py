"""Where a message's latency goes: per-stage timestamps along publish -> deliver, at a fixed rate.

    python -m bench.bench_stages [--rate 10000] [--seconds 2] [--size 100]
                                 [--client sdk|raw|sdk/raw|raw/sdk|proxy|pyproxy[+N]|pyloop
                                           |pycb|pycbw|pypoll[,...]]
                                 [--fsync interval]
                                 [--runs 1] [--summary | --table] [--pacer sleep|spin]

One publisher process paced at ``--rate`` (its send time, ``time.monotonic_ns``, the clock every
process of the machine shares, in the first 8 bytes of each body), one live subscriber process
and a broker process, each instrumented from the outside (bench-only wrappers installed in that
process before it starts; the broker's code is the checkout's, unchanged). Every message is
followed through these stamps, matched by its send time:

=====  ========================================================================================
P0     the publisher's clock read, just before ``Client.publish`` (raw: the DEALER's send)
P1     ``publish`` returned (the frame is in ZeroMQ's queue)
W      the broker's loop woke up from its wait (the last wake-up before B1; none when busy)
B1     the broker's core got the frame (``BrokerCore.receive``)
B2     the journal append of its round returned (``Journal.append_batch``, or ``append``)
B3     routing done: its DELIVER (or DELIVER-BATCH) is in the core's outbox
B4     the broker's socket took the round's outbox (``Broker._send`` returned; before the
       socket loops of zeps/broker/sockio.py: the socket took the frame)
S1     the subscriber's peering got the frame (``Peering.receive``; raw: ``recv`` returned)
S2     the application got the message (``Subscription.next`` returned; raw: as S1)
=====  ========================================================================================

Each process also records its garbage collections (``gc.callbacks``), the broker its fsyncs
(``Journal.sync``, in gevent's thread pool). The report gives each stage's p50 / p99 / p99.9,
then, for the messages whose end-to-end delay is at or above the p99 (and the p99.9), each
stage's mean share and how many of them overlapped a collection or an fsync, each process's CPU
per message, how often the broker's loop lost the CPU to another thread (its thread's
involuntary context switches per message), any wait of the broker's loop that outlasted a
message already sent to it, and the publisher's stalls (a send 1 ms or more later than due
after the one before: the host did not run a process that only sleeps and sends; the proxy's
runs count them too, and ``--table`` gives them per run).
``--client sdk/raw`` runs the SDK's publisher with the raw subscriber, ``raw/sdk`` the raw
publisher with the SDK's subscriber (which side of the SDK costs what, beside ``sdk`` and
``raw``). ``--client proxy`` runs the same paced publisher through ZeroMQ's XSUB/XPUB proxy (end
to end only); ``--client sdk,proxy`` runs both in turn within each run and says the SDK's p99
over the proxy's. ``--client pyproxy`` puts in the proxy's place the same forwarder written in
the broker's stack (pyzmq under gevent, ``zmq.green``, two greenlets that only forward): the
floor of a broker written in it, journal and routing aside; ``pyproxy+N`` the same forwarder
burning N µs of CPU per message after each send (where a middle process's CPU per message puts
the tail, on a given machine); ``pyloop`` the forwarder in the broker's earlier loop style (raw
pyzmq without blocking, one wait on gevent's hub for both sockets: a ``Waiter``, watchers
started and a timer made per wait); ``pycb`` the same forwarder in the broker's loop style (run
from the hub's callbacks of watchers started once, no wait set up per message): the floor of the
broker's shell; ``pycbw`` that one writing each published message to a file before it forwards
it (the floor of a broker whose round for one PUBLISH were compiled); ``pypoll`` the same loop
waiting in ZeroMQ's own ``zmq_poll`` instead of gevent's hub (what the shell would save without
gevent). ``--summary`` prints ``name=value`` figures (for ``python -m bench.ab``); ``--table``
one table of every run's end-to-end figures and CPU per message, a row per client, instead of
the stage tables.
``ZEPS_BENCH_BROKER_ARGS`` gives the broker more options (shell words, ``--io-scheduling
normal``: :func:`bench.stamped_broker.broker_options`). ``ZEPS_STAGES_PROFILE=FILE`` cProfiles
the broker into FILE; ``ZEPS_STAGES_GC`` tries garbage collector settings in the broker
(``freeze``, ``T0[,T1[,T2]]`` thresholds, ``:``-separated).

The parts, each in its own module: :mod:`bench.stamps` (the stamps and their analysis),
:mod:`bench.stamped_broker` (the broker with stamps), :mod:`bench.forwarders` (the proxy and
the Python forwarders, with their own clients), :mod:`bench.middle` (the middle process's
threads' CPU, and waiting on its clients); here, the broker's clients, a run and the reports.
"""
from __future__ import annotations

import argparse
from array import array
import multiprocessing
import pickle
import signal
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import bench.systems
from bench.forwarders import PYPROXY, forwarder_of, run_proxy
from bench.middle import await_ready, drive, per_message, stop_clients
from bench.stamped_broker import broker_child, start_broker
from bench.stamps import (END_KEY, KEY, STAGES, STALL_NS, STAMP_BYTES, analyse, first_times,
                          frame_stamps, gc_probe)
from bench.systems import pace

def _publisher(kind, endpoint, stream, rate, seconds, size, ready, go, out):
    gcs = gc_probe()
    pad = b"x" * max(0, size - STAMP_BYTES)
    mono = time.monotonic_ns
    p1 = array("q")             # send time, return time, ...: no object per message (no GC)
    if kind == "sdk":
        from zeps.clients import Client
        with Client(endpoint, stream, timeout=60) as cl:
            ready.set()
            go.wait()
            cpu = time.process_time()
            pub = cl.publish
            for _ in pace(rate, seconds):
                t = mono()
                pub(KEY, t.to_bytes(8, "big") + pad)
                p1.extend((t, mono()))
            cpu = time.process_time() - cpu
            cl.flush()
            pub(END_KEY, b"x" * 8)
            cl.flush()
    else:
        import zmq
        from bench.bench_broker import dealer, request
        from zeps.protocol import commands as c
        from zeps.protocol import encode_publish
        ctx = zmq.Context()
        s = dealer(ctx, endpoint)
        request(s, c.Attach(stream), c.AttachOk)
        ready.set()
        go.wait()
        cpu = time.process_time()
        send = s.send
        for _ in pace(rate, seconds):
            t = mono()
            send(encode_publish(KEY, t.to_bytes(8, "big") + pad))
            p1.extend((t, mono()))
        cpu = time.process_time() - cpu
        send(encode_publish(END_KEY, b"x" * 8))
        request(s, c.Ping(), c.PingOk)
        s.close()
        ctx.term()
    out.put(("pub", p1, gcs, cpu))


def _subscriber(kind, endpoint, stream, ready, go, out):
    gcs = gc_probe()
    mono = time.monotonic_ns
    s1 = array("Q")             # send time, time its frame came, ... (first_times)
    s2 = array("q")             # send time, time the application got it, ...
    if kind == "sdk":
        from zeps.clients import Client
        from zeps.clients.peering import Peering
        receive = Peering.receive

        def receive_stamped(self, frame, now):
            t = mono()
            for s in frame_stamps(frame):
                s1.extend((s, t))
            return receive(self, frame, now)
        Peering.receive = receive_stamped
        with Client(endpoint, stream, timeout=60, create=True) as cl:
            nxt = cl.subscribe("", live=True).next
            ready.set()
            go.wait()
            cpu = time.process_time()
            while True:
                msg = nxt(timeout=60)
                t = mono()
                if msg.key == END_KEY:
                    cpu = time.process_time() - cpu
                    break
                s2.extend((int.from_bytes(msg.body[:8], "big"), t))
    else:
        import zmq
        from bench.bench_broker import dealer, request
        from zeps.protocol import commands as c
        from zeps.protocol import encode
        from zeps.protocol.deliver import DELIVER_ID, KEY_OFFSET, KEYLEN_OFFSET
        ctx = zmq.Context()
        s = dealer(ctx, endpoint)
        request(s, c.Attach(stream), c.AttachOk)
        request(s, c.Subscribe("", c.LATEST_LIVE), c.SubscribeOk)
        s.send(encode(c.Credit(1 << 40)))
        ready.set()
        go.wait()
        cpu = time.process_time()
        end = END_KEY.encode()
        while True:
            frame = s.recv()
            t = mono()
            if frame[2] != DELIVER_ID:
                continue
            klen = frame[KEYLEN_OFFSET]
            if frame[KEY_OFFSET:KEY_OFFSET + klen] == end:
                cpu = time.process_time() - cpu
                break
            st = frame_stamps(frame)[0]
            s1.extend((st, t))
            s2.extend((st, t))
        s.close()
        ctx.term()
    out.put(("sub", first_times(s1), s2, gcs, cpu))


def kinds(client: str) -> Tuple[str, str]:
    """The publisher's and the subscriber's kind (``sdk`` or ``raw``) of a broker's client:
    ``sdk``, ``raw``, or ``PUB/SUB`` (``sdk/raw``: the SDK's publisher, a raw subscriber)."""
    pub, mixed, sub = client.partition("/")
    if not mixed:
        sub = pub
    if pub not in ("sdk", "raw") or sub not in ("sdk", "raw"):
        raise ValueError(f"not a broker's client: {client!r}")
    return pub, sub


def run_once(kind: str, rate: float, seconds: float, size: int, fsync: str) -> dict:
    pub_kind, sub_kind = kinds(kind)
    fork = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="zeps-stages-") as tmp:
        proc, endpoint, stamps = start_broker(tmp, fsync)
        clients = []
        try:
            q = fork.Queue()
            rp, rs, go = fork.Event(), fork.Event(), fork.Event()
            sub = fork.Process(target=_subscriber,
                               args=(sub_kind, endpoint, "stages", rs, go, q))
            sub.start()
            clients.append(sub)
            await_ready(rs, proc, 60)
            pub = fork.Process(target=_publisher,
                               args=(pub_kind, endpoint, "stages", rate, seconds, size, rp,
                                     go, q))
            pub.start()
            clients.append(pub)
            await_ready(rp, proc, 60)
            time.sleep(0.2)
            got, cpu, threads_before, threads, preempted = drive(proc, q, go, seconds + 120)
            pub.join()
            sub.join()
        finally:
            stop_clients(clients)
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        with open(stamps, "rb") as f:
            broker = pickle.load(f)
    _, p1, pgc, pcpu = got["pub"]
    _, s1, s2, sgc, scpu = got["sub"]
    res = analyse({"p1": p1, "gc": pgc}, {"s1": s1, "s2": s2, "gc": sgc}, broker,
                  int(1e9 / rate))
    n = len(p1) // 2
    res["cpu"] = {"publisher": pcpu / n, "broker": cpu / n, "subscriber": scpu / n}
    res["threads"] = per_message(threads_before, threads, n)
    res["preempted"] = preempted / n
    res["rounds"] = broker.get("rounds", [])
    return res


def report(res: dict, title: str) -> str:
    us = lambda ns: f"{ns / 1e3:,.0f}"          # noqa: E731
    lines = [f"### {title}", "",
             f"{res['n']:,} of {res['sent']:,} messages followed end to end; "
             f"end-to-end p50 {us(res['e2e'][50])} us, p99 {us(res['e2e'][99])} us, "
             f"p99.9 {us(res['e2e'][99.9])} us", "",
             "| stage | p50 | p99 | p99.9 | mean | mean in the slowest 1% | "
             "mean in the slowest 0.1% |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, a, b in STAGES:
        s = res["stages"][name]
        lines.append(f"| {name} ({a}→{b}) | {us(s[50])} | {us(s[99])} | {us(s[99.9])} | "
                     f"{us(s['mean'])} | {us(res['tail'][99][name])} | "
                     f"{us(res['tail'][99.9][name])} |")
    lines.append("")
    for p in (99, 99.9):
        t = res["tail"][p]
        lines.append(f"* slowest messages (e2e >= p{p}): {t['_n']}, mean {us(t['_e2e'])} us; "
                     f"overlapping a collection: publisher {t['_gc_pub']}, broker "
                     f"{t['_gc_broker']}, subscriber {t['_gc_sub']}; an fsync: {t['_fsync']}")
    lines.append("* collections during the run: " + "; ".join(
        f"{k}: {v}" for k, v in res["gc_counts"].items())
                 + f"; fsyncs: {res['fsyncs']} (busy {res['fsync_busy']:.0%} of the run: the "
                 "share of slow messages that would overlap one by chance)")
    lines.append("* " + _stalls_text(res["pub_stalls"]))
    if res.get("stuck_waits"):
        lines.append("* the broker's loop slept while a message waited: " + ", ".join(
            f"{d / 1e6:.1f} ms (timeout {t * 1e3:.1f} ms)" for d, t in res["stuck_waits"]))
    lines.append("* CPU per message (us): " + ", ".join(
        f"{k} {v * 1e6:.1f}" for k, v in res["cpu"].items())
        + (" (the publisher's includes its pacing, which spins between messages)"
           if bench.systems.PACER == "spin" else ""))
    lines.append("* the broker's CPU per message by thread (us): " + _threads_text(res["threads"]))
    lines.append(f"* the broker's loop lost the CPU to another thread (involuntary context "
                 f"switches of its thread): {res['preempted']:.2f} per message")
    if res.get("rounds"):
        lines.append("* " + _rounds_text(res["rounds"]))
    return "\n".join(lines)


def _rounds_text(rounds: List[int]) -> str:
    """How many messages the broker's rounds journalled at once (a round's one PUBLISH takes
    ``zeps/broker/lone.py``'s way, more take the batch's)."""
    sizes = [n for n in rounds if n]
    share = lambda k: sum(1 for n in sizes if n == k) / len(sizes)     # noqa: E731
    return (f"the broker's rounds that journalled messages: {len(sizes):,}, "
            f"{sum(sizes) / len(sizes):.2f} messages each on average; one message: "
            f"{share(1):.0%}, two: {share(2):.0%}, more: {1 - share(1) - share(2):.0%}")


def _stalls_text(stalls: Tuple[int, int]) -> str:
    n, longest = stalls
    return (f"the publisher's stalls (a paced send {STALL_NS / 1e6:g} ms or more later than "
            f"due after the one before): {n}, the longest gap {longest / 1e6:.1f} ms")


def _threads_text(threads: Dict[str, float]) -> str:
    return (f"main thread (the loop) {threads['loop'] * 1e6:.1f}, ZeroMQ's threads "
            f"{threads['zmq'] * 1e6:.1f}, others {threads['other'] * 1e6:.1f}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["broker"]:
        return broker_child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--client", default="sdk",
                    help="sdk (the ZEPS SDK), raw (bare pyzmq DEALERs), proxy (ZeroMQ's "
                         "XSUB/XPUB proxy, end to end only), pyproxy (the same forwarder with "
                         "zmq.green), pyproxy+N (that one burning N µs of CPU per message) or "
                         "pyloop (the forwarder waiting on gevent's hub per message), pycb "
                         "(that forwarder run from the hub's callbacks: the broker's loop "
                         "style), pycbw (that one writing each message to a file), pypoll "
                         "(that loop waiting in zmq_poll); sdk/raw, raw/sdk (the SDK's "
                         "publisher, a raw subscriber, or the other way round); several, "
                         "comma-separated, run in turn within each run, their figures prefixed "
                         "with their names")
    ap.add_argument("--fsync", choices=("always", "interval", "never"), default="interval")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--pacer", choices=("sleep", "spin"), default=bench.systems.PACER,
                    help="how the publisher waits for each message's due time "
                         "(bench.systems.PACER; default sleep)")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--summary", action="store_true",
                     help="one line of name=value figures per run instead of the tables")
    how.add_argument("--table", action="store_true",
                     help="one table of every run's end-to-end figures and CPU per message "
                          "instead of the stage tables")
    args = ap.parse_args(argv)
    bench.systems.PACER = args.pacer       # the forked publishers pace with it
    if args.size < STAMP_BYTES:
        ap.error(f"--size must be at least {STAMP_BYTES}")
    clients = args.client.split(",")
    if not clients or any(c not in MIDDLE and not forwarder_of(c) for c in clients):
        ap.error("--client: sdk, raw, sdk/raw, raw/sdk, proxy, pyproxy, pyproxy+N (N µs), "
                 "pyloop, pypoll, pycb or pycbw, comma-separated")
    rows: List[tuple] = []          # --table: (run, client, e2e, cpu, p99 ratio, middle's threads)
    for i in range(args.runs):
        p99 = {}
        for client in clients:
            head = f"{client}_" if len(clients) > 1 else ""
            forwarder = forwarder_of(client)
            if forwarder:
                res = run_proxy(args.rate, args.seconds, args.size, *forwarder)
                e = res["e2e"]
                p99[client] = e[99]
                if args.table:
                    rows.append([i + 1, client, e, res["cpu"], None, res["threads"],
                                 res["pub_stalls"]])
                    continue
                if not args.summary:
                    print(f"### proxy, {args.rate:,.0f} msg/s, {args.size} B, {args.pacer} pacer, "
                          f"run {i + 1}\n\n"
                          f"The same paced publisher through ZeroMQ's XSUB/XPUB proxy: end to "
                          f"end p50 {e[50] / 1e3:,.0f} us, p99 {e[99] / 1e3:,.0f} us, p99.9 "
                          f"{e[99.9] / 1e3:,.0f} us; CPU per message (us): " + ", ".join(
                              f"{k} {v * 1e6:.1f}" for k, v in res["cpu"].items())
                          + "; the proxy's by thread: " + _threads_text(res["threads"])
                          + "; " + _stalls_text(res["pub_stalls"]) + "\n", flush=True)
                    continue
                print(f"{head}e2e_p50_us={e[50] / 1e3:.0f} {head}e2e_p99_us={e[99] / 1e3:.0f} "
                      f"{head}e2e_p99.9_us={e[99.9] / 1e3:.0f} " + " ".join(
                          f"{head}cpu_{k}_us={v * 1e6:.1f}" for k, v in res["cpu"].items())
                      + " " + " ".join(f"{head}cpu_middle_{k}_us={v * 1e6:.1f}"
                                       for k, v in res["threads"].items())
                      + f" {head}pub_stalls={res['pub_stalls'][0]}"
                      f" {head}pub_stall_max_us={res['pub_stalls'][1] / 1e3:.0f}", flush=True)
                continue
            res = run_once(client, args.rate, args.seconds, args.size, args.fsync)
            p99[client] = res["e2e"][99]
            if args.table:
                rows.append([i + 1, client, res["e2e"], res["cpu"], None, res["threads"],
                             res["pub_stalls"]])
                continue
            if args.summary:
                e, cpu = res["e2e"], res["cpu"]
                figs = [f"e2e_p50_us={e[50] / 1e3:.0f}", f"e2e_p99_us={e[99] / 1e3:.0f}",
                        f"e2e_p99.9_us={e[99.9] / 1e3:.0f}",
                        f"followed_share={res['n'] / max(res['sent'], 1):.3f}"]
                figs += [f"cpu_{k}_us={v * 1e6:.1f}" for k, v in cpu.items()]
                figs += [f"cpu_middle_{k}_us={v * 1e6:.1f}" for k, v in res["threads"].items()]
                figs.append(f"loop_preempted_per_msg={res['preempted']:.3f}")
                figs += [f"pub_stalls={res['pub_stalls'][0]}",
                         f"pub_stall_max_us={res['pub_stalls'][1] / 1e3:.0f}"]
                figs += [f"{a}{b}_p{p}_us={res['stages'][name][p] / 1e3:.0f}"
                         for name, a, b in STAGES for p in (50, 99)]
                figs += [f"{a}{b}_slowest1%_us={res['tail'][99][name] / 1e3:.0f}"
                         for name, a, b in STAGES]
                print(" ".join(head + f for f in figs), flush=True)
                continue
            print(report(res, f"{client}, {args.rate:,.0f} msg/s, {args.size} B, fsync="
                              f"{args.fsync}, {args.pacer} pacer, run {i + 1}; microseconds") + "\n",
                  flush=True)
        if "proxy" in p99 and p99["proxy"]:
            over = {c: p99[c] / p99["proxy"] for c in clients if c != "proxy"}
            if args.table:
                for row in rows:
                    if row[0] == i + 1:
                        row[4] = over.get(row[1], 1.0)
                continue
            if args.summary:
                print(" ".join(f"{c}_p99_over_proxy={r:.2f}" for c, r in over.items()),
                      flush=True)
            else:
                print("* p99 over the proxy's in this run: " + ", ".join(
                    f"{c} {r:.2f}" for c, r in over.items()) + "\n", flush=True)
    if args.table:
        print(table(rows, f"{args.rate:,.0f} msg/s, {args.size} B, fsync={args.fsync} (sdk, "
                          f"raw), {args.pacer} pacer"))
    return 0


#: What each client's middle process is, in ``--table``.
MIDDLE = {"sdk": "broker", "raw": "broker", "sdk/raw": "broker", "raw/sdk": "broker",
          "proxy": "proxy"}
CLIENT_NAMES = {"sdk": "ZEPS SDK", "raw": "ZEPS, raw pyzmq", "proxy": "ZeroMQ XSUB/XPUB proxy",
                "sdk/raw": "ZEPS, SDK publisher, raw subscriber",
                "raw/sdk": "ZEPS, raw publisher, SDK subscriber",
                "pyproxy": "forwarder in pyzmq + gevent",
                "pyloop": "forwarder waiting on the hub per message",
                "pypoll": "forwarder waiting in zmq_poll",
                "pycb": "forwarder in the broker's loop style (hub callbacks)",
                "pycbw": "the same forwarder, writing each message to a file"}


def client_name(client: str) -> str:
    burn = PYPROXY.fullmatch(client)
    if burn and burn[1]:
        return f"{CLIENT_NAMES['pyproxy']}, +{burn[1]} µs CPU per message"
    return CLIENT_NAMES[client]


def table(rows: List[tuple], what: str) -> str:
    """``--table``: a row per run and client, then each client's medians over the runs."""
    us = lambda ns: f"{ns / 1e3:,.0f}"          # noqa: E731
    cpu = lambda c, k: f"{c[k] * 1e6:.1f}" if k in c else "—"    # noqa: E731
    out = [f"{what}; end to end in microseconds, CPU per message in microseconds; the middle "
           "process is the broker, the proxy or the forwarder", "",
           "| run | path | p50 | p99 | p99.9 | CPU: middle | its main thread | its ZeroMQ "
           "threads | CPU: subscriber | p99 ÷ proxy's | publisher's stalls (longest, ms) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    stalls = lambda n, longest: f"{n:g} ({longest / 1e6:.1f})"    # noqa: E731
    for run, client, e, c, over, t, st in rows:
        middle = MIDDLE.get(client, "proxy")
        out.append(f"| {run} | {client_name(client)} | {us(e[50])} | {us(e[99])} | "
                   f"{us(e[99.9])} | {cpu(c, middle)} | {cpu(t, 'loop')} | {cpu(t, 'zmq')} | "
                   f"{cpu(c, 'subscriber')} | " + (f"{over:.2f}" if over is not None else "—")
                   + f" | {stalls(*st)} |")
    med = statistics.median
    for client in dict.fromkeys(r[1] for r in rows):
        mine = [r for r in rows if r[1] == client]
        overs = [r[4] for r in mine if r[4] is not None]
        out.append(f"| median | {client_name(client)} | "
                   + " | ".join(us(med(r[2][p] for r in mine)) for p in (50, 99, 99.9)) + " | "
                   + " | ".join(f"{med(r[i][k] for r in mine) * 1e6:.1f}"
                                if all(k in r[i] for r in mine) else "—"
                                for i, k in ((3, MIDDLE.get(client, "proxy")), (5, "loop"),
                                             (5, "zmq"), (3, "subscriber"))) + " | "
                   + (f"{med(overs):.2f}" if overs else "—") + " | "
                   + stalls(med(r[6][0] for r in mine), med(r[6][1] for r in mine)) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
