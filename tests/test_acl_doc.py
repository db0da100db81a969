"""The ACL example of docs/operations.md, read from the document itself: every client it lists
may connect, and has exactly the rights the example gives it (issue 17, item 3: ``dashboard``,
named in ``[clients]`` and covered only by ``clients = ["*"]``, could not connect)."""
from __future__ import annotations

import re

import pytest

from zeps.broker.acl import parse_acl
from zeps.broker.security import load_public, new_keys
from zeps.cli.broker import acl_keys
from zeps.journal import DataDir, StreamSettings
from zeps.protocol import commands as c
from zeps.protocol.reasons import NOT_ALLOWED

from .conftest import REPO
from .test_security import Peer

#: What the example grants, per client it lists: (stream, publish, subscribe, admin).
RIGHTS = {
    "orders-service": [("orders", True, True, False), ("audit.2026", True, False, False),
                       ("public.news", False, True, False), ("secret", False, False, False)],
    "dashboard": [("public.news", False, True, False), ("orders", False, False, False),
                  ("audit.2026", False, False, False), ("secret", False, False, False)],
}


def documented_acl() -> str:
    """The TOML block under '### The ACL file' in docs/operations.md."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("### The ACL file", 1)[1]
    m = re.search(r"```toml\n(.*?)```", section, re.S)
    assert m, "no ```toml block in the ACL section of docs/operations.md"
    return m.group(1)


@pytest.fixture
def example(tmp_path):
    """The documented ACL in a directory with the key files it names (keys/NAME.key)."""
    text = documented_acl()
    acl_dir = tmp_path / "etc"
    files = re.findall(r'^\S+\s*=\s*"keys/(\S+)\.key"', text, re.M)
    assert files, "the example names no key files"
    for file in files:
        new_keys(str(acl_dir / "keys"), file)
    (acl_dir / "acl.toml").write_text(text)
    new_keys(str(tmp_path / "broker-keys"), "broker")
    return acl_dir, text


def test_every_client_the_example_lists_may_connect_with_the_rights_it_gives(example):
    acl_dir, text = example
    acl = parse_acl(text, str(acl_dir), "docs/operations.md")
    listed = {name: load_public(str(acl_dir / "keys" / f"{name}.key")).decode() for name in
              re.findall(r'^(\S+)\s*=\s*"keys/', text, re.M)}
    assert set(listed) == set(RIGHTS), "a client of the example is not checked here"
    allowed = set(acl_keys(acl))
    for name, key in listed.items():
        assert key in allowed, f"{name} is listed in [clients] but may not connect"
        for stream, pub, sub, admin in RIGHTS[name]:
            assert (acl.may_publish(key, stream), acl.may_subscribe(key, stream),
                    acl.may_admin(key, stream)) == (pub, sub, admin), (name, stream)


def test_the_documented_acl_on_a_real_broker(example, start_broker, tmp_path):
    acl_dir, _text = example
    data = tmp_path / "data"
    with DataDir(str(data)) as d:                  # what a publisher made earlier
        d.create("public.news", StreamSettings())
    b = start_broker(data, "--curve-secret", str(tmp_path / "broker-keys" / "broker.key_secret"),
                     "--acl", str(acl_dir / "acl.toml"))
    keydir = acl_dir / "keys"
    (keydir / "broker.key").write_bytes((tmp_path / "broker-keys" / "broker.key").read_bytes())
    peers = []

    def peer(name):
        p = Peer(b.endpoint, keydir, name)
        peers.append(p)
        return p
    try:
        for name in RIGHTS:            # named in [clients]: the handshake completes
            assert isinstance(peer(name).ask(c.Ping(), timeout=10), c.PingOk), \
                f"{name} cannot connect\n{b.log()}"
        dash = peer("dashboard")
        assert isinstance(dash.ask(c.Attach("public.news")), c.AttachOk)
        assert isinstance(dash.ask(c.Subscribe("", 0)), c.SubscribeOk)
        r = peer("dashboard").ask(c.Attach("orders"))
        assert isinstance(r, c.Invalid) and r.reason.startswith(NOT_ALLOWED), r
        svc = peer("orders-service")
        assert isinstance(svc.ask(c.Attach("orders")), c.AttachOk)
        assert isinstance(svc.ask(c.Publish("k", b"v"), c.StreamInfo()), c.StreamInfoOk)
    finally:
        for p in peers:
            p.close()
