"""Crashes of a compacted stream (issue 18, items 1 and 2), each a real SIGKILL of a child
process: a writer appending to a stream with the last-value index (the reopened index is exactly
the state the log holds), and a compaction killed by its own fault-injection point
(``ZEPS_COMPACT_CRASH_AT``) at every step (opening the journal finishes or discards what it left,
and nothing is lost)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from zeps.journal import Journal, JournalReader, compaction

from .test_journal_compaction import MS, RETENTION_MS, cfg, leftovers, make_stream, records, \
    sealed, state_of
from .test_journal_lastvalue import Clock, check_index, replay_state
from .test_journal_lastvalue import cfg as kv_cfg

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


WRITER = r"""
import sys
sys.path.insert(0, sys.argv[2])
from zeps.journal import Journal, JournalConfig
cfg = JournalConfig(segment_bytes=8192, fsync="always", key_index=True, index_interval_bytes=512)
j = Journal.open(sys.argv[1], cfg)
i = j.next_seq
while True:
    k = "k%d" % (i % 97)
    j.append_batch([(k, b"" if i % 13 == 0 else b"v%d" % i)])
    print(j.durable_seq, flush=True)
    i += 1
"""


def test_sigkill_of_the_writer_then_reopen_rebuilds_the_index_from_the_log(tmp_path):
    """A writer appending (fsync always) is SIGKILLed twice; each reopen's index is exactly the
    state of the records the log holds (what a replay gives), and the acknowledged ones are
    there."""
    path = tmp_path / "s"
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(path), REPO],
                             stdout=subprocess.PIPE)
        acked = 0
        deadline = time.monotonic() + 60
        while acked < 600 + 400 * _ and time.monotonic() < deadline:
            acked = int(p.stdout.readline())
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        p.stdout.close()
        j = Journal.open(path, kv_cfg(segment_bytes=8192, index_interval_bytes=512), Clock())
        assert j.last_seq >= acked
        model = replay_state(JournalReader(path))
        check_index(j, model)
        j.close()


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from zeps.journal import compaction
compaction.compact(sys.argv[2], [int(x) for x in sys.argv[3].split(",")],
                   now_ns=int(sys.argv[4]))
print("finished", flush=True)
"""


@pytest.mark.parametrize("step", [f"{s}:{n}" for s in compaction.STEPS for n in (1, 3)
                                  if not (s in ("map", "checkpoint") and n > 1)])
def test_sigkill_during_compaction_loses_nothing(tmp_path, step):
    """The compaction, in a child process, SIGKILLs itself at ``step`` (its n-th occurrence:
    in the first or the third segment it rewrites). Opening the journal afterwards finishes or
    discards what was left; the state of every key is intact, the records read are those of
    the stream before (same sequences, same bytes), a superset of what the whole compaction
    keeps; the writer's index agrees; a new compaction then ends where an uninterrupted one
    does."""
    path = tmp_path / "s"
    model, clock = make_stream(path)
    seals = sealed(path)
    before = records(path)
    now = clock.t + (RETENTION_MS - 300) * MS
    whole = tmp_path / "whole"
    shutil.copytree(path, whole)
    compaction.compact(str(whole), seals, now_ns=now)
    ideal = records(whole)
    p = subprocess.run([sys.executable, "-c", CHILD, REPO, str(path),
                        ",".join(map(str, seals)), str(now)],
                       env=dict(os.environ, ZEPS_COMPACT_CRASH_AT=step),
                       capture_output=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    if step.startswith(("cleaned", "swap", "replace-index")):
        assert leftovers(path)                    # the crash left work behind
    j = Journal.open(path, cfg(), Clock())
    assert leftovers(path) == []
    got = list(j.read_from(1))
    by_seq = {r.sequence: r for r in before}
    assert all(by_seq[r.sequence] == r for r in got)
    assert {r.sequence for r in got} >= {r.sequence for r in ideal}
    assert state_of(got) == model
    for k, (s, body) in model.items():
        rec = j.latest(k)
        assert (rec.sequence, rec.body) == (s, body)
    assert dict(j.snapshot()) == {k: s for k, (s, _) in model.items()}
    j.close()
    assert list(JournalReader(path).read_from(1)) == got
    compaction.compact(str(path), seals, now_ns=now)
    assert records(path) == ideal
