"""Stream administration: create, describe, purge and delete streams (no ATTACH needed).

Each call is one request and its answer on a socket of its own, like :func:`list_streams`::

    from zeps.clients import admin

    admin.create_stream("tcp://127.0.0.1:7470", "orders", retention_age=7 * 86400,
                        max_message=64 << 10)
    admin.create_stream("tcp://127.0.0.1:7470", "config", compact=True,   # latest per key
                        delete_retention=3600)
    admin.stream_settings("tcp://127.0.0.1:7470", "config")           # StreamSettings
    info = admin.describe_stream("tcp://127.0.0.1:7470", "orders")    # StreamDescription
    defaults = admin.describe_defaults("tcp://127.0.0.1:7470")        # what its 0s stand for
    admin.purge_stream("tcp://127.0.0.1:7470", "orders", upto=1000)   # -> the first kept now
    admin.delete_stream("tcp://127.0.0.1:7470", "orders")

A stream that does not exist raises :class:`NoStream` (a :class:`InvalidError`); a broker that
does not answer within ``timeout`` seconds, :class:`ZepsTimeout`; a broker without the
compacted streams' commands (STREAM-CREATE-X, STREAM-SETTINGS), :class:`Unsupported`.

A compacted stream's replay skips the sequences compaction removed: those gaps are normal.
"""
from __future__ import annotations

from dataclasses import dataclass

from zeps.protocol import commands as c
from zeps.units import DEFAULT_ENDPOINT

from .errors import InvalidError, NoStream  # noqa: F401  (part of this module's API)
from .transport import request_once

__all__ = ["StreamDescription", "StreamSettings", "NoStream", "Unsupported", "create_stream",
           "describe_stream", "describe_defaults", "stream_settings", "purge_stream",
           "delete_stream"]


class Unsupported(InvalidError):
    """The broker does not know the command this needs (it predates it): e.g. a compacted
    stream's settings (STREAM-CREATE-X) from a broker without them. Nothing was made."""


@dataclass(frozen=True)
class StreamSettings:
    """A stream's own settings (STREAM-SETTINGS; 0: the broker's default); for the empty name,
    the broker's defaults."""
    stream: str
    retention_bytes: int
    retention_ms: int
    max_message: int
    segment_bytes: int
    compact: bool
    key_index: bool
    delete_retention_ms: int            # how long compaction keeps a tombstone (0: one day)
    min_dirty_ratio: float              # compaction runs from this dirty ratio (0: 0.5)


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


def _extension(endpoint: str, cmd: c.Command, answer, timeout, context, curve):
    """An extension's request; :class:`Unsupported` if the broker does not know it."""
    try:
        return _request(endpoint, cmd, answer, timeout, context, curve)
    except InvalidError as e:
        if e.reason.startswith(f"unknown command {cmd.ID}"):
            raise Unsupported(f"the broker at {endpoint} does not support {cmd.NAME} (it "
                              f"predates it): {e.reason}", cmd.NAME, e.code, e.fields) from None
        raise


def create_stream(endpoint: str, stream: str, *, retention_bytes: int = 0,
                  retention_age: float = 0, max_message: int = 0, segment_bytes: int = 0,
                  compact: bool = False, key_index: bool = False, delete_retention: float = 0,
                  min_dirty_ratio: float = 0, timeout: float = 10.0, context=None,
                  curve=None) -> None:
    """Create ``stream`` with its own settings (0 = the broker's default; ``retention_age`` in
    seconds). Creating an existing stream with the same settings is fine; with others, the
    broker refuses (:class:`InvalidError`).

    ``key_index``: the stream has the broker's last-value index (so SNAPSHOT, ``client.snapshot``
    and ``zeps kv`` serve it) and keeps every message, whatever the broker's ``--key-index``.
    ``compact``: a compacted stream, which keeps at least the latest message of every key
    (and always has a key index): compaction keeps a tombstone (an empty body)
    ``delete_retention`` seconds (0: one day) and runs once the bytes written since the last
    one are ``min_dirty_ratio`` (0 to 1; 0: 0.5) of the sealed segments'.
    These travel in STREAM-CREATE-X: :class:`Unsupported` from a broker without it."""
    if not (compact or key_index or delete_retention or min_dirty_ratio):
        _request(endpoint, c.StreamCreate(stream, int(retention_bytes), int(retention_age * 1000),
                                          int(max_message), int(segment_bytes)),
                 c.StreamCreateOk, timeout, context, curve)
        return
    if not 0 <= min_dirty_ratio <= 1:
        raise ValueError(f"min_dirty_ratio must be from 0 to 1, not {min_dirty_ratio!r}")
    flags = (c.FLAG_COMPACT if compact else 0) | (c.FLAG_KEY_INDEX if key_index else 0)
    cmd = c.StreamCreateX(stream, int(retention_bytes), int(retention_age * 1000),
                          int(max_message), int(segment_bytes), flags,
                          int(round(delete_retention * 1000)), int(round(min_dirty_ratio * 1000)))
    _extension(endpoint, cmd, c.StreamCreateOk, timeout, context, curve)


def stream_settings(endpoint: str = DEFAULT_ENDPOINT, stream: str = "", *,
                    timeout: float = 10.0, context=None, curve=None) -> StreamSettings:
    """The stream's own settings, compaction's included (``""``: the broker's defaults);
    :class:`Unsupported` from a broker without STREAM-SETTINGS."""
    r = _extension(endpoint, c.StreamSettingsGet(stream), c.StreamCreateX, timeout, context,
                   curve)
    return StreamSettings(r.stream, r.retention_bytes, r.retention_ms, r.max_message,
                          r.segment_bytes, bool(r.flags & c.FLAG_COMPACT),
                          bool(r.flags & (c.FLAG_KEY_INDEX | c.FLAG_COMPACT)),
                          r.delete_retention_ms, r.min_dirty_permille / 1000)


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
    """Drop the stream's messages up to and including ``upto`` (at most its last message: those
    published later are kept, whatever their sequence); returns its first sequence."""
    return _request(endpoint, c.StreamPurge(stream, upto), c.StreamPurgeOk, timeout, context,
                    curve).first


def delete_stream(endpoint: str, stream: str, *, timeout: float = 10.0, context=None,
                  curve=None) -> None:
    """Delete the stream and all its messages; clients attached to it are sent DETACH."""
    _request(endpoint, c.StreamDelete(stream), c.StreamDeleteOk, timeout, context, curve)
