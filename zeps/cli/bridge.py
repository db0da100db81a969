"""``zeps bridge multicast``: send a stream's live messages to an IP multicast group."""
from __future__ import annotations


def add_parser(sub) -> None:
    from .multicast import add_bridge_arguments, run_bridge

    from .common import Parser

    p = sub.add_parser("bridge", help="bridge a stream to another transport (multicast)",
                       description="Bridges: 'zeps bridge multicast --help'.")
    kinds = p.add_subparsers(dest="bridge", metavar="KIND", parser_class=Parser, required=True)
    m = kinds.add_parser("multicast", help="live messages to an IP multicast group",
                         description="Subscribe to STREAM live (or from --from-seq) and send "
                         "every message as UDP datagrams to a multicast group, with periodic "
                         "HEAD announcements so that receivers detect any loss; history and "
                         "repairs come from the broker (docs/protocol.md, Multicast).")
    add_bridge_arguments(m)
    m.add_argument("--server-key", metavar="FILE",
                   help="CurveZMQ: the broker's public key (default $ZEPS_SERVER_KEY)")
    m.add_argument("--client-key", metavar="FILE",
                   help="CurveZMQ: the bridge's key pair (default $ZEPS_CLIENT_KEY)")
    m.set_defaults(func=run_bridge)
