"""The targets of issues 11 and 20 beside what the suite measured: views of
``bench/results/suite.md``.

``<!-- bench:begin bench/results/suite.md targets -->`` in docs/benchmarks.md is made by
:func:`render` (issue 11), ``... targets-issue20 -->`` by :func:`render_issue20`, from the
suite's tables (the figures are the tables' medians, copied with the case they hold for: body
size, publishers, fsync, client path), so a targets table can never say something else than the
tables above it. A target whose table is not in the results says so.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

Rows = List[Dict[str, str]]
NUMBER = re.compile(r"-?[\d,]+(?:\.\d+)?")


def tables(text: str) -> List[Tuple[str, Rows]]:
    """Every markdown table of ``text`` under a ``### title``: (title, rows as {column: cell})."""
    out, title = [], ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("### "):
            title = line[4:].strip()
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            cols = [c.strip() for c in line.strip().strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("| "):
                    break
                rows.append(dict(zip(cols, (c.strip() for c in row.strip().strip("|").split("|")))))
            out.append((title, rows))
    return out


def median(cell: Optional[str]) -> Optional[float]:
    """The first number of a cell (a figure's median, a ratio), or None."""
    if not cell:
        return None
    m = NUMBER.match(cell.strip())
    return float(m[0].replace(",", "")) if m else None


def short(cell: str) -> str:
    """A figure without its min–max: ``718,906 msg/s``."""
    return re.sub(r" \([^)]*\)", "", cell)


SCENARIO = re.compile(r"^<!-- scenario (\w+) -->\n", re.M)
RUN = re.compile(r"^(?:\*\*From another run than the one at the top:\*\* )?(Run of [^\n]*)", re.M)
#: A run's line: when it started and its command.
COMMAND_OF_RUN = re.compile(
    r"Run of (?P<when>\d{4}-\d\d-\d\d \d\d:\d\d UTC)[^`]*`(?P<command>[^`]+)`")


def runs(text: str) -> Dict[str, str]:
    """The run each scenario's section comes from (its "Run of ..." line): a section merged from
    another run starts with its own; the others are the report's first run."""
    top = RUN.search(text)
    first = top[1] if top else ""
    out = {}
    parts = SCENARIO.split(text)
    for name, body in zip(parts[1::2], parts[2::2]):
        own = RUN.match(body)
        out[name] = own[1] if own else first
    return out


class Results:
    def __init__(self, text: str):
        self.tables = tables(text)
        self.runs = runs(text)

    def rows(self, titles: Sequence[str], **where) -> Rows:
        """Rows of the first table whose title starts with one of ``titles``, with the given
        cells (a condition on a column the table does not have is ignored)."""
        for prefix in titles:
            for title, rows in self.tables:
                if title.startswith(prefix):
                    return [r for r in rows
                            if all(r.get(k.replace("_", " "), v) == v for k, v in where.items())]
        return []

    def cell(self, titles, columns: Sequence[str], **where) -> Optional[str]:
        """The cell of the first of ``columns`` present in the first row found."""
        for row in self.rows(titles, **where):
            for col in columns:
                if col in row and median(row[col]) is not None:
                    return row[col]
        return None


INGEST_BATCH = ("Ingest — 100 messages per call", "Ingest — the Python user's view")
INGEST_EACH = ("Ingest — one call per message",)
INGEST_CAP = ("Ingest — server capacity",)
SDK_BATCH = ("ZEPS SDK, publish_batch(100), no confirms", "ZEPS SDK")
SDK_BATCH_C = ("ZEPS SDK, publish_batch(100) + wait_for_confirms()",)
REDIS_PIPE = ("Redis, redis-py pipeline of 100 XADD (every XADD answered)", "Redis, redis-py")
NATS_ACKS = ("JetStream, nats-py js.publish_async() + acks awaited",)
RAW = ("ZEPS, raw pyzmq PUBLISH-BATCH of 100, no confirms", "ZEPS, raw pyzmq")
RBENCH = ("redis-benchmark -P 100 XADD, one connection per publisher",
          "redis-benchmark -P 100 XADD")
PROXY = ("ZeroMQ XSUB/XPUB proxy (no journal, no confirms)",
         "ZeroMQ XSUB/XPUB proxy (no journal)", "ZeroMQ XSUB/XPUB proxy")
NOT_IN = "not in these results"


def _ratio(a: Optional[str], b: Optional[str]) -> Optional[float]:
    x, y = median(a), median(b)
    return x / y if x is not None and y else None


def _met(ok: Optional[bool]) -> str:
    return "—" if ok is None else ("yes" if ok else "no")


def rows(r: Results) -> List[Tuple[str, str, str]]:
    """(target, measured, met?) for every target the suite measures."""
    out = []
    case = dict(body="100 B", fsync="interval", confirms="no")
    pubs = sorted({row.get("publishers", "") for row in r.rows(INGEST_BATCH, **case)},
                  key=lambda p: int(p) if p.isdigit() else 0)

    # SDK publish >= 1M msg/s
    figs = [(p, r.cell(INGEST_BATCH, SDK_BATCH, publishers=p, **case)) for p in pubs]
    figs = [(p, f) for p, f in figs if f]
    best = max((median(f) for _, f in figs), default=None)
    out.append(("SDK publish ≥ 1M msg/s (100 B, fsync interval, no confirms)",
                "; ".join(f"`publish_batch(100)`, {p} publisher(s): {short(f)}" for p, f in figs)
                or NOT_IN, _met(None if best is None else best >= 1e6)))

    one = dict(publishers=pubs[0], **case) if pubs else case
    sdk = r.cell(INGEST_BATCH, SDK_BATCH, **one)
    raw = r.cell(INGEST_CAP, RAW, **one)
    rb = r.cell(INGEST_CAP, RBENCH, **one)
    px = r.cell(INGEST_CAP, PROXY, **one)
    for target, base, need in (("≥ 3× redis-benchmark -P 100", rb, 3.0),
                               ("≥ 1.0× ZeroMQ's XSUB/XPUB proxy", px, 1.0)):
        a, b = _ratio(sdk, base), _ratio(raw, base)
        measured = (f"SDK {a:.2f}×, raw pyzmq ZEPS {b:.2f}× ({short(base)}; 100 B, "
                    f"{one.get('publishers')} publisher(s), fsync interval)"
                    if a is not None and b is not None else NOT_IN)
        out.append((f"… SDK publish {target}", measured,
                    "—" if a is None else f"SDK {_met(a >= need)}, server {_met(b >= need)}"))

    # replay of 1M >= 2M msg/s
    replay = ("Replay of a",)
    bulk = r.cell(replay, ("ZEPS SDK, batches()",), body="100 B")
    nxt = r.cell(replay, ("ZEPS SDK, next()", "ZEPS SDK"), body="100 B")
    out.append(("SDK replay ≥ 2M msg/s (100 B)",
                f"`batches()` {short(bulk)}, `next()` {short(nxt)}" if bulk and nxt else NOT_IN,
                _met(None if bulk is None else median(bulk) >= 2e6)))

    # fan-out to 10 >= 3M delivered/s
    fan = r.cell(("Live fan-out",), ("ZEPS SDK, batches()",), body="100 B", subscribers="10")
    out.append(("fan-out to 10 SDK subscribers ≥ 3M delivered msg/s (100 B)",
                f"`batches()` {short(fan)}" if fan else NOT_IN,
                _met(None if fan is None else median(fan) >= 3e6)))

    # Python user's view >= 5x redis-py and nats-py (durable ingest, replay)
    sdk_c = r.cell(INGEST_BATCH, SDK_BATCH_C, **one)
    redis = r.cell(INGEST_BATCH, REDIS_PIPE, **one)
    nats_c = r.cell(INGEST_EACH, NATS_ACKS, **one)
    x, y = _ratio(sdk_c, redis), _ratio(sdk_c, nats_c)
    rr = _ratio(bulk, r.cell(replay, ("Redis, redis-py XREAD by 1000", "Redis, redis-py"),
                             body="100 B"))
    rn = _ratio(bulk, r.cell(replay, ("JetStream, nats-py ordered push consumer",
                                      "JetStream, nats-py"), body="100 B"))
    parts = []
    if x is not None and y is not None:
        parts.append(f"durable ingest (`publish_batch(100)` + confirms): {x:.1f}× redis-py's "
                     f"pipeline of 100, {y:.1f}× nats-py's `publish_async()` + acks")
    if rr is not None and rn is not None:
        parts.append(f"replay (`batches()`): {rr:.1f}× redis-py, {rn:.1f}× nats-py")
    got = [v for v in (x, y, rr, rn) if v is not None]
    out.append(("Python user's view ≥ 5× redis-py and nats-py (durable ingest, replay; 100 B)",
                "; ".join(parts) or NOT_IN,
                _met(min(got) >= 5 if len(got) == 4 else None)))

    # p99 live latency <= 1 ms
    lat = r.rows(("End-to-end latency",), body="100 B", system="ZEPS SDK")
    p99 = lat[0]["p99"] if lat else None
    out.append(("p99 live latency ≤ 1 ms (100 B, at the latency table's rate)",
                f"SDK p99 {short(p99)}, p50 {short(lat[0]['p50'])}" if p99 else NOT_IN,
                _met(None if p99 is None else median(p99) <= 1.0)))

    # replay start in the longest stream <= 10 ms
    starts = r.rows(("Replay start",), system="ZEPS")
    if starts:
        longest = starts[-1]
        out.append((f"replay start ≤ 10 ms (ZEPS, {longest['messages']} messages)",
                    f"{short(longest['start'])} (shortest stream: {short(starts[0]['start'])})",
                    _met(median(longest["start"]) <= 10.0)))
    else:
        out.append(("replay start ≤ 10 ms in the longest stream", NOT_IN, "—"))

    # many prefix subscriptions <= 2x one
    prefix = r.rows(("Routing cost",), patterns="prefix")
    if prefix:
        most = prefix[-1]
        cost = most["time per message ÷ K = 1"]
        out.append((f"{most['K']} prefix subscriptions ≤ 2× one", cost,
                    _met(median(cost) <= 2.0)))
    else:
        out.append(("many prefix subscriptions ≤ 2× one", NOT_IN, "—"))

    # zero-credit subscriber costs the publisher <= 5%
    zc = r.rows(("A zero-credit subscriber",))
    others = [row for row in zc if row.get("case", "").startswith("+")]
    if others:
        ratios = [row["÷ publisher alone"] for row in others]
        out.append(("a zero-credit subscriber costs the publisher ≤ 5% (100 B)",
                    "publisher's rate " + " and ".join(ratios) + " of alone",
                    _met(all(median(x) >= 0.95 for x in ratios))))
    else:
        out.append(("a zero-credit subscriber costs the publisher ≤ 5%", NOT_IN, "—"))
    return out


LATENCY = ("End-to-end latency",)
REPLAY = ("Replay of a",)
FANOUT = ("Live fan-out",)
SDK_BULK = ("ZEPS SDK, batches()",)
RAW_READ = ("ZEPS, raw pyzmq",)
#: The latency table's row of the raw pyzmq clients (the same broker without the SDK).
RAW_CLIENT = RAW_READ[0]


#: Issue 20's latency targets as (figure of :func:`latency_figures`, its column, its limit):
#: each is met when the figure is at most the limit. The suite's own table
#: (:func:`rows_issue20`) judges by the same limits.
LATENCY_TARGETS = (("p99", "SDK p99 ≤ 1 ms (100 B)", 1.0),
                   ("p99.9", "SDK p99.9 ≤ 3 ms (100 B)", 3.0),
                   ("ratio 100 B", "SDK p99 ≤ 2.5× the proxy's (100 B)", 2.5),
                   ("ratio 1024 B", "SDK p99 ≤ 2.5× the proxy's (1024 B)", 2.5))
#: Each latency target's limit by its figure.
LIMITS = {key: limit for key, _col, limit in LATENCY_TARGETS}


def rows_issue20(r: Results) -> List[Tuple[str, str, str]]:
    """(target, measured, met?) for the targets of issue 20 the suite measures: the SDK's live
    latency (alone and against ZeroMQ's proxy in the same run) and the bulk paths as ratios to
    redis-benchmark's XADD capacity (``-P 100``, one connection, AOF everysec: the ingest
    capacity table's 100 B, 1 publisher, fsync ``interval`` row). Each bulk ratio is given for
    the SDK and for the raw pyzmq client (the server's capacity); met means the SDK's."""
    out = []
    for body in ("100 B", "1024 B"):
        sdk = r.rows(LATENCY, body=body, system="ZEPS SDK")
        proxy = r.rows(LATENCY, body=body, system=PROXY[-1])
        if not sdk:
            continue
        p99, p999 = sdk[0]["p99"], sdk[0]["p99.9"]
        if body == "100 B":
            out.append(("SDK p99 ≤ 1 ms at 10k msg/s (100 B, fsync interval)",
                        f"p99 {short(p99)}", _met(median(p99) <= LIMITS["p99"])))
            out.append(("SDK p99.9 ≤ 3 ms at 10k msg/s (100 B, fsync interval)",
                        f"p99.9 {short(p999)}", _met(median(p999) <= LIMITS["p99.9"])))
        x = _ratio(p99, proxy[0]["p99"]) if proxy else None
        out.append((f"SDK p99 within 2.5× of the ZeroMQ proxy's p99, same run ({body})",
                    f"{x:.2f}× ({short(p99)} ÷ {short(proxy[0]['p99'])})" if x else NOT_IN,
                    _met(None if x is None else x <= LIMITS[f"ratio {body}"])))
    if not out:
        out.append(("SDK p99 ≤ 1 ms, p99.9 ≤ 3 ms, within 2.5× of the proxy", NOT_IN, "—"))

    one = dict(body="100 B", publishers="1", fsync="interval")
    rb = r.cell(INGEST_CAP, RBENCH, **one)
    paths = (("ingest", 3.0, r.cell(INGEST_BATCH, SDK_BATCH, confirms="no", **one),
              r.cell(INGEST_CAP, RAW, **one), "`publish_batch(100)`, no confirms"),
             ("replay of 1M", 6.0, r.cell(REPLAY, SDK_BULK, body="100 B"),
              r.cell(REPLAY, RAW_READ, body="100 B"), "`batches()`"),
             ("fan-out to 10", 9.0,
              r.cell(FANOUT, SDK_BULK, body="100 B", subscribers="10"),
              r.cell(FANOUT, RAW_READ, body="100 B", subscribers="10"),
              "`batches()`, delivered msg/s"))
    for (name, need, sdk, raw, how), scenario in zip(paths, ("ingest", "replay", "fanout")):
        a, b = _ratio(sdk, rb), _ratio(raw, rb)
        target = f"{name} ≥ {need:g}× redis-benchmark -P 100 XADD (100 B)"
        if a is None:
            out.append((target, NOT_IN, "—"))
            continue
        server = f", raw pyzmq {b:.2f}× ({short(raw)})" if b is not None else ""
        measured = f"SDK {how} {a:.2f}× ({short(sdk)} ÷ {short(rb)}){server}"
        if r.runs.get(scenario) != r.runs.get("ingest"):     # the issue asks for one run
            out.append((target, measured + "; not the same run as redis-benchmark's", "—"))
            continue
        out.append((target, measured, _met(a >= need)))
    return out


def _table(found: List[Tuple[str, str, str]]) -> str:
    lines = ["| target | measured (medians of the tables above) | met? |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {ok} |" for t, m, ok in found]
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """The targets table of issue 11 from the text of a suite report."""
    return _table(rows(Results(text)))


def render_issue20(text: str) -> str:
    """The suite's targets of issue 20 from the text of a suite report."""
    return _table(rows_issue20(Results(text)))


#: The latency table's systems by their short names (:func:`latency_summary`'s prefixes).
SUMMARY_SYSTEMS = (("sdk", "ZEPS SDK"), ("raw", RAW_CLIENT), ("proxy", PROXY[-1]))


def _latency_medians(r: Results, body: str) -> Dict[str, Dict[str, Optional[float]]]:
    """The latency table's p50, p99 and p99.9 (ms, the medians of the repetitions) at
    ``body`` of each system of :data:`SUMMARY_SYSTEMS` that has a row, by its short name."""
    out = {}
    for name, system in SUMMARY_SYSTEMS:
        rows = r.rows(LATENCY, body=body, system=system)
        if rows:
            out[name] = {p: median(rows[0][p]) for p in ("p50", "p99", "p99.9")}
    return out


def _over_proxy(medians: Dict[str, Dict[str, Optional[float]]], name: str) -> Optional[float]:
    """System ``name``'s p99 over the proxy's, from :func:`_latency_medians`; None without
    either."""
    x = medians.get(name, {}).get("p99")
    y = medians.get("proxy", {}).get("p99")
    return x / y if x is not None and y else None


def latency_figures(r: Results) -> Optional[Dict[str, Optional[float]]]:
    """Issue 20's latency figures in one suite report (medians of its repetitions): the SDK's
    and the proxy's p99 and p99.9 at 100 B (ms), the SDK's p99 over the proxy's at 100 B and
    at 1024 B, and the raw pyzmq clients' p99 over the proxy's at 100 B (``raw ratio``: the
    same broker without the SDK); a figure whose row is missing is None, and a report without
    the SDK's 100 B row gives None."""
    out: Dict[str, Optional[float]] = {}
    for body in ("100 B", "1024 B"):
        m = _latency_medians(r, body)
        if body == "100 B":
            if "sdk" not in m:
                return None
            proxy = m.get("proxy", {})
            out.update({"p99": m["sdk"]["p99"], "p99.9": m["sdk"]["p99.9"],
                        "proxy p99": proxy.get("p99"), "proxy p99.9": proxy.get("p99.9"),
                        "raw ratio": _over_proxy(m, "raw")})
        out[f"ratio {body}"] = _over_proxy(m, "sdk")
    return out


def latency_summary(text: str) -> str:
    """The latency scenario's figures of a suite report as ``name=value`` on one line (for
    ``python -m bench.ab``): for each body size, the SDK's, the raw clients' and the proxy's
    p50, p99 and p99.9 in ms (the medians of the repetitions), and the SDK's and the raw
    clients' p99 over the proxy's (``sdk_100B_p99_over_proxy=2.38``); empty without the
    scenario."""
    r = Results(text)
    figs = []
    for body in dict.fromkeys(row.get("body", "") for row in r.rows(LATENCY)):
        tag = body.replace(" ", "")
        m = _latency_medians(r, body)
        figs += [f"{name}_{tag}_{p}_ms={x:g}" for name, ps in m.items() for p, x in ps.items()
                 if x is not None]
        figs += [f"{name}_{tag}_p99_over_proxy={x:.3f}" for name in ("sdk", "raw")
                 if (x := _over_proxy(m, name)) is not None]
    return " ".join(figs)


def render_latency_runs(reports: Sequence[Tuple[str, str]]) -> str:
    """Issue 20's latency targets in every report of the suite's latency scenario kept,
    ``reports`` as (file name, text): a row per run of the scenario (in time order; a run kept
    in two files is given once, under the first name), then how many of the runs met each
    target. A ratio is the SDK's p99 over the proxy's of the same run; beside them, not a
    target, the raw pyzmq clients' (the same broker without the SDK) and how many of the runs
    had it within the SDK's limit."""
    found: Dict[str, Tuple[str, str, Dict[str, Optional[float]]]] = {}
    for name, text in reports:
        r = Results(text)
        figures = latency_figures(r)
        run = r.runs.get("latency", "")
        if figures is None or run in found:
            continue
        m = COMMAND_OF_RUN.match(run)
        when = m["when"] if m else run
        kind = "alone" if m and "--only" in m["command"].split() else "in the full suite"
        found[run] = (f"{when}, {kind}", name, figures)
    cols = [col for _key, col, _limit in LATENCY_TARGETS]
    lines = ["| run of the latency scenario | report | " + " | ".join(cols)
             + " | raw pyzmq clients' p99 ÷ the proxy's (100 B) | proxy p99, p99.9 (100 B) |",
             "|---|---|" + "---|" * (len(cols) + 2)]
    raw_within = [0, 0]             # runs whose raw clients' ratio is within the SDK's limit
    met = {key: [0, 0] for key, _col, _limit in LATENCY_TARGETS}
    for run in sorted(found, key=lambda run: found[run][0]):
        label, name, figures = found[run]
        cells = []
        for key, _col, limit in LATENCY_TARGETS:
            x = figures[key]
            if x is None:
                cells.append("—")
                continue
            ok = x <= limit
            met[key][0] += ok
            met[key][1] += 1
            unit = "×" if key.startswith("ratio") else " ms"
            cells.append(f"{x:.2f}{unit} ({_met(ok)})" if unit == "×"
                         else f"{x:#.3g}{unit} ({_met(ok)})")
        raw = figures["raw ratio"]
        if raw is not None:
            raw_within[0] += raw <= LIMITS["ratio 100 B"]
            raw_within[1] += 1
        cells.append("—" if raw is None else f"{raw:.2f}×")
        proxy = figures["proxy p99"], figures["proxy p99.9"]
        cells.append("—" if None in proxy else f"{proxy[0]:#.3g} ms, {proxy[1]:#.3g} ms")
        lines.append(f"| {label} | `{name}` | " + " | ".join(cells) + " |")
    lines.append("| runs that met it | | " + " | ".join(
        f"{k} of {n}" for k, n in met.values())
        + f" | {raw_within[0]} of {raw_within[1]} within {LIMITS['ratio 100 B']:g}× | |")
    return "\n".join(lines) + "\n"
