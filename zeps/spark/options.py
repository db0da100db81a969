"""Options of the ``zeps`` Spark data source: names, parsing, validation, and the one error type.

Every problem with what the user wrote raises :class:`ZepsSparkError` (a ``ValueError``) whose
message starts with ``zeps:`` and names the option, so it is the first line of the Python
exception Spark shows, not buried in a Java stack trace.
"""
from __future__ import annotations

from zeps import units

import re
from dataclasses import dataclass
from typing import Mapping, Optional

__all__ = ["ZepsSparkError", "ZepsOptions", "parse_options", "OPTION_NAMES", "BODY_FORMATS"]


class ZepsSparkError(ValueError):
    """A bad option, a missing stream, an unreachable broker, a bad body schema, ..."""

    def __init__(self, message: str):
        super().__init__(message if message.startswith("zeps:") else "zeps: " + message)


# canonical spelling of every option (Spark lower-cases option names)
OPTION_NAMES = (
    "path", "endpoint", "stream", "pattern",
    "startingSequence", "endingSequence", "startingTime", "endingTime",
    "maxRecordsPerTrigger", "bodyFormat", "bodySchema",
    "verifyCrc", "maxRecordsPerPartition", "timeout", "serverKey", "clientKey", "writeId",
)
_CANON = {n.lower(): n for n in OPTION_NAMES}
# Spark itself may pass these to a streaming sink / source; they are not ours to refuse
_SPARK_OWN = {"checkpointlocation", "queryname"}
BODY_FORMATS = ("binary", "utf8", "json", "msgpack")
_MS_RE = re.compile(r"^\s*-?\d+\s*$")
DEFAULT_RECORDS_PER_PARTITION = 1_000_000


@dataclass
class ZepsOptions:
    path: Optional[str] = None
    endpoint: Optional[str] = None
    stream: str = ""
    pattern: str = ""
    starting_sequence: object = "earliest"   # "earliest" | "latest" | int
    ending_sequence: Optional[int] = None    # inclusive; None = the last one
    starting_time_ns: Optional[int] = None
    ending_time_ns: Optional[int] = None     # inclusive
    max_records_per_trigger: Optional[int] = None
    body_format: str = "binary"
    body_schema: Optional[str] = None
    verify_crc: bool = True
    records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION
    timeout: float = 10.0
    write_id: Optional[str] = None  # writeId: a batch write's own producer ids (writer.py)
    curve: object = None          # zeps.clients.CurveKeys from serverKey + clientKey, or None


def _name(key: str) -> str:
    return _CANON.get(key.lower(), key)


def _int_option(opts: Mapping[str, str], name: str, minimum: int) -> Optional[int]:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise ZepsSparkError(f"option '{name}' must be an integer, not {raw!r}") from None
    if v < minimum:
        raise ZepsSparkError(f"option '{name}' must be >= {minimum}, not {v}")
    return v


def parse_time(name: str, raw: str) -> int:
    """A time option -> ns since the epoch: the CLI's forms (:data:`zeps.units.TIME_FORMS`), except
    that a bare number is epoch *milliseconds* (``1714564800000``); ``1714564800s`` says seconds."""
    try:
        return units.parse_time(str(raw), bare_unit="ms")
    except ValueError as exc:
        raise ZepsSparkError(f"option '{name}': {exc}") from None


def _bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    s = str(raw).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ZepsSparkError(f"option '{name}' must be true or false, not {raw!r}")


def parse_options(options: Mapping[str, str], mode: str) -> ZepsOptions:
    """Validate the options for ``mode`` = ``"read"`` (batch), ``"stream"`` or ``"write"``."""
    opts = {str(k).lower(): v for k, v in dict(options).items()}
    unknown = sorted(k for k in opts if k not in _CANON and k not in _SPARK_OWN)
    if unknown:
        raise ZepsSparkError(
            f"unknown option '{unknown[0]}'" + (f" (and {', '.join(unknown[1:])})" if unknown[1:] else "")
            + "; the zeps source knows: " + ", ".join(OPTION_NAMES))
    o = ZepsOptions()
    o.path = opts.get("path") or None
    o.endpoint = opts.get("endpoint") or None
    stream = opts.get("stream")
    if stream is None or str(stream) == "":
        raise ZepsSparkError("option 'stream' is required: the name of the ZEPS stream to "
                             + ("write to" if mode == "write" else "read"))
    o.stream = str(stream)
    if len(o.stream.encode("utf-8")) > 255 or "\x00" in o.stream:
        raise ZepsSparkError(f"option 'stream': {o.stream[:40]!r} is not a valid stream name "
                             "(1 to 255 bytes of UTF-8, no NUL)")
    if mode == "write":
        if o.path and not o.endpoint:
            raise ZepsSparkError("option 'path' cannot be written to: the zeps sink publishes "
                                 "through a running broker, give option 'endpoint' "
                                 "(e.g. tcp://127.0.0.1:7470)")
        if not o.endpoint:
            raise ZepsSparkError("option 'endpoint' is required to write: the broker to "
                                 "publish to (e.g. tcp://127.0.0.1:7470)")
        read_only = [n for n in ("pattern", "startingSequence", "endingSequence", "startingTime",
                                 "endingTime", "maxRecordsPerTrigger", "bodyFormat",
                                 "bodySchema", "verifyCrc", "maxRecordsPerPartition", "path")
                     if n.lower() in opts]
        if read_only:
            raise ZepsSparkError(f"option '{read_only[0]}' only applies to reading; the zeps "
                                 "sink takes endpoint, stream, timeout, serverKey, clientKey "
                                 "and writeId")
        write_id = opts.get("writeid")
        if write_id is not None:
            o.write_id = str(write_id)
            try:
                size = len(o.write_id.encode("utf-8"))
            except UnicodeEncodeError:
                size = 0
            if not 0 < size <= 128 or not o.write_id.isprintable():
                raise ZepsSparkError(f"option 'writeId': {o.write_id[:40]!r} is not a write id "
                                     "(1 to 128 bytes of printable UTF-8)")
    elif "writeid" in opts:
        raise ZepsSparkError("option 'writeId' only applies to writing (df.write)")
    else:
        if o.path and o.endpoint:
            raise ZepsSparkError("options 'path' and 'endpoint' exclude each other: read a "
                                 "journal directory (path) or a running broker (endpoint)")
        if not o.path and not o.endpoint:
            raise ZepsSparkError("option 'path' (a journal data directory) or 'endpoint' "
                                 "(a running broker, e.g. tcp://127.0.0.1:7470) is required")
    if o.endpoint:
        from ..units import check_endpoint
        try:
            check_endpoint(o.endpoint)
        except ValueError as e:
            raise ZepsSparkError(f"option 'endpoint': {e}") from None
    o.pattern = str(opts.get("pattern", "") or "")
    if o.pattern.startswith("~"):
        try:
            from ..matching import compile_pattern
            compile_pattern(o.pattern)
        except Exception as e:
            raise ZepsSparkError(f"option 'pattern': {e}") from None
    raw = opts.get("startingsequence")
    if raw is not None:
        s = str(raw).strip().lower()
        if s in ("earliest", "latest"):
            o.starting_sequence = s
        else:
            o.starting_sequence = _int_option(opts, "startingSequence", 0)
    raw = opts.get("endingsequence")
    if raw is not None and str(raw).strip().lower() != "latest":
        o.ending_sequence = _int_option(opts, "endingSequence", 0)
    if opts.get("startingtime") is not None:
        if raw_is_set(opts, "startingsequence"):
            raise ZepsSparkError("options 'startingSequence' and 'startingTime' exclude each "
                                 "other: give one")
        o.starting_time_ns = parse_time("startingTime", opts["startingtime"])
    if opts.get("endingtime") is not None:
        if raw_is_set(opts, "endingsequence"):
            raise ZepsSparkError("options 'endingSequence' and 'endingTime' exclude each "
                                 "other: give one")
        o.ending_time_ns = parse_time("endingTime", opts["endingtime"])
    o.max_records_per_trigger = _int_option(opts, "maxRecordsPerTrigger", 1)
    fmt = str(opts.get("bodyformat", "binary")).strip().lower()
    if fmt in ("string", "text", "utf-8"):
        fmt = "utf8"
    if fmt not in BODY_FORMATS:
        raise ZepsSparkError(f"option 'bodyFormat' must be one of {', '.join(BODY_FORMATS)}, "
                             f"not {opts.get('bodyformat')!r}")
    o.body_format = fmt
    o.body_schema = opts.get("bodyschema")
    if fmt in ("json", "msgpack") and not o.body_schema:
        raise ZepsSparkError(f"option 'bodySchema' is required with bodyFormat={fmt}: a DDL "
                             "string such as 'id BIGINT, region STRING, amount DOUBLE'")
    if o.body_schema and fmt not in ("json", "msgpack"):
        raise ZepsSparkError(f"option 'bodySchema' only applies to bodyFormat=json or msgpack "
                             f"(bodyFormat is {fmt})")
    o.verify_crc = _bool_option(opts, "verifyCrc", True)
    rpp = _int_option(opts, "maxRecordsPerPartition", 1)
    if rpp is not None:
        o.records_per_partition = rpp
    raw = opts.get("timeout")
    if raw is not None:
        try:
            o.timeout = float(raw)
            if not o.timeout > 0:
                raise ValueError
        except ValueError:
            raise ZepsSparkError(f"option 'timeout' must be a positive number of seconds, "
                                 f"not {raw!r}") from None
    server_key, client_key = opts.get("serverkey"), opts.get("clientkey")
    if server_key or client_key:
        from zeps.clients.curve import CurveKeys
        if not (server_key and client_key):
            raise ZepsSparkError("options 'serverKey' (the broker's public key file) and "
                                 "'clientKey' (this client's .key_secret file) go together")
        try:
            o.curve = CurveKeys.from_files(str(server_key), str(client_key))
        except ValueError as exc:
            raise ZepsSparkError(f"option 'serverKey'/'clientKey': {exc}") from None
    return o


def raw_is_set(opts: Mapping[str, str], key: str) -> bool:
    v = opts.get(key)
    return v is not None and str(v).strip() != ""
