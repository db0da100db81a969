"""Per-stream access control: who may publish to and subscribe to which streams. Pure code.

The broker identifies a client by the CurveZMQ public key it authenticated with (the ZAP
``User-Id``, its Z85 text). An ACL file (TOML) names keys and grants rights. Every key named in
``[clients]`` may connect (:meth:`Acl.keys`), whether or not a rule names it: naming a client
is admitting it, and ``clients = ["*"]`` covers it like every other client::

    # names for keys: the key's Z85 text (40 characters), or a path to a ZeroMQ certificate
    # file ("zeps keys new NAME" writes NAME.key and NAME.key_secret); a relative path is
    # taken from the ACL file's directory
    [clients]
    orders-service = "keys/orders-service.key"
    dashboard      = "rq:A[...40 characters...]"

    [[allow]]
    clients   = ["orders-service"]           # names from [clients], or "*" for every client
    publish   = ["orders", "audit.*"]        # exact names; "prefix*" for every name starting so
    subscribe = ["orders"]
    admin     = ["audit.*"]                  # create, purge and delete those streams

    [[allow]]
    clients   = ["*"]                        # dashboard gets this right (and only this one)
    subscribe = ["public.*"]

``"*"`` is every client the broker lets connect: the keys of ``[clients]`` and those of the
allow-list directory (``--allow``). Rights only add up (there is no deny). A client with no
right on a stream cannot ATTACH to it and does not see it in LIST-STREAMS. When no ACL is
configured every client may do everything (see docs/operations.md, Security). :func:`load_acl`
raises :class:`AclError` with one line naming the file and the problem.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

try:                                    # Python 3.11+
    import tomllib
except ImportError:                     # pragma: no cover (3.10)
    import tomli as tomllib             # type: ignore[no-redef]

ANY = "*"


class AclError(ValueError):
    """An ACL file that cannot be used; the text says where and why."""


@dataclass(frozen=True)
class _Names:
    """Stream names as exact names and prefixes; ``every`` for ``"*"``. The prefixes are kept
    grouped by length (``by_length``: (length, the prefixes of that length), shortest first),
    so a look costs one set lookup per distinct length up to the name's, however many
    prefixes there are (a tuple's ``startswith`` compared the name with each of them)."""
    exact: FrozenSet[str]
    prefixes: Tuple[str, ...]
    every: bool
    by_length: Tuple[Tuple[int, FrozenSet[str]], ...] = ()

    @classmethod
    def of(cls, exact: Iterable[str], prefixes: Iterable[str], every: bool) -> "_Names":
        prefixes = tuple(dict.fromkeys(prefixes))
        lengths: Dict[int, set] = {}
        for p in prefixes:
            lengths.setdefault(len(p), set()).add(p)
        return cls(frozenset(exact), prefixes, every,
                   tuple((n, frozenset(lengths[n])) for n in sorted(lengths)))

    @classmethod
    def parse(cls, items: Iterable[str], where: str) -> "_Names":
        exact, prefixes, every = set(), [], False
        for item in items:
            if not isinstance(item, str) or not item:
                raise AclError(f"{where}: stream names must be non-empty strings, not {item!r}")
            if item == ANY:
                every = True
            elif item.endswith("*"):
                prefixes.append(item[:-1])
            else:
                exact.add(item)
        return cls.of(exact, prefixes, every)

    @classmethod
    def union(cls, names: "Iterable[_Names]") -> "_Names":
        names = list(names)
        return cls.of((n for x in names for n in x.exact),
                      (p for x in names for p in x.prefixes), any(x.every for x in names))

    def covers(self, stream: str) -> bool:
        if self.every or stream in self.exact:
            return True
        n = len(stream)
        for length, prefixes in self.by_length:
            if length > n:
                return False
            if stream[:length] in prefixes:
                return True
        return False


@dataclass(frozen=True)
class _Rule:
    clients: FrozenSet[str]          # keys (Z85), or {"*"}
    publish: _Names
    subscribe: _Names
    admin: _Names


@dataclass(frozen=True)
class _Rights:
    """What some rules grant together: their names merged, per right."""
    publish: _Names
    subscribe: _Names
    admin: _Names

    @classmethod
    def of(cls, rules: "List[_Rule]") -> "_Rights":
        return cls(_Names.union(r.publish for r in rules),
                   _Names.union(r.subscribe for r in rules),
                   _Names.union(r.admin for r in rules))


class Acl:
    """The rights of every key. ``may_publish(key, stream)``, ``may_subscribe(key, stream)``.

    The rules are merged when the ACL is loaded: what ``"*"`` grants, and for each key what
    the rules naming it grant. A look is then two, whatever the number of rules and of the
    names they hold (it walked every rule: with an ACL of 5,000 clients' rules a page of
    LIST-STREAMS cost 0.3 s of the loop, and a reload with many clients attached seconds)."""

    def __init__(self, rules: List[_Rule], names: Dict[str, str], source: str = "<acl>"):
        self.rules = rules
        self.names = names               # key -> name, for log lines and reasons
        self.source = source
        self._anyone = _Rights.of([r for r in rules if ANY in r.clients])
        own: Dict[str, List[_Rule]] = {}
        for r in rules:
            for key in r.clients:
                if key != ANY:
                    own.setdefault(key, []).append(r)
        self._own = {key: _Rights.of(rs) for key, rs in own.items()}

    def _may(self, key: Optional[str], stream: str, right: str) -> bool:
        if getattr(self._anyone, right).covers(stream):
            return True
        own = self._own.get(key) if key is not None else None
        return own is not None and getattr(own, right).covers(stream)

    def may_publish(self, key: Optional[str], stream: str) -> bool:
        return self._may(key, stream, "publish")

    def may_subscribe(self, key: Optional[str], stream: str) -> bool:
        return self._may(key, stream, "subscribe")

    def may_admin(self, key: Optional[str], stream: str) -> bool:
        """Create, purge and delete the stream (``admin = [...]`` in an ``[[allow]]``)."""
        return self._may(key, stream, "admin")

    def may_attach(self, key: Optional[str], stream: str) -> bool:
        return self.may_publish(key, stream) or self.may_subscribe(key, stream)

    def keys(self) -> List[str]:
        """The public keys (Z85) named in ``[clients]``: each may connect (the broker adds them
        to its allow-list), whether or not an ``[[allow]]`` names it."""
        return sorted(self.names)

    def who(self, key: Optional[str]) -> str:
        if key is None:
            return "an unauthenticated client"
        return f"client {self.names.get(key, key)!r}"


def _read_key(value: str, base: str, where: str) -> str:
    if len(value) == 40 and not os.path.exists(os.path.join(base, value)):
        return value                                      # Z85 text of a public key
    path = value if os.path.isabs(value) else os.path.join(base, value)
    try:
        import zmq.auth
        public, _secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise AclError(f"{where}: cannot read a public key from {path}: {exc}") from None
    return public.decode("ascii")


def parse_acl(text: str, base_dir: str = ".", source: str = "<acl>") -> Acl:
    """An :class:`Acl` from TOML text (key files are found relative to ``base_dir``)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AclError(f"{source}: not valid TOML: {exc}") from None
    unknown = set(doc) - {"clients", "allow"}
    if unknown:
        raise AclError(f"{source}: unknown section(s) {', '.join(sorted(unknown))} "
                       f"(expected [clients] and [[allow]])")
    clients = doc.get("clients", {})
    if not isinstance(clients, dict):
        raise AclError(f"{source}: [clients] must be a table of name = key")
    keys: Dict[str, str] = {}
    for name, value in clients.items():
        if not isinstance(value, str):
            raise AclError(f"{source}: [clients] {name}: must be a key or a certificate path")
        keys[name] = _read_key(value, base_dir, f"{source}: [clients] {name}")
    rules = []
    allow = doc.get("allow", [])
    if not isinstance(allow, list):
        raise AclError(f"{source}: allow must be an array of tables ([[allow]])")
    for i, entry in enumerate(allow, 1):
        where = f"{source}: [[allow]] #{i}"
        if not isinstance(entry, dict):
            raise AclError(f"{where}: must be a table")
        extra = set(entry) - {"clients", "publish", "subscribe", "admin"}
        if extra:
            raise AclError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
        who = entry.get("clients")
        if isinstance(who, str):
            who = [who]
        if not isinstance(who, list) or not who:
            raise AclError(f"{where}: clients must name at least one client (or \"*\")")
        members = set()
        for name in who:
            if name == ANY:
                members.add(ANY)
            elif name in keys:
                members.add(keys[name])
            else:
                raise AclError(f"{where}: unknown client {name!r} (not in [clients])")
        rules.append(_Rule(frozenset(members),
                           _Names.parse(entry.get("publish", []), where),
                           _Names.parse(entry.get("subscribe", []), where),
                           _Names.parse(entry.get("admin", []), where)))
    return Acl(rules, {k: n for n, k in keys.items()}, source)


def load_acl(path: str) -> Acl:
    """Read and parse an ACL file."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as exc:
        raise AclError(f"cannot read ACL file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise AclError(f"ACL file {path} is not UTF-8 text") from None
    return parse_acl(text, os.path.dirname(os.path.abspath(path)), path)
