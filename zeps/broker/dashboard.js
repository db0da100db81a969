// The ZEPS dashboard: polls /varz, /streamz, /connz and /consumerz every second and draws them.
// The page comes with the documents of a first poll (#snapshot, zeps/broker/dashboard.py): they
// are drawn at once, before the page has loaded, so its first frame shows the broker, not
// "connecting…".
// Plain browser JavaScript, no build step, no outside resources. Every value from the broker is
// put in the page as text (textContent), never as markup: stream names and keys are anybody's.
"use strict";

const POLL_MS = 1000;
const HISTORY = 120;              // samples in the throughput chart (2 minutes)
const CLIENT_ROWS = 200;          // clients listed, most behind first (CLIENT_ROWS in dashboard.py)
const CONSUMER_ROWS = 100;        // consumers listed, most behind first (CONSUMER_ROWS in dashboard.py)
const MODE_NAMES = {
  live: "live", catching_up: "catching up", historical: "historical", congested: "congested",
  not_subscribed: "not subscribed", unattached: "unattached",
};

// With `zeps broker --monitor-token`, the broker's pages need its token: open the dashboard as
// /#token=TOKEN (what follows # stays in the browser: it is not sent in the page's request).
const TOKEN = new URLSearchParams(location.hash.slice(1)).get("token");

let previous = null;              // {t, totals: varz, streams: {name: doc}}
const history = [];               // [{in, out}] messages per second
let polls = 0;

const $ = (id) => document.getElementById(id);

function fmtInt(n) {
  return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
}

function fmtRate(n) {
  if (n === null || n === undefined) return "—";
  if (n >= 100) return Math.round(n).toLocaleString("en-US");
  return n.toFixed(n >= 10 ? 1 : 2).replace(/\.?0+$/, "") || "0";
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(Math.round(n)) : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i];
}

function fmtDuration(s) {
  if (s === null || s === undefined) return "—";
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

function rate(now, before, dt) {
  return before === undefined || dt <= 0 ? null : Math.max(now - before, 0) / dt;
}

function cell(tr, text, cls, field) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  if (field) td.dataset.field = field;
  tr.appendChild(td);
  return td;
}

function emptyRow(tbody, columns, text) {
  const tr = document.createElement("tr");
  tr.className = "empty";
  const td = cell(tr, text);
  td.colSpan = columns;
  tbody.appendChild(tr);
}

function modesText(modes, keys) {
  return keys.filter((k) => modes[k]).map((k) => `${modes[k]} ${MODE_NAMES[k]}`).join(" · ");
}

function drawSummary(varz, rates) {
  $("endpoint").textContent = varz.endpoint || "";
  $("version").textContent = varz.version ? `v${varz.version}` : "";
  $("uptime").textContent = fmtDuration(varz.uptime_s);
  $("clients").textContent = fmtInt(varz.clients);
  $("client-modes").textContent = modesText(varz.modes || {}, Object.keys(MODE_NAMES)) || "none";
  $("streams-open").textContent = fmtInt(varz.streams_open);
  $("streams-total").textContent = varz.streams === null ? "" : `${fmtInt(varz.streams)} on disk`;
  $("rate-in").textContent = rates ? `${fmtRate(rates.in)}/s` : "—";
  $("rate-out").textContent = rates ? `${fmtRate(rates.out)}/s` : "—";
  $("bytes-in").textContent = rates ? `${fmtBytes(rates.inBytes)}/s · ${fmtInt(varz.in_msgs)} total`
                                    : `${fmtInt(varz.in_msgs)} total`;
  $("bytes-out").textContent = rates ? `${fmtBytes(rates.outBytes)}/s · ${fmtInt(varz.out_msgs)} total`
                                     : `${fmtInt(varz.out_msgs)} total`;
  $("confirms").textContent = fmtInt(varz.confirms_pending);
  const invalid = varz.invalid || {};
  const kinds = Object.keys(invalid).filter((k) => invalid[k]);
  $("invalids").textContent = fmtInt(Object.values(invalid).reduce((a, b) => a + b, 0));
  $("invalid-kinds").textContent = kinds.map((k) => `${invalid[k]} ${k.replace(/_/g, " ")}`).join(" · ");
}

function drawStreams(streamz, dt) {
  const tbody = document.querySelector("#streams tbody");
  tbody.replaceChildren();
  const before = previous ? previous.streams : {};
  for (const st of streamz.streams) {
    const tr = document.createElement("tr");
    tr.dataset.stream = st.name;
    const old = before[st.name] || {};
    const name = cell(tr, st.name, "name", "name");
    name.title = st.error ? `${st.name}: ${st.error}` : st.name;
    cell(tr, fmtInt(st.head_seq), "num", "head_seq");
    cell(tr, fmtInt(st.messages), "num", "messages");
    cell(tr, fmtBytes(st.size_bytes), "num", "size");
    cell(tr, fmtRate(rate(st.in_msgs, old.in_msgs, dt)), "num", "in_rate");
    cell(tr, fmtRate(rate(st.out_msgs, old.out_msgs, dt)), "num", "out_rate");
    const inBytes = rate(st.in_bytes, old.in_bytes, dt);
    cell(tr, inBytes === null ? "—" : fmtBytes(inBytes), "num", "in_bytes_rate");
    cell(tr, modesText(st.modes, Object.keys(MODE_NAMES)) || "none", "", "clients");
    cell(tr, fmtInt(st.max_lag), st.max_lag > 0 ? "num lagging" : "num", "max_lag");
    cell(tr, fmtInt(st.confirms_pending), "num", "confirms_pending");
    tbody.appendChild(tr);
  }
  if (!streamz.streams.length) emptyRow(tbody, 10, "no open streams");
  $("streams-note").textContent = streamz.total > streamz.streams.length
    ? `${streamz.streams.length} of ${streamz.total}` : `${streamz.total}`;
}

function drawClients(connz) {
  const tbody = document.querySelector("#connections tbody");
  tbody.replaceChildren();
  for (const c of connz.connections) {
    const tr = document.createElement("tr");
    tr.dataset.client = c.client;
    const id = cell(tr, c.client, "name", "client");
    id.title = c.user ? `key ${c.user}` : c.client;
    cell(tr, c.stream === null ? "—" : c.stream, "name", "stream");
    const td = cell(tr, "", "", "mode");
    const badge = document.createElement("span");
    badge.className = `mode ${c.mode}`;
    badge.dataset.mode = c.mode;
    badge.textContent = MODE_NAMES[c.mode] || c.mode;
    td.appendChild(badge);
    cell(tr, fmtBytes(c.credit), "num", "credit");
    cell(tr, fmtInt(c.next_seq), "num", "next_seq");
    cell(tr, fmtInt(c.lag), c.lag > 0 ? "num lagging" : "num", "lag");
    cell(tr, fmtInt(c.delivered), "num", "delivered");
    cell(tr, fmtInt(c.published), "num", "published");
    cell(tr, fmtDuration(c.idle_s), "num", "idle");
    tbody.appendChild(tr);
  }
  if (!connz.connections.length) emptyRow(tbody, 9, "no clients");
  $("clients-note").textContent = connz.total > connz.connections.length
    ? `${connz.connections.length} most behind of ${connz.total}` : `${connz.total}`;
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "—";
  return s >= 60 ? fmtDuration(s) : `${s.toFixed(s >= 10 ? 0 : 1)} s`;
}

function drawConsumers(consumerz) {
  const tbody = document.querySelector("#consumers tbody");
  tbody.replaceChildren();
  const rows = consumerz ? consumerz.consumers : [];
  for (const g of rows) {
    const tr = document.createElement("tr");
    tr.dataset.stream = g.stream;
    tr.dataset.consumer = g.name;
    cell(tr, g.stream, "name", "stream");
    cell(tr, g.name, "name", "consumer").title = `${g.stream} / ${g.name}`;
    cell(tr, fmtInt(g.members), "num", "members");
    cell(tr, fmtInt(g.lag), g.lag > 0 ? "num lagging" : "num", "lag");
    cell(tr, fmtSeconds(g.lag_seconds), g.lag_seconds > 0 ? "num lagging" : "num", "lag_seconds");
    cell(tr, fmtInt(g.pending), "num", "pending");
    cell(tr, fmtInt(g.acked), "num", "acked");
    cell(tr, fmtInt(g.redelivered), "num", "redelivered");
    cell(tr, fmtInt(g.dead_lettered), g.dead_lettered > 0 ? "num lagging" : "num", "dead_lettered");
    tbody.appendChild(tr);
  }
  if (!rows.length) emptyRow(tbody, 9, consumerz ? "no consumers" : "—");
  const total = consumerz ? consumerz.total : 0;
  $("consumers-note").textContent = total > rows.length
    ? `${rows.length} most behind of ${total}` : `${total}`;
}

function svg(tag, attrs, text) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function drawChart() {
  const chart = $("chart");
  const W = 1000, H = 180, left = 56, top = 8, bottom = 20;
  const max = niceMax(Math.max(1, ...history.map((h) => Math.max(h.in, h.out))));
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const x = (i) => left + (W - left - 4) * (i + HISTORY - history.length) / (HISTORY - 1);
  const parts = [];
  for (const f of [0, 0.5, 1]) {
    parts.push(svg("line", { class: "grid", x1: left, x2: W, y1: y(max * f), y2: y(max * f) }));
    parts.push(svg("text", { class: "axis", x: left - 6, y: y(max * f) + 4, "text-anchor": "end" },
                   fmtRate(max * f)));
  }
  parts.push(svg("text", { class: "axis", x: left, y: H - 4 }, "−2 min"));
  parts.push(svg("text", { class: "axis", x: W - 4, y: H - 4, "text-anchor": "end" }, "now"));
  for (const series of ["in", "out"]) {
    if (history.length > 1) {
      const points = history.map((h, i) => `${x(i).toFixed(1)},${y(h[series]).toFixed(1)}`);
      parts.push(svg("polyline", { class: series, points: points.join(" ") }));
    }
  }
  chart.replaceChildren(...parts);
}

async function getJSON(path) {
  const headers = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};
  const r = await fetch(path, { cache: "no-store", headers });
  if (!r.ok) {
    const err = new Error(`${path}: HTTP ${r.status}`);
    err.unauthorized = r.status === 401;
    throw err;
  }
  return r.json();
}

// Draws one poll's documents; `given` are rates the page came with (no previous poll yet).
function draw(varz, streamz, connz, consumerz, given) {
  const t = performance.now() / 1000;
  const dt = previous ? t - previous.t : 0;
  let rates = given || null;
  if (previous) {
    const v = previous.totals;
    rates = { in: rate(varz.in_msgs, v.in_msgs, dt), out: rate(varz.out_msgs, v.out_msgs, dt),
              inBytes: rate(varz.in_bytes, v.in_bytes, dt),
              outBytes: rate(varz.out_bytes, v.out_bytes, dt) };
  }
  if (rates) {
    history.push({ in: rates.in, out: rates.out });
    if (history.length > HISTORY) history.shift();
  }
  drawSummary(varz, rates);
  drawStreams(streamz, dt);
  drawClients(connz);
  drawConsumers(consumerz);
  drawChart();
  previous = { t, totals: varz,
               streams: Object.fromEntries(streamz.streams.map((s) => [s.name, s])) };
  const status = $("status");
  status.textContent = "up";
  status.className = "status up";
  const updated = $("updated");
  updated.textContent = `updated ${new Date().toLocaleTimeString()} · every ${POLL_MS / 1000} s`;
}

async function poll() {
  try {
    const [varz, streamz, connz, consumerz] = await Promise.all([
      getJSON("varz"), getJSON("streamz"), getJSON(`connz?sort=lag&limit=${CLIENT_ROWS}`),
      getJSON(`consumerz?sort=lag&limit=${CONSUMER_ROWS}`)]);
    draw(varz, streamz, connz, consumerz, null);
    polls += 1;
    $("updated").dataset.polls = String(polls);
  } catch (err) {
    const status = $("status");
    status.textContent = err.unauthorized
      ? (TOKEN ? "token refused" : "token needed: open this page as /#token=TOKEN")
      : "broker not answering";
    status.className = "status down";
    status.title = String(err);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

// The first poll's documents, inline in the page (none with a monitoring token).
const snapshot = JSON.parse($("snapshot")?.textContent || "null");
if (snapshot) {
  draw(snapshot.varz, snapshot.streamz, snapshot.connz, snapshot.consumerz || null,
       snapshot.rates);
  $("updated").dataset.inline = "1";
  setTimeout(poll, POLL_MS);
} else {
  drawChart();
  poll();
}
