"""The suite's report (markdown tables, the run's header), and the docs generated from results.

Each suite run writes one file, ``bench/out/suite-<UTC time>.md`` (and
``bench/out/suite-latest.md``, a copy): a header (date, ``uptime`` before and after, CPU model,
cores, versions, the exact command, the peers that could not run and why) and one section per
scenario (``<!-- scenario NAME -->``), every figure as ``median (min–max)`` over the repetitions
beside its baseline and their ratio. ``python -m bench.run_all`` writes ``bench/out/NAME.md`` for
the other benchmarks, with the same header.

    python -m bench.report              # regenerate the docs' blocks from bench/results
    python -m bench.report --take       # take the newest outputs of bench/out first (all of them)
    python -m bench.report --take suite bench_spark     # ... or these
    python -m bench.report --check      # exit 1 if a block is not what its source gives

What a block is and how outputs are taken: :mod:`bench.docs`.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

from bench import docs, peers

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"


@dataclass
class Table:
    """One scenario's table: a title, what was measured, columns, rows of cells, notes."""

    title: str
    intro: str
    columns: List[str]
    rows: List[List[str]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def add(self, *cells) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.title}: {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([str(x) for x in cells])

    def render(self) -> str:
        out = [f"### {self.title}", "", self.intro, ""]
        out.append("| " + " | ".join(self.columns) + " |")
        out.append("|" + "|".join("---" for _ in self.columns) + "|")
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        if self.notes:
            out.append("")
            out += [f"* {n}" for n in self.notes]
        return "\n".join(out) + "\n"


def prose(doc: str) -> str:
    """A scenario docstring without its first paragraph, each paragraph on one line: a table's
    introduction."""
    paras = [" ".join(p.split()) for p in doc.strip().split("\n\n")]
    return "\n\n".join(paras[1:])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def uptime() -> str:
    if shutil.which("uptime"):
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return Path("/proc/loadavg").read_text().strip()


def _c_loops() -> str:
    """Whether the checkout's optional C extensions are in use (docs/architecture.md)."""
    try:
        from zeps.protocol.speedups import C_LOOPS
    except ImportError:                      # a revision from before the extension
        return "absent"
    if not C_LOOPS:
        return "not in use (pure Python)"
    try:
        from zeps.broker import sockio
    except ImportError:                      # a revision from before the broker's socket loops
        return "in use"
    if sockio.C_LOOPS:
        return "in use"
    return f"in use, the broker's socket loops not ({sockio.C_LOOPS_WHY})"


def bench_environment(environ=None) -> dict:
    """The ``ZEPS_BENCH_*`` variables set for this run (the pacer, the SDK clients' options...),
    sorted: a report made with any says so in its header."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in sorted(environ) if k.startswith("ZEPS_BENCH_")}


def env_text(env: dict) -> str:
    """Variables as a report names them: ```NAME=VALUE```, comma-separated."""
    return ", ".join(f"`{k}={v}`" for k, v in env.items())


def header(command: str, started: datetime.datetime, elapsed: float, before: str,
           servers: bool = True) -> str:
    """A run's header: when, how long, the exact command, the machine, its load before and after
    (``uptime``), the versions (with ``servers``, those of the peers too and which are absent)."""
    v = peers.versions(servers)
    load = os.getloadavg()[0]
    versions = f"Python {v['python']}, pyzmq {v['pyzmq']}, libzmq {v['libzmq']}"
    versions += f", zeps's C loops {_c_loops()}"
    if servers:
        versions += (f", redis-server {v['redis-server']}, redis-py {v['redis']} "
                     f"(hiredis {v['hiredis']}), nats-server {v['nats-server']}, "
                     f"nats-py {v['nats-py']}")
    lines = [
        f"Run of {started:%Y-%m-%d %H:%M} UTC, "
        f"{f'{elapsed:.0f} s' if elapsed < 90 else f'{elapsed / 60:.0f} min'}: `{command}`",
        "",
        f"* machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}",
        f"* `uptime` before: {before}",
        f"* `uptime` after: {uptime()}",
        f"* versions: {versions}",
    ]
    knobs = bench_environment()
    if knobs:
        lines.append("* environment: " + env_text(knobs))
    if servers:
        absent = {p: peers.missing(p) for p in peers.NEEDS}
        for p, why in absent.items():
            if why:
                lines.append(f"* **{p}: {why}** — its figures are marked as not measured")
    if load > (os.cpu_count() or 1):
        lines.append(f"* **noisy**: the load average ({load:.1f}) was above the number of cores: "
                     f"other work shared the machine, so absolute figures are low and spread; "
                     f"ratios from the same run hold better")
    return "\n".join(lines) + "\n"


def write(text: str, started: datetime.datetime, out: Path = OUT) -> Path:
    """Write the report in ``out`` (and as suite-latest.md there); return its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"suite-{started:%Y%m%d-%H%M%S}.md"
    path.write_text(text)
    (out / "suite-latest.md").write_text(text)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    parser.add_argument("--take", nargs="*", metavar="NAME",
                        help="first copy the newest outputs of bench/out into bench/results (all, "
                             "or these: suite, bench_codec, ...)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a generated block differs from its source")
    args = parser.parse_args(argv)
    if args.check:
        stale = [(doc, src) for doc in docs.DOCS for src, view, body in docs.blocks(doc.read_text())
                 if body != docs.render(src, view)]
        for doc, src in stale:
            print(f"{doc.relative_to(REPO)}: the block from {src} is not what it gives")
        return 1 if stale else 0
    if args.take is not None:
        try:
            taken = docs.take(args.take or None)
        except ValueError as e:
            print(f"bench.report: error: {e}", file=sys.stderr)
            return 2
        print(f"bench/results: took {', '.join(taken) or 'nothing'}")
    for doc in docs.update():
        print(f"{doc.relative_to(REPO)} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
