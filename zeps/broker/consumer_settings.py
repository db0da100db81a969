"""A CONSUMER-ADD's settings: checked before anything else is done for it, and kept as the
consumer's stored configuration (:mod:`zeps.journal.consumers`). Pure; used by
:mod:`zeps.broker.consuming`."""
from __future__ import annotations

from typing import Optional

from zeps.journal import consumers as store
from zeps.matching.patterns import REGEX_MARKER
from zeps.protocol import commands as c
from zeps.protocol.consumer import bad_consumer_name

from .groups import MAX_ACK_PENDING
from .session import bad_stream_name

#: The longest NAK delay (a day), and the longest ack wait.
MAX_DELAY_MS = 86_400_000
#: Patterns one consumer may have.
MAX_CONSUMER_PATTERNS = 16


def config_of(cmd: c.ConsumerAdd) -> store.ConsumerConfig:
    """The settings a CONSUMER-ADD gives, as they are stored (and compared with an existing
    consumer's)."""
    return store.ConsumerConfig(
        name=cmd.name, patterns=tuple(cmd.patterns), start=cmd.start,
        start_value=cmd.start_value, ack=cmd.ack, ack_wait_ms=cmd.ack_wait_ms,
        max_deliver=cmd.max_deliver, max_ack_pending=cmd.max_ack_pending,
        dead_letter=cmd.dead_letter, flags=cmd.flags)


def why_bad(cmd: c.ConsumerAdd, stream: str) -> Optional[str]:
    """Why a CONSUMER-ADD on ``stream`` is refused whatever the broker holds (a bad name,
    patterns, start, ack mode, wait, window, flags or dead-letter stream), or None."""
    why = bad_consumer_name(cmd.name)
    if why:
        return why
    n = len(cmd.patterns)
    if not 1 <= n <= MAX_CONSUMER_PATTERNS:
        return f"a consumer takes 1 to {MAX_CONSUMER_PATTERNS} patterns, not {n}"
    if any(p.startswith(REGEX_MARKER) for p in cmd.patterns):
        return "a consumer's patterns are key prefixes, not regexes (~)"
    if cmd.start not in (c.START_ALL, c.START_SEQUENCE, c.START_TIME, c.START_NEW):
        return f"unknown consumer start {cmd.start}"
    if cmd.ack not in (c.ACK_EXPLICIT, c.ACK_ALL, c.ACK_NONE):
        return f"unknown ack mode {cmd.ack}"
    if not 1 <= cmd.ack_wait_ms <= MAX_DELAY_MS:
        return f"ack wait is 1 ms to {MAX_DELAY_MS} ms, not {cmd.ack_wait_ms}"
    if not 1 <= cmd.max_ack_pending <= MAX_ACK_PENDING:
        return f"max_ack_pending is 1 to {MAX_ACK_PENDING}, not {cmd.max_ack_pending}"
    if cmd.flags & ~c.CONSUMER_KEY_ORDER:
        return f"unknown consumer flags {cmd.flags:#x}"
    if cmd.dead_letter:
        why = bad_stream_name(cmd.dead_letter)
        if why:
            return f"dead-letter stream: {why}"
        if cmd.dead_letter == stream:
            return "the dead-letter stream is the consumer's own stream"
    return None
