"""Stream administration in the broker core: STREAM-CREATE, -DESCRIBE, -PURGE and -DELETE.

A mixin of :class:`~zeps.broker.core.BrokerCore` (pure, like the rest of the core): the handlers
check the name and the ACL's ``admin`` right, then act on the data directory and the open
:class:`~zeps.broker.stream.Stream`, and answer in the outbox.
"""
from __future__ import annotations

import secrets
from collections import OrderedDict

from zeps.journal.settings import (DEFAULT_DELETE_RETENTION_MS, DEFAULT_DIRTY_RATIO,
                                   StreamSettings)
from zeps.protocol import commands as c, encode
from zeps.protocol.reasons import Reason

from .compacting import Compacting
from .session import DETACH_FRAME, Session, bad_stream_name
from .stream import COUNTERS


#: A listing page looks at this many names at most, and fits in one frame.
LIST_SCAN = 1024               # ~0.35 ms to page and encode (4096: 1.4 ms)
LIST_BYTES = 65535 - 16
LIST_TOKENS = 64               # LIST-STREAMS-PAGE tokens kept per key (the newest)


def x_settings(cmd: c.StreamCreateX) -> StreamSettings:
    """The settings a STREAM-CREATE-X asks for; ValueError saying why they cannot be: a flag
    this broker does not know, a dirty ratio over 1000 per mille, or compaction settings
    without ``compact``. A key index alone (flag 2) is kept in the stream's settings; with
    ``compact``, which always has one, it is implied and not written twice."""
    unknown = cmd.flags & ~(c.FLAG_COMPACT | c.FLAG_KEY_INDEX)
    if unknown:
        raise ValueError(f"unknown flags {unknown:#x} (known: 1 compact, 2 key index)")
    compact = bool(cmd.flags & c.FLAG_COMPACT)
    if cmd.min_dirty_permille > 1000:
        raise ValueError(f"min_dirty_permille {cmd.min_dirty_permille} is over 1000")
    return StreamSettings(cmd.retention_bytes, cmd.retention_ms, cmd.max_message,
                          cmd.segment_bytes, compact=compact,
                          delete_retention_ms=cmd.delete_retention_ms,
                          min_cleanable_dirty_ratio=cmd.min_dirty_permille / 1000,
                          key_index=bool(cmd.flags & c.FLAG_KEY_INDEX) and not compact)


class StreamAdministration(Compacting):
    """The handlers of the stream administration commands (see docs/protocol.md)."""

    #: STREAM-DELETEs done, and the messages the deleted streams held, since start (the
    #: ``zeps_streams_deleted_total`` / ``zeps_messages_deleted_total`` metrics): a delete takes
    #: nothing back from the traffic totals, it is counted here.
    streams_deleted = 0
    messages_deleted = 0

    def _admin_refused(self, s: Session, name: str, what: str, pay: bool = True) -> bool:
        """Rights first (cheap, and a client without them spends nothing), then (``pay``) the
        client's budget for administration commands."""
        why = bad_stream_name(name)
        if why:
            self._invalid(s.identity, why)
            return True
        acl = self.acl
        if acl is not None and not acl.may_admin(s.user, name):
            self._invalid(s.identity, Reason.not_allowed(acl.who(s.user), what, name))
            return True
        return pay and self._over_budget(s)

    def _exists(self, name: str) -> bool:
        return name in self.catalogue

    def _no_stream(self, s: Session, name: str, admin: bool = False) -> bool:
        """INVALID unless stream ``name`` exists and this client may know it: it may attach to
        it, or (``admin``: PURGE and DELETE, whose ``admin`` right was checked first) administer
        it (an ``admin``-only client was told its own stream did not exist). A stream being
        opened off the loop exists: DESCRIBE, PURGE and DELETE join the open
        (:meth:`_open_first`), STREAM-SETTINGS reads only the settings its creation wrote."""
        why = bad_stream_name(name)
        if why:
            self._invalid(s.identity, why)
            return True
        if self._exists(name) and (self.acl is None or admin
                                   or self.acl.may_attach(s.user, name)):
            return False
        self._invalid(s.identity, Reason.no_stream(name))
        return True

    def _too_many_streams(self, s: Session) -> bool:
        """A new stream would pass ``max_total_streams`` (streams stored): INVALID "limit"."""
        if len(self.catalogue) < self.config.max_total_streams:
            return False
        self._invalid(s.identity, Reason.limit("max_total_streams", self.config.max_total_streams))
        return True

    def _on_stream_create(self, s: Session, cmd: c.StreamCreate) -> None:
        """Creates the stream's directory and settings (atomically: ``DataDir.create``) and
        opens nothing: its journal is opened by the first ATTACH, under ``max_open_streams``.
        The settings are checked before anything is written; a stream's ``max_message`` may not
        pass the broker's."""
        self._create(s, cmd, lambda: StreamSettings(cmd.retention_bytes, cmd.retention_ms,
                                                    cmd.max_message, cmd.segment_bytes))

    def _on_stream_create_x(self, s: Session, cmd: c.StreamCreateX) -> None:
        """STREAM-CREATE with a compacted stream's settings too (see :func:`x_settings`)."""
        self._create(s, cmd, lambda: x_settings(cmd))

    def _create(self, s: Session, cmd, make) -> None:
        if self._admin_refused(s, cmd.stream, "create"):
            return
        if not self._exists(cmd.stream) and self._too_many_streams(s):
            return
        if cmd.max_message > self.config.max_message:
            self._invalid(s.identity, Reason.limit("max_message", self.config.max_message))
            return
        try:
            settings = make()
        except ValueError as exc:
            self._invalid(s.identity, f"{cmd.NAME}: {exc}")
            return
        try:
            created = self.datadir.create(cmd.stream, settings)
        except Exception as exc:                 # JournalError, OSError: say why
            self._invalid(s.identity, Reason.failed(f"cannot create stream {cmd.stream!r}", exc))
            self.log("stream_create_failed", stream=cmd.stream, error=str(exc))
            return
        if created:
            self.catalogue.add(cmd.stream)
            self.log("stream_created", stream=cmd.stream)
        self.outbox.append((s.identity, encode(c.StreamCreateOk())))

    def _on_stream_settings(self, s: Session, cmd: c.StreamSettingsGet) -> None:
        """STREAM-SETTINGS: the stream's own settings as the STREAM-CREATE-X that makes it (the
        empty name: the broker's defaults, with a compacted stream's)."""
        if cmd.stream == "":
            if self._over_budget(s):
                return
            base = self.datadir.config
            self.outbox.append((s.identity, encode(c.StreamCreateX(
                "", base.retention_bytes or 0, base.retention_ms or 0, self.config.max_message,
                base.segment_bytes, 0, DEFAULT_DELETE_RETENTION_MS,
                round(DEFAULT_DIRTY_RATIO * 1000)))))
            return
        if self._no_stream(s, cmd.stream) or self._over_budget(s):
            return
        own = self.datadir.settings(cmd.stream)
        self.outbox.append((s.identity, encode(c.StreamCreateX(
            cmd.stream, own.retention_bytes, own.retention_ms, own.max_message, own.segment_bytes,
            (c.FLAG_COMPACT | c.FLAG_KEY_INDEX) if own.compact
            else c.FLAG_KEY_INDEX if own.key_index else 0, own.delete_retention_ms,
            round(own.min_cleanable_dirty_ratio * 1000)))))

    def _on_stream_describe(self, s: Session, cmd: c.StreamDescribe) -> None:
        if cmd.stream == "":
            self._describe_defaults(s)
            return
        if (self._no_stream(s, cmd.stream) or self._over_budget(s)
                or self._open_first(s, cmd)):
            return
        self._describe(s, cmd)

    def _open_first(self, s: Session, cmd) -> bool:
        """A stream whose journal is not open is opened off the loop first, as for ATTACH (its
        recovery costs what its segments do: STREAM-DESCRIBE, PURGE and DELETE of closed
        streams ran it on the loop, tens of ms each for thousands of segments, and every
        client waited); the command is finished once it is open (:meth:`opened_for`)."""
        if cmd.stream in self.streams or self.datadir.is_open(cmd.stream):
            return False
        self._open_later(s, cmd, None)
        return True

    def opened_for(self, s: Session, cmd) -> None:
        """Finish an administration command that waited for its stream's journal to open: its
        rights and the stream are looked at again (an ACL reload, or a DELETE, may have come
        meanwhile), not its budget (paid)."""
        admin = _ADMIN_RIGHT.get(type(cmd))
        if ((admin is not None and self._admin_refused(s, cmd.stream, admin, pay=False))
                or self._no_stream(s, cmd.stream, admin is not None)):
            return
        _AFTER_OPEN[type(cmd)](self, s, cmd)

    def _describe(self, s: Session, cmd: c.StreamDescribe) -> None:
        st = self.stream(cmd.stream)
        info, own = st.info(), st.settings
        self.outbox.append((s.identity, encode(c.StreamDescribeOk(
            info.first, info.last, info.size, info.oldest, info.newest, own.retention_bytes,
            own.retention_ms, own.max_message, own.segment_bytes))))

    def _describe_defaults(self, s: Session) -> None:
        """STREAM-DESCRIBE of the empty name (which no stream has): the settings a stream
        without its own has, the broker's (0: no retention), with no state (all 0); so that a
        client can say what a stream's 0 ("the broker's default") stands for."""
        if self._over_budget(s):
            return
        base = self.datadir.config
        self.outbox.append((s.identity, encode(c.StreamDescribeOk(
            0, 0, 0, 0, 0, base.retention_bytes or 0, base.retention_ms or 0,
            self.config.max_message, base.segment_bytes))))

    def _on_stream_purge(self, s: Session, cmd: c.StreamPurge) -> None:
        self._administer(s, cmd)

    def _on_stream_delete(self, s: Session, cmd: c.StreamDelete) -> None:
        self._administer(s, cmd)

    def _administer(self, s: Session, cmd) -> None:
        """PURGE or DELETE: its right (and the budget), the stream, its journal open (off the
        loop if it is not), then the command."""
        if (self._admin_refused(s, cmd.stream, _ADMIN_RIGHT[type(cmd)])
                or self._no_stream(s, cmd.stream, True) or self._open_first(s, cmd)):
            return
        _AFTER_OPEN[type(cmd)](self, s, cmd)

    def _purge(self, s: Session, cmd: c.StreamPurge) -> None:
        if self._being_compacted(s, cmd.stream):
            return
        st = self.stream(cmd.stream)
        st.append_queued()
        try:
            first = self.datadir.purge(cmd.stream, cmd.upto)
        except Exception as exc:
            self._invalid(s.identity, Reason.failed(f"cannot purge stream {cmd.stream!r}", exc))
            self.log("stream_purge_failed", stream=cmd.stream, error=str(exc))
            return
        st.purged(self.datadir.settings(cmd.stream))
        self.log("stream_purged", stream=cmd.stream, upto=cmd.upto, first=first)
        self.outbox.append((s.identity, encode(c.StreamPurgeOk(first))))

    def _delete(self, s: Session, cmd: c.StreamDelete) -> None:
        if self._being_compacted(s, cmd.stream):
            return
        held = 0
        try:                # its journal is opened if it is not: how many messages it held
            info = self.stream(cmd.stream).info()
            held = info.last - max(info.first, 1) + 1 if info.last else 0
        except Exception:                        # unreadable: it is deleted all the same
            pass
        st = self.streams.pop(cmd.stream, None)
        if st is not None:
            st.append_queued()
            for counter in COUNTERS:             # the totals keep its traffic (monotonic)
                self.released_counts[counter] += getattr(st, counter)
            for other in list(st.sessions.values()):    # its clients are told it is gone
                st.detach(other)
                self._end_peering(other)
                self._tell(other, DETACH_FRAME)
            self.work.drop(cmd.stream, st)
        try:
            self.datadir.delete(cmd.stream)
        except Exception as exc:
            self._invalid(s.identity, Reason.failed(f"cannot delete stream {cmd.stream!r}", exc))
            self.log("stream_delete_failed", stream=cmd.stream, error=str(exc))
            return
        self.catalogue.remove(cmd.stream)
        self._forget_compaction(cmd.stream)
        # Their files went with the directory; a save still queued in the consumer store is
        # taken back, so that it cannot write an old consumer into a stream made again under
        # the same name before the store's thread ran.
        gone = self.consumers.pop(cmd.stream, {})
        self.consumers_held -= len(gone)
        for name, g in gone.items():
            g.forget()                              # what it held leaves the budget
            self.consumer_store.remove(g.stream_dir, name)
        self.journal_ends.pop(cmd.stream, None)
        self.streams_deleted += 1
        self.messages_deleted += held
        self.log("stream_deleted", stream=cmd.stream)
        self.outbox.append((s.identity, encode(c.StreamDeleteOk())))

    # ------------------------------------------------------------------ listing
    def _on_list_streams(self, s: Session, cmd) -> None:
        """LIST-STREAMS: the first page of LIST-STREAMS-PAGE (ZEPS/1 has no way to ask for more)."""
        if self._over_budget(s):
            return
        names, _next = self._list_page(s, "")
        self.outbox.append((s.identity, encode(c.ListStreamsOk(names))))

    def _on_list_streams_page(self, s: Session, cmd: c.ListStreamsPage) -> None:
        """A page; ``next`` is the last name looked at when the client may read it, else a
        token (NUL and 16 hex digits: no stream name holds NUL) that any connection of the
        same key turns back into that name (the SDK asks each page on a connection of its
        own), among the key's newest :data:`LIST_TOKENS`. (It was the name: a page of names
        the ACL hid from the client named the last of them.) Only an ACL hides names, and an
        ACL names keys, so the tokens are bounded by the keys it names."""
        if self._over_budget(s):
            return
        after = cmd.after
        tokens = self.list_tokens.get(s.user) if s.user is not None else None
        if after.startswith("\x00"):
            if tokens is None or after not in tokens:
                self._invalid(s.identity, "LIST-STREAMS-PAGE: an unknown or old cursor: list "
                                          "again from the beginning ('')")
                return
            after = tokens[after]
        names, nxt = self._list_page(s, after)
        if nxt and self.acl is not None and not self.acl.may_subscribe(s.user, nxt):
            if tokens is None:
                tokens = self.list_tokens[s.user] = OrderedDict()
            token = "\x00" + secrets.token_hex(8)
            tokens[token] = nxt
            if len(tokens) > LIST_TOKENS:
                tokens.popitem(last=False)
            nxt = token
        self.outbox.append((s.identity, encode(c.ListStreamsPageOk(names, nxt))))

    def _list_page(self, s: Session, after: str):
        """From the catalogue in memory, never the disk: the names after ``after`` the client may
        read (a stream one may not read is not even named), looking at ``LIST_SCAN`` names at
        most, as many as fit in one frame."""
        acl = self.acl
        visible = (lambda n: True) if acl is None else (lambda n: acl.may_subscribe(s.user, n))
        return self.catalogue.page(after, visible, scan=LIST_SCAN, max_bytes=LIST_BYTES)

    def _over_budget(self, s: Session) -> bool:
        """Pay for one command whose cost is not per message; INVALID "limit: ..." if the
        client's budget is spent (it refills at ``admin_rate`` a second)."""
        cfg = self.config
        if s.spend(self.now, cfg.admin_rate, cfg.admin_burst):
            return False
        self._invalid(s.identity, Reason.limit("admin_rate", cfg.admin_rate))
        return True


#: The ACL right PURGE and DELETE need (DESCRIBE needs the right to attach).
_ADMIN_RIGHT = {c.StreamPurge: "purge", c.StreamDelete: "delete"}
#: What an administration command does once its stream's journal is open (``opened_for``).
_AFTER_OPEN = {c.StreamDescribe: StreamAdministration._describe,
               c.StreamPurge: StreamAdministration._purge,
               c.StreamDelete: StreamAdministration._delete}
