"""Joining and leaving a stream in the broker core: ATTACH (and STREAM-EXPECT, STREAM-ID),
DETACH, and the open streams themselves (opened on first use, the least recently used idle ones
closed beyond ``max_open_streams``).

A mixin of :class:`~zeps.broker.core.BrokerCore` (pure, like the rest of the core). Opening a
journal touches the disk, which may be slow: an ATTACH to a stream whose journal is not open
waits for the shell to open it off the loop (``Round.to_open``, :meth:`Attachment.opened`), and
what its client sends meanwhile is held, in order, up to :data:`MAX_WAITING` messages.
"""
from __future__ import annotations

from typing import List, Optional

from zeps.protocol import commands as c, encode
from zeps.protocol.reasons import Reason

from .session import Session
from .stream import COUNTERS, Stream

#: Messages held for a client whose ATTACH waits for its stream to open; more get INVALID.
MAX_WAITING = 1024

_ATTACH_OK = encode(c.AttachOk())
_STREAM_EXPECT_OK = encode(c.StreamExpectOk())
_DETACH_OK = encode(c.DetachOk())


class Attachment:
    """The handlers of ATTACH, STREAM-EXPECT, STREAM-ID and DETACH, and the open streams."""

    def _on_attach(self, s: Session, cmd: c.Attach) -> None:
        expect, s.expect = s.expect, None       # STREAM-EXPECT holds for this ATTACH only
        acl = self.acl
        if acl is not None and not acl.may_attach(s.user, cmd.stream):
            self._invalid(s.identity, Reason.not_allowed(acl.who(s.user), "attach", cmd.stream))
            return
        if cmd.stream not in self.catalogue:
            if expect is not None:   # joins only what exists; never makes it (again)
                self._invalid(s.identity, Reason.stream_deleted(cmd.stream) if expect
                              else Reason.no_stream(cmd.stream))
                return
            if not self.config.auto_create:
                self._invalid(s.identity, Reason.no_stream(cmd.stream, created_on_attach=False))
                return
            if acl is not None and not (acl.may_publish(s.user, cmd.stream)
                                        or acl.may_admin(s.user, cmd.stream)):
                # A reader does not create streams: it could fill max_total_streams with
                # empty ones and leave the publishers none.
                self._invalid(s.identity, Reason.not_allowed(acl.who(s.user), "create",
                                                             cmd.stream))
                return
            if self._too_many_streams(s):
                return
        if cmd.stream not in self.streams:
            full = self._no_room_to_open()
            if full is not None:
                self._invalid(s.identity, full)
                return
        if cmd.stream not in self.streams and not self.datadir.is_open(cmd.stream):
            self._open_later(s, cmd, expect)     # the disk may be slow: not on the loop
            return
        try:
            stream = self.stream(cmd.stream)
            actual = self.datadir.incarnation(cmd.stream) if expect else 0
        except Exception as exc:   # JournalError, OSError: say why, stay unattached
            self._invalid(s.identity, Reason.failed(f"cannot open stream {cmd.stream!r}", exc))
            self.log("attach_failed", stream=cmd.stream, error=str(exc))
            return
        if expect and actual != expect:     # deleted and made again since the client knew it
            self._invalid(s.identity, Reason.stream_recreated(cmd.stream, expect, actual))
            return
        stream.attach(s)
        self._set_rights(s)
        self.outbox.append((s.identity, _ATTACH_OK))

    def _open_later(self, s: Session, cmd: c.Attach, expect: Optional[int]) -> None:
        """Opening a journal touches the disk (a new stream: its directory, files and their
        fsyncs; an existing one: its recovery), which may take as long as the disk likes: the
        shell does it off the loop (:attr:`Round.to_open`) and calls :meth:`opened`. The client
        waits; what it sends meanwhile is held, in order (:data:`MAX_WAITING`)."""
        waiting = self.opening.get(cmd.stream)
        if waiting is None:
            waiting = self.opening[cmd.stream] = []
            self._to_open.append(cmd.stream)
        waiting.append((s, cmd, expect))
        s.waiting = []

    def take_opens(self) -> List[str]:
        """The streams to open since the last call (each once, until :meth:`opened`)."""
        names, self._to_open = self._to_open, []
        return names

    def opened(self, name: str, error: Optional[BaseException], now: float) -> None:
        """The shell opened stream ``name``'s journal (``DataDir.journal``), or failed to with
        ``error``: the waiting ATTACHes are answered, then what each client sent meanwhile. A
        dead-letter stream that failed to open is noted for the consumer that waits for it
        (consuming.py: its message is dropped, and the consumer goes on)."""
        if name in self.dead_letter_opens:
            self.dead_letter_opens.discard(name)
            if error is not None:
                self.dead_letter_failed[name] = error
        if error is None:
            self.dead_letter_failed.pop(name, None)       # a failure noted before is over
        for s, cmd, expect in self.opening.pop(name, ()):
            if self.sessions.get(s.identity) is not s:
                continue                                  # forgotten meanwhile
            held, s.waiting = s.waiting or [], None
            if error is None and type(cmd) is not c.Attach:
                self.opened_for(s, cmd)                   # STREAM-DESCRIBE, PURGE, DELETE
            elif error is None:
                s.expect = expect
                self._on_attach(s, cmd)                   # the journal is open: no wait now
            else:
                self._invalid(s.identity, Reason.failed(f"cannot open stream {name!r}", error))
                self.log("attach_failed", stream=name, error=str(error))
            for frames in held:
                self.receive(s.identity, frames, now)

    def _on_stream_id(self, s: Session, cmd) -> None:
        """The attached stream's incarnation (kept in memory while the stream is open)."""
        inc = self.datadir.incarnation(s.stream)
        self.outbox.append((s.identity, encode(c.StreamIdOk(inc))))

    def _on_stream_expect(self, s: Session, cmd: c.StreamExpect) -> None:
        """The next ATTACH joins incarnation ``cmd.incarnation`` only (0: whichever exists),
        and creates nothing."""
        s.expect = cmd.incarnation
        self.outbox.append((s.identity, _STREAM_EXPECT_OK))

    def _set_rights(self, s: Session) -> None:
        acl = self.acl
        s.may_publish = acl is None or acl.may_publish(s.user, s.stream)
        s.may_subscribe = acl is None or acl.may_subscribe(s.user, s.stream)

    def _on_detach(self, s: Session, cmd) -> None:
        self.streams[s.stream].detach(s)     # routes what was queued first
        self._end_peering(s)
        self.outbox.append((s.identity, _DETACH_OK))
        self._to_free.append(s)          # a clean DETACH frees the session once DETACH-OK is out

    def stream(self, name: str) -> Stream:
        """The stream, opened on first use; also marks it most recently used."""
        st = self.streams.pop(name, None)
        if st is not None:
            self.streams[name] = st                      # dict order is the LRU order
        else:
            st = Stream(name, self.datadir.journal(name), self.outbox,
                        replay_batch_records=self.config.replay_batch_records,
                        replay_batch_bytes=self.config.replay_batch_bytes,
                        regex_strikes=self.config.regex_strikes, log=self.log,
                        invalids=self.invalids, settings=self.datadir.settings(name),
                        work=self.work,
                        max_producer_ids_per_key=self.config.max_producer_ids_per_key)
            self.streams[name] = st
            self.catalogue.add(name)
            if name not in self.consumers:         # before anything is appended to it
                self.journal_ends.setdefault(name, st.journal.next_seq)
            if len(self.streams) > self.config.max_open_streams:
                self._release_idle_streams(self.config.max_open_streams, spare=name)
        return st

    def _no_room_to_open(self) -> Optional[Reason]:
        """One more stream may be in use (``max_streams``), once idle ones are closed if need
        be: None; else why not."""
        if len(self.streams) >= self.config.max_streams:
            self._release_idle_streams(self.config.max_streams - 1)
            if len(self.streams) >= self.config.max_streams:
                return Reason.limit("max_streams", self.config.max_streams)
        return None

    def _release_idle_streams(self, keep: int, spare: Optional[str] = None) -> None:
        """Close the least recently used streams that nobody uses (no client, nothing pending
        or unconfirmed; never ``spare``) until at most ``keep`` are open: each open journal
        holds file descriptors, and a broker with many streams must not run out of them."""
        excess = len(self.streams) - keep
        for name in list(self.streams):
            if excess <= 0:
                break
            st = self.streams[name]
            if name == spare or st.sessions or st.queued_publishes or st.confirming or st.catching_up:
                continue
            del self.streams[name]
            self.work.drop(name, st)
            excess -= 1
            for counter in COUNTERS:
                self.released_counts[counter] += getattr(st, counter)
            try:
                self.datadir.release(name)
            except Exception as exc:                      # that stream's problem only
                self.log("stream_close_failed", stream=name, error=str(exc))
