"""A key removed from the CURVE allow-list (``--allow``) on SIGHUP loses its rights at once, on the
connection it already has (issue 15, finding 8), as NATS closes the connections of a revoked
user: its session is detached, its subscriptions are gone, it is told why with one INVALID, and
every later command of that connection is refused. The clients whose keys stay allowed do not
notice. Against a real broker process, over CURVE."""
from __future__ import annotations

import shutil
import signal
import time

import pytest

from zeps.protocol import commands as c
from zeps.protocol import decode, encode
from zeps.protocol.reasons import NOT_ALLOWED

from .core_harness import core_fixture  # noqa: F401  (the pure core's fixture)
from .test_security import Peer, keys  # noqa: F401  (the key-pair fixture)

REVOKED = "no longer allowed"


@pytest.fixture
def allow_broker(start_broker, keys):  # noqa: F811
    """A CURVE broker whose allow-list directory names alice and bob (no ACL)."""
    keydir, allow = keys
    shutil.copy(keydir / "bob.key", allow / "bob.key")
    b = start_broker(None, "--curve-secret", str(keydir / "broker.key_secret"),
                     "--allow", str(allow))
    b.keydir, b.allow = keydir, allow
    peers = []

    def peer(name):
        p = Peer(b.endpoint, keydir, name)
        peers.append(p)
        return p
    b.peer = peer
    yield b
    for p in peers:
        p.close()


def frames_until(peer: Peer, done, timeout: float = 10.0) -> list:
    """Every command ``peer`` receives up to and including the first for which ``done`` holds."""
    got = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"not there within {timeout}s; received {got}"
        if peer.sock.poll(int(left * 1000)):
            cmd = decode(peer.sock.recv())
            got.append(cmd)
            if done(cmd):
                return got


def revoked(cmd) -> bool:
    return isinstance(cmd, c.Invalid) and cmd.reason.startswith(NOT_ALLOWED) \
        and REVOKED in cmd.reason


def subscriber(b, name: str):
    p = b.peer(name)
    assert isinstance(p.ask(c.Attach("feed")), c.AttachOk)
    assert isinstance(p.ask(c.Subscribe("", 0), c.Credit(1 << 20)), c.SubscribeOk)
    return p


def test_a_revoked_key_loses_its_session_and_every_later_command(allow_broker):
    b = allow_broker
    alice, bob = subscriber(b, "alice"), subscriber(b, "bob")
    pub = b.peer("alice")
    assert isinstance(pub.ask(c.Attach("feed")), c.AttachOk)
    pub.sock.send(encode(c.Publish("k", b"before")))
    for p in (alice, bob):                       # both read while both are allowed
        d = frames_until(p, lambda cmd: isinstance(cmd, c.Deliver))[-1]
        assert d.body == b"before"

    (b.allow / "bob.key").unlink()               # the operator revokes bob
    b.proc.send_signal(signal.SIGHUP)
    told = frames_until(bob, revoked)            # bob is told, once, without asking
    assert not any(isinstance(x, c.Deliver) for x in told), told

    # New messages reach alice, not bob: bob's PING is answered (refused) after anything the
    # broker had for him, and nothing was.
    pub.sock.send(encode(c.Publish("k", b"after")))
    assert frames_until(alice, lambda cmd: isinstance(cmd, c.Deliver))[-1].body == b"after"
    bob.sock.send(encode(c.Ping()))
    after = frames_until(bob, lambda cmd: isinstance(cmd, c.Invalid))
    assert after == [after[-1]] and revoked(after[-1]), after

    # Every command of the revoked connection is refused, ATTACH (a new session) included.
    for cmd in (c.Attach("feed"), c.Subscribe("", 0), c.Publish("k", b"from bob"),
                c.StreamInfo(), c.ListStreams(), c.Attach("other")):
        r = bob.ask(cmd)
        assert revoked(r), (cmd, r)
    # ... and changes nothing: bob's PUBLISH was not stored, "other" was not created
    info = pub.ask(c.StreamInfo())
    assert isinstance(info, c.StreamInfoOk) and info.last == 2, info
    assert pub.ask(c.ListStreams()).streams == ("feed",)

    # alice never noticed: she still publishes and reads; a new bob connection cannot even
    # complete the handshake
    pub.sock.send(encode(c.Publish("k", b"still")))
    assert frames_until(alice, lambda cmd: isinstance(cmd, c.Deliver))[-1].body == b"still"
    assert b.peer("bob").ask(c.Ping(), timeout=1.0) is None
    assert "key_revoked" in b.log()


def test_a_key_allowed_again_may_work_again_on_its_connection(allow_broker):
    """Revocation follows the allow-list: put back, the key's connection is served again
    (it must ATTACH again: its peering ended when it was revoked)."""
    b = allow_broker
    bob = subscriber(b, "bob")
    (b.allow / "bob.key").unlink()
    b.proc.send_signal(signal.SIGHUP)
    frames_until(bob, revoked)
    shutil.copy(b.keydir / "bob.key", b.allow / "bob.key")
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:
        r = bob.ask(c.Ping())
        if isinstance(r, c.PingOk):
            break
        assert revoked(r) and time.monotonic() < deadline, r
    assert isinstance(bob.ask(c.StreamInfo()), c.Invalid)          # not attached any more
    assert isinstance(bob.ask(c.Attach("feed")), c.AttachOk)




def test_sdk_clients_of_a_revoked_key_fail_clearly_the_others_go_on(allow_broker):
    """The SDK asks for ERROR (REASONS-SELECT): the revocation's code and fields end its peering
    with ConnectionLost at once, instead of a reconnect that can never complete."""
    from zeps.clients import Client, ConnectionLost, CurveKeys
    b = allow_broker

    def curve_of(name):
        return CurveKeys.from_files(str(b.keydir / "broker.key"),
                                    str(b.keydir / f"{name}.key_secret"))
    with Client(b.endpoint, "feed", curve=curve_of("alice"), confirms=True, timeout=5) as pub, \
            Client(b.endpoint, "feed", curve=curve_of("alice"), timeout=5) as calm, \
            Client(b.endpoint, "feed", curve=curve_of("bob"), timeout=5) as revoked_sub:
        pub.publish("k", b"1")
        pub.wait_for_confirms()
        calm_sub, bob_sub = calm.subscribe("", from_seq=1), revoked_sub.subscribe("", from_seq=1)
        assert calm_sub.next(timeout=10).body == bob_sub.next(timeout=10).body == b"1"
        (b.allow / "bob.key").unlink()
        b.proc.send_signal(signal.SIGHUP)
        with pytest.raises(ConnectionLost, match="no longer accepts this client's key"):
            bob_sub.next(timeout=20)
        pub.publish("k", b"2")
        assert pub.wait_for_confirms() == 2
        assert calm_sub.next(timeout=10).body == b"2"

# ---------------------------------------------------------------- the core alone (no sockets)

def test_core_revokes_held_sessions_and_connections_revoked_before_they_spoke(core):
    """Pure core: a revoked connection leaves nothing in the core (not even a congested
    session's held replies) and is refused before any session is made for it, also when its
    key was removed between its handshake and its first command; a gone connection's
    revocation is forgotten with it."""
    k = core.core
    k.identify(b"alice", "A" * 40)
    k.identify(b"bob", "B" * 40)
    k.set_allowed_keys({"A" * 40, "B" * 40})
    core.subscriber(b"alice")
    core.subscriber(b"bob")
    core.pipe[b"bob"] = 0                       # bob's pipe is full: his replies are held
    core.publish("k")
    assert core.delivered(b"alice") == [(1, "k")]
    core.send(b"bob", c.StreamInfo())
    assert k.sessions[b"bob"].held
    k.set_allowed_keys({"A" * 40})
    core.pipe.pop(b"bob")
    core.collect()
    assert core.traces(b"bob") == []
    assert [type(m) for m in core.take(b"bob")] == [c.Invalid]
    assert core.take(b"alice") == [] and k.sessions[b"alice"].subscriptions
    core.publish("k2")
    assert core.delivered(b"alice") == [(2, "k2")] and core.take(b"bob") == []
    for cmd in (c.Attach("s"), c.Ping(), c.LimitsOk(1, 1)):
        core.send(b"bob", cmd)
        [r] = core.take(b"bob")
        assert isinstance(r, c.Invalid) and REVOKED in r.reason, r
    assert b"bob" not in k.sessions
    # carol's key goes between her handshake and her first command
    k.identify(b"carol", "C" * 40)
    core.send(b"carol", c.Attach("s"))
    [r] = core.take(b"carol")
    assert isinstance(r, c.Invalid) and REVOKED in r.reason and b"carol" not in k.sessions
    k.gone(b"bob")
    assert b"bob" not in k.revoked
    assert [e["client"] for e in core.logged("key_revoked")] == [b"bob".hex()]
