"""CurveZMQ keys for a client: the broker's public key and the client's own key pair.

::

    from zeps.clients import Client, CurveKeys

    keys = CurveKeys.from_files("broker.key", "orders-service.key_secret")
    with Client("tcp://broker:7470", "orders", curve=keys) as c:
        ...

The files are ZeroMQ certificates as ``zeps keys new NAME`` writes them (``NAME.key``: public;
``NAME.key_secret``: the pair). Every ZEPS client takes ``curve=``: :class:`Client`,
:class:`AsyncClient`, the admin calls, the multicast bridge and receiver's broker connection,
and the Spark source and sink (options ``serverKey`` and ``clientKey``, two file paths). The CLI
takes ``--server-key FILE --client-key FILE`` (or ``$ZEPS_SERVER_KEY`` / ``$ZEPS_CLIENT_KEY``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Optional

import zmq
import zmq.auth

__all__ = ["CurveKeys", "curve_from_env"]


@dataclass(frozen=True)
class CurveKeys:
    server_public: bytes          # Z85 text of the broker's public key
    public: bytes                 # Z85 text of this client's public key
    secret: bytes                 # Z85 text of this client's secret key

    @classmethod
    def from_files(cls, server_key: str, client_key: str) -> "CurveKeys":
        """``server_key``: the broker's public certificate; ``client_key``: this client's secret
        certificate. :class:`ValueError` naming the file when one cannot be used."""
        try:
            server_public, _ = zmq.auth.load_certificate(server_key)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the broker's public key {server_key}: {exc}") from None
        try:
            public, secret = zmq.auth.load_certificate(client_key)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the client key pair {client_key}: {exc}") from None
        if not secret:
            raise ValueError(f"{client_key} holds no secret key (give the .key_secret file)")
        return cls(server_public, public, secret)

    def socket_options(self) -> Dict[int, bytes]:
        """The socket options that make a DEALER talk CurveZMQ to the broker."""
        return {zmq.CURVE_SERVERKEY: self.server_public, zmq.CURVE_PUBLICKEY: self.public,
                zmq.CURVE_SECRETKEY: self.secret}

    def apply(self, sock) -> None:
        for option, value in self.socket_options().items():
            sock.setsockopt(option, value)


def curve_from_env(server_key: Optional[str] = None,
                   client_key: Optional[str] = None) -> Optional[CurveKeys]:
    """Keys from the two file paths, else from ``$ZEPS_SERVER_KEY`` / ``$ZEPS_CLIENT_KEY``; None
    when neither is given (plaintext). One without the other is a :class:`ValueError`."""
    server_key = server_key or os.environ.get("ZEPS_SERVER_KEY") or None
    client_key = client_key or os.environ.get("ZEPS_CLIENT_KEY") or None
    if server_key is None and client_key is None:
        return None
    if server_key is None or client_key is None:
        raise ValueError("CurveZMQ needs both the broker's public key (--server-key) and the "
                         "client's key pair (--client-key)")
    return CurveKeys.from_files(server_key, client_key)
