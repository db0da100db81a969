"""Journal tests with real child processes (tests/journal_child.py): SIGKILL mid-append,
readers in other processes beside a live writer, lock held by another process, and a real
write failure (RLIMIT_FSIZE -> EFBIG) standing in for a full disk."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from zeps.journal import Journal, JournalConfig, JournalLockedError, JournalReader

from .journal_child import body_for, key_for

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "journal_child.py")


def spawn(*args, **kw):
    return subprocess.Popen([sys.executable, CHILD, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def check_content(records):
    for r in records:
        assert r.body == body_for(r.sequence) and r.key == key_for(r.sequence), r


@pytest.mark.parametrize("segment_bytes", [1 << 20, 3000])
def test_sigkill_mid_append_loses_nothing_durable(tmp_path, segment_bytes):
    d = tmp_path / "s"
    printed = 0
    for round_ in range(3):
        p = spawn("append", d, segment_bytes)
        try:
            start = p.stdout.readline().split()
            assert start[0] == "start" and int(start[1]) == printed + 1   # continues after
            # another process holds the stream lock: a second writer is refused clearly
            with pytest.raises(JournalLockedError, match=f"process {p.pid}"):
                Journal.open(d, JournalConfig())
            lines = 0
            target = 150 + 70 * round_
            while lines < target:
                line = p.stdout.readline()
                assert line, p.stderr.read()
                printed = max(printed, int(line))
                lines += 1
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        assert p.returncode == -signal.SIGKILL
        with Journal.open(d, JournalConfig(fsync="never")) as j:
            assert j.last_seq >= printed       # every printed durable sequence is there
            recs = j.read_batch(1, 10**6, 1 << 40)
            assert [r.sequence for r in recs] == list(range(1, j.last_seq + 1))
            check_content(recs)
            printed = j.last_seq               # the next child continues from here


def test_readers_in_other_processes_see_only_whole_records(tmp_path):
    """A writer child appends with tiny segments (many rolls); two reader children and a
    reader in this process follow it; all see every record whole, in order."""
    d = tmp_path / "s"
    count = 6000
    readers = [spawn("read", d, count, 60) for _ in range(2)]
    w = spawn("write", d, count, 8192, 0)
    assert w.stdout.readline().strip() == "ready"
    r = JournalReader(d)
    local = []
    for rec in r.read_from(1, end_seq=count, follow=True, poll_interval=0.002, timeout=30):
        local.append(rec)
    assert [x.sequence for x in local] == list(range(1, count + 1))
    check_content(local)
    assert w.stdout.readline().strip() == "done"
    assert w.wait(30) == 0
    for p in readers:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert json.loads(out) == {"seen": count, "last": count, "gap": False, "missed": 0}
    assert r.info().segments > 20
    assert r.last_seq == count


def test_reader_in_other_process_tolerates_retention(tmp_path):
    d = tmp_path / "s"
    count = 6000
    reader = spawn("read", d, count, 60)
    w = spawn("write", d, count, 4096, 12000)      # retention deletes segments as it goes
    out, err = reader.communicate(timeout=90)
    assert reader.returncode == 0, err
    res = json.loads(out)
    assert res["last"] == count                    # reached the end, skipping only deleted
    assert res["seen"] + res["missed"] == count
    assert res["gap"] == (res["missed"] > 0)
    assert w.wait(30) == 0
    r = JournalReader(d)
    assert r.first_seq > 1 and r.last_seq == count
    check_content(r.read_from(1))


def test_full_disk_efbig_rolls_back_and_recovers(tmp_path):
    d = tmp_path / "s"
    p = spawn("fsize", d, 20000)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    res = json.loads(out)
    assert "EFBIG" in res["error"] and "rolled back" in res["error"]
    assert res["errno"] == 27
    assert res["state_unchanged"]                  # nothing half-appended, size restored
    assert res["size"] <= 20000
    assert res["all_ok"] and res["readable"] == res["next_seq"] - 1
    assert res["second_failed"]                    # still full: fails cleanly again
    n = res["next_seq"]
    assert res["after_lift"] == [n, n + 1, n + 2]  # usable again once space is back
    assert res["durable"] == n + 2
    with Journal.open(d, JournalConfig()) as j:    # and after reopening
        recs = j.read_batch(1, 10**6, 1 << 40)
        assert [r.sequence for r in recs] == list(range(1, n + 3))
        check_content(recs)
        assert j.append_batch([("k", b"x")])[0].sequence == n + 3


def test_unreadable_directory(tmp_path):
    """An unreadable stream directory gives a clear JournalError naming it.

    Root reads any directory, so as root the reader runs in a child process whose capabilities to
    bypass file permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) are dropped with setpriv.
    """
    d = tmp_path / "s"
    Journal.open(d, JournalConfig()).close()
    os.chmod(d, 0)
    try:
        code = ("import sys; sys.path.insert(0, %r)\n"
                "from zeps.journal import JournalReader, JournalError\n"
                "try:\n    JournalReader(%r)\nexcept JournalError as e:\n"
                "    print(type(e).__name__, e)\n" % (os.path.dirname(HERE), str(d)))
        cmd = [sys.executable, "-c", code]
        if os.geteuid() == 0:
            cmd = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    finally:
        os.chmod(d, 0o755)
    assert "not readable" in p.stdout and str(d) in p.stdout, (p.stdout, p.stderr)
