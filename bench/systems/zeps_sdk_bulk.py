"""ZEPS through its SDK, read in bulk: consumers iterate ``Subscription.batches()`` (each
:class:`zeps.clients.MessageBatch` as it came, a DELIVER-BATCH not unpacked per message) and
count its messages, as a program that handles messages in bulk (a sink, a converter) would.
Publishers are :mod:`bench.systems.zeps_sdk`'s, and consumers take its ``SUBSCRIBER_OPTIONS``.
"""
from __future__ import annotations

from bench.systems import END_KEY
from bench.systems.zeps_sdk import SUBSCRIBER_OPTIONS, TIMEOUT, subscribed
from bench.systems.zeps_sdk import publish  # noqa: F401  (this system's publishers)
from zeps.clients import Client


def consume(endpoint, stream, *, expect=None, from_start=False, latency=False, ready, go):
    if latency:
        raise ValueError("the bulk reader is not a latency probe: use bench.systems.zeps_sdk")
    n = 0
    # create=True: a live consumer starts before the publishers (readers do not create streams)
    with Client(endpoint, stream, timeout=TIMEOUT, create=True, **SUBSCRIBER_OPTIONS) as cl:
        for batch in subscribed(cl, from_start, ready, go).batches(timeout=TIMEOUT):
            if expect is None and batch[-1].key == END_KEY:     # the end marker comes last
                n += len(batch) - 1
                break
            n += len(batch)
            if expect is not None and n >= expect:
                break
    return n, []
