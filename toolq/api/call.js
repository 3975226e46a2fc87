"use strict";
// The call page (#/calls/<id>): one call's record, arguments as approvers see them (secrets
// masked), preview, diff, output or error in full, its own timeline, cancel and undo.
// Loaded before dashboard.js and only declares functions: the helpers and state they use
// (el, api, call, ...) are dashboard.js's, looked up when the functions run.
function openCall(id) {
  closeCall();
  closeRun();
  call = { id, final: false, events: 0 };
  if (location.hash !== "#/calls/" + encodeURIComponent(id)) {
    history.replaceState(null, "", "#/calls/" + encodeURIComponent(id));
  }
  $("#call-title").textContent = id;
  for (const sel of ["#call-meta", "#call-body", "#call-timeline", "#call-state"]) $(sel).replaceChildren();
  $("#call-error").hidden = true;
  $("#call-cancel").hidden = $("#call-undo").hidden = true;
  $("#call-panel").hidden = false;
  $("#call-panel").scrollIntoView({ block: "start" });
  refreshCall().catch(() => {});
}
function closeCall(keepRoute) {
  call = null;
  $("#call-panel").hidden = true;
  if (!keepRoute && location.hash.startsWith("#/calls/")) history.replaceState(null, "", location.pathname + location.search);
}

function section(label, ...content) {
  return [el("div", { class: "section-label" }, label), ...content];
}
async function refreshCall() {
  const current = call;
  if (!current || current.final) return;
  let result, view, actions;
  try {
    [result, view, actions] = await Promise.all([
      api(`v1/calls/${encodeURIComponent(current.id)}`),
      api(`v1/approvals/${encodeURIComponent(current.id)}`),
      api(`v1/calls/${encodeURIComponent(current.id)}/actions`)]);
  } catch (e) {
    if (call !== current) return;
    $("#call-error").textContent = `${e.code}: ${e.message}`;
    $("#call-error").hidden = false;
    return;
  }
  const events = await api(`v1/runs/${encodeURIComponent(result.run_id || view.run_id)}/events?follow=false`)
    .catch(() => []);
  if (call !== current) return;
  // A final call that can be undone stays live: its undo events are still to come.
  current.final = FINAL.has(result.status) && !actions.undo && actions.undo_state !== "requested";
  $("#call-error").hidden = true;
  $("#call-state").replaceChildren(badge(result.status), " ", riskBadge(view.risk));
  const meta = [["Tool", result.name], ["Run", runLink(view.run_id)], ["Call id", el("code", {}, result.call_id)],
    ["Provider id", el("code", {}, result.tool_call_id)], ["Created", clock(view.created_at)],
    ["Submitter", view.submitter], ["Decided by", view.decided_by], ["Duration", duration(result.duration_ms)],
    ["Attempts", result.attempts || null],
    ["Deadline", view.status === "awaiting_approval" && view.deadline ? clock(view.deadline) : null]];
  $("#call-meta").replaceChildren(...meta.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v))));
  const body = [
    section("Arguments (secrets masked)", el("pre", { "data-testid": "call-arguments" }, view.arguments_text || pretty(view.arguments))),
    view.original_arguments ? section("Original arguments", el("pre", {}, view.original_arguments_text ?? pretty(view.original_arguments))) : [],
    view.preview !== null && view.preview !== undefined
      ? section("Preview", el("pre", { "data-testid": "call-preview" }, view.preview_text ?? pretty(view.preview))) : [],
    view.preview_error ? el("p", { class: "err" }, "preview failed: " + view.preview_error) : null,
    view.diff && view.diff.diff_output ? section("Diff", diffView(view.diff)) : [],
    result.error ? section("Error" + (result.error_type ? ` (${result.error_type})` : ""),
      el("pre", { class: "error-full", "data-testid": "call-error-text" }, result.error)) : [],
    result.output !== undefined && result.output !== null
      ? section("Output", el("pre", { class: "output", "data-testid": "call-output" }, pretty(result.output))) : [],
  ];
  $("#call-body").replaceChildren(...body.flat().filter(Boolean));
  const mine = events.filter(e => e.call_id === current.id);
  $("#call-timeline").replaceChildren(...mine.map(e => {
    const state = EVENT_STATE[e.type] || "queued";
    const detail = summary(e.type, e.data || {});
    return el("li", { class: "t-" + state, "data-type": e.type, "data-testid": "call-event" },
      el("span", { class: "when mono" }, clock(e.ts)),
      el("span", { class: "badge s-" + state }, e.type.replace("call.", "")),
      detail ? el("span", { class: "detail" }, detail) : null);
  }));
  $("#call-cancel").hidden = !actions.cancel;
  $("#call-undo").hidden = !actions.undo;
  $("#call-cancel").onclick = () => cancelCall(current.id, result.name);
  $("#call-retry").hidden = !runsSupported || !RETRYABLE.has(result.status) || Boolean(result.retried_by);
  $("#call-retry").onclick = () => retryCall(current.id, result.name);
  $("#call-undo").onclick = () => undoCall(current, result.name);
}
// The undo handler runs on the undo data shown here and no other: its digest goes back with
// the request (an approver's signed undo of a gated tool covers exactly that data). The data
// is shown whole, as the API renders it (undo_text: what the handler gets), or not at all.
const UNDO_SHOWN_CHARS = 4000;
async function undoCall(current, name) {
  const url = `v1/calls/${encodeURIComponent(current.id)}/undo`;
  let kept;
  try {
    kept = await api(url);
  } catch (e) {
    toast(`${e.code}: ${e.message}`, true);
    return;
  }
  const shown = kept.undo_text;
  if (shown.length > UNDO_SHOWN_CHARS) {
    toast(`The undo data of ${shortId(current.id)} is ${shown.length} characters, too long to review `
      + `here: review it with GET /v1/calls/{id}/undo and undo with its undo_digest`, true);
    return;
  }
  if (!confirm(`Undo ${name} ${shortId(current.id)}? Its undo handler runs with:\n\n${shown}`)) return;
  $("#call-undo").disabled = true;
  try {
    const event = await api(url, { undo_digest: kept.undo_digest });
    if (event.status === "awaiting_approvals") {  // a DANGEROUS tool's quorum: 202, not run yet
      toast(`Undo ${name} (${shortId(current.id)}): approved by ${event.approvers.join(", ")}, `
        + `${event.approvers.length} of ${event.required}; another approver must ask for it too`);
    } else {
      toast(`Undo ${name} (${shortId(current.id)}) → ${event.type.replace("call.", "")}`);
    }
  } catch (e) {
    toast(`${e.code}: ${e.message}`, true);
  }
  $("#call-undo").disabled = false;
  current.final = false;
  refreshCall().catch(() => {});
}
