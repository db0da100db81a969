"""The one set of parsers of sizes, durations and times (zeps.units), with an injected clock."""
from datetime import datetime, timezone

import pytest

from zeps import units
from zeps.protocol import deliver
from zeps.protocol.codec import decode, encode
from zeps.protocol import commands as c

NOW = 1_795_300_000 * 10**9      # a fixed "now": no test reads the clock


@pytest.mark.parametrize("text,expected", [
    ("4096", 4096), ("64K", 64 << 10), ("64k", 64 << 10), ("256M", 256 << 20), ("1GiB", 1 << 30),
    ("2 MB", 2 << 20), ("1T", 1 << 40),
])
def test_sizes(text, expected):
    assert units.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "12Q", "1.5M", "M"])
def test_bad_sizes(text):
    with pytest.raises(ValueError, match="not a size"):
        units.parse_size(text)


@pytest.mark.parametrize("text,expected", [
    ("60", 60.0), ("60s", 60.0), ("500ms", 0.5), ("30m", 1800.0), ("12h", 43200.0), ("7d", 604800.0),
    ("5 minutes", 300.0), ("1 week", 604800.0), ("1.5h", 5400.0),
])
def test_durations(text, expected):
    assert units.parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "abc", "-5s", "5 parsecs"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="not a duration"):
        units.parse_duration(text)


@pytest.mark.parametrize("text,expected", [
    ("now", NOW),
    ("-5m", NOW - 300 * 10**9),
    ("5m", NOW - 300 * 10**9),
    ("now-5m", NOW - 300 * 10**9),
    ("now+1h", NOW + 3600 * 10**9),
    ("5 minutes ago", NOW - 300 * 10**9),
    ("-500ms", NOW - 500 * 10**6),
    ("1795300000", 1795300000 * 10**9),
    ("1795300000.5", 1795300000 * 10**9 + 500_000_000),
    ("1795300000000ms", 1795300000 * 10**9),
    # a number of six digits or fewer with its unit is before now, as 5m is: "3s" was 3 s after
    # 1970, and a replay --from-time 3s read the whole stream (found by review)
    ("3s", NOW - 3 * 10**9),
    ("500ms", NOW - 500 * 10**6),
    ("1.5s", NOW - 1_500_000_000),
    ("2026-11-22T10:00:00Z", int(datetime(2026, 11, 22, 10, tzinfo=timezone.utc).timestamp()) * 10**9),
    ("2026-11-22T11:00:00+01:00", int(datetime(2026, 11, 22, 10, tzinfo=timezone.utc).timestamp()) * 10**9),
])
def test_times(text, expected):
    assert units.parse_time(text, NOW) == expected


def test_time_without_zone_is_local_time_like_date():
    local = datetime(2026, 11, 22, 10, 0, 0).astimezone()      # naive -> the machine's zone
    assert units.parse_time("2026-11-22T10:00:00", NOW) == int(local.timestamp()) * 10**9
    assert units.parse_time("2026-11-22 10:00", NOW) == int(local.timestamp()) * 10**9


def test_time_bare_number_unit_is_the_callers():
    assert units.parse_time("1714564800000", NOW, bare_unit="ms") == 1714564800000 * 10**6
    assert units.parse_time("1714564800s", NOW, bare_unit="ms") == 1714564800 * 10**9


@pytest.mark.parametrize("text", ["", "yesterday-ish", "1969-01-01T00:00:00Z", "now-5 parsecs"])
def test_bad_times(text):
    with pytest.raises(ValueError, match="bad time"):
        units.parse_time(text, NOW)


def test_relative_time_never_before_the_epoch():
    assert units.parse_time("-100d", 10**9) == 0


def test_deliver_layout_matches_the_codec():
    frame = encode(c.Deliver(42, "k\u00e9y", b"body!"))
    assert deliver.sequence_of(frame) == 42
    assert deliver.key_body_of(frame) == ("k\u00e9y".encode(), b"body!")
    assert deliver.frame_cost(frame) == deliver.message_cost("k\u00e9y", b"body!") \
        == deliver.deliver_cost(len("k\u00e9y".encode()), 5) == 8 + 4 + 1 + 5
    assert deliver.encode_deliver(42, "k\u00e9y".encode(), b"body!") == frame
    ts = deliver.ts_from_deliver(frame, 7)
    assert decode(ts) == c.DeliverTs(7, 42, "k\u00e9y", b"body!")
    assert deliver.timestamp_of_ts(ts) == 7
    assert deliver.sequence_of(ts, deliver.TS_SHIFT) == 42
    assert deliver.key_body_of(ts, deliver.TS_SHIFT) == ("k\u00e9y".encode(), b"body!")
    with pytest.raises(IndexError):
        deliver.key_body_of(frame[:-1])
