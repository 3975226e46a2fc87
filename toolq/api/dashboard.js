"use strict";
// Every value from the API reaches the DOM through text nodes or attributes, never as HTML.
const REFRESH_MS = 2000;
const CHARTS_MS = 10000;
const PAGE_SIZE = 50;
const APPROVALS_PAGE = 50;  // rows of the approvals table: one page is fetched, never the whole list
let FINAL = new Set();  // the states a call never leaves: /v1/overview's final_states
const RISKS = ["safe", "moderate", "dangerous"];
const EVENT_TYPES = ["queued", "awaiting_approval", "approved", "denied", "expired", "started", "progress",
  "retrying", "throttled", "succeeded", "failed", "cancelled", "previewed", "undone", "undo_failed",
  "unknown"].map(t => "call." + t);
const EVENT_STATE = { "call.queued": "queued", "call.awaiting_approval": "awaiting_approval",
  "call.approved": "queued", "call.denied": "denied", "call.expired": "expired", "call.started": "running",
  "call.progress": "running", "call.retrying": "running", "call.throttled": "queued", "call.succeeded": "succeeded",
  "call.failed": "failed", "call.cancelled": "cancelled", "call.undone": "cancelled",
  "call.undo_failed": "failed", "call.unknown": "unknown" };

const $ = (sel, root = document) => root.querySelector(sel);
let token = localStorage.getItem("toolq.token") || "";
let timer = null;
let run = null;  // {id, source, seen:Set, names:Map}
let call = null;  // {id, final}: the call page that is open (call.js)
let page = 0;  // page of the calls table (0 = newest)
let chartsAt = 0;
let chartsShape = "";  // the calls shown when the charts were last drawn
const cards = new Map();  // call_id -> {node, digest, deadline, busy}: expanded approval cards
const approvalRows = new Map();  // call_id -> {row, toggle, age, digest}
const expanded = new Set();  // approvals whose full card is open
let approvalCursors = [""];  // the cursor of each approvals page walked through; the last is shown
let approvalsKey = "";  // the filters those cursors belong to
let shownApprovals = [];
let lastGood = 0;  // when every panel last got fresh data (ms)
const RUNS_MS = 10000;  // the runs list counts every call of each run: read it less often
let runsAt = 0;
let runsShape = "";  // the calls shown when the runs list was last reloaded for them
let runsSupported = false;  // true once GET /v1/runs answers: an older API has no runs, retry or bulk approve
let runsChecked = false;
const RETRYABLE = new Set(["failed", "denied", "expired", "cancelled"]);
const drafts = new Map();  // call_id -> what the approver typed, kept if its card is rebuilt

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
const badge = state => el("span", { class: "badge s-" + state, "data-state": state }, state.replace("_", " "));
const riskBadge = risk => el("span", { class: "badge risk r-" + risk }, risk);
const shortId = id => String(id).slice(0, 8);
const pretty = value => typeof value === "string" ? value : JSON.stringify(value, null, 2);
const pad = n => String(n).padStart(2, "0");
// Dates on every time: an operator at night reads "yesterday 23:59" apart from "today".
function clock(ts) {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
function uptime(s) {
  if (s === null || s === undefined) return "";
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(Math.floor(s % 60))}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${pad(Math.floor(s / 60) % 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor(s / 3600) % 24}h`;
}
const callLink = id => el("a", { href: "#/calls/" + encodeURIComponent(id), class: "mono", title: id,
  "data-testid": "call-link" }, shortId(id));
function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms.toFixed(ms < 10 ? 1 : 0) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(2) + " s";
  return Math.floor(ms / 60000) + "m " + String(Math.round(ms / 1000) % 60).padStart(2, "0") + "s";
}
function left(deadline) {
  if (!deadline) return "no deadline";
  const s = Math.max(0, Math.round(deadline - Date.now() / 1000));
  return s >= 3600 ? `expires in ${Math.floor(s / 3600)}h ${Math.floor(s / 60) % 60}m`
    : `expires in ${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
}
function toast(message, bad) {
  const node = el("div", { class: bad ? "bad" : "" }, message);
  $("#toast").append(node);
  setTimeout(() => node.remove(), bad ? 7000 : 3500);
}

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}
async function api(path, body) {
  return (await apiRaw(path, body)).data;
}
// A request body sent as its own JSON text: a browser's JSON.parse and JSON.stringify round
// integers beyond 2**53, so edited arguments go out exactly as the approver typed them.
class RawJson { constructor(text) { this.text = text; } }
async function apiRaw(path, body) {
  const init = { headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = body instanceof RawJson ? body.text : JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(res.status, err.code || "http_" + res.status, err.message || res.statusText);
  }
  return { data, headers: res.headers };
}
function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}
function filters() {
  const data = new FormData($("#filters"));
  return Object.fromEntries([...data.entries()].map(([k, v]) => [k, String(v).trim()]));
}

// -- session ------------------------------------------------------------------------------
function showLogin(message) {
  clearTimeout(timer);
  closeRun(true);  // keep the route: it opens again once signed in
  closeCall(true);
  $("#login").hidden = false;
  $("#top").hidden = $("#app").hidden = true;
  $("#login-error").textContent = message || "";
  $("#token").focus();
}
async function start() {
  try {
    FINAL = new Set((await api("v1/overview?limit=1")).final_states);
  } catch (e) {
    showLogin(e.status === 401 ? "That token was not accepted." : e.message);
    return;
  }
  $("#login").hidden = true;
  $("#top").hidden = $("#app").hidden = false;
  loadTools();
  route();
  refresh();
}
// #/calls/<id> opens a call's page (webhooks link there); #run=<id> a run's timeline.
function route() {
  const hash = location.hash;
  if (hash.startsWith("#/calls/")) {
    const id = decodeURIComponent(hash.slice("#/calls/".length));
    if (id && (!call || call.id !== id)) openCall(id);
    return;
  }
  const wanted = new URLSearchParams(hash.slice(1)).get("run");
  if (wanted && (!run || run.id !== wanted)) openRun(wanted);
}
window.addEventListener("hashchange", () => { if (!$("#app").hidden) route(); });
$("#login-form").addEventListener("submit", event => {
  event.preventDefault();
  token = $("#token").value.trim();
  localStorage.setItem("toolq.token", token);
  start();
});
$("#logout").addEventListener("click", () => {
  token = "";
  localStorage.removeItem("toolq.token");
  $("#token").value = "";
  showLogin();
});
$("#filters").addEventListener("input", () => { page = 0; refresh(); });
$("#filters").addEventListener("reset", () => { page = 0; setTimeout(refresh); });
$("#filters").addEventListener("submit", event => { event.preventDefault(); page = 0; refresh(); });
$("#page-prev").addEventListener("click", () => { page = Math.max(0, page - 1); refresh(); });
$("#page-next").addEventListener("click", () => { page += 1; refresh(); });
$("#approvals-age").addEventListener("change", () => refresh());
$("#approvals-prev").addEventListener("click", () => {
  if (approvalCursors.length > 1) approvalCursors.pop();
  refresh();
});
$("#approvals-next").addEventListener("click", () => {
  const next = $("#approvals-next").dataset.cursor;
  if (next) { approvalCursors.push(next); refresh(); }
});

async function loadTools() {
  try {
    const tools = await api("v1/tools?format=mcp");
    $("#tool-names").replaceChildren(...tools.map(t => el("option", { value: t.name })));
  } catch (e) { /* filter still works as free text */ }
}

// -- polling ------------------------------------------------------------------------------
let inflight = false;
async function refresh() {
  clearTimeout(timer);
  if (inflight) { timer = setTimeout(refresh, 200); return; }
  inflight = true;
  const f = filters();
  const wantedPage = page;
  // Only parked calls wait for a decision: another state filter leaves no approval to show.
  const approvalsShown = !f.state || f.state === "awaiting_approval";
  try {
    const [overview, pending, , , , tenants] = await Promise.all([
      api("v1/overview" + query({ ...f, offset: wantedPage * PAGE_SIZE, limit: PAGE_SIZE })),
      approvalsShown ? loadApprovals(f) : { items: [], total: 0, offset: 0, next: null },
      run ? refreshRunCalls() : null,
      call ? refreshCall() : null,
      Date.now() - chartsAt > CHARTS_MS ? loadCharts() : null,
      api("v1/tenants"),
    ]);
    if ((runsSupported || !runsChecked) && Date.now() - runsAt > RUNS_MS) loadRuns().catch(() => {});
    if (JSON.stringify(filters()) !== JSON.stringify(f) || page !== wantedPage) {  // changed meanwhile
      inflight = false;
      return refresh();
    }
    // New or newly finished calls redraw the charts sooner than every CHARTS_MS (at most every 3 s).
    const shape = overview.calls.map(c => c.call_id + c.status).join();
    if (shape !== chartsShape && Date.now() - chartsAt > 3000) {
      chartsShape = shape;
      loadCharts().catch(() => {});
    }
    // New calls or states reload the runs list on the next poll too (at most every 3 s).
    if (shape !== runsShape && Date.now() - runsAt > 3000) { runsShape = shape; runsAt = 0; }
    renderStats(overview);
    renderWorkers(overview.worker_list || []);
    renderTenants(tenants);
    renderApprovals(f.q ? pending.items.filter(p => searchHit(p, f.q)) : pending.items);
    renderApprovalsPager(pending, f.q);
    renderCalls(overview);
    lastGood = Date.now();
    markStale(null);
    $("#conn").textContent = "live · " + new Date().toLocaleTimeString([], { hour12: false });
    $("#conn").classList.remove("down");
  } catch (e) {
    if (e.status === 401) { showLogin("The token is no longer accepted."); inflight = false; return; }
    $("#conn").textContent = "error: " + e.message;
    $("#conn").classList.add("down");
    markStale(e);
  }
  inflight = false;
  timer = setTimeout(refresh, REFRESH_MS);
}

// Panels the poll fills: when a poll fails they keep the last good data, marked stale.
const POLLED = ["#stats", "#charts-panel", "#workers-panel", "#tenants-panel", "#approvals-panel", "#calls-panel",
  "#runs-panel"];
function markStale(error) {
  const since = lastGood ? clock(lastGood / 1000) : null;
  for (const sel of POLLED) {
    const panel = $(sel);
    const heading = $(":scope > h2", panel);
    const note = heading && $(".stale-note", heading);
    if (!error) {
      delete panel.dataset.stale;
      if (note) note.remove();
      continue;
    }
    panel.dataset.stale = "true";
    const text = since ? "stale · as of " + since : "no data";
    if (note) note.textContent = text;
    else if (heading) heading.append(el("span", { class: "stale-note", "data-testid": "stale-note" }, text));
  }
  $("#stale").hidden = !error;
  if (error) {
    $("#stale").textContent = `Not live: the API did not answer (${error.message}). `
      + (since ? `The panels show the data of ${since}.` : "No data was loaded yet.");
  }
}

function renderStats(o) {
  // Fleet-wide the queues count Celery messages (one may carry several calls; calls waiting
  // for admission have none yet): the Tenants panel counts calls. A tenant's own view counts calls.
  const unit = o.queue_unit === "calls" ? "calls" : "messages";
  const unitTitle = unit === "calls" ? "calls queued at this risk"
    : "messages in this risk's queue; queued calls per tenant are in the Tenants panel";
  const cardsOut = RISKS.map(risk => el("div", { class: "stat", "data-testid": "stat-" + risk },
    el("h3", {}, riskBadge(risk)),
    el("div", { class: "nums" },
      el("div", {}, el("div", { class: "num", "data-testid": "queue-" + risk,
        title: o.queues_capped ? "at least: more calls were queued than one poll reads" : "" },
        o.queues[risk] + (o.queues_capped ? "+" : "")),
        el("div", { class: "lbl", title: unitTitle, "data-testid": "queue-unit-" + risk }, "queued " + unit)),
      el("div", {}, el("div", { class: "num" + (o.workers[risk] ? "" : " warn"),
        "data-testid": "workers-" + risk }, o.workers[risk]),
        el("div", { class: "lbl" }, o.workers[risk] ? "workers" : "workers · none live")))));
  cardsOut.push(el("div", { class: "stat pending" }, el("h3", {}, "approvals"),
    el("div", { class: "nums" }, el("div", {}, el("div", { class: "num", "data-testid": "pending-count" },
      o.pending_approvals), el("div", { class: "lbl" }, "pending decisions")))));
  // With cells (TOOLQ_SHARDS): one card per cell, a cell whose Redis does not answer shown down.
  for (const c of o.cells || []) {
    cardsOut.push(el("div", { class: "stat cell" + (c.up ? "" : " down"), "data-testid": "cell-" + c.cell },
      el("h3", {}, "cell " + c.cell),
      el("div", { class: "nums" }, el("div", {}, el("div", { class: "num" + (c.up ? "" : " warn") },
        c.up ? "up" : "down"), el("div", { class: "lbl", title: c.where }, c.up
          ? "answers" : "its runs fail with cell_unavailable")))));
  }
  $("#stats").replaceChildren(...cardsOut);
}

function searchHit(req, text) {
  const t = text.toLowerCase();
  return [req.call_id, req.run_id, req.name, req.status].some(v => String(v).toLowerCase().includes(t));
}

function runLink(runId) {
  return el("button", { type: "button", class: "link mono run-id", title: "Open run " + runId,
    onclick: () => openRun(runId) }, runId);
}

async function cancelCall(id, name) {
  if (!confirm(`Cancel ${name || "call"} ${shortId(id)}?`)) return;
  try {
    const result = await api(`v1/calls/${encodeURIComponent(id)}/cancel`, {});
    toast(`Cancel ${name || ""} (${shortId(id)}) → ${result.status}`);
  } catch (e) {
    toast(`${e.code}: ${e.message}`, true);
  }
  refresh();
}
async function retryCall(id, name) {
  if (!confirm(`Retry ${name || "call"} ${shortId(id)} as a new call?`)) return;
  try {
    const result = await api(`v1/calls/${encodeURIComponent(id)}/retry`, {});
    toast(`Retry ${name || ""} (${shortId(id)}) → new call ${shortId(result.call_id)}, ${result.status}`);
  } catch (e) {
    toast(`${e.code}: ${e.message}`, true);
  }
  refresh();
}
const retryButton = c => runsSupported && RETRYABLE.has(c.status) ? el("button", { type: "button",
  class: "retry", title: "Dispatch this call again as a new call", "data-testid": "retry",
  onclick: () => retryCall(c.call_id, c.name) }, "Retry") : null;
// Approve what the approver is shown: the run's parked calls are listed with their
// arguments, and only those go in the request, each with the digest of the arguments shown
// (a call parked after the listing, or changed since, is not approved).
const BULK_SHOWN = 25;  // calls one bulk approval shows, and approves
// A browser cuts a confirm() message it finds too long (Chromium on Linux: 32 rows of 132
// columns): a call goes in only while the whole dialog fits those, every line whole.
const DIALOG_ROWS = 28;  // rows for the calls (the question and the note take the rest)
const DIALOG_COLS = 120;
function fitsDialog(listed) {
  const shown = [];
  let rows = 0;
  for (const r of listed) {
    if (shown.length >= BULK_SHOWN) break;
    // arguments_text: numbers exactly as they will run (JSON.parse rounds big integers)
    const text = `• ${r.name} (${shortId(r.call_id)}) ${r.arguments_text}`;
    const lines = text.split("\n");
    if (lines.some(line => line.length > DIALOG_COLS)) continue;  // reviewed on its own card
    if (rows + lines.length > DIALOG_ROWS) break;
    rows += lines.length;
    shown.push({ r, text });
  }
  return shown;
}
async function approveRun(runId) {
  try {
    const listed = await api(`v1/approvals${query({ run_id: runId, limit: "1000" })}`);
    if (!listed.length) { toast(`Run ${runId}: nothing awaits a decision`); runsAt = 0; refresh(); return; }
    // Only what the dialog shows whole is approved: the rest stays parked for another round
    // (a call too long for the dialog, for its own card).
    const fitting = fitsDialog(listed);
    if (!fitting.length) {
      toast(`Run ${runId}: its calls are too long to approve at once; review each on its own card`, true);
      return;
    }
    const shown = fitting.map(f => f.r);
    const lines = fitting.map(f => f.text);
    const rest = listed.length - shown.length;
    const note = rest > 0 ? `\n\n(${rest} more stay parked: approve them on their cards)` : "";
    if (!confirm(`Approve these ${shown.length} call(s) of run ${runId}?\n\n${lines.join("\n")}${note}`)) return;
    const calls = shown.map(r => ({ call_id: r.call_id, digest: r.digest }));
    const result = await api(`v1/runs/${encodeURIComponent(runId)}/approvals/approve`, { calls });
    toast(`Run ${runId}: ${result.approved.length} approved`
      + (result.refused.length ? `, ${result.refused.length} refused (${result.refused[0].code})` : ""),
      result.refused.length > 0);
  } catch (e) {
    toast(`${e.code}: ${e.message}`, true);
  }
  runsAt = 0;
  refresh();
}
const cancelButton = c => FINAL.has(c.status) ? null : el("button", { type: "button", class: "cancel",
  title: "Cancel this call", onclick: () => cancelCall(c.call_id, c.name) }, "Cancel");

let callsDrawn = "";  // the page of calls on screen: an unchanged page is not rebuilt
function renderCalls(o) {
  const calls = o.calls;
  const drawn = JSON.stringify([o.offset, o.has_more, page, calls]);
  if (drawn === callsDrawn) return;
  callsDrawn = drawn;
  const cell = (label, attrs, ...children) => el("td", { ...attrs, "data-label": label }, ...children);
  const rows = calls.map(c => el("tr", { "data-call-id": c.call_id, "data-testid": "call-row" },
    cell("Created", { class: "mono when" }, clock(c.created_at).split(" ").flatMap((part, i) => [i ? " " : null, el("span", {}, part)])),
    cell("Call", { class: "tool" }, c.name, el("br"), callLink(c.call_id)),
    cell("Run", { class: "run" }, runLink(c.run_id)),
    cell("Risk", {}, riskBadge(c.risk)),
    cell("State", { class: "state" }, badge(c.status), cancelButton(c), retryButton(c)),
    cell("Duration", { class: "num" }, duration(c.duration_ms)),
    cell("Error", { class: "error" }, c.error || "", c.error_truncated
      ? ["… ", el("a", { href: "#/calls/" + encodeURIComponent(c.call_id), class: "more" }, "full error")] : null)));
  $("#calls tbody").replaceChildren(...rows);
  const first = o.offset + (calls.length ? 1 : 0);
  $("#calls-count").textContent = calls.length;
  $("#page-info").textContent = calls.length ? `${first}–${o.offset + calls.length}` : "";
  $("#page-prev").disabled = page === 0;
  $("#page-next").disabled = !o.has_more;
  $("#calls-empty").hidden = calls.length > 0;
}

// A busy worker runs many calls: a few short links and a count, so HOST keeps its room.
const CURRENT_SHOWN = 3;
function currentCalls(ids) {
  const shown = ids.slice(0, CURRENT_SHOWN).flatMap(id => [callLink(id), " "]);
  if (ids.length > CURRENT_SHOWN) {
    shown.push(el("span", { class: "more", title: ids.join("\n") }, `+${ids.length - CURRENT_SHOWN} more`));
  }
  return shown;
}

function renderWorkers(workers) {
  const rows = workers.map(w => el("tr", { "data-testid": "worker-row", "data-hostname": w.hostname },
    el("td", { class: "mono wrap host", "data-label": "Host", "data-testid": "worker-host" }, w.hostname),
    el("td", { class: "num", "data-label": "PID" }, w.pid),
    el("td", { "data-label": "Pool", "data-testid": "worker-pool" }, w.pool),
    el("td", { class: "num", "data-label": "Conc." }, w.concurrency),
    el("td", { class: "mono", "data-label": "Queues" }, (w.queues || []).map(q => q.replace(/^.*\./, "")).join(" ")),
    el("td", { class: "num", "data-label": "Uptime" }, uptime(w.uptime_s)),
    el("td", { class: "num", "data-label": "Processed", "data-testid": "worker-processed" }, w.processed ?? ""),
    el("td", { class: "current", "data-label": "Current", "data-testid": "worker-current" },
      currentCalls(w.current || []))));
  $("#workers tbody").replaceChildren(...rows);
  $("#workers-count").textContent = workers.length;
  $("#workers-empty").hidden = workers.length > 0;
}

function utcTime(ts) {
  return new Date(ts * 1000).toISOString().slice(0, 16).replace("T", " ");
}

function renderTenants(report) {
  const dash = v => v === null || v === undefined ? "–" : v;
  const rows = report.tenants.map(t => {
    const b = t.budget;
    return el("tr", { "data-testid": "tenant-row", "data-tenant": t.tenant },
      el("td", { class: "mono", "data-label": "Tenant" }, t.tenant + (t.configured ? "" : " *")),
      el("td", { class: "num", "data-label": "Weight" }, t.weight),
      el("td", { class: "num", "data-label": "Conc." }, dash(t.concurrency)),
      el("td", { class: "mono", "data-label": "Rate" }, dash(t.rate_limit)),
      el("td", { class: "num", "data-label": "Budget" }, b ? `${b.limit}/${b.per}` : "–"),
      el("td", { class: "num", "data-label": "Used", "data-testid": "tenant-used" }, b ? b.used : "–"),
      el("td", { class: "num", "data-label": "Left", "data-testid": "tenant-left" }, b ? b.left : "–"),
      el("td", { class: "mono", "data-label": "Resets" }, b ? utcTime(b.resets_at) : "–"),
      el("td", { class: "num", "data-label": "Queued", "data-testid": "tenant-queued" }, t.calls.queued),
      el("td", { class: "num", "data-label": "Parked", "data-testid": "tenant-parked" },
        t.calls.awaiting_approval),
      el("td", { class: "num", "data-label": "Running", "data-testid": "tenant-running" }, t.calls.running));
  });
  $("#tenants tbody").replaceChildren(...rows);
  $("#tenants-count").textContent = report.tenants.length;
  const limited = report.tools.filter(t => t.concurrency !== null || t.rate_limit !== null || t.cost_function
    || t.cost);
  $("#tool-limits tbody").replaceChildren(...limited.map(t => el("tr", { "data-testid": "tool-limit-row",
    "data-tool": t.name },
    el("td", { class: "mono", "data-label": "Tool" }, t.name),
    el("td", { class: "num", "data-label": "Conc." }, dash(t.concurrency)),
    el("td", { class: "mono", "data-label": "Rate" }, dash(t.rate_limit)),
    el("td", { class: "num", "data-label": "Cost" }, t.cost_function ? "f(args)" : t.cost))));
  $("#tool-limits").hidden = limited.length === 0;
  $("#tool-limits-empty").hidden = limited.length > 0;
}

// -- charts -------------------------------------------------------------------------------
const STATE_ORDER = ["succeeded", "failed", "running", "queued", "awaiting_approval", "denied", "expired",
  "cancelled"];
function legend(items) {
  return items.map(([name, cls]) => el("span", { class: "key" }, el("i", { class: "swatch " + cls }), name));
}
async function loadCharts() {
  chartsAt = Date.now();
  const data = await api("v1/charts");
  const { lineChart } = window.toolqCharts;
  const states = STATE_ORDER.filter(st => data.rates[st]);
  const rate = v => v === 0 ? "0" : v < 0.1 ? v.toFixed(3) : v.toFixed(2);
  const buckets = Math.round(data.window_seconds / data.bucket_seconds);
  $("#chart-rates").replaceChildren(lineChart({ start: data.start, step: data.bucket_seconds, buckets,
    label: "calls per second by state", format: v => rate(v) + "/s",
    series: states.map(st => ({ name: st, cls: "st-" + st, values: data.rates[st] })) }));
  $("#legend-rates").replaceChildren(...(states.length ? legend(states.map(st => [st.replace("_", " "), "st-" + st]))
    : [el("span", { class: "empty" }, "No calls in the last hour.")]));
  const tools = Object.keys(data.durations);
  const series = tools.flatMap((tool, i) => [
    { name: tool + " p50", cls: "c" + (i % 8), values: data.durations[tool].p50 },
    { name: tool + " p99", cls: "c" + (i % 8), values: data.durations[tool].p99, dashed: true }]);
  $("#chart-durations").replaceChildren(lineChart({ start: data.start, step: data.bucket_seconds, buckets,
    label: "p50 and p99 duration per tool", format: v => duration(v), series }));
  $("#legend-durations").replaceChildren(...legend(tools.map((tool, i) => [tool, "c" + (i % 8)])));
}

// -- approvals ----------------------------------------------------------------------------
function diffView(diff) {
  const lines = String(diff.diff_output || "").replace(/\n$/, "").split("\n");
  return el("pre", { class: "diff", "data-testid": "diff" }, lines.map(line => {
    let cls = "";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    return el("span", { class: cls }, line || " ");
  }));
}

function approvalCard(req) {
  // the API's text of the arguments: its numbers are exactly the ones that will run
  const original = req.arguments_text || JSON.stringify(req.arguments, null, 2);
  const editor = el("textarea", { spellcheck: "false", "aria-label": "Edited arguments (JSON)" }, original);
  const reason = el("input", { class: "reason", placeholder: "reason (the model reads it)",
    "aria-label": "Deny reason" });
  const always = el("input", { type: "checkbox" });
  const error = el("p", { class: "err", role: "alert", hidden: true });
  const approveBtn = el("button", { type: "button", class: "approve" }, "Approve");
  const denyBtn = el("button", { type: "button", class: "deny" }, "Deny");
  editor.addEventListener("input", () => {
    approveBtn.textContent = editor.value.trim() === original.trim() ? "Approve" : "Approve edited";
  });
  // A card is rebuilt when a filter hides it or its arguments change: keep what was typed
  // (edited arguments only while the arguments they were edited from are current).
  const draft = drafts.get(req.call_id);
  if (draft) {
    reason.value = draft.reason;
    always.checked = draft.always;
    if (draft.digest === req.digest && draft.editor !== original) {
      editor.value = draft.editor;
      approveBtn.textContent = "Approve edited";
    }
  }
  const keep = () => drafts.set(req.call_id, { reason: reason.value, always: always.checked,
    editor: editor.value, digest: req.digest });
  for (const input of [editor, reason, always]) input.addEventListener("input", keep);
  always.addEventListener("change", keep);
  const state = { node: null, digest: req.digest, busy: false };

  async function decide(kind) {
    error.hidden = true;
    let body;
    if (kind === "approve") {
      body = { digest: req.digest, always: always.checked };
      if (editor.value.trim() !== original.trim()) {
        try { JSON.parse(editor.value); }
        catch (e) { error.textContent = "Arguments are not valid JSON: " + e.message; error.hidden = false; return; }
        // sent as typed: through JSON.parse a big integer would run as another number
        body = new RawJson(`{"digest":${JSON.stringify(req.digest)},"always":${always.checked},`
          + `"arguments":${editor.value}}`);
      }
    } else {
      body = { reason: reason.value.trim(), always: always.checked };
    }
    state.busy = true;
    approveBtn.disabled = denyBtn.disabled = true;
    try {
      const result = await api(`v1/approvals/${encodeURIComponent(req.call_id)}/${kind}`, body);
      toast(`${kind === "approve" ? "Approved" : "Denied"} ${req.name} (${shortId(req.call_id)}) → ${result.status}`);
      cards.delete(req.call_id);
      drafts.delete(req.call_id);
      expanded.delete(req.call_id);
      state.node.remove();
      const row = approvalRows.get(req.call_id);
      if (row) { row.row.remove(); approvalRows.delete(req.call_id); }
      refresh();
    } catch (e) {
      error.textContent = `${e.code}: ${e.message}`;
      error.hidden = false;
      approveBtn.disabled = denyBtn.disabled = false;
      state.busy = false;
    }
  }
  approveBtn.addEventListener("click", () => decide("approve"));
  denyBtn.addEventListener("click", () => decide("deny"));
  reason.addEventListener("keydown", e => { if (e.key === "Enter") decide("deny"); });

  const deadline = el("span", { class: "meta", "data-deadline": req.deadline || "" }, left(req.deadline));
  const notes = Object.entries(req.approval_metadata || {}).map(([k, v]) =>
    el("p", { class: "note" }, `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`));
  const diff = req.diff && req.diff.diff_output ? [
    el("div", { class: "section-label" }, "Diff ", req.diff.change_summary ? `(${req.diff.change_summary})` : ""),
    diffView(req.diff)] : [];
  const preview = req.preview !== null && req.preview !== undefined
    ? [el("div", { class: "section-label" }, "Preview"), el("pre", { "data-testid": "preview" }, req.preview_text ?? pretty(req.preview))]
    : [];
  const article = el("article", { class: "approval", "data-risk": req.risk, "data-testid": "approval",
    "data-call-id": req.call_id },
    el("div", { class: "head" },
      el("strong", {}, req.name), riskBadge(req.risk), badge(req.status),
      el("span", { class: "meta" }, "run ", runLink(req.run_id)),
      el("span", { class: "meta" }, callLink(req.call_id)),
      req.submitter ? el("span", { class: "meta" }, "by " + req.submitter) : null,
      deadline),
    notes,
    el("div", { class: "section-label" }, "Arguments"),
    el("pre", { "data-testid": "arguments" }, original),
    req.original_arguments ? [el("div", { class: "section-label" }, "Original arguments"),
      el("pre", {}, req.original_arguments_text ?? pretty(req.original_arguments))] : [],
    preview,
    req.preview_error ? el("p", { class: "err" }, "preview failed: " + req.preview_error) : null,
    diff,
    el("details", { class: "edit" }, el("summary", {}, "Edit arguments before approving"), editor),
    el("div", { class: "actions" }, approveBtn, reason, denyBtn,
      el("label", { title: "Apply this decision to every later call of this tool in this run" },
        always, "always in this run")),
    el("div", { class: "meta mono digest", title: req.digest }, "digest " + req.digest.slice(0, 16) + "…"),
    error);
  state.node = el("tr", { class: "approval-detail", "data-detail-for": req.call_id },
    el("td", { colspan: 6 }, article));
  state.deadline = deadline;
  return state;
}

async function loadApprovals(f) {
  const age = Number($("#approvals-age").value || 0);
  const now = Date.now() / 1000;
  const since = age > 0 ? now - age : null;
  const until = age < 0 ? now + age : null;
  const key = JSON.stringify([f.run_id, f.tool, f.risk, age]);
  if (key !== approvalsKey) { approvalsKey = key; approvalCursors = [""]; }
  const cursor = approvalCursors[approvalCursors.length - 1];
  const { data, headers } = await apiRaw("v1/approvals" + query({ run_id: f.run_id, tool: f.tool, risk: f.risk,
    limit: APPROVALS_PAGE, cursor, since: since && since.toFixed(3), until: until && until.toFixed(3) }));
  const offset = (approvalCursors.length - 1) * APPROVALS_PAGE;
  const total = headers.get("X-Total-Count");  // absent where counting would read every match
  if (total !== null || headers.get("X-Next-Cursor") || data.length <= APPROVALS_PAGE) {
    return { items: data.slice(0, APPROVALS_PAGE), total: total === null ? null : Number(total), offset,
      next: headers.get("X-Next-Cursor") };
  }
  // An API that does not page answers with every pending call: show one page of it all the same.
  const inRange = r => (since === null || r.created_at >= since) && (until === null || r.created_at <= until);
  const all = data.filter(inRange);
  const end = offset + APPROVALS_PAGE;
  return { items: all.slice(offset, end), total: all.length, offset, next: end < all.length ? "at:" + end : null };
}

function renderApprovalsPager(pending, searching) {
  const shown = shownApprovals.length;
  const known = pending.total !== null;
  const count = known ? pending.total : pending.offset + pending.items.length;
  $("#approvals-count").textContent = count + (known || !pending.next ? "" : "+");
  const range = pending.offset ? `${pending.offset + 1}–${pending.offset + shown}` : String(shown);
  $("#approvals-info").textContent = count ? `showing ${range} of ${known || !pending.next ? count : "more"}`
    + (searching ? " (search: this page)" : "") : "";
  $("#approvals-prev").disabled = approvalCursors.length <= 1;
  $("#approvals-next").disabled = !pending.next;
  $("#approvals-next").dataset.cursor = pending.next || "";
  $(".pager", $("#approvals-panel")).hidden = !pending.offset && !pending.next;
  $("#approvals-empty").hidden = shown > 0;
  $("#approvals").hidden = shown === 0;
  if (!shown && approvalCursors.length > 1) { approvalCursors = [""]; }  // the page emptied: back to the first
}

function ago(ts) {
  const s = Math.max(0, Date.now() / 1000 - ts);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor(s / 60) % 60}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor(s / 3600) % 24}h`;
}
// A parked call's arguments on one line, from the API's exact text (JSON.parse would round
// big integers): its line breaks and indentation are JSON's own, never inside a string.
function argsSummary(req) {
  const text = req.arguments_text !== undefined
    ? req.arguments_text.replace(/\n\s*/g, " ")
    : JSON.stringify(req.arguments || {});
  return text.length > 200 ? text.slice(0, 200) + "…" : text;
}
function toggleApproval(id) {
  if (expanded.has(id)) expanded.delete(id); else expanded.add(id);
  renderApprovals(shownApprovals);
}
function approvalRow(req) {
  const toggle = el("button", { type: "button", class: "expand", "aria-expanded": "false",
    "data-testid": "approval-expand", onclick: () => toggleApproval(req.call_id) }, "Review");
  const age = el("td", { class: "num age", "data-label": "Age" });
  const row = el("tr", { "data-testid": "approval-row", "data-call-id": req.call_id, "data-risk": req.risk },
    el("td", { class: "tool", "data-label": "Tool" }, el("strong", {}, req.name)),
    el("td", { class: "run", "data-label": "Run" }, runLink(req.run_id)),
    el("td", { "data-label": "Risk" }, riskBadge(req.risk)),
    age,
    el("td", { class: "args mono", "data-label": "Arguments", title: argsSummary(req) },
      argsSummary(req)),
    el("td", { class: "act" }, toggle));
  row.addEventListener("click", e => { if (!e.target.closest("a, button")) toggleApproval(req.call_id); });
  return { row, toggle, age, digest: req.digest };
}

function renderApprovals(pending) {
  shownApprovals = pending;
  const live = new Set(pending.map(p => p.call_id));
  for (const [id, card] of cards) {
    if ((!live.has(id) || !expanded.has(id)) && !card.busy) { card.node.remove(); cards.delete(id); }
  }
  for (const [id, r] of approvalRows) {
    if (!live.has(id)) { r.row.remove(); approvalRows.delete(id); }
  }
  const body = $("#approvals tbody");
  for (const req of pending) {
    let r = approvalRows.get(req.call_id);
    if (r && r.digest !== req.digest) { r.row.remove(); r = null; }
    if (!r) { r = approvalRow(req); approvalRows.set(req.call_id, r); }
    r.age.textContent = ago(req.created_at);
    r.age.title = "created " + clock(req.created_at) + " · " + left(req.deadline);
    const open = expanded.has(req.call_id);
    r.toggle.textContent = open ? "Hide" : "Review";
    r.toggle.setAttribute("aria-expanded", String(open));
    r.row.classList.toggle("open", open);
    body.append(r.row);  // keeps the API's order without rebuilding inputs
    if (!open) continue;
    let card = cards.get(req.call_id);
    if (card && card.digest !== req.digest && !card.busy) { card.node.remove(); card = null; }
    if (!card) { card = approvalCard(req); cards.set(req.call_id, card); }
    card.deadline.textContent = left(req.deadline);
    body.append(card.node);
  }
}

// -- runs -----------------------------------------------------------------------------
async function loadRuns() {
  runsAt = Date.now();
  let runs;
  try {
    runs = await api("v1/runs" + query({ limit: 20 }));
  } catch (e) {
    if (e.status === 404) { runsChecked = true; $("#runs-panel").hidden = true; }
    throw e;
  }
  runsChecked = true;
  if (!runsSupported) { runsSupported = true; callsDrawn = ""; }  // the calls table gets its Retry buttons
  $("#runs-panel").hidden = false;
  $("#runs-count").textContent = runs.length;
  $("#runs-empty").hidden = runs.length > 0;
  $("#runs").hidden = runs.length === 0;
  const states = s => Object.entries(s || {}).map(([st, n]) => el("span", { class: "badge s-" + st,
    "data-state": st }, `${n} ${st.replace("_", " ")}`));
  $("#runs tbody").replaceChildren(...runs.map(r => {
    const parked = (r.statuses || {}).awaiting_approval || 0;
    return el("tr", { "data-testid": "run-row", "data-run-id": r.run_id },
      el("td", { class: "run", "data-label": "Run" }, runLink(r.run_id)),
      el("td", { class: "mono", "data-label": "Tenant" }, r.tenant),
      el("td", { "data-label": "Owner" }, r.owner || ""),
      el("td", { class: "mono", "data-label": "Last dispatch" }, clock(r.last_dispatch_at)),
      el("td", { class: "num", "data-label": "Calls" }, r.calls),
      el("td", { class: "states", "data-label": "States" }, states(r.statuses),
        r.counted < r.calls ? el("span", { class: "muted", "data-testid": "run-counted",
          title: "states are counted over the run's newest calls only" },
          ` of the newest ${r.counted}`) : null),
      el("td", {}, parked ? el("button", { type: "button", class: "approve", "data-testid": "approve-run",
        onclick: () => approveRun(r.run_id) },
        `Approve ${parked}${r.counted < r.calls ? "+" : ""}`) : null));
  }));
}

// -- run view -----------------------------------------------------------------------------
function streamState(text, cls) {
  $("#stream-state").textContent = text;
  $("#stream-state").className = "badge " + cls;
}
function openRun(runId) {
  closeRun();
  closeCall();
  run = { id: runId, seen: new Set(), names: new Map(), source: null, last: "" };
  history.replaceState(null, "", "#" + new URLSearchParams({ run: runId }));
  $("#run-title").textContent = runId;
  $("#timeline").replaceChildren();
  $("#run-calls tbody").replaceChildren();
  $("#run-panel").hidden = false;
  $("#run-panel").scrollIntoView({ block: "nearest" });
  streamState("connecting", "s-queued");
  const current = run;
  refreshRunCalls().catch(() => {}).then(() => { if (run === current) stream(runId); });
}
async function stream(runId) {
  // EventSource cannot send the token in a header, and a token in a URL ends up in logs:
  // trade it for a short-lived ticket that opens this run's stream only.
  const current = run;
  let ticket;
  try {
    ({ ticket } = await api(`v1/runs/${encodeURIComponent(runId)}/events/ticket`, {}));
  } catch (e) {
    if (run !== current) return;
    if (e.status === 401) { showLogin("The token is no longer accepted."); return; }
    streamState("reconnecting", "s-failed");
    setTimeout(() => { if (run === current) stream(runId); }, 2000);
    return;
  }
  if (run !== current) return;
  const params = { ticket, after: current.last };
  const source = new EventSource(`v1/runs/${encodeURIComponent(runId)}/events${query(params)}`);
  source.addEventListener("open", () => streamState("streaming", "s-succeeded"));
  source.addEventListener("error", () => {
    streamState("reconnecting", "s-failed");
    // Refused outright (e.g. the ticket expired before a reconnect): new ticket, resume.
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(() => { if (run === current && current.source === source) stream(runId); }, 1000);
    }
  });
  for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
  source.addEventListener("message", onEvent);
  current.source = source;
}
function closeRun(keepRoute) {
  if (run && run.source) run.source.close();
  run = null;
  $("#run-panel").hidden = true;
  if (!keepRoute && location.hash.startsWith("#run=")) history.replaceState(null, "", location.pathname + location.search);
}
$("#run-close").addEventListener("click", () => closeRun());
$("#run-approve-all").addEventListener("click", () => { if (run) approveRun(run.id); });

async function refreshRunCalls() {
  const current = run;
  if (!current) return;
  const { calls } = await api("v1/overview" + query({ run_id: current.id, limit: 1000 }));
  if (run !== current) return;
  calls.reverse();  // oldest first, as dispatched
  $("#run-approve-all").hidden = !runsSupported || !calls.some(c => c.status === "awaiting_approval");
  for (const c of calls) current.names.set(c.call_id, c.name);
  for (const node of document.querySelectorAll("#timeline strong[data-name-for]")) {
    if (!node.textContent) node.textContent = current.names.get(node.dataset.nameFor) || "";
  }
  $("#run-calls tbody").replaceChildren(...calls.map(c => el("tr", { "data-call-id": c.call_id },
    el("td", {}, c.name), el("td", {}, riskBadge(c.risk)), el("td", {}, badge(c.status)),
    el("td", { class: "num" }, duration(c.duration_ms)),
    el("td", {}, callLink(c.call_id)))));
}

function summary(type, data) {
  const d = Object.assign({}, data);
  delete d.status;
  if (type === "call.progress" && "data" in d) return pretty(d.data).replace(/\s+/g, " ");
  const parts = [];
  if (d.by) parts.push("by " + d.by);
  if (d.reason) parts.push("reason: " + d.reason);
  else if (d.error) parts.push(d.error);
  if (d.duration_ms !== undefined) parts.push(duration(d.duration_ms));
  if (d.output !== undefined) parts.push("→ " + JSON.stringify(d.output));
  // (the edit itself is the call's arguments, shown from the API's exact text)
  if (d.edited_arguments) parts.push("arguments edited");
  if (d.note) parts.push("note: " + d.note);
  if (d.attempt !== undefined) parts.push("attempt " + d.attempt);
  const text = parts.join(" · ");
  return text.length > 300 ? text.slice(0, 300) + "…" : text;
}
function onEvent(message) {
  if (!run || run.seen.has(message.lastEventId)) return;
  run.seen.add(message.lastEventId);
  run.last = message.lastEventId;
  let event;
  try { event = JSON.parse(message.data); } catch (e) { return; }
  const state = EVENT_STATE[event.type] || "queued";
  if (event.data && typeof event.data.name === "string") run.names.set(event.call_id, event.data.name);
  const tool = run.names.get(event.call_id) || "";
  const detail = summary(event.type, event.data || {});
  $("#timeline").append(el("li", { class: "t-" + state, "data-type": event.type, "data-testid": "event" },
    el("span", { class: "when mono" }, clock(event.ts)),
    el("span", { class: "badge s-" + state }, event.type.replace("call.", "")), " ",
    el("strong", { "data-name-for": event.call_id }, tool), " ",
    callLink(event.call_id),
    detail ? el("span", { class: "detail" }, detail) : null));
  const timeline = $("#timeline");
  timeline.scrollTop = timeline.scrollHeight;
  if (!run.names.has(event.call_id) || EVENT_STATE[event.type] !== "running") refreshRunCalls().catch(() => {});
}

$("#call-close").addEventListener("click", () => closeCall());

if (token) start(); else showLogin();

// -- health: why something is red (/healthz's reasons and fixes), workers lost -----------
// Its own timer and block, apart from the listings: /healthz is open and cheap.
async function refreshHealth() {
  const box = document.getElementById("health");
  if (box && !document.getElementById("app").hidden) {
    try {
      const body = await (await fetch("healthz", { cache: "no-store" })).json();
      const problems = (body.checks || []).filter(c => !c.ok);
      box.replaceChildren(...problems.map(c => el("p",
        { class: c.code === "worker_lost" ? "health-item lost" : "health-item",
          "data-testid": "health-" + c.code },
        el("strong", {}, c.code === "worker_lost" ? "worker lost" : c.code.replace(/_/g, " ")),
        " " + c.reason + ". Fix: " + c.fix)));
      box.hidden = problems.length === 0;
    } catch (e) { /* the connection badge already says the API does not answer */ }
  }
  setTimeout(refreshHealth, 5000);
}
refreshHealth();
