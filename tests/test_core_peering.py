"""A peering's life in the broker core, driven in-process (tests/core_harness.py): ATTACH,
DETACH and re-ATTACH, expiry of a silent client, forget of a client whose connection is gone.

Whatever ends a peering and in whatever order, nothing of it may be left behind: no
subscription, no credit, no replay in progress, no pending confirm, no timestamps option; a
later ATTACH on the same connection starts from nothing.
"""
from __future__ import annotations

import pytest

from tests.core_harness import Core, core_fixture, cost, make_fixture  # noqa: F401 (fixtures)
from zeps.protocol import LATEST_LIVE, encode
from zeps.protocol import commands as c
from zeps.protocol.reasons import NOT_ATTACHED

X = b"x"
PUB = b"pub"
EXPIRY = 10.0


def full_peering(h: Core) -> None:
    """X holds everything a peering can: confirms and timestamps selected, credit, a pattern,
    a replay in progress over 20 records, an own publish not yet durable (fsync=interval)."""
    h.publish(*[f"a{i}" for i in range(20)])
    h.send(X, c.Attach("s"), c.ConfirmSelect(), c.DeliverTimestamps(), c.Credit(1 << 20),
           c.Subscribe("a", 0), c.Publish("a-own", b"x"))
    h.round()                                        # one replay batch of 2: still catching up
    st = h.core.streams["s"]
    assert X in st.catching_up and X in st.confirming, "the setup holds less than it should"
    h.take(X)


def expire(h: Core, alive=(PUB,)) -> None:
    """Let the expiry pass twice with X silent (the first check may count deliveries X took as
    a sign of life); the clients in ``alive`` speak meanwhile."""
    for _ in range(2):
        h.now += EXPIRY + h.core.config.expiry_check
        for ident in alive:
            h.send(ident, c.Ping())
            h.take(ident)
        h.tick()


STEPS = {
    "detach": lambda h: h.send(X, c.Detach()),
    "expire": expire,
    "gone": lambda h: h.core.gone(X),
    "attach-t": lambda h: h.send(X, c.Attach("t"), c.Credit(100), c.Subscribe("", 0)),
    "held": lambda h: (h.pipe.__setitem__(X, 0), h.send(X, c.Ping())),    # X's pipe is full
}


@pytest.mark.parametrize("order", [
    ["detach"], ["expire"], ["gone"],
    ["detach", "expire"], ["expire", "detach"],
    ["detach", "gone"], ["gone", "detach"],
    ["detach", "attach-t", "detach"], ["detach", "attach-t", "expire"],
    ["detach", "attach-t", "gone"],
    ["held", "detach"], ["held", "expire"], ["held", "gone"], ["held", "detach", "gone"],
], ids="-".join)
def test_nothing_of_a_peering_is_left_whatever_ends_it_and_in_whatever_order(make, order):
    h = make(fsync="interval", expiry=EXPIRY, replay_batch_records=2)
    full_peering(h)
    replies = []
    for step in order:
        STEPS[step](h)
        replies += h.kinds(X)
        if step not in ("attach-t", "held"):        # every other step ends the peering
            assert h.leftovers(X) == [], f"after {step}"
    h.pipe.clear()                                   # X reads again: what was held comes
    h.now += 1.0
    h.round()
    replies += h.kinds(X)
    expected = {
        "detach": [c.DetachOk], "expire": [c.Detach], "gone": [],
        "detach-expire": [c.DetachOk],               # nothing is told to a client it forgot
        "expire-detach": [c.Detach, c.Invalid],
        "detach-gone": [c.DetachOk], "gone-detach": [c.Invalid],
        "detach-attach-t-detach": [c.DetachOk, c.AttachOk, c.SubscribeOk, c.DetachOk],
        "detach-attach-t-expire": [c.DetachOk, c.AttachOk, c.SubscribeOk, c.Detach],
        "detach-attach-t-gone": [c.DetachOk, c.AttachOk, c.SubscribeOk],
        "held-detach": [c.PingOk, c.DetachOk],       # the session lives on for what it holds
        "held-expire": [], "held-gone": [], "held-detach-gone": [],
    }["-".join(order)]
    assert replies == expected
    # The same connection again: a fresh peering, live for "b" with credit for one message.
    h.send(X, c.Attach("s"), c.Subscribe("b", LATEST_LIVE), c.Credit(cost("b1")))
    h.publish("a1", "b1", "b2")
    h.now += 1.0
    h.sync_and_confirm(h.tick())
    h.drain()
    assert h.take(X) == [c.AttachOk(), c.SubscribeOk(), c.Deliver(23, "b1", b"x")], \
        "the old pattern, replay, credit, timestamps or confirms reached the new peering"


def test_detach_then_attach_keeps_no_subscription(core):
    """ATTACH s, CREDIT, SUBSCRIBE "a" live, DETACH, ATTACH s, CREDIT, SUBSCRIBE "b" live: a1 and
    b1 published by another client; only b1 may arrive."""
    core.send(X, c.Attach("s"), c.Credit(1 << 20), c.Subscribe("a", LATEST_LIVE), c.Detach(),
              c.Attach("s"), c.Credit(1 << 20), c.Subscribe("b", LATEST_LIVE))
    assert core.kinds(X) == [c.AttachOk, c.SubscribeOk, c.DetachOk, c.AttachOk, c.SubscribeOk]
    core.publish("a1", "b1")
    assert core.delivered(X) == [(2, "b1")]
    assert X not in core.core.streams["s"].index.match("a1")


def test_publishes_received_before_detach_reach_the_old_peering_before_detach_ok(core):
    core.subscriber(X)
    core.send(PUB, c.Attach("s"))
    core.core.receive(PUB, [encode(c.Publish("k1", b"x"))], core.now)     # queued, not journalled
    core.send(X, c.Detach())
    assert core.take(X) == [c.Deliver(1, "k1", b"x"), c.DetachOk()]


def test_a_clean_detach_frees_the_session(core):
    core.subscriber(X)
    core.send(X, c.Detach())
    assert core.traces(X) == []


def test_reattach_to_another_stream_follows_only_that_stream(core):
    core.subscriber(X, stream="s")
    core.send(X, c.Detach(), c.Attach("t"), c.Credit(1 << 20), c.Subscribe("", LATEST_LIVE))
    core.take(X)
    core.publish("on-s", stream="s", ident=b"ps")
    core.publish("on-t", stream="t", ident=b"pt")
    assert core.delivered(X) == [(1, "on-t")]


# ---------------------------------------------------------------------------- expiry


def test_a_silent_client_is_told_detach_and_forgotten(make):
    h = make(expiry=EXPIRY)
    h.subscriber(X)
    h.now += 1
    h.tick()                                         # a check: X is silent for only 1 s
    assert X in h.core.sessions
    h.now += EXPIRY
    h.tick()
    assert h.take(X) == [c.Detach()]
    assert h.traces(X) == [] and h.logged("client_expired") == [{"client": X.hex()}]
    h.publish("k1")
    h.send(X, c.Credit(100))
    assert h.take(X) == [c.Invalid(f"{NOT_ATTACHED}CREDIT before ATTACH")]


def test_expiry_is_checked_on_its_schedule(make):
    h = make(expiry=EXPIRY, expiry_check=1.0, retention_check=1e9, fsync="never")
    h.send(X, c.Attach("s"))
    h.take(X)
    start = h.now
    h.now = start + EXPIRY - 0.5
    h.tick()                                         # checked: silent 9.5 s, not yet expired
    assert h.core.next_deadline() == start + EXPIRY + 0.5
    h.now = start + EXPIRY + 0.2
    h.tick()                                         # silent 10.2 s, but no check is due
    assert X in h.core.sessions
    h.now = start + EXPIRY + 0.5
    h.tick()
    assert h.take(X) == [c.Detach()] and X not in h.core.sessions


def test_deliveries_a_client_takes_keep_it_alive(make):
    """X never sends after SUBSCRIBE but takes a message every second: it outlives several
    expiries. Once nothing comes, it is expired within the expiry and a check or two."""
    h = make(expiry=EXPIRY, expiry_check=1.0)
    h.subscriber(X)
    h.send(PUB, c.Attach("s"))
    for i in range(1, 6 * int(EXPIRY)):
        h.now += 1.0
        h.send(PUB, c.Publish(f"k{i}", b"x"))
        h.round()
        assert h.delivered(X) == [(i, f"k{i}")]
    last = h.now
    while X in h.core.sessions:
        h.now += 0.5
        h.send(PUB, c.Ping())
        h.round()
    check = h.core.config.expiry_check        # deliveries count as life as of the check before
    assert EXPIRY - check <= h.now - last <= EXPIRY + 2 * check
    assert h.take(X) == [c.Detach()]


def test_a_client_that_only_publishes_keeps_alive(make):
    h = make(expiry=EXPIRY, expiry_check=1.0)
    h.send(PUB, c.Attach("s"))
    h.pipe[PUB] = 0                                  # and never reads
    for i in range(1, 6 * int(EXPIRY)):
        h.now += 1.0
        if i % 5 == 0:
            h.core.receive(PUB, [encode(c.Publish("k", b"x"))], h.now)
        h.round()
    assert PUB in h.core.sessions and h.core.sessions[PUB].stream == "s"
    assert h.core.streams["s"].journal.last_seq == 11


# Regression (found by this test, fixed in the core): a client that never reads stays alive
# forever when its congestion backoff and the expiry check fall due in the same shell round:
# pump() ends the congestion (congested_until = 0) and replays, tick() then counts those
# DELIVERs as a sign of life (expire() bumps last_seen), and only afterwards does the send fail.
# Counting a DELIVER when it is handed back by unsent() (or ticking before pump) would fix it.
def test_a_client_that_never_reads_is_expired(make):
    h = make(expiry=EXPIRY, expiry_check=1.0, congestion_backoff=1.0, congestion_backoff_max=1.0)
    h.publish("k1")
    h.subscriber(X, latest=0)
    h.pipe[X] = 0                                    # its pipe is full and it never reads
    h.round()
    start = h.now
    while X in h.core.sessions and h.now < start + 10 * EXPIRY:
        h.now = h.core.next_deadline()               # the shell wakes at the core's deadline
        h.round()
    assert X not in h.core.sessions, f"still attached after {h.now - start:.0f} s"


# ---------------------------------------------------------------------------- forget


def test_a_client_whose_connection_is_gone_is_forgotten_without_a_word(make):
    h = make(fsync="interval", replay_batch_records=2)
    full_peering(h)
    h.pipe[X] = 0
    h.send(X, c.Ping())                              # held: X is congested too
    assert X in h.core.congested
    h.core.gone(X)
    h.collect()
    assert h.traces(X) == [] and h.unsent[-1:] == [(X, c.PingOk())]
    h.pipe.clear()
    h.now += 5.0
    h.publish("a-late")
    h.sync_and_confirm(h.tick())
    h.drain()
    assert h.take(X) == [], "something was sent to a forgotten client"
    h.send(X, c.Subscribe("", 0))
    assert h.take(X) == [c.Invalid(f"{NOT_ATTACHED}SUBSCRIBE before ATTACH")]


def test_gone_of_an_unknown_client_changes_nothing(core):
    core.subscriber(X)
    core.core.gone(b"nobody")
    core.publish("k1")
    assert core.delivered(X) == [(1, "k1")]
