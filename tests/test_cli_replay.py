"""``zeps replay`` (and ``zeps kv history``, which reads a range the same way) at the edges of
what a stream keeps: real broker processes, the command as a subprocess."""
from __future__ import annotations

from tests.test_cli import json_lines, zeps


def test_a_range_every_message_of_which_was_purged_is_empty_at_once(broker):
    """A purge (or retention) that deleted every message up to the range's end left nothing to
    come: the command waited 30 s for a message past the end, then failed (exit 1, "replay
    stalled at sequence 0")."""
    ep = broker.endpoint
    r = zeps("publish", "p", "k", "-", "--endpoint", ep, input="1\n2\n3\n4\n5\n")
    assert r.returncode == 0, r.stderr
    r = zeps("stream", "purge", "p", "--upto", "5", "--yes", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    for args in (("replay", "p"), ("replay", "p", "--from-seq", "2", "--to-seq", "4"),
                 ("kv", "history", "p", "k")):
        r = zeps(*args, "--endpoint", ep, timeout=20)
        assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), args
    r = zeps("publish", "p", "k", "6", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    r = zeps("replay", "p", "--endpoint", ep, "--format", "raw", "--to-seq", "5", timeout=20)
    assert (r.returncode, r.stdout) == (0, "")
    r = zeps("replay", "p", "--endpoint", ep, "--from-seq", "2", timeout=20)
    assert r.returncode == 0 and [x["sequence"] for x in json_lines(r.stdout)] == [6]


def test_to_time_the_last_time_the_wire_carries_is_no_end(broker):
    """``--to-time`` 2^64-1 ns (a time the command takes) asked the broker for the first
    sequence at 2^64 ns: the codec's traceback, exit 1."""
    ep = broker.endpoint
    r = zeps("publish", "s", "k", "-", "--endpoint", ep, input="1\n2\n")
    assert r.returncode == 0, r.stderr
    r = zeps("replay", "s", "--endpoint", ep, "--format", "raw", "--to-time",
             "18446744073.709551615")
    assert (r.returncode, r.stdout, r.stderr) == (0, "1\n2\n", "")
    broker.stop()
    r = zeps("replay", "s", "--data-dir", broker.data_dir, "--format", "raw", "--to-time",
             "18446744073.709551615")
    assert (r.returncode, r.stdout, r.stderr) == (0, "1\n2\n", "")
