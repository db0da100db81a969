"""Durable consumers' administration on a client's own peering (CONSUMER-ADD, -INFO, -LIST,
-DELETE; docs/consumers.md): operations of :mod:`zeps.clients.operations` that both front ends
drive (``Client.add_consumer`` runs ``add(...)``, ``AsyncClient.add_consumer`` awaits it), and
the options the front ends hand a consumer's own connection (:mod:`zeps.clients.consumer_io`).

Each is one request on the attached peering (a reader's: it never creates the stream, a missing
one is :class:`~zeps.clients.errors.NoStream`), re-asked if the peering was re-established
before the answer; a refusal is :class:`~zeps.clients.errors.InvalidError` with the broker's
reason (another consumer of that name with other settings, no such consumer, no right to
subscribe, ...).

Pure: no sockets, no clock.
"""
from __future__ import annotations

import json
from typing import Optional, Tuple

from zeps.protocol import commands as c
from zeps.protocol.consumer import bad_consumer_name

from . import operations as ops
from .consumer import consumer_add
from .errors import ZepsError
from .requests import RequestKind

__all__ = ["add", "info", "names", "delete", "member_options"]


def _name(name: str) -> str:
    why = bad_consumer_name(name) if isinstance(name, str) else "a consumer name is a str"
    if why:
        raise ValueError(f"bad consumer name {name!r}: {why}")
    return name


def add(front, name: str, patterns, timeout: Optional[float], **settings):
    """CONSUMER-ADD (settings: :func:`zeps.clients.consumer.consumer_add`); the consumer's
    first sequence."""
    cmd = consumer_add(name, patterns, **settings)
    r = yield from ops.request(front, cmd, RequestKind.CONSUMER, timeout)
    if not isinstance(r, c.ConsumerAddOk):
        raise ZepsError(f"CONSUMER-ADD answered by {r.NAME}")
    return r.start


def info(front, name: str, timeout: Optional[float]):
    """CONSUMER-INFO: the broker's JSON, as a dict."""
    r = yield from ops.request(front, c.ConsumerInfo(_name(name)), RequestKind.CONSUMER, timeout)
    if not isinstance(r, c.ConsumerInfoOk):
        raise ZepsError(f"CONSUMER-INFO answered by {r.NAME}")
    try:
        out = json.loads(r.info)
    except ValueError as e:
        raise ZepsError(f"CONSUMER-INFO-OK is not JSON: {e}") from None
    if not isinstance(out, dict):
        raise ZepsError("CONSUMER-INFO-OK is not a JSON object")
    return out


def names(front, timeout: Optional[float]) -> Tuple[str, ...]:
    r = yield from ops.request(front, c.ConsumerList(), RequestKind.CONSUMER, timeout)
    if not isinstance(r, c.ConsumerListOk):
        raise ZepsError(f"CONSUMER-LIST answered by {r.NAME}")
    return tuple(r.names)


def delete(front, name: str, timeout: Optional[float]):
    r = yield from ops.request(front, c.ConsumerDelete(_name(name)), RequestKind.CONSUMER,
                               timeout)
    if not isinstance(r, c.ConsumerDeleteOk):
        raise ZepsError(f"CONSUMER-DELETE answered by {r.NAME}")


def member_options(front, timeout: Optional[float]) -> dict:
    """What a consumer's own connection takes from its client: the endpoint, the stream, the
    security keys, the ZeroMQ context, the window and the options of the session."""
    conn = front._own_connection()
    p = front._p
    return {"endpoint": front.endpoint, "stream": front.stream, "context": conn.context,
            "curve": conn.curve, "timeout": front.timeout if timeout is None else timeout,
            "heartbeat": p.heartbeat, "window": p.credit_window, "batching": p.batching,
            "timestamps": p.timestamps, "headers": p.headers}
