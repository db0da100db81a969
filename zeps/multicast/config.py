"""A multicast receiver's tuning (:class:`ReceiverConfig`) and what it counts
(:class:`ReceiverStats`): plain data for :class:`~zeps.multicast.receiver.Receiver` and its
shells, importable without them (the command line takes its defaults from here)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReceiverConfig", "ReceiverStats"]


@dataclass(frozen=True)
class ReceiverConfig:
    """Tuning of a :class:`Receiver` (times in seconds, rates as fractions)."""

    reorder_wait: float = 0.02
    loss_window: float = 1.0
    fallback_loss: float = 0.2
    min_datagrams: int = 10
    return_loss: float = 0.02
    return_windows: int = 3
    #: Seconds without any datagram before falling back; ``None``: three HEAD intervals of the
    #: bridge (as its HEADs announce; 3 s before the first HEAD), at least 1 s.
    silence: float | None = None
    max_pending_bytes: int = 64 << 20
    #: Seconds a HEAD or REF claim keeps the feed open without the feed getting closer to it.
    claim_hold: float = 2.0
    #: Seconds HEAD and REF claims are ignored after one the broker did not bear out.
    claim_holdoff: float = 10.0
    #: Seconds after a fallback for loss before loss can cause another (silence always can).
    fallback_holdoff: float = 30.0

    def __post_init__(self):
        for name in ("reorder_wait", "loss_window"):
            value = getattr(self, name)
            if not (value >= 0 if name == "reorder_wait" else value > 0):
                raise ValueError(f"{name} must be a positive number of seconds")
        for name in ("fallback_loss", "return_loss"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a fraction from 0 to 1")
        if self.return_loss >= self.fallback_loss:
            raise ValueError("return_loss must be below fallback_loss")
        if self.min_datagrams < 1 or self.return_windows < 1:
            raise ValueError("min_datagrams and return_windows must be at least 1")
        if self.silence is not None and not self.silence > 0:
            raise ValueError("silence must be a positive number of seconds")
        if self.max_pending_bytes < 1:
            raise ValueError("max_pending_bytes must be positive")
        if not self.claim_hold > 0:
            raise ValueError("claim_hold must be a positive number of seconds")
        for name in ("claim_holdoff", "fallback_holdoff"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be zero or more seconds")


@dataclass
class ReceiverStats:
    """What a receiver saw. Datagram counts: ``datagrams`` accepted (this stream and pattern,
    not duplicated), ``reordered`` (arrived after a later one), ``duplicates``, ``foreign``
    (another protocol, version, stream or pattern), ``malformed`` (did not decode), ``lost``
    (estimated from the numbers), ``far`` (a number far from its session's, not counted for
    loss). Message counts: ``multicast`` and ``unicast`` (handed, by the way they came),
    ``stale`` (entries already handed), ``refs`` (too large to be carried), ``overflow`` (entries
    dropped because the buffer was full; fetched from the broker), ``forged`` (entries and HEAD
    or REF claims that cannot be real: beyond the broker's head, or denying a handed message),
    ``deceived`` (a real entry came after a forged one had been handed in its place: one that
    said the real message did not exist, or carried other contents; the shells log it).
    Events: ``checks`` (head checks answered by the broker), ``repairs`` (feed opened for a gap),
    ``unfulfilled`` (HEAD or REF claims dropped because the feed did not bear them out),
    ``fallbacks``, ``returns``. Why it fell back (:mod:`zeps.multicast.fallback`):
    ``fallbacks_loss``, ``fallbacks_silence``, ``fallbacks_pattern`` (silence on its pattern while
    ``other_pattern`` datagrams -- its stream, from a bridge with another pattern, also counted as
    ``foreign`` -- came)."""

    datagrams: int = 0
    reordered: int = 0
    duplicates: int = 0
    foreign: int = 0
    malformed: int = 0
    lost: int = 0
    far: int = 0
    multicast: int = 0
    unicast: int = 0
    stale: int = 0
    refs: int = 0
    overflow: int = 0
    forged: int = 0
    deceived: int = 0
    checks: int = 0
    repairs: int = 0
    unfulfilled: int = 0
    fallbacks: int = 0
    returns: int = 0
    other_pattern: int = 0
    fallbacks_loss: int = 0
    fallbacks_silence: int = 0
    fallbacks_pattern: int = 0
