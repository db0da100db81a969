"""The broker's budget of outstanding messages, over all its durable consumers
(``--max-total-outstanding``, docs/consumers.md "Bounds"). Pure: no sockets, no clock.

Each outstanding message (handed out, not acknowledged: :class:`zeps.broker.groups.Out`) costs
the broker a few hundred bytes (its record, its place in the consumer's dict and heaps, its key),
and each consumer may hold ``MAX_PENDING`` (65,536) of them; without a bound over all
consumers, members that take and never acknowledge make a broker of ``max_total_consumers``
consumers hold 6.5 billion. :class:`Budget` counts them all: every consumer
(:class:`~zeps.broker.groups.Group`) adds one when a message becomes outstanding and takes one
back when it leaves for good (ACK, dead letter, retention, a rewind), and gives back all it
holds when it is deleted (CONSUMER-DELETE, its stream deleted). A consumer loaded from its
file counts what the file names, even past the limit (they were outstanding before the
restart; they go out again).

When the budget is used up a consumer reads no new messages from its journal, exactly as at
its own ``MAX_PENDING``: it is paused, not refused; nothing is lost, its members are told
nothing (the protocol has no notice for it, nor for ``MAX_PENDING``), messages due again
(already counted) still go out, and it goes on in the first round after an acknowledgement,
a dead letter or a deletion freed room. ``ACK_NONE`` consumers hold nothing (a message is
acknowledged as it goes out) but what their members' full pipes handed back; they are paused
too, and as they hold fewer than :data:`SMALL` they go on from the reserve.

**Fairness.** The last :data:`RESERVE` of the budget is kept for consumers that hold fewer
than :data:`SMALL` messages: consumers holding many (members that take much and acknowledge
little: a stuck application, or a hostile one) stop at ``limit - reserve``, and the small ones
go on from the reserve. That holds against a few large consumers; a client that may subscribe
can still fill the reserve too, with ``reserve / SMALL`` consumers each holding ``SMALL`` (there
is no accounting per client: as JetStream's account limits, a budget per principal would be).
An operator finds the consumers holding the most with ``/consumerz?sort=outstanding`` and deletes
them; the ACL's subscribe right decides who may add consumers.

Costs: :meth:`Budget.room` is O(1) and so is each count; nothing visits the consumers, paused
or not (the pump step looks at each consumer with members once a round as it did, and a
paused one costs it one comparison).
"""
from __future__ import annotations

from zeps.protocol.reasons import Reason

#: A consumer holding fewer outstanding messages than this may take from the reserve (one
#: member of the default ``max_ack_pending``, 1,000, fits).
SMALL = 1024
#: The share of the budget kept for small consumers (a quarter).
RESERVE = 4


class Budget:
    """The outstanding messages of every consumer loaded (``held``), and the most the broker
    holds (``limit``). Groups count in it; the core reads it (see the module docstring)."""
    __slots__ = ("limit", "held", "reserve", "told")

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0
        self.reserve = limit // RESERVE
        self.told = False               # the pause was logged; again once half is free

    def room(self, own: int) -> int:
        """How many more messages a consumer holding ``own`` may take now (may be < 0)."""
        free = self.limit - self.held
        shared = free - self.reserve
        if own >= SMALL:
            return shared
        return min(free, max(shared, SMALL - own))

    def reason(self) -> Reason:
        """What a consumer paused by the budget is told (CONSUMER-INFO, the log)."""
        return Reason.limit("max_total_outstanding", self.limit)

    def pause_to_log(self) -> bool:
        """True once a time the budget pauses a consumer (the log says it), then not again
        until half the budget is free."""
        if self.told:
            return False
        self.told = True
        return True

    def give(self, n: int = 1) -> None:
        """``n`` outstanding messages left for good."""
        self.held -= n
        if self.told and self.held <= self.limit // 2:
            self.told = False
