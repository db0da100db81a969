"""``zeps keys new NAME``: a CurveZMQ key pair in ZeroMQ's certificate format."""
from __future__ import annotations

from .common import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("keys", help="make CurveZMQ key pairs for the broker and its clients",
                       description="'zeps keys new NAME' writes NAME.key (the public key: give it "
                       "to the broker's allow-list, or to clients as --server-key) and "
                       "NAME.key_secret (keep it: the broker's --curve-secret, or a client's "
                       "--client-key) in --dir (default: the current directory).")
    p.add_argument("action", choices=("new",))
    p.add_argument("name", metavar="NAME")
    p.add_argument("--dir", default=".", help="where to write the files (default .)")
    p.set_defaults(func=cmd_keys)


def cmd_keys(args) -> int:
    from zeps.broker.security import SecurityError, new_keys
    try:
        public, secret = new_keys(args.dir, args.name)
    except SecurityError as exc:
        raise UsageError(str(exc)) from None
    print(public)
    print(secret)
    return 0
