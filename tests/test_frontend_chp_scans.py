"""CHP snapshots of a subtree starting with ``~``, which the broker's SNAPSHOT would take for a
regex: the shell reads the whole stream for them and the front end filters it. Pure: the
front end driven with frames and a source that counts what it yields."""
from zeps.frontends import chp_codec as cc
from zeps.frontends.chp import ChpFrontEnd
from zeps.frontends.counters import Counters
from zeps.frontends.snapshots import Snapshots

from .test_frontend_state import Peer, drain


class Keys:
    """A stream of ``n`` keys ``/f/NNNNNN`` and ``~t/1``; its source is the shell's: the keys
    under the subtree (the broker's SNAPSHOT), every key for a subtree starting with ``~``.
    ``yielded`` counts the entries it gave."""

    def __init__(self, n: int):
        self.keys = sorted([f"/f/{i:06d}" for i in range(n)] + ["~t/1"])
        self.yielded = 0

    def source(self, subtree):
        prefix = "" if subtree.startswith("~") else subtree

        def entries():
            for seq, key in enumerate(self.keys, 1):
                if key.startswith(prefix):
                    self.yielded += 1
                    yield key, seq, b"v"
        return len(self.keys), entries()


def test_whole_stream_scans_for_tilde_subtrees_do_not_hold_every_slot():
    """8 ICANHAZ? for a ``~`` subtree that matches nothing: each a scan of the whole stream that
    sends nothing, so it never blocks; they held the 8 slots to their ends and a client asking
    for one key waited behind 8 whole scans (200,000 keys: 30.6 s, against 3 ms alone, for 8
    requests of 18 bytes). Now such scans run one at a time: the calm request is answered at
    once, every scan still gets its KTHXBAI, and requests for more of them than a few wait
    are refused (a Guide client asks again)."""
    n = 20_000
    keys = Keys(n)
    front = ChpFrontEnd(keys.source)
    peer = Peer()
    for i in range(8):
        assert front.on_snapshot(b"h%d" % i, [b"ICANHAZ?", b"~none"], 0.0)
    assert front.on_snapshot(b"calm", [b"ICANHAZ?", b"/f/000001"], 0.0)
    for _ in range(100_000):
        if peer.got.get(b"calm") and peer.got[b"calm"][-1][0] == b"KTHXBAI":
            break
        front.pump_snapshots(peer.send, 0.0)
    assert peer.got[b"calm"] == [cc.encode_kvsync("/f/000001", 2, b"v"),
                                 cc.encode_kthxbai(n + 1, "/f/000001")]
    assert keys.yielded < 2 * n, keys.yielded         # was 8 whole scans: 160,009
    drain(front, peer)
    assert all(peer.got[b"h%d" % i] == [cc.encode_kthxbai(n + 1, "~none")] for i in range(8))
    assert front.on_snapshot(b"t", [b"ICANHAZ?", b"~t/"], 0.0)
    drain(front, peer)
    assert peer.got[b"t"] == [cc.encode_kvsync("~t/1", n + 1, b"v"),
                              cc.encode_kthxbai(n + 1, "~t/")]
    assert front.counters["snapshot.served"] == 10


def test_tilde_requests_beyond_a_few_waiting_are_refused():
    """They wait one scan each behind the one that runs: beyond a few waiting, one more is
    refused (it would keep its place in the FIFO for as many whole scans), and other
    requests are still taken and served."""
    keys = Keys(10)
    front = ChpFrontEnd(keys.source)
    peer = Peer()
    taken = [front.on_snapshot(b"h%d" % i, [b"ICANHAZ?", b"~x"], 0.0) for i in range(40)]
    assert taken.count(True) < 40 and front.counters["snapshot.refused"] == taken.count(False)
    assert front.on_snapshot(b"calm", [b"ICANHAZ?", b"/f/"], 0.0)
    drain(front, peer)
    assert len(peer.got[b"calm"]) == 11
    assert front.counters["snapshot.served"] == taken.count(True) + 1


def test_a_tilde_scan_blocked_on_a_client_that_never_reads_holds_no_slot():
    """A client asks for a ``~`` subtree with many keys and never reads: its scan blocks on
    its pipe, as any snapshot's, and a blocked session makes no progress (it counts against
    ``max_sessions`` only). It held the one place for whole-stream scans until its stall
    timeout (30 s), every other ``~`` request waiting behind it, and 8 such clients had every
    other one refused."""
    keys = Keys(0)
    keys.keys = sorted(f"~t/{i:04d}" for i in range(1000))
    front = ChpFrontEnd(keys.source)
    peer = Peer()
    peer.room[b"h"] = 0                                   # never reads
    assert front.on_snapshot(b"h", [b"ICANHAZ?", b"~t/"], 0.0)
    drain(front, peer)
    assert peer.refused[b"h"] and b"h" not in peer.got
    assert front.on_snapshot(b"calm", [b"ICANHAZ?", b"~t/0007"], 0.0)
    drain(front, peer)
    assert peer.got[b"calm"] == [cc.encode_kvsync("~t/0007", 8, b"v"),
                                 cc.encode_kthxbai(1000, "~t/0007")]


def test_a_tilde_request_costs_the_same_however_many_requests_wait():
    """Whether a ``~`` request may wait was found by a pass over the waiting requests: with
    200 waiting, each of a client's ICANHAZ? (18 bytes, refused or not) asked 200 of them."""
    asked = []

    def whole(request):
        asked.append(request)
        return request.startswith("~")

    snaps = Snapshots(lambda request: ([], b"END"), Counters(), whole=whole)
    for i in range(200):
        assert snaps.request(b"c%d" % i, "/f/")
    for i in range(8):
        assert snaps.request(b"h%d" % i, "~x")
    asked.clear()
    assert not any(snaps.request(b"x", "~x") for _ in range(100))
    assert len(asked) <= 2 * 100, len(asked)
