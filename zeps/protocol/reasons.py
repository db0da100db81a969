"""INVALID reason prefixes: what the broker writes and the client SDK reads, defined once.

An INVALID's reason is free text for people, but a few prefixes carry meaning a program acts
on. The broker builds every such reason from these constants, and the SDK recognises them with
the same constants (``reason.startswith(NOT_ATTACHED)``), so the two cannot drift apart.
"""
from __future__ import annotations

#: A command that needs ATTACH came from a client the broker does not know as attached (after a
#: broker restart, an expiry or a DETACH). The SDK reads it as "re-attach".
NOT_ATTACHED = "not attached: "
#: A PUBLISH that was not stored (too large, journal append failed, ...). Exactly one INVALID
#: with this prefix answers each rejected PUBLISH, so a publisher counting confirms stays exact.
PUBLISH_REJECTED = "PUBLISH rejected: "

#: A configured broker limit refused the request (max streams, clients, subscriptions, ...);
#: the rest of the reason names the limit and its value.
LIMIT = "limit: "
#: A regex subscription was removed because its matches kept timing out.
PATTERN_REMOVED = "pattern removed: "

#: The ACL does not give this client the right (docs/operations.md, Security).
NOT_ALLOWED = "not allowed: "

#: A message the client subscribed to costs more credit than the client ever held at once:
#: without a larger grant it will never be delivered (an SDK grows its window to fit).
WINDOW_TOO_SMALL = "credit window too small: "

#: The stream named does not exist (a reader never creates one; ATTACH with --auto-create no).
NO_STREAM = "no stream: "

ALL = (NOT_ATTACHED, PUBLISH_REJECTED, LIMIT, PATTERN_REMOVED, NOT_ALLOWED, WINDOW_TOO_SMALL,
       NO_STREAM)

#: The label of a reason that starts with none of the prefixes.
OTHER = "other"
_LABELS = {p: p[:-2].lower().replace(" ", "_") for p in ALL}
#: Every label :func:`label` returns: ``not_attached``, ``publish_rejected``, ``limit``,
#: ``pattern_removed``, ``not_allowed``, ``credit_window_too_small``, ``no_stream``, ``other``.
LABELS = (*_LABELS.values(), OTHER)


def label(reason: str) -> str:
    """The short name of the prefix ``reason`` starts with (the first of :data:`ALL` that
    matches, so ``PUBLISH rejected: not allowed: ...`` is ``publish_rejected``), or
    :data:`OTHER`: the broker counts INVALIDs by it (metrics, monitoring)."""
    for prefix in ALL:
        if reason.startswith(prefix):
            return _LABELS[prefix]
    return OTHER
