"""The ``ttl`` header of a key's message: the seconds the key lives after the message was
journalled. The KV client writes and reads it (:mod:`zeps.clients.kv`, ``zeps kv put --ttl``),
and the CHP front end, which deletes a key when its ttl is due (RFC 12's ``ttl`` property, kept
on the stream as this header), reads it. Pure.

* :func:`ttl_text` is how it is written: decimal seconds, at most 10 digits before the point
  and 9 after (:data:`TTL_TEXT`, the grammar the CHP front end takes from its own clients),
  never an exponent (``f"{2592000:g}"`` is ``2.592e+06``, which a reader of that grammar
  refuses).
* :func:`ttl_seconds` is how it is read: any finite decimal number; zero means none. Both the
  KV client and the CHP front end read it so, so that they agree on every key.
"""
from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal, InvalidOperation
from typing import Optional, Union

__all__ = ["TTL_HEADER", "TTL_TEXT", "MAX_TTL", "ttl_text", "ttl_seconds"]

#: The header's name (and the CHP property's).
TTL_HEADER = "ttl"
#: A ttl as written: seconds, at most 10 digits, and at most 9 after a decimal point.
TTL_TEXT = re.compile(r"[0-9]{1,10}(?:\.[0-9]{1,9})?")
#: The longest ttl :func:`ttl_text` writes (just under 10^10 seconds, some 317 years).
MAX_TTL = 9_999_999_999.999999999

_NANOSECOND = Decimal("1e-9")
_LONGEST = Decimal("9999999999.999999999")
_HALF_NANOSECOND = 5e-10


def ttl_text(seconds: Union[int, float]) -> str:
    """``seconds`` as the header's text (:data:`TTL_TEXT`), rounded to the nanosecond.
    ValueError if it is not a positive number that rounds to at least a nanosecond and at most
    :data:`MAX_TTL`."""
    if isinstance(seconds, bool) or not isinstance(seconds, (numbers.Real, Decimal)):
        raise ValueError(f"ttl must be a number of seconds, not {seconds!r}")
    finite = seconds.is_finite() if isinstance(seconds, Decimal) else math.isfinite(seconds)
    if not finite or not seconds > 0:
        raise ValueError(f"ttl must be a positive number of seconds, not {seconds!r}")
    if isinstance(seconds, Decimal):
        exact = seconds
    elif isinstance(seconds, numbers.Integral):
        exact = Decimal(int(seconds))
    else:
        exact = Decimal(repr(float(seconds)))
    try:
        value = exact.quantize(_NANOSECOND)
    except InvalidOperation:                       # more digits than a Decimal context holds
        value = None
    if value is None or value > _LONGEST:
        raise ValueError(f"ttl of {seconds!r} seconds is over the longest, {_LONGEST}")
    if value == 0:
        raise ValueError(f"ttl of {seconds!r} seconds is under a nanosecond")
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def ttl_seconds(text: str) -> Optional[float]:
    """The header's seconds: None if it is zero (no ttl); ValueError if it is not a decimal
    number (``float``'s syntax, so a ttl an older writer wrote with an exponent is read too)
    that :func:`ttl_text` could write: finite, not negative, at most :data:`MAX_TTL`, and
    zero or at least half a nanosecond."""
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"ttl {text!r} is not a number of seconds") from None
    if not 0 <= seconds <= MAX_TTL or 0 < seconds < _HALF_NANOSECOND:
        raise ValueError(f"ttl {text!r} is not a number of seconds from a nanosecond to "
                         f"{_LONGEST}")
    return seconds if seconds > 0 else None
