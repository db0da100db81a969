"""ZEPS through its SDK, :class:`zeps.clients.Client`: what a Python user's program gets.

Flat-out publishers take one of two paths (``path=``): ``"batch"``, ``Client.publish_batch`` with
100 messages at a time (as redis-py pipelines 100 XADDs; with confirms too: each message keeps
its receipt inside the client), or ``"each"``, ``Client.publish`` per message (the SDK batches
what it has not sent yet by itself); then ``flush()`` (or, with confirms,
``wait_for_confirms()``: the time runs until every message is confirmed durable). Paced
publishers (latency) call ``publish`` per message;
consumers iterate a subscription (live, or from the first message) with the default credit
window and DELIVER-TS timestamps, as an application would.

The clients take the SDK's defaults unless ``ZEPS_BENCH_SDK_PUBLISHER`` or
``ZEPS_BENCH_SDK_SUBSCRIBER`` give publishers or consumers more keyword arguments
(:func:`client_options`, e.g. ``batching=False``): a client option paired against the
defaults with ``python -m bench.ab --before HEAD --after HEAD --after-env
ZEPS_BENCH_SDK_PUBLISHER=... -- ARGS``.
A report made with them says so in its header.
"""
from __future__ import annotations

import ast
import os

from bench.systems import (END_KEY, KEY, BURST, body, bursts, delay_ns, flat_out, groups, messages,
                           pace, stamped)
from zeps.clients import Client

TIMEOUT = 120.0


def client_options(text: str) -> dict:
    """``"name=value,name=value"`` as keyword arguments of :class:`~zeps.clients.Client`,
    each value a Python literal (``batching=False``, ``credit_window=65536``); ``""``: none.
    Raises ValueError, naming the item, for anything else."""
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = (x.strip() for x in item.partition("="))
        if not sep or not name.isidentifier():
            raise ValueError(f"not name=value: {item!r}")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError(f"{name}: not a Python literal: {value!r}") from None
    return out


#: Keyword arguments every publisher's / consumer's Client gets (see the module docs).
PUBLISHER_OPTIONS = client_options(os.environ.get("ZEPS_BENCH_SDK_PUBLISHER", ""))
SUBSCRIBER_OPTIONS = client_options(os.environ.get("ZEPS_BENCH_SDK_SUBSCRIBER", ""))


def publish(endpoint, stream, *, size, seconds, rate=0.0, confirms=False, end=False, limit=None,
            path="batch", ready, go):
    pad = body(size)
    with Client(endpoint, stream, confirms=confirms, timeout=TIMEOUT, **PUBLISHER_OPTIONS) as cl:
        ready()
        go()
        pub = cl.publish
        if rate:
            n = 0
            for _ in pace(rate, seconds):
                pub(KEY, stamped(pad))
                n += 1
        elif path == "batch":               # 100 at a time, as redis-py's pipeline of 100
            cycle = bursts(groups(size), BURST // 100)

            def burst():
                for g in next(cycle):
                    cl.publish_batch(g)
            n = flat_out(seconds, burst, limit)
        elif path == "each":                # one call per message, as one XADD per call
            cycle = bursts(messages(size), BURST)

            def burst():
                for key, data in next(cycle):
                    pub(key, data)
            n = flat_out(seconds, burst, limit)
        else:
            raise ValueError(f"no publishing path {path!r}")
        if confirms:
            cl.wait_for_confirms()
        else:
            cl.flush()
        if end:
            pub(END_KEY, pad)
            cl.flush()
    return n


def subscribed(cl, from_start, ready, go):
    """``cl``'s subscription to every message: live and in place before ``go``, or (replay)
    from the first message, made right after ``go``, inside the measured time."""
    sub = None if from_start else cl.subscribe("", live=True)
    ready()
    go()
    return cl.subscribe("") if sub is None else sub


def consume(endpoint, stream, *, expect=None, from_start=False, latency=False, ready, go):
    n = 0
    delays = []
    # create=True: a live consumer starts before the publishers (readers do not create streams)
    with Client(endpoint, stream, timeout=TIMEOUT, create=True, **SUBSCRIBER_OPTIONS) as cl:
        nxt = subscribed(cl, from_start, ready, go).next
        while expect is None or n < expect:
            msg = nxt(timeout=TIMEOUT)
            if msg.key == END_KEY:
                break
            n += 1
            if latency:
                delays.append(delay_ns(msg.body))
    return n, delays
