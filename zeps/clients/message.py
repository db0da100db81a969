"""Values handed to applications: :class:`Message` and :class:`StreamInfo`."""
from __future__ import annotations

from bisect import bisect_left
from codecs import latin_1_decode
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import islice, repeat
from operator import itemgetter
from typing import List, Optional, Sequence, Tuple

from zeps.protocol.batch import ENTRY_COST_EXTRA
from zeps.protocol.deliver import message_cost
from zeps.protocol.headers import NO_HEADERS, Headers, encode_block
from zeps.protocol.speedups import batchc as _batchc

__all__ = ["Message", "MessageBatch", "StreamInfo", "Headers", "build_message", "build_messages"]

_FIELDS = ("sequence", "key", "body", "timestamp", "stream", "headers")
_tuple_new = tuple.__new__
_tuple_eq = tuple.__eq__
_tuple_ne = tuple.__ne__


class Message(tuple):
    """One message of a stream: an immutable value, equal to another Message with the same
    fields (a tuple underneath, of the fields in the order below, so that the SDK builds one
    in a single C call: ``for msg in sub`` went 1.3x faster than with a frozen dataclass;
    issue 20).

    Attributes:
        sequence: the stream's sequence number of the message (1, 2, 3, ...; gaps appear only
            where a subscription pattern filtered messages out, retention removed them, or, in
            a compacted stream, compaction removed messages a later one of the same key
            superseded: all normal, none a loss).
        key: the routing key (text).
        body: the message contents (bytes).
        timestamp: when the broker journalled it, in ns since the Unix epoch, or ``None`` when
            unknown. The client asks the broker for DELIVER-TS (a ZEPS extension) and
            DELIVER-BATCH (which always carries it), so messages received over the wire have
            it, as do messages read from a journal directory; ``None`` only with
            ``Client(..., timestamps=False, batching=False)`` (plain ZEPS/1 DELIVER) or from a
            broker without batches with ``timestamps=False``.
        stream: the stream the message belongs to, when known.
        headers: the message's headers, a :class:`~zeps.protocol.headers.Headers` (a tuple of
            ``(name, value)`` pairs, ``str`` and ``bytes``, in the order published, names
            possibly repeated; ``get``, ``getall``, ``last``, ``names`` look them up); empty
            for a message published without headers. The client asks the broker for them
            (HEADERS-SELECT); from a broker without headers they are always empty.
    """

    __slots__ = ()
    __match_args__ = _FIELDS

    def __new__(cls, sequence: int, key: str, body: bytes, timestamp: Optional[int] = None,
                stream: Optional[str] = None, headers: Headers = NO_HEADERS) -> "Message":
        return _tuple_new(cls, (sequence, key, body, timestamp, stream, headers))

    sequence = property(itemgetter(0), doc="The stream's sequence number of the message.")
    key = property(itemgetter(1), doc="The routing key (text).")
    body = property(itemgetter(2), doc="The message contents (bytes).")
    timestamp = property(itemgetter(3), doc="When the broker journalled it (ns), or None.")
    stream = property(itemgetter(4), doc="The stream the message belongs to, when known.")
    headers = property(itemgetter(5), doc="The message's headers (empty without).")

    def __getnewargs__(self):
        return tuple(self)

    def __eq__(self, other):                 # a Message equals only a Message, as a dataclass
        if type(other) is Message:
            return _tuple_eq(self, other)
        return False if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other):
        if type(other) is Message:
            return _tuple_ne(self, other)
        return True if isinstance(other, tuple) else NotImplemented

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return "Message(" + ", ".join(f"{n}={v!r}" for n, v in zip(_FIELDS, self)) + ")"

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced by U+FFFD)."""
        return self[2].decode("utf-8", errors="replace")

    @property
    def datetime(self) -> Optional[datetime]:
        """The timestamp as an aware UTC :class:`datetime`, or ``None``."""
        if self[3] is None:
            return None
        return datetime.fromtimestamp(self[3] / 1e9, tz=timezone.utc)

    @property
    def cost(self) -> int:
        """Credit this message costs (``8 + len(key) + 1 + len(body)``; with headers, as
        DELIVER-H, plus their block's length)."""
        if self[5]:
            return message_cost(self[1], self[2]) + len(encode_block(self[5]))
        return message_cost(self[1], self[2])


def build_message(sequence: int, key: str, body: bytes, timestamp: Optional[int],
                  stream: Optional[str], headers: Headers = NO_HEADERS) -> Message:
    """``Message(sequence, key, body, timestamp, stream, headers)`` for the client's delivery
    hot path: one C call (the values come from the decoder, already of the right types)."""
    return _tuple_new(Message, (sequence, key, body, timestamp, stream, headers))


def build_messages(frame: bytes, offsets: List[int], first: int, timestamp: Optional[int],
                   stream: Optional[str]) -> List[Message]:
    """The :class:`Message` objects of DELIVER-BATCH entries: entry ``i`` (sequence
    ``first + i``) is ``frame[offsets[i]:offsets[i + 1]]``. In C when the optional extension is
    built (:mod:`zeps.protocol.speedups`), else :func:`build_messages_py`, its definition."""
    if _batchc is None:
        return build_messages_py(frame, offsets, first, timestamp, stream)
    return _batchc.build_rows(Message, frame, offsets, first, timestamp, stream, NO_HEADERS)


def key_body_columns(frame: bytes, offsets: List[int]) -> Tuple[List[str], List[bytes]]:
    """The keys and the bodies of DELIVER-BATCH entries ``frame[offsets[i]:offsets[i + 1]]``
    (keys decoded as UTF-8, undecodable bytes replaced by U+FFFD), in C when built."""
    if _batchc is not None:
        return _batchc.key_body_columns(frame, offsets)
    f = frame
    keys = [f[o + 1:o + 1 + f[o]].decode("utf-8", "replace") for o in offsets[:-1]]
    bodies = [f[offsets[i] + 5 + f[offsets[i]]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    return keys, bodies


def build_messages_py(frame: bytes, offsets: List[int], first: int, timestamp: Optional[int],
                      stream: Optional[str]) -> List[Message]:
    """:func:`build_messages` in Python. Built in bulk (issue 20): the keys
    and the bodies each in one comprehension, the messages in one ``map`` (C code per message).
    The keys are sliced from the span decoded once as Latin-1, which gives the UTF-8 text of
    every key when all of them are ASCII (checked in one call); otherwise each key is decoded
    as UTF-8, undecodable bytes replaced by U+FFFD."""
    starts = offsets[:-1]
    base = starts[0] if starts else 0
    text = latin_1_decode(memoryview(frame)[base:offsets[-1]])[0]
    f = frame
    keys = [text[s - base + 1:s - base + 1 + f[s]] for s in starts]
    if not "".join(keys).isascii():
        keys = [f[s + 1:s + 1 + f[s]].decode("utf-8", "replace") for s in starts]
    bodies = [f[s + 5 + f[s]:e] for s, e in zip(starts, islice(offsets, 1, None))]
    return list(map(_tuple_new, repeat(Message), zip(
        range(first, first + len(starts)), keys, bodies, repeat(timestamp), repeat(stream),
        repeat(NO_HEADERS))))


class MessageBatch:
    """Messages handed together by :meth:`Subscription.next_batch
    <zeps.clients.Subscription.next_batch>` / ``batches()``: in strictly increasing sequence
    order, never empty.

    For programs that handle many messages at once (a sink writing bodies to a file, a
    counter, a columnar converter), at a fraction of the per-message cost: a batch the broker
    sent as one DELIVER-BATCH frame stays that frame, and nothing is built per message until
    asked. Columns: :attr:`sequences`, :attr:`keys`, :attr:`bodies`, :attr:`timestamps`
    (lists, built on first use), or all of them as one Arrow record batch (:meth:`to_arrow`,
    no Python work per message); or iterate it (``for msg in batch``), index it, take
    :attr:`messages`, for :class:`Message` objects.

    Keys are decoded as UTF-8 with undecodable bytes replaced by U+FFFD (a ZEPS broker only
    journals valid UTF-8 keys).
    """

    __slots__ = ("stream", "_frame", "_offsets", "_first", "_ts", "_messages", "_keys",
                 "_bodies")

    def __init__(self, messages: Sequence[Message]):
        """A batch of these messages (in increasing sequence order; at least one)."""
        if not messages:
            raise ValueError("a MessageBatch holds at least one message")
        self._messages: Optional[List[Message]] = list(messages)
        self.stream = self._messages[0].stream
        self._frame = self._offsets = self._ts = None
        self._first = 0
        self._keys = self._bodies = None

    @classmethod
    def from_frame(cls, frame: bytes, offsets: List[int], first: int, timestamp: int,
                   stream: Optional[str]) -> "MessageBatch":
        """The messages of one DELIVER-BATCH ``frame``: entry ``i`` (sequence ``first + i``)
        is ``frame[offsets[i]:offsets[i + 1]]`` (key length u8, key, body length u32, body).
        Nothing is decoded here."""
        b = object.__new__(cls)
        b._frame, b._offsets, b._first, b._ts, b.stream = frame, offsets, first, timestamp, stream
        b._messages = b._keys = b._bodies = None
        return b

    def __len__(self) -> int:
        if self._messages is not None:
            return len(self._messages)
        return len(self._offsets) - 1

    @property
    def first(self) -> int:
        """Sequence of the first message."""
        return self._first if self._messages is None else self._messages[0].sequence

    @property
    def last(self) -> int:
        """Sequence of the last message."""
        if self._messages is None:
            return self._first + len(self._offsets) - 2
        return self._messages[-1].sequence

    @property
    def sequences(self) -> Sequence[int]:
        """The messages' sequences (a ``range`` when they are consecutive, as in a
        DELIVER-BATCH)."""
        if self._messages is None:
            return range(self._first, self._first + len(self._offsets) - 1)
        return [m.sequence for m in self._messages]

    @property
    def keys(self) -> List[str]:
        """The messages' keys."""
        if self._keys is None:
            if self._messages is not None:
                self._keys = [m.key for m in self._messages]
            else:
                self._keys, self._bodies = key_body_columns(self._frame, self._offsets)
        return self._keys

    @property
    def bodies(self) -> List[bytes]:
        """The messages' bodies."""
        if self._bodies is None:
            if self._messages is not None:
                self._bodies = [m.body for m in self._messages]
            else:
                self._keys, self._bodies = key_body_columns(self._frame, self._offsets)
        return self._bodies

    @property
    def timestamps(self) -> List[Optional[int]]:
        """The messages' timestamps (see :attr:`Message.timestamp`)."""
        if self._messages is None:
            return [self._ts] * (len(self._offsets) - 1)
        return [m.timestamp for m in self._messages]

    @property
    def headers(self) -> List[Headers]:
        """The messages' headers (see :attr:`Message.headers`; a DELIVER-BATCH never carries
        any: a message with headers comes alone, as DELIVER-H)."""
        if self._messages is None:
            return [NO_HEADERS] * (len(self._offsets) - 1)
        return [m.headers for m in self._messages]

    @property
    def messages(self) -> List[Message]:
        """The batch as :class:`Message` objects (built on first use)."""
        if self._messages is None:
            self._messages = build_messages(self._frame, self._offsets, self._first, self._ts,
                                            self.stream)
        return self._messages

    @property
    def cost(self) -> int:
        """Credit the batch costs: the sum of its messages' (see :attr:`Message.cost`)."""
        if self._messages is None:
            return (self._offsets[-1] - self._offsets[0]
                    + ENTRY_COST_EXTRA * (len(self._offsets) - 1))
        return sum(m.cost for m in self._messages)

    def to_arrow(self):
        """The batch as a ``pyarrow.RecordBatch``: ``sequence`` (int64), ``timestamp``
        (``timestamp[ns, UTC]``, null where unknown), ``key`` (string), ``body`` (binary) and
        ``headers`` (a list of ``{key, value}`` structs, null where none), the same schema
        for every batch (:data:`zeps.clients.columns.ARROW_SCHEMA`). A batch the broker sent
        as one DELIVER-BATCH frame becomes columns with no Python work per message: its keys
        and bodies are copied out of the frame in one pass each, nothing is built per message.
        Needs pyarrow and numpy (``pip install 'zeps[spark]'``); raises ImportError saying so
        without them, and ValueError for a sequence or timestamp beyond int64."""
        try:
            from .columns import record_batch
        except ImportError as exc:
            raise ImportError(f"MessageBatch.to_arrow needs pyarrow and numpy "
                              f"(pip install 'zeps[spark]'): {exc}") from None
        return record_batch(self)

    def cut(self, spent: int, topup: int, room: int):
        """For a batch received as a frame, what ``Peering.take`` hands of it message by
        message: ``(messages, their cost, the rest as a batch or None)``, the messages being
        the first ones up to ``room`` of them, stopping at the one that brings ``spent`` to
        ``topup`` (at least one)."""
        offs = self._offsets
        n = len(offs) - 1
        m = min(n, max(room, 1))
        # The first k (1..m) whose k entries cost topup - spent: entries' costs only grow, so
        # a binary search over k (k entries cost offs[k] - offs[0] + ENTRY_COST_EXTRA * k).
        k = 1 + bisect_left(range(1, m), topup - spent + offs[0],
                            key=lambda j: offs[j] + ENTRY_COST_EXTRA * j)
        cost = offs[k] - offs[0] + ENTRY_COST_EXTRA * k
        if k == n:
            return self.messages, cost, None
        head = MessageBatch.from_frame(self._frame, offs[:k + 1], self._first, self._ts,
                                       self.stream)
        rest = MessageBatch.from_frame(self._frame, offs[k:], self._first + k, self._ts,
                                       self.stream)
        return head.messages, cost, rest

    def __iter__(self):
        return iter(self.messages)

    def __getitem__(self, i):
        """Message ``i`` (a negative ``i`` counts from the end; a slice gives a list), built
        alone: ``batch[-1]`` does not build the others."""
        if self._messages is not None or not isinstance(i, int):
            return self.messages[i]
        n = len(self._offsets) - 1
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("MessageBatch index out of range")
        f, start = self._frame, self._offsets[i]
        kend = start + 1 + f[start]
        return build_message(self._first + i, f[start + 1:kend].decode("utf-8", "replace"),
                             f[kend + 4:self._offsets[i + 1]], self._ts, self.stream)

    def __repr__(self) -> str:
        return (f"<zeps.MessageBatch stream={self.stream!r} sequences {self.first}..{self.last} "
                f"({len(self)} messages)>")


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
