"""Stream administration end to end: create with settings, describe, list, purge, delete; readers
never create streams; --auto-create no. A real broker process, the SDK's admin calls and the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from zeps.clients import Client, admin
from zeps.protocol import commands as c

from .conftest import REPO
from .rawclient import RawClient

ENV = dict(os.environ, PYTHONPATH=str(REPO))
ENV.pop("ZEPS_ENDPOINT", None)


def zeps(*args, input=None):
    return subprocess.run([sys.executable, "-m", "zeps", *map(str, args)], input=input,
                          capture_output=True, text=True, timeout=60, cwd=str(REPO), env=ENV)


def test_create_describe_and_settings_that_persist(broker):
    ep = broker.endpoint
    r = zeps("stream", "create", "orders", "--max-message", "100", "--retention-age", "7d",
             "--segment-bytes", "64K", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    d = admin.describe_stream(ep, "orders")
    assert (d.first, d.last, d.max_message, d.retention_ms, d.segment_bytes) == \
        (1, 0, 100, 7 * 86400 * 1000, 64 << 10)
    # the same settings again: fine; other settings: refused with the reason
    admin.create_stream(ep, "orders", max_message=100, retention_age=7 * 86400,
                        segment_bytes=64 << 10)
    r = zeps("stream", "create", "orders", "--max-message", "200", "--endpoint", ep)
    assert r.returncode == 1 and "exists with other settings" in r.stderr
    # the stream's own max message is enforced, and it survives a restart
    broker.restart()
    with Client(ep, "orders", confirms=True) as cl:
        cl.publish("k", b"x" * 100)
        assert cl.wait_for_confirms() == 1
    p = RawClient(ep).attach("orders")
    p.send(c.Publish("k", b"x" * 101))
    assert "the stream's limit of 100" in p.expect(c.Invalid).reason
    info = json.loads(zeps("stream", "info", "orders", "--json", "--endpoint", ep).stdout)
    assert info["messages"] == 1 and info["settings"]["max_message"] == 100


def test_readers_never_create_streams(broker):
    ep = broker.endpoint
    for args in (["subscribe", "typo", "--timeout", "0.2"], ["replay", "typo"]):
        r = zeps(*args, "--endpoint", ep)
        assert r.returncode == 2 and r.stderr.startswith("zeps: error: no stream 'typo'"), r.stderr
    with pytest.raises(admin.NoStream):
        admin.describe_stream(ep, "typo")
    assert "typo" not in zeps("stream", "list", "--endpoint", ep).stdout
    assert not (broker.data_dir / "typo").exists()
    zeps("publish", "typo", "k", "v", "--endpoint", ep)       # a publisher creates it
    assert admin.describe_stream(ep, "typo").last == 1


def test_purge_and_delete(broker):
    ep = broker.endpoint
    admin.create_stream(ep, "p", segment_bytes=1024)
    with Client(ep, "p", confirms=True) as cl:
        for i in range(100):             # one batch each: the broker never splits a batch
            cl.publish("k", b"%03d" % i + b"." * 40)
            cl.wait_for_confirms()
    segments_before = len(list((broker.data_dir / "p").glob("*.log")))
    r = zeps("stream", "purge", "p", "--upto", "60", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "stream 'p': messages up to 60 purged; the first kept is now 61\n"
    assert len(list((broker.data_dir / "p").glob("*.log"))) < segments_before   # space freed
    d = admin.describe_stream(ep, "p")
    assert (d.first, d.last) == (61, 100)
    with Client(ep, "p") as cl:                                # nobody is served below it
        sub = cl.subscribe("", from_seq=1)
        got = [sub.next(timeout=5).sequence for _ in range(40)]
    assert got == list(range(61, 101))
    broker.restart()                                           # the purge survives a restart
    assert admin.describe_stream(ep, "p").first == 61
    watcher = RawClient(ep).attach("p")
    r = zeps("stream", "delete", "p", "--endpoint", ep)
    assert r.returncode == 2 and "--yes" in r.stderr
    assert zeps("stream", "delete", "p", "--yes", "--endpoint", ep).returncode == 0
    assert isinstance(watcher.recv(), c.Detach)               # its clients are told
    with pytest.raises(admin.NoStream):
        admin.describe_stream(ep, "p")
    assert not (broker.data_dir / "p").exists()


def test_a_purge_of_every_message_needs_yes_and_says_where_it_stopped(broker):
    """--upto at or past the stream's last message drops every message it holds, as delete
    would: refused without --yes, as delete is (2^64-1 purged everything without asking, and
    said "messages up to 18446744073709551615 purged" while a message published after it was
    served). With --yes it says where it stopped; later messages are kept and served."""
    ep = broker.endpoint
    zeps("publish", "s", "k", "-", "--endpoint", ep, input="1\n2\n3\n")
    for upto in (2**64 - 1, 3):
        r = zeps("stream", "purge", "s", "--upto", upto, "--endpoint", ep)
        assert r.returncode == 2 and r.stdout == "", r
        assert len(r.stderr.splitlines()) == 1 and "--yes" in r.stderr, r.stderr
        d = admin.describe_stream(ep, "s")
        assert (d.first, d.last) == (1, 3)                        # nothing purged
    r = zeps("stream", "purge", "s", "--upto", 2**64 - 1, "--yes", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "stream 's': messages up to 3 purged; the first kept is now 4\n"
    r = zeps("stream", "purge", "s", "--upto", 99, "--endpoint", ep)     # none left to drop
    assert r.returncode == 0, r.stderr
    assert r.stdout == "stream 's': messages up to 3 purged; the first kept is now 4\n"
    zeps("publish", "s", "k", "4", "--endpoint", ep)
    with Client(ep, "s") as cl:                                # kept though 4 <= --upto
        assert cl.subscribe("", from_seq=1).next(timeout=5).sequence == 4


def test_without_auto_create_only_stream_create_makes_streams(start_broker):
    b = start_broker(None, "--auto-create", "no")
    r = zeps("publish", "new", "k", "v", "--endpoint", b.endpoint)
    assert r.returncode == 2 and "no stream: 'new'" in r.stderr      # a missing stream: 2
    assert zeps("stream", "create", "new", "--endpoint", b.endpoint).returncode == 0
    assert zeps("publish", "new", "k", "v", "--confirm", "--endpoint", b.endpoint).stdout.strip() \
        == "1"
