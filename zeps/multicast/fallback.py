"""Why a multicast receiver fell back to the broker, in words a user can act on.

A receiver falls back (every message from the broker, datagrams only counted) for one of three
reasons, each counted apart in :class:`~zeps.multicast.config.ReceiverStats`
(``fallbacks_loss``, ``fallbacks_silence``, ``fallbacks_pattern``) and logged by the shells once
(at WARNING; again only at INFO):

* :data:`LOSS`: a loss window lost ``fallback_loss`` of its datagrams or more;
* :data:`SILENCE`: no datagram of the receiver's stream and pattern for the silence time, and
  none of its stream from any other bridge either (no bridge, or multicast does not reach this
  host: route, interface, firewall, TTL);
* :data:`PATTERN`: the same silence, while datagrams of the receiver's *stream* did come, from a
  bridge with another pattern. A receiver takes only the datagrams of a bridge with exactly its
  pattern (a bridge without ``--pattern`` carries ``""``; a receiver on ``eu.`` does not take
  them), so it would stay on the broker for good: it says which patterns the group carries.

:class:`OtherPatterns` remembers those other patterns (bounded) since the receiver's last own
datagram. Pure: no socket, no clock.
"""
from __future__ import annotations

__all__ = ["LOSS", "SILENCE", "PATTERN", "REASONS", "OtherPatterns", "describe"]

LOSS, SILENCE, PATTERN = "loss", "silence", "pattern"
REASONS = (LOSS, SILENCE, PATTERN)
#: Other patterns of the stream remembered (a forged flood of patterns costs no more).
_MAX_PATTERNS = 8


class OtherPatterns:
    """Datagrams of the receiver's stream from bridges with another pattern, since the last
    datagram of its own bridge: how many, and (up to 8) their patterns."""

    def __init__(self) -> None:
        self.count = 0
        self.patterns: dict[str, int] = {}

    def seen(self, pattern: str) -> None:
        self.count += 1
        if pattern in self.patterns or len(self.patterns) < _MAX_PATTERNS:
            self.patterns[pattern] = self.patterns.get(pattern, 0) + 1

    def own(self) -> None:
        """A datagram of the receiver's own stream and pattern came."""
        if self.count:
            self.count = 0
            self.patterns.clear()


def describe(reason: str, *, stream: str, pattern: str, silence: float = 0.0,
             others: OtherPatterns | None = None, rate: float = 0.0, expected: int = 0,
             window: float = 0.0, limit: float = 0.0) -> str:
    """The reason for a fallback as a sentence (the shells add the group and the broker)."""
    if reason == LOSS:
        return (f"{rate:.0%} of the {expected} datagrams due in a {window:g}s window were lost "
                f"(the limit is {limit:.0%}); every message comes from the broker until the loss "
                f"clears")
    if reason == PATTERN and others is not None and others.count:
        theirs = ", ".join(repr(p) for p in others.patterns)
        return (f"no datagram for pattern {pattern!r} in {silence:g}s, but {others.count} of "
                f"stream {stream!r} from a bridge with pattern {theirs}: a receiver takes only "
                f"the datagrams of a bridge with exactly its pattern. Subscribe with the "
                f"bridge's pattern, or run a bridge with --pattern {pattern!r}; meanwhile every "
                f"message comes from the broker")
    return (f"no datagram of stream {stream!r} pattern {pattern!r} in {silence:g}s: is a bridge "
            f"with that stream and pattern running, and does multicast reach this host (route "
            f"to 224.0.0.0/4, interface, firewall, TTL; docs/operations.md, \"Multicast\")? "
            f"Meanwhile every message comes from the broker")
