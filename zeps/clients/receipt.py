"""What ``publish()`` returns: a :class:`Receipt` (blocking client) or an :class:`AsyncReceipt`.

A receipt is the publisher's handle on one message, in the manner of a Kafka delivery report or
a JetStream PubAck. With ``confirms=True`` it is *pending* until the broker's CONFIRM covering
the message arrives, then it resolves to the message's sequence; if the broker rejects the
message (INVALID ``PUBLISH rejected: ...``) it fails with :class:`~zeps.clients.InvalidError`.
Without confirms there is nothing to wait for: every publish returns the same receipt, already
done, whose sequence is unknown (``None``).

Which sequence: a CONFIRM says "your first *count* publishes are durable and the *count*-th got
sequence *s*". The receipt of the *count*-th publish gets *s*. An earlier receipt the same
CONFIRM covers gets its exact sequence when the numbers prove that nobody else published in
between (the stream advanced by exactly as many sequences as this client published, which the
client knows from the stream's last sequence at attach time and from the previous CONFIRM);
otherwise its sequence is ``None`` -- the message is durable, its place in the stream is not
on the wire. One publisher per stream therefore always gets exact sequences. A message the
broker already held (re-sent after a reconnect, or by a client that took over the producer id:
:mod:`zeps.clients.producer`) is confirmed without being stored again: its sequence is ``None``
and its :attr:`~_BaseReceipt.duplicate` is True -- it never resolves with the sequence of another
message.

A rejection is reported once: by the receipt if the application looks at it (``result()``,
``exception()``) before its next call on the client, else by that call, as without receipts.

Receipts cost one small object per publish with confirms and nothing without; the client keeps
the receipts of unconfirmed messages (it re-sends their frames after a reconnect) and lets go
of them once confirmed.
"""
from __future__ import annotations

from typing import Optional

from .errors import ZepsTimeout

__all__ = ["Receipt", "AsyncReceipt"]

#: ``_outcome`` of a receipt whose CONFIRM (or rejection) has not arrived yet.
PENDING = object()


class _BaseReceipt:
    """State shared by both receipts. The peering sets ``_outcome`` (and drops ``frame``) when
    the CONFIRM arrives -- in place, it runs once per message -- or calls :meth:`_fail`."""

    __slots__ = ("frame", "_owner", "_outcome", "pseq", "duplicate")

    def __init__(self, frame: Optional[bytes], owner):
        self.frame = frame              # the PUBLISH frame, re-sent after a reconnect
        self._owner = owner
        self._outcome = PENDING         # then the sequence (int or None), or the exception
        #: The message's producer sequence (exactly-once publishing, :mod:`zeps.clients.producer`).
        self.pseq = 0
        #: True once confirmed as a message the broker already held (a re-sent duplicate, not
        #: stored again: its sequence is None).
        self.duplicate = False

    def _fail(self, error: BaseException) -> None:
        self._outcome = error
        self.frame = None

    def done(self) -> bool:
        """True once the message is confirmed durable or was rejected (always, without confirms)."""
        return self._outcome is not PENDING

    @property
    def sequence(self) -> Optional[int]:
        """The sequence the broker assigned, once confirmed and known (see the module docs)."""
        out = self._outcome
        return out if out is None or type(out) is int else None

    def exception(self) -> Optional[BaseException]:
        """The error the message failed with (rejected, client closed, peering lost), or None."""
        out = self._outcome
        if isinstance(out, BaseException):
            self._heard(out)
            return out
        return None

    def _value(self) -> Optional[int]:
        out = self._outcome
        if isinstance(out, BaseException):
            self._heard(out)
            raise out
        return out

    def _heard(self, error: BaseException) -> None:
        """The application heard of the rejection here: the client does not raise it again."""
        if self._owner is not None:
            self._owner._p.heard(error)

    def _timed_out(self, timeout: Optional[float]) -> ZepsTimeout:
        return ZepsTimeout(f"publish not confirmed within {timeout:g}s")

    def __repr__(self) -> str:
        out = self._outcome
        state = ("pending" if out is PENDING else f"failed: {out}" if isinstance(out, BaseException)
                 else "duplicate" if self.duplicate else f"sequence={out}")
        return f"<zeps.{type(self).__name__} {state}>"


class Receipt(_BaseReceipt):
    """Returned by :meth:`zeps.clients.Client.publish`."""

    __slots__ = ()

    def result(self, timeout: Optional[float] = None) -> Optional[int]:
        """Block until the message is confirmed and return its sequence (``None`` when unknown:
        see the module docs). Raises :class:`~zeps.clients.InvalidError` if the broker rejected
        it, :class:`~zeps.clients.ZepsTimeout` after ``timeout`` seconds (default: the client's
        timeout), :class:`~zeps.clients.ClientClosed` if the client was closed first."""
        if self._outcome is PENDING:
            self._owner._wait_receipt(self, timeout)
        return self._value()


class AsyncReceipt(_BaseReceipt):
    """Returned by :meth:`zeps.clients.AsyncClient.publish`; ``await receipt`` waits for it."""

    __slots__ = ()

    async def result(self, timeout: Optional[float] = None) -> Optional[int]:
        """Wait until the message is confirmed and return its sequence; the same errors as
        :meth:`Receipt.result`."""
        if self._outcome is PENDING:
            await self._owner._wait_receipt(self, timeout)
        return self._value()

    def __await__(self):
        return self.result().__await__()


def done_receipt(cls):
    """The shared receipt every publish without confirms returns: done, sequence unknown."""
    r = cls(None, None)
    r._outcome = None
    return r
