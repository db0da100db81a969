"""Exactly-once publishing, the client's part: producer ids and producer sequences.

With ``confirms=True`` a client is an *idempotent producer* (``PRODUCER``, docs/protocol.md):
it has a producer id (random per client unless the application gives one) and numbers every
publish it ever makes 1, 2, 3, ... (the *producer sequence*, kept on the publish's receipt),
across reconnects. After each ATTACH it says ``PRODUCER id next`` before publishing: the
broker then gives that peering's PUBLISHes the producer sequences ``next``, ``next + 1``, ...
in order, stores a publish only if its producer sequence is above the highest it holds for
that producer on that stream, and counts and confirms a duplicate as if stored. So after a
reconnect the client re-sends every unconfirmed publish from the first one's producer
sequence, and the broker drops those it already has (their CONFIRM came too late, or never:
the broker crashed after writing them).

The guarantee: **exactly-once among confirmed messages** -- every message whose receipt
resolved (or that ``wait_for_confirms()`` covered) is in the stream exactly once -- across
broker crashes (SIGKILL included: the broker's producer state is in its journal), reconnects
of the SDK, and a new client that takes over the producer id (a retried Spark task re-sending
the same rows in the same order). It does not cover:

* two clients publishing with the same producer id at the same time (their sequences
  interleave: the broker keeps whichever comes first and drops the other's as duplicates);
* a retry that comes after the broker forgot the producer: it keeps the state of its
  ``max_producers`` most recent producers per stream (10,000 by default), so more than that
  many other producers between a publish and its retry make the retry a new message;
* a retry whose messages differ (other rows, another order): the broker compares producer
  sequences, not bodies.

Every PUBLISH of a peering after ``PRODUCER`` uses up one producer sequence, whether the broker
stores it, drops it as a duplicate or rejects it (``PUBLISH rejected: ...``); a client removes
a rejected publish from its unconfirmed ones, so the producer sequences it re-sends after a
reconnect may have holes: :func:`runs` splits them into consecutive runs, each re-sent after
its own ``PRODUCER``.
"""
from __future__ import annotations

import uuid
from typing import Iterable, List, Optional, Tuple

__all__ = ["new_producer_id", "check_producer_id", "runs"]


def new_producer_id() -> str:
    """A random producer id (a client's default): 128 random bits, in hex."""
    return f"zeps-{uuid.uuid4().hex}"


def check_producer_id(producer_id: Optional[str], confirms: bool) -> None:
    """Raise :class:`ValueError` for a ``producer_id`` no broker takes (1 to 255 bytes of
    UTF-8), or one given without confirms (exactly-once works through confirms)."""
    if producer_id is None:
        return
    if not isinstance(producer_id, str) or not producer_id:
        raise ValueError("producer_id must be a non-empty string")
    if len(producer_id.encode("utf-8")) > 255:
        raise ValueError("producer_id longer than 255 bytes")
    if not confirms:
        raise ValueError("producer_id needs confirms=True (exactly-once publishing works "
                         "through confirms)")


def runs(receipts: Iterable) -> List[Tuple[int, list]]:
    """Split unconfirmed publishes (receipts, in producer-sequence order) into runs of
    consecutive producer sequences: ``[(first producer sequence, [receipts]), ...]``."""
    out: List[Tuple[int, list]] = []
    expect = None
    for r in receipts:
        if r.pseq != expect:
            out.append((r.pseq, []))
        out[-1][1].append(r)
        expect = r.pseq + 1
    return out
