"""Why the broker refuses something: a :class:`Reason` (a :class:`Code`, its fields and the text),
defined once for the broker that writes it and the client SDK that reads it.

A ZEPS/1 client gets the text in INVALID (cut at 255 bytes); a client that sent REASONS-SELECT
gets the whole reason in ERROR (docs/protocol.md), so a program acts on the code and the fields,
never on text parsed back. The text's prefixes below stay what they were, so that a client of
a broker without the extension can still recognise them (``reason.startswith(NOT_ATTACHED)``:
best effort, as a cut text may have lost the rest). Broker code builds every reason with one of
:class:`Reason`'s constructors, so no call site writes a prefix or a field by hand.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Tuple, Union

from . import commands as _c
from .codec import encode as _encode, encode_invalid as _encode_invalid

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

#: The stream was deleted and created again since the client attached to it (STREAM-EXPECT named
#: another incarnation): its sequences start again and are not the ones the client knew.
STREAM_RECREATED = "stream recreated: "

#: An idempotent producer's id or sequence is refused (docs/protocol.md, Idempotent
#: producers): ``fenced: `` (a newer PRODUCER of the id took it from this peering),
#: ``out of order: `` (the peering's producer sequences start past the producer's last + 1),
#: ``bound: `` (the id belongs to another CurveZMQ key).
PRODUCER_REFUSED = "producer refused: "
#: The kinds of :data:`PRODUCER_REFUSED` (the first field of its code).
FENCED, OUT_OF_ORDER, BOUND = "fenced", "out of order", "bound"

ALL = (NOT_ATTACHED, PUBLISH_REJECTED, LIMIT, PATTERN_REMOVED, NOT_ALLOWED, WINDOW_TOO_SMALL,
       NO_STREAM, STREAM_RECREATED, PRODUCER_REFUSED)

#: The label of a reason that starts with none of the prefixes.
OTHER = "other"
_LABELS = {p: p[:-2].lower().replace(" ", "_") for p in ALL}
#: Every label :func:`label` returns: ``not_attached``, ``publish_rejected``, ``limit``,
#: ``pattern_removed``, ``not_allowed``, ``credit_window_too_small``, ``no_stream``,
#: ``stream_recreated``, ``producer_refused``, ``other``.
LABELS = (*_LABELS.values(), OTHER)


def label(reason: str) -> str:
    """The short name of the prefix ``reason`` starts with (the first of :data:`ALL` that
    matches, so ``PUBLISH rejected: not allowed: ...`` is ``publish_rejected``), or
    :data:`OTHER`: the broker counts INVALIDs by it (metrics, monitoring)."""
    for prefix in ALL:
        if reason.startswith(prefix):
            return _LABELS[prefix]
    return OTHER


class Code(enum.IntEnum):
    """An ERROR's code, and what its ``fields`` are (numbers in decimal). A client treats a code
    it does not know as :attr:`OTHER`."""
    #: Nothing a program acts on: read the text. No fields.
    OTHER = 0
    #: :data:`NOT_ATTACHED`: (the command that needs ATTACH,).
    NOT_ATTACHED = 1
    #: :data:`PUBLISH_REJECTED`: (the cause's label, then the cause's fields), e.g.
    #: ``("not_allowed", "publish", "s")``; exactly one answers each PUBLISH not stored.
    PUBLISH_REJECTED = 2
    #: :data:`LIMIT`: (the limit's name, as the broker's option with ``_``: ``max_clients``, its
    #: value).
    LIMIT = 3
    #: :data:`PATTERN_REMOVED`: (the pattern exactly as subscribed, ``~`` and all,).
    PATTERN_REMOVED = 4
    #: :data:`NOT_ALLOWED`: (the right missing: ``attach``, ``subscribe``, ``publish``,
    #: ``create``, ``purge`` or ``delete``; the stream), or ``connect`` and no stream: the
    #: connection's key was removed from the allow-list.
    NOT_ALLOWED = 5
    #: :data:`WINDOW_TOO_SMALL`: (the message's sequence, its credit cost, the most credit the
    #: client ever held at once).
    WINDOW_TOO_SMALL = 6
    #: :data:`NO_STREAM`: (the stream,).
    NO_STREAM = 7
    #: :data:`STREAM_RECREATED`: (the stream, the incarnation expected, the stream's; both as
    #: 16 hex digits).
    STREAM_RECREATED = 8
    #: :data:`PRODUCER_REFUSED`: (the kind: :data:`FENCED`, :data:`OUT_OF_ORDER` or
    #: :data:`BOUND`; the producer id; for OUT_OF_ORDER the producer's last sequence and the
    #: peering's first).
    PRODUCER_REFUSED = 9


_PREFIXES = {NOT_ATTACHED: Code.NOT_ATTACHED, PUBLISH_REJECTED: Code.PUBLISH_REJECTED,
             LIMIT: Code.LIMIT, PATTERN_REMOVED: Code.PATTERN_REMOVED,
             NOT_ALLOWED: Code.NOT_ALLOWED, WINDOW_TOO_SMALL: Code.WINDOW_TOO_SMALL,
             NO_STREAM: Code.NO_STREAM, STREAM_RECREATED: Code.STREAM_RECREATED,
             PRODUCER_REFUSED: Code.PRODUCER_REFUSED}
_CODE_PREFIX = {code: prefix for prefix, code in _PREFIXES.items()}
_CODE_LABELS = {code: _LABELS[prefix] for prefix, code in _PREFIXES.items()}

_LIMITS = {
    "max_clients": "the broker serves at most {} clients",
    "max_streams": "the broker holds at most {} streams",
    "max_subscriptions": "at most {} subscriptions per client",
    "max_regex_subscriptions": "at most {} regex subscriptions per client",
    "max_regex_per_stream": "at most {} distinct regex subscriptions per stream",
    "max_total_streams": "the broker stores at most {} streams",
    "max_total_consumers": "the broker holds at most {} durable consumers",
    "max_total_outstanding": ("the broker holds at most {} outstanding messages of durable "
                              "consumers (new messages wait for acknowledgements)"),
    "max_consumers": "a stream has at most {} durable consumers",
    "max_members": "a durable consumer has at most {} members",
    "admin_rate": "at most {} listing and stream administration commands a second per client",
    "max_message": "a stream's max_message is at most the broker's --max-message, {}",
    "max_producer_ids": "at most {} producer ids per connection",
    "max_producer_ids_per_key": ("a key keeps at most {} producer ids on a stream, and its "
                                 "least recently used ones are in use"),
    "max_waiting": "at most {} commands are held while a stream opens",
}
_RIGHTS = {
    "attach": "{} has no right on stream {!r}",
    "subscribe": "{} may not subscribe to stream {!r}",
    "publish": "{} may not publish to stream {!r}",
    "create": "{} may not create stream {!r}",
    "purge": "{} may not purge stream {!r}",
    "delete": "{} may not delete stream {!r}",
}

# An absolute path in an exception's text: quoted (as repr() writes it; spaces and all), or bare
# up to the next blank or quote (less the punctuation that follows it).
_PATH = re.compile(r"""'/[^']*'|"/[^"]*"|(?<![\w.~/-])/(?:[^\s'"]*[^\s'":,.;)\]])""")


def without_paths(text: str) -> str:
    """``text`` with every absolute file path replaced by ``<path>``: what a client may be told
    of a failure in the broker (the broker logs the whole text)."""
    return _PATH.sub("<path>", text)


def code_of(value: int) -> Code:
    """The :class:`Code` of an ERROR's ``code``: :attr:`Code.OTHER` for one this side does not
    know (a newer broker's)."""
    try:
        return Code(value)
    except ValueError:
        return Code.OTHER


@dataclass(frozen=True)
class Reason:
    """Why the broker refused something: ``code`` and ``fields`` for programs, ``text`` for
    people (an INVALID's reason). Built with the constructors below, once, and sent to each
    client as it selected (:meth:`frame`)."""
    code: Code
    fields: Tuple[str, ...]
    text: str

    @property
    def label(self) -> str:
        """The short name metrics count it by (see :data:`LABELS`)."""
        return _CODE_LABELS.get(self.code, OTHER)

    def frame(self, structured: bool) -> bytes:
        """ERROR for a client that sent REASONS-SELECT (``structured``), else INVALID."""
        return self.error_frame if structured else self.invalid_frame

    @cached_property
    def invalid_frame(self) -> bytes:
        return _encode_invalid(self.text)

    @cached_property
    def error_frame(self) -> bytes:
        return _encode(_c.Error(int(self.code), self.fields, self.text))

    # ------------------------------------------------------------------ one constructor per kind
    @classmethod
    def of(cls, reason: Union["Reason", str]) -> "Reason":
        """``reason`` itself, or a text's reason: coded by the prefix it starts with (as
        :func:`label` reads it), without fields."""
        if isinstance(reason, Reason):
            return reason
        for prefix, code in _PREFIXES.items():
            if reason.startswith(prefix):
                return cls(code, (), reason)
        return cls(Code.OTHER, (), reason)

    @classmethod
    def received(cls, cmd) -> "Reason":
        """The reason of an INVALID (coded by its text's prefix, no fields: best effort, as the
        text may be cut) or of an ERROR (a code this side does not know is OTHER)."""
        if type(cmd) is _c.Error:
            return cls(code_of(cmd.code), tuple(cmd.fields), cmd.text)
        return cls.of(cmd.reason)

    @classmethod
    def other(cls, text: str) -> "Reason":
        return cls(Code.OTHER, (), text)

    @classmethod
    def failed(cls, what: str, exc: BaseException) -> "Reason":
        """``what`` failed in the broker because of ``exc``: told without the server's paths."""
        return cls(Code.OTHER, (), f"{what}: {without_paths(str(exc))}")

    @classmethod
    def not_attached(cls, command: str) -> "Reason":
        return cls(Code.NOT_ATTACHED, (command,), f"{NOT_ATTACHED}{command} before ATTACH")

    @classmethod
    def publish_rejected(cls, cause: Union["Reason", str]) -> "Reason":
        cause = cls.of(cause)
        return cls(Code.PUBLISH_REJECTED, (cause.label, *cause.fields),
                   f"{PUBLISH_REJECTED}{cause.text}")

    @classmethod
    def limit(cls, name: str, value: Union[int, float]) -> "Reason":
        """The broker's limit ``name`` (a key of ``_LIMITS``) of ``value`` refused it."""
        shown = str(value) if isinstance(value, int) else f"{value:g}"
        return cls(Code.LIMIT, (name, shown), LIMIT + _LIMITS[name].format(shown))

    @classmethod
    def pattern_removed(cls, pattern: str, strikes: int) -> "Reason":
        """The regex subscription ``pattern`` (``~...``) was removed: it timed out ``strikes``
        times."""
        return cls(Code.PATTERN_REMOVED, (pattern,), f"{PATTERN_REMOVED}regular expression "
                                                     f"{pattern[1:]!r} timed out {strikes} times")

    @classmethod
    def not_allowed(cls, who: str, right: str, stream: str, revoked: str = "") -> "Reason":
        """The ACL does not give ``who`` the ``right`` (a key of ``_RIGHTS``) on ``stream``;
        ``revoked``: it had it until the ACL was reloaded, and what that ended."""
        lost = "read" if right == "subscribe" else "use"
        text = (f"{who} may no longer {lost} stream {stream!r}: {revoked}" if revoked
                else _RIGHTS[right].format(who, stream))
        return cls(Code.NOT_ALLOWED, (right, stream), NOT_ALLOWED + text)

    @classmethod
    def window_too_small(cls, sequence: int, cost: int, peak: int) -> "Reason":
        return cls(Code.WINDOW_TOO_SMALL, (str(sequence), str(cost), str(peak)),
                   f"{WINDOW_TOO_SMALL}message {sequence} needs {cost} bytes of credit, more "
                   f"than this client ever held at once ({peak})")

    @classmethod
    def no_stream(cls, stream: str, created_on_attach: bool = True) -> "Reason":
        """There is no ``stream``; ``created_on_attach=False``: and ATTACH does not create one
        (``--auto-create no``)."""
        hint = "" if created_on_attach else (" (the broker creates streams only with "
                                             "STREAM-CREATE: 'zeps stream create')")
        return cls(Code.NO_STREAM, (stream,), f"{NO_STREAM}{stream!r}{hint}")

    @classmethod
    def stream_deleted(cls, stream: str) -> "Reason":
        """An ATTACH after STREAM-EXPECT: the stream the client knew was deleted (and it is
        not created again by that ATTACH)."""
        return cls(Code.NO_STREAM, (stream,), f"{NO_STREAM}{stream!r} (deleted since this "
                                              f"client attached to it; not created again)")

    @classmethod
    def stream_recreated(cls, stream: str, expected: int, actual: int) -> "Reason":
        """An ATTACH after STREAM-EXPECT ``expected``: ``stream`` is incarnation ``actual``."""
        return cls(Code.STREAM_RECREATED, (stream, f"{expected:016x}", f"{actual:016x}"),
                   f"{STREAM_RECREATED}{stream!r} was deleted and created again since this "
                   f"client attached to it (incarnation {actual:016x}, not {expected:016x})")

    @classmethod
    def key_revoked(cls, who: str) -> "Reason":
        """The allow-list no longer has the key of ``who``'s connection: every command on it is
        refused (``right`` ``connect``, no stream)."""
        return cls(Code.NOT_ALLOWED, ("connect", ""),
                   f"{NOT_ALLOWED}{who}: its key is no longer allowed (the broker's allow-list "
                   f"changed); this connection is closed to every command")

    @classmethod
    def producer_fenced(cls, producer: str) -> "Reason":
        """A newer PRODUCER of ``producer`` (another peering) took the id: this peering may no
        longer publish with it (Kafka's ProducerFenced)."""
        return cls(Code.PRODUCER_REFUSED, (FENCED, producer),
                   f"{PRODUCER_REFUSED}{FENCED}: producer id {producer!r} was taken by a newer "
                   f"PRODUCER on another connection")

    @classmethod
    def producer_out_of_order(cls, producer: str, last: int, first: int) -> "Reason":
        """The peering's producer sequences start at ``first``, past the ``last`` the stream
        holds + 1 (Kafka's OutOfOrderSequence): its publishes are refused until a PRODUCER
        from ``last + 1`` or below."""
        return cls(Code.PRODUCER_REFUSED, (OUT_OF_ORDER, producer, str(last), str(first)),
                   f"{PRODUCER_REFUSED}{OUT_OF_ORDER}: producer id {producer!r} is at producer "
                   f"sequence {last}; its next cannot be {first} (PRODUCER from {last + 1} or "
                   f"below)")

    @classmethod
    def producer_bound(cls, producer: str, who: str) -> "Reason":
        """``producer`` is bound to another CurveZMQ key than ``who``'s."""
        return cls(Code.PRODUCER_REFUSED, (BOUND, producer),
                   f"{PRODUCER_REFUSED}{BOUND}: producer id {producer!r} belongs to another key "
                   f"than {who}")
