"""The suite's report: markdown tables, the run's header, and docs/benchmarks.md updated from it.

Each run writes one file, ``bench/out/suite-<UTC time>.md`` (and ``bench/out/suite-latest.md``, a
copy): a header (date, ``uptime``, CPU model, cores, versions, the exact command, the peers that
could not run and why) and one table per scenario, every figure as ``median (min–max)`` over the
repetitions beside its baseline and their ratio.

    python -m bench.report [REPORT.md]     # copy a report into docs/benchmarks.md

replaces what lies between the ``<!-- suite:begin -->`` and ``<!-- suite:end -->`` lines of
docs/benchmarks.md with the report (default: ``bench/out/suite-latest.md``).
"""
from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

from bench import peers

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
DOCS = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- suite:begin -->", "<!-- suite:end -->"


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


def header(command: str, started: datetime.datetime, elapsed: float, before: str) -> str:
    v = peers.versions()
    load = os.getloadavg()[0]
    lines = [
        f"Run of {started:%Y-%m-%d %H:%M} UTC, {elapsed / 60:.0f} min: `{command}`",
        "",
        f"* machine: {cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}",
        f"* `uptime` before: {before}",
        f"* `uptime` after: {uptime()}",
        f"* versions: Python {v['python']}, pyzmq {v['pyzmq']}, libzmq {v['libzmq']}, "
        f"redis-server {v['redis-server']}, redis-py {v['redis']} (hiredis {v['hiredis']}), "
        f"nats-server {v['nats-server']}, nats-py {v['nats-py']}",
    ]
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


def update_docs(report: Path, docs: Path = DOCS) -> None:
    """Put ``report`` between the suite markers of ``docs``."""
    text = docs.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{docs}: no {BEGIN} / {END} lines to replace between")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    docs.write_text(f"{head}{BEGIN}\n{report.read_text().rstrip()}\n{END}{tail}")


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    report = Path(args[0]) if args else OUT / "suite-latest.md"
    if not report.is_file():
        print(f"bench.report: error: no report {report}", file=sys.stderr)
        return 2
    update_docs(report)
    print(f"docs/benchmarks.md updated from {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
