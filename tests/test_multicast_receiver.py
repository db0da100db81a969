"""The receiver's pure core (zeps/multicast/receiver.py) and loss meter (zeps/multicast/loss.py).

Time is passed in; datagrams come from the real Sender; the broker's feed is simulated from a
list (the journal). The property test runs sender -> lossy, reordering, duplicating network ->
receiver <- feed, and checks the application sees exactly the journal's matching messages."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.clients.message import Message
from zeps.multicast import datagram as dg
from zeps.multicast.loss import DUPLICATE, LATE, NEW, LossMeter
from zeps.multicast.receiver import FALLBACK, MULTICAST, Receiver, ReceiverConfig
from zeps.multicast.sender import Sender

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


def test_in_order_datagrams_are_handed_without_the_broker():
    msgs = journal(20)
    ds, _ = one_per_datagram(msgs)
    r = receiver()
    for d in ds:
        r.on_datagram(d, 0.01)
    assert list(r.ready) == msgs                  # the same messages, timestamps included
    assert not r.want_feed and r.stats.multicast == 20 and r.stats.repairs == 0


def test_reordering_within_the_wait_needs_no_repair():
    ds, _ = one_per_datagram(journal(4))
    r = receiver()
    r.on_datagram(ds[0], 0.0)
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
    (head,) = s.tick(5.0)
    r.on_datagram(head, 5.0)
    assert seqs(r) == [1, 2, 3] and r.target == 5
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
    assert seqs(r) == [1, 2] and not r.want_feed and r.target == 2      # not 99
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
    for m in msgs:
        if not r.want_feed:
            break
        r.on_feed_message(m, 0.1)
    assert seqs(r) == list(range(1, 41)) and not r.want_feed


def test_feed_and_buffer_merge_by_sequence():
    """A buffered entry below the feed's next message is handed first (e.g. a regex match that
    timed out for the feed's subscription but not for the bridge's)."""
    msgs = journal(5)
    ds, _ = one_per_datagram(msgs)
    r = receiver()
    r.on_datagram(ds[0], 0.0)
    r.on_datagram(ds[3], 0.0)           # 4 waits (its after is 3)
    r.tick(0.1)
    assert r.want_feed
    r.on_feed_message(msgs[4], 0.1)     # the feed skipped 2..4
    assert seqs(r) == [1, 4, 5]


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


def test_loss_meter_classifies_and_counts():
    m = LossMeter(1.0, 0.0, track=8)
    assert [m.observe(1, n) for n in (1, 2, 5, 4, 4, 3, 9)] == [NEW, NEW, NEW, LATE, DUPLICATE,
                                                                LATE, NEW]
    w = m.roll(1.0)
    assert (w.expected, w.received, w.lost) == (9, 6, 3) and w.rate == pytest.approx(3 / 9)
    assert m.roll(1.5) is None and m.next_deadline() == 2.0
    assert m.observe(1, 10_000) == NEW and m.lost_total == 3 + 9990   # memory stays bounded
    assert m.observe(2, 1) == NEW                                   # another session
    assert m.roll(10.0).expected == 9992 and m.next_deadline() == 11.0


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


@settings(max_examples=150, deadline=None)
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
])
def test_config_is_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReceiverConfig(**kwargs)
