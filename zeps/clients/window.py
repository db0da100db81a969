"""The size of a subscriber's credit window: what the broker's limits and its advice ask for.

A message is delivered only when the broker holds at least its credit cost
(:func:`zeps.protocol.deliver.deliver_cost`), so a window smaller than the largest message's cost
stalls the subscription at that message for ever. The peering therefore asks the broker's
``LIMITS`` after every ATTACH and sizes its window for the largest message the broker accepts
(``max_message`` bytes of body under a 255-byte key). A broker that does not know ``LIMITS``
(older ones) still says ``credit window too small: message N needs X bytes ...``
(:data:`zeps.protocol.reasons.WINDOW_TOO_SMALL`): the window is then sized for X. The largest
message a broker delivers is a dead-lettered one at the limit: a durable consumer's dead-letter
stream gets the message with up to :data:`~zeps.protocol.consumer.DEAD_LETTER_HEADERS` bytes of
headers added (docs/consumers.md), and its readers' windows count them.

Sized for a largest cost L means: twice L (not above the broker's ``max_credit``, the most it
ever holds; never smaller than the window asked for), and credit granted back once
``min(window / 2, window - L)`` bytes were consumed. The credit the client holds back is then
below ``window - L``: once the application has taken what it was given, the broker holds at
least L and the largest message can come.

Pure functions: the :class:`~zeps.clients.peering.Peering` applies what they return.
"""
from __future__ import annotations

import re
from typing import Optional

from ..protocol.codec import MAX_STRING
from ..protocol.consumer import DEAD_LETTER_HEADERS
from ..protocol.deliver import deliver_cost

__all__ = ["largest_cost", "advised_cost", "window_for", "topup_for"]

_NEEDS = re.compile(r"needs (\d+) bytes")


def largest_cost(max_message: int) -> int:
    """The credit cost of the largest message a broker with ``max_message`` delivers: the
    largest it accepts, with the headers a dead letter gets (a window sized for the largest
    it accepts stalled on such a message, the credit it held short of its cost)."""
    return deliver_cost(MAX_STRING, max_message) + DEAD_LETTER_HEADERS


def advised_cost(reason: str, window: int) -> int:
    """The cost a ``credit window too small`` advice names (more than ``window`` if it names
    none)."""
    m = _NEEDS.search(reason)
    return int(m.group(1)) if m else window + 1


def window_for(window: int, largest: int, max_credit: Optional[int]) -> Optional[int]:
    """The window for messages costing up to ``largest``: twice that, capped at ``max_credit``
    (when known), never below ``window``. None if ``largest`` is over ``max_credit``: the
    broker will never hold enough credit for it."""
    if max_credit is None:
        return max(window, 2 * largest)
    if largest > max_credit:
        return None
    return max(window, min(2 * largest, max_credit))


def topup_for(window: int, largest: int) -> int:
    """Consumed bytes after which credit is granted back: half the window, less if that would
    keep back so much that a message of cost ``largest`` could never be sent."""
    return max(1, min(window // 2, window - largest))
