"""Durable consumers on the wire (ids 80-92, docs/consumers.md): the ACK frame's ranges and the
limits of the extension, defined once. The commands are in :mod:`zeps.protocol.commands`.

An ACK carries ``n`` pairs of u64 ``(first, last)``, each an inclusive run of sequences, so a
client acknowledging 1,000 consecutive messages sends 16 bytes. At most :data:`MAX_ACK_RANGES`
pairs a frame: the broker checks the frame's size before reading any pair.
"""
from __future__ import annotations

import struct
from typing import Iterable, List, Tuple

#: The most (first, last) pairs one ACK may carry.
MAX_ACK_RANGES = 1024
#: A consumer name: 1 to 64 bytes of letters, digits, ``.``, ``_`` and ``-``.
MAX_CONSUMER_NAME = 64
#: The most bytes of headers the broker adds to a message it dead-letters (``zeps-stream``, a
#: stream name of up to 255 bytes; ``zeps-consumer``; ``zeps-sequence`` and
#: ``zeps-deliveries``, up to 20 digits each; a block's head where the message had none: 429):
#: so much more credit a dead-lettered message may cost than the largest a client may publish.
DEAD_LETTER_HEADERS = 512

_PAIR = struct.Struct(">QQ")


def ranges_of(sequences: Iterable[int]) -> List[Tuple[int, int]]:
    """The sequences as sorted inclusive runs (duplicates merged)."""
    out: List[Tuple[int, int]] = []
    for q in sorted(set(sequences)):
        if out and q == out[-1][1] + 1:
            out[-1] = (out[-1][0], q)
        else:
            out.append((q, q))
    return out


def pack_ranges(ranges: Iterable[Tuple[int, int]]) -> bytes:
    """ACK's ``ranges`` field from (first, last) pairs (at most :data:`MAX_ACK_RANGES`)."""
    pairs = list(ranges)
    if len(pairs) > MAX_ACK_RANGES:
        raise ValueError(f"an ACK carries at most {MAX_ACK_RANGES} ranges, not {len(pairs)}")
    out = []
    for first, last in pairs:
        if not 0 < first <= last < 2**64:
            raise ValueError(f"bad ACK range {first}..{last}")
        out.append(_PAIR.pack(first, last))
    return b"".join(out)


def unpack_ranges(raw: bytes) -> List[Tuple[int, int]]:
    """The (first, last) pairs of an ACK's ``ranges``; ValueError (the reason) if it is not a
    whole number of pairs, carries more than the limit, or a pair is not ``0 < first <= last``."""
    n, rest = divmod(len(raw), _PAIR.size)
    if rest or n == 0:
        raise ValueError("ACK ranges must be 1 or more pairs of 8-octet sequences")
    if n > MAX_ACK_RANGES:
        raise ValueError(f"an ACK carries at most {MAX_ACK_RANGES} ranges, not {n}")
    pairs = [_PAIR.unpack_from(raw, i * 16) for i in range(n)]
    for first, last in pairs:
        if not 0 < first <= last:
            raise ValueError(f"bad ACK range {first}..{last}")
    return pairs


def bad_consumer_name(name: str) -> str:
    """Why ``name`` is not a consumer name ("" if it is one)."""
    if not name or len(name.encode("utf-8")) > MAX_CONSUMER_NAME:
        return f"a consumer name has 1 to {MAX_CONSUMER_NAME} bytes"
    if not all(ch.isascii() and (ch.isalnum() or ch in "._-") for ch in name) or name[0] == ".":
        return "a consumer name is letters, digits, '.', '_' and '-' (not starting with '.')"
    return ""
