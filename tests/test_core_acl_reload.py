"""Rights a hostile or demoted client must not keep (review of the ACL, the listing and the
administration commands): an ACL reload ends at once whatever the client may no longer do,
the listing names no stream the ACL hides, and what a connection spent stays spent across its
re-ATTACHes. Core harness: the broker core over real journals, a clock the test moves."""
from __future__ import annotations

from zeps.broker.acl import parse_acl
from zeps.broker.admin import LIST_SCAN
from zeps.protocol import commands as c
from zeps.protocol import encode

from .core_harness import Core, make_fixture  # noqa: F401 (the make fixture)

ADMIN, READER = "A" * 40, "R" * 40


def acl(reader: str):
    """``admin`` may do anything; ``r`` gets the rule ``reader`` (TOML lines, or none)."""
    text = (f'[clients]\nadmin = "{ADMIN}"\nr = "{READER}"\n'
            '[[allow]]\nclients=["admin"]\npublish=["*"]\nsubscribe=["*"]\nadmin=["*"]\n')
    if reader:
        text += '[[allow]]\nclients=["r"]\n' + reader + "\n"
    return parse_acl(text)


def secured(h, reader: str, *readers: bytes):
    h.core.set_acl(acl(reader))
    for ident in (b"pub", b"admin"):
        h.core.identify(ident, ADMIN)
    for ident in readers:
        h.core.identify(ident, READER)


def not_allowed(msgs) -> list:
    return [m.reason for m in msgs if isinstance(m, c.Invalid)
            and m.reason.startswith("not allowed: ")]


def test_a_member_and_a_snapshot_end_when_the_read_right_goes(make):
    """An ACL reload took a reader's subscriptions away, but its membership of a durable
    consumer and its SNAPSHOT under way went on being fed. Both end at once, with one
    INVALID; what the member held goes to the other members."""
    h = make(fsync="never", key_index=True)
    secured(h, 'subscribe=["s"]', b"m", b"snap")
    h.publish("k.0", "k.1", "k.2")
    h.core.identify(b"other", ADMIN)
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd("g"))
    h.send(b"m", c.Attach("s"), c.Credit(1 << 20), c.Consume("g"))
    h.send(b"other", c.Attach("s"), c.Credit(1 << 20))
    h.drain()
    assert [seq for seq, _k in h.delivered(b"m")] == [1, 2, 3]
    h.send(b"snap", c.Attach("s"), c.Credit(40), c.Snapshot(("k.",)))   # one entry's credit
    h.drain()
    assert [type(m) for m in h.take(b"snap")][-1] is c.SnapshotEntry
    h.core.set_acl(acl('publish=["s"]'))               # r may publish, no longer read
    h.collect()
    for ident in (b"m", b"snap"):
        [why] = not_allowed(h.take(ident))
        assert "may no longer read stream 's'" in why
    h.publish("k.3", "k.4")
    h.send(b"snap", c.Credit(1 << 20))
    h.drain()
    assert h.delivered(b"m") == [] and h.take(b"snap") == []
    h.send(b"other", c.Consume("g"))                   # the member's messages go to others
    h.drain()
    assert [seq for seq, _k in h.delivered(b"other")] == [1, 2, 3, 4, 5]


def test_a_client_left_with_no_right_on_its_stream_is_detached(make):
    """A reload that leaves a client no right on its stream: it stayed attached and was still
    answered STREAM-INFO, SEQ-AT and STREAM-ID. It is detached, told once, and refused."""
    h = make(fsync="never")
    secured(h, 'subscribe=["s"]', b"r")
    h.publish("k")
    h.send(b"r", c.Attach("s"))
    h.take(b"r")
    h.core.set_acl(acl(""))
    h.collect()
    [why] = not_allowed(h.take(b"r"))
    assert "may no longer use stream 's': detached" in why
    h.send(b"r", c.StreamInfo(), c.SeqAtTime(0), c.StreamId())
    got = h.take(b"r")
    assert len(got) == 3 and all(isinstance(m, c.Invalid) for m in got), got


def test_the_listing_cursor_names_no_stream_the_client_may_not_read(make):
    """A page of names the ACL hides ended with the last of them as its ``next``: one hidden
    name per page. It is a token now, that a page of the same key takes on any connection (the
    SDK asks each page on a connection of its own), and the listing still reaches the names the
    client may read; another key's page refuses it."""
    h = make(fsync="never", admin_burst=100_000, max_total_streams=10**6)
    secured(h, 'subscribe=["public.*"]', b"r", b"r2")
    h.core.identify(b"admin2", ADMIN)
    names = [f"a-secret.payroll-{i:04d}" for i in range(LIST_SCAN)] + ["public.z"]
    for name in names:
        h.core.receive(b"admin", [encode(c.StreamCreate(name, 0, 0, 0, 0))], h.now)
    h.take(b"admin")
    h.send(b"r", c.ListStreamsPage(""))
    [page] = h.take(b"r")
    assert page.streams == () and page.next.startswith("\x00") and "secret" not in page.next
    h.send(b"admin2", c.ListStreamsPage(page.next))    # another key: refused
    assert isinstance(h.take(b"admin2")[0], c.Invalid)
    h.send(b"r2", c.ListStreamsPage(page.next))        # the same key, another connection
    [page] = h.take(b"r2")
    assert page.streams == ("public.z",) and page.next == ""


def test_consumer_info_does_not_name_a_dead_letter_stream_the_acl_hides(make):
    """CONSUMER-INFO named the consumer's dead-letter stream to a reader whose listing hides
    it."""
    import json
    h = make(fsync="never")
    secured(h, 'subscribe=["s"]', b"r")
    h.send(b"admin", c.Attach("s"), c.ConsumerAdd("g", dead_letter="secret.dlq"))
    h.take(b"admin")
    h.send(b"r", c.Attach("s"), c.ListStreams(), c.ConsumerInfo("g"))
    _ok, listing, info = h.take(b"r")
    assert listing.streams == ("s",)
    config = json.loads(info.info)["config"]
    assert config["dead_letter"] == "" and config["dead_letter_hidden"] is True
    h.send(b"admin", c.ConsumerInfo("g"))
    assert json.loads(h.take(b"admin")[0].info)["config"]["dead_letter"] == "secret.dlq"


def test_a_detach_keeps_what_the_connection_spent(make):
    """DETACH freed the session, and the next command made a new one with a full budget for
    administration commands and no producer ids: ATTACH and DETACH between commands lifted
    ``--admin-rate`` and ``--max-producer-ids`` (documented to hold across re-ATTACHes)."""
    h = make(fsync="never", admin_rate=0.001, admin_burst=3, max_producer_ids=2)
    h.send(b"x", *[c.ListStreams()] * 3)
    assert all(isinstance(m, c.ListStreamsOk) for m in h.take(b"x"))
    answered = 0
    for _ in range(10):
        h.send(b"x", c.Attach("s"), c.Detach(), c.ListStreams())
        answered += sum(isinstance(m, c.ListStreamsOk) for m in h.take(b"x"))
    assert answered == 0
    accepted = 0
    for i in range(10):
        h.send(b"p", c.Attach("s"), c.Producer(f"id-{i}", 1), c.Detach())
        accepted += sum(isinstance(m, c.ProducerOk) for m in h.take(b"p"))
    assert accepted == 2
    h.core.gone(b"x")                                  # a new connection starts afresh
    h.send(b"x", c.ListStreams())
    assert isinstance(h.take(b"x")[0], c.ListStreamsOk)


def test_an_admin_only_client_purges_and_deletes_its_own_stream(make):
    """The ``admin`` right alone: STREAM-CREATE worked, then PURGE and DELETE said the stream
    did not exist."""
    h = make(fsync="never")
    h.core.set_acl(parse_acl(f'[clients]\nops = "{ADMIN}"\n[[allow]]\nclients=["ops"]\n'
                             'admin=["x.*"]\n'))
    h.core.identify(b"ops", ADMIN)
    h.send(b"ops", c.StreamCreate("x.a", 0, 0, 0, 0), c.StreamPurge("x.a", 1),
           c.StreamDelete("x.a"))
    assert [type(m) for m in h.take(b"ops")] == [c.StreamCreateOk, c.StreamPurgeOk,
                                                 c.StreamDeleteOk]
    assert "x.a" not in h.core.catalogue


def test_describe_purge_and_delete_of_a_closed_stream_open_it_off_the_loop(make):
    """STREAM-DESCRIBE, PURGE and DELETE of a stream whose journal is closed opened it on the
    loop (its recovery, which costs what its segments do, while every client waited). The
    journal is opened by the shell, off the loop, as for ATTACH; the answer comes then."""
    h = make(fsync="never", max_open_streams=1)
    h.publish("k", ident=b"p1")
    h.send(b"p1", c.Detach())
    h.publish("k", ident=b"p2", stream="other")        # "s" is closed now
    assert not h.datadir.is_open("s")
    for cmd, ok in ((c.StreamDescribe("s"), c.StreamDescribeOk),
                    (c.StreamPurge("s", 1), c.StreamPurgeOk),
                    (c.StreamDelete("s"), c.StreamDeleteOk)):
        h.core.receive(b"ops", [encode(cmd)], h.now)
        assert h.core.take_opens() == ["s"] and not h.datadir.is_open("s")
        h.collect()
        assert h.take(b"ops") == []                    # no answer before it is open
        h.datadir.journal("s")
        h.core.opened("s", None, h.now)
        h.collect()
        assert [type(m) for m in h.take(b"ops")] == [ok]
        h.publish("k", ident=b"p-" + ok.NAME.encode(), stream=ok.NAME)   # closes "s" again


def test_admin_commands_waiting_for_an_open_join_it_and_are_judged_again(make):
    """Two STREAM-DESCRIBEs of a closed stream: the second was told to retry while the first
    one's open ran (the SDK does not retry). Both wait for it now. A DELETE waiting for the
    open is judged again once it is open: an ACL reload meanwhile took the admin right away,
    and the DELETE ran all the same."""
    h = make(fsync="never", max_open_streams=1)
    secured(h, 'admin=["*"]\nsubscribe=["*"]', b"x", b"y", b"r")
    for ident in (b"p2", b"p3"):
        h.core.identify(ident, ADMIN)
    h.publish("k", ident=b"pub")
    h.send(b"pub", c.Detach())
    h.publish("k", ident=b"p2", stream="other")        # "s" is closed now
    for ident in (b"x", b"y"):
        h.core.receive(ident, [encode(c.StreamDescribe("s"))], h.now)
    assert h.core.take_opens() == ["s"]
    h.datadir.journal("s")
    h.core.opened("s", None, h.now)
    h.collect()
    assert [type(m) for m in h.take(b"x") + h.take(b"y")] == [c.StreamDescribeOk] * 2
    h.publish("k", ident=b"p3", stream="third")        # closes "s" again
    h.core.receive(b"r", [encode(c.StreamDelete("s"))], h.now)
    assert h.core.take_opens() == ["s"]
    h.core.set_acl(acl('subscribe=["*"]'))             # r may no longer administer
    h.datadir.journal("s")
    h.core.opened("s", None, h.now)
    h.collect()
    [refused] = h.take(b"r")
    assert isinstance(refused, c.Invalid) and refused.reason.startswith("not allowed: ")
    assert "s" in h.core.catalogue
