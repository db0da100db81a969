"""Opening a journal off the loop: an ATTACH to a stream whose journal is not open waits for
the shell to open it (``Round.to_open``, ``BrokerCore.opened``), and what the client sends
meanwhile is held and handled in order. The harness opens at once after each message; these
tests hand frames to the core directly to play a slow disk."""
from __future__ import annotations

from tests.core_harness import Core, core_fixture, make_fixture  # noqa: F401 (fixtures)
from zeps.broker.attaching import MAX_WAITING
from zeps.protocol import encode
from zeps.protocol import commands as c
from zeps.protocol.reasons import LIMIT

A = b"a"


def slow(h: Core, ident: bytes, *cmds: c.Command) -> None:
    """Each command reaches the core while no journal opens (the disk is busy)."""
    for cmd in cmds:
        h.core.receive(ident, [encode(cmd)], h.now)
    h.collect()


def test_an_attach_waits_for_its_journal_and_what_follows_is_handled_in_order(core):
    slow(core, A, c.Attach("new"), c.Publish("k", b"one"), c.Ping())
    assert core.take(A) == [], "nothing is answered before the journal is open"
    assert "new" not in core.core.streams
    core.open_streams()
    core.round()
    assert core.take(A) == [c.AttachOk(), c.PingOk()]
    assert [r.body for r in core.core.streams["new"].journal.read_batch(1)] == [b"one"]


def test_pipelined_attaches_and_detaches_each_get_their_answer(core):
    cmds = []
    for i in range(5):
        cmds += [c.Attach(f"s{i}"), c.Detach()]
    slow(core, A, *cmds)
    for i in range(5):
        names = core.core.take_opens()
        assert names == [f"s{i}"], "one open at a time, in the client's order"
        core.open_streams(names)
        core.collect()
    assert core.take(A) == [c.AttachOk(), c.DetachOk()] * 5


def test_a_client_waiting_for_a_journal_does_not_delay_another(core):
    core.publish("k", stream="old", ident=b"pub")
    core.take(b"pub")
    slow(core, A, c.Attach("new"))
    slow(core, b"pub", c.Publish("k", b"two"), c.Ping())
    assert core.take(b"pub") == [c.PingOk()]
    assert core.take(A) == []


def test_what_a_waiting_client_sends_is_bounded(core):
    slow(core, A, c.Attach("new"))
    slow(core, A, *[c.Ping()] * (MAX_WAITING + 2))
    refusals = core.take(A)
    assert len(refusals) == 2 and all(r.reason.startswith(LIMIT) for r in refusals), refusals
    core.open_streams()
    core.collect()
    got = core.take(A)
    assert got[0] == c.AttachOk() and got[1:] == [c.PingOk()] * MAX_WAITING


def test_a_journal_that_cannot_open_answers_the_attach_and_then_the_rest(core):
    slow(core, A, c.Attach("bad"), c.Publish("k", b"x"))
    core.core.take_opens()
    core.core.opened("bad", OSError("disk gone"), core.now)
    core.collect()
    failed, refused = core.take(A)
    assert "disk gone" in failed.reason
    assert refused.reason.startswith("not attached") or "ATTACH" in refused.reason, refused


def test_a_client_forgotten_while_waiting_is_not_answered(core):
    slow(core, A, c.Attach("new"), c.Ping())
    core.core.gone(A)
    core.open_streams()
    core.collect()
    assert core.take(A) == []
    assert A not in core.core.sessions


def test_administration_of_a_stream_being_opened_waits_until_it_is_open(core):
    """STREAM-DESCRIBE and DELETE of a stream an ATTACH is opening wait for the open, as the
    ATTACH does, and are answered in order after it (they were told to retry, which the SDK
    does not)."""
    core.publish("k", stream="s", ident=b"pub")
    core.send(b"pub", c.Detach())
    core.core._release_idle_streams(0)              # closed (LRU): the next ATTACH reopens it
    assert not core.datadir.is_open("s")
    slow(core, A, c.Attach("s"))
    slow(core, b"admin", c.StreamDescribe("s"))
    slow(core, b"other", c.StreamDelete("s"))
    assert core.take(b"admin") == [] and core.take(b"other") == []
    core.open_streams()
    core.collect()
    assert core.take(A)[0] == c.AttachOk()
    [described] = core.take(b"admin")
    assert described.last == 1
    assert core.take(b"other") == [c.StreamDeleteOk()]
    assert "s" not in core.core.catalogue


def test_stream_settings_of_a_stream_being_opened_are_answered_at_once(core):
    """STREAM-SETTINGS reads only what the stream's creation wrote: it is answered while an
    ATTACH opens the stream (it was told to retry, which the SDK does not)."""
    core.send(b"admin", c.StreamCreate("s", 0, 0, 4096, 0))
    assert core.take(b"admin") == [c.StreamCreateOk()]
    slow(core, A, c.Attach("s"))
    assert "s" in core.core.opening and core.take(A) == []
    slow(core, b"admin", c.StreamSettingsGet("s"))
    [settings] = core.take(b"admin")
    assert isinstance(settings, c.StreamCreateX) and settings.max_message == 4096, settings
    core.open_streams()
    core.collect()
    assert core.take(A) == [c.AttachOk()]
