"""CurveZMQ, the allow-list and per-stream rights, against a real broker process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import zmq

from zeps.broker.acl import AclError, parse_acl
from zeps.broker.security import load_public, load_secret
from zeps.clients.transport import send_within
from zeps.protocol import commands as c
from zeps.protocol import decode, encode
from zeps.protocol.reasons import NOT_ALLOWED, PUBLISH_REJECTED

from .conftest import REPO


def zeps(*args):
    return subprocess.run([sys.executable, "-m", "zeps", *args], capture_output=True, text=True,
                          cwd=str(REPO), timeout=60)


@pytest.fixture
def keys(tmp_path):
    d = tmp_path / "keys"
    for name in ("broker", "alice", "bob", "mallory"):
        r = zeps("keys", "new", name, "--dir", str(d))
        assert r.returncode == 0, r.stderr
    allow = tmp_path / "allow"
    allow.mkdir()
    (allow / "alice.key").write_bytes((d / "alice.key").read_bytes())
    return d, allow


ACL = """
[clients]
alice = "../keys/alice.key"
bob = "../keys/bob.key"

[[allow]]
clients = ["alice"]
publish = ["orders", "alice.*"]
subscribe = ["orders", "alice.*"]

[[allow]]
clients = ["bob"]
publish = ["orders"]
"""


class Peer:
    def __init__(self, endpoint, keydir=None, name=None):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if name is not None:
            server_public = load_public(str(keydir / "broker.key"))
            public, secret = load_secret(str(keydir / f"{name}.key_secret"))
            self.sock.curve_serverkey = server_public
            self.sock.curve_publickey = public
            self.sock.curve_secretkey = secret
        self.sock.connect(endpoint)

    def ask(self, *cmds, timeout=5.0):
        """The first answer to ``cmds``, or None within ``timeout`` seconds. A connection whose
        handshake failed for good has no pipe: the socket takes nothing (a plain send would
        block for ever), which is no answer too."""
        for cmd in cmds:
            if not send_within(self.sock, encode(cmd), timeout):
                return None
        if not self.sock.poll(int(timeout * 1000)):
            return None
        return decode(self.sock.recv())

    def close(self):
        self.sock.close(0)


@pytest.fixture
def secure_broker(start_broker, keys, tmp_path):
    keydir, allow = keys
    acl = tmp_path / "acl" / "acl.toml"
    acl.parent.mkdir()
    acl.write_text(ACL)
    b = start_broker(None, "--curve-secret", str(keydir / "broker.key_secret"),
                     "--allow", str(allow), "--acl", str(acl))
    b.keydir, b.acl_path = keydir, acl
    peers = []

    def peer(name=None):
        p = Peer(b.endpoint, keydir, name)
        peers.append(p)
        return p
    b.peer = peer
    yield b
    for p in peers:
        p.close()


def test_known_key_works_unknown_key_and_plaintext_get_nothing(secure_broker):
    alice = secure_broker.peer("alice")
    assert isinstance(alice.ask(c.Ping()), c.PingOk)
    # mallory has a valid key pair that no allow-list or ACL names: the handshake fails
    assert secure_broker.peer("mallory").ask(c.Ping(), timeout=1.5) is None
    # a plaintext client cannot talk to a CURVE broker at all
    assert secure_broker.peer(None).ask(c.Ping(), timeout=1.5) is None
    assert isinstance(alice.ask(c.Ping()), c.PingOk)     # and the broker still serves alice


def test_rights_are_enforced_at_attach_publish_subscribe_and_list(secure_broker):
    alice, bob = secure_broker.peer("alice"), secure_broker.peer("bob")
    assert isinstance(alice.ask(c.Attach("orders")), c.AttachOk)
    assert isinstance(alice.ask(c.Publish("k", b"1"), c.StreamInfo()), c.StreamInfoOk)
    assert isinstance(alice.ask(c.Subscribe("", 0)), c.SubscribeOk)
    # a stream nobody gave alice: refused, and not listed (existence is not revealed either)
    other = secure_broker.peer("alice")
    r = other.ask(c.Attach("secret"))
    assert isinstance(r, c.Invalid) and r.reason.startswith(NOT_ALLOWED), r
    # bob may publish to orders, not read it
    assert isinstance(bob.ask(c.Attach("orders")), c.AttachOk)
    r = bob.ask(c.Subscribe("", 0))
    assert isinstance(r, c.Invalid) and r.reason.startswith(NOT_ALLOWED), r
    assert isinstance(bob.ask(c.Publish("k", b"2"), c.StreamInfo()), c.StreamInfoOk)
    lister = secure_broker.peer("bob")
    assert lister.ask(c.ListStreams()).streams == ()
    assert "orders" in secure_broker.peer("alice").ask(c.ListStreams()).streams
    # bob publishing where he may not: the PUBLISH is rejected, counted as rejected
    b2 = secure_broker.peer("bob")
    r = b2.ask(c.Attach("alice.x"))
    assert isinstance(r, c.Invalid) and r.reason.startswith(NOT_ALLOWED)
    # alice reads both messages
    got = alice.ask(c.Credit(1 << 20))
    assert isinstance(got, c.Deliver) and got.body == b"1"


def test_publish_without_the_right_is_rejected_one_invalid_each(secure_broker, tmp_path):
    acl = secure_broker.acl_path
    acl.write_text(ACL + '\n[[allow]]\nclients = ["bob"]\nsubscribe = ["alice.*"]\n')
    # alice makes the stream: bob, who may only read it, could not (issue 17 #2)
    assert isinstance(secure_broker.peer("alice").ask(c.Attach("alice.feed")), c.AttachOk)
    secure_broker.proc.send_signal(signal.SIGHUP)
    bob = secure_broker.peer("bob")
    deadline = time.monotonic() + 10
    while not isinstance(bob.ask(c.Attach("alice.feed")), c.AttachOk):
        assert time.monotonic() < deadline, "the reload never took effect"
    replies = [bob.ask(c.Publish("k", b"x")) for _ in range(3)]
    assert all(isinstance(r, c.Invalid) and r.reason.startswith(PUBLISH_REJECTED + NOT_ALLOWED)
               for r in replies), replies


def test_sighup_reload_changes_rights_without_dropping_clients(secure_broker):
    bob = secure_broker.peer("bob")
    assert isinstance(bob.ask(c.Attach("orders")), c.AttachOk)
    assert isinstance(bob.ask(c.Subscribe("", 0)), c.Invalid)
    secure_broker.acl_path.write_text(ACL.replace('publish = ["orders"]\n',
                                                  'publish = ["orders"]\nsubscribe = ["orders"]\n'))
    secure_broker.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:                                   # same connection, same peering: not dropped
        r = bob.ask(c.Subscribe("", 0))
        if isinstance(r, c.SubscribeOk):
            break
        assert time.monotonic() < deadline, f"still refused after reload: {r}"
    # a broken ACL file keeps the old rules and the broker keeps serving
    secure_broker.acl_path.write_text("[[allow]\nthis is not toml")
    secure_broker.proc.send_signal(signal.SIGHUP)
    assert isinstance(bob.ask(c.StreamInfo()), c.StreamInfoOk)
    assert secure_broker.running


def test_acl_file_errors_are_one_line(tmp_path):
    with pytest.raises(AclError, match="unknown client 'carol'"):
        parse_acl('[[allow]]\nclients = ["carol"]\npublish = ["x"]\n', str(tmp_path), "acl.toml")
    with pytest.raises(AclError, match="not valid TOML"):
        parse_acl("[[allow]", str(tmp_path), "acl.toml")
    acl = parse_acl('[[allow]]\nclients = ["*"]\nsubscribe = ["pub.*", "news"]\n')
    assert acl.may_subscribe(None, "pub.x") and acl.may_subscribe("k", "news")
    assert not acl.may_subscribe("k", "newsx") and not acl.may_publish("k", "news")


def test_broker_refuses_acl_without_curve_and_warns_when_open(tmp_path, start_broker):
    acl = tmp_path / "acl.toml"
    acl.write_text('[[allow]]\nclients = ["*"]\nsubscribe = ["*"]\n')
    r = subprocess.run([sys.executable, "-m", "zeps.broker", "--endpoint", "tcp://127.0.0.1:*",
                        "--data-dir", str(tmp_path / "d"), "--acl", str(acl)],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO),
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 2 and "need --curve-secret" in r.stderr
    b = start_broker(None)
    deadline = time.monotonic() + 10
    while "broker_open" not in b.log():
        assert time.monotonic() < deadline, b.log()
        time.sleep(0.05)


def test_sdk_cli_and_admin_talk_curve(secure_broker):
    import asyncio

    from zeps.clients import AsyncClient, Client, CurveKeys, admin
    keydir, ep = secure_broker.keydir, secure_broker.endpoint
    alice = CurveKeys.from_files(str(keydir / "broker.key"), str(keydir / "alice.key_secret"))
    with Client(ep, "orders", confirms=True, curve=alice, timeout=5) as c:
        c.publish("k", b"from the SDK")
        assert c.wait_for_confirms() == 1
    assert admin.describe_stream(ep, "orders", curve=alice).last == 1

    async def read():
        async with AsyncClient(ep, "orders", curve=alice, timeout=5) as c:
            sub = await c.subscribe("", from_seq=1)
            return (await sub.next(timeout=5)).body
    assert asyncio.run(read()) == b"from the SDK"
    keys = ["--server-key", keydir / "broker.key", "--client-key", keydir / "alice.key_secret"]
    r = zeps("publish", "orders", "k", "from the CLI", "--endpoint", ep, *map(str, keys))
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, ZEPS_SERVER_KEY=str(keydir / "broker.key"),
               ZEPS_CLIENT_KEY=str(keydir / "alice.key_secret"), PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "zeps", "subscribe", "orders", "--all", "--count",
                        "2", "--endpoint", ep], capture_output=True, text=True, env=env,
                       cwd=str(REPO), timeout=60)
    assert r.stdout.splitlines() == ["1 k from the SDK", "2 k from the CLI"], r.stderr
    r = zeps("publish", "orders", "k", "v", "--endpoint", ep, "--server-key",
             str(keydir / "broker.key"))
    assert r.returncode == 2 and "needs both" in r.stderr
    with pytest.raises(ValueError, match="holds no secret key"):
        CurveKeys.from_files(str(keydir / "broker.key"), str(keydir / "alice.key"))


def test_the_sdk_lists_past_a_page_of_streams_the_acl_hides(start_broker, keys, tmp_path):
    """1,100 streams alice may not read sort before hers: the listing's first page names none
    and ends with a token, not the last hidden name. The SDK asks each page on a connection of
    its own: the token holds for any connection of alice's key (a per-connection one refused
    the second page), and the listing reaches her stream."""
    from zeps.clients import CurveKeys, list_streams
    from zeps.journal import DataDir, JournalConfig
    keydir, allow = keys
    d = tmp_path / "data"
    dd = DataDir(str(d), JournalConfig(fsync="never"))
    for i in range(1100):
        dd.journal(f"a-secret-{i:04d}")
    dd.journal("alice.z")
    dd.close()
    acl = tmp_path / "acl" / "acl.toml"
    acl.parent.mkdir()
    acl.write_text('[clients]\nalice = "../keys/alice.key"\n[[allow]]\nclients = ["alice"]\n'
                   'subscribe = ["alice.*"]\n')
    b = start_broker(d, "--curve-secret", str(keydir / "broker.key_secret"),
                     "--allow", str(allow), "--acl", str(acl))
    curve = CurveKeys.from_files(str(keydir / "broker.key"), str(keydir / "alice.key_secret"))
    assert list_streams(b.endpoint, curve=curve, timeout=10) == ("alice.z",)


def test_a_new_secret_key_is_private_from_its_creation(tmp_path, monkeypatch):
    """The secret key file was written readable by all (umask 022) and made private by a chmod
    after it; and a dangling symbolic link at its name was written through (found by review).
    Here no chmod runs: the file must have been created private; the public key is readable."""
    from zeps.broker import security
    old = os.umask(0o022)
    try:
        monkeypatch.setattr(security.os, "chmod", lambda path, mode: None)
        public, secret = security.new_keys(str(tmp_path / "k"), "alice")
    finally:
        os.umask(old)
    assert os.stat(secret).st_mode & 0o777 == 0o600
    assert load_public(public) == load_secret(secret)[0]
    (tmp_path / "k" / "bob.key_secret").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(security.SecurityError, match="exists"):
        security.new_keys(str(tmp_path / "k"), "bob")
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "k" / "bob.key").exists()
