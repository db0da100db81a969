"""Values handed to applications: :class:`Message` and :class:`StreamInfo`."""
from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Optional

from zeps.protocol.deliver import message_cost

__all__ = ["Message", "StreamInfo", "build_message"]


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a stream.

    Attributes:
        sequence: the stream's sequence number of the message (1, 2, 3, ...; gaps appear only
            where a subscription pattern filtered messages out or retention removed them).
        key: the routing key (text).
        body: the message contents (bytes).
        timestamp: when the broker journalled it, in ns since the Unix epoch, or ``None`` when
            unknown. The client asks the broker for DELIVER-TS (a ZEPS extension) and
            DELIVER-BATCH (which always carries it), so messages received over the wire have
            it, as do messages read from a journal directory; ``None`` only with
            ``Client(..., timestamps=False, batching=False)`` (plain ZEPS/1 DELIVER) or from a
            broker without batches with ``timestamps=False``.
        stream: the stream the message belongs to, when known.
    """

    sequence: int
    key: str
    body: bytes
    timestamp: Optional[int] = None
    stream: Optional[str] = None

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced by U+FFFD)."""
        return self.body.decode("utf-8", errors="replace")

    @property
    def datetime(self) -> Optional[datetime]:
        """The timestamp as an aware UTC :class:`datetime`, or ``None``."""
        if self.timestamp is None:
            return None
        return datetime.fromtimestamp(self.timestamp / 1e9, tz=timezone.utc)

    @property
    def cost(self) -> int:
        """Credit this message costs (``8 + len(key) + 1 + len(body)``)."""
        return message_cost(self.key, self.body)


_new = object.__new__
_set_sequence, _set_key, _set_body, _set_timestamp, _set_stream = (
    Message.__dict__[f.name].__set__ for f in fields(Message))


def build_message(sequence: int, key: str, body: bytes, timestamp: Optional[int],
                  stream: Optional[str]) -> Message:
    """``Message(sequence, key, body, timestamp, stream)`` for the client's delivery hot path:
    sets the slots through their descriptors, twice as fast as the frozen dataclass's
    ``__init__`` (the values come from the decoder, already of the right types)."""
    m = _new(Message)
    _set_sequence(m, sequence)
    _set_key(m, key)
    _set_body(m, body)
    _set_timestamp(m, timestamp)
    _set_stream(m, stream)
    return m


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What the broker (``STREAM-INFO``) or the journal says about one stream.

    Attributes:
        first: first sequence kept (``last + 1`` when nothing is kept).
        last: last sequence assigned (0 when nothing was ever published).
        size: bytes on disk.
        oldest: timestamp (ns) of ``first``, 0 when empty.
        newest: timestamp (ns) of ``last``, 0 when empty.
        stream: the stream's name, when known.
    """

    first: int
    last: int
    size: int
    oldest: int
    newest: int
    stream: Optional[str] = None

    @property
    def count(self) -> int:
        """How many sequences are kept (``last - first + 1``, at least 0)."""
        return max(0, self.last - self.first + 1)

    @property
    def empty(self) -> bool:
        """True when the stream keeps no message."""
        return self.count == 0
