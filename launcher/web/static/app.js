"use strict";
// The page: polls /api/clusters every POLL_MS; when the collector's generation changes,
// the list and the open cluster's panels are fetched again (a page of each long table).
const POLL_MS = 2000;
const PAGE = Number(new URLSearchParams(location.search).get("rows")) || 100; // rows a table shows
const $ = (sel) => document.querySelector(sel);
const state = { generation: -1, name: null, nodeOffset: 0, decisionOffset: 0, reclaimOffset: 0, plot: null, plotKey: "" };

function api(path, params = {}, method = "GET") {
  const query = new URLSearchParams({ ...params, token: window.TOKEN });
  return fetch(`api/${path}?${query}`, { method }).then((r) => {
    if (!r.ok) throw new Error(`${r.status} ${r.statusText}`);
    return r.json();
  });
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? wrap(c) : el("td", c));
  return tr;
}
function wrap(node) { const td = document.createElement("td"); td.appendChild(node); return td; }

const money = (v) => (v === null || v === undefined ? "unknown" : `$${v.toFixed(2)}`);
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "-");
function age(s) {
  if (s === null || s === undefined) return "-";
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  return h < 48 ? `${h}h${String(m % 60).padStart(2, "0")}m` : `${Math.floor(h / 24)}d${h % 24}h`;
}
function badge(s) { return el("span", s, `state state-${s.split(" ")[0]}`); }

function pager(id, view, onMove) {
  const box = $(id);
  box.textContent = "";
  const last = Math.min(view.total, view.offset + view.items.length);
  box.appendChild(el("span", view.total ? `${view.offset + 1}-${last} of ${view.total}` : "none", "muted"));
  const prev = el("button", "‹"); prev.disabled = view.offset === 0;
  const next = el("button", "›"); next.disabled = last >= view.total;
  prev.onclick = () => onMove(Math.max(0, view.offset - PAGE));
  next.onclick = () => onMove(view.offset + PAGE);
  box.append(prev, next);
}

function renderClusters(data) {
  const body = $("#clusters tbody");
  body.textContent = "";
  for (const c of data.clusters) {
    const name = el("a", c.name); name.href = `#${encodeURIComponent(c.name)}`;
    const nodes = c.nodes.map((n) => `${n.count} ${n.node_type}${n.lifecycle === "spot" ? " (spot)" : ""}`).join(", ");
    const tr = row([name, c.region ? `${c.provider}/${c.region}` : c.provider, badge(c.shown_state),
      nodes || (c.node_count ? `${c.node_count}` : "-"), c.per_hour_now_text, c.cost_so_far_text]);
    tr.className = "pick" + (c.name === state.name ? " chosen" : "");
    tr.dataset.cluster = c.name;
    tr.dataset.state = c.shown_state;
    tr.onclick = () => { location.hash = encodeURIComponent(c.name); };
    body.appendChild(tr);
  }
  $("#updated").textContent = `updated ${new Date(data.now * 1000).toLocaleTimeString()}`;
}

function card(label, value, id) {
  const d = el("div", null, "card");
  d.append(el("span", label, "muted"), el("b", value));
  if (id) d.id = id;
  return d;
}

function renderSummary(c) {
  $("#detail-name").textContent = c.name;
  const box = $("#summary");
  box.textContent = "";
  const pending = c.pending.map((p) => `${p.count}× ${Object.entries(p.resources).map(([k, v]) => `${k}:${v}`).join(" ")}`).join(", ");
  box.append(card("state", c.shown_state, "summary-state"), card("nodes", c.node_count),
    card("$/h now", c.per_hour_now_text), card("cost so far", c.cost_so_far_text, "summary-cost"),
    card("autoscaler", c.autoscaler_running ? "running" : "not running"),
    card("pending demand", pending || "none"), card("reclaims", c.reclaims, "summary-reclaims"),
    card("decisions", c.decisions));
  if (c.error) box.append(card("last poll", c.error));
  if (c.state === "up") {
    const link = el("button", "open Ray's dashboard");
    link.onclick = async () => {
      link.disabled = true;
      const r = await api(`clusters/${encodeURIComponent(c.name)}/ray-dashboard`, {}, "POST").catch((e) => ({ error: String(e) }));
      link.disabled = false;
      if (r.url) window.open(r.url, "_blank"); else alert(r.error);
    };
    const d = el("div", null, "card"); d.append(link); box.append(d);
  }
}

function renderPlot(s) {
  $("#plot-source").textContent = s.t.length ? (s.source === "timeline" ? "(the head's timeline)" : "(as this page polled it)") : "(no samples yet)";
  const types = Object.keys(s.nodes), resources = Object.keys(s.pending);
  const key = types.join(",") + "|" + resources.join(",");
  const data = [s.t, ...types.map((t) => s.nodes[t]), ...resources.map((r) => s.pending[r])];
  const box = $("#plot");
  box.dataset.points = String(s.t.length);
  box.dataset.maxNodes = String(Math.max(0, ...s.t.map((_, i) => types.reduce((a, t) => a + s.nodes[t][i], 0))));
  if (state.plot && state.plotKey === key) { state.plot.setData(data); return; }
  if (state.plot) state.plot.destroy();
  box.textContent = "";
  state.plotKey = key;
  const colors = ["#3366cc", "#dc3912", "#109618", "#990099", "#0099c6", "#ff9900", "#66aa00"];
  const series = [{}];
  types.forEach((t, i) => series.push({ label: `nodes: ${t}`, stroke: colors[i % colors.length], width: 2, paths: uPlot.paths.stepped({ align: 1 }), scale: "nodes" }));
  resources.forEach((r, i) => series.push({ label: `pending ${r}`, stroke: colors[(types.length + i) % colors.length], dash: [6, 4], paths: uPlot.paths.stepped({ align: 1 }), scale: "pending" }));
  const opts = {
    width: Math.max(400, box.clientWidth - 4), height: 260, series,
    scales: { x: { time: true }, nodes: { range: (u, lo, hi) => [0, Math.max(1, hi + 1)] }, pending: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
    axes: [{}, { scale: "nodes", label: "nodes" }, { scale: "pending", side: 1, label: "pending", grid: { show: false } }],
  };
  state.plot = new uPlot(opts, data, box);
}

async function loadNodes() {
  const name = state.name;
  const v = await api(`clusters/${encodeURIComponent(name)}/nodes`, { offset: state.nodeOffset, limit: PAGE, q: $("#node-filter").value });
  if (name !== state.name) return;
  const body = $("#nodes tbody");
  body.textContent = "";
  for (const n of v.items) {
    const tr = row([n.id, n.node_type, n.spot === null ? "?" : n.spot ? "spot" : "on-demand", n.state + (n.reclaim_at ? " (reclaim notice)" : ""),
      n.address || "-", age(n.age_s), !n.billed ? "free" : n.per_hour === null ? "unknown" : money(n.per_hour)]);
    tr.dataset.state = n.state;
    body.appendChild(tr);
  }
  pager("#node-pager", v, (o) => { state.nodeOffset = o; loadNodes(); });
}

async function loadDecisions() {
  const name = state.name;
  const select = $("#action-filter");
  const v = await api(`clusters/${encodeURIComponent(name)}/decisions`, { offset: state.decisionOffset, limit: PAGE, action: select.value, q: $("#decision-filter").value });
  if (name !== state.name) return;
  const chosen = select.value;
  select.textContent = "";
  select.append(new Option("every action", ""));
  for (const [a, n] of Object.entries(v.actions)) select.append(new Option(`${a} (${n})`, a));
  select.value = chosen;
  const body = $("#decisions tbody");
  body.textContent = "";
  for (const d of v.items) {
    const tr = row([when(d.t), d.action, d.node_type || "-", d.count ?? "-", d.reason]);
    tr.lastChild.className = "reason";
    body.appendChild(tr);
  }
  pager("#decision-pager", v, (o) => { state.decisionOffset = o; loadDecisions(); });
}

async function loadReclaims() {
  const name = state.name;
  const v = await api(`clusters/${encodeURIComponent(name)}/reclaims`, { offset: state.reclaimOffset, limit: PAGE });
  if (name !== state.name) return;
  const body = $("#reclaims tbody");
  body.textContent = "";
  for (const e of v.items) {
    const reclaim = e.kind === "reclaim";
    const tr = row([when(e.t), reclaim ? "reclaimed" : "capacity failure", e.node_id || "-", e.node_type || "-",
      (reclaim ? e.how : e.zone) || "-", reclaim ? (e.replaced_by ? `replaced by ${e.replaced_by}` : "not replaced") : e.reason]);
    tr.dataset.kind = e.kind;
    body.appendChild(tr);
  }
  pager("#reclaim-pager", v, (o) => { state.reclaimOffset = o; loadReclaims(); });
}

async function loadRuns() {
  const name = state.name;
  const v = await api(`clusters/${encodeURIComponent(name)}/runs`);
  if (name !== state.name) return;
  const body = $("#runs tbody");
  body.textContent = "";
  for (const r of v.runs) {
    const rec = r.recoveries.map((x) => `${when(x.seen_at)}: ${x.why}` + (x.new_head ? ` → ${x.new_head} (${x.adopted} kept)` : "")).join("; ");
    body.appendChild(row([r.id, r.script, r.state, when(r.created_at), r.attempts, rec || "none", age(r.time_lost_s)]));
  }
  if (!v.runs.length) body.appendChild(row(["no run"]));
}

async function loadDetail() {
  if (!state.name) { $("#detail").hidden = true; return; }
  const name = state.name;
  const [d, s] = await Promise.all([
    api(`clusters/${encodeURIComponent(name)}`), api(`clusters/${encodeURIComponent(name)}/series`)]);
  if (name !== state.name) return;
  $("#detail").hidden = false;
  renderSummary(d.cluster);
  renderPlot(s);
  await Promise.all([loadNodes(), loadDecisions(), loadReclaims(), loadRuns()]);
}

async function poll() {
  try {
    const data = await api("clusters");
    if (data.generation !== state.generation) {
      const began = performance.now();
      state.generation = data.generation;
      renderClusters(data);
      await loadDetail();
      // What an update costs here (fetches and rendering), for bench/bench_web.py.
      document.body.dataset.updateMs = (performance.now() - began).toFixed(1);
    }
    document.body.dataset.generation = String(state.generation);
  } catch (e) {
    $("#updated").textContent = `no answer from the launcher (${e.message})`;
  }
  setTimeout(poll, POLL_MS);
}

function choose() {
  const name = decodeURIComponent(location.hash.slice(1)) || null;
  if (name === state.name) return;
  Object.assign(state, { name, nodeOffset: 0, decisionOffset: 0, reclaimOffset: 0 });
  if (state.plot) { state.plot.destroy(); state.plot = null; state.plotKey = ""; }
  for (const tr of document.querySelectorAll("#clusters tr")) tr.classList.toggle("chosen", tr.dataset.cluster === name);
  loadDetail();
}

function debounce(f) { let t; return () => { clearTimeout(t); t = setTimeout(f, 250); }; }
$("#node-filter").oninput = debounce(() => { state.nodeOffset = 0; loadNodes(); });
$("#decision-filter").oninput = debounce(() => { state.decisionOffset = 0; loadDecisions(); });
$("#action-filter").onchange = () => { state.decisionOffset = 0; loadDecisions(); };
window.addEventListener("hashchange", choose);
state.name = decodeURIComponent(location.hash.slice(1)) || null;
poll();
