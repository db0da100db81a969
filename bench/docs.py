"""The figures in the docs are generated, each block from the file of ``bench/results`` it names.

A block in README.md, docs/benchmarks.md or docs/operations.md is::

    <!-- bench:begin bench/results/NAME.md [VIEW] -->
    ...generated...
    <!-- bench:end -->

Its text is the source file (a benchmark's whole output, its header first: when it ran, the exact
command, the machine's load before and after), or with ``VIEW`` a view of it (``targets``:
:mod:`bench.targets`). A source with ``*`` names the files it matches, for a view of many
(``latency-runs``: every kept run of the suite's latency scenario, one row each).
``bench/results`` is committed; a test (tests/test_bench_docs.py) checks that every block is
what its source gives, byte for byte.

``bench/results`` is filled from the outputs of ``bench/out`` by :func:`take`:

* ``suite.md`` from ``bench/out/suite-latest.md``: a whole run of ``python -m bench.suite``
  replaces it; a run of some scenarios (``--only``) replaces only their sections, each then
  preceded by the header of the run it comes from (its own time, command and load);
* ``NAME.md`` from ``bench/out/NAME.md``, which ``python -m bench.run_all`` writes for every
  benchmark that ran to the end with its full counts.

A ``--quick`` run is never taken: its counts are too small to mean anything.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
RESULTS = REPO / "bench" / "results"
DOCS = tuple(REPO / p for p in ("README.md", "docs/benchmarks.md", "docs/operations.md"))
BLOCK = re.compile(r"^<!-- bench:begin (?P<source>\S+)(?: (?P<view>[\w-]+))? -->\n"
                   r"(?P<body>.*?)^<!-- bench:end -->$", re.M | re.S)
SCENARIO = re.compile(r"^<!-- scenario (\w+) -->\n", re.M)
COMMAND = re.compile(r"^Run of [^`\n]*`(?P<command>[^`]+)`", re.M)
#: How a section from another run than the report's own begins.
OTHER_RUN = "**From another run than the one at the top:** "


def _views():
    from bench import targets
    return {"": lambda text: text, "targets": targets.render,
            "targets-issue20": targets.render_issue20}


def _many_views():
    from bench import targets
    return {"latency-runs": targets.render_latency_runs}


def sources(source: str, repo: Path = REPO) -> List[Path]:
    """The files a block's ``source`` names: one, or those its pattern (``*``, ``?``, ``[``)
    matches, sorted by name."""
    if not any(ch in source for ch in "*?["):
        return [repo / source]
    return sorted(repo.glob(source))


def render(source: str, view: Optional[str] = None, repo: Path = REPO) -> str:
    """The text of a block: ``source`` (relative to the repository) or its ``view``; a
    ``source`` that is a pattern is given whole to a view of many files (``latency-runs``), as
    (file name, text) pairs."""
    views, many = _views(), _many_views()
    if (view or "") not in views and view not in many:
        raise ValueError(f"no view {view!r} (views: "
                         f"{', '.join(v for v in (*views, *many) if v)})")
    paths = sources(source, repo)
    if view in many:
        if not paths:
            raise ValueError(f"no file matches {source}")
        return many[view]([(p.name, p.read_text()) for p in paths]).rstrip("\n") + "\n"
    if paths != [repo / source]:
        raise ValueError(f"the view {view or 'of the whole file'} takes one file, not {source}")
    return views[view or ""]((repo / source).read_text()).rstrip("\n") + "\n"


def blocks(text: str) -> List[Tuple[str, Optional[str], str]]:
    """Every block of a document: (source, view, body)."""
    return [(m["source"], m["view"], m["body"]) for m in BLOCK.finditer(text)]


def regenerate(text: str, repo: Path = REPO) -> str:
    """``text`` with every block made again from its source."""
    def one(m):
        view = f" {m['view']}" if m["view"] else ""
        return (f"<!-- bench:begin {m['source']}{view} -->\n{render(m['source'], m['view'], repo)}"
                f"<!-- bench:end -->")
    return BLOCK.sub(one, text)


def update(docs: Iterable[Path] = DOCS) -> List[Path]:
    """Regenerate the blocks of ``docs``; return the documents that changed."""
    changed = []
    for doc in docs:
        text = doc.read_text()
        new = regenerate(text)
        if new != text:
            doc.write_text(new)
            changed.append(doc)
    return changed


# --- taking outputs into bench/results ---------------------------------------------------------

def split_report(text: str) -> Tuple[str, Dict[str, str]]:
    """A suite report as (its header, {scenario: its section}), sections in report order."""
    parts = SCENARIO.split(text)
    return parts[0], dict(zip(parts[1::2], parts[2::2]))


def command_of(header: str) -> str:
    m = COMMAND.search(header)
    if not m:
        raise ValueError("no 'Run of ... `command`' line in the report's header")
    return m["command"]


def merge_suite(base: Optional[str], new: str) -> str:
    """``base`` (the suite's results) with the run ``new`` taken in: the whole of it if it ran
    every scenario, else its scenarios' sections, each under ``new``'s header."""
    head, sections = split_report(new)
    command = command_of(head)
    if "--quick" in command.split():
        raise ValueError(f"a --quick run is not for the docs: `{command}`")
    if "--only" not in command.split():
        return new
    if base is None:
        raise ValueError(f"`{command}` ran some scenarios only, and there is no whole run to put "
                         f"them in ({RESULTS / 'suite.md'})")
    base_head, base_sections = split_report(base)
    for name, body in sections.items():
        base_sections[name] = f"{OTHER_RUN}{head.rstrip()}\n\n{body}"
    return base_head + "".join(f"<!-- scenario {n} -->\n{b}" for n, b in base_sections.items())


def take(names: Optional[Iterable[str]] = None, out: Path = OUT,
         results: Path = RESULTS) -> List[str]:
    """Copy the newest outputs of ``out`` into ``results`` (all, or the named: ``suite`` and
    benchmark names); return what was taken."""
    names = set(names) if names else None
    taken = []
    results.mkdir(parents=True, exist_ok=True)
    latest = out / "suite-latest.md"
    if latest.is_file() and (names is None or "suite" in names):
        target = results / "suite.md"
        base = target.read_text() if target.is_file() else None
        try:
            target.write_text(merge_suite(base, latest.read_text()))
            taken.append("suite")
        except ValueError:
            if names is not None:             # asked for by name: say why not
                raise                         # (taking everything skips a --quick report)
    for path in sorted(out.glob("bench_*.md")):
        if names is None or path.stem in names:
            shutil.copyfile(path, results / path.name)
            taken.append(path.stem)
    missing = (names or set()) - set(taken)
    if missing:
        raise ValueError(f"nothing to take for {', '.join(sorted(missing))} in {out}")
    return taken
