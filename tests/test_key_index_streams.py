"""A stream created with a key index and no compaction (issue 18): the SDK's and the CLI's
``create ... key_index`` / ``--key-index`` are kept in the stream's settings, so under a real
broker run WITHOUT ``--key-index`` the stream keeps every message, SNAPSHOT serves it, and a
broker restart (SIGKILL included) keeps both; a plain stream of that broker is still refused."""
from __future__ import annotations

import json

import pytest

from tests.test_cli import zeps
from zeps.clients import Client, InvalidError, admin

STREAM = "cfg"


def publish(endpoint, pairs):
    with Client(endpoint, STREAM, confirms=True, timeout=30) as c:
        for key, body in pairs:
            c.publish(key, body)
        c.wait_for_confirms(30)


def snapshot(endpoint, prefix=""):
    with Client(endpoint, STREAM, timeout=30) as c:
        return c.snapshot(prefix)


def test_a_key_indexed_stream_is_snapshotted_across_restarts_without_the_brokers_flag(
        start_broker):
    b = start_broker()
    admin.create_stream(b.endpoint, STREAM, key_index=True)
    own = admin.stream_settings(b.endpoint, STREAM)
    assert own.key_index and not own.compact
    publish(b.endpoint, [("a.1", b"one"), ("a.2", b"two"), ("b.1", b"b"), ("a.1", b"uno"),
                         ("a.2", b"")])
    snap = snapshot(b.endpoint, "a.")
    assert snap.as_dict() == {"a.1": b"uno"} and snap.seq == 5
    b.kill()                                         # SIGKILL: the index is rebuilt on open
    b.restart()
    publish(b.endpoint, [("a.3", b"three")])
    snap = snapshot(b.endpoint)
    assert snap.as_dict() == {"a.1": b"uno", "a.3": b"three", "b.1": b"b"} and snap.seq == 6
    assert [m.sequence for m in snap] == [4, 6, 3]
    b.stop()
    b.restart()
    assert admin.stream_settings(b.endpoint, STREAM).key_index
    assert snapshot(b.endpoint).seq == 6
    with Client(b.endpoint, STREAM, timeout=30) as c:          # not compacted: every message
        sub = c.subscribe("", from_seq=1)
        assert [sub.poll(10).sequence for _ in range(6)] == [1, 2, 3, 4, 5, 6]
    publish_plain(b.endpoint)
    with Client(b.endpoint, "plain", timeout=30) as c:
        with pytest.raises(InvalidError, match="--key-index"):
            c.snapshot("")


def publish_plain(endpoint):
    with Client(endpoint, "plain", confirms=True, timeout=30) as c:
        c.publish("k", b"v")
        c.wait_for_confirms(30)


def test_zeps_stream_create_key_index_then_kv_reads_it(start_broker):
    b = start_broker()
    ep = ("--endpoint", b.endpoint)
    r = zeps("stream", "create", STREAM, "--key-index", *ep)
    assert r.returncode == 0, r.stderr
    info = json.loads(zeps("stream", "info", STREAM, "--json", *ep).stdout)
    assert info["compaction"] == {"compact": False, "key_index": True}
    assert zeps("kv", "put", STREAM, "a", "1", *ep).stdout == "1\n"
    assert zeps("kv", "ls", STREAM, "--values", *ep).stdout == "a 1\n"
    r = zeps("stream", "create", "other", "--key-index", "--min-dirty-ratio", "0.3", *ep)
    assert r.returncode == 2 and "--compact" in r.stderr
