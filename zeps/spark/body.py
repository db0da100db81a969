"""Body formats: the ``bodySchema`` parser (Spark DDL or Spark's JSON schema form, parsed in
Python so a bad schema is reported by name without a JVM round trip) and the decoders that turn
the binary ``body`` column into a string (``utf8``) or a struct (``json``, ``msgpack``).

Decoding is per record in Python (``json.loads`` / ``msgpack.unpackb``), then one
``pyarrow.array(..., type=struct)``. Like Spark's ``from_json`` in PERMISSIVE mode, a body that
does not parse (or is not an object/map) gives a null ``body``, and a field whose value does not
fit its declared type is null; the other fields are kept.
"""
from __future__ import annotations

import base64
import json
import re
from datetime import date, datetime, timezone
from decimal import Context, Decimal, InvalidOperation, localcontext
from typing import Any, Callable, List, Optional

import pyarrow as pa
from pyspark.sql import types as T

from .options import ZepsSparkError

__all__ = ["parse_body_schema", "decode_body", "DDLError"]


class DDLError(ValueError):
    pass


# ----------------------------------------------------------------------------- DDL parser

_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('(?:[^'\\]|\\.)*')"
                    r"|([<>(),:]))")

_PRIMITIVES = {
    "string": T.StringType, "varchar": T.StringType, "char": T.StringType, "text": T.StringType,
    "boolean": T.BooleanType, "bool": T.BooleanType,
    "tinyint": T.ByteType, "byte": T.ByteType,
    "smallint": T.ShortType, "short": T.ShortType,
    "int": T.IntegerType, "integer": T.IntegerType,
    "bigint": T.LongType, "long": T.LongType,
    "float": T.FloatType, "real": T.FloatType,
    "double": T.DoubleType,
    "date": T.DateType,
    "timestamp": T.TimestampType, "timestamp_ltz": T.TimestampType,
    "timestamp_ntz": T.TimestampNTZType,
    "binary": T.BinaryType,
}


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks: List[str] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise DDLError(f"unexpected character {text[pos:].lstrip()[:1]!r} at "
                               f"position {pos + 1}")
            self.toks.append(next(g for g in m.groups() if g is not None))
            pos = m.end()
        self.i = 0

    def peek(self) -> Optional[str]:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expect: Optional[str] = None) -> str:
        t = self.peek()
        if t is None:
            raise DDLError("unexpected end" + (f" (expected {expect!r})" if expect else ""))
        if expect is not None and t.lower() != expect:
            raise DDLError(f"expected {expect!r} but found {t!r}")
        self.i += 1
        return t

    def name(self) -> str:
        t = self.take()
        if t.startswith("`"):
            return t[1:-1].replace("``", "`")
        if not (t[0].isalpha() or t[0] == "_"):
            raise DDLError(f"expected a field name but found {t!r}")
        return t

    def fields(self, closing: Optional[str]) -> T.StructType:
        out = []
        seen = set()
        while True:
            if closing is not None and self.peek() == closing and not out:
                break  # struct<>
            n = self.name()
            if self.peek() == ":":
                self.take()
            dt = self.dtype()
            nullable = True
            if self.peek() is not None and self.peek().lower() == "not":
                self.take()
                self.take("null")
                nullable = False
            if self.peek() is not None and self.peek().lower() == "comment":
                self.take()
                c = self.take()
                if not c.startswith("'"):
                    raise DDLError(f"expected a quoted comment but found {c!r}")
            if n.lower() in seen:
                raise DDLError(f"field {n!r} appears twice")
            seen.add(n.lower())
            out.append(T.StructField(n, dt, nullable))
            if self.peek() == ",":
                self.take()
                continue
            break
        return T.StructType(out)

    def dtype(self) -> T.DataType:
        t = self.take()
        low = t.lower()
        if low == "struct":
            self.take("<")
            st = self.fields(">")
            self.take(">")
            return st
        if low == "array":
            self.take("<")
            el = self.dtype()
            self.take(">")
            return T.ArrayType(el, True)
        if low == "map":
            self.take("<")
            k = self.dtype()
            self.take(",")
            v = self.dtype()
            self.take(">")
            return T.MapType(k, v, True)
        if low in ("decimal", "dec", "numeric"):
            p, s = 10, 0
            if self.peek() == "(":
                self.take()
                p = int(self.take())
                if self.peek() == ",":
                    self.take()
                    s = int(self.take())
                self.take(")")
            if not (0 < p <= 38 and 0 <= s <= p):
                raise DDLError(f"decimal({p},{s}) is out of range")
            return T.DecimalType(p, s)
        if low in ("varchar", "char"):
            if self.peek() == "(":
                self.take()
                self.take()
                self.take(")")
            return T.StringType()
        cls = _PRIMITIVES.get(low)
        if cls is None:
            raise DDLError(f"unknown type {t!r}")
        return cls()


def parse_body_schema(text: str) -> T.StructType:
    """``bodySchema`` -> StructType. Accepts Spark DDL (``a INT, b STRUCT<c: STRING>``, as
    ``DataFrame.schema.simpleString()`` minus the outer ``struct<>``, or ``struct<...>``) or
    Spark's JSON schema form (``df.schema.json()``)."""
    src = (text or "").strip()
    if not src:
        raise ZepsSparkError("option 'bodySchema' is empty")
    try:
        if src.startswith("{"):
            try:
                st = T.StructType.fromJson(json.loads(src))
            except Exception as e:
                raise DDLError(f"not a Spark JSON schema ({e})") from None
            if not st.fields:
                raise DDLError("no fields")
            return st
        p = _Parser(src)
        if len(p.toks) >= 2 and p.toks[0].lower() == "struct" and p.toks[1] == "<":
            st = p.dtype()
        else:
            st = p.fields(None)
        if p.peek() is not None:
            raise DDLError(f"unexpected {p.peek()!r} after the last field")
        return st
    except DDLError as e:
        raise ZepsSparkError(f"option 'bodySchema' is not a valid schema: {e}. Expected Spark DDL "
                             f"such as 'id BIGINT, region STRING, amount DOUBLE' "
                             f"(got {src[:80]!r})") from None


# ----------------------------------------------------------------------------- coercion

_INT_RANGES = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_BAD = object()


def _coercer(dt: T.DataType) -> Callable[[Any], Any]:
    """A function value -> value that pyarrow accepts for ``dt``, or ``_BAD``."""
    if isinstance(dt, T.StringType):
        def f(v):
            if isinstance(v, str):
                return v
            if isinstance(v, bytes):
                return v.decode("utf-8", "replace")
            if isinstance(v, (dict, list)):
                return json.dumps(v, separators=(",", ":"), default=float)   # Decimals within
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, (int, float)):
                return json.dumps(v)
            if isinstance(v, Decimal):               # a JSON number, as written
                return str(v)
            return _BAD
        return f
    if type(dt) in _INT_RANGES:
        bits = _INT_RANGES[type(dt)]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

        def f(v):
            if isinstance(v, bool):
                return _BAD
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, Decimal):
                v = int(v) if v.is_finite() and v == v.to_integral_value() else _BAD
            if isinstance(v, str):
                try:
                    v = int(v.strip())
                except ValueError:
                    return _BAD
            if isinstance(v, int) and lo <= v <= hi:
                return v
            return _BAD
        return f
    if isinstance(dt, (T.DoubleType, T.FloatType)):
        def f(v):
            if isinstance(v, bool):
                return _BAD
            if isinstance(v, (int, float, Decimal)):
                return float(v)
            if isinstance(v, str):
                try:
                    return float(v)
                except ValueError:
                    return _BAD
            return _BAD
        return f
    if isinstance(dt, T.BooleanType):
        def f(v):
            if isinstance(v, bool):
                return v
            if isinstance(v, str) and v.lower() in ("true", "false"):
                return v.lower() == "true"
            return _BAD
        return f
    if isinstance(dt, T.DecimalType):
        q = Decimal(1).scaleb(-dt.scale)
        # Spark's decimals have up to 38 digits; Python's default context has 28 (quantize
        # raised past it: a value a DECIMAL(38, s) holds was null)
        context = Context(prec=max(dt.precision, 28) + 2)

        def f(v):
            if isinstance(v, bool) or not isinstance(v, (int, float, str, Decimal)):
                return _BAD
            try:
                with localcontext(context):
                    d = Decimal(str(v)).quantize(q)
            except (InvalidOperation, ValueError):
                return _BAD
            if len(d.as_tuple().digits) > dt.precision:
                return _BAD
            return d
        return f
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        aware = isinstance(dt, T.TimestampType)

        def f(v):
            if isinstance(v, bool):
                return _BAD
            if isinstance(v, Decimal):
                v = float(v)
            if isinstance(v, (int, float)):          # seconds since the epoch, as Spark casts
                try:
                    d = datetime.fromtimestamp(v, tz=timezone.utc)
                except (OverflowError, OSError, ValueError):
                    return _BAD
            elif isinstance(v, datetime):
                d = v
            elif isinstance(v, str):
                s = v.strip()
                if s.endswith(("Z", "z")):
                    s = s[:-1] + "+00:00"
                try:
                    d = datetime.fromisoformat(s)
                except ValueError:
                    return _BAD
            else:
                return _BAD
            if d.tzinfo is None:
                d = d.replace(tzinfo=timezone.utc)
            return d if aware else d.astimezone(timezone.utc).replace(tzinfo=None)
        return f
    if isinstance(dt, T.DateType):
        def f(v):
            if isinstance(v, datetime):
                return v.date()
            if isinstance(v, date):
                return v
            if isinstance(v, str):
                try:
                    return date.fromisoformat(v.strip()[:10])
                except ValueError:
                    return _BAD
            return _BAD
        return f
    if isinstance(dt, T.BinaryType):
        def f(v):
            if isinstance(v, (bytes, bytearray)):
                return bytes(v)
            if isinstance(v, str):                   # JSON has no bytes: base64, as Spark writes
                try:
                    return base64.b64decode(v, validate=True)
                except Exception:
                    return v.encode("utf-8")
            return _BAD
        return f
    if isinstance(dt, T.ArrayType):
        el = _coercer(dt.elementType)

        def f(v):
            if not isinstance(v, (list, tuple)):
                return _BAD
            out = []
            for x in v:
                y = None if x is None else el(x)
                out.append(None if y is _BAD else y)
            return out
        return f
    if isinstance(dt, T.MapType):
        kf, vf = _coercer(dt.keyType), _coercer(dt.valueType)

        def f(v):
            if not isinstance(v, dict):
                return _BAD
            out = []
            for k, x in v.items():
                kk = kf(k)
                if kk is _BAD or kk is None:
                    return _BAD
                y = None if x is None else vf(x)
                out.append((kk, None if y is _BAD else y))
            return out
        return f
    if isinstance(dt, T.StructType):
        subs = [(fld.name, _coercer(fld.dataType)) for fld in dt.fields]

        def f(v):
            if not isinstance(v, dict):
                return _BAD
            out = {}
            for name, g in subs:
                x = v.get(name)
                y = None if x is None else g(x)
                out[name] = None if y is _BAD else y
            return out
        return f
    raise ZepsSparkError(f"option 'bodySchema': type {dt.simpleString()} is not supported")


def _has_decimal(dt) -> bool:
    """Does the type ``dt`` hold a DecimalType anywhere?"""
    if isinstance(dt, T.DecimalType):
        return True
    if isinstance(dt, T.ArrayType):
        return _has_decimal(dt.elementType)
    if isinstance(dt, T.MapType):
        return _has_decimal(dt.keyType) or _has_decimal(dt.valueType)
    if isinstance(dt, T.StructType):
        return any(_has_decimal(f.dataType) for f in dt.fields)
    return False


def make_decoder(fmt: str, body_type: Optional[T.StructType]):
    """A picklable-by-construction description is kept by the caller; this builds the function
    (called in each partition reader)."""
    if fmt in ("json", "msgpack"):
        coerce = _coercer(body_type)
        if fmt == "json" and _has_decimal(body_type):
            # JSON numbers read as Decimal, not binary floats: a DECIMAL keeps every digit
            # (123456789012345678.91 became ...680.00); the other types take Decimal too
            def loads(b):
                return json.loads(b, parse_float=Decimal)
        elif fmt == "json":
            loads = json.loads
        else:
            import msgpack

            def loads(b):
                return msgpack.unpackb(b, raw=False, strict_map_key=False, timestamp=3)

        def decode_one(b):
            try:
                v = loads(b)
            except Exception:
                return None
            r = coerce(v)
            return None if r is _BAD else r
        return decode_one
    return None


def decode_body(body: pa.Array, fmt: str, arrow_type: pa.DataType, decode_one=None) -> pa.Array:
    """The body column in the requested format (``body`` is a ``pa.binary()`` array)."""
    if fmt == "binary":
        return body
    if fmt == "utf8":
        s = body.view(pa.string())
        try:
            s.validate(full=True)
            return s
        except pa.ArrowInvalid:
            return pa.array([None if b is None else b.decode("utf-8", "replace")
                             for b in body.to_pylist()], type=pa.string())
    values = [None if b is None else decode_one(b) for b in body.to_pylist()]
    return pa.array(values, type=arrow_type)
