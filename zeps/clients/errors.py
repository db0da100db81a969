"""Exceptions raised by the ZEPS client SDK.

Every exception the SDK raises on purpose derives from :class:`ZepsError`, so
``except ZepsError`` catches them all. The concrete ones:

* :class:`InvalidError` -- the broker answered ``INVALID``; ``err.reason`` is the broker's text
  (for example ``bad regular expression: ...`` for a subscription pattern that does not
  compile, or the journal's reason for a rejected PUBLISH), ``err.code`` and ``err.fields`` what
  a program acts on (:class:`zeps.protocol.reasons.Code`).
* :class:`PatternRemoved` -- an :class:`InvalidError` the broker sends on its own: it removed
  one of the subscription's regular expressions because matching it kept timing out
  (``err.pattern``; the other patterns go on; raised once by the next call on the client).
* :class:`ZepsTimeout` -- an operation did not complete within its timeout. It is also a
  :class:`TimeoutError`, so generic code that catches ``TimeoutError`` works.
* :class:`ConnectionLost` -- the peering was lost and could not be restored (for example the
  broker refused the re-ATTACH after a restart).
* :class:`HandshakeFailed` (a :class:`ConnectionLost`) -- the broker answered at the TCP level
  but the security (CurveZMQ) handshake failed: a plaintext client at a CurveZMQ broker, a
  wrong server key, a client key the broker does not allow. Raised at once, not after a timeout.
* :class:`StreamDeleted`, :class:`StreamRecreated` (both :class:`StreamGone`, a
  :class:`ConnectionLost`) -- the stream the client was attached to was deleted, or deleted and
  created again (another *incarnation*, whose sequences start again): the client does not
  re-attach to it, its subscription ends and its unconfirmed publishes fail with this error.
* :class:`ProducerFenced` (an :class:`InvalidError`) -- exactly-once publishing: another
  client took this client's producer id over (or, with CurveZMQ, it belongs to another key);
  final, as Kafka's ProducerFencedException.
* :class:`ProducerStateLost` -- exactly-once publishing: the broker forgot this client's
  producer id; the unconfirmed publishes were not re-sent (they might be stored twice) and
  their receipts fail with it.
* :class:`ClientClosed` -- the client (or its subscription) was used after ``close()``.
* :class:`ConcurrentUseError` -- one blocking client was called from two threads (or
  greenlets) at once; its message names both.

Bad arguments given by the caller (a malformed endpoint, a key longer than 255 bytes, a body
that is not bytes or str) raise the usual :class:`ValueError` / :class:`TypeError`.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..protocol.reasons import Code, Reason

__all__ = ["ZepsError", "InvalidError", "NoStream", "PatternRemoved", "ZepsTimeout",
           "ConnectionLost", "HandshakeFailed", "FrameTooLarge", "StreamGone", "StreamDeleted",
           "StreamRecreated",
           "ClientClosed", "ClientForked", "ConcurrentUseError", "ProducerFenced",
           "ProducerStateLost"]


class ZepsError(Exception):
    """Base class of every error raised by the ZEPS client SDK."""


class InvalidError(ZepsError):
    """The broker answered ``INVALID``.

    ``reason`` is the broker's explanation, verbatim. ``command`` names the request it
    answered when the SDK knows it (``"SUBSCRIBE"``, ``"ATTACH"``, ...), or ``"PUBLISH"``
    for an INVALID that answered an (asynchronous) publish. ``code`` (a
    :class:`~zeps.protocol.reasons.Code`) and ``fields`` say what it is for a program: in full
    from a broker that offers REASONS-SELECT (the SDK asks for it); from an older one the code
    is read from the text's prefix and ``fields`` is empty.
    """

    def __init__(self, reason: str, command: str | None = None, code: Optional[Code] = None,
                 fields: Tuple[str, ...] = ()):
        self.reason = reason
        self.command = command
        self.code = Reason.of(reason).code if code is None else code
        self.fields = tuple(fields)
        if command:
            text = reason
            if text.startswith(f"{command} rejected: "):     # don't say it twice
                text = text[len(command) + 11:]
            super().__init__(f"broker rejected {command}: {text}")
        else:
            super().__init__(f"broker said INVALID: {reason}")


class PatternRemoved(InvalidError):
    """The broker removed the subscription pattern ``pattern`` (a ``~regex`` whose matches kept
    timing out; None if the reason does not name it in full). The subscription goes on with
    its other patterns; the client no longer re-subscribes this one after a reconnect."""

    def __init__(self, reason: str, pattern: str | None, fields: Tuple[str, ...] = ()):
        super().__init__(reason, None, Code.PATTERN_REMOVED, fields)
        self.pattern = pattern


class NoStream(InvalidError):
    """The broker has no such stream (or the client may not know of it): ``no stream: ...``.
    A client's reads (``subscribe``, ``info``, ``seq_at``) raise it for a stream that does not
    exist: readers never create streams. ``message``, when given, is what ``str()`` says
    instead of the broker's reason (``reason`` stays the broker's text)."""

    def __init__(self, reason: str, command: str | None = None, code: Optional[Code] = None,
                 fields: Tuple[str, ...] = (), message: Optional[str] = None):
        super().__init__(reason, command, code, fields)
        if message:
            self.args = (message,)


def invalid_error(reason: Reason, command: str | None = None) -> InvalidError:
    """The exception for a refusal: :class:`NoStream` for :attr:`Code.NO_STREAM`, else
    :class:`InvalidError`."""
    cls = NoStream if reason.code is Code.NO_STREAM else InvalidError
    return cls(reason.text, command, reason.code, reason.fields)


class ZepsTimeout(ZepsError, TimeoutError):
    """An operation did not complete in time (also a built-in :class:`TimeoutError`)."""


class ConnectionLost(ZepsError):
    """The peering with the broker was lost and cannot be restored."""


class HandshakeFailed(ConnectionLost):
    """The broker at ``endpoint`` accepted the TCP connection but the ZeroMQ security handshake
    failed, so no ZEPS command can reach it: the message says what the broker answered and what
    to check (its public key, ``--server-key``; the client's key on the broker's allow-list).
    ``event`` is the socket monitor's event (``"HANDSHAKE_FAILED_AUTH"``, ``"..._PROTOCOL"``,
    ``"..._NO_DETAIL"``), ``status`` the ZAP status (400) or libzmq's protocol error code."""

    def __init__(self, message: str, endpoint: str = "", event: str = "", status: int = 0):
        super().__init__(message)
        self.endpoint = endpoint
        self.event = event
        self.status = status


class FrameTooLarge(ConnectionLost):
    """ZeroMQ dropped the connection to the broker at ``endpoint`` without reading a frame: one
    longer than this client reads (``limit`` bytes, its sockets' ``ZMQ_MAXMSGSIZE``: the credit
    window plus 64 KiB, or ``max_frame``), or one that is not ZeroMQ's. An honest broker never
    sends one (:mod:`zeps.clients.bounds`). Raised once, by the next call; the client goes on
    reconnecting, as from any lost connection."""

    def __init__(self, message: str, endpoint: str = "", limit: int = 0):
        super().__init__(message)
        self.endpoint = endpoint
        self.limit = limit


class StreamGone(ConnectionLost):
    """The stream this client was attached to is not there any more as the client knew it:
    :class:`StreamDeleted` or :class:`StreamRecreated`. ``stream`` names it, ``incarnation`` is
    the one the client knew (``STREAM-ID``), ``reason`` the broker's refusal of the re-ATTACH.
    The client never re-attaches to another incarnation by itself: a subscription raises this
    error, and so do the receipts of the publishes not confirmed (they were never stored in a
    stream that still exists) and every later call; make a new client to use the stream as it
    is now."""

    def __init__(self, message: str, stream: str, incarnation: int, reason: str = ""):
        super().__init__(message)
        self.stream = stream
        self.incarnation = incarnation
        self.reason = reason


class StreamDeleted(StreamGone):
    """The stream was deleted (``STREAM-DELETE``, ``zeps stream delete``) and does not exist."""


class StreamRecreated(StreamGone):
    """The stream was deleted and created again under the same name: its sequences are not the
    ones this client knew."""


class ProducerFenced(InvalidError):
    """Exactly-once publishing cannot go on with this client's producer id: another client
    took it over (a newer ``PRODUCER`` of the same id fenced this one, as Kafka fences a
    producer whose transactional id a newer one initialised), or, with CurveZMQ, the id belongs
    to another key. Final, as Kafka's ``ProducerFencedException``: the unconfirmed publishes
    fail with it (none of them was stored by this client after the fence), and so does every
    later call; make a new client (with another ``producer_id``) to publish again."""


class ProducerStateLost(ZepsError):
    """The broker no longer knows this client's producer id: its ``PRODUCER-OK`` after a
    reconnect says it holds fewer of the producer's messages than it already confirmed (it
    forgot the producer: silent for longer than ``--producer-max-age``, more than 10,000 other
    producers on the stream, or the stream was created again). Whether the unconfirmed
    publishes were stored cannot be known then, so they are not re-sent (which could store
    them twice): their receipts fail with this error, raised once by the next call too.
    Publishing goes on, exactly-once again from the next message. ``last`` is what the broker
    said it holds, ``confirmed`` the highest producer sequence it had confirmed."""

    def __init__(self, message: str, last: int = 0, confirmed: int = 0):
        super().__init__(message)
        self.last = last
        self.confirmed = confirmed


class ClientClosed(ZepsError):
    """The client was used after :meth:`Client.close`."""


class ClientForked(ClientClosed):
    """A :class:`~zeps.clients.Client` (or an :class:`~zeps.clients.AsyncClient`, a consumer's
    member, a snapshot being iterated, a multicast subscriber) made before ``os.fork()`` was
    used in the child: its ZeroMQ socket belongs to the parent's process (ZeroMQ does not
    survive a fork; a call on it in the child hung), so the child's copy is closed. Make a new
    one in the child, or start children with ``multiprocessing``'s ``spawn`` method. Unlike a
    plain :class:`ClientClosed`, it is raised by ``for msg in subscription`` (or consumer) too,
    which it does not end silently."""


def forked(what: str, parent: int) -> ClientForked:
    """The error of a call in a forked child on its copy of ``what`` made in ``parent``."""
    return ClientForked(f"this {what} was made in process {parent} and cannot be used in a "
                        f"child forked from it (its ZeroMQ socket is the parent's): make a new "
                        f"{what} in the child")


class ConcurrentUseError(ZepsError):
    """A blocking :class:`~zeps.clients.Client` was called while another thread (or greenlet)
    was inside a call on it. A client must be used by one thread at a time: give each thread
    its own client (the :class:`~zeps.clients.AsyncClient` may be shared by the tasks of one
    event loop)."""
