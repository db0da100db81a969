"""The broker core driven in-process: commands in, frames out, an explicit clock; no sockets.

Every test builds a real :class:`BrokerCore` over a real journal in a temp dir, feeds it encoded
commands with :meth:`BrokerCore.receive` at times it chooses, runs the shell's round steps
(``flush``/``pump``) itself, and asserts on the decoded outbox.
"""
from __future__ import annotations

from typing import Dict, List

import pytest

from zeps.broker.core import BrokerCore, CoreConfig
from zeps.journal import DataDir, JournalConfig
from zeps.protocol import LATEST_LIVE, decode, deliver_cost, encode
from zeps.protocol import commands as c
from zeps.protocol.reasons import NOT_ATTACHED, PUBLISH_REJECTED


class Core:
    """A BrokerCore plus a mailbox per client and a clock the test moves."""

    def __init__(self, path, **config):
        jconf = {k: config.pop(k) for k in list(config) if k in ("segment_bytes", "retention_bytes")}
        self.datadir = DataDir(str(path), JournalConfig(fsync="never", **jconf))
        self.core = BrokerCore(self.datadir, CoreConfig(**config))
        self.now = 1000.0
        self.box: Dict[bytes, List[c.Command]] = {}

    def send(self, ident: bytes, *cmds: c.Command) -> None:
        for cmd in cmds:
            self.core.receive(ident, [encode(cmd)], self.now)
        self.collect()

    def send_frames(self, ident: bytes, frames: List[bytes]) -> None:
        self.core.receive(ident, frames, self.now)
        self.collect()

    def collect(self) -> None:
        for ident, frame in self.core.take_outbox():
            self.box.setdefault(ident, []).append(decode(frame))

    def round(self, n: int = 1) -> None:
        for _ in range(n):
            self.core.flush()
            self.collect()
            self.core.pump(self.now)
            self.collect()

    def drain(self) -> None:
        for _ in range(10_000):
            self.core.flush()
            self.collect()
            more = self.core.pump(self.now)
            self.collect()
            if not more:
                return
        raise AssertionError("replay never finished")

    def take(self, ident: bytes) -> List[c.Command]:
        got = self.box.pop(ident, [])
        return got

    def delivered(self, ident: bytes) -> List[tuple]:
        return [(m.sequence, m.key) for m in self.take(ident) if isinstance(m, c.Deliver)]

    def publish(self, *keys: str, body: bytes = b"x", ident: bytes = b"pub") -> None:
        if ident not in self.core.sessions:
            self.send(ident, c.Attach("s"))
            self.take(ident)
        for k in keys:
            self.send(ident, c.Publish(k, body))
        self.round()

    def close(self) -> None:
        self.datadir.close()


@pytest.fixture
def core(tmp_path):
    h = Core(tmp_path / "data")
    yield h
    h.close()


def cost(key: str, body: bytes = b"x") -> int:
    return deliver_cost(len(key.encode()), len(body))


# ---------------------------------------------------------------------------- DETACH


def test_detach_then_attach_keeps_no_subscription(core):
    """ATTACH s, CREDIT, SUBSCRIBE "a" live, DETACH, ATTACH s, CREDIT, SUBSCRIBE "b" live: a1 and
    b1 published by another client; only b1 may arrive."""
    sub = b"sub"
    core.send(sub, c.Attach("s"), c.Credit(1 << 20), c.Subscribe("a", LATEST_LIVE), c.Detach(),
              c.Attach("s"), c.Credit(1 << 20), c.Subscribe("b", LATEST_LIVE))
    assert [type(m) for m in core.take(sub)] == [c.AttachOk, c.SubscribeOk, c.DetachOk,
                                                  c.AttachOk, c.SubscribeOk]
    core.publish("a1", "b1")
    assert core.delivered(sub) == [(2, "b1")]
