"""CurveZMQ mistakes against a real broker process: the client names the mistake at once (not a
timeout that looks like a dead broker), and the broker logs the refused handshake with the reason.

The three mistakes of a new user: a plaintext client, a wrong ``--server-key`` (another broker's
public key), and a key that is not allowed. Each CLI run is given a 60 s ``--connect-timeout``
and waited on for 20 s: it must fail with the specific message and exit status 1 long before it
would have timed out.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import zmq

from zeps.broker.security import load_public, new_keys
from zeps.clients import Client, CurveKeys, HandshakeFailed, list_streams
from zeps.clients.transport import OneRequest, asend_within, send_within
from zeps.protocol import commands as c
from zeps.protocol import decode, encode

from .conftest import REPO
from .measure import wait_for

DEADLINE = 20.0        # seconds to wait on a CLI run whose --connect-timeout is 60


@pytest.fixture
def curve_broker(start_broker, tmp_path):
    keys = tmp_path / "keys"
    for name in ("broker", "other-broker", "alice", "mallory"):
        new_keys(str(keys), name)
    allow = tmp_path / "allow"
    allow.mkdir()
    (allow / "alice.key").write_bytes((keys / "alice.key").read_bytes())
    b = start_broker(None, "--curve-secret", str(keys / "broker.key_secret"), "--allow", str(allow))
    b.keys = keys
    return b


def cli(*args, env=None):
    """Run ``zeps ARGS``; (exit status, stderr). Fails the test if it runs past DEADLINE."""
    proc = subprocess.Popen([sys.executable, "-m", "zeps", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                            env=dict(os.environ, **(env or {})))
    try:
        _out, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"zeps {' '.join(args)} still waiting after {DEADLINE}s: a handshake failure "
                    f"looked like a dead broker")
    return proc.returncode, err


def refusals(b, *whys):
    """The broker's handshake_refused lines with one of ``whys``, waited for (the log is written
    by another process)."""
    def lines():
        return [ln for ln in b.log_path.read_text(errors="replace").splitlines()
                if "handshake_refused" in ln and any(f"why={why}" in ln for why in whys)]
    return wait_for(lines, bool, timeout=10.0)


def keyargs(b, server, client):
    return ["--server-key", str(b.keys / f"{server}.key"),
            "--client-key", str(b.keys / f"{client}.key_secret")]


COMMANDS = [("stream", "list"), ("publish", "orders", "k", "hello")]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda cmd: cmd[0])
def test_plaintext_client_hears_the_broker_requires_curve(curve_broker, command):
    b = curve_broker
    rc, err = cli(*command, "--endpoint", b.endpoint, "--connect-timeout", "60",
                  env={"ZEPS_SERVER_KEY": "", "ZEPS_CLIENT_KEY": ""})
    assert rc == 1, err
    assert err.count("\n") == 1 and err.startswith("zeps: error: "), err
    assert f"the broker at {b.endpoint} answered" in err and "requires CurveZMQ" in err, err
    assert "--server-key" in err and "no answer" not in err, err
    # Either side may see the mismatch first: the broker (not-curve) or the client, which then
    # closes the connection (no-detail, from the broker's side). Both lines say what it means.
    (line,) = refusals(b, "not-curve", "no-detail")[:1]
    assert "plaintext" in line and "--server-key" in line and "peer=unknown" in line, line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda cmd: cmd[0])
def test_wrong_server_key_is_named_with_the_allow_list(curve_broker, command):
    b = curve_broker
    rc, err = cli(*command, "--endpoint", b.endpoint, "--connect-timeout", "60",
                  *keyargs(b, "other-broker", "alice"))
    assert rc == 1, err
    assert err.count("\n") == 1, err
    assert f"the broker at {b.endpoint} answered but the CurveZMQ handshake failed" in err, err
    assert "--server-key" in err and "allow-list" in err, err
    (line,) = refusals(b, "server-key")[:1]
    assert "--server-key" in line, line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda cmd: cmd[0])
def test_key_not_allowed_is_named_and_logged_with_address_and_key(curve_broker, command):
    b = curve_broker
    mallory = load_public(str(b.keys / "mallory.key")).decode()
    rc, err = cli(*command, "--endpoint", b.endpoint, "--connect-timeout", "60",
                  *keyargs(b, "broker", "mallory"))
    assert rc == 1, err
    assert err.count("\n") == 1, err
    assert f"the broker at {b.endpoint} answered but refused this client's CurveZMQ key" in err
    assert mallory in err and "allow-list" in err and "ZAP status 400" in err, err
    (line,) = refusals(b, "not-allowed")[:1]
    assert "peer=127.0.0.1" in line and mallory in line and "ZAP 400 Unknown key" in line, line


def test_sdk_raises_handshake_failed_and_the_right_keys_still_work(curve_broker):
    b = curve_broker
    wrong = CurveKeys.from_files(str(b.keys / "other-broker.key"), str(b.keys / "alice.key_secret"))
    good = CurveKeys.from_files(str(b.keys / "broker.key"), str(b.keys / "alice.key_secret"))
    for curve in (None, wrong):
        with pytest.raises(HandshakeFailed) as exc:
            Client(b.endpoint, "orders", timeout=60, curve=curve)
        assert exc.value.endpoint == b.endpoint
        with pytest.raises(HandshakeFailed):
            list_streams(b.endpoint, timeout=60, curve=curve)
    with Client(b.endpoint, "orders", timeout=10, curve=good) as ok:   # the broker serves on
        assert ok.publish("k", b"v") is not None
    assert "orders" in list_streams(b.endpoint, timeout=10, curve=good)


@pytest.mark.timeout(120)
def test_a_request_whose_connection_was_dropped_for_a_failed_handshake_does_not_block(
        curve_broker):
    """A plaintext client at a CurveZMQ broker: after the handshake fails, ZeroMQ may drop the
    connection's pipe, and a DEALER without a pipe blocks a plain send for ever. A request that
    sends only then (its thread was slow to get there: this hung `make test` in CI) is told the
    mistake, as one that sent first is. ZeroMQ drops the pipe after some failed handshakes and
    reconnects after others: waiting for the drop took from 1 s to over 60 s (a CI run). With
    ZMQ_IMMEDIATE, set on the context for the request's socket, the socket has no pipe until a
    handshake succeeds: the state of a dropped pipe, from the start."""
    b = curve_broker
    ctx = zmq.Context()
    ctx.setsockopt(zmq.IMMEDIATE, 1)
    try:
        with OneRequest(b.endpoint, context=ctx) as r:
            assert not r.sock.getsockopt(zmq.EVENTS) & zmq.POLLOUT    # takes nothing
            with pytest.raises(HandshakeFailed, match="requires CurveZMQ"):
                r.ask(c.ListStreamsPage(""), c.ListStreamsPageOk, timeout=60)
    finally:
        ctx.term()


def test_a_send_waits_no_longer_than_its_timeout_on_a_socket_that_takes_nothing():
    ctx = zmq.Context.instance()
    nowhere = ctx.socket(zmq.DEALER)         # never connected: no pipe, as after the drop
    peer, server = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
    for s in (nowhere, peer, server):
        s.linger = 0
    try:
        assert not send_within(nowhere, b"x", 0.05)
        port = server.bind_to_random_port("tcp://127.0.0.1")
        peer.connect(f"tcp://127.0.0.1:{port}")
        assert send_within(peer, b"y", 10.0)
        assert server.poll(10_000) and server.recv_multipart()[1:] == [b"y"]
    finally:
        for s in (nowhere, peer, server):
            s.close()


def test_an_asyncio_send_waits_no_longer_than_its_timeout_and_leaves_nothing_queued():
    import asyncio

    import zmq.asyncio

    async def run():
        ctx = zmq.asyncio.Context()
        s, server = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
        for sock in (s, server):
            sock.linger = 0
        try:
            assert not await asend_within(s, b"x", 0.05)       # no pipe yet: cancelled
            port = server.bind_to_random_port("tcp://127.0.0.1")
            s.connect(f"tcp://127.0.0.1:{port}")
            assert await asend_within(s, b"y", 10.0)
            first = await asyncio.wait_for(server.recv_multipart(), 10)
            assert first[1:] == [b"y"]                          # not the cancelled x
        finally:
            s.close()
            server.close()
            ctx.term()
    asyncio.run(run())


def test_curve_client_at_a_plaintext_broker_is_told_so(broker, tmp_path):
    keys = tmp_path / "keys"
    new_keys(str(keys), "broker")
    new_keys(str(keys), "alice")
    rc, err = cli("stream", "list", "--endpoint", broker.endpoint, "--connect-timeout", "60",
                  "--server-key", str(keys / "broker.key"),
                  "--client-key", str(keys / "alice.key_secret"))
    assert rc == 1, err
    assert "does not use CurveZMQ" in err, err
    (line,) = refusals(broker, "curve-client", "no-detail")[:1]
    assert "--curve-secret" in line, line


def test_refusals_are_rate_limited_per_peer(curve_broker):
    """A client retrying a refused key many times gets one line per interval, not one each."""
    b = curve_broker
    server = load_public(str(b.keys / "broker.key"))
    ctx = zmq.Context.instance()
    socks = []
    try:
        for _ in range(20):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            CurveKeys.from_files(str(b.keys / "broker.key"),
                                 str(b.keys / "mallory.key_secret")).apply(s)
            mon = s.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
            s.connect(b.endpoint)
            assert mon.poll(10000), "no refusal within 10 s"
            s.disable_monitor()
            mon.close(0)
            socks.append(s)
        alice = ctx.socket(zmq.DEALER)                 # a well-behaved client beside it
        alice.setsockopt(zmq.LINGER, 0)
        CurveKeys(server, *_pair(b, "alice")).apply(alice)
        alice.connect(b.endpoint)
        alice.send(encode(c.Ping()))
        assert alice.poll(10000) and isinstance(decode(alice.recv()), c.PingOk)
        alice.close(0)
    finally:
        for s in socks:
            s.close(0)
    assert len(refusals(b, "not-allowed")) == 1, b.log()


def _pair(b, name):
    from zeps.broker.security import load_secret
    return load_secret(str(b.keys / f"{name}.key_secret"))
