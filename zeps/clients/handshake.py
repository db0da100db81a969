"""What the socket monitor's ``HANDSHAKE_FAILED_*`` events mean for a client
(:class:`HandshakeWatch`): the client's connection (:mod:`zeps.clients.transport`) and its
one-request sockets (``OneRequest``) ask it."""
from __future__ import annotations

import zmq

__all__ = ["HANDSHAKE_FAILED", "HandshakeWatch"]

HANDSHAKE_FAILED = int(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                       | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_EVENT_NAMES = {int(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL): "HANDSHAKE_FAILED_NO_DETAIL",
                int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL): "HANDSHAKE_FAILED_PROTOCOL",
                int(zmq.EVENT_HANDSHAKE_FAILED_AUTH): "HANDSHAKE_FAILED_AUTH"}
_KEYS_HINT = ("check the broker's public key (--server-key; CurveKeys' server key in the SDK) "
              "and that this client's key is on the broker's allow-list (--allow) or in its ACL")

_CURVE_HINT = ("give the broker's public key (--server-key FILE) and this client's key pair "
               "(--client-key FILE; curve=CurveKeys.from_files(...) in the SDK)")


class HandshakeWatch:
    """What the socket monitor's ``HANDSHAKE_FAILED_*`` events mean for a client that has not
    reached the broker yet (its ``curve``: :class:`~zeps.clients.curve.CurveKeys` or None).

    :meth:`event` returns the :class:`~zeps.clients.errors.HandshakeFailed` to raise, or None
    to keep trying. A refused key (AUTH: the ZAP status) and a security mechanism mismatch are
    final at once; a failure without detail (what a client with a wrong server key sees: the
    broker cannot read its HELLO and closes the connection) once it happened twice in a row,
    so that a connection cut once mid-handshake (a broker stopping) is not taken for a mistake.
    """

    NO_DETAIL_STRIKES = 2

    def __init__(self, endpoint: str, curve=None):
        self.endpoint = endpoint
        self.curve = curve
        self.strikes = 0

    def event(self, event: int, value: int):
        from .errors import HandshakeFailed
        ep, name = self.endpoint, _EVENT_NAMES.get(event, str(event))
        head = f"the broker at {ep} answered"
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            public = self.curve.public.decode("ascii", "replace") if self.curve else "?"
            text = (f"{head} but refused this client's CurveZMQ key (ZAP status {value}): its "
                    f"public key {public} must be on the broker's allow-list (--allow DIR) or "
                    f"named in its ACL's [clients]")
        elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH and self.curve is None:
                text = f"{head} but requires CurveZMQ: {_CURVE_HINT}"
            elif value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                text = (f"{head} but does not use CurveZMQ (it runs without --curve-secret): "
                        f"connect without --server-key and --client-key")
            else:
                text = (f"{head} but the {'CurveZMQ' if self.curve else 'ZeroMQ'} handshake "
                        f"failed (protocol error 0x{value:08x}): {_KEYS_HINT}")
        elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self.strikes += 1
            if self.strikes < self.NO_DETAIL_STRIKES:
                return None
            if self.curve is not None:
                text = (f"{head} but the CurveZMQ handshake failed (the broker closed the "
                        f"connection, as it does when the client's HELLO is encrypted for "
                        f"another key, or when it does not use CurveZMQ): {_KEYS_HINT}")
            else:
                text = (f"{head} but closed the connection during the handshake: it probably "
                        f"requires CurveZMQ: {_CURVE_HINT}")
        else:
            return None
        return HandshakeFailed(text, ep, name, value)
