"""``GET /v1/overview``: the ops dashboard's one poll; ``GET /v1/charts`` its charts.

Queue depth and live workers per risk, each worker's heartbeat, the pending-approval
count, and a page of the newest calls (state, duration, error) from the recent-calls
index, filtered by run, tool, risk, state and a search text. A caller bound to a tenant
sees its tenant's counts and calls only, never another tenant's figures or call ids. Only
small record fields are read: never envelopes, so never arguments or outputs. The overview
also names the final call states (``FINAL_STATUSES``), so the page keeps no list of its own.
"""

import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import Principal
from toolq.api.charts import charts
from toolq.dispatch.client import Client
from toolq.errors import CallNotFoundError
from toolq.models import FINAL_STATUSES, CallStatus, RiskLevel, UndoState
from toolq.quotas import DEFAULT_TENANT
from toolq.results.connection import as_text
from toolq.workers.heartbeat import live_workers

SCAN_CHUNK = 500
"""Recent-call ids read per round trip while filtering."""
ERROR_CHARS = 300
"""An error message is cut to this many characters in the overview (the call page has it all)."""
_FIELDS = ("run_id", "name", "risk", "status", "created_at", "updated_at", "result", "tenant")


def _row(call_id: str, values: list[Any]) -> dict[str, Any] | None:
    run_id, name, risk, status, created, updated, result, tenant = (
        as_text(v) if v is not None else "" for v in values
    )
    if not name:
        return None  # expired record still indexed
    outcome = json.loads(result) if result else {}
    error = outcome.get("error")
    return {
        "call_id": call_id,
        "run_id": run_id,
        "tenant": tenant or DEFAULT_TENANT,
        "name": name,
        "risk": risk,
        "status": status,
        "created_at": float(created) if created else None,
        "updated_at": float(updated) if updated else None,
        "duration_ms": outcome.get("duration_ms"),
        "error": error[:ERROR_CHARS] if isinstance(error, str) else None,
        "error_truncated": isinstance(error, str) and len(error) > ERROR_CHARS,
    }


def _dispatch_order(client: Client, group: list[str]) -> list[str]:
    """``group`` (calls of one score: created by one dispatch) in dispatch order.

    Their run's call list holds them in dispatch order, next to each other: one ``LPOS``
    from its tail finds them and one ``LRANGE`` around it reads their order. A call not
    found there (its run list expired) goes last, in id order.
    """
    r = client.redis
    keys = client.keys
    pipe = r.pipeline(transaction=False)
    for call_id in group:
        pipe.hget(keys.call(call_id), "run_id")
    runs: dict[str, list[str]] = {}
    for call_id, run_id in zip(group, pipe.execute(), strict=True):
        runs.setdefault(as_text(run_id) if run_id else "", []).append(call_id)
    named = sorted(run for run in runs if run)
    pipe = r.pipeline(transaction=False)
    for run_id in named:
        pipe.lpos(keys.run_calls(run_id), runs[run_id][0], rank=-1)
    found = pipe.execute()
    pipe = r.pipeline(transaction=False)
    for run_id, at in zip(named, found, strict=True):
        span = 2 * len(runs[run_id])
        pipe.lrange(keys.run_calls(run_id), max(0, (at or 0) - span), (at or 0) + span)
    windows = pipe.execute() if named else []
    out: list[str] = []
    for run_id, window in zip(named, windows, strict=True):
        members = set(runs[run_id])
        ordered = [c for c in dict.fromkeys(as_text(c) for c in window) if c in members]
        out.extend(ordered + sorted(members.difference(ordered)))
    return out + sorted(runs.get("", []))


def _newest_chunk(client: Client, start: int) -> list[str]:
    """Recent call ids from rank ``start``, newest first; calls of one dispatch newest first.

    A dispatch's calls share one creation time (one score), which Redis orders by call
    id: they are put in reverse dispatch order instead. A chunk ends at a dispatch's end,
    so the next chunk (``start`` + this chunk's length) starts at the next dispatch.
    """
    r = client.redis
    recent = client.keys.recent_calls
    raw: Any = r.zrevrange(recent, start, start + SCAN_CHUNK - 1, withscores=True)
    if not raw:
        return []
    last = raw[-1][1]
    if r.zcount(recent, last, last) > sum(1 for _, score in raw if score == last):
        rest: Any = r.zrevrangebyscore(recent, last, last, withscores=True)
        raw = [(m, s) for m, s in raw if s != last] + list(rest)
    out: list[str] = []
    group: list[str] = []
    for i, (member, score) in enumerate(raw):
        group.append(as_text(member))
        if i + 1 < len(raw) and raw[i + 1][1] == score:
            continue
        out.extend(reversed(_dispatch_order(client, group)) if len(group) > 1 else group)
        group = []
    return out


def _matches(row: dict[str, Any], text: str) -> bool:
    fields = (row["call_id"], row["run_id"], row["name"], row["status"], row["error"] or "")
    return any(text in value.lower() for value in fields)


def recent_calls(
    client: Client,
    *,
    run_id: str | None = None,
    tool: str | None = None,
    risk: RiskLevel | None = None,
    state: CallStatus | None = None,
    q: str | None = None,
    tenant: str | None = None,
    offset: int = 0,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """The newest calls matching every filter given, newest first, after ``offset`` matches.

    ``q`` matches (case-insensitively) a part of the call id, run id, tool, state or error.
    """
    text = q.lower() if q else None
    skip = offset
    r = client.redis
    keys = client.keys
    out: list[dict[str, Any]] = []
    start = 0
    while len(out) < limit:
        raw: Any
        if run_id is not None:  # a run's own list is short and exact
            raw = r.lrange(keys.run_calls(run_id), 0, -1) if start == 0 else []
            raw = list(reversed(raw))
        else:
            raw = _newest_chunk(client, start)
        if not raw:
            break
        ids = [as_text(c) for c in raw]
        pipe = r.pipeline(transaction=False)
        for call_id in ids:
            pipe.hmget(keys.call(call_id), *_FIELDS)
        for call_id, values in zip(ids, pipe.execute(), strict=True):
            row = _row(call_id, values)
            if row is None:
                continue
            if tool is not None and row["name"] != tool:
                continue
            if tenant is not None and row["tenant"] != tenant:
                continue
            if risk is not None and row["risk"] != risk.value:
                continue
            if state is not None and row["status"] != state.value:
                continue
            if text is not None and not _matches(row, text):
                continue
            if skip:
                skip -= 1
                continue
            out.append(row)
            if len(out) == limit:
                break
        start += len(ids)
    return out


def worker_rows(workers: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Live workers as the dashboard lists them, by hostname."""
    rows = []
    for w in workers:
        started = w.get("started_at")
        rows.append(
            {
                "hostname": w.get("hostname"),
                "pid": w.get("pid"),
                "pool": w.get("pool"),
                "concurrency": w.get("concurrency"),
                "queues": w.get("queues", []),
                "uptime_s": round(now - started, 1) if isinstance(started, int | float) else None,
                "processed": w.get("processed"),
                "current": w.get("current", []),
            }
        )
    return sorted(rows, key=lambda row: str(row["hostname"]))


QUEUED_READ = 10_000
"""Queued call ids a tenant-bound overview reads at most (``queues_capped`` when more)."""


def tenant_figures(
    client: Client, tenant: str, workers: list[dict[str, Any]]
) -> tuple[dict[str, int], int, list[dict[str, Any]], bool]:
    """What a caller bound to ``tenant`` may see of one cell's figures.

    Its queued calls per risk (not the queues' message counts), its calls awaiting a
    decision, the live workers with only its calls among their current ones (and no
    processed count: that counts every tenant's calls), and whether
    the queued count was capped. The parked count is the size of the tenant's own parked
    index and its calls waiting for admission the length of its backlogs, so neither grows
    with what other tenants (or it) parked; the calls queued for the fleet are read up to
    ``QUEUED_READ`` ids, and a larger queue is counted up to that many (``capped``).
    """
    r = client.redis
    keys = client.keys
    pipe = r.pipeline(transaction=False)
    for index in (keys.queued, keys.unsent):
        pipe.zrange(index, 0, QUEUED_READ - 1)
        pipe.zcard(index)
    pipe.zcard(keys.tenant_parked(tenant))
    for level in RiskLevel:
        pipe.llen(keys.backlog(level, tenant))
    queued_ids, queued_n, unsent_ids, unsent_n, parked, *backlogs = pipe.execute()
    capped = queued_n > len(queued_ids) or unsent_n > len(unsent_ids)
    waiting = {as_text(c) for c in (*queued_ids, *unsent_ids)}
    running = {str(c) for w in workers for c in w.get("current") or []}
    ids = sorted(waiting | running)
    pipe = r.pipeline(transaction=False)
    for call_id in ids:
        pipe.hmget(keys.call(call_id), "tenant", "risk", "status")
    mine: dict[str, tuple[str, str]] = {}
    for call_id, (owner, risk, status) in zip(ids, pipe.execute() if ids else [], strict=True):
        if status is not None and (as_text(owner) if owner else DEFAULT_TENANT) == tenant:
            mine[call_id] = (as_text(risk or b""), as_text(status))
    queues = {level.value: n for level, n in zip(RiskLevel, backlogs, strict=True)}
    for call_id in waiting:
        risk, status = mine.get(call_id, ("", ""))
        if status == CallStatus.QUEUED.value and risk in queues:
            queues[risk] += 1
    # A worker's processed count is every tenant's calls: a bound caller sees none of it.
    now_running = CallStatus.RUNNING.value
    visible = [
        {
            **w,
            "current": [
                c for c in w.get("current") or [] if mine.get(c, ("", ""))[1] == now_running
            ],
            "processed": None,
        }
        for w in workers
    ]
    return queues, int(parked), visible, capped


def running_only(client: Client, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``workers`` with only their calls that are running among their current ones.

    A worker's heartbeat lists every call of the messages it runs, and a message may carry
    calls still queued behind the running one (or recovered elsewhere since): one read of
    their states keeps the panel to what runs.
    """
    ids = sorted({str(c) for w in workers for c in w.get("current") or []})
    if not ids:
        return workers
    pipe = client.redis.pipeline(transaction=False)
    for call_id in ids:
        pipe.hget(client.keys.call(call_id), "status")
    running = {
        call_id
        for call_id, status in zip(ids, pipe.execute(), strict=True)
        if status is not None and as_text(status) == CallStatus.RUNNING.value
    }
    return [{**w, "current": [c for c in w.get("current") or [] if c in running]} for w in workers]


def overview(client: Client, scope: str | None = None, **filters: Any) -> dict[str, Any]:
    """Queues, workers, pending count and a page of recent calls, as the dashboard shows them.

    ``scope``: the tenant a caller is bound to, whose figures replace the fleet's
    (``tenant_figures``). ``has_more`` says whether a next page exists (one more call was
    looked for);
    ``final_states`` are the states a call never leaves. ``queue_unit`` says what
    ``queues`` counts: the queues' Celery messages (a message may carry several calls,
    and calls waiting for admission have none yet) or, for a tenant-bound caller, its
    queued calls (``queues_capped`` when more were queued than it reads). With cells the
    figures add up
    every cell that answers, the calls are merged newest first, and ``cells`` says which
    cells answer (``{"cell", "where", "up"}`` each).
    """
    limit = filters.pop("limit", 100)
    offset = filters.pop("offset", 0)
    run_id = filters.get("run_id")
    reachable, _ = client.reachable(run_id)  # a run's calls: only in its cell
    queues = dict.fromkeys((level.value for level in RiskLevel), 0)
    alive = dict.fromkeys((level.value for level in RiskLevel), 0)
    worker_list: list[dict[str, Any]] = []
    pending = 0
    capped = False
    calls: list[dict[str, Any]] = []
    for index, cell in reachable:
        r = cell.redis
        keys = cell.keys
        workers = live_workers(cell.settings, cell.redis)
        if scope is not None:
            depth, parked, workers, cut = tenant_figures(cell, scope, workers)
            capped = capped or cut
        else:
            pipe = r.pipeline(transaction=False)
            for level in RiskLevel:
                pipe.llen(keys.queue_for(level))
            pipe.zcard(keys.pending_approvals)
            *depths, parked = pipe.execute()
            depth = {level.value: n for level, n in zip(RiskLevel, depths, strict=True)}
            workers = running_only(cell, workers)
        for level in RiskLevel:
            queue = keys.queue_for(level)
            queues[level.value] += depth[level.value]
            alive[level.value] += sum(1 for w in workers if queue in w.get("queues", []))
        rows = worker_rows(workers, time.time())
        if index is not None:
            for row in rows:
                row["cell"] = index
        worker_list.extend(rows)
        pending += parked
        if len(reachable) == 1:
            calls = recent_calls(cell, **filters, offset=offset, limit=limit + 1)
        else:
            calls.extend(recent_calls(cell, **filters, limit=offset + limit + 1))
    if len(reachable) > 1:
        calls.sort(key=lambda row: row["created_at"] or 0.0, reverse=True)
        calls = calls[offset : offset + limit + 1]
    out: dict[str, Any] = {
        "queues": queues,
        "workers": alive,
        "worker_list": sorted(worker_list, key=lambda row: str(row["hostname"])),
        "pending_approvals": pending,
        "queue_unit": "calls" if scope is not None else "messages",
        "queues_capped": capped,
        "tenant": filters.get("tenant"),
        "calls": calls[:limit],
        "offset": offset,
        "has_more": len(calls) > limit,
        "final_states": sorted(status.value for status in FINAL_STATUSES),
    }
    states = client.cell_states()
    if states:
        out["cells"] = [{"cell": c.index, "where": c.where, "up": c.up} for c in states]
    return out


def call_actions(client: Client, call_id: str) -> dict[str, Any]:
    """What the call page may offer: cancel (not final yet), undo (undo data kept, not undone).

    Undo data lives apart from the result (it may hold what the call overwrote), so only
    its presence is read, never its content.
    """
    client = client.cell_for_call(call_id)
    pipe = client.redis.pipeline(transaction=False)
    pipe.hmget(client.keys.call(call_id), "name", "status", "undo_state")
    pipe.exists(client.keys.undo(call_id))
    (name, status, undo_state), kept = pipe.execute()
    if name is None or status is None:
        raise CallNotFoundError(f"unknown call id {call_id!r}", call_id=call_id)
    state = CallStatus(as_text(status))
    tool = client.registry.get(as_text(name))
    undo_state = as_text(undo_state) if undo_state is not None else None
    undoable = (
        state is CallStatus.SUCCEEDED
        and tool is not None
        and tool.has_undo
        and bool(kept)
        and undo_state != UndoState.UNDONE.value
    )
    return {"cancel": not state.is_final, "undo": undoable, "undo_state": undo_state}


def build_dashboard_router(client: Client, auth: Any) -> APIRouter:
    """The JSON endpoints only the dashboard needs."""
    router = APIRouter(prefix="/v1", tags=["dashboard"])
    Caller = Annotated[Principal, Depends(auth)]

    @router.get("/overview")
    async def get_overview(
        caller: Caller,
        run_id: str | None = None,
        tool: str | None = None,
        risk: str | None = None,
        state: str | None = None,
        q: str | None = Query(None, max_length=200),
        offset: int = Query(0, ge=0, le=10_000),
        limit: int = Query(100, ge=1, le=1000),
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Queue depth and workers per risk, live workers, pending approvals, a page of calls.

        ``q`` searches call id, run id, tool, state and error; ``offset`` skips matches. A
        tenant-bound caller sees its tenant's calls only.
        """
        caller.require_viewer()
        filters = {
            "tenant": caller.tenant_for(tenant) if caller.tenant or tenant else None,
            "run_id": run_id or None,
            "tool": tool or None,
            "risk": RiskLevel.parse(risk) if risk else None,
            "state": CallStatus(state) if state else None,
            "q": q.strip() or None if q else None,
            "offset": offset,
            "limit": limit,
        }
        return await run_in_threadpool(lambda: overview(client, caller.tenant, **filters))

    @router.get("/calls/{call_id}/actions")
    async def get_call_actions(call_id: str, caller: Caller) -> dict[str, Any]:
        """Whether the call can still be cancelled or undone (the roles are checked on use)."""
        caller.require_viewer()
        await run_in_threadpool(
            lambda: client.cell_for_call(call_id).owners.check_call_tenant(
                call_id, caller.tenant, principal=caller.name, action="read"
            )
        )
        return await run_in_threadpool(call_actions, client, call_id)

    @router.get("/charts")
    async def get_charts(caller: Caller) -> dict[str, Any]:
        """Calls per second by state and p50/p99 duration per tool, per minute, last hour.

        A tenant-bound caller's charts count its tenant's calls only.
        """
        caller.require_viewer()
        return await run_in_threadpool(lambda: charts(client, tenant=caller.tenant))

    return router
