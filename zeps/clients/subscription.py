"""The consumer side of a :class:`~zeps.clients.Client`: :class:`Subscription`."""
from __future__ import annotations

from typing import Iterator, Optional, Tuple

from .errors import ClientClosed, ZepsTimeout
from .message import Message

__all__ = ["Subscription"]


class Subscription:
    """Messages of a client's subscriptions, in strictly increasing sequence order.

    Obtained from :meth:`Client.subscribe`; a client has exactly one Subscription, whatever the
    number of patterns (a message matching several patterns comes once). Three ways to read:

    * ``for msg in sub:`` -- blocks for each message; ends (``StopIteration``) once the client
      is closed;
    * ``sub.next(timeout=None)`` -- the next :class:`Message`, or :class:`ZepsTimeout` after
      ``timeout`` seconds (``None`` = wait for ever);
    * ``sub.poll(timeout=0.0)`` -- the next :class:`Message`, or ``None`` after ``timeout``.

    Reading is what grants the broker credit: the client tops the credit up as messages are
    handed to you, so reading slowly makes the broker replay from the journal rather than
    queue. Errors of the client (for example :class:`~zeps.clients.InvalidError`) are raised
    from these calls too.
    """

    __slots__ = ("_client",)

    def __init__(self, client):
        self._client = client

    @property
    def client(self):
        """The :class:`~zeps.clients.Client` this subscription reads from."""
        return self._client

    @property
    def patterns(self) -> Tuple[str, ...]:
        """Patterns subscribed so far (OR-ed)."""
        return tuple(self._client._patterns)

    @property
    def position(self) -> int:
        """Sequence of the last message handed to the application (0 if none yet)."""
        return self._client._last_handed

    @property
    def buffered(self) -> int:
        """Messages received from the broker and not yet read by the application."""
        return len(self._client._buffer)

    def next(self, timeout: Optional[float] = None) -> Message:
        """Return the next message; raise :class:`ZepsTimeout` if none comes within ``timeout``
        seconds (``None``: wait for ever)."""
        msg = self._client._next_message(timeout)
        if msg is None:
            raise ZepsTimeout(f"no message on stream {self._client.stream!r} within {timeout:g}s")
        return msg

    def poll(self, timeout: Optional[float] = 0.0) -> Optional[Message]:
        """Return the next message, or ``None`` if none comes within ``timeout`` seconds."""
        return self._client._next_message(timeout)

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        try:
            return self._client._next_message(None)
        except ClientClosed:
            raise StopIteration from None

    def close(self) -> None:
        """Close the underlying client (a subscription cannot be cancelled alone in ZEPS/1)."""
        self._client.close()

    def __repr__(self) -> str:
        return (f"<zeps.Subscription stream={self._client.stream!r} patterns={self.patterns!r} "
                f"position={self.position}>")
