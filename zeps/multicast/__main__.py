"""``python -m zeps.multicast bridge ...`` and ``python -m zeps.multicast subscribe ...``.

The same commands as ``zeps bridge multicast`` and ``zeps subscribe --multicast``: ``subscribe``
takes every option of ``zeps subscribe`` plus the multicast ones. Bad arguments: one line on
stderr, exit status 2.
"""
import argparse
import sys

from .cli import (
    add_bridge_arguments,
    add_subscribe_multicast_arguments,
    run_bridge,
    run_subscribe_multicast,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"zeps: error: {message}\n")
        sys.exit(2)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("bridge", "subscribe"):
        _Parser(prog="python -m zeps.multicast").error("a command is required: bridge, subscribe")
    if argv[0] == "bridge":
        parser = _Parser(prog="python -m zeps.multicast bridge",
                         description="Multicast a stream's messages to a group.")
        add_bridge_arguments(parser)
        return run_bridge(parser.parse_args(argv[1:]))
    # subscribe: the multicast options here, every other one parsed by `zeps subscribe`'s parser
    from zeps import cli

    parser = _Parser(prog="python -m zeps.multicast subscribe", add_help=False)
    add_subscribe_multicast_arguments(parser)
    mine, rest = parser.parse_known_args(argv[1:])
    if mine.multicast is None:
        parser.error("--multicast ADDR:PORT is required")
    args = cli.build_parser().parse_args(["subscribe", *cli._join_relative_times(rest)])
    vars(args).update(vars(mine))
    try:
        return run_subscribe_multicast(args)
    except KeyboardInterrupt:
        return 130


sys.exit(main())
