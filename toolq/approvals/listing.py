"""Pages of parked calls: by parking time, oldest first, after a cursor.

Read from the parked-calls indexes (``Keys.parked``, ``Keys.tenant_parked``: scored by when
each call was parked), so a page costs what it shows, whatever else is parked, and the
total is one ``ZCOUNT``. Filters by tool and risk skip entries as the page is read (at
most ``SCAN_BUDGET`` of them a page: a page may then end early, with a cursor) and leave
the total uncounted. A run's parked calls are read from the run itself (its call list).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolq.approvals.models import ApprovalRequest
from toolq.models import CallStatus, RiskLevel
from toolq.quotas import DEFAULT_TENANT
from toolq.results.connection import as_text
from toolq.results.paging import Cursor, Page, bounds, check_limit, walk
from toolq.results.store import CallStore

AWAITING = CallStatus.AWAITING_APPROVAL.value


def approvals_page(
    store: CallStore,
    to_request: Callable[[dict[str, str]], ApprovalRequest],
    *,
    limit: int,
    cursor: str | None = None,
    since: float | None = None,
    until: float | None = None,
    run_id: str | None = None,
    risk: RiskLevel | str | None = None,
    tool: str | None = None,
    tenant: str | None = None,
) -> Page[ApprovalRequest]:
    """Parked calls parked within ``since``..``until`` (epoch s), oldest first, filtered."""
    check_limit(limit)
    lo, hi = bounds(since, until)
    level = RiskLevel.parse(risk) if risk is not None else None

    def matches(record: dict[str, str] | None) -> ApprovalRequest | None:
        if record is None or record.get("status") != AWAITING:
            return None  # decided or gone since it was listed
        if tool is not None and record.get("name") != tool:
            return None
        if tenant is not None and (record.get("tenant") or "default") != tenant:
            return None
        request = to_request(record)
        if level is not None and request.risk is not level:
            return None
        return request

    if run_id is not None:
        return _of_run(store, run_id, matches, limit, cursor, since, until)

    backfill(store)
    index = store.keys.parked if tenant is None else store.keys.tenant_parked(tenant)

    def keep(chunk: Sequence[tuple[str, str]]) -> list[ApprovalRequest | None]:
        ids = [member for member, _ in chunk]
        records = store.records(ids, confirm=False)  # parked calls: not outcomes
        # A call that left awaiting_approval never comes back to it: an entry left behind
        # (by a process of an older version, or a backfill racing a decision) is dropped.
        stale = [c for c, r in zip(ids, records, strict=True) if not r or r["status"] != AWAITING]
        if stale:
            store.redis.zrem(store.keys.parked, *stale)
            store.redis.zrem(index, *stale)
        return [matches(r) for r in records]

    items, next_cursor = walk(
        store.scripts, index, cursor=cursor, limit=limit, lo=lo, hi=hi, keep=keep
    )
    total = None
    if tool is None and level is None:
        total = int(store.redis.zcount(index, lo, hi))
    return Page(items, next_cursor, total)


def _of_run(
    store: CallStore,
    run_id: str,
    matches: Callable[[dict[str, str] | None], ApprovalRequest | None],
    limit: int,
    cursor: str | None,
    since: float | None,
    until: float | None,
) -> Page[ApprovalRequest]:
    """A run's parked calls, from its own call list (bounded by the run, not the fleet)."""
    ids = store.run_call_ids(run_id)
    statuses = store.statuses(ids, confirm=False)
    parked = [c for c, s in zip(ids, statuses, strict=True) if s is CallStatus.AWAITING_APPROVAL]
    found: list[tuple[tuple[float, str], ApprovalRequest]] = []
    for record in store.records(parked, confirm=False):
        request = matches(record)
        if request is None:
            continue
        at = request.created_at
        if (since is not None and at < since) or (until is not None and at > until):
            continue
        found.append(((at, request.call_id), request))
    found.sort(key=lambda pair: pair[0])
    total = len(found)
    if cursor:
        after = Cursor.decode(cursor)
        mark = (float(after.score), after.member)
        found = [pair for pair in found if pair[0] > mark]
    shown = found[:limit]
    next_cursor = None
    if len(found) > limit:
        (score, member), _ = shown[-1]
        next_cursor = Cursor(repr(score), member).encode()
    return Page([request for _, request in shown], next_cursor, total)


def backfill(store: CallStore) -> int:
    """Index the parked calls the parked-calls indexes lack; how many were added.

    Calls parked before these indexes existed (or by a process of an older version, during
    an upgrade) are only in ``Keys.pending_approvals``: two ``ZCARD`` tell, and the first
    listing after them adds them, once.
    """
    keys = store.keys
    pipe = store.redis.pipeline(transaction=False)
    pipe.zcard(keys.pending_approvals)
    pipe.zcard(keys.parked)
    pending, indexed = pipe.execute()
    if pending <= indexed:
        return 0
    ids = [as_text(c) for c in store.redis.zrange(keys.pending_approvals, 0, -1)]
    pipe = store.redis.pipeline(transaction=False)
    for call_id in ids:
        pipe.zscore(keys.parked, call_id)
        pipe.hmget(keys.call(call_id), "status", "created_at", "tenant")
    found = pipe.execute()
    pipe = store.redis.pipeline(transaction=False)
    added = 0
    for call_id, score, (status, created, tenant) in zip(ids, found[::2], found[1::2], strict=True):
        if score is not None or status is None or as_text(status) != AWAITING or not created:
            continue
        at = float(as_text(created))
        pipe.zadd(keys.parked, {call_id: at}, nx=True)
        pipe.zadd(
            keys.tenant_parked(as_text(tenant) if tenant else DEFAULT_TENANT),
            {call_id: at},
            nx=True,
        )
        added += 1
    if added:
        pipe.execute()
    return added
