"""Check a chaos run: read the history, the execution logs and the Redis dump; report.

    python -m bench.chaos.checker DIR        # prints the report, writes DIR/report.json

Definitions (one "call" is one provider call id in one run):

- submitted: calls the clients tried to dispatch (retries of a dispatch count once).
- accepted: calls with a call id: the dispatch returned it, or the dispatch failed from the
  client's side but Redis holds the record (counted apart as accepted_after_error).
- rejected: submitted calls whose dispatch gave up, with no record in Redis (by reason).
- completed: accepted calls in a final state at the end (by final status and error type).
  A non-idempotent call lost with its worker is ``unknown`` until the load's on-call
  (``run_approver``) resolves it ``failed``; one still ``unknown`` at the end is LOST.
- LOST: accepted calls with no final state by the deadline (the end of the drain), or
  whose record vanished.
- DUPLICATES: non-idempotent calls executed more than once. Idempotent re-runs (allowed
  after a worker loss) are counted apart.
- OVERLAPS: two executions of one call overlapping in time. An execution without an end
  entry ends when its process group was SIGKILLed (the first kill of its group after it
  started, from the fault log); if its group was never killed, at the end of the run, which
  can only over-count.
- PHANTOMS: executions of calls that were never accepted.
- with a history store (``--history``), after the final drain of the archive stream:
  HISTORY_LOST: a call final in the Redis dump, or seen final by a client, with no row in
  SQL; HISTORY_DUPLICATES: more than one row for one call id; HISTORY_STATUS: a row whose
  status differs from Redis's final one (or from the one a client saw); HISTORY_PHANTOMS:
  rows for calls Redis does not hold. Events per call in SQL against the run streams are
  reported apart (missing, extra).
- also checked: approval-gated calls executed without a winning approval (UNAPPROVED),
  more than one winning decision on a call (DOUBLE_DECISIONS), two records for one
  provider call id (DOUBLE_ACCEPTS), a final state seen by a client that later differs
  (FINAL_CHANGED).

Exit status 1 when any of these is non-zero.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.chaos.app import GATED_TOOLS, IDEMPOTENT_TOOLS, THROTTLED_CAP, THROTTLED_TOOL
from bench.chaos.history import DUMP, EXECUTIONS, HISTORY, REPORT, read_jsonl
from bench.chaos.history_store import HISTORY_DUMP

FINAL = frozenset({"succeeded", "failed", "denied", "expired", "cancelled"})
KILLS = frozenset({"kill9", "archiver-kill9", "sigterm-escalated", "group-cleanup"})
INVARIANTS = (
    "lost", "duplicates", "overlaps", "phantoms",
    "unapproved", "double_decisions", "double_accepts", "final_changed",
)  # fmt: skip


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _latency(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": _pct(values, 0.50),
        "p99": _pct(values, 0.99),
        "max": round(max(values), 3) if values else None,
        "mean": round(statistics.fmean(values), 3) if values else None,
    }


def _executions(out: Path, dump: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """call id → execution id → {start, end, pid, pgid, tool, outcome}, from both copies."""
    entries = list(read_jsonl(out / EXECUTIONS))
    for items in dump["executions"].values():
        entries.extend(items)
    calls: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in entries:
        ex = calls[e["call_id"]].setdefault(
            e["exec"], {"pid": e["pid"], "pgid": e["pgid"], "tool": e["tool"]}
        )
        if e["ev"] == "start":
            ex["start"] = e["t"]
        else:
            ex["end"] = e["t"]
            ex["outcome"] = e.get("outcome")
    return calls


def check(out: Path) -> dict[str, Any]:
    """The report of the run in ``out`` (also written to ``out/report.json``)."""
    history = list(read_jsonl(out / HISTORY))
    dump = json.loads((out / DUMP).read_text())
    records: dict[str, dict[str, Any]] = dump["calls"]
    start = next((h for h in history if h["op"] == "start"), {})
    t0 = float(start.get("load_start") or (history[0]["time"] if history else 0))
    end_of_run = float(dump["dumped_at"])

    # -- submitted, accepted, rejected --------------------------------------------------------
    by_provider_id: dict[tuple[str, str], list[str]] = defaultdict(list)
    for call_id, rec in records.items():
        by_provider_id[(rec["run_id"], rec["tool_call_id"])].append(call_id)
    submitted: dict[tuple[str, str], str] = {}
    op_start: dict[tuple[str, str], float] = {}
    outcome: dict[str, dict[str, Any]] = {}  # run id → final dispatch entry
    dispatch_errors: Counter[str] = Counter()
    retried = 0
    for h in history:
        if h["op"] != "dispatch":
            continue
        for tcid, tool in zip(h["tool_call_ids"], h["tools"], strict=True):
            submitted.setdefault((h["run_id"], tcid), tool)
            op_start.setdefault((h["run_id"], tcid), h["op_start"])
        if h["outcome"] == "error":
            dispatch_errors[h["reason"]] += 1
        elif h["outcome"] in ("ok", "rejected"):
            outcome[h["run_id"]] = h
            retried += h["outcome"] == "ok" and h["attempt"] > 1
    accepted: dict[str, tuple[str, str]] = {}  # call id → (run id, provider id)
    accepted_after_error: list[str] = []
    rejected: Counter[str] = Counter()
    double_accepts = {f"{r}/{t}": ids for (r, t), ids in by_provider_id.items() if len(ids) > 1}
    mismatched = []
    for run_id, tcid in submitted:
        final = outcome.get(run_id)
        stored = by_provider_id.get((run_id, tcid), [])
        if final is not None and final["outcome"] == "ok":
            call_id = final["call_ids"][final["tool_call_ids"].index(tcid)]
            accepted[call_id] = (run_id, tcid)
            if stored and call_id not in stored:
                mismatched.append(call_id)
        elif stored:
            for call_id in stored:
                accepted[call_id] = (run_id, tcid)
                accepted_after_error.append(call_id)
        else:
            rejected[final["reason"] if final else "client_died"] += 1

    # -- final states, lost, final state changes ---------------------------------------------
    statuses: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    lost: list[dict[str, Any]] = []
    for call_id, (run_id, tcid) in accepted.items():
        rec = records.get(call_id)
        if rec is None:
            lost.append(
                {
                    "call_id": call_id,
                    "run_id": run_id,
                    "tool_call_id": tcid,
                    "status": None,
                    "why": "record vanished",
                }
            )
            continue
        if rec["status"] not in FINAL:
            held = [u for u in dump.get("unacked", []) if u[0] == call_id]
            lost.append(
                {
                    "call_id": call_id,
                    "run_id": run_id,
                    "tool": rec["name"],
                    "status": rec["status"],
                    "attempt": rec["attempt"],
                    "events": [
                        [e[0], round(e[1] - t0, 3)] for e in dump["events"].get(call_id, [])
                    ],
                    "only_in_kombu_unacked_since_s": (
                        round(held[0][2] - t0, 3) if held and held[0][2] else None
                    ),
                }
            )
            continue
        statuses[rec["status"]] += 1
        if rec["status"] == "failed":
            failures[rec.get("error_type") or "?"] += 1
    final_changed = []
    client_timeouts = 0
    for h in history:
        if h["op"] != "wait":
            continue
        client_timeouts += h["outcome"] != "ok"
        for res in h.get("results", []):
            rec = records.get(res["call_id"])
            if res["status"] in FINAL and (rec is None or rec["status"] != res["status"]):
                final_changed.append({**res, "now": rec and rec["status"]})

    # -- executions: duplicates, overlaps, phantoms, approvals ----------------------------
    executions = _executions(out, dump)
    kills: dict[int, list[float]] = defaultdict(list)
    for h in history:
        if h["op"] == "fault" and h["kind"] in KILLS:
            kills[h["pgid"]].append(h["time"])
    duplicates, overlaps, phantoms = [], [], []
    throttled_spans: list[tuple[float, float]] = []
    reruns: Counter[str] = Counter()
    unfinished_execs = 0
    for call_id, execs in executions.items():
        rec = records.get(call_id)
        if call_id not in accepted:
            phantoms.append({"call_id": call_id, "executions": list(execs.values())})
        idempotent = (rec or {}).get("idempotent") == "1" or any(
            e["tool"] in IDEMPOTENT_TOOLS for e in execs.values()
        )
        if len(execs) > 1:
            if idempotent:
                reruns[str(len(execs) - 1)] += 1
            else:
                duplicates.append(
                    {
                        "call_id": call_id,
                        "tool": (rec or {}).get("name"),
                        "executions": list(execs.values()),
                    }
                )
        spans = []
        for ex in execs.values():
            begin = ex.get("start", ex.get("end", end_of_run))
            if "end" in ex:
                finish, how = ex["end"], "end"
            else:
                unfinished_execs += 1
                after = [t for t in kills.get(ex["pgid"], []) if t >= begin]
                finish, how = (min(after), "killed") if after else (end_of_run, "end_of_run")
            spans.append((begin, finish, how, ex["pid"]))
        spans.sort()
        if any(e["tool"] == THROTTLED_TOOL for e in execs.values()):
            throttled_spans.extend((begin, finish) for begin, finish, _, _ in spans)
        for a, b in itertools.pairwise(spans):
            if b[0] < a[1]:
                overlaps.append({"call_id": call_id, "first": a, "second": b})
    audit_wins: dict[str, list[str]] = defaultdict(list)
    for entry in dump["audit"]:
        if entry["outcome"] in ("approved", "denied", "expired"):
            audit_wins[entry["call_id"]].append(entry["outcome"])
    decide_ok: Counter[str] = Counter()
    racing_calls: set[str] = set()
    for h in history:
        if h["op"] == "decide":
            decide_ok[h["call_id"]] += h["outcome"] == "ok"
            if h["racers"] > 1:
                racing_calls.add(h["call_id"])
    double_decisions = sorted(
        {c for c, wins in audit_wins.items() if len(wins) > 1}
        | {c for c, n in decide_ok.items() if n > 1}
    )
    unapproved = [
        call_id
        for call_id, execs in executions.items()
        if any(e["tool"] in GATED_TOOLS for e in execs.values())
        and audit_wins.get(call_id) != ["approved"]
    ]

    # -- latency --------------------------------------------------------------------------
    auto: list[float] = []
    gated: list[float] = []
    for call_id, key in accepted.items():
        rec = records.get(call_id)
        if rec is None or rec["status"] not in FINAL or not rec.get("finished_at"):
            continue
        took = float(rec["finished_at"]) - op_start[key]
        (gated if rec["name"] in GATED_TOOLS else auto).append(took)

    # -- recovery after each fault ----------------------------------------------------------
    succeeded = sorted(
        (float(r["started_at"]), float(r["finished_at"]))
        for r in records.values()
        if r["status"] == "succeeded" and r.get("started_at") and r.get("finished_at")
    )
    faults = []
    for h in history:
        if h["op"] != "fault":
            continue
        tf = h["time"]
        item: dict[str, Any] = {"kind": h["kind"], "at_s": round(tf - t0, 2)}
        for key in ("worker", "killed", "error", "mid_batch", "pending", "skipped"):
            if key in h:
                item[key] = h[key]
        if "up" in h:
            item["outage_s"] = round(h["up"] - tf, 2)
        nxt = [f for s, f in succeeded if s >= tf]
        item["resumed_s"] = round(min(nxt) - tf, 2) if nxt else None
        if h["kind"] in KILLS:
            victims = {
                call_id
                for call_id, execs in executions.items()
                for ex in execs.values()
                if ex["pgid"] == h["pgid"] and "end" not in ex and ex.get("start", 0) <= tf
            }
            done = [
                float(records[c]["finished_at"])
                for c in victims
                if c in records and records[c].get("finished_at")
            ]
            item["in_flight"] = len(victims)
            item["in_flight_outcomes"] = dict(
                Counter(
                    f"{records[c]['status']}:{records[c].get('error_type') or ''}".rstrip(":")
                    for c in victims
                    if c in records
                )
            )
            item["in_flight_resolved_s"] = round(max(done) - tf, 2) if done else None
        if h["kind"] == "sigterm":
            exit_entry = next(
                (x for x in history if x["op"] == "worker_exit" and x["pgid"] == h["pgid"]), None
            )
            item["warm_shutdown_s"] = round(exit_entry["after"], 2) if exit_entry else None
        faults.append(item)

    unexpected_exits = []
    for h in history:
        if h["op"] == "worker_died":
            before = [f for f in history if f["op"] == "fault" and f["time"] <= h["time"]]
            unexpected_exits.append(
                {
                    "worker": h["worker"],
                    "code": h["code"],
                    "reason": h.get("reason", ""),
                    "noticed_at_s": round(h["time"] - t0, 2),
                    "after_fault": before[-1]["kind"] if before else None,
                }
            )

    unnoticed_exits = [e for e in unexpected_exits if e["code"] == 0]
    resends = _lost_message_resends(out)
    stranded_ages = [age for _, age in resends]
    stranded = {
        "n": len(resends),
        "stranded_s": _latency(stranded_ages),
        "final": dict(Counter(records.get(c, {}).get("status", "unknown") for c, _ in resends)),
        "queued_to_final_s": _latency(
            [
                float(records[c]["finished_at"]) - float(records[c]["created_at"])
                for c, _ in resends
                if c in records and records[c].get("finished_at") and records[c].get("created_at")
            ]
        ),
    }

    violations = {
        "lost": len(lost),
        "duplicates": len(duplicates),
        "overlaps": len(overlaps),
        "phantoms": len(phantoms),
        "unapproved": len(unapproved),
        "double_decisions": len(double_decisions),
        "double_accepts": len(double_accepts),
        "final_changed": len(final_changed),
    }
    config = start.get("config", {})
    archived = _history_check(out, history, records, dump)
    history_ok = archived is None or not any(archived["violations"].values())
    report: dict[str, Any] = {
        "ok": not any(violations.values()) and not unnoticed_exits and history_ok,
        "violations": violations,
        "config": config,
        "duration_s": round(end_of_run - t0, 1),
        "submitted": len(submitted),
        "accepted": len(accepted),
        "accepted_after_error": len(accepted_after_error),
        "rejected": dict(rejected),
        "completed": dict(statuses),
        "failed_by_error_type": dict(failures),
        "dispatch_errors": dict(dispatch_errors),
        "dispatches_retried_ok": retried,
        "client_waits_not_ok": client_timeouts,
        "executions": sum(len(e) for e in executions.values()),
        "executions_without_end": unfinished_execs,
        "idempotent_reruns": sum(int(k) * v for k, v in reruns.items()),
        "calls_rerun": sum(reruns.values()),
        "racing_decisions": {
            "calls": len(racing_calls),
            "winners_per_call": dict(Counter(len(audit_wins.get(c, [])) for c in racing_calls)),
        },
        "latency_s": {"auto": _latency(auto), "approval_gated": _latency(gated)},
        "faults": faults,
        "fault_counts": dict(Counter(f["kind"] for f in faults)),
        "leftovers": dump["leftovers"],
        "unexpected_worker_exits": unexpected_exits,
        "unnoticed_worker_exits": len(unnoticed_exits),
        "lost_message_resends": stranded,
        "history_store": archived,
        "throttled_tool": {
            "executions": len(throttled_spans),
            "peak_at_once": _peak(throttled_spans),
            "cap": THROTTLED_CAP,
        },
        "details": {
            "lost": lost[:50],
            "duplicates": duplicates[:20],
            "overlaps": overlaps[:20],
            "phantoms": phantoms[:20],
            "unapproved": unapproved[:20],
            "double_decisions": double_decisions[:20],
            "double_accepts": dict(list(double_accepts.items())[:20]),
            "final_changed": final_changed[:20],
            "history_call_id_mismatch": mismatched[:20],
        },
    }
    (out / REPORT).write_text(json.dumps(report, indent=2))
    return report


def _history_check(
    out: Path,
    history: list[dict[str, Any]],
    records: dict[str, dict[str, Any]],
    dump: dict[str, Any],
) -> dict[str, Any] | None:
    """The history store against Redis and what clients saw (``None`` without a store)."""
    path = out / HISTORY_DUMP
    if not path.exists():
        return None
    stored = json.loads(path.read_text())
    rows: dict[str, dict[str, Any]] = stored["calls"]
    lost: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    duplicates = {c: r for c, r in rows.items() if r["rows"] > 1}
    for call_id, rec in records.items():
        if rec["status"] not in FINAL:
            continue
        row = rows.get(call_id)
        if row is None:
            lost.append({"call_id": call_id, "status": rec["status"], "seen_by": "redis"})
        elif row["statuses"] != [rec["status"]]:
            changed.append({"call_id": call_id, "redis": rec["status"], "sql": row["statuses"]})
    seen_final = 0
    for h in history:
        if h["op"] != "wait":
            continue
        for res in h.get("results", []):
            if res["status"] not in FINAL:
                continue
            seen_final += 1
            row = rows.get(res["call_id"])
            if row is None:
                if res["call_id"] not in {x["call_id"] for x in lost}:
                    lost.append({**res, "seen_by": "client"})
            elif row["statuses"] != [res["status"]]:
                changed.append({**res, "sql": row["statuses"], "seen_by": "client"})
    phantoms = sorted(set(rows) - set(records))
    not_final = sorted(c for c in rows if c in records and records[c]["status"] not in FINAL)
    events_missing = events_extra = 0
    for call_id in rows:
        in_redis = len(dump["events"].get(call_id, []))
        in_sql = int(stored["events"].get(call_id, 0))
        events_missing += max(0, in_redis - in_sql)
        events_extra += max(0, in_sql - in_redis)
    drained = next((h for h in history if h["op"] == "history_drained"), {})
    faults = Counter(
        h["kind"] for h in history if h["op"] == "fault" and h["kind"] in HISTORY_FAULTS
    )
    mid_batch = sum(
        1
        for h in history
        if h["op"] == "fault" and h["kind"] == "archiver-kill9" and h["mid_batch"]
    )
    return {
        "store": stored["store"],
        "violations": {
            "history_lost": len(lost),
            "history_duplicates": len(duplicates),
            "history_status": len(changed),
            "history_phantoms": len(phantoms),
        },
        "final_in_redis": sum(1 for r in records.values() if r["status"] in FINAL),
        "client_seen_final": seen_final,
        "rows": sum(r["rows"] for r in rows.values()),
        "archived_not_final_in_redis": len(not_final),
        "events_missing": events_missing,
        "events_extra": events_extra,
        "drain": {k: drained.get(k) for k in ("left", "pending", "waited_s")},
        "faults": dict(faults),
        "archiver_kills_mid_batch": mid_batch,
        "details": {
            "lost": lost[:20],
            "duplicates": dict(list(duplicates.items())[:20]),
            "status": changed[:20],
            "phantoms": phantoms[:20],
            "archived_not_final_in_redis": not_final[:20],
        },
    }


HISTORY_FAULTS = frozenset({"archiver-kill9", "sql-restart"})


def _peak(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (an end before a start at the same time)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


LOST_LINE = re.compile(r"call (\S+): message lost ([0-9.]+) s after it was queued")


def _lost_message_resends(out: Path) -> list[tuple[str, float]]:
    """``(call id, seconds stranded)`` of each lost message a worker's sweeper re-sent."""
    found = []
    for log in sorted((out / "workers").glob("*.log")):
        for match in LOST_LINE.finditer(log.read_text(errors="replace")):
            found.append((match.group(1), float(match.group(2))))
    return found


def render(report: dict[str, Any]) -> str:
    """The report as text."""
    lat = report["latency_s"]
    lines = [
        "toolq chaos report",
        f"  config      {json.dumps({k: v for k, v in report['config'].items() if k != 'out'})}",
        f"  run         {report['duration_s']} s",
        f"  submitted   {report['submitted']}",
        f"  accepted    {report['accepted']}  (after a client-side error: "
        f"{report['accepted_after_error']})",
        f"  rejected    {report['rejected'] or 0}",
        f"  completed   {report['completed']}",
        f"  failed by   {report['failed_by_error_type']}",
        f"  dispatch errors {report['dispatch_errors']}, retried dispatches that succeeded "
        f"{report['dispatches_retried_ok']}, client waits not ok {report['client_waits_not_ok']}",
        f"  executions  {report['executions']} ({report['executions_without_end']} without an "
        f"end), idempotent re-runs {report['idempotent_reruns']} on "
        f"{report['calls_rerun']} calls",
        f"  racing      {report['racing_decisions']['calls']} calls decided by racing approvers, "
        f"winners per call {report['racing_decisions']['winners_per_call']}",
    ]
    for name, values in lat.items():
        lines.append(
            f"  latency {name:<15} n={values['n']} p50={values['p50']} s "
            f"p99={values['p99']} s max={values['max']} s"
        )
    lines.append(f"  faults      {report['fault_counts']}")
    for f in report["faults"]:
        extra = {k: v for k, v in f.items() if k not in ("kind", "at_s")}
        lines.append(f"    t={f['at_s']:>7}s {f['kind']:<18} {json.dumps(extra)}")
    lines.append(f"  leftovers   {report['leftovers']}")
    exits = report["unexpected_worker_exits"]
    lines.append(
        f"  workers that exited on their own (restarted by the harness): {len(exits)}"
        + "".join(f"\n    {json.dumps(e)}" for e in exits)
    )
    lines.append(
        f"  ... of which exited 0 (unnoticed by a supervisor): {report['unnoticed_worker_exits']}"
    )
    st = report["lost_message_resends"]
    lines.append(
        f"  lost messages re-sent: {st['n']}, stranded {json.dumps(st['stranded_s'])}, "
        f"queued-to-final {json.dumps(st['queued_to_final_s'])}, final {st['final']}"
    )
    th = report["throttled_tool"]
    lines.append(
        f"  throttled tool: {th['executions']} executions, at most {th['peak_at_once']} at once "
        f"(cap {th['cap']}; an execution killed without an end counts until its kill)"
    )
    hs = report.get("history_store")
    if hs is not None:
        lines.append(
            f"  history store ({hs['store']}): {hs['rows']} rows; {hs['final_in_redis']} final "
            f"calls in Redis, {hs['client_seen_final']} final results seen by clients; drain "
            f"{json.dumps(hs['drain'])}; events missing {hs['events_missing']}, extra "
            f"{hs['events_extra']}; archived but not final in Redis "
            f"{hs['archived_not_final_in_redis']}; history faults {hs['faults']} "
            f"({hs['archiver_kills_mid_batch']} archiver kills mid-batch)"
        )
    lines.append("  invariants")
    for name in INVARIANTS:
        n = report["violations"][name]
        lines.append(f"    {name:<17} {n:>4}  {'ok' if n == 0 else 'VIOLATED'}")
    for name, n in (hs or {}).get("violations", {}).items():
        lines.append(f"    {name:<17} {n:>4}  {'ok' if n == 0 else 'VIOLATED'}")
    lines.append(f"  result      {'PASS' if report['ok'] else 'FAIL'}")
    if not report["ok"]:
        lines.append(json.dumps(report["details"], indent=1)[:6000])
        if hs is not None:
            lines.append(json.dumps(hs["details"], indent=1)[:4000])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.chaos.checker")
    p.add_argument("out", type=Path, help="the harness's --out directory")
    report = check(p.parse_args(argv).out)
    print(render(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
