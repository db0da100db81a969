"""The ``ttl`` header's text (zeps.protocol.ttl): written in the grammar the CHP front end takes
from its own clients, never with an exponent, and read the same way by the KV client and the
front end."""
from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeps.frontends import chp_codec
from zeps.protocol.ttl import TTL_TEXT, ttl_seconds, ttl_text

from .property_examples import examples


@pytest.mark.parametrize("seconds, text", [
    (30, "30"), (0.5, "0.5"), (3.0, "3"), (0.1 + 0.2, "0.3"),
    (2_592_000, "2592000"),                 # 30 days: f"{x:g}" wrote 2.592e+06
    (1_234_567, "1234567"),                 # f"{x:g}" wrote 1.23457e+06, 1,234,570 s
    (0.00005, "0.00005"),                   # f"{x:g}" wrote 5e-05
    (1e-9, "0.000000001"), (9_999_999_999, "9999999999"),
    (1234567.123456789, "1234567.123456789"), (Decimal("2.50"), "2.5")])
def test_a_ttl_is_written_as_plain_decimal_seconds(seconds, text):
    assert ttl_text(seconds) == text
    assert TTL_TEXT.fullmatch(text)
    assert chp_codec.decode_properties(f"ttl={text}\n".encode()) == (("ttl", text),)


@pytest.mark.parametrize("seconds", [0, -1, math.nan, math.inf, 1e10, 1e-10, 1e300, True, "5",
                                     Decimal("NaN"), Decimal("-1")])
def test_a_ttl_that_cannot_be_written_is_a_value_error(seconds):
    with pytest.raises(ValueError, match="ttl"):
        ttl_text(seconds)


@given(st.floats(min_value=1e-9, max_value=9_999_999_999.0))
@settings(max_examples=examples(200))
def test_every_ttl_written_is_read_back_within_a_nanosecond(seconds):
    text = ttl_text(seconds)
    assert TTL_TEXT.fullmatch(text)
    assert abs(ttl_seconds(text) - seconds) <= 5e-10 + seconds * 1e-15


@pytest.mark.parametrize("text, seconds", [
    ("30", 30.0), ("0", None), ("0.5", 0.5),
    ("1e+06", 1e6), ("5e-05", 5e-5)])       # an older KV writer's: still read
def test_the_kv_client_and_the_chp_front_end_read_a_header_alike(text, seconds):
    assert ttl_seconds(text) == seconds
    assert chp_codec.ttl_seconds((("ttl", text),)) == seconds


@pytest.mark.parametrize("text", ["soon", "-1", "inf", "nan", ""])
def test_a_header_that_is_no_ttl_is_refused_by_both(text):
    with pytest.raises(ValueError):
        ttl_seconds(text)
    with pytest.raises(chp_codec.Malformed, match="bad ttl"):
        chp_codec.ttl_seconds((("ttl", text),))
