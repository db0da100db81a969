"""The broker core: every client's :class:`Session`, every :class:`Stream`, and the dispatch
between them. No sockets: the I/O shell (``server.py``) hands it ``(identity, frames)`` with
:meth:`BrokerCore.receive` and sends whatever it leaves in :attr:`BrokerCore.outbox`.

Order of work the shell follows each round (see ``server.py``):

1. ``receive()`` every message it can read without blocking (publishes are only queued);
2. ``flush()``: one journal append per stream for the queued publishes, then live routing;
3. ``pump()``: one journal batch for each subscriber catching up;
4. send the outbox; timers call ``expire()`` and, after a group fsync, ``confirm()``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from zeps.matching import PatternError, compile_pattern
from zeps.protocol import ProtocolError, commands as c, decode, encode, encode_invalid

from zeps.protocol.reasons import PUBLISH_REJECTED

from .session import ATTACHED, NEW, ProtocolViolation, Session
from .stream import Stream

Outbox = List[Tuple[bytes, bytes]]

_PING_OK = encode(c.PingOk())
_ATTACH_OK = encode(c.AttachOk())
_DETACH_OK = encode(c.DetachOk())
_DELIVER_TIMESTAMPS_OK = encode(c.DeliverTimestampsOk())


@dataclass
class CoreConfig:
    expiry: float = 60.0                  # seconds of silence before a client is forgotten
    max_message: int = 1 << 20            # largest body accepted in a PUBLISH
    regex_timeout: float = 0.005          # seconds per regex match
    replay_batch_records: int = 1000
    replay_batch_bytes: int = 1 << 20


class BrokerCore:
    def __init__(self, datadir, config: Optional[CoreConfig] = None,
                 log: Optional[Callable[..., None]] = None):
        self.datadir = datadir
        self.config = config or CoreConfig()
        self.log = log or (lambda *a, **k: None)
        self.sessions: Dict[bytes, Session] = {}
        self.streams: Dict[str, Stream] = {}
        self.outbox: Outbox = []

    # ------------------------------------------------------------------ input
    def receive(self, identity: bytes, frames: List[bytes], now: float) -> None:
        """Handle one ZeroMQ message from a client (frames after the ROUTER identity)."""
        if len(frames) != 1:
            self._invalid(identity, f"a ZEPS command is exactly one frame, got {len(frames)}")
            return
        try:
            cmd = decode(frames[0])
        except ProtocolError as exc:
            self._invalid(identity, str(exc))
            self.log("invalid_frame", client=identity.hex(), reason=str(exc))
            return
        session = self.sessions.get(identity)
        if session is None:
            session = self.sessions[identity] = Session(identity, now)
        elif type(cmd) is c.Publish and session.state is ATTACHED:
            session.last_seen = now                   # hot path: the grammar allows it
            self._on_publish(session, cmd, None)
            return
        was_stream = session.stream
        try:
            session.accept(cmd, now)
        except ProtocolViolation as exc:
            self._invalid(identity, str(exc))
            return
        handler = _HANDLERS.get(type(cmd))
        if handler is not None:
            try:
                handler(self, session, cmd, was_stream)
            except Exception as exc:   # one client's request must never stop the broker
                self.log("internal_error", client=identity.hex(), command=cmd.NAME,
                         error=f"{type(exc).__name__}: {exc}")
                self._invalid(identity, f"{cmd.NAME} failed in the broker: {exc}")

    def _invalid(self, identity: bytes, reason: str) -> None:
        self.outbox.append((identity, encode_invalid(reason)))

    # ------------------------------------------------------------------ handlers
    def _on_ping(self, s: Session, cmd, _was) -> None:
        self.outbox.append((s.identity, _PING_OK))

    def _on_list_streams(self, s: Session, cmd, _was) -> None:
        names = sorted(set(self.datadir.streams()) | set(self.streams))
        fitting, size = [], 5
        for n in names:          # a frame lists as many names as fit in 64 KiB
            size += 1 + len(n.encode("utf-8"))
            if size > 65535 or len(fitting) == 65535:
                break
            fitting.append(n)
        self.outbox.append((s.identity, encode(c.ListStreamsOk(tuple(fitting)))))

    def _on_attach(self, s: Session, cmd: c.Attach, _was) -> None:
        try:
            stream = self.stream(cmd.stream)
        except Exception as exc:   # JournalError, OSError: say why, stay unattached
            self._invalid(s.identity, f"cannot open stream {cmd.stream!r}: {exc}")
            self.log("attach_failed", stream=cmd.stream, error=str(exc))
            return
        stream.attach(s)
        self.outbox.append((s.identity, _ATTACH_OK))

    def _on_detach(self, s: Session, cmd, _was) -> None:
        self.streams[s.stream].detach(s)
        self.outbox.append((s.identity, _DETACH_OK))

    def _on_subscribe(self, s: Session, cmd: c.Subscribe, _was) -> None:
        try:
            pattern = compile_pattern(cmd.pattern, timeout=self.config.regex_timeout,
                                      on_timeout=self._regex_timeout)
        except PatternError as exc:
            self._invalid(s.identity, str(exc))
            return
        self.streams[s.stream].subscribe(s, pattern, cmd.latest)

    def _on_credit(self, s: Session, cmd: c.Credit, _was) -> None:
        self.streams[s.stream].credit(s, cmd.credit)

    def _on_publish(self, s: Session, cmd: c.Publish, _was) -> None:
        if len(cmd.body) > self.config.max_message:
            self._invalid(s.identity, f"{PUBLISH_REJECTED}body of {len(cmd.body)} bytes is over "
                                      f"the broker's limit of {self.config.max_message}")
            return
        self.streams[s.stream].publish(s, cmd.key, cmd.body)

    def _on_seq_at_time(self, s: Session, cmd: c.SeqAtTime, _was) -> None:
        seq = self.streams[s.stream].seq_at(cmd.timestamp)
        self.outbox.append((s.identity, encode(c.SeqAtTimeOk(seq))))

    def _on_stream_info(self, s: Session, cmd, _was) -> None:
        self.outbox.append((s.identity, encode(self.streams[s.stream].info())))

    def _on_confirm_select(self, s: Session, cmd, _was) -> None:
        s.confirms = True
        stream = self.streams[s.stream]
        stream.flush()          # publishes before the select are counted in `published`
        self.outbox.append((s.identity, encode(c.ConfirmSelectOk(s.published))))

    def _on_deliver_timestamps(self, s: Session, cmd, _was) -> None:
        s.timestamps = True
        self.outbox.append((s.identity, _DELIVER_TIMESTAMPS_OK))

    def _regex_timeout(self, pattern: str, key: str) -> None:
        self.log("regex_timeout", pattern=pattern, key=key[:64])

    # ------------------------------------------------------------------ streams
    def stream(self, name: str) -> Stream:
        st = self.streams.get(name)
        if st is None:
            st = Stream(name, self.datadir.journal(name), self.outbox,
                        replay_batch_records=self.config.replay_batch_records,
                        replay_batch_bytes=self.config.replay_batch_bytes, log=self.log)
            self.streams[name] = st
        return st

    # ------------------------------------------------------------------ rounds and timers
    def flush(self) -> None:
        for st in self.streams.values():
            if st.pending:
                st.flush()

    def pump(self) -> bool:
        """One replay batch per catching-up subscriber; True if more replay work remains."""
        more = False
        for st in self.streams.values():
            if st.catching_up and st.pump():
                more = True
        return more

    def confirm(self) -> None:
        for st in self.streams.values():
            if st.confirming:
                st.confirm()

    def expire(self, now: float) -> List[bytes]:
        """Forget clients silent for longer than the expiry; return their identities."""
        limit = now - self.config.expiry
        gone = [ident for ident, s in self.sessions.items() if s.last_seen < limit]
        for ident in gone:
            self.forget(ident)
        return gone

    def forget(self, identity: bytes) -> None:
        """Drop a client entirely (expired, or its connection is gone)."""
        s = self.sessions.pop(identity, None)
        if s is not None and s.stream is not None:
            st = self.streams.get(s.stream)
            if st is not None:
                st.detach(s)

    def take_outbox(self) -> Outbox:
        """The frames to send, in order; the outbox is emptied (streams share the same list)."""
        out = self.outbox[:]
        self.outbox.clear()
        return out


_HANDLERS = {
    c.Ping: BrokerCore._on_ping,
    c.ListStreams: BrokerCore._on_list_streams,
    c.Attach: BrokerCore._on_attach,
    c.Detach: BrokerCore._on_detach,
    c.Subscribe: BrokerCore._on_subscribe,
    c.Credit: BrokerCore._on_credit,
    c.Publish: BrokerCore._on_publish,
    c.SeqAtTime: BrokerCore._on_seq_at_time,
    c.StreamInfo: BrokerCore._on_stream_info,
    c.ConfirmSelect: BrokerCore._on_confirm_select,
    c.DeliverTimestamps: BrokerCore._on_deliver_timestamps,
}
