"""CurveZMQ for the broker: its key pair, the allow-list of client keys (ZAP), and key files.

The broker side of the security the docs describe (docs/operations.md, Security):

* the broker's ROUTER is a CURVE server with the key pair of a ZeroMQ certificate file
  (``--curve-secret FILE``, written by ``zeps keys new NAME``);
* pyzmq's ZAP authenticator (``zmq.auth``) admits only the client public keys found in the
  allow-list directory (``--allow DIR``: one ``*.key`` certificate per client) and the keys an
  ACL names in its ``[clients]`` (:meth:`zeps.broker.acl.Acl.keys`); an unknown key cannot
  complete the handshake, and a plaintext client cannot talk to a CURVE broker at all;
* the ZAP ``User-Id`` of each connection is the client's public key (Z85 text): the broker's
  ACL (:mod:`zeps.broker.acl`) is keyed by it;
* every refusal of the authenticator (the client's address, its key, the ZAP status) is kept
  for the broker's log (:meth:`CurveServer.take_refusals`, :mod:`zeps.broker.handshakes`).
"""
from __future__ import annotations

import collections
import os
import shutil
import tempfile
from typing import Deque, FrozenSet, Iterable, List, Optional, Tuple

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator


class SecurityError(ValueError):
    """A key file or allow-list that cannot be used; the text says which and why."""


def load_secret(path: str) -> Tuple[bytes, bytes]:
    """(public, secret) of a secret certificate file; SecurityError if it has no secret key."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise SecurityError(f"cannot read key pair {path}: {exc}") from None
    if not secret:
        raise SecurityError(f"{path} holds no secret key (give the .key_secret file)")
    return public, secret


def load_public(path: str) -> bytes:
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise SecurityError(f"cannot read public key {path}: {exc}") from None
    return public


def new_keys(directory: str, name: str) -> Tuple[str, str]:
    """Write ``NAME.key`` (public) and ``NAME.key_secret`` in ZeroMQ's certificate format;
    refuse to overwrite (a symbolic link at either name too, dangling or not: the file would be
    written where it points). The secret is private from its creation (umask 077 while the
    files are written; it was readable by all, under umask 022, until a chmod after it: found
    by review); the public one is then made readable as the umask allows."""
    if not name or "/" in name or name.startswith("."):
        raise SecurityError(f"bad key name {name!r}: a plain file name")
    os.makedirs(directory, exist_ok=True)
    for suffix in (".key", ".key_secret"):
        if os.path.lexists(os.path.join(directory, name + suffix)):
            raise SecurityError(f"{os.path.join(directory, name + suffix)} exists: not overwritten")
    umask = os.umask(0o077)
    try:
        public, secret = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(umask)
    os.chmod(public, 0o644 & ~umask)
    return public, secret


#: Refusals kept for the broker's log between two looks (a flood beyond is only counted).
MAX_REFUSALS = 1024


class _Authenticator(ThreadAuthenticator):
    """pyzmq's ZAP authenticator (in its thread), also recording each refusal as ``(address,
    key, status, text)``: the address and the public key (Z85) from the ZAP request, the status
    and text of the reply. The deque is thread-safe; the broker's loop takes them out."""

    def __init__(self, context):
        super().__init__(context)
        self.refusals: Deque[Tuple[str, Optional[str], str, str]] = collections.deque(
            maxlen=MAX_REFUSALS)
        self.lost = 0                                # refusals beyond MAX_REFUSALS
        self._requests: dict = {}                    # request id -> (address, key)

    async def handle_zap_message(self, msg: List[bytes]) -> None:
        if len(msg) >= 6:
            key = None
            if msg[5] == b"CURVE" and len(msg) >= 7 and len(msg[6]) == 32:
                key = zmq.utils.z85.encode(msg[6]).decode("ascii")
            self._requests[msg[1]] = (msg[3].decode("utf-8", "replace"), key)
        try:
            await super().handle_zap_message(msg)
        finally:
            if len(msg) >= 2:
                self._requests.pop(msg[1], None)

    def _send_zap_reply(self, request_id, status_code, status_text, user_id="anonymous"):
        if status_code != b"200":
            address, key = self._requests.get(request_id, ("", None))
            if len(self.refusals) == MAX_REFUSALS:
                self.lost += 1
            self.refusals.append((address, key, status_code.decode("ascii", "replace"),
                                  status_text.decode("utf-8", "replace")))
        super()._send_zap_reply(request_id, status_code, status_text, user_id)


class CurveServer:
    """The broker's CURVE settings and its ZAP authenticator (a thread with its own socket)."""

    def __init__(self, secret_file: str, allow_dir: Optional[str] = None,
                 extra_keys: Iterable[str] = (), context: Optional[zmq.Context] = None):
        self.public, self.secret = load_secret(secret_file)
        self.allow_dir = allow_dir
        self.context = context or zmq.Context.instance()
        self._auth: Optional[_Authenticator] = None
        self._keys_dir: Optional[str] = None
        self.keys: FrozenSet[str] = frozenset()
        if allow_dir is not None and not os.path.isdir(allow_dir):
            raise SecurityError(f"allow-list {allow_dir} is not a directory")
        self.set_keys(extra_keys)

    def set_keys(self, extra_keys: Iterable[str]) -> None:
        """The allowed keys: the allow-list directory's certificates plus ``extra_keys`` (Z85),
        e.g. the keys an ACL names. Called again on reload. :attr:`keys` is then the set of
        allowed public keys (Z85 text): the broker core revokes the connections of the others
        (:meth:`zeps.broker.core.BrokerCore.set_allowed_keys`), since the authenticator only
        judges new handshakes. A certificate that cannot be read raises SecurityError and
        changes nothing."""
        keys_dir = tempfile.mkdtemp(prefix="zeps-allowed-")
        if self.allow_dir is not None:
            for entry in os.listdir(self.allow_dir):
                if entry.endswith(".key"):
                    shutil.copy(os.path.join(self.allow_dir, entry), keys_dir)
        for i, key in enumerate(extra_keys):
            with open(os.path.join(keys_dir, f"acl-{i}.key"), "w") as f:
                f.write(f'metadata\ncurve\n    public-key = "{key}"\n')
        try:                           # exactly what the authenticator will admit
            keys = frozenset(k.decode("ascii") for k in zmq.auth.load_certificates(keys_dir))
        except (OSError, ValueError) as exc:
            shutil.rmtree(keys_dir, ignore_errors=True)
            raise SecurityError(f"allow-list {self.allow_dir}: {exc}") from None
        self.keys = keys
        old, self._keys_dir = self._keys_dir, keys_dir
        if self._auth is not None:
            self._auth.configure_curve(domain="*", location=keys_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def allowed_count(self) -> int:
        return sum(1 for e in os.listdir(self._keys_dir) if e.endswith(".key"))

    def apply(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE server and start the authenticator (before bind)."""
        self._auth = _Authenticator(self.context)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=self._keys_dir)
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True

    def take_refusals(self) -> Tuple[List[Tuple[str, Optional[str], str, str]], int]:
        """The handshakes the authenticator refused since the last call, oldest first, as
        ``(address, key or None, ZAP status, status text)``, and how many more it refused (at
        most MAX_REFUSALS are kept between two calls; the others are only counted)."""
        auth = self._auth
        if auth is None or not auth.refusals:
            return [], 0
        out = []
        while auth.refusals:
            out.append(auth.refusals.popleft())
        lost, auth.lost = auth.lost, 0
        return out, lost

    def stop(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._keys_dir is not None:
            shutil.rmtree(self._keys_dir, ignore_errors=True)
            self._keys_dir = None


def client_options(server_public: bytes, public: bytes, secret: bytes) -> dict:
    """Socket options that make a client socket talk CURVE to a broker with ``server_public``."""
    return {zmq.CURVE_SERVERKEY: server_public, zmq.CURVE_PUBLICKEY: public,
            zmq.CURVE_SECRETKEY: secret}
