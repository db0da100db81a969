"""The receiver's pure core (zeps/multicast/receiver.py) and loss meter (zeps/multicast/loss.py).

Time is passed in; datagrams come from the real Sender; the broker's feed and its answers to head
checks are simulated from a list (the journal). The property test runs sender -> lossy,
reordering, duplicating network -> receiver <- feed, and checks the application sees exactly the
journal's matching messages."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.clients.message import Message
from zeps.multicast import datagram as dg
from zeps.multicast.loss import DUPLICATE, FAR, LATE, NEW, LossMeter
from zeps.multicast.receiver import FALLBACK, MULTICAST, Receiver, ReceiverConfig
from zeps.multicast.sender import Sender
from .property_examples import examples

CFG = ReceiverConfig(reorder_wait=0.05, min_datagrams=100)        # loss never falls back
LOSSY = ReceiverConfig(reorder_wait=0.05, loss_window=1.0, min_datagrams=5, return_windows=2)


def journal(n, key=lambda seq: "k"):
    return [Message(seq, key(seq), b"body%d" % seq, 1000 + seq, "s") for seq in range(1, n + 1)]


def one_per_datagram(msgs, start_after=0, session=1, pattern=""):
    """Each message in its own DATA datagram (chained), as a bridge with nothing batched."""
    s = Sender("s", pattern, session=session, start_after=start_after, now=0.0)
    s.tick(0.0)
    out = []
    for m in msgs:
        assert s.add(m.sequence, m.key, m.body, m.timestamp) == []
        out.append(s.flush())
    return out, s


def seqs(r):
    out = [m.sequence for m in r.ready]
    r.ready.clear()
    return out


def receiver(start_after=0, head=0, now=0.0, config=CFG, pattern=""):
    return Receiver("s", pattern, start_after=start_after, head=head, now=now, config=config)


def broker(r, last, now):
    """Answer the receiver's head check (if it asks for one) with the broker's ``last``, as
    MulticastSubscriber does with STREAM-INFO."""
    if getattr(r, "want_check", False):
        r.check_started(now)
        r.on_broker_head(last, now)


def serve(r, msgs, now, until, step=0.01):
    """Play the shell and the broker (whose journal is ``msgs``) until ``until()``: the feed
    brings the next message from ``feed_from`` while the receiver wants it, head checks are
    answered, time moves on by ``step`` otherwise."""
    last = msgs[-1].sequence
    for _ in range(10_000):
        if until():
            return now
        if r.want_feed:
            nxt = next((m for m in msgs if m.sequence >= r.feed_from), None)
            if nxt is not None:
                r.on_feed_message(nxt, now)
                continue
        if r.want_check:
            broker(r, last, now)
            continue
        now += step
        r.tick(now)
    raise AssertionError("the receiver never got there")


def test_in_order_datagrams_are_handed_after_one_head_check():
    msgs = journal(20)
    ds, _ = one_per_datagram(msgs)
    r = receiver()
    for d in ds:
        r.on_datagram(d, 0.01)
    assert not r.ready and r.want_check and not r.want_feed     # beyond the head known: check
    broker(r, 20, 0.01)
    assert list(r.ready) == msgs                  # the same messages, timestamps included
    assert not r.want_feed and not r.want_check
    assert r.stats.multicast == 20 and r.stats.repairs == 0 and r.stats.checks == 1


def test_entries_within_the_confirmed_head_need_no_check():
    msgs = journal(5)
    ds, _ = one_per_datagram(msgs)
    r = receiver()
    r.on_datagram(ds[0], 0.0)
    broker(r, 3, 0.0)                   # the broker already has 3
    for d in ds[1:3]:
        r.on_datagram(d, 0.0)
    assert seqs(r) == [1, 2, 3] and not r.want_check and r.stats.checks == 1
    r.on_datagram(ds[3], 0.0)
    assert seqs(r) == [] and r.want_check


def test_reordering_within_the_wait_needs_no_repair():
    ds, _ = one_per_datagram(journal(4))
    r = receiver()
    r.on_datagram(ds[0], 0.0)
    broker(r, 4, 0.0)
    r.on_datagram(ds[2], 0.01)          # 2 is late
    assert seqs(r) == [1] and not r.want_feed
    r.on_datagram(ds[1], 0.04)
    r.on_datagram(ds[3], 0.04)
    assert seqs(r) == [2, 3, 4] and not r.want_feed
    assert r.stats.reordered == 1 and r.stats.repairs == 0


def test_a_gap_is_fetched_after_the_reorder_wait_and_the_feed_closes_when_filled():
    msgs = journal(6)
    ds, _ = one_per_datagram(msgs)
    r = receiver()
    for i in (0, 3, 4, 5):              # 2 and 3 lost
        r.on_datagram(ds[i], 1.0)
    broker(r, 6, 1.0)
    assert seqs(r) == [1] and not r.want_feed
    assert r.next_deadline() == pytest.approx(1.05)
    r.tick(1.049)
    assert not r.want_feed
    r.tick(1.051)
    assert r.want_feed and r.feed_from == 2 and r.stats.repairs == 1
    r.on_feed_message(msgs[1], 1.06)
    assert seqs(r) == [2] and r.want_feed
    r.on_feed_message(msgs[2], 1.06)    # fills the gap: the buffered 4, 5, 6 follow
    assert seqs(r) == [3, 4, 5, 6] and not r.want_feed
    assert r.stats.unicast == 2 and r.stats.multicast == 4


def test_loss_at_the_tail_is_seen_from_the_head():
    msgs = journal(5)
    ds, s = one_per_datagram(msgs)
    r = receiver()
    for d in ds[:3]:                    # 4 and 5 lost, then the stream goes idle
        r.on_datagram(d, 0.0)
    broker(r, 5, 0.0)
    (head,) = s.tick(5.0)
    r.on_datagram(head, 5.0)
    assert seqs(r) == [1, 2, 3] and not r.want_feed
    r.tick(5.051)
    assert r.want_feed and r.feed_from == 4
    for m in msgs[3:]:
        r.on_feed_message(m, 5.1)
    assert seqs(r) == [4, 5] and not r.want_feed


def test_a_ref_entry_is_fetched_at_once():
    s = Sender("s", "", session=1, start_after=0, max_datagram=200, now=0.0)
    s.add(1, "k", b"x" * 500, 0)
    r = receiver()
    r.on_datagram(s.flush(), 0.0)
    broker(r, 1, 0.0)
    assert r.want_feed and r.feed_from == 1 and r.stats.refs == 1
    r.on_feed_message(Message(1, "k", b"x" * 500, 0, "s"), 0.0)
    assert seqs(r) == [1] and not r.want_feed


def test_duplicates_and_messages_that_came_both_ways_are_dropped():
    msgs = journal(3)
    ds, _ = one_per_datagram(msgs)
    r = receiver()
    r.on_datagram(ds[0], 0.0)
    r.on_datagram(ds[0], 0.0)
    r.on_feed_message(msgs[0], 0.0)     # also came from the broker
    r.on_feed_message(msgs[1], 0.0)
    r.on_datagram(ds[1], 0.0)           # also came by multicast
    r.on_datagram(ds[2], 0.0)
    broker(r, 3, 0.0)
    assert seqs(r) == [1, 2, 3]
    assert r.stats.duplicates == 1 and r.stats.stale == 1


def test_foreign_and_malformed_datagrams_are_counted_and_change_nothing():
    ds, _ = one_per_datagram(journal(2))
    other, _ = one_per_datagram(journal(2), pattern="eu.")
    r = receiver()
    r.on_datagram(b"GET / HTTP/1.1\r\n", 0.0)
    r.on_datagram(ds[0][:-3], 0.0)                                  # truncated
    r.on_datagram(other[0], 0.0)                                    # another bridge's pattern
    r.on_datagram(dg.encode_head(1, 9, "other", "", 99, 1000), 0.0)  # another stream
    r.on_datagram(ds[0], 0.0)
    r.on_datagram(ds[1], 0.0)
    broker(r, 2, 0.0)
    assert seqs(r) == [1, 2] and not r.want_feed and not r.want_check   # 99 claimed nothing
    assert (r.stats.foreign, r.stats.malformed, r.stats.datagrams) == (3, 1, 2)


def test_history_is_fetched_at_once_live_needs_nothing():
    r = receiver(start_after=0, head=50)
    assert r.want_feed and r.feed_from == 1
    assert not receiver(start_after=50, head=50).want_feed


def test_a_full_buffer_drops_entries_that_the_feed_then_brings():
    msgs = journal(40, key=lambda seq: "k" * 50)
    ds, _ = one_per_datagram(msgs)
    r = receiver(config=ReceiverConfig(reorder_wait=0.05, max_pending_bytes=2000))
    for d in ds[1:]:                    # 1 lost: 2..40 wait, more than the buffer holds
        r.on_datagram(d, 0.0)
    assert r.stats.overflow > 0 and not r.ready
    r.tick(0.1)
    assert r.want_feed and r.feed_from == 1
    serve(r, msgs, 0.1, until=lambda: r.position == 40)
    assert seqs(r) == list(range(1, 41)) and not r.want_feed


def test_the_feed_is_the_broker_s_word_on_what_lies_between():
    """A buffered entry below the feed's next message is one the broker says does not match:
    dropped, not handed (a forged entry in the buffer rides in no repair)."""
    msgs = journal(5)
    ds, _ = one_per_datagram(msgs)
    r = receiver()
    r.on_datagram(ds[0], 0.0)
    broker(r, 5, 0.0)
    r.on_datagram(ds[3], 0.0)           # 4 waits (its after is 3)
    r.tick(0.1)
    assert r.want_feed
    r.on_feed_message(msgs[4], 0.1)     # the feed skipped 2..4
    assert seqs(r) == [1, 5] and r.stats.forged == 1


def windows(r, ds, start, count, keep, per_window=10):
    """Deliver ``count`` windows of ``per_window`` datagrams from ``ds`` (an iterator), keeping
    those for which ``keep(i)`` is true; returns the time after the last window."""
    t = start
    for _ in range(count):
        for i in range(per_window):
            d = next(ds)
            if keep(i):
                r.on_datagram(d, t + i * 0.09)
        t += 1.0
        r.tick(t)
    return t


def heads(session=1, head=0):
    """Endless HEADs of one bridge session that announces ``head`` and a 0.1 s interval."""
    s = Sender("s", "", session=session, start_after=head, head_interval=0.1, now=0.0)
    t = 0.0
    while True:
        yield from s.tick(t)
        t += 0.1


def test_heavy_loss_falls_back_and_clear_skies_return():
    r = receiver(config=LOSSY)
    ds = heads()
    t = windows(r, ds, 0.0, 1, keep=lambda i: i % 2 == 0)        # 50% lost
    assert r.mode is FALLBACK and r.want_feed and r.stats.fallbacks == 1
    # The next window still counts the lossy one's last datagram (its number is skipped when
    # the next one comes): 1 lost of 11, above return_loss. Then two clean windows return.
    t = windows(r, ds, t, 2, keep=lambda i: True)
    assert r.mode is FALLBACK
    t = windows(r, ds, t, 1, keep=lambda i: True)
    assert r.mode is MULTICAST and r.stats.returns == 1
    assert r.want_feed        # joining: until multicast data follows on from the feed's position


def test_joining_ends_when_multicast_data_follows_on():
    msgs = journal(3)
    r = receiver(config=LOSSY)
    windows(r, heads(), 0.0, 1, keep=lambda i: i % 2 == 0)   # 50% lost
    assert r.mode is FALLBACK
    r.on_feed_message(msgs[0], 1.5)
    r.on_feed_message(msgs[1], 1.5)
    assert seqs(r) == [1, 2]
    windows(r, heads(session=2, head=3), 1.5, 2, keep=lambda i: True)   # the bridge has 3
    assert r.mode is MULTICAST and r.want_feed
    ds, _ = one_per_datagram(msgs, session=3)
    r.on_datagram(ds[1], 4.0)           # stale (came from the broker)
    assert r.want_feed
    r.on_datagram(ds[2], 4.0)           # follows on: nothing waits, nothing beyond
    assert not r.want_feed and r.want_check
    broker(r, 3, 4.0)
    assert seqs(r) == [3] and not r.want_feed


def test_joining_ends_on_a_head_with_nothing_new():
    r = receiver(config=LOSSY)
    windows(r, heads(), 0.0, 1, keep=lambda i: i % 2 == 0)   # 50% lost
    r.on_feed_message(journal(1)[0], 1.5)
    windows(r, heads(session=2, head=1), 1.5, 2, keep=lambda i: True)
    assert r.mode is MULTICAST and r.stats.returns == 1 and not r.want_feed


def test_light_loss_does_not_fall_back():
    r = receiver(config=LOSSY)
    windows(r, heads(), 0.0, 3, keep=lambda i: i != 0)             # 10% lost
    # (the very first datagram's loss cannot be seen: nothing came before it)
    assert r.mode is MULTICAST and r.stats.fallbacks == 0 and r.stats.lost == 2


def test_silence_falls_back_after_three_head_intervals():
    r = receiver(now=0.0)
    s = Sender("s", "", session=1, start_after=0, head_interval=0.5, now=0.0)
    r.on_datagram(s.tick(0.0)[0], 0.0)
    r.tick(1.49)
    assert r.mode is MULTICAST
    assert r.next_deadline() == pytest.approx(1.5)
    r.tick(1.5)
    assert r.mode is FALLBACK and r.want_feed


def test_silence_is_at_least_one_second():
    r = receiver(now=0.0)
    s = Sender("s", "", session=1, start_after=0, head_interval=0.05, now=0.0)
    r.on_datagram(s.tick(0.0)[0], 0.0)
    r.tick(0.99)
    assert r.mode is MULTICAST          # not 3 x 50 ms: a busy host stalls that long
    r.tick(1.0)
    assert r.mode is FALLBACK


def test_a_bridge_without_the_receiver_s_pattern_is_named_as_the_reason_of_the_fallback():
    """Issue 17 item 9: a bridge without --pattern (pattern "") and a receiver on "eu.": the
    receiver takes none of its datagrams and falls back; the counters and the reason say why."""
    r = receiver(now=0.0, pattern="eu.")
    s = Sender("s", "", session=1, start_after=0, head_interval=0.5, now=0.0)
    t = 0.0
    while r.mode is MULTICAST and t < 10.0:
        for d in s.tick(t):
            r.on_datagram(d, t)
        t += 0.25
        r.tick(t)
    assert r.mode is FALLBACK and t == pytest.approx(3.0)    # the silence before the first HEAD
    st = r.stats
    assert (st.fallbacks, st.fallbacks_pattern, st.fallbacks_silence, st.fallbacks_loss) == (1, 1, 0, 0)
    assert st.other_pattern == st.foreign > 0 and st.datagrams == 0
    assert r.fallback_reason == "pattern"
    assert "no datagram for pattern 'eu.'" in r.fallback_detail
    assert "from a bridge with pattern ''" in r.fallback_detail
    assert "run a bridge with --pattern 'eu.'" in r.fallback_detail


def test_silence_and_loss_are_named_as_reasons_of_a_fallback():
    r = receiver(now=0.0)
    r.on_datagram(dg.encode_head(1, 1, "other", "", 0, 500), 0.0)   # another stream: no excuse
    r.tick(3.0)
    assert r.mode is FALLBACK and r.fallback_reason == "silence"
    assert (r.stats.fallbacks_silence, r.stats.other_pattern) == (1, 0)
    assert "no datagram of stream 's' pattern ''" in r.fallback_detail
    r = receiver(config=LOSSY)
    windows(r, heads(), 0.0, 1, keep=lambda i: i % 2 == 0)         # 50% lost
    assert r.mode is FALLBACK and r.fallback_reason == "loss" and r.stats.fallbacks_loss == 1
    # (the first datagram's loss cannot be seen: 4 of 9)
    assert r.fallback_detail.startswith("44% of the 9 datagrams due in a 1s window were lost")


def test_own_datagrams_clear_the_other_patterns():
    """A bridge of this stream with another pattern beside the receiver's own bridge: its own
    datagrams keep coming, so a later silence of its own bridge is silence, not pattern...
    unless the other bridge goes on alone."""
    r = receiver(now=0.0, pattern="eu.")
    mine = Sender("s", "eu.", session=1, start_after=0, head_interval=0.5, now=0.0)
    other = Sender("s", "", session=2, start_after=0, head_interval=0.5, now=0.0)
    r.on_datagram(other.tick(0.0)[0], 0.0)
    r.on_datagram(mine.tick(0.0)[0], 0.0)
    r.tick(1.49)
    assert r.mode is MULTICAST and r.stats.other_pattern == 1
    r.tick(1.5)
    assert r.fallback_reason == "silence"


def test_loss_meter_classifies_and_counts():
    m = LossMeter(1.0, 0.0, track=8, hold=2.0)
    assert [m.observe(1, n, 0.0) for n in (1, 2, 5, 4, 4, 3, 9)] == [NEW, NEW, NEW, LATE,
                                                                     DUPLICATE, LATE, NEW]
    w = m.roll(1.0)
    assert (w.expected, w.received, w.lost) == (9, 6, 3) and w.rate == pytest.approx(3 / 9)
    assert m.roll(1.5) is None and m.next_deadline() == 2.0
    assert m.observe(1, 6, 1.5) == LATE             # lost in the window before: counts in this
    assert m.observe(2, 1, 1.5) == NEW              # another session
    w = m.roll(2.0)
    assert (w.expected, w.received) == (2, 2) and m.lost_total == 2


def test_loss_meter_ignores_numbers_far_from_their_session():
    m = LossMeter(1.0, 0.0, track=8, hold=2.0)
    m.observe(1, 1, 0.0)
    assert m.observe(1, 2**64 - 1, 0.1) == FAR      # forged: neither counted nor remembered
    assert m.observe(1, 1000, 0.2) == FAR
    assert [m.observe(1, n, 0.3) for n in (2, 3, 4)] == [NEW, NEW, NEW]
    w = m.roll(1.0)
    assert (w.expected, w.received) == (4, 4) and m.lost_total == 0
    assert m.observe(1, 5000, 2.2) == FAR           # 4 came at 0.3: less than `hold` ago
    assert m.observe(1, 5001, 2.4) == NEW           # nothing near for 2 s: starts over here
    assert m.observe(1, 5002, 2.5) == NEW and m.lost_total == 0


def test_loss_meter_remembers_runs_of_missing_numbers_split_by_late_ones():
    m = LossMeter(1.0, 0.0, track=8, hold=2.0)
    assert [m.observe(1, n, 0.0) for n in (1, 9, 5, 2, 8, 5)] == [NEW, NEW, LATE, LATE, LATE,
                                                                   DUPLICATE]
    assert [m.observe(1, n, 0.0) for n in (3, 4, 6, 7, 3)] == [LATE] * 4 + [DUPLICATE]
    assert m.lost_total == 0
    assert m.observe(1, 17, 0.1) == NEW             # 10..16 missing
    assert m.observe(1, 18, 0.1) == NEW             # 10 is 8 behind: forgotten
    assert [m.observe(1, n, 0.2) for n in (10, 11, 16)] == [DUPLICATE, LATE, LATE]
    w = m.roll(1.0)
    assert (w.expected, w.received) == (18, 13) and m.lost_total == 5


def test_loss_meter_work_for_a_datagram_does_not_grow_with_the_numbers_it_skips():
    """A forged datagram numbered ``track`` ahead of the last one made the meter remember each
    number skipped (4,096 dictionary entries, rebuilt every time): a flood of them at a few
    thousand small datagrams per second took a receiver's whole CPU. Runs cost the same as a
    datagram that skips nothing."""
    import tracemalloc
    m = LossMeter(1.0, 0.0)
    tracemalloc.start()
    try:
        for i in range(200):
            m.observe(7, 1 + i * m.track, 0.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10


def test_loss_meter_keeps_the_busy_session_when_many_new_ones_come():
    m = LossMeter(1.0, 0.0, sessions=2)
    for n in range(1, 6):
        m.observe(7, n, 0.0)
    for session in range(100, 110):             # one datagram each
        assert m.observe(session, 1, 0.0) == NEW
    assert m.observe(7, 6, 0.0) == NEW and m.observe(7, 3, 0.0) == DUPLICATE


# ------------------------------------------------------------------ the whole loop, at random

class World:
    """A journal, a bridge (Sender), a network that drops/duplicates/reorders, a Receiver and a
    simulated broker feed, all on one simulated clock."""

    def __init__(self, n, matches, start_after, net, batch, config):
        self.all = journal(n, key=lambda seq: "eu" if matches(seq) else "us")
        self.matching = [m for m in self.all if matches(m.sequence)]
        self.t = 0.0
        self.sender = Sender("s", "eu", session=1, start_after=0, max_datagram=300,
                             head_interval=0.5, now=0.0)
        self.net = net
        self.sent = 0
        self.held = []
        self.r = Receiver("s", "eu", start_after=start_after, head=0, now=0.0, config=config)
        self.published = 0
        self.feed = None
        self.batch = batch
        self.out = []

    def send(self, ds):
        for d in ds:
            fate = self.net(self.sent)
            self.sent += 1
            if fate == "drop":
                continue
            if fate == "hold":
                self.held.append(d)
                continue
            copies = [d, d] if fate == "dup" else [d]
            for x in copies + self.held:
                self.r.on_datagram(x, self.t)
            self.held = []

    def step(self, publish):
        for m in self.all[self.published:self.published + publish]:
            if m.key == "eu":
                self.send(self.sender.add(m.sequence, m.key, m.body, m.timestamp))
        self.published = min(len(self.all), self.published + publish)
        d = self.sender.flush()
        self.send([d] if d is not None else [])
        self.send(self.sender.tick(self.t))
        r = self.r
        if r.want_feed and self.feed is None:
            self.feed = r.feed_from
        elif not r.want_feed:
            self.feed = None
        if r.want_check:                # the broker's head: everything published so far
            r.check_started(self.t)
            r.on_broker_head(self.published, self.t)
        for _ in range(self.batch):
            if self.feed is None:
                break
            nxt = next((m for m in self.matching if m.sequence >= self.feed
                        and m.sequence <= self.published), None)
            if nxt is None:
                break
            self.feed = nxt.sequence + 1
            r.on_feed_message(nxt, self.t)
            if not r.want_feed:
                self.feed = None
        self.out += [m.sequence for m in r.ready]
        r.ready.clear()
        self.t += 0.02
        r.tick(self.t)


@settings(max_examples=examples(150), deadline=None)
@given(n=st.integers(1, 120), density=st.integers(1, 4), start=st.sampled_from(["first", "live"]),
       fates=st.lists(st.sampled_from(["ok", "ok", "ok", "drop", "dup", "hold"]), max_size=80),
       rate=st.integers(1, 10), batch=st.integers(1, 5))
def test_the_application_sees_exactly_the_journal(n, density, start, fates, rate, batch):
    config = ReceiverConfig(reorder_wait=0.03, loss_window=0.2, min_datagrams=3,
                            return_windows=2, fallback_loss=0.3, return_loss=0.05)
    w = World(n, lambda seq: seq % density == 0, 0, lambda i: fates[i] if i < len(fates)
              else "ok", batch, config)
    if start == "live":                 # the receiver starts after what is already published
        w.step(n // 2)
        w.r = Receiver("s", "eu", start_after=w.published, head=w.published, now=w.t,
                       config=config)
        w.feed = None
        w.out = []
    expected = [m.sequence for m in w.matching if m.sequence > w.r.position]
    while w.published < n:
        w.step(rate)
    for _ in range(2000):               # idle: HEADs, repairs, returns
        if w.out == expected and not w.r.want_feed:
            break
        w.step(0)
    assert w.out == expected
    assert not w.r.want_feed


@pytest.mark.parametrize("kwargs, message", [
    ({"loss_window": 0}, "loss_window must be a positive number of seconds"),
    ({"reorder_wait": -1}, "reorder_wait must be a positive number of seconds"),
    ({"fallback_loss": 1.5}, "fallback_loss must be a fraction from 0 to 1"),
    ({"return_loss": 0.3, "fallback_loss": 0.2}, "return_loss must be below fallback_loss"),
    ({"min_datagrams": 0}, "min_datagrams and return_windows must be at least 1"),
    ({"silence": 0}, "silence must be a positive number of seconds"),
    ({"max_pending_bytes": 0}, "max_pending_bytes must be positive"),
    ({"claim_hold": 0}, "claim_hold must be a positive number of seconds"),
    ({"claim_holdoff": -1}, "claim_holdoff must be zero or more seconds"),
    ({"fallback_holdoff": -1}, "fallback_holdoff must be zero or more seconds"),
])
def test_config_is_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReceiverConfig(**kwargs)


# ------------------------------------------------------------------ forged datagrams (issue 15 #7)
#
# Datagrams are not authenticated: anyone on the group can send one. A forged datagram may cost a
# unicast round trip (a head check, a repair), never a gap, a stall or a lasting fallback. The
# broker's answers are simulated: ``broker(r, last, now)`` answers the receiver's head check with
# the stream's real last sequence, as MulticastSubscriber does with STREAM-INFO.

FORGER = 0x0BAD


def forged_data(entries, session=FORGER, number=1, pattern=""):
    raw = [dg.encode_ref(seq, after) if ref else dg.encode_entry(seq, after, 0, b"k", b"forged")
           for seq, after, ref in entries]
    return dg.encode_data(dg.header(dg.DATA, session, number, "s", pattern), raw)


def live_bridge(start_after, session=1, head_interval=1.0):
    """A Sender that starts after ``start_after`` (its first HEAD already out)."""
    s = Sender("s", "", session=session, start_after=start_after, head_interval=head_interval,
               now=0.0)
    s.tick(0.0)
    return s


def send(r, s, msgs, now, last=None):
    """The bridge ``s`` sends ``msgs`` one per datagram; the broker's head is ``last`` (default:
    the last of them) when the receiver checks."""
    for m in msgs:
        s.add(m.sequence, m.key, m.body, m.timestamp)
        r.on_datagram(s.flush(), now)
    broker(r, msgs[-1].sequence if last is None else last, now)


def test_a_forged_sequence_2_64_minus_1_is_not_handed_and_does_not_stall_the_receiver():
    msgs = journal(13)
    r = receiver(start_after=10, head=10)           # live: the stream ends at 10
    r.on_datagram(forged_data([(2**64 - 1, 10, False)]), 1.0)
    broker(r, 10, 1.0)                              # the broker's head is still 10
    assert seqs(r) == []                            # not handed: beyond the broker's head
    assert r.stats.forged == 1 and not r.want_feed
    send(r, live_bridge(10), msgs[10:], 1.1)
    assert seqs(r) == [11, 12, 13]                  # the real messages still come, by multicast
    assert r.stats.multicast == 3 and r.stats.unicast == 0


def test_a_forged_entry_that_comes_while_the_feed_is_open_does_not_keep_it_open():
    """A forged entry far ahead arrives while the feed fetches the history (or repairs): it
    counted as a gap, so the feed stayed wanted for good (no head check runs while it is, and
    the feed never reaches the forged sequence): a lasting fallback to unicast. It now waits
    for a head check, once the feed has closed, which drops it."""
    msgs = journal(3)
    r = receiver(start_after=0, head=3)                     # history to fetch: the feed opens
    assert r.want_feed
    r.on_datagram(forged_data([(10**9, 10**9 - 1, False)]), 0.001)
    now = serve(r, msgs, 0.002, lambda: r.position == 3)
    assert seqs(r) == [1, 2, 3]
    now = serve(r, msgs, now, lambda: not r.want_feed and r.stats.forged == 1)
    send(r, live_bridge(3), journal(5)[3:], now + 0.01)      # the bridge goes on
    serve(r, journal(5), now + 0.01, lambda: r.position == 5)  # (checks spaced after a forgery)
    assert seqs(r) == [4, 5] and not r.want_feed
    assert (r.stats.unicast, r.stats.multicast) == (3, 2)


def test_head_checks_while_the_feed_is_open_are_spaced():
    """While the feed fetches 2,000 messages of history over 0.2 s, the bridge sends 500 live
    ones: each asked for a head check once checks ran while the feed was open (one round trip
    each, on the subscriber's loop). They are spaced by a second there; the feed confirms what
    it brings."""
    history, live_n = 2000, 500
    msgs = journal(history + live_n)
    r = receiver(start_after=0, head=history)
    bridge = live_bridge(history)
    now, live, fed = 0.0, history, 0
    while r.want_feed and fed < 10_000:
        r.on_feed_message(next(m for m in msgs if m.sequence >= r.feed_from), now)
        fed += 1
        if fed % 4 == 0 and live < history + live_n:        # live data meanwhile
            live += 1
            m = msgs[live - 1]
            bridge.add(m.sequence, m.key, m.body, m.timestamp)
            r.on_datagram(bridge.flush(), now)
        broker(r, live, now)
        now += 0.0001
    assert r.stats.checks <= 2 and [m.sequence for m in r.ready] == list(range(1, live + 1))


def test_a_forged_entry_50_ahead_skips_nothing():
    msgs = journal(60)
    r = receiver(start_after=10, head=10)
    r.on_datagram(forged_data([(60, 10, False)]), 1.0)      # "nothing matches from 11 to 59"
    broker(r, 10, 1.0)
    assert seqs(r) == [] and r.stats.forged == 1
    send(r, live_bridge(10), msgs[10:], 1.1)
    assert list(r.ready) == msgs[10:]               # all 50, the real 60 included
    assert r.stats.unicast == 0


def test_a_forged_entry_that_forks_the_chain_inside_the_broker_head_is_dropped():
    """The forger claims 60 follows 10 while the stream really has 11..60 (a busy stream: the
    broker's head is past 60 when the receiver checks). The real 11 also follows 10; once 11 is
    handed, "nothing between 10 and 60" is known to be false: the forged entry is dropped, and
    whatever is missing comes from the broker."""
    msgs = journal(60)
    r = receiver(start_after=10, head=10)
    s = live_bridge(10)
    s.add(11, msgs[10].key, msgs[10].body, msgs[10].timestamp)
    r.on_datagram(forged_data([(60, 10, False)]), 1.0)
    r.on_datagram(s.flush(), 1.0)
    broker(r, 60, 1.0)
    assert seqs(r) == [11] and r.stats.forged == 1
    send(r, s, msgs[11:], 1.01, last=60)
    assert seqs(r) == list(range(12, 61))
    assert not r.want_feed


def test_a_forged_entry_that_wins_the_race_inside_the_broker_head_is_noticed():
    """What no check can stop without authentication: a forger that reads the group names a
    sequence the broker already has (a busy stream), claims it follows on, and beats the
    bridge's datagram. It is handed; the real entries it denied are noticed when they come
    (``deceived``, and the shells log it), and the receiver goes on from there."""
    msgs = journal(13)
    r = receiver(start_after=10, head=10)
    r.on_datagram(forged_data([(12, 10, False)]), 1.0)
    broker(r, 13, 1.0)
    assert [m.body for m in r.ready] == [b"forged"]
    r.ready.clear()
    send(r, live_bridge(10), msgs[10:], 1.0)
    assert seqs(r) == [13] and not r.want_feed
    assert r.stats.deceived == 2                    # 11 passed over, 12 handed with forged contents


def test_two_versions_of_one_sequence_are_settled_by_the_broker():
    """A forged copy of the next message (other contents) waits beside the real one: the
    receiver cannot tell which is real, so it takes that sequence from the broker."""
    msgs = journal(12)
    r = receiver(start_after=10, head=10)
    s = live_bridge(10)
    r.on_datagram(forged_data([(11, 10, False)]), 1.0)      # before the real one
    s.add(11, msgs[10].key, msgs[10].body, msgs[10].timestamp)
    r.on_datagram(s.flush(), 1.0)
    s.add(12, msgs[11].key, msgs[11].body, msgs[11].timestamp)
    r.on_datagram(s.flush(), 1.0)
    broker(r, 12, 1.0)
    assert not r.ready and r.want_feed and r.feed_from == 11 and r.stats.forged == 1
    r.on_feed_message(msgs[10], 1.0)
    assert list(r.ready) == msgs[10:] and not r.want_feed     # 12 came by multicast


def test_a_forged_ref_beyond_the_broker_head_opens_no_feed():
    r = receiver(start_after=10, head=10)
    r.on_datagram(forged_data([(2**63, 10, True)]), 1.0)
    broker(r, 10, 1.0)
    r.tick(1.5)
    assert not r.want_feed and r.stats.repairs == 0 and r.stats.forged == 1


def test_forged_heads_every_second_beyond_the_broker_head_cost_one_check_each():
    """One forged HEAD a second (head 2^64-1, a new session each time) beside a real bridge:
    the receiver checks each claim against the broker and keeps taking data by multicast."""
    msgs = journal(200)
    r = receiver(start_after=0, head=0)
    s = live_bridge(0)
    t = 0.0
    for i in range(20):
        r.on_datagram(dg.encode_head(FORGER + i, 1, "s", "", 2**64 - 1, 1000), t)
        broker(r, 10 * i, t)
        send(r, s, msgs[10 * i:10 * i + 10], t + 0.5)
        for d in s.tick(t + 0.5):
            r.on_datagram(d, t + 0.5)
        t += 1.0
        r.tick(t)
        assert not r.want_feed, f"feed open at {t}s"
    assert seqs(r) == list(range(1, 201))
    assert r.mode is MULTICAST and r.stats.unicast == 0 and r.stats.fallbacks == 0
    assert r.stats.forged == 20


def test_forged_heads_in_the_bridge_session_do_not_keep_the_receiver_in_fallback():
    """A forger reads the bridge's session id from the group and sends one HEAD a second with a
    number 1000 ahead of the bridge's. Its first one may push the receiver into fallback; once
    the real traffic shows multicast brings everything, the receiver returns, and the forger
    cannot push it back before ``fallback_holdoff``."""
    cfg = ReceiverConfig(reorder_wait=0.05, loss_window=1.0, min_datagrams=5, return_windows=2,
                         fallback_holdoff=30.0)
    msgs = journal(600)
    r = receiver(config=cfg)
    s = live_bridge(0, session=7, head_interval=0.5)
    feed_at = 0                 # the simulated feed (the receiver subscribes from feed_from)
    published = 0
    t = 0.0
    modes = []
    for _ in range(30):
        forged = dg.encode_head(7, s._number + 1000, "s", "", published, 1000)
        r.on_datagram(forged, t)
        for k in range(20):                         # 20 messages a second, one per datagram
            now = t + 0.05 * k
            m = msgs[published]
            published += 1
            s.add(m.sequence, m.key, m.body, m.timestamp)
            r.on_datagram(s.flush(), now)
            for d in s.tick(now):
                r.on_datagram(d, now)
            if r.want_feed:                         # the feed brings what the broker has
                feed_at = max(feed_at, r.feed_from)
                while feed_at <= published and r.want_feed:
                    r.on_feed_message(msgs[feed_at - 1], now)
                    feed_at += 1
            else:
                feed_at = 0
            broker(r, published, now)
            r.tick(now)
        t += 1.0
        r.tick(t)
        modes.append(r.mode)
    assert seqs(r) == list(range(1, 601))
    assert modes[-10:] == [MULTICAST] * 10, modes          # not a lasting fallback
    assert r.stats.fallbacks <= 1 and r.stats.multicast > 300


def test_a_forged_number_far_ahead_in_the_bridge_session_is_ignored():
    """Number 2^64-1 in the bridge's session would make every later real datagram of that
    session look like a duplicate: the receiver would drop them all, fall silent and fall back
    for good."""
    msgs = journal(30)
    r = receiver()
    s = live_bridge(0, session=7)
    r.on_datagram(dg.encode_head(7, 2**64 - 1, "s", "", 0, 1000), 0.0)
    t = 0.0
    for i in range(3):
        send(r, s, msgs[10 * i:10 * i + 10], t)
        for d in s.tick(t):
            r.on_datagram(d, t)
        t += 1.0
        r.tick(t)
    assert seqs(r) == list(range(1, 31))
    assert r.mode is MULTICAST and r.stats.multicast == 30 and r.stats.duplicates == 0


def test_a_forged_head_interval_neither_hides_a_dead_bridge_nor_shortens_the_silence():
    r = receiver(now=0.0)
    s = live_bridge(0, head_interval=1.0)
    r.on_datagram(s.tick(1.0)[0], 1.0)
    r.on_datagram(dg.encode_head(FORGER, 1, "s", "", 0, 1), 1.1)          # "next HEAD in 1 ms"
    r.tick(2.5)
    assert r.mode is MULTICAST          # the bridge's 1 s interval still rules: silence is 3 s
    r.on_datagram(dg.encode_head(FORGER, 2, "s", "", 0, 2**32 - 1), 2.6)  # "next in 49 days"
    r.tick(2.6 + 3 * 60.0)              # the bridge is gone: the silence is bounded
    assert r.mode is FALLBACK


def fuzzed(rng, recent, published):
    """One forged datagram: a recent real one with bytes flipped or a field replaced, or a
    made-up DATA, REF or HEAD."""
    base = rng.choice(recent)
    kind = rng.randrange(6)
    if kind == 0:                                   # bytes flipped
        b = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] ^= rng.randint(1, 255)
        return bytes(b)
    d = dg.decode(base)
    session = d.session if rng.random() < 0.5 else rng.getrandbits(64)
    number = rng.choice([d.number + rng.randint(-5, 5000), rng.getrandbits(64)]) % 2**64
    if kind == 1:                                   # a HEAD: any head, number, interval
        head = rng.choice([published + rng.randint(1, 100), rng.getrandbits(64),
                           rng.randint(0, published)])
        return dg.encode_head(session, number, "s", "", head, rng.getrandbits(32))
    seq = rng.choice([published + rng.randint(2, 100), rng.getrandbits(64) | 1 << 40,
                      rng.randint(1, max(published, 1))])
    after = rng.choice([published, rng.randint(0, seq - 1), seq - 1])
    ref = kind == 2
    raw = dg.encode_ref(seq, after) if ref else dg.encode_entry(seq, after, 0, b"k", b"forged")
    if kind == 3:                                   # random bytes after a ZEPS header
        return dg.header(dg.DATA, session, number, "s", "") + rng.randbytes(rng.randint(0, 60))
    return dg.encode_data(dg.header(dg.DATA, session, number, "s", ""), [raw])


def test_20000_forged_datagrams_beside_a_real_bridge_change_nothing_the_application_sees():
    rng = random.Random(15)
    msgs = journal(2200)
    cfg = ReceiverConfig(reorder_wait=0.05)
    r = Receiver("s", "", start_after=0, head=0, now=0.0, config=cfg)
    s = Sender("s", "", session=7, start_after=0, head_interval=0.5, now=0.0)
    t, published, out, recent = 0.0, 0, [], []

    def shell():                        # the feed, head checks, the application
        while r.want_feed and r.feed_from <= published:
            r.on_feed_message(msgs[r.feed_from - 1], t)
        broker(r, published, t)
        for m in r.ready:
            assert m.sequence <= published, "handed beyond the broker's head"
        out.extend(r.ready)
        r.ready.clear()

    def bridge(m):
        for d in [*s.add(m.sequence, m.key, m.body, m.timestamp), s.flush(), *s.tick(t)]:
            if d is not None:
                recent.append(d)
                r.on_datagram(d, t)
        del recent[:-50]

    for m in msgs[:2000]:               # 10 forgeries after each real datagram
        published = m.sequence
        bridge(m)
        shell()
        for _ in range(10):
            r.on_datagram(fuzzed(rng, recent, published), t)
            shell()
        t += 0.01
        r.tick(t)
        shell()
    for m in msgs[2000:]:               # the forger stops
        published = m.sequence
        bridge(m)
        t += 0.01
        r.tick(t)
        shell()
    for _ in range(1000):               # idle: HEADs only
        if r.mode is MULTICAST and not r.want_feed:
            break
        for d in s.tick(t):
            r.on_datagram(d, t)
        t += 0.05
        r.tick(t)
        shell()
    assert out == msgs                  # every message, once, in order, the real contents
    assert r.mode is MULTICAST and not r.want_feed and r.stats.forged > 1000
    assert r.stats.multicast > 1500 and r._pending_bytes == 0
