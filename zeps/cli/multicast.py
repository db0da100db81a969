"""Command-line parts of multicast: ``zeps bridge multicast`` and ``zeps subscribe --multicast``.

The ``zeps`` command wires these in (:mod:`.bridge`, :mod:`.subscribe`); ``python -m
zeps.multicast`` offers the same commands on their own (:func:`main`). Exit status: 0 when
stopped (SIGTERM, ``--count`` or ``--timeout`` reached), 130 after Ctrl-C (SIGINT), 1 when the
broker does not answer or refuses, or the group cannot be used, 2 for bad arguments or a stream
that does not exist (one line on stderr).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from zeps import units
from zeps.multicast.config import ReceiverConfig
from zeps.multicast.sender import DEFAULT_DATAGRAM, DEFAULT_HEAD_INTERVAL
from zeps.multicast.transport import check_interface, parse_group

from .common import (MAX_NUMBER, Parser, _endpoint, _int_upto, _pattern, _positive_int,
                     _seconds, _stream_name, message_printer)

__all__ = [
    "add_bridge_arguments",
    "add_subscribe_multicast_arguments",
    "main",
    "run_bridge",
    "run_subscribe_multicast",
]


def _type(parse, what: str = ""):
    """An argparse type from a parser raising ValueError."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{what}{e}") from None
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _int_in(low: int, high: int, name: str):
    def check(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise ValueError(f"not a whole number: {text!r}") from None
        if not low <= v <= high:
            raise ValueError(f"{name} must be from {low} to {high}: {text!r}")
        return v
    return _type(check)


def _positive_duration(text: str) -> float:
    v = units.parse_duration(text)
    if not v > 0:
        raise ValueError(f"must be more than zero: {text!r}")
    return v


# --------------------------------------------------------------------------- bridge

class _Stopped(Exception):
    """SIGINT or SIGTERM before the bridge was sending: its wait for the broker ends."""


def add_bridge_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``zeps bridge multicast``."""
    parser.add_argument("--stream", required=True, type=_stream_name, help="stream to bridge")
    parser.add_argument("--pattern", default="", type=_pattern,
                        help="key prefix or ~regex to bridge (default: every key)")
    parser.add_argument("--group", required=True, type=_type(parse_group), metavar="ADDR:PORT",
                        help="IPv4 multicast group to send to, e.g. 239.1.2.3:5000")
    parser.add_argument("--interface", type=_type(check_interface), metavar="ADDR",
                        help="IPv4 address of the interface to send from (default: the route's)")
    parser.add_argument("--ttl", type=_int_in(0, 255, "TTL"), default=1,
                        help="multicast TTL (default 1: this network only)")
    parser.add_argument("--from-seq", type=_int_upto(MAX_NUMBER, _positive_int), metavar="N",
                        help="start at sequence N when there is no state file (default: live)")
    parser.add_argument("--max-datagram", type=_type(units.parse_size), default=DEFAULT_DATAGRAM,
                        metavar="BYTES", help=f"largest datagram (default {DEFAULT_DATAGRAM}: "
                        "a 1500-byte MTU); larger messages are fetched from the broker")
    parser.add_argument("--head-interval", type=_type(_positive_duration),
                        default=DEFAULT_HEAD_INTERVAL, metavar="DURATION",
                        help=f"announce the head this often (default {DEFAULT_HEAD_INTERVAL:g}s)")
    parser.add_argument("--state-file", metavar="PATH",
                        help="keep the last sequence sent here; a restart resumes after it")
    parser.add_argument("--endpoint", type=_endpoint,
                        default=os.environ.get("ZEPS_ENDPOINT", units.DEFAULT_ENDPOINT),
                        help="broker endpoint (default $ZEPS_ENDPOINT or "
                             f"{units.DEFAULT_ENDPOINT})")
    parser.add_argument("--connect-timeout", type=_seconds, default=10.0, metavar="S",
                        help="seconds to wait for the broker (default 10)")


def run_bridge(args) -> int:
    """Run the bridge until SIGTERM (exit status 0) or SIGINT (130). Prints one line on stdout
    once it is sending."""
    import logging

    from zeps.clients import NoStream, ZepsError

    from zeps.multicast.bridge import Bridge, BridgeError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    try:
        bridge = Bridge(args.endpoint, args.stream, args.group, args.pattern,
                        interface=args.interface, ttl=args.ttl, from_seq=args.from_seq,
                        max_datagram=args.max_datagram, head_interval=args.head_interval,
                        state_file=args.state_file, timeout=args.connect_timeout,
                        curve=getattr(args, "curve", None))
    except ValueError as e:
        print(f"zeps: error: {e}", file=sys.stderr)
        return 2

    running = []

    def ready(b: Bridge) -> None:
        running.append(True)
        print(f"zeps bridge: stream {b.stream!r} pattern {b.pattern!r} to "
              f"{b.group[0]}:{b.group[1]} after sequence {b.sender.head}", flush=True)

    stopped_by = []

    def stop(signum, _frame) -> None:
        stopped_by.append(signum)
        bridge.stop()
        if not running:         # still waiting for the broker (up to --connect-timeout)
            raise _Stopped
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        bridge.run(on_ready=ready)
    except _Stopped:
        print("zeps bridge: stopped before it started sending", file=sys.stderr)
        return 130 if stopped_by[:1] == [signal.SIGINT] else 0
    except NoStream as e:                       # as every zeps command: a missing stream is 2
        print(f"zeps: error: {e}", file=sys.stderr)
        return 2
    except (BridgeError, ZepsError) as e:
        print(f"zeps: error: {e}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    s = bridge.sender
    print(f"zeps bridge: stopped after sequence {s.head}: {s.messages} message(s) in "
          f"{s.datagrams} datagram(s), {s.refs} by reference ({s.header_refs} with headers, "
          f"the rest too large), {s.heads} HEAD(s)", file=sys.stderr)
    return 130 if stopped_by[:1] == [signal.SIGINT] else 0     # Ctrl-C: 128 + SIGINT


# --------------------------------------------------------------------------- subscribe

def add_subscribe_multicast_arguments(parser: argparse.ArgumentParser) -> None:
    """What ``zeps subscribe`` needs beyond its usual options to read through multicast."""
    parser.add_argument("--multicast", type=_type(parse_group), metavar="ADDR:PORT",
                        help="receive live messages from this multicast group (fed by 'zeps "
                             "bridge multicast' with the same stream and pattern); history, "
                             "losses and heavy loss are served by the broker")
    parser.add_argument("--multicast-interface", type=_type(check_interface), metavar="ADDR",
                        help="IPv4 address of the interface to join the group on")
    parser.add_argument("--reorder-wait", type=_type(_positive_duration), metavar="DURATION",
                        default=ReceiverConfig.reorder_wait,
                        help="how long a gap may be a reordering before it is fetched "
                             f"(default {ReceiverConfig.reorder_wait * 1000:g}ms)")


def run_subscribe_multicast(args) -> int:
    """``zeps subscribe --multicast GROUP``: print messages as ``zeps subscribe`` does.

    Uses the usual ``subscribe`` options: ``stream``, ``patterns`` (at most one: the bridge's),
    ``from_seq`` / ``from_time`` / ``live``, ``json``, ``count``, ``timeout``, ``endpoint``,
    ``connect_timeout``, ``verbose``; with ``--verbose`` the receiver's counters go to stderr."""
    from zeps.clients import ZepsError
    from zeps.multicast.subscriber import MulticastSubscriber

    if len(args.patterns) > 1:
        print("zeps: error: --multicast takes one PATTERN (the bridge's)", file=sys.stderr)
        return 2
    out = sys.stdout
    n = 0
    try:
        sub = MulticastSubscriber(
            args.multicast, args.endpoint, args.stream, args.patterns[0] if args.patterns else "",
            args.from_seq, from_time=args.from_time, live=args.live,
            interface=args.multicast_interface, timeout=args.connect_timeout,
            config=ReceiverConfig(reorder_wait=args.reorder_wait),
            curve=getattr(args, "curve", None))
    except ValueError as e:
        print(f"zeps: error: {e}", file=sys.stderr)
        return 2
    except (ZepsError, OSError) as e:
        print(f"zeps: error: {e}", file=sys.stderr)
        return 1
    fmt = message_printer(args.stream, args.json)
    try:
        with sub:
            while args.count is None or n < args.count:
                msg = sub.poll(0.0)
                if msg is None:
                    out.flush()
                    msg = sub.poll(args.timeout)
                    if msg is None:
                        break
                out.write(fmt(msg) + "\n")
                n += 1
            out.flush()
    except KeyboardInterrupt:
        out.flush()
        raise                               # the zeps command exits 130
    except ZepsError as e:
        print(f"zeps: error: {e}", file=sys.stderr)
        return 1
    if getattr(args, "verbose", False):
        print(f"zeps: {n} message(s); {sub.stats}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- python -m zeps.multicast

def main(argv=None) -> int:
    """``python -m zeps.multicast bridge ...`` and ``python -m zeps.multicast subscribe ...``:
    the same commands as ``zeps bridge multicast`` and ``zeps subscribe --multicast``
    (``subscribe`` takes every option of ``zeps subscribe`` plus the multicast ones). Bad
    arguments: one line on stderr, exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("bridge", "subscribe"):
        Parser(prog="python -m zeps.multicast").error("a command is required: bridge, subscribe")
    if argv[0] == "bridge":
        parser = Parser(prog="python -m zeps.multicast bridge",
                        description="Multicast a stream's messages to a group.")
        add_bridge_arguments(parser)
        return run_bridge(parser.parse_args(argv[1:]))
    # subscribe: the multicast options here, every other one parsed by `zeps subscribe`'s parser
    from zeps import cli

    parser = Parser(prog="python -m zeps.multicast subscribe", add_help=False)
    add_subscribe_multicast_arguments(parser)
    mine, rest = parser.parse_known_args(argv[1:])
    if mine.multicast is None:
        parser.error("--multicast ADDR:PORT is required")
    args = cli.build_parser().parse_args(["subscribe", *cli._join_relative_times(rest)])
    vars(args).update(vars(mine))
    try:
        return run_subscribe_multicast(args)
    except KeyboardInterrupt:
        return 130
