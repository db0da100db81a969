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
    for args, said in ((("replay", "p"), "1..5"),
                       (("replay", "p", "--from-seq", "2", "--to-seq", "4"), "2..4"),
                       (("kv", "history", "p", "k"), None)):
        r = zeps(*args, "--endpoint", ep, timeout=20)
        assert (r.returncode, r.stdout) == (0, ""), args
        assert r.stderr == (f"zeps: warning: messages {said} were deleted (retention or a "
                            f"purge)\n" if said else "")
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


def test_a_replay_whose_start_was_deleted_says_so_through_a_broker_as_from_a_data_dir(broker):
    """Through a broker, a replay from a sequence that retention or a purge deleted started at
    the first kept message and said nothing of the ones it could not give (read from the data
    directory, it warned, and the journal's own log line said it a second time)."""
    ep = broker.endpoint
    r = zeps("publish", "p", "k", "-", "--endpoint", ep, input="1\n2\n3\n4\n5\n")
    assert r.returncode == 0, r.stderr
    r = zeps("stream", "purge", "p", "--upto", "3", "--yes", "--endpoint", ep)
    assert r.returncode == 0, r.stderr
    said = "zeps: warning: messages 2..3 were deleted (retention or a purge)\n"
    r = zeps("replay", "p", "--from-seq", "2", "--format", "raw", "--endpoint", ep, timeout=20)
    assert (r.returncode, r.stdout, r.stderr) == (0, "4\n5\n", said)
    r = zeps("replay", "p", "--from-seq", "4", "--format", "raw", "--endpoint", ep, timeout=20)
    assert (r.returncode, r.stdout, r.stderr) == (0, "4\n5\n", "")
    broker.stop()
    r = zeps("replay", "p", "--from-seq", "2", "--format", "raw", "--data-dir", broker.data_dir)
    assert (r.returncode, r.stdout, r.stderr) == (0, "4\n5\n", said)


def test_a_range_ending_before_the_first_kept_message_by_time_says_nothing_was_deleted(
        start_broker, tmp_path):
    """``--to-time`` before every kept message: the deleted messages' times are not known, so
    none of them is said to be in the range (through a broker after retention it said
    ``messages 1..N were deleted``, for a range ending in 1970; from a data directory after a
    purge too). The same range from a sequence still says what it lost."""
    from tests.rawclient import RawClient
    from tests.test_broker import publish
    from zeps.protocol import commands as c
    b = start_broker(tmp_path / "d", "--segment-bytes", "4K", "--retention-bytes", "12K")
    pub = RawClient(b.endpoint).attach("ret")
    for r in range(20):                       # segments roll, the old ones are deleted
        publish(pub, 20, size=100, start=20 * r)
    pub.send(c.StreamInfo())
    first = pub.expect(c.StreamInfoOk).first
    assert first > 1
    r = zeps("replay", "ret", "--to-time", "1", "--endpoint", b.endpoint, timeout=20)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = zeps("replay", "ret", "--to-seq", "2", "--endpoint", b.endpoint, timeout=20)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "", "zeps: warning: messages 1..2 were deleted (retention or a purge)\n")
    r = zeps("publish", "p", "k", "-", "--endpoint", b.endpoint, input="1\n2\n3\n4\n5\n")
    assert r.returncode == 0, r.stderr
    r = zeps("stream", "purge", "p", "--upto", "3", "--yes", "--endpoint", b.endpoint)
    assert r.returncode == 0, r.stderr
    b.stop()
    for stream in ("ret", "p"):
        r = zeps("replay", stream, "--to-time", "1", "--data-dir", str(tmp_path / "d"))
        assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), stream
