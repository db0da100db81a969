"""The broker's log of refused handshakes, rate-limited (pure code: the clock is a number)."""
from __future__ import annotations

import zmq

from zeps.broker.handshakes import HandshakeRefusals, RefusalLimiter


def test_one_line_per_peer_per_interval_the_rest_counted_once_per_interval():
    lim = RefusalLimiter(interval=10.0, max_peers=100)
    assert lim.admit("10.0.0.1", 0.0)
    assert lim.admit("10.0.0.2", 0.5)              # another peer: its own line
    for t in (1.0, 2.0, 9.9):
        assert not lim.admit("10.0.0.1", t)        # the same peer within the interval
    assert lim.summary(9.9) is None                # counted, summed up later
    assert lim.summary(10.99) is None              # an interval after the first held back: 11.0
    assert lim.summary(11.0) == (3, 1)
    assert lim.summary(30.0) is None               # said once
    assert lim.admit("10.0.0.1", 10.0)             # an interval after its last line
    assert not lim.admit("10.0.0.2", 10.4)
    assert lim.admit("10.0.0.2", 10.5)


def test_a_flood_of_addresses_is_counted_not_remembered():
    lim = RefusalLimiter(interval=10.0, max_peers=3)
    admitted = [lim.admit(f"10.0.{i // 256}.{i % 256}", 1.0) for i in range(10000)]
    assert admitted[:3] == [True] * 3 and not any(admitted[3:])
    assert len(lim._last) == 3 and len(lim._peers) <= 3    # bounded whatever the flood
    assert lim.summary(11.0) == (9997, 3)
    assert lim.admit("10.9.9.9", 11.0)             # the old ones are forgotten after an interval


def test_refusals_become_log_lines_with_peer_key_and_reason():
    lines = []
    r = HandshakeRefusals(lambda event, **kw: lines.append((event, kw)), curve=True,
                          interval=5.0)
    r.zap_refused("192.0.2.7", "K" * 40, "400", "Unknown key", 0.0)
    r.zap_refused("192.0.2.7", "K" * 40, "400", "Unknown key", 1.0)      # held back
    r.monitor_event(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH, 1.0)
    r.monitor_event(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC, 1.0)
    r.monitor_event(zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400, 1.0)          # the ZAP line says it
    assert [e for e, _ in lines] == ["handshake_refused"] * 3
    zap, plain, crypto = (kw for _, kw in lines)
    assert zap["peer"] == "192.0.2.7" and zap["key"] == "K" * 40 and zap["why"] == "not-allowed"
    assert zap["reason"].startswith("ZAP 400 Unknown key") and "--allow" in zap["reason"]
    assert plain["why"] == "not-curve" and "--server-key" in plain["reason"]
    assert crypto["why"] == "server-key" and "--server-key" in crypto["reason"]
    assert r.unreported and r.refused == 5 - 1        # the AUTH event is not a second refusal
    r.tick(4.9)
    assert len(lines) == 3
    r.tick(6.0)
    assert lines[-1] == ("handshakes_refused_unlogged", {"count": 1, "peers": 1, "seconds": 5.0})
    assert not r.unreported


def test_a_curve_client_at_a_plaintext_broker_is_named_so():
    lines = []
    r = HandshakeRefusals(lambda event, **kw: lines.append(kw), curve=False)
    r.monitor_event(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH, 0.0)
    assert lines[0]["why"] == "curve-client" and "--curve-secret" in lines[0]["reason"]
