"""Refusals as codes and fields against a real broker process (tests/conftest.py): the SDK
(which sends REASONS-SELECT) and a plain ZEPS/1 client (tests/rawclient.py) side by side. The
in-process tests are tests/test_reasons.py."""
from __future__ import annotations

import pytest

from tests.rawclient import RawClient
from zeps.clients import Client, InvalidError, PatternRemoved
from zeps.protocol import commands as c
from zeps.protocol.reasons import Code

FAST = dict(timeout=5.0, heartbeat=1.0)

#: A regex of 250 characters (251 with its "~") that matches the keys x000 .. x048: linear
#: (the broker accepts it), and too long for "pattern removed: regular expression '...' timed
#: out 3 times" to fit the 255 bytes of an INVALID.
LONG = "~^(?:" + "|".join(f"x{i:03d}" for i in range(49)) + ")$"


def test_a_removed_long_regex_is_named_in_full_and_not_resubscribed(start_broker, tmp_path):
    """The broker removes a 250-character regex whose matches time out (a regex time limit of
    1 ns: every match runs out of time). The SDK raises PatternRemoved naming it, then, after
    the broker restarts (with a sane limit), subscribes only its other pattern again: a message
    the regex would match is not delivered, the next one of the other pattern is."""
    assert len(LONG) == 251
    b = start_broker(tmp_path / "d", "--regex-timeout-ms", "0.000001")
    with Client(b.endpoint, "s", create=True, **FAST) as sub, \
            Client(b.endpoint, "s", confirms=True, **FAST) as pub:
        messages = sub.subscribe([LONG, "z"])
        for key in ("x001", "x002", "x003"):    # three matches, three timeouts: removed
            pub.publish(key, b"to the regex")
        pub.wait_for_confirms()
        with pytest.raises(PatternRemoved) as e:
            messages.next(timeout=10)
        assert e.value.pattern == LONG and e.value.code is Code.PATTERN_REMOVED
        assert LONG[1:] in e.value.reason                      # the text is whole too
        assert messages.patterns == ("z",)
        b.kill()
        b.extra_args = []                       # the default regex time limit from now on
        b.restart()
        with Client(b.endpoint, "s", confirms=True, **FAST) as pub2:
            pub2.publish("x004", b"to the regex")
            pub2.publish("z1", b"to z")
            pub2.wait_for_confirms()
        m = messages.next(timeout=10)
        assert (m.key, m.sequence) == ("z1", 5) and sub.reconnects >= 1


def test_a_plain_client_still_gets_invalid_and_no_reason_names_the_data_directory(broker):
    """A stream that cannot be opened (a file where its directory goes): the SDK's ERROR and a
    ZEPS/1 client's INVALID say why without the broker's paths; the broker's log has them."""
    root = str(broker.data_dir.resolve())
    (broker.data_dir / "blocked").write_text("a file where the stream's directory would go")
    plain = RawClient(broker.endpoint)
    plain.send(c.Attach("blocked"))
    reason = plain.expect(c.Invalid).reason
    assert reason.startswith("cannot open stream 'blocked': ") and root not in reason, reason
    with pytest.raises(InvalidError) as e:
        Client(broker.endpoint, "blocked", create=True, **FAST)    # attaches at once
    assert e.value.reason == reason and e.value.code is Code.OTHER
    plain.attach("fine")                        # both go on
    with Client(broker.endpoint, "fine", **FAST) as ok:
        assert ok.info().last == 0
    plain.close()
    assert root in broker.log() or str(broker.data_dir) in broker.log()
