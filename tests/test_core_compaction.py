"""Compacted streams in the core (issue 18, item 2), driven in-process (tests/core_harness.py)
over a real data directory: STREAM-CREATE-X and STREAM-SETTINGS, the compaction timer naming a
stream whose sealed segments changed, the harness running the job as the shell does (off the
loop there), the replay of the compacted stream, and what waits while a compaction runs."""
from __future__ import annotations

import os

import pytest

from zeps.protocol import commands as c

from .core_harness import Core, make_fixture, reasons  # noqa: F401 (the make fixture)

A, B, PUB = b"client-a", b"client-b", b"pub"
KV = c.FLAG_COMPACT


def log_bytes(h: Core, name: str) -> int:
    path = h.datadir.stream_path(name)
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if n.endswith(".log"))


def fill(h: Core, n: int, keys: int = 10, stream: str = "kv") -> dict:
    """``n`` messages over ``keys`` keys, one round each; the latest sequence of each key."""
    latest = {}
    for i in range(n):
        key = f"k{i % keys}"
        h.publish(key, body=b"value %05d" % i, ident=PUB, stream=stream)
        latest[key] = i + 1
    return latest


def test_create_x_keeps_a_compacted_streams_settings_and_stream_settings_says_them(make):
    h = make()
    h.send(A, c.StreamCreateX("kv", 0, 0, 0, 8192, KV, 60_000, 250))
    assert h.take(A) == [c.StreamCreateOk()]
    own = h.datadir.settings("kv")
    assert own.compact and own.delete_retention_ms == 60_000
    assert own.min_cleanable_dirty_ratio == 0.25 and own.segment_bytes == 8192
    h.send(A, c.StreamCreateX("kv", 0, 0, 0, 8192, KV, 60_000, 250))    # the same: fine
    h.send(A, c.StreamCreate("kv", 0, 0, 0, 8192))                      # not compacted: no
    ok, refused = h.take(A)
    assert ok == c.StreamCreateOk() and "other settings" in refused.reason
    h.send(A, c.StreamCreate("plain"), c.StreamSettingsGet("kv"), c.StreamSettingsGet("plain"),
           c.StreamSettingsGet(""))
    ok, kv, plain, defaults = h.take(A)
    assert kv == c.StreamCreateX("kv", 0, 0, 0, 8192, c.FLAG_COMPACT | c.FLAG_KEY_INDEX,
                                 60_000, 250)
    assert plain == c.StreamCreateX("plain")
    assert defaults.stream == "" and defaults.delete_retention_ms == 86_400_000
    assert defaults.min_dirty_permille == 500 and defaults.flags == 0
    h.send(A, c.StreamSettingsGet("nothing"))
    assert reasons(h, A)


@pytest.mark.parametrize("cmd, why", [
    (c.StreamCreateX("x", flags=4), "unknown flags"),
    (c.StreamCreateX("x", flags=KV, min_dirty_permille=1001), "over 1000"),
    (c.StreamCreateX("x", delete_retention_ms=5), "compact"),
])
def test_bad_create_x_settings_are_refused_with_a_reason_and_nothing_is_made(make, cmd, why):
    h = make()
    h.send(A, cmd, c.Ping())
    [reason] = reasons(h, A)
    assert "STREAM-CREATE-X" in reason and why in reason
    assert "x" not in h.datadir.streams()


def test_a_key_index_alone_is_kept_and_snapshot_serves_it_without_the_brokers_key_index(make):
    """STREAM-CREATE-X with flag 2 only: the stream's settings keep ``key_index`` (a compacted
    stream's do not say it twice), STREAM-SETTINGS answers flag 2, and SNAPSHOT works on it in
    a core run without ``key_index`` (a plain stream of that core is still refused)."""
    h = make()
    h.send(A, c.StreamCreateX("ki", flags=c.FLAG_KEY_INDEX),
           c.StreamCreateX("both", flags=c.FLAG_COMPACT | c.FLAG_KEY_INDEX),
           c.StreamCreateX("ki", flags=c.FLAG_KEY_INDEX))        # again, the same: fine
    assert h.take(A) == [c.StreamCreateOk()] * 3
    own = h.datadir.settings("ki")
    assert own.key_index and not own.compact
    both = h.datadir.settings("both")
    assert both.compact and not both.key_index
    h.send(A, c.StreamCreate("ki"))                              # without the index: no
    assert "other settings" in reasons(h, A)[0]
    h.send(A, c.StreamSettingsGet("ki"), c.StreamSettingsGet("both"))
    assert [m.flags for m in h.take(A)] == [c.FLAG_KEY_INDEX, c.FLAG_COMPACT | c.FLAG_KEY_INDEX]
    for i in range(5):
        h.publish(f"k{i % 2}", body=b"v%d" % i, ident=PUB, stream="ki")
        h.publish(f"k{i % 2}", body=b"v%d" % i, ident=b"pub2", stream="plain")
    h.send(B, c.Attach("ki"), c.Credit(1 << 20), c.Snapshot(("",)))
    h.drain()
    got = h.take(B)
    assert [(m.key, m.body, m.sequence) for m in got if isinstance(m, c.SnapshotEntry)] == [
        ("k0", b"v4", 5), ("k1", b"v3", 4)]
    assert got[-1] == c.SnapshotEnd(5, 2)
    h.send(b"other", c.Attach("plain"), c.Credit(1 << 20), c.Snapshot(("",)))
    assert any("no key index" in r and "--key-index" in r for r in reasons(h, b"other"))


ACL = """
[clients]
reader = "{reader}"
admin = "{admin}"

[[allow]]
clients = ["reader"]
subscribe = ["kv"]

[[allow]]
clients = ["admin"]
admin = ["kv"]
"""


def test_create_x_and_stream_settings_check_rights_first(make):
    """A client without the admin right is refused before its settings are looked at (bad
    ones get the same answer); one with it creates; one that may not read the stream is not
    told its settings."""
    from zeps.broker.acl import parse_acl
    h = make()
    h.core.set_acl(parse_acl(ACL.format(reader="R" * 40, admin="D" * 40)))
    h.core.identify(A, "R" * 40)
    h.core.identify(B, "D" * 40)
    h.send(A, c.StreamCreateX("kv", flags=KV), c.StreamCreateX("kv", flags=4))
    refused = reasons(h, A)
    assert len(refused) == 2 and all(r.startswith("not allowed") for r in refused)
    assert "kv" not in h.datadir.streams()
    h.send(B, c.StreamCreateX("kv", flags=KV))
    assert h.take(B) == [c.StreamCreateOk()]
    h.send(A, c.StreamSettingsGet("kv"))
    assert [m.flags for m in h.take(A)] == [c.FLAG_COMPACT | c.FLAG_KEY_INDEX]
    h.core.identify(b"stranger", "S" * 40)
    h.send(b"stranger", c.StreamSettingsGet("kv"))
    assert reasons(h, b"stranger")


def test_the_core_compacts_a_compacted_stream_and_a_replay_gets_the_latest_per_key(make):
    h = make(compaction_check=30.0)
    h.send(A, c.StreamCreateX("kv", segment_bytes=4096, flags=KV))
    h.take(A)
    latest = fill(h, 800)
    assert h.compactions == []                         # no check due since the first round
    before = log_bytes(h, "kv")
    h.now += 30.0
    h.round()
    [(job, result, error)] = h.compactions
    assert error is None and job.stream == "kv" and h.core.compacting is None
    assert result.removed > 0 and result.segments
    assert log_bytes(h, "kv") < before / 2
    [logged] = h.logged("compacted")
    assert logged["stream"] == "kv" and logged["removed"] == result.removed
    h.subscriber(B, latest=c.LATEST_FIRST, stream="kv")
    h.drain()
    got = h.delivered(B)
    seqs = [q for q, _ in got]
    assert seqs == sorted(set(seqs)) and len(seqs) < 800 and seqs[-1] == 800
    last = {}
    for q, k in got:
        last[k] = q
    assert last == latest
    h.now += 30.0                                      # nothing sealed since: not named again
    h.round()
    assert len(h.compactions) == 1


def test_purge_delete_and_retention_wait_while_a_compaction_runs(make):
    h = make(compaction_check=30.0)
    h.send(A, c.StreamCreateX("kv", segment_bytes=4096, flags=KV))
    h.take(A)
    fill(h, 300)
    h.now += 30.0
    h.core.tick(h.now)                                 # names the job; the shell would run it
    [job] = h.core.take_compactions()
    assert h.core.compacting is job
    h.send(A, c.StreamPurge("kv", 10), c.StreamDelete("kv"))
    purge_why, delete_why = reasons(h, A)
    assert "being compacted" in purge_why and "being compacted" in delete_why
    h.send(A, c.StreamPurge("other-not-there", 1))     # other streams: as before
    assert reasons(h, A)
    h.core.compacted(job, None, None)                  # not due after all
    assert h.core.compacting is None
    h.send(A, c.StreamPurge("kv", 10))
    assert [type(m) for m in h.take(A)] == [c.StreamPurgeOk]


def test_a_failed_compaction_is_logged_and_the_next_one_can_run(make):
    h = make(compaction_check=30.0)
    h.send(A, c.StreamCreateX("kv", segment_bytes=4096, flags=KV))
    h.take(A)
    fill(h, 300)
    h.now += 30.0
    h.core.tick(h.now)
    [job] = h.core.take_compactions()
    h.core.compacted(job, None, OSError(28, "No space left on device"))
    assert h.core.compacting is None
    assert "No space" in h.logged("compaction_failed")[0]["error"]
    fill(h, 300)                                       # new sealed segments: named again
    h.now += 30.0
    h.round()
    assert len(h.compactions) == 1 and h.compactions[0][1].removed > 0
