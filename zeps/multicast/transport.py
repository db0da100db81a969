"""Multicast sockets: plain IPv4 UDP multicast with the standard socket API.

ZeroMQ can carry multicast too (``epgm://`` over PGM, ``norm://`` over NORM), but only when
libzmq was built with them; the libzmq in pyzmq's wheels has neither. :func:`zmq_multicast`
asks ``zmq.has()`` instead of assuming, and the bridge and the receiver use plain UDP, which every
system has. (PGM and NORM add their own retransmission; ZEPS repairs from the broker's journal
instead, which also covers receivers that join late or were down.)
"""
from __future__ import annotations

import ipaddress
import socket
import struct

__all__ = [
    "DEFAULT_RCVBUF",
    "check_interface",
    "open_receiver",
    "open_sender",
    "parse_group",
    "zmq_multicast",
]

#: Receive buffer a receiver asks the kernel for (Linux caps it at net.core.rmem_max).
DEFAULT_RCVBUF = 4 << 20

Group = tuple[str, int]


def parse_group(text) -> Group:
    """``"239.1.2.3:5000"`` -> ``("239.1.2.3", 5000)``; :class:`ValueError` naming the problem
    for anything that is not an IPv4 multicast address (224.0.0.0/4) with a port."""
    if isinstance(text, tuple) and len(text) == 2:
        host, port = text
    elif isinstance(text, str):
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"bad multicast group {text!r}: expected ADDRESS:PORT, "
                             f"e.g. 239.1.2.3:5000")
    else:
        raise ValueError(f"bad multicast group {text!r}: expected 'ADDRESS:PORT'")
    try:
        addr = ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"bad multicast group {text!r}: {host!r} is not an IPv4 "
                         f"address") from None
    if not addr.is_multicast:
        raise ValueError(f"bad multicast group {text!r}: {host} is not a multicast address "
                         f"(224.0.0.0 to 239.255.255.255)")
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise ValueError(f"bad multicast group {text!r}: port must be a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"bad multicast group {text!r}: port must be from 1 to 65535")
    return str(addr), port


def check_interface(text: str | None) -> str | None:
    """The IPv4 address of the local interface to use, or ``None`` (the system's choice)."""
    if text is None:
        return None
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise ValueError(f"bad interface {text!r}: give the IPv4 address of a local "
                         f"interface") from None


def open_sender(group: Group, interface: str | None = None, ttl: int = 1,
                loop: bool = True) -> socket.socket:
    """A UDP socket that sends to ``group``: ``ttl`` hops (1 = this network only), out of
    ``interface`` when given, looped back to receivers on this host when ``loop``."""
    if not 0 <= ttl <= 255:
        raise ValueError(f"bad TTL {ttl}: must be from 0 to 255")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1 if loop else 0)
        if interface:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
        sock.connect(group)
    except OSError:
        sock.close()
        raise
    return sock


def open_receiver(group: Group, interface: str | None = None,
                  rcvbuf: int = DEFAULT_RCVBUF) -> socket.socket:
    """A non-blocking UDP socket that has joined ``group`` (on ``interface`` when given).

    Several receivers on one host can join the same group and port (``SO_REUSEADDR``); each
    gets every datagram. It binds the group address, so datagrams sent to other groups on the
    same port do not reach it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.bind(group)
        mreq = struct.pack("4s4s", socket.inet_aton(group[0]),
                           socket.inet_aton(interface or "0.0.0.0"))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def zmq_multicast() -> dict[str, bool]:
    """Which ZeroMQ multicast transports this libzmq has: ``{"epgm": ..., "norm": ...}``."""
    import zmq
    return {"epgm": bool(zmq.has("pgm")), "norm": bool(zmq.has("norm"))}
