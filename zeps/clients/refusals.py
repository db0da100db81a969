"""What a refusal means to a :class:`~zeps.clients.peering.Peering`: INVALID and ERROR.

Each ATTACH goes after ``REASONS-SELECT``: a broker that offers it refuses with ERROR (a code
and fields, :mod:`zeps.protocol.reasons`) instead of INVALID, and the peering acts on the code
and the fields; from a broker that does not (its INVALID answers the REASONS-SELECT), an
INVALID's code is read from its text's prefix and what the fields would say is parsed from the
text, best effort (INVALID's text is cut at 255 bytes). Below, "an INVALID" is either.

Replies to requests come back in request order, so an INVALID answers the oldest outstanding
request (:mod:`zeps.clients.requests`), unless it says ``PUBLISH rejected: ...`` (it then
answers a publish) or publishes were sent since the last request: a PING (a *barrier*) is sent
before the next request in that case, and an INVALID arriving before its PING-OK answers a
publish. What a refused request means depends on its kind (``_request_refused``): a refused
ATTACH leaves the peering ABSENT (the first, or a reader's to no stream) or ends it (a
re-ATTACH: :class:`~zeps.clients.errors.StreamDeleted`,
:class:`~zeps.clients.errors.StreamRecreated`); a refused extension (STREAM-ID, STREAM-EXPECT,
REASONS-SELECT, BATCH-SELECT, ...) leaves the peering on plain ZEPS/1 for that feature.

Some INVALIDs answer no request: ``not attached: ...`` means the broker forgot this client (the
peering is re-established); ``not allowed: connect`` means its key was removed (final);
``credit window too small: ...`` grows the window (:mod:`zeps.clients.delivery`);
``pattern removed: ...`` drops a pattern and is raised once as
:class:`~zeps.clients.errors.PatternRemoved`.

:class:`Refusals` is a mixin of :class:`~zeps.clients.peering.Peering`, which owns the state it
uses. Pure: no sockets, no clock.
"""
from __future__ import annotations

import ast
import logging
import re

from ..protocol import commands as c
from ..protocol.reasons import FENCED, OUT_OF_ORDER, Code, Reason
from .errors import (ConnectionLost, PatternRemoved, StreamDeleted, StreamRecreated,
                     invalid_error)
from .producer import refusal_kind
from .requests import Request, RequestKind
from .states import ABSENT, ATTACHED, FAILED

__all__ = ["Refusals"]

log = logging.getLogger("zeps.client")

#: The pattern the text of a PATTERN_REMOVED reason names, from a broker without REASONS-SELECT
#: (it writes the regex, without its ``~``, as a Python string literal).
_REMOVED_REGEX = re.compile(r"""regular expression ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


class Refusals:
    """What an INVALID (or ERROR) means (see the module docs)."""

    __slots__ = ()

    def _on_invalid(self, why: Reason) -> None:
        """An INVALID, or an ERROR (``why`` has its code and fields then)."""
        code, reason = why.code, why.text
        if code is Code.NOT_ATTACHED and self.state is ATTACHED:
            self.connection_lost(f"the broker does not know this client ({reason})")
            return
        if code is Code.NOT_ALLOWED and why.fields[:1] == ("connect",):
            # This connection's key was removed from the broker's allow-list: every command on
            # it is refused, and a new connection could not complete the handshake.
            self.state = FAILED
            self._fail(ConnectionLost(f"the broker no longer accepts this client's key: "
                                      f"{reason}"))
            return
        # Advice the broker sends on its own, answering no request:
        if code is Code.WINDOW_TOO_SMALL:
            self._window_too_small(why)
            return
        if code is Code.PATTERN_REMOVED:
            self._pattern_removed(why)
            return
        rejected = code is Code.PUBLISH_REJECTED
        head = self.outstanding[0] if self.outstanding else None
        if head is not None and head.kind is not RequestKind.BARRIER and not rejected:
            # The answer to the request at the head (no publish was sent before it unanswered).
            self.outstanding.popleft()
            head.error = invalid_error(why, head.name)
            head.done = True
            self._request_refused(head, why)
            return
        # With no request in front of it, an INVALID answers a PUBLISH (or a CREDIT).
        kind = refusal_kind(why) if rejected else None
        if kind == FENCED:
            self._fenced(why)
            return
        if kind == OUT_OF_ORDER and self.producer is not None and self.state is ATTACHED:
            self._producer_hole()
            return
        err = invalid_error(why, "PUBLISH" if rejected else None)
        if self.error is None:
            self.error = err
        if rejected and self.confirms:           # the broker does not count it
            self.tracker.reject_one(err)

    def _producer_hole(self) -> None:
        """A publish refused as out of order: one before it was refused, and the broker stores
        none of this peering's above that hole until a PRODUCER (zeps/broker/dedup.py). It is
        not failed: it stays unconfirmed, as do those sent after it (refused the same way, and
        answered before the PRODUCER-OK: the refusals come in order, zeps/broker/confirms.py);
        the first such refusal sends PRODUCER, and its answer has them re-sent, numbered again
        from the broker's last (:meth:`_producer_synced`), the next publishes waiting for it."""
        self.tracker.hold_back()
        if self.producer_sync is None:
            first = self.tracker.first_pseq()
            self.producer_at = first
            self.producer_sync = self.request(c.Producer(self.producer, first),
                                              RequestKind.PRODUCER, self.last_recv)

    def _request_refused(self, head: Request, why: Reason) -> None:
        """What the refusal of the request ``head`` (already failed with it) means to the
        peering, by the request's kind."""
        code, reason, kind = why.code, why.text, head.kind
        if kind is RequestKind.ATTACH:
            if not self.ever_attached:
                # A reader's ATTACH (STREAM-EXPECT 0) to no stream, or any refused ATTACH
                # once the constructor returned: ABSENT, for the next call to try again.
                self.state = ABSENT
                if code is Code.NO_STREAM and not (self.create or self.creating):
                    self.absence = head.error
                else:
                    self.attach_error = head.error
                self.creating = False
            else:
                self.state = FAILED
                self._fail(self._reattach_refused(code, reason))
        elif kind is RequestKind.STREAM_ID:
            log.debug("zeps: the broker at %s does not tell stream incarnations (%s)",
                      self.endpoint, reason)
            self.incarnation = 0
        elif kind is RequestKind.STREAM_EXPECT and not self.incarnation:
            log.debug("zeps: the broker at %s does not have STREAM-EXPECT (%s): its ATTACH "
                      "creates stream %r", self.endpoint, reason, self.stream)
        elif kind is RequestKind.STREAM_EXPECT:
            log.warning("zeps: the broker at %s does not check stream incarnations (%s): "
                        "re-attaching to stream %r without knowing whether it is the same "
                        "stream", self.endpoint, reason, self.stream)
        elif kind is RequestKind.CONFIRM_SELECT:
            self._fail(head.error)
        elif kind is RequestKind.RESUBSCRIBE:
            self.error = self.error or head.error
        elif kind is RequestKind.REASONS_SELECT:
            log.debug("zeps: the broker at %s does not offer REASONS-SELECT (%s): refusals "
                      "are read from INVALID's text", self.endpoint, reason)
        elif kind is RequestKind.BATCH_SELECT:
            log.debug("zeps: the broker at %s does not batch (%s): plain PUBLISH/DELIVER",
                      self.endpoint, reason)
        elif kind is RequestKind.HEADERS_SELECT:
            log.debug("zeps: the broker at %s does not take headers (%s): messages come "
                      "without them, and a publish with headers is refused", self.endpoint,
                      reason)
            self.headers_offered = False
        elif kind is RequestKind.BATCH_LIMITS:       # the broker's own limit stands
            self.queue.max_batch = self.offered_batch
        elif kind is RequestKind.PRODUCER:
            self._producer_refused(head, why)

    def _reattach_refused(self, code: Code, reason: str) -> ConnectionLost:
        """The error a refused re-ATTACH ends the peering with: the stream it knew was deleted
        (``no stream``), or is another incarnation, or (any other reason) the peering is lost."""
        inc = self.incarnation or 0
        if code is Code.NO_STREAM:
            return StreamDeleted(f"stream {self.stream!r} was deleted (the broker said: "
                                 f"{reason})", self.stream, inc, reason)
        if code is Code.STREAM_RECREATED:
            return StreamRecreated(f"stream {self.stream!r} was deleted and created again: its "
                                   f"sequences are not the ones this client knew (the broker "
                                   f"said: {reason})", self.stream, inc, reason)
        return ConnectionLost(f"the broker refused to re-attach stream {self.stream!r}: {reason}")

    def _pattern_removed(self, why: Reason) -> None:
        """Unasked: the broker removed a regular expression subscription (its matches kept
        timing out): forget it, and raise :class:`PatternRemoved` once, naming it when it can."""
        reason = why.text
        if why.fields:                   # (the pattern as subscribed,)
            pattern = why.fields[0]
        else:                            # a broker without REASONS-SELECT: the text, if not cut
            m = _REMOVED_REGEX.search(reason)
            pattern = None
            if m:
                try:
                    pattern = "~" + ast.literal_eval(m.group(1))
                except (ValueError, SyntaxError):
                    pattern = None
        if pattern is not None and self.patterns.pop(pattern, None) is None:
            pattern = None
        log.warning("zeps: stream %r: %s", self.stream, reason)
        self.error = self.error or PatternRemoved(reason, pattern, why.fields)
