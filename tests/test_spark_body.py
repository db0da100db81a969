"""The Spark source's body decoding (``bodyFormat=json``), pure: no Spark session, the decoder
the partition readers build (zeps/spark/body.py), against what Spark's own ``from_json`` gives
for the same documents."""
from __future__ import annotations

from decimal import Decimal

from zeps.spark.body import make_decoder, parse_body_schema


def decode(schema: str, body: bytes):
    return make_decoder("json", parse_body_schema(schema))(body)


def test_json_decimals_keep_every_digit_up_to_38():
    """``json.loads`` read numbers as binary floats (123456789012345678.91 became
    ...680.00), and quantizing under Python's 28-digit context made a value of 30 digits
    null though DECIMAL(38, 10) holds it; Spark's ``from_json`` gives both exactly."""
    schema = "id BIGINT, amount DECIMAL(20,2), big DECIMAL(38,10)"
    got = decode(schema, b'{"id": 1, "amount": 123456789012345678.91, '
                         b'"big": 12345678901234567890.5}')
    assert got == {"id": 1, "amount": Decimal("123456789012345678.91"),
                   "big": Decimal("12345678901234567890.5000000000")}
    got = decode(schema, b'{"id": 2, "amount": 0.1, "big": "12345678901234567890.5"}')
    assert got["amount"] == Decimal("0.10") and got["big"] == Decimal("12345678901234567890.5")
    assert decode(schema, b'{"id": 3, "amount": 1e30}')["amount"] is None   # over 20 digits


def test_json_numbers_read_as_decimals_still_fill_the_other_types():
    """With a DECIMAL in the schema, JSON numbers are read as Decimal: every other type takes
    them as it took floats."""
    schema = ("d DECIMAL(10,2), i INT, f DOUBLE, s STRING, at TIMESTAMP, "
              "nested STRING, xs ARRAY<DOUBLE>")
    got = decode(schema, b'{"d": 1.5, "i": 7.0, "f": 2.25, "s": 3.10, "at": 0.5, '
                         b'"nested": {"x": 1.5}, "xs": [1.5, 2]}')
    assert got["d"] == Decimal("1.50") and got["i"] == 7 and got["f"] == 2.25
    assert got["s"] == "3.10" and got["nested"] == '{"x":1.5}' and got["xs"] == [1.5, 2.0]
    assert got["at"].timestamp() == 0.5
    assert decode(schema, b'{"i": 7.5}')["i"] is None                    # not an integer
