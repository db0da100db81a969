"""Stream creation, listing and their budget in the core (issue 15, findings 1, 3, 11, 12): what
a client that creates or lists streams flat out can cost, driven in-process (tests/core_harness.py)
over a real data directory."""
from __future__ import annotations

import os

import pytest

from zeps.broker.admin import LIST_SCAN
from zeps.journal import DataDir, JournalConfig, JournalError
from zeps.journal.datadir import CREATING
from zeps.journal.names import stream_dir_name
from zeps.journal.settings import StreamSettings
from zeps.protocol import commands as c
from zeps.protocol.reasons import LIMIT, NO_STREAM

from .core_harness import Core, make_fixture, reasons  # noqa: F401 (the make fixture)

A, B = b"client-a", b"client-b"


def create(name: str, max_message: int = 0) -> c.StreamCreate:
    return c.StreamCreate(name, 0, 0, max_message, 0)


def test_stream_create_opens_no_journal_and_lists_the_stream(make):
    """Finding 1: each created stream kept its journal open outside the open-streams limit
    (4,993 creates took 19,996 descriptors). Created streams are now only a directory and their
    settings; the journal is opened by the first ATTACH, under --max-open-streams."""
    h = make(admin_burst=10_000, max_open_streams=5)
    for i in range(200):
        h.send(A, create(f"made-{i:03d}"))
    assert h.take(A) == [c.StreamCreateOk()] * 200
    assert h.datadir.open_journals() == {} and h.core.streams == {}
    h.send(A, c.ListStreams())
    [listing] = h.take(A)
    assert listing.streams == tuple(f"made-{i:03d}" for i in range(200))
    for i in range(20):                                   # attaching opens them, LRU-bounded
        h.send(B, c.Attach(f"made-{i:03d}"), c.Publish("k", b"x"), c.Detach())
    assert len(h.datadir.open_journals()) <= 5


def test_creating_past_max_total_streams_is_refused_and_the_others_keep_working(make):
    h = make(max_total_streams=3)
    h.send(A, create("one"), create("two"))
    h.send(B, c.Attach("three"))                           # a first ATTACH creates: counted
    assert h.take(A) == [c.StreamCreateOk()] * 2 and h.take(B) == [c.AttachOk()]
    h.send(A, create("four"))
    h.send(b"late", c.Attach("five"))
    [why_create] = reasons(h, A)
    [why_attach] = reasons(h, b"late")
    assert why_create.startswith(LIMIT) and "3 streams" in why_create
    assert why_attach.startswith(LIMIT) and "3 streams" in why_attach
    h.send(A, create("one"))                               # an existing one: still fine
    h.send(b"late", c.Attach("two"))
    assert h.take(A) == [c.StreamCreateOk()] and h.take(b"late") == [c.AttachOk()]
    h.send(A, c.StreamDelete("one"))                       # a slot freed
    h.send(A, create("four"))
    assert h.take(A) == [c.StreamDeleteOk(), c.StreamCreateOk()]


def test_listing_and_administration_are_paid_from_a_per_client_budget(make):
    """Finding 3: 100 LIST-STREAMS a second from one client with no rights took the whole
    broker. A client's listing and administration commands are paid from a token bucket that
    refills with the (injected) clock; another client's budget is its own."""
    h = make(admin_rate=10.0, admin_burst=20)
    for _ in range(25):
        h.send(A, c.ListStreams())
    replies = h.take(A)
    assert [type(m) for m in replies] == [c.ListStreamsOk] * 20 + [c.Invalid] * 5
    assert all(m.reason.startswith(LIMIT) for m in replies[20:])
    h.send(B, c.ListStreams(), create("x"), c.StreamDescribe("x"))
    assert [type(m) for m in h.take(B)] == [c.ListStreamsOk, c.StreamCreateOk, c.StreamDescribeOk]
    h.now += 0.5                                           # 5 more for A
    for _ in range(6):
        h.send(A, c.ListStreamsPage(""))
    assert [type(m) for m in h.take(A)] == [c.ListStreamsPageOk] * 5 + [c.Invalid]
    h.send(A, c.Ping(), c.Attach("x"), c.Publish("k", b"v"), c.StreamInfo())   # not charged
    assert [type(m) for m in h.take(A)] == [c.PingOk, c.AttachOk, c.StreamInfoOk]


def test_a_listing_page_looks_at_a_bounded_number_of_names_and_pages_cover_all(make, tmp_path):
    """LIST-STREAMS answers from memory, a page at a time: a page never looks at more than
    LIST_SCAN names (whatever the number of streams), and following ``next`` lists each stream
    once, in order."""
    data = tmp_path / "data0"
    names = sorted(f"s{i:05d}" for i in range(LIST_SCAN * 2 + 100))
    for n in names:
        os.makedirs(data / stream_dir_name(n))
    h = make(admin_burst=10_000)
    got, after, pages = [], "", 0
    while True:
        h.send(A, c.ListStreamsPage(after))
        [page] = h.take(A)
        assert len(page.streams) <= LIST_SCAN
        got.extend(page.streams)
        pages += 1
        if not page.next:
            break
        after = page.next
    assert got == names and pages == 3


def test_refused_settings_create_nothing(make):
    """Finding 11/12: a refused STREAM-CREATE (a max_message over the broker's --max-message)
    used to leave a stream that was listed, refused every ATTACH and answered a second CREATE
    with CREATE-OK. Now nothing is made, and a second CREATE is refused the same way."""
    h = make(max_message=1 << 20)
    for _ in range(2):
        h.send(A, create("huge", max_message=2**64 - 1))
        [why] = reasons(h, A)
        assert why.startswith(LIMIT) and "--max-message" in why
    h.send(A, c.ListStreams(), c.StreamDescribe("huge"))
    listing, refusal = h.take(A)
    assert listing.streams == () and refusal.reason.startswith(NO_STREAM)
    assert os.listdir(h.datadir.path) == ["LOCK"]


def test_a_stream_never_takes_a_body_over_the_brokers_limit(make, tmp_path):
    """Finding 12: a stream made with a larger max_message (by an older broker, or a broker
    that ran with a larger --max-message) is held to the broker's limit."""
    with DataDir(str(tmp_path / "data0"), JournalConfig(fsync="never")) as d:
        d.create("big", StreamSettings(max_message=1 << 20))
    h = make(max_message=100)
    h.send(A, c.Attach("big"), c.Publish("k", b"x" * 101), c.Publish("k", b"x" * 100),
           c.StreamInfo())
    msgs = h.take(A)
    assert "broker's limit of 100" in msgs[1].reason
    assert msgs[2].last == 1


def test_datadir_create_is_atomic_and_checks_its_settings_first(tmp_path):
    with DataDir(str(tmp_path / "d"), JournalConfig(fsync="never")) as d:
        with pytest.raises(JournalError, match="cannot be created with these settings"):
            d.create("bad", StreamSettings(max_message=2**64 - 1))
        assert d.streams() == [] and sorted(os.listdir(d.path)) == ["LOCK"]
        os.mkdir(os.path.join(d.path, CREATING + "half"))      # a crash mid-create
        assert d.create("good", StreamSettings(max_message=10)) is True
        assert d.open_journals() == {} and d.streams() == ["good"]
    with DataDir(str(tmp_path / "d"), JournalConfig(fsync="never")) as d:   # reopened
        assert not any(e.startswith(CREATING) for e in os.listdir(d.path))
        assert d.settings("good").max_message == 10
        assert d.journal("good").next_seq == 1


def test_describing_the_empty_name_gives_the_broker_defaults(tmp_path):
    """STREAM-DESCRIBE "" (issue 17, item 7): the settings in force for a stream without its
    own -- the broker's retention (0: none), max message and segment size -- and no state."""
    h = Core(tmp_path / "d", retention_bytes=5 << 20, segment_bytes=1 << 20, max_message=1000)
    try:
        h.send(A, c.StreamDescribe(""))
        assert h.take(A) == [c.StreamDescribeOk(0, 0, 0, 0, 0, 5 << 20, 0, 1000, 1 << 20)]
        assert "" not in h.core.catalogue and os.listdir(h.datadir.path) == ["LOCK"]
    finally:
        h.close()
