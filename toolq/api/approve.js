"use strict";
// The approval page (/approve/<call id>): one call, on a phone. It decides with the reader's
// own credential: the dashboard's API token (this browser's sign-in), or a decision token
// given in the link's fragment (#token=tqd_...), which decides this one call once.
const $ = (sel) => document.querySelector(sel);
const callId = decodeURIComponent(location.pathname.split("/").filter(Boolean).pop() || "");
const base = new URL("..", location.href);
const POLL_MS = 3000;
const HOLD_MS = 5000;  // Approve waits this long after the call changed under the reader
let FINAL = null;  // the final states, as the API names them (GET /v1/overview)
let token = localStorage.getItem("toolq.token") || "";
let decisionToken = "";
let view = null;
let timer = null;
let held = null;
let holding = false;

function takeFragmentToken() {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given && given.startsWith("tqd_")) {
    // Kept for this tab only, and off the address bar (screenshots, shared screens).
    sessionStorage.setItem("toolq.decision." + callId, given);
    history.replaceState(null, "", location.pathname + location.search);
  }
  decisionToken = sessionStorage.getItem("toolq.decision." + callId) || "";
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}
function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}
function clock(ts) {
  return ts ? new Date(ts * 1000).toLocaleString() : "";
}
function left(deadline) {
  const s = Math.max(0, Math.round(deadline - Date.now() / 1000));
  if (s >= 3600) return `deadline in ${Math.floor(s / 3600)}h ${Math.floor(s / 60) % 60}m`;
  return `deadline in ${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
}

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}
async function api(path, body, credential) {
  const init = { headers: { Authorization: "Bearer " + (credential || token) } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(new URL(path, base), init);
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(res.status, err.code || "http_" + res.status, err.message || res.statusText);
  }
  return data;
}
const callPath = () => encodeURIComponent(callId);

function showLogin(message) {
  clearTimeout(timer);
  $("#call").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = message || "";
}
$("#login").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("#token").value.trim();
  localStorage.setItem("toolq.token", token);
  $("#login").hidden = true;
  load();
});

async function read() {
  if (decisionToken) {
    try {
      return { view: await api(`v1/decisions/${callPath()}`, undefined, decisionToken), events: [] };
    } catch (e) {
      if (e.status !== 401) throw e;
      // spent or expired: the reader's own sign-in, if any, still works
      sessionStorage.removeItem("toolq.decision." + callId);
      decisionToken = "";
      if (!token) throw e;
    }
  }
  if (FINAL === null) FINAL = new Set((await api("v1/overview?limit=1")).final_states);
  const got = await api(`v1/approvals/${callPath()}`);
  const events = await api(`v1/runs/${encodeURIComponent(got.run_id)}/events?follow=false`)
    .catch(() => []);
  return { view: got, events: events.filter((e) => e.call_id === callId) };
}

async function load() {
  clearTimeout(timer);
  if (!decisionToken && !token) { showLogin(); return; }
  let got;
  try {
    got = await read();
  } catch (e) {
    if (e.status === 401) { showLogin(decisionToken ? e.message : "That token was not accepted."); return; }
    $("#error").textContent = `${e.code}: ${e.message}`;
    $("#error").hidden = false;
    timer = setTimeout(load, POLL_MS);
    return;
  }
  $("#error").hidden = true;
  render(got.view, got.events);
  // A decision token reads only while there is something for it to decide.
  const live = decisionToken ? got.view.status === "awaiting_approval" : !FINAL.has(got.view.status);
  if (live) timer = setTimeout(load, POLL_MS);
}

function render(v, events) {
  // A call rewritten between two reads (by anyone who can write to Redis) must not be
  // approved in the instant after it changed: say so and hold Approve for a while, so the
  // person reads what would now be approved (the digest sent is the one shown now).
  if (view && view.call_id === v.call_id && view.digest !== v.digest && v.status === "awaiting_approval") {
    $("#changed").hidden = false;
    $("#approve").disabled = holding = true;
    clearTimeout(held);
    held = setTimeout(() => { $("#approve").disabled = holding = false; }, HOLD_MS);
  }
  view = v;
  $("#login").hidden = true;
  $("#call").hidden = false;
  $("#who").textContent = decisionToken ? "one-time link" : "signed in";
  $("#tool").textContent = v.name;
  $("#risk").textContent = v.risk;
  $("#risk").className = "badge r-" + v.risk;
  $("#status").textContent = v.status.replace("_", " ");
  $("#status").className = "badge s-" + v.status;
  $("#deadline").textContent = v.status === "awaiting_approval" && v.deadline ? left(v.deadline) : "";
  const facts = [["Run", v.run_id], ["Submitter", v.submitter], ["Tenant", v.tenant],
    ["Created", clock(v.created_at)], ["Call", v.call_id],
    ["Approved by", (v.approvals || []).join(", ")], ["Decided by", v.decided_by]];
  const wide = new Set(["Run", "Call", "Created"]);
  $("#facts").replaceChildren(...facts.filter(([, x]) => x).map(([k, x]) =>
    el("div", wide.has(k) ? { class: "wide" } : {}, el("dt", {}, k), el("dd", {}, x))));
  const body = [
    el("h2", {}, "Arguments ", el("span", { class: "muted" }, "(secrets masked)")),
    el("pre", { "data-testid": "arguments" }, v.arguments_text || pretty(v.arguments)),
  ];
  if (v.original_arguments) body.push(el("h2", {}, "Original arguments"), el("pre", {}, v.original_arguments_text ?? pretty(v.original_arguments)));
  if (v.preview !== null && v.preview !== undefined) {
    body.push(el("h2", {}, "Preview"), el("pre", { "data-testid": "preview" }, v.preview_text ?? pretty(v.preview)));
  }
  if (v.diff && v.diff.diff_output) {
    const lines = v.diff.diff_output.split("\n").map((line) => el("span", {
      class: line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "",
    }, line + "\n"));
    body.push(el("h2", {}, "Diff"), el("pre", { class: "diff", "data-testid": "diff" }, lines));
  }
  $("#body").replaceChildren(...body);
  $("#history").replaceChildren(...events.map((e) => el("li", { "data-testid": "event" },
    el("span", { class: "muted" }, clock(e.ts)), " ", e.type.replace("call.", ""),
    e.data && e.data.by ? ` by ${e.data.by}` : "",
    e.data && e.data.reason ? `: ${e.data.reason}` : "")));
  const waiting = v.status === "awaiting_approval";
  $("#decide").hidden = !waiting;
  const outcome = waiting ? "" : v.decided_by ? `${v.status.replace("_", " ")} · decided by ${v.decided_by}`
    : v.status.replace("_", " ");
  $("#outcome").textContent = outcome;
  $("#outcome").hidden = waiting;
}

async function decide(kind) {
  const reason = $("#reason");
  if (kind === "deny" && reason.hidden) {
    reason.hidden = $("#reason-label").hidden = false;
    $("#deny").textContent = "Deny with this reason";
    reason.focus();
    return;
  }
  const body = kind === "approve" ? { digest: view.digest } : { reason: reason.value.trim() };
  const path = decisionToken ? `v1/decisions/${callPath()}/${kind}` : `v1/approvals/${callPath()}/${kind}`;
  $("#approve").disabled = $("#deny").disabled = true;
  $("#decide-error").textContent = "";
  try {
    await api(path, body, decisionToken || token);
    if (decisionToken) sessionStorage.removeItem("toolq.decision." + callId);
    decisionToken = "";
  } catch (e) {
    $("#decide-error").textContent = `${e.code}: ${e.message}`;
  }
  $("#deny").disabled = false;
  $("#approve").disabled = holding;
  if (decisionToken === "" && !token) {
    // a spent one-time link shows what it did, then nothing more to read with
    $("#decide").hidden = true;
    $("#outcome").textContent = kind === "approve" ? "approved" : "denied";
    $("#outcome").hidden = false;
    return;
  }
  load();
}
$("#approve").addEventListener("click", () => decide("approve"));
$("#deny").addEventListener("click", () => decide("deny"));

takeFragmentToken();
load();
