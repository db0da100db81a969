"""Congestion in the broker core, driven in-process (tests/core_harness.py models each client's
pipe: the shell hands back with ``unsent`` the frame that did not fit and every later frame of
that client in the batch).

A DELIVER that did not fit goes back to the journal: the client is rewound to it, its credit is
returned, and once ``pump(now)`` runs after the backoff it gets it again, nothing lost or
duplicated. Any other frame is held and sent in order when the congestion ends; a client holding
more than ``max_held`` is forgotten. The backoff doubles up to its maximum.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.core_harness import Core, core_fixture, cost, make_fixture  # noqa: F401 (fixtures)
from zeps.protocol import LATEST_LIVE, encode
from zeps.protocol import commands as c
from .property_examples import examples

X = b"x"
PUB = b"pub"
KEYS = [f"k{i}" for i in range(1, 7)]


def publish_batch(h: Core, keys, body: bytes = b"x") -> None:
    """One journal batch from PUB, routed live (no replay step)."""
    if PUB not in h.core.sessions:
        h.send(PUB, c.Attach("s"))
    for k in keys:
        h.core.receive(PUB, [encode(c.Publish(k, body))], h.now)
    h.core.append_queued()
    h.collect()


@pytest.mark.parametrize("timestamps", [False, True], ids=["DELIVER", "DELIVER-TS"])
@pytest.mark.parametrize("room", [0, 1, 3, 5])
def test_an_unsent_deliver_is_replayed_after_the_backoff_nothing_lost_or_duplicated(
        make, room, timestamps):
    h = make(congestion_backoff=0.5)
    h.send(X, c.Attach("s"), *([c.DeliverTimestamps()] if timestamps else []),
           c.Credit(sum(cost(k) for k in KEYS)), c.Subscribe("", LATEST_LIVE))
    h.take(X)
    h.pipe[X] = room                                 # its pipe takes ``room`` more frames
    publish_batch(h, KEYS)
    want = [(i + 1, k) for i, k in enumerate(KEYS)]
    assert h.delivered(X) == want[:room]
    assert [(m.sequence, m.key) for _i, m in h.unsent] == want[room:]
    del h.pipe[X]                                    # it reads again
    h.now += 0.49
    h.round()
    assert h.delivered(X) == [], "a DELIVER was produced before the backoff ended"
    h.now += 0.01
    h.drain()
    got = h.take(X)
    assert all(isinstance(m, c.DeliverTs if timestamps else c.Deliver) for m in got)
    assert [(m.sequence, m.key) for m in got] == want[room:]
    publish_batch(h, ["k7"])                         # the credit was exactly used, not more
    h.drain()
    assert h.delivered(X) == []
    h.send(X, c.Credit(cost("k7")))
    h.drain()
    assert h.delivered(X) == [(7, "k7")]


def test_a_replayed_deliver_that_does_not_fit_is_replayed_again(make):
    h = make(replay_batch_records=3)
    publish_batch(h, KEYS)
    h.pipe[X] = 2 + 2                                # ATTACH-OK, SUBSCRIBE-OK, then 2 DELIVERs
    h.subscriber(X, latest=0)
    h.round()
    assert h.delivered(X) == [(1, "k1"), (2, "k2")]
    del h.pipe[X]                                    # it reads again, but the backoff is on
    h.round()
    assert h.delivered(X) == [], "the replay went on during the backoff"
    h.pipe[X] = 1
    h.now += 1.0
    h.round()
    assert h.delivered(X) == [(3, "k3")]
    del h.pipe[X]
    h.now += 1.0
    h.drain()
    assert h.delivered(X) == [(i, f"k{i}") for i in range(4, 7)]


def test_replies_to_a_congested_client_are_held_and_sent_in_order(make):
    h = make(congestion_backoff=0.5)
    h.subscriber(X)
    h.pipe[X] = 0
    h.send(X, c.Ping(), c.StreamInfo(), c.Subscribe("b", LATEST_LIVE), c.Ping())
    publish_batch(h, ["k1", "k2"])
    assert h.take(X) == []
    held = [type(m) for _i, m in h.unsent if not isinstance(m, c.Deliver)]
    assert held == [c.PingOk, c.StreamInfoOk, c.SubscribeOk, c.PingOk]
    del h.pipe[X]
    h.now += 0.5
    h.drain()
    assert h.kinds(X) == [c.PingOk, c.StreamInfoOk, c.SubscribeOk, c.PingOk, c.Deliver, c.Deliver]


@pytest.mark.parametrize("replies", [3, 4])
def test_a_client_holding_more_than_max_held_replies_is_forgotten(make, replies):
    h = make(max_held=3)
    h.subscriber(X)
    h.subscriber(b"other")
    h.pipe[X] = 0
    for _ in range(replies):
        h.send(X, c.Ping())
    forgotten = replies > 3
    assert (h.traces(X) == []) == forgotten
    assert h.logged("client_unresponsive_forgotten") == ([{"client": X.hex(), "held": 4}]
                                                          if forgotten else [])
    publish_batch(h, ["k1"])
    assert h.delivered(b"other") == [(1, "k1")], "another client suffered"
    del h.pipe[X]
    h.now += 1.0
    h.drain()
    assert h.kinds(X) == ([] if forgotten else [c.PingOk] * 3 + [c.Deliver])


def test_the_backoff_doubles_up_to_its_max(make):
    h = make(congestion_backoff=0.01, congestion_backoff_max=0.05, expiry_check=1e9,
             retention_check=1e9, fsync="never")
    h.tick()                                         # the timers are far away: only congestion
    h.publish("k1")
    h.subscriber(X, latest=0)
    h.pipe[X] = 0                                    # never reads
    h.round()
    waits = []
    for _ in range(5):
        deadline = h.core.next_deadline()
        waits.append(round(deadline - h.now, 6))
        h.now = deadline - 0.001
        h.round()
        assert h.core.next_deadline() == deadline, "replayed before the backoff ended"
        h.now = deadline
        h.round()                                    # replays k1, which does not fit again
    assert waits == [0.01, 0.02, 0.04, 0.05, 0.05]
    assert [m for _i, m in h.unsent] == [c.Deliver(1, "k1", b"x")] * 6


def test_the_backoff_starts_over_once_the_client_reads_again(make):
    h = make(congestion_backoff=0.01, congestion_backoff_max=1.0, expiry_check=1e9,
             retention_check=1e9, fsync="never")
    h.tick()
    h.subscriber(X, latest=0)
    for round_ in range(3):                          # congested three times, reading between
        h.pipe[X] = 0
        h.publish(f"k{round_}")
        assert round(h.core.next_deadline() - h.now, 6) == 0.01, f"congestion {round_}"
        del h.pipe[X]
        h.now = h.core.next_deadline()
        h.round()
        assert h.delivered(X) == [(round_ + 1, f"k{round_}")]
    assert h.core.sessions[X].backoff == 0.0


def test_a_gone_or_forgotten_clients_unsent_frames_are_dropped(core):
    core.subscriber(X)
    publish_batch(core, ["k1"])
    core.take(X)
    core.core.gone(X)
    core.core.unsent(X, encode(c.Deliver(1, "k1", b"x")), core.now)   # a late report
    core.core.unsent(X, encode(c.PingOk()), core.now)
    assert core.traces(X) == []


# ---------------------------------------------------------------------------- regressions


# Regression (found by this test, fixed in the core): a client congested by a held reply (not a
# DELIVER) stays live, so flush() produces DELIVERs for it during the backoff; when its pipe has
# room by then they are sent before the held SUBSCRIBE-OK (docs/protocol.md: SUBSCRIBE-OK comes
# before any DELIVER it causes; session.py: no DELIVER is produced before congested_until).
def test_no_deliver_overtakes_a_held_subscribe_ok(make):
    h = make(congestion_backoff=0.5)
    h.send(X, c.Attach("s"), c.Credit(1 << 20))
    h.pipe[X] = 0
    h.send(X, c.Subscribe("", LATEST_LIVE))          # SUBSCRIBE-OK does not fit: held
    del h.pipe[X]                                    # the client reads its pipe empty
    publish_batch(h, ["k1"])
    h.now += 0.5
    h.drain()
    assert h.kinds(X) == [c.AttachOk, c.SubscribeOk, c.Deliver]


# Regression (found by this test, fixed in the core): a reply to a congested client goes to the
# outbox, not behind the replies it holds, so when the pipe has room again before the backoff
# ends it overtakes them
def test_a_reply_never_overtakes_a_held_one(make):
    h = make(congestion_backoff=0.5)
    h.send(X, c.Attach("s"))
    h.pipe[X] = 0
    h.send(X, c.StreamInfo())                        # held
    del h.pipe[X]
    h.send(X, c.Ping())
    h.now += 0.5
    h.round()
    assert h.kinds(X) == [c.AttachOk, c.StreamInfoOk, c.PingOk]


def test_a_confirm_never_overtakes_a_refusal_held_for_a_congested_publisher(make):
    """A confirming publisher's refusal is held (its pipe was full); its next publish is stored
    and confirmed by the round's append, outside its own command: that CONFIRM waits behind
    the refusal too. (It went out first once the pipe had room: the SDK, which fails its oldest
    unconfirmed publish on a refusal, resolved the refused one as stored and failed the stored
    one; found by review.)"""
    h = make(congestion_backoff=0.5, fsync="always", max_message=8)
    h.send(PUB, c.Attach("s"), c.ConfirmSelect())
    assert h.kinds(PUB) == [c.AttachOk, c.ConfirmSelectOk]
    h.pipe[PUB] = 0
    h.send(PUB, c.Publish("k", b"123456789"))       # refused at once: held
    del h.pipe[PUB]
    h.send(PUB, c.Publish("k", b"ok"))
    h.round()                                       # appended, durable: CONFIRM
    assert h.take(PUB) == []
    h.now += 0.5
    h.round()
    refused, confirm = h.take(PUB)
    assert "body of 9 bytes" in refused.reason and confirm == c.Confirm(1, 1)


# Regression (found by this test, fixed in the core): a clean DETACH frees the session before
# the shell tries to send DETACH-OK; if the client's pipe is full then, unsent() finds no
# session and DETACH-OK is dropped (a client that sent DETACH behind a backlog of DELIVERs never
# gets its answer)
def test_detach_ok_reaches_a_client_whose_pipe_was_full(make):
    h = make(congestion_backoff=0.5)
    h.subscriber(X)
    h.pipe[X] = 0
    h.send(X, c.Detach())
    del h.pipe[X]
    h.now += 1.0
    h.drain()
    assert h.kinds(X) == [c.DetachOk]


# Regression (found by this test, fixed in the core): a DELIVER of an ended peering handed back
# by the shell (DETACH, ATTACH, SUBSCRIBE, CREDIT read in the same round as it was routed) is
# credited to the new peering: stream.unsent() finds the new session on the same stream and
# returns the old frame's cost to it, so the new peering receives more than the credit it
# granted
def test_an_unsent_deliver_of_an_ended_peering_gives_nothing_to_the_next(make):
    h = make()
    h.subscriber(X)
    h.send(PUB, c.Attach("s"))
    h.core.receive(PUB, [encode(c.Publish("k1", b"x"))], h.now)    # queued
    h.pipe[X] = 0
    for cmd in (c.Detach(), c.Attach("s"), c.Subscribe("", 0), c.Credit(cost("k1"))):
        h.core.receive(X, [encode(cmd)], h.now)      # one shell round: DETACH routes k1 first
    h.collect()
    assert [type(m) for _i, m in h.unsent][:1] == [c.Deliver]
    del h.pipe[X]
    publish_batch(h, ["k2"])
    h.now += 1.0
    h.drain()
    assert h.kinds(X) == [c.DetachOk, c.AttachOk, c.SubscribeOk, c.Deliver], \
        "the new peering granted credit for one message"


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("publish"), st.integers(1, 3)),
    st.tuples(st.just("block"), st.integers(0, 5), st.integers(0, 2)),
    st.tuples(st.just("read"), st.integers(0, 5)),
    st.tuples(st.just("wait"), st.sampled_from([0.0, 0.004, 0.01, 0.03, 0.1]))),
    max_size=40))
def test_many_clients_congest_and_recover_each_at_its_deadline(make, steps):
    """Clients that stop reading at any time, with any room left, and read again later: after
    every round no congestion that is due is left, the core's next deadline is the soonest end
    of a congestion, and once everyone reads, every client has every message once, in order
    (the congestions end from a heap of deadlines, not a scan of every client)."""
    h = make(congestion_backoff=0.01, congestion_backoff_max=0.05, expiry_check=1e9,
             retention_check=1e9, fsync="never")
    clients = [b"c%d" % i for i in range(6)]
    for ident in clients:
        h.subscriber(ident)
    got = {ident: [] for ident in clients}
    published = 0

    def check() -> None:
        core = h.core
        for ident in clients:
            got[ident] += h.delivered(ident)
        ends = [s.congested_until for s in core.congested.values()]
        assert all(until > h.now for until in ends), "a due congestion was not ended"
        assert all(s.congested_until == 0 for i, s in core.sessions.items()
                   if i not in core.congested)
        if ends:
            assert core.next_deadline() <= min(ends)
            assert core.congestion_deadline() == min(ends)

    for step in steps:
        if step[0] == "publish":
            h.publish(*(f"k{published + i + 1}" for i in range(step[1])))
            published += step[1]
        elif step[0] == "block":
            h.pipe[clients[step[1]]] = step[2]
        elif step[0] == "read":
            h.pipe.pop(clients[step[1]], None)
        else:
            h.now += step[1]
        h.round()
        check()
    h.pipe.clear()
    for _ in range(20):                      # everyone reads: past every backoff, then drain
        h.now += 0.06
        h.drain()
        check()
    want = [(i, f"k{i}") for i in range(1, published + 1)]
    assert all(got[ident] == want for ident in clients), got
    assert not h.core.congested


# Regression (found by this test, fixed in the core): the DETACH of a client whose stream or
# consumer another client deleted went to the outbox, not behind the replies the client held,
# so when its pipe had room again before the backoff ended it overtook them (a CONFIRM or a
# PING-OK of the ended peering came after its DETACH)
@pytest.mark.parametrize("deleted", ["stream", "consumer"])
def test_a_detach_for_a_deletion_never_overtakes_a_held_reply(make, deleted):
    h = make(congestion_backoff=0.5)
    if deleted == "stream":
        h.subscriber(X)
    else:
        h.send(b"admin", c.Attach("s"), c.ConsumerAdd("g"))
        h.take(b"admin")
        h.send(X, c.Attach("s"), c.Credit(1 << 20), c.Consume("g"))
        assert h.kinds(X) == [c.AttachOk, c.ConsumeOk]
    h.pipe[X] = 0
    h.send(X, c.Ping())                              # PING-OK does not fit: held
    del h.pipe[X]                                    # the client reads its pipe empty
    h.send(b"admin", c.Attach("s") if deleted == "stream" else c.Ping(),
           c.StreamDelete("s") if deleted == "stream" else c.ConsumerDelete("g"))
    assert h.kinds(X) == [], "the DETACH overtook the held PING-OK"
    h.now += 0.5
    h.drain()
    assert h.kinds(X) == [c.PingOk, c.Detach]

