"""Readers never create streams (issue 17, item 2); the SDK's and the CLI's start points (item 11).

``Client(ep, "typo2").subscribe("", from_seq=1).next(timeout=2)`` used to wait, then raise
ZepsTimeout, and leave an empty stream ``typo2`` behind: the SDK's constructor ATTACHed, and a
plain ATTACH creates the stream. A publish the ACL refused left an empty stream behind the same
way. Now:

* ``STREAM-EXPECT 0`` before ATTACH joins the stream only if it exists (whatever its
  incarnation) and never creates it; the SDK's first ATTACH says it, so a client attaches
  without creating. Its first *publish* attaches again, creating the stream; ``subscribe``,
  ``info`` and ``seq_at`` look again and raise :class:`NoStream` when it is still missing.
  ``Client(..., create=True)`` is the old behaviour (a subscriber that waits for its stream).
* Under an ACL, an ATTACH creates a stream only for a client that may publish to it (or
  administer it): a reader could otherwise fill the broker's ``max_total_streams`` with empty
  streams and lock every publisher out of creating one.

The pure core first (tests/core_harness.py), then the SDK's peering, then the real broker process
with both SDK clients.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from zeps.broker.acl import parse_acl
from zeps.clients import AsyncClient, Client, InvalidError, NoStream, list_streams
from zeps.clients.peering import ABSENT, ATTACHED, Peering
from zeps.journal.names import list_streams as stored_streams
from zeps.protocol import commands as c
from zeps.protocol.reasons import NO_STREAM, NOT_ALLOWED, Code

from .conftest import REPO
from .core_harness import core_fixture, make_fixture  # noqa: F401  (the pure core's fixtures)
from .test_client_peering import feed, peering, sent


def _ask(core, ident, *cmds):
    core.send(ident, *cmds)
    return core.take(ident)


# ---------------------------------------------------------------- the core: STREAM-EXPECT 0

def test_expect_0_joins_whatever_exists_and_never_creates(core):
    [ok, r] = _ask(core, b"reader", c.StreamExpect(0), c.Attach("typo2"))
    assert isinstance(ok, c.StreamExpectOk)
    assert isinstance(r, c.Invalid) and r.reason.startswith(NO_STREAM), r
    assert "typo2" not in core.core.catalogue and not core.datadir.has_stream("typo2")
    assert core.core.sessions[b"reader"].stream is None                # not attached
    # the expectation held for that ATTACH only: a plain ATTACH still creates (ZEPS/1)
    assert [type(m) for m in _ask(core, b"writer", c.Attach("orders"), c.StreamId())] == \
        [c.AttachOk, c.StreamIdOk]
    # an existing stream, whatever its incarnation, is joined
    assert [type(m) for m in _ask(core, b"reader", c.StreamExpect(0), c.Attach("orders"),
                                  c.StreamInfo())] == \
        [c.StreamExpectOk, c.AttachOk, c.StreamInfoOk]


def test_expect_0_refusal_is_no_stream_as_error_too(core):
    [_sel, _ok, r] = _ask(core, b"reader", c.ReasonsSelect(), c.StreamExpect(0),
                          c.Attach("typo2"))
    assert isinstance(r, c.Error) and r.code == Code.NO_STREAM and r.fields == ("typo2",), r


# ---------------------------------------------------------------- the core: rights to create

KEYS = {"reader": "R" * 40, "writer": "W" * 40, "keeper": "K" * 40}
ACL = f"""
[clients]
reader = "{KEYS['reader']}"
writer = "{KEYS['writer']}"
keeper = "{KEYS['keeper']}"

[[allow]]
clients = ["*"]
subscribe = ["public.*"]

[[allow]]
clients = ["writer"]
publish = ["public.*"]

[[allow]]
clients = ["keeper"]
admin = ["public.kept"]
"""


def _secured(h):
    h.core.set_acl(parse_acl(ACL))
    for name, key in KEYS.items():
        h.core.identify(name.encode(), key)


def test_under_an_acl_a_reader_cannot_fill_the_broker_with_empty_streams(make):
    """The hostile reader may subscribe to ``public.*``: it ATTACHes 20 names that do not exist
    (before: each ATTACH created an empty stream, and with ``max_total_streams`` = 8 the
    writer beside it was refused its own stream). Each is refused ``not allowed: ... may not
    create``, nothing is created, and the writer creates its stream and publishes."""
    h = make(max_total_streams=8)
    _secured(h)
    for i in range(20):
        [r] = _ask(h, b"reader", c.Attach(f"public.s{i}"))
        assert isinstance(r, c.Invalid) and r.reason.startswith(NOT_ALLOWED), r
        assert "may not create" in r.reason and f"public.s{i}" in r.reason
    assert len(h.core.catalogue) == 0 and h.datadir.streams() == []
    assert [type(m) for m in _ask(h, b"writer", c.Attach("public.news"), c.Publish("k", b"x"),
                                  c.StreamInfo())] == [c.AttachOk, c.StreamInfoOk]
    # the reader reads what exists; one allowed to administer a stream may create it by ATTACH
    assert [type(m) for m in _ask(h, b"reader", c.Attach("public.news"),
                                  c.Subscribe("", 0))][:2] == [c.AttachOk, c.SubscribeOk]
    assert isinstance(_ask(h, b"keeper", c.Attach("public.kept"))[0], c.AttachOk)
    assert sorted(h.datadir.streams()) == ["public.kept", "public.news"]


def test_without_an_acl_a_plain_attach_still_creates(core):
    assert isinstance(_ask(core, b"anyone", c.Attach("made"))[0], c.AttachOk)
    assert "made" in core.core.catalogue


# ---------------------------------------------------------------- the SDK's peering (pure)

def test_a_readers_first_attach_joins_only_what_exists():
    p = peering(incarnations=True)
    assert sent(p) == [c.StreamExpect(0), c.Attach("s")]
    feed(p, c.StreamExpectOk())
    feed(p, c.Invalid(f"{NO_STREAM}'s'"))
    assert p.state is ABSENT and p.attach_error is None and not p.outbox
    p.connection_lost("connection closed by the broker")      # nothing to re-establish
    assert p.need_reconnect is None and p.state is ABSENT
    # a publish attaches again and may create; a refusal leaves it absent, with the error
    p.join(True, 1.0)
    assert sent(p) == [c.Attach("s")]
    feed(p, c.Invalid(f"{NOT_ALLOWED}client 'x' may not create stream 's'"))
    assert p.state is ABSENT and isinstance(p.attach_error, InvalidError)
    # a reader looks again, without creating; the stream exists now
    p.join(False, 2.0)
    assert sent(p) == [c.StreamExpect(0), c.Attach("s")]
    feed(p, c.StreamExpectOk())
    feed(p, c.AttachOk())
    assert p.state is ATTACHED and sent(p)[0] == c.StreamId()


def test_create_true_attaches_as_zeps_1_and_an_old_broker_creates_anyway():
    p = Peering("s", credit_window=1000, confirms=False, timestamps=False, timeout=2,
                heartbeat=5, now=0.0, batching=False, reasons=False, create=True)
    assert sent(p) == [c.Attach("s")]
    p = peering(incarnations=True)
    sent(p)
    feed(p, c.Invalid("unknown command 68"))                     # no STREAM-EXPECT
    feed(p, c.AttachOk())                                         # its ATTACH created it
    assert p.state is ATTACHED


# ---------------------------------------------------------------- the SDK against the broker

def _gone(ep, name, data_dir=None):
    """Not listed by the broker (and, given its data directory, not on disk)."""
    return name not in list_streams(ep, timeout=5) and (
        data_dir is None or name not in stored_streams(str(data_dir)))


def test_sdk_reader_of_a_missing_stream_gets_no_stream_and_creates_nothing(broker):
    ep = broker.endpoint
    with Client(ep, "typo2", timeout=5) as client:
        assert not client.attached
        t = time.monotonic()
        with pytest.raises(NoStream) as info:
            client.subscribe("", from_seq=1).next(timeout=30)
        assert time.monotonic() - t < 10                      # at once, not after the timeout
        assert "typo2" in str(info.value) and "publish" in str(info.value)
        assert info.value.fields == ("typo2",)
        with pytest.raises(NoStream):
            client.info()
        with pytest.raises(NoStream):
            client.seq_at(0)
        assert client.list_streams() == ()                    # needs no ATTACH
        client.flush()                                        # nothing published: nothing to do
    assert _gone(ep, "typo2", broker.data_dir)


def test_sdk_publisher_creates_its_stream_on_its_first_publish(broker):
    ep = broker.endpoint
    with Client(ep, "orders", confirms=True, timeout=5) as pub:
        assert _gone(ep, "orders")                           # constructed: nothing created yet
        assert pub.publish("eu.fr", b"1").result(5) == 1
        assert pub.wait_for_confirms() == 1
    with Client(ep, "batch", timeout=5) as pub:
        assert pub.publish_batch([("k", b"%d" % i) for i in range(100)]) == 100
        pub.flush()
    with Client(ep, "orders", timeout=5) as sub:             # exists: attached at once
        assert sub.attached
        assert sub.subscribe("", from_seq=1).next(timeout=5).body == b"1"
    with Client(ep, "batch", timeout=5) as reader:
        assert reader.info().last == 100


def test_sdk_reader_started_before_its_stream_sees_it_once_it_exists(broker):
    """A reader made before the stream is told NoStream; once a publisher made it, the same
    client's next subscribe finds it. ``create=True`` is the subscriber that waits: its ATTACH
    creates the (empty) stream, as a plain ZEPS/1 ATTACH does."""
    ep = broker.endpoint
    reader = Client(ep, "later", timeout=5)
    waiter = Client(ep, "early", timeout=5, create=True)
    try:
        with pytest.raises(NoStream):
            reader.subscribe("")
        with Client(ep, "later", confirms=True, timeout=5) as pub:
            pub.publish("k", b"first")
            pub.wait_for_confirms()
        sub = reader.subscribe("")                             # default: from the first kept
        assert sub.next(timeout=5).body == b"first" and reader.attached
        assert "early" in list_streams(ep, timeout=5)
        w = waiter.subscribe("", live=True)
        with Client(ep, "early", timeout=5) as pub:
            pub.publish("k", b"hello")
        assert w.next(timeout=5).body == b"hello"
    finally:
        reader.close(timeout=1)
        waiter.close(timeout=1)


def test_async_reader_and_publisher_behave_the_same(broker):
    ep = broker.endpoint

    async def main():
        async with AsyncClient(ep, "typo3", timeout=5) as client:
            assert not client.attached
            t = time.monotonic()
            with pytest.raises(NoStream):
                sub = await client.subscribe("", from_seq=1)
                await sub.next(timeout=30)
            assert time.monotonic() - t < 10                  # at once, not after the timeout
            with pytest.raises(NoStream):
                await client.info()
            await client.flush()
        assert await asyncio.to_thread(_gone, ep, "typo3", broker.data_dir)
        async with AsyncClient(ep, "made", confirms=True, timeout=5) as pub:
            assert await asyncio.to_thread(_gone, ep, "made")
            assert await (await pub.publish("k", b"1")) == 1
            async with AsyncClient(ep, "made", timeout=5) as sub:
                s = await sub.subscribe("", from_seq=1)
                assert (await s.next(timeout=5)).body == b"1"

    asyncio.run(main())
    assert "made" in list_streams(ep, timeout=5)


def test_cli_subscribe_and_sdk_agree_and_neither_creates(broker):
    """The CLI says what the SDK raises (the same NoStream, one line, exit 2)."""
    r = subprocess.run([sys.executable, "-m", "zeps", "subscribe", "typo4", "--endpoint",
                        broker.endpoint, "--timeout", "1"], capture_output=True, text=True,
                       cwd=str(REPO), timeout=60)
    assert r.returncode == 2 and "no stream 'typo4'" in r.stderr, r.stderr
    assert _gone(broker.endpoint, "typo4")


# ---------------------------------------------------------------- a refused publisher (ACL)

@pytest.fixture
def acl_broker(start_broker, tmp_path):
    """CurveZMQ and an ACL: ``anyone`` may read ``public.*``; ``writer`` may publish there too."""
    from zeps.clients import CurveKeys
    keydir = tmp_path / "keys"
    for name in ("broker", "anyone", "writer"):
        r = subprocess.run([sys.executable, "-m", "zeps", "keys", "new", name, "--dir",
                            str(keydir)], capture_output=True, text=True, cwd=str(REPO),
                           timeout=60)
        assert r.returncode == 0, r.stderr
    allow = tmp_path / "allow"
    allow.mkdir()
    acl = tmp_path / "acl.toml"
    acl.write_text('[clients]\nanyone = "keys/anyone.key"\nwriter = "keys/writer.key"\n\n'
                   '[[allow]]\nclients = ["anyone", "writer"]\nsubscribe = ["public.*"]\n\n'
                   '[[allow]]\nclients = ["writer"]\npublish = ["public.*"]\n')
    b = start_broker(None, "--curve-secret", str(keydir / "broker.key_secret"), "--allow",
                     str(allow), "--acl", str(acl))
    b.curve = lambda name: CurveKeys.from_files(str(keydir / "broker.key"),
                                                str(keydir / f"{name}.key_secret"))
    return b


def test_a_refused_publisher_leaves_no_stream(acl_broker):
    b = acl_broker
    ep, anyone, writer = b.endpoint, b.curve("anyone"), b.curve("writer")

    def listed():
        return list_streams(ep, timeout=5, curve=writer)

    with Client(ep, "public.news", confirms=True, timeout=5, curve=anyone) as c:
        with pytest.raises(InvalidError) as info:
            c.publish("k", b"refused")
        assert info.value.code == Code.NOT_ALLOWED and "may not create" in str(info.value)
        with pytest.raises(NoStream):
            c.subscribe("")

    async def refused_async():
        async with AsyncClient(ep, "public.news", timeout=5, curve=anyone) as c:
            with pytest.raises(InvalidError, match="may not create"):
                await c.publish("k", b"refused")
    asyncio.run(refused_async())
    assert "public.news" not in listed()
    assert "public.news" not in stored_streams(str(b.data_dir))
    # the writer creates it; the reader then reads it and its publish is refused, as before
    with Client(ep, "public.news", confirms=True, timeout=5, curve=writer) as w:
        w.publish("k", b"news").result(5)
    with Client(ep, "public.news", timeout=5, curve=anyone) as c:
        assert c.subscribe("", from_seq=1).next(timeout=5).body == b"news"
        c.publish("k", b"refused")
        with pytest.raises(InvalidError, match="may not publish"):
            c.flush()
    assert "public.news" in listed()


# ---------------------------------------------------------------- item 11: where reading starts

def test_sdk_starts_at_the_history_and_the_cli_live_as_documented(broker):
    """The SDK's ``subscribe(pattern)`` starts at the first message kept, the CLI's ``zeps
    subscribe`` with what is published from now on; the README and the SDK's docs say both."""
    ep = broker.endpoint
    with Client(ep, "orders", confirms=True, timeout=5) as pub:
        pub.publish("k", b"before")
        pub.wait_for_confirms()
        cli = subprocess.Popen([sys.executable, "-m", "zeps", "subscribe", "orders", "--json",
                                "--count", "1", "--endpoint", ep, "-v"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=str(REPO))
        with Client(ep, "orders", timeout=5) as sdk:
            assert sdk.subscribe("").next(timeout=5).body == b"before"     # the history
            deadline = time.monotonic() + 30
            n = 0
            while cli.poll() is None:                   # live: it sees only what comes next
                assert time.monotonic() < deadline, "the CLI never printed a message"
                n += 1
                pub.publish("k", b"after %d" % n)
                pub.wait_for_confirms()
                try:
                    cli.wait(0.2)
                except subprocess.TimeoutExpired:
                    pass
    out, err = cli.communicate(timeout=10)
    assert json.loads(out)["body"].startswith("after"), (out, err)
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "`subscribe(pattern)` with no start point begins at the first message" in readme
    assert "`zeps subscribe` begins live" in readme
    from zeps.clients import AsyncClient as A, Client as C
    for doc in (C.subscribe.__doc__, A.subscribe.__doc__):
        assert "zeps subscribe" in doc and "live" in doc
