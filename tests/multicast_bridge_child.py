"""A bridge process whose network misbehaves on purpose (test harness only).

Runs the real :class:`zeps.multicast.Bridge` with its ``outgoing`` hook set to a policy that
drops, duplicates or holds back (reorders) chosen datagrams::

    python tests/multicast_bridge_child.py ENDPOINT STREAM GROUP [--pattern P]
        [--head-interval S] [--drop-seqs 5,6] [--dup-seqs 9] [--hold-seqs 12]
        [--drop-file PATH]

``--drop-seqs`` / ``--dup-seqs`` / ``--hold-seqs``: the DATA datagram carrying any of these
sequences is dropped / sent twice / sent after the next datagram. ``--drop-file``: while PATH
exists, 7 datagrams of every 10 (by datagram number, HEADs included) are dropped. Prints the
same ready line as ``zeps bridge multicast`` and stops on SIGTERM.
"""
from __future__ import annotations

import argparse
import os
import signal

from zeps.multicast import Bridge
from zeps.multicast import datagram as dg


def seqs(text: str) -> set:
    return {int(x) for x in text.split(",") if x}


class Misbehaviour:
    """The ``outgoing`` hook: datagram in, the datagrams to send in its place out."""

    def __init__(self, drop, dup, hold, drop_file):
        self.drop, self.dup, self.hold, self.drop_file = drop, dup, hold, drop_file
        self.held = []

    def __call__(self, datagram: bytes):
        d = dg.decode(datagram)
        carried = {e.sequence for e in d.entries} if isinstance(d, dg.Data) else set()
        if self.drop_file and os.path.exists(self.drop_file) and d.number % 10 < 7:
            return []
        if carried & self.drop:
            return []
        if carried & self.hold:
            self.held.append(datagram)
            return []
        out = [datagram, datagram] if carried & self.dup else [datagram]
        out += self.held
        self.held = []
        return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("endpoint")
    p.add_argument("stream")
    p.add_argument("group")
    p.add_argument("--pattern", default="")
    p.add_argument("--head-interval", type=float, default=0.2)
    p.add_argument("--drop-seqs", type=seqs, default=set())
    p.add_argument("--dup-seqs", type=seqs, default=set())
    p.add_argument("--hold-seqs", type=seqs, default=set())
    p.add_argument("--drop-file")
    a = p.parse_args()
    bridge = Bridge(a.endpoint, a.stream, a.group, a.pattern, head_interval=a.head_interval,
                    timeout=5.0,
                    outgoing=Misbehaviour(a.drop_seqs, a.dup_seqs, a.hold_seqs, a.drop_file))
    signal.signal(signal.SIGTERM, lambda *_: bridge.stop())
    bridge.run(on_ready=lambda b: print(f"zeps bridge: ready after sequence {b.sender.head}",
                                        flush=True))


if __name__ == "__main__":
    main()
