"""Paired before/after runs of a benchmark that prints ``name=value`` figures: the checkout's
``zeps`` package against another revision's, alternating, in one invocation (so that a machine
whose speed drifts drifts for both).

    python -m bench.ab --before REV [--after REV] [--runs 6] -- -m bench.bench_stages --summary
    python -m bench.ab --revert COMMIT [COMMIT ...] [--after REV] -- ARGS
    python -m bench.ab --before HEAD --after HEAD --after-env NAME=VALUE -- ARGS

``--before`` (and ``--after``, default: the working tree) is exported with ``git archive`` into
a temporary directory; ``--revert`` makes "before" the ``--after`` revision (default HEAD)
with those commits' changes to ``zeps/`` taken back (``git apply -R``, newest first): the
effect of those commits alone, on today's code. Each run is ``python ARGS`` with ``PYTHONPATH`` naming
that tree first,
so the benchmark's own code (``bench/``) is the checkout's and only ``zeps`` differs, and
the variables of ``--before-env`` / ``--after-env`` (``NAME=VALUE``) are set for that side's
runs only: with the same revision on both sides, a benchmark's option against its default
(``ZEPS_BENCH_SDK_PUBLISHER=batching=False``: the SDK publishers' keyword arguments,
:mod:`bench.systems.zeps_sdk`). The order
alternates (before, after, after, before, ...). Printed: per figure the median of each side
with its min-max, the ratio of the medians (after / before) and the ratios pair by pair
(min-median-max): the machine is shared and noisy, a ratio holds better than an absolute figure.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import report

REPO = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"(\S+?)=(-?[\d.]+)(?:\s|$)")


def export(rev: str, into: Path) -> Path:
    """``zeps/`` of revision ``rev`` under ``into``, its optional C extensions built (see
    :func:`build_extensions`)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev, "zeps"], cwd=REPO, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    setup_py = subprocess.run(["git", "show", f"{rev}:setup.py"], cwd=REPO,
                              capture_output=True).stdout
    if setup_py:
        (into / "setup.py").write_bytes(setup_py)
    return into


def build_extensions(tree: Path) -> None:
    """Build the tree's optional C extensions in place, as ``make`` does for the checkout
    (a tree without them, or a revision before they existed, runs on its Python loops, as
    the checkout would on a machine without a compiler): both sides of a comparison get what
    their revision gets."""
    if (tree / "setup.py").exists():
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                       check=True, capture_output=True)


def revert(tree: Path, commits) -> None:
    """Take the changes of ``commits`` to ``zeps/`` back out of ``tree``, the newest first."""
    for commit in reversed(commits):
        diff = subprocess.run(["git", "diff", f"{commit}^", commit, "--", "zeps"], cwd=REPO,
                              check=True, capture_output=True).stdout
        subprocess.run(["git", "apply", "-R"], cwd=tree, input=diff, check=True)


def side_env(items) -> dict:
    """``--before-env`` / ``--after-env`` items, ``NAME=VALUE`` each, as a dict."""
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"not NAME=VALUE: {item!r}")
        out[name] = value
    return out


def run(tree: Path, args, extra_env=None) -> dict:
    """One run's figures; a run that printed none gets ``{"error": its last line of
    stderr}`` (a tree whose broker does not start, say), which :func:`main` reports.
    ``extra_env``: variables set for this run (the side's ``--before-env``/``--after-env``)."""
    env = dict(os.environ, **(extra_env or {}),
               PYTHONPATH=os.pathsep.join((str(tree), str(REPO))))
    done = subprocess.run([sys.executable] + args, cwd=tempfile.gettempdir(), env=env,
                          capture_output=True, text=True)
    figures = {k: float(v) for k, v in FIGURE.findall(done.stdout)}
    if not figures:
        lines = done.stderr.strip().splitlines() or [f"status {done.returncode}, no output"]
        return {"error": lines[-1]}
    return figures


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="git revision measured as 'before'")
    ap.add_argument("--revert", nargs="+", metavar="COMMIT",
                    help="'before' is 'after' without these commits (oldest first)")
    ap.add_argument("--after", help="git revision measured as 'after' (default: the working tree)")
    ap.add_argument("--before-env", action="append", metavar="NAME=VALUE",
                    help="set NAME for the 'before' runs only (repeatable)")
    ap.add_argument("--after-env", action="append", metavar="NAME=VALUE",
                    help="set NAME for the 'after' runs only (repeatable): with --before and "
                         "--after the same revision, an option of the benchmark paired "
                         "against its default (bench/systems/zeps_sdk.py's ZEPS_BENCH_SDK_*)")
    ap.add_argument("--runs", type=int, default=6, help="runs of each side (default 6)")
    ap.add_argument("--out", metavar="NAME",
                    help="also write the table, under the run's header (time, command, machine, "
                         "load), to bench/out/NAME.md (NAME: bench_...), for "
                         "`python -m bench.report --take NAME`")
    opts = ap.parse_args(argv[:cut])
    if (opts.before is None) == (opts.revert is None):
        ap.error("give --before REV or --revert COMMIT ...")
    args = argv[cut + 1:]
    try:
        envs = {"before": side_env(opts.before_env), "after": side_env(opts.after_env)}
    except ValueError as e:
        ap.error(str(e))
    if opts.out and not opts.out.startswith("bench_"):
        ap.error("--out: a name bench_... (what bench.report --take takes)")
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    load_before = report.uptime()
    with tempfile.TemporaryDirectory(prefix="zeps-ab-") as tmp:
        after = export(opts.after, Path(tmp) / "after") if opts.after else REPO
        if opts.revert:
            base = opts.after or "HEAD"
            before = export(base, Path(tmp) / "before")
            revert(before, opts.revert)
            build_extensions(before)
            opts.before = f"{base} without {' '.join(opts.revert)}"
        else:
            before = export(opts.before, Path(tmp) / "before")
            build_extensions(before)
        if opts.after:
            build_extensions(after)
        got = {"before": [], "after": []}
        for i in range(opts.runs):
            sides = (("before", before), ("after", after))
            for side, tree in sides if i % 2 == 0 else sides[::-1]:
                got[side].append(run(tree, args, envs[side]))
    failed = {side: [r["error"] for r in runs if "error" in r] for side, runs in got.items()}
    for side, errors in failed.items():
        if errors:
            print(f"{side}: {len(errors)} of {opts.runs} runs gave no figures; the last one "
                  f"said: {errors[-1]}", file=sys.stderr)
        got[side] = [{} if "error" in r else r for r in got[side]]   # pairs keep their places
    if not any(got["before"]) or not any(got["after"]):
        return 1
    named = {"before": opts.before, "after": opts.after or "the working tree"}
    for side, env in envs.items():
        if env:
            named[side] += " with " + report.env_text(env)
    lines = [f"{opts.runs} runs of each side, alternating; before = {named['before']}, after = "
             f"{named['after']}; each run: `python {' '.join(args)}`", "",
             "| figure | before | after | after ÷ before | pair by pair |",
             "|---|---:|---:|---:|---:|"]
    names = list(dict.fromkeys(k for r in got["before"] + got["after"] for k in r))
    for k in names:
        b = [r[k] for r in got["before"] if k in r]
        a = [r[k] for r in got["after"] if k in r]
        if not a or not b:
            continue
        mb, ma = statistics.median(b), statistics.median(a)
        pairs = sorted(x[k] / y[k] for x, y in zip(got["after"], got["before"])
                       if k in x and k in y and y[k])
        pair = f"{pairs[0]:.2f}–{statistics.median(pairs):.2f}–{pairs[-1]:.2f}" if pairs else "—"
        lines.append(f"| {k} | {_fmt(mb)} ({_fmt(min(b))}–{_fmt(max(b))}) | {_fmt(ma)} "
                     f"({_fmt(min(a))}–{_fmt(max(a))}) | {ma / mb if mb else float('nan'):.2f} "
                     f"| {pair} |")
    table = "\n".join(lines) + "\n"
    print(table, end="")
    if opts.out:
        command = "python -m bench.ab " + shlex.join(argv)
        head = report.header(command, started, time.monotonic() - t0, load_before, servers=False)
        report.OUT.mkdir(parents=True, exist_ok=True)
        (report.OUT / f"{opts.out}.md").write_text(head + "\n" + table)
    return 0


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


if __name__ == "__main__":
    raise SystemExit(main())
