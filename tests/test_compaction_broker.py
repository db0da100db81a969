"""Compacted streams through a real broker (issue 18, item 2): created with the SDK
(STREAM-CREATE-X), compacted by the broker itself (its ``--compaction-check`` timer, the rewrite
in its thread pool) while clients publish, the journal shrinks, a replay through the broker
gives every key's latest value with the removed sequences skipped and taken as normal (the SDK
reports no loss), and a calm publish->deliver pair on another stream beside it loses nothing.
The pair's p99 during the compactions and without them is printed, not asserted (the
figures are bench/bench_compaction.py's); the CLI creates and shows such a stream; a
compaction process killed at its commit point loses nothing."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from zeps.clients import Client, admin

from .measure import wait_for
from .pair import Pair
from .test_journal_kv_broker import replay

STREAM = "kv"
KEYS = 20
COMPACT_GATE = Path(__file__).resolve().parent / "compactgate"


def log_bytes(data) -> int:
    from zeps.journal.names import stream_dir_name
    path = os.path.join(data, stream_dir_name(STREAM))
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if n.endswith(".log"))


def p99(values):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))]


def publish(endpoint, n, start, model):
    with Client(endpoint, STREAM, confirms=True, timeout=30, batching=False) as c:
        for i in range(start, start + n):
            key = f"cfg.{i % KEYS}"
            body = b"" if i % 13 == 5 else b"value %06d" % i
            c.publish(key, body)
            if body:
                model[key] = body
            else:
                model.pop(key, None)
            if i % 50 == 49:
                c.wait_for_confirms()
        c.wait_for_confirms()


def test_the_broker_compacts_a_compacted_stream_beside_a_calm_pair(start_broker, tmp_path,
                                                                   caplog):
    data = tmp_path / "data"
    b = start_broker(data, "--compaction-check", "0.2")
    admin.create_stream(b.endpoint, STREAM, compact=True, segment_bytes=8192,
                        delete_retention=3600)
    own = admin.stream_settings(b.endpoint, STREAM)
    assert own.compact and own.key_index and own.delete_retention_ms == 3_600_000
    pair = Pair(b.endpoint, stream="calm")
    try:
        pair.start_paced(0.005)
        assert wait_for(lambda: len(pair.received), lambda n: n >= 100, 30) >= 100
        calm_until = time.monotonic_ns()
        model: dict = {}
        during_from = time.monotonic_ns()
        publish(b.endpoint, 4000, 0, model)
        written = 4000 * 40                           # at least: records of ~40 bytes
        size = wait_for(lambda: log_bytes(data), lambda s: s < written / 3, 60)
        during_until = time.monotonic_ns()
        assert size < written / 3, f"the journal did not shrink: {size} bytes"
        got = len(pair.received)
        assert wait_for(lambda: len(pair.received), lambda n: n >= got + 100, 30) >= got + 100
        pair.stop_paced()
        assert pair.wait_all(30), f"{len(pair.received)} of {pair.sent}"
        assert not pair.problems, pair.problems[:3]
        calm = pair.latencies(0, calm_until)
        during = pair.latencies(during_from, during_until)
        print(f"\ncalm pair p99: {p99(calm) * 1e3:.2f} ms without compaction ({len(calm)} "
              f"messages), {p99(during) * 1e3:.2f} ms while publishing and compacting "
              f"({len(during)}); journal {size} bytes for {written}+ written")
    finally:
        pair.close()
    with caplog.at_level(logging.DEBUG, logger="zeps"):
        seqs, state = replay(b.endpoint)
    assert state == model
    assert seqs == sorted(set(seqs)) and seqs[-1] == 4000 and len(seqs) < 1000
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records[:3]
    assert "compacted" in b.log_path.read_text()
    b.stop()


def test_the_cli_creates_a_compacted_stream_and_shows_its_settings(broker):
    def zeps(*args):
        return subprocess.run([sys.executable, "-m", "zeps", *args, "--endpoint",
                               broker.endpoint], capture_output=True, text=True, timeout=60)
    r = zeps("stream", "create", "cfg", "--compact", "--delete-retention", "2h",
             "--min-dirty-ratio", "0.25")
    assert r.returncode == 0, r.stderr
    r = zeps("stream", "info", "cfg")
    assert r.returncode == 0, r.stderr
    assert "compact" in r.stdout and "7200" in r.stdout and "0.25" in r.stdout, r.stdout
    r = zeps("stream", "create", "bad", "--delete-retention", "2h")
    assert r.returncode != 0 and "--compact" in r.stderr


def test_a_compaction_process_killed_at_its_commit_point_loses_nothing(start_broker, tmp_path,
                                                                       monkeypatch):
    """Each compaction's child process SIGKILLs itself once its first segment's rewrite is
    committed (``B.log.swap``) and before it is in place: the broker logs the failure and keeps
    serving the same state (the next child finishes what the last one committed first, so
    they make progress); a restart finishes the swap; later compactions run."""
    data = tmp_path / "data"
    monkeypatch.setenv("ZEPS_COMPACT_CRASH_AT", "swap")
    b = start_broker(data, "--compaction-check", "0.2")
    admin.create_stream(b.endpoint, STREAM, compact=True, segment_bytes=8192)
    model: dict = {}
    publish(b.endpoint, 2000, 0, model)
    log = wait_for(lambda: b.log_path.read_text(), lambda t: "compaction_failed" in t, 60)
    assert "compaction_failed" in log and "signal 9" in log
    from zeps.journal.names import stream_dir_name
    path = os.path.join(data, stream_dir_name(STREAM))
    seqs, state = replay(b.endpoint)
    assert state == model and seqs == sorted(set(seqs)) and seqs[-1] == 2000
    b.stop()
    monkeypatch.delenv("ZEPS_COMPACT_CRASH_AT")
    b.restart()
    seqs, state = replay(b.endpoint)                  # opens the journal: recovery
    assert state == model and seqs == sorted(set(seqs)) and seqs[-1] == 2000
    assert not any(n.endswith((".swap", ".cleaned")) for n in os.listdir(path))
    publish(b.endpoint, 1000, 2000, model)
    assert wait_for(lambda: b.log_path.read_text().count("compacted"), lambda n: n >= 1, 60)
    seqs, state = replay(b.endpoint)
    assert state == model and seqs == sorted(set(seqs)) and seqs[-1] == 3000
    assert len(seqs) < 1000
    b.stop()


def _running(pid: int) -> bool:
    """The process exists and has not exited (a zombie no one has reaped yet has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_a_broker_stopped_during_a_compaction_leaves_no_compaction_running(
        start_broker, tmp_path, monkeypatch):
    """SIGTERM while a compaction's child process runs (held at its first sync by
    tests/compactgate, in the broker's processes only): the broker kills the child and waits
    for it before it exits (the child went on rewriting the data directory after the broker
    had exited and released it); a restart recovers what the child left, losing nothing."""
    gate = tmp_path / "gate"
    gate.mkdir()
    hold, started = gate / "hold", gate / "started"
    hold.touch()
    monkeypatch.setenv("PYTHONPATH", str(COMPACT_GATE))    # the broker's (conftest adds the repo)
    monkeypatch.setenv("ZEPS_COMPACT_GATE", str(gate))
    data = tmp_path / "data"
    b = start_broker(data, "--compaction-check", "0.2")
    admin.create_stream(b.endpoint, STREAM, compact=True, segment_bytes=8192)
    model: dict = {}
    publish(b.endpoint, 2000, 0, model)
    assert wait_for(started.exists, bool, 60), f"no compaction started\n{b.log()}"
    pid = int(started.read_text())
    try:
        assert _running(pid)
        assert b.stop() == 0
        assert not _running(pid), "the compaction process outlived the broker"
    finally:
        hold.unlink()                                 # an orphan finishes its compaction ...
        if wait_for(lambda: _running(pid), lambda r: not r, 30):
            os.kill(pid, signal.SIGKILL)              # ... or is ended here
    assert "compaction_stopped" in b.log_path.read_text()
    monkeypatch.delenv("ZEPS_COMPACT_GATE")
    b.restart()
    seqs, state = replay(b.endpoint)                  # opens the journal: recovery
    assert state == model and seqs == sorted(set(seqs)) and seqs[-1] == 2000
    from zeps.journal.names import stream_dir_name
    assert not any(n.endswith((".swap", ".cleaned"))
                   for n in os.listdir(os.path.join(data, stream_dir_name(STREAM))))
    b.stop()
