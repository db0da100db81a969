"""What the front ends' codecs share: the error of a malformed command, the limits every frame is
checked against before it is parsed, and the 8-byte network-order sequence.

A front-end command is a ZeroMQ multipart message (the ROUTER's identity frame already taken off
by the shell). Each parser first checks the number of frames and the size of every frame against
:class:`Limits`, then decodes; any failure raises :class:`Malformed`, whose ``reason`` is a short,
stable text the shell counts (one counter per reason and socket) before it ignores the command.
None of these protocols has an error reply, so counting and ignoring is the whole answer.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

Buffer = Union[bytes, bytearray, memoryview]

#: Sequences travel as 8 bytes, unsigned, in network order (the Guide's kvmsg packs ``!q``,
#: which is the same bytes for every sequence below 2^63).
_U64 = struct.Struct(">Q")
MAX_SEQUENCE = 2**64 - 1
#: A ZEPS key, and so a CHP key, a BUS topic or a subtree (a key prefix): at most 255 bytes.
MAX_KEY = 255


class Malformed(ValueError):
    """A front-end command that does not parse. ``reason`` is the counter's name."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """Bounds checked before anything is parsed. The defaults suit the broker's; the shell
    passes the broker's ``--max-message`` as ``max_value``."""

    #: largest value (CHP) or event data (BUS): the broker's largest message body
    max_value: int = 1 << 20
    #: CHP properties frame, in bytes, and the number of ``name=value`` lines in it
    max_properties_bytes: int = 4096
    max_properties: int = 64
    #: BUS: subtrees in one SYNCSTART, and the size of its subtree frame
    max_subtrees: int = 64
    max_subtrees_bytes: int = 16384
    #: BUS: producer id (a ZEPS producer id is at most 255 bytes), timestamp and UUID strings
    max_producer: int = 255
    max_timestamp: int = 64
    max_uuid: int = 64

    def frame_limit(self) -> int:
        """The largest frame any front-end command may carry (the shell's ``ZMQ_MAXMSGSIZE``:
        libzmq drops a larger frame's connection before the broker holds it)."""
        return max(self.max_value, self.max_subtrees_bytes, self.max_properties_bytes) + 1024


DEFAULT_LIMITS = Limits()


def decode_or_count(decode: Callable[[Sequence[Buffer], Limits], Any], frames: Sequence[Buffer],
                    limits: Limits, counters, socket: str) -> Any:
    """``decode(frames, limits)``, or None when the command is malformed: then counted on
    ``counters`` (:meth:`~zeps.frontends.counters.Counters.malformed`) under ``socket``'s
    name, and ignored."""
    try:
        return decode(frames, limits)
    except Malformed as exc:
        counters.malformed(socket, exc.reason)
        return None


def encode_u64(value: int) -> bytes:
    """A sequence as 8 bytes in network order."""
    return _U64.pack(value)


def decode_u64(frame: Buffer, what: str = "sequence") -> int:
    """8 bytes in network order, or :class:`Malformed` ``bad <what>``."""
    if len(frame) != 8:
        raise Malformed(f"bad {what}", f"{len(frame)} bytes, not 8")
    return _U64.unpack(frame)[0]


def decode_decimal(frame: Buffer, what: str = "sequence") -> Optional[int]:
    """A sequence written as decimal digits (the Node reference's form, ``String(n)``): its value,
    or None if the frame is not 1 to 20 ASCII digits. :class:`Malformed` if it is digits but above
    2^64-1."""
    if not 0 < len(frame) <= 20:
        return None
    raw = bytes(frame)
    if not raw.isdigit():          # bytes.isdigit: ASCII digits only
        return None
    value = int(raw)
    if value > MAX_SEQUENCE:
        raise Malformed(f"bad {what}", "above 2^64-1")
    return value


def check_count(frames: Sequence[Buffer], expected: int, command: str) -> None:
    """Exactly ``expected`` frames, or :class:`Malformed` ``frame count``. The shell hands at most
    one frame more than the largest command has, so this check costs nothing however many frames
    a hostile peer sent."""
    if len(frames) != expected:
        raise Malformed("frame count", f"{command} has {expected} frames, got {len(frames)}")


def check_size(frame: Buffer, limit: int, what: str) -> None:
    if len(frame) > limit:
        raise Malformed(f"{what} too large", f"{len(frame)} bytes, at most {limit}")


def text(frame: Buffer, what: str, limit: int, *, empty: bool = True) -> str:
    """A ZeroMQ string of UTF-8, at most ``limit`` bytes (checked first)."""
    check_size(frame, limit, what)
    if not empty and not len(frame):
        raise Malformed(f"empty {what}")
    try:
        return bytes(frame).decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"{what} not UTF-8") from None
