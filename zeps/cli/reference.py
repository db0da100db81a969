"""The CLI reference (``docs/cli.md``), generated from the argparse definitions so it cannot drift.

    python -m zeps.cli.reference > docs/cli.md

``tests/test_cli.py`` checks that the committed file is what this prints.
"""
from __future__ import annotations

import os
import sys


def render() -> str:
    from zeps.cli import _subcommands, build_parser
    from zeps.cli import broker as broker_cli

    os.environ["COLUMNS"] = "100"              # argparse wraps help at the terminal's width
    parser = build_parser()
    out = ["# The `zeps` command\n",
           "Generated from the argument definitions by `python -m zeps.cli.reference`; "
           "do not edit by hand.\n",
           "Every command: bad arguments, or a stream that does not exist, print one line "
           "(`zeps: error: ...`) and exit 2; a broker that does not answer or refuses, 1; "
           "Ctrl-C (SIGINT), 130, `broker` and `bridge` included (SIGTERM stops those two "
           "with 0).\n",
           "```text", parser.format_help().rstrip(), "```\n"]
    commands = _subcommands(parser)
    bparser = broker_cli.Parser(prog="zeps broker", description="Run the ZEPS broker.")
    broker_cli.add_broker_arguments(bparser)
    commands["broker"] = bparser
    for name in sorted(commands):
        out += [f"## zeps {name}\n", "```text", commands[name].format_help().rstrip(), "```\n"]
        for sub_name, sub in sorted(_subcommands(commands[name]).items()):
            out += [f"### zeps {name} {sub_name}\n", "```text", sub.format_help().rstrip(),
                    "```\n"]
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render())
