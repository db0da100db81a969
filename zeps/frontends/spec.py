"""What ``--chp PORT:STREAM`` and ``--bus PORT:STREAM`` name, and where a front end binds and
connects. Pure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence, Tuple


@dataclass(frozen=True)
class FrontEndSpec:
    """``--chp PORT:STREAM`` / ``--bus PORT:STREAM``: the ports ``port .. port + 2``."""
    kind: str
    port: int
    stream: str

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.port}"


def parse_spec(kind: str, text: str) -> FrontEndSpec:
    """``PORT:STREAM``: ``PORT`` 1 to 65533 (the front end takes three ports from it), ``STREAM``
    a stream name (1 to 255 bytes of UTF-8, no NUL). ValueError says what is wrong."""
    port_text, sep, stream = text.partition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"expected PORT:STREAM, got {text!r}")
    port = int(port_text)
    if not 1 <= port <= 65533:
        raise ValueError(f"port {port}: must be 1 to 65533 (the front end opens PORT, PORT+1 "
                         f"and PORT+2)")
    raw = stream.encode("utf-8", "surrogatepass")
    if not 1 <= len(raw) <= 255 or "\0" in stream:
        raise ValueError(f"stream name {stream!r}: 1 to 255 bytes of UTF-8, no NUL")
    return FrontEndSpec(kind, port, stream)


def check_specs(specs: Sequence[FrontEndSpec]) -> None:
    """No two front ends share a port (each takes three)."""
    taken: Dict[int, str] = {}
    for spec in specs:
        for p in range(spec.port, spec.port + 3):
            if p in taken:
                raise ValueError(f"--{spec.kind} {spec.port}:{spec.stream}: port {p} is also "
                                 f"used by {taken[p]}")
            taken[p] = f"--{spec.kind} {spec.port}"


def hosts_of(broker_endpoint: str) -> Tuple[str, str]:
    """``(bind host, connect endpoint)``: the front ends bind on the host the broker's endpoint
    is bound to (tcp; 127.0.0.1 for another transport) and connect their link to the broker's
    endpoint (a wildcard address replaced by the loopback one)."""
    transport, _, rest = broker_endpoint.partition("://")
    if transport != "tcp":
        return "127.0.0.1", broker_endpoint
    host, _, port = rest.rpartition(":")
    connect = {"0.0.0.0": "127.0.0.1", "*": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
    return host, f"tcp://{connect}:{port}"
