"""Stream administration: create, describe, purge and delete streams (no ATTACH needed).

Each call is one request and its answer on a socket of its own, like :func:`list_streams`::

    from zeps.clients import admin

    admin.create_stream("tcp://127.0.0.1:7470", "orders", retention_age=7 * 86400,
                        max_message=64 << 10)
    info = admin.describe_stream("tcp://127.0.0.1:7470", "orders")    # StreamDescription
    defaults = admin.describe_defaults("tcp://127.0.0.1:7470")        # what its 0s stand for
    admin.purge_stream("tcp://127.0.0.1:7470", "orders", upto=1000)   # -> the first kept now
    admin.delete_stream("tcp://127.0.0.1:7470", "orders")

A stream that does not exist raises :class:`NoStream` (a :class:`InvalidError`); a broker that
does not answer within ``timeout`` seconds, :class:`ZepsTimeout`.
"""
from __future__ import annotations

from dataclasses import dataclass

from zeps.protocol import commands as c
from zeps.units import DEFAULT_ENDPOINT

from .errors import NoStream  # noqa: F401  (part of this module's API)
from .transport import request_once

__all__ = ["StreamDescription", "NoStream", "create_stream", "describe_stream",
           "describe_defaults", "purge_stream", "delete_stream"]


@dataclass(frozen=True)
class StreamDescription:
    """A stream's state and its own settings (0: the broker's default)."""
    stream: str
    first: int
    last: int
    size: int
    oldest: int
    newest: int
    retention_bytes: int
    retention_ms: int
    max_message: int
    segment_bytes: int

    @property
    def count(self) -> int:
        return max(0, self.last - self.first + 1)


def _request(endpoint: str, cmd: c.Command, answer, timeout: float, context=None, curve=None):
    return request_once(endpoint, cmd, answer, timeout=timeout, context=context, curve=curve)


def create_stream(endpoint: str, stream: str, *, retention_bytes: int = 0,
                  retention_age: float = 0, max_message: int = 0, segment_bytes: int = 0,
                  timeout: float = 10.0, context=None, curve=None) -> None:
    """Create ``stream`` with its own settings (0 = the broker's default; ``retention_age`` in
    seconds). Creating an existing stream with the same settings is fine; with others, the
    broker refuses (:class:`InvalidError`)."""
    _request(endpoint, c.StreamCreate(stream, int(retention_bytes), int(retention_age * 1000),
                                      int(max_message), int(segment_bytes)),
             c.StreamCreateOk, timeout, context, curve)


def describe_stream(endpoint: str = DEFAULT_ENDPOINT, stream: str = "", *, timeout: float = 10.0,
                    context=None, curve=None) -> StreamDescription:
    """The stream's state and settings, without attaching to it (nor creating it)."""
    r = _request(endpoint, c.StreamDescribe(stream), c.StreamDescribeOk, timeout, context, curve)
    return StreamDescription(stream, r.first, r.last, r.size, r.oldest, r.newest,
                             r.retention_bytes, r.retention_ms, r.max_message, r.segment_bytes)


def describe_defaults(endpoint: str = DEFAULT_ENDPOINT, *, timeout: float = 10.0, context=None,
                      curve=None) -> StreamDescription:
    """The settings in force for a stream without its own, i.e. what a 0 in a
    :class:`StreamDescription`'s settings stands for: the broker's retention (here 0: none),
    largest message and segment size (``STREAM-DESCRIBE ""``; the state fields are 0). A
    broker that predates it refuses the empty name: :class:`InvalidError`."""
    return describe_stream(endpoint, "", timeout=timeout, context=context, curve=curve)


def purge_stream(endpoint: str, stream: str, upto: int, *, timeout: float = 10.0,
                 context=None, curve=None) -> int:
    """Drop the stream's messages up to and including ``upto``; returns its first sequence."""
    return _request(endpoint, c.StreamPurge(stream, upto), c.StreamPurgeOk, timeout, context,
                    curve).first


def delete_stream(endpoint: str, stream: str, *, timeout: float = 10.0, context=None,
                  curve=None) -> None:
    """Delete the stream and all its messages; clients attached to it are sent DETACH."""
    _request(endpoint, c.StreamDelete(stream), c.StreamDeleteOk, timeout, context, curve)
