"use strict";
// The "Unknown outcome" panel: calls lost with their worker mid-call whose tool is not
// idempotent. A person checks what happened and resolves each one: it took effect
// (succeeded, with an optional result), it did not (failed), or run it again. Loaded after
// dashboard.js, whose helpers (api, el, $, toast, runLink, callLink, riskBadge, argsSummary,
// ago) it uses; it polls on its own while the dashboard is shown.
const unknownRows = new Map();  // call_id -> {row, note, result, buttons}: kept so typing survives a poll

function unknownRow(req) {
  const note = el("input", { class: "reason", placeholder: "note (audited; the model reads it on failed)",
    "aria-label": "Resolution note" });
  const result = el("input", { class: "reason", placeholder: "result text (succeeded)",
    "aria-label": "Result text" });
  const error = el("p", { class: "err", role: "alert", hidden: true });
  const choices = [["succeeded", "It took effect", "approve"], ["failed", "It did not", "deny"],
    ["rerun", "Run again", ""]];
  const buttons = choices.map(([outcome, label, cls]) => {
    const button = el("button", { type: "button", class: cls, "data-outcome": outcome }, label);
    button.addEventListener("click", () => resolveUnknown(req, outcome));
    return button;
  });
  const entry = { note, result, error, buttons };
  entry.row = el("tr", { "data-testid": "unknown-row", "data-call-id": req.call_id, "data-risk": req.risk },
    el("td", { class: "tool", "data-label": "Tool" }, el("strong", {}, req.name), " ", callLink(req.call_id)),
    el("td", { class: "run", "data-label": "Run" }, runLink(req.run_id)),
    el("td", { "data-label": "Risk" }, riskBadge(req.risk)),
    el("td", { class: "args mono", "data-label": "Arguments", title: argsSummary(req) },
      argsSummary(req)),
    el("td", { class: "act" }, el("div", { class: "actions" }, note, result, ...buttons), error));
  return entry;
}

async function resolveUnknown(req, outcome) {
  const entry = unknownRows.get(req.call_id);
  if (!entry) return;
  if (outcome === "rerun" && !confirm(`Run ${req.name} (${shortId(req.call_id)}) again?`)) return;
  const body = { outcome };
  if (entry.note.value.trim()) body.note = entry.note.value.trim();
  if (outcome === "succeeded" && entry.result.value.trim()) body.result = entry.result.value.trim();
  entry.error.hidden = true;
  for (const b of entry.buttons) b.disabled = true;
  try {
    const done = await api(`v1/calls/${encodeURIComponent(req.call_id)}/resolve`, body);
    toast(`Resolved ${req.name} (${shortId(req.call_id)}) → ${done.status}`);
    entry.row.remove();
    unknownRows.delete(req.call_id);
    loadUnknown();
  } catch (e) {
    entry.error.textContent = `${e.code}: ${e.message}`;
    entry.error.hidden = false;
    for (const b of entry.buttons) b.disabled = false;
  }
}

function renderUnknown(found) {
  const live = new Set(found.map(r => r.call_id));
  for (const [id, entry] of unknownRows) {
    if (!live.has(id)) { entry.row.remove(); unknownRows.delete(id); }
  }
  const body = $("#unknown tbody");
  for (const req of found) {
    let entry = unknownRows.get(req.call_id);
    if (!entry) { entry = unknownRow(req); unknownRows.set(req.call_id, entry); }
    body.append(entry.row);  // keeps the API's order (longest lost first) without rebuilding inputs
  }
  $("#unknown-count").textContent = String(found.length);
  $("#unknown-panel").hidden = found.length === 0;
}

async function loadUnknown() {
  if ($("#app").hidden) return;
  try {
    renderUnknown(await api("v1/unknown"));
  } catch (e) {
    // An API without the route (older) or a passing outage: the panel keeps what it showed.
  }
}

setInterval(loadUnknown, REFRESH_MS);
