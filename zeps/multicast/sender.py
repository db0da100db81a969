"""The bridge's pure core: messages in, datagrams out (no socket, no clock of its own).

:class:`Sender` packs the messages the bridge receives from the broker into DATA datagrams
(:mod:`zeps.multicast.datagram`) of at most ``max_datagram`` bytes, numbers every datagram of its
session, chains the messages (each entry's ``after`` is the sequence of the message before it,
so receivers detect a lost message even when the pattern makes sequences jump) and announces its
head in a HEAD datagram every ``head_interval`` seconds, busy or idle.

A message too large for one datagram is not split: it goes out as a REF entry (sequence and
``after`` only), which tells receivers to fetch that one message from the broker. Splitting would
make a large message as likely to be lost as all of its fragments together, and the broker keeps
it anyway. A message with headers goes out as a REF entry too (counted in :attr:`Sender.refs`
and :attr:`Sender.header_refs`): the datagram format (version 1) has no room for headers, and
the receivers' fetch from the broker brings the message with them.

The I/O shell (:mod:`zeps.multicast.bridge`) decides when to :meth:`Sender.flush` a partly filled
datagram: when the broker has nothing more for it at once, so a quiet stream sends each message
without delay and a busy one fills datagrams.
"""
from __future__ import annotations

from . import datagram as dg

__all__ = ["DEFAULT_DATAGRAM", "DEFAULT_HEAD_INTERVAL", "Sender"]

#: Default largest datagram: a 1500-byte Ethernet MTU minus the IPv4 (20) and UDP (8) headers.
DEFAULT_DATAGRAM = 1472
#: Default seconds between two HEAD announcements.
DEFAULT_HEAD_INTERVAL = 1.0


class Sender:
    """Packs one bridge session's messages into numbered datagrams.

    Args:
        stream, pattern: what the bridge reads (written in every datagram).
        session: this bridge run's random 64-bit id.
        start_after: the sequence the bridge starts after: the first message's ``after``, and
            the head announced until a message comes.
        max_datagram: largest datagram in bytes (``header + one REF entry`` up to 65507).
        head_interval: seconds between HEADs.
        now: the current time (seconds, any monotonic origin): the first HEAD is due at once.
    """

    def __init__(self, stream: str, pattern: str, *, session: int, start_after: int,
                 max_datagram: int = DEFAULT_DATAGRAM,
                 head_interval: float = DEFAULT_HEAD_INTERVAL, now: float):
        self.stream = stream
        self.pattern = pattern
        self.session = session
        smallest = dg.header_size(stream, pattern) + dg.REF_SIZE
        if not smallest <= max_datagram <= dg.MAX_UDP_PAYLOAD:
            raise ValueError(f"datagram size must be from {smallest} (for this stream and "
                             f"pattern) to {dg.MAX_UDP_PAYLOAD} bytes, not {max_datagram}")
        if not head_interval > 0:
            raise ValueError("head interval must be more than zero seconds")
        self.max_datagram = max_datagram
        self.head_interval = head_interval
        self._interval_ms = max(1, round(head_interval * 1000))
        #: Sequence of the last message handled (sent, or referenced), or ``start_after``.
        self.head = start_after
        self._number = 0
        self._base = dg.header_size(stream, pattern)
        self._entries: list[bytes] = []
        self._size = self._base
        self._next_head = now
        #: Counters: messages carried, REF entries, DATA and HEAD datagrams.
        self.messages = 0
        self.refs = 0
        self.header_refs = 0            # of which: messages with headers
        self.datagrams = 0
        self.heads = 0

    def add(self, sequence: int, key: str, body: bytes, timestamp: int | None,
            headers=()) -> list[bytes]:
        """Take the next message from the broker; return the datagrams it completed (0 or 1).
        A message with ``headers`` goes as a REF entry (receivers fetch it, headers and all).

        Sequences must increase; a sequence not above :attr:`head` is ignored."""
        if sequence <= self.head:
            return []
        raw_key = key.encode("utf-8")
        size = dg.entry_size(len(raw_key), len(body))
        if headers or self._base + size > self.max_datagram:
            entry = dg.encode_ref(sequence, self.head)
            size = dg.REF_SIZE
            self.refs += 1
            if headers:
                self.header_refs += 1
        else:
            entry = dg.encode_entry(sequence, self.head, timestamp or 0, raw_key, body)
            self.messages += 1
        out = []
        if self._size + size > self.max_datagram or len(self._entries) == 0xFFFF:
            out.append(self._seal())
        self._entries.append(entry)
        self._size += size
        self.head = sequence
        return out

    def flush(self) -> bytes | None:
        """The partly filled datagram, or ``None`` if no message waits."""
        return self._seal() if self._entries else None

    def tick(self, now: float) -> list[bytes]:
        """Datagrams due at ``now``: when a HEAD is due, any waiting messages, then the HEAD
        (so a HEAD never announces a message not yet sent)."""
        if now < self._next_head:
            return []
        self._next_head = now + self.head_interval
        out = [self._seal()] if self._entries else []
        self._number += 1
        self.heads += 1
        out.append(dg.encode_head(self.session, self._number, self.stream, self.pattern,
                                  self.head, self._interval_ms))
        return out

    def next_deadline(self) -> float:
        """When :meth:`tick` has the next HEAD to send."""
        return self._next_head

    def _seal(self) -> bytes:
        self._number += 1
        self.datagrams += 1
        out = dg.encode_data(dg.header(dg.DATA, self.session, self._number, self.stream,
                                       self.pattern), self._entries)
        self._entries = []
        self._size = self._base
        return out
