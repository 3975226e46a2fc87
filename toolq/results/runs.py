"""Runs as listings show them: ``RunSummary``, a page of runs, one run.

Runs come from the runs indexes (``Keys.runs``, ``Keys.tenant_runs``: scored by each run's
last dispatch, kept by ``create.lua`` and bounded by the result TTL), newest first. With a
history store a run leaves the indexes once all its calls are final and archived
(``cool.lua``): a listing then merges the indexes with the history store's runs, in the
same order and with one cursor (a run in both shows once, from Redis). A
run's status counts are read from its own newest calls: a page reads at most
``STATUS_BUDGET`` statuses, shared among its runs (``STATUS_READ`` at most for one run), so a
page of runs costs the same however many calls each run holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from toolq.errors import RunNotFoundError
from toolq.keys import Keys
from toolq.quotas import DEFAULT_TENANT
from toolq.results.cold import ColdStore, RunBounds
from toolq.results.connection import as_text
from toolq.results.owners import RunOwner
from toolq.results.paging import Cursor, Page, bounds, check_limit, merge_pages, walk
from toolq.results.runner import Scripts

STATUS_READ = 1_000
"""At most this many of a run's newest calls have their status counted (``RunSummary.counted``)."""
STATUS_BUDGET = 5_000
"""Statuses one page of runs reads at most, shared equally among its runs (at least 10 each)."""


class RunSummary(BaseModel):
    """A run: who owns it, when it was last dispatched into, its calls by status."""

    run_id: str
    tenant: str = DEFAULT_TENANT
    owner: str | None = None
    """The principal whose dispatch created the run."""
    last_dispatch_at: float | None = None
    """When calls were last dispatched into the run (epoch seconds)."""
    calls: int = 0
    statuses: dict[str, int] = Field(default_factory=dict)
    """How many of its counted calls are in each status (only the statuses that occur)."""
    counted: int = 0
    """How many of its calls ``statuses`` counts: all of them, or only its newest (a page of
    runs counts at most ``STATUS_BUDGET`` calls, one run at most ``STATUS_READ``)."""


def summaries(
    redis: Any,
    keys: Keys,
    runs: Sequence[tuple[str, float | None]],
    cold: ColdStore | None = None,
) -> list[RunSummary | None]:
    """``RunSummary`` of each ``(run_id, last dispatch)``; ``None`` for a run that is gone.

    A run whose keys left Redis is summed up from its archived calls (``cold``).
    """
    if not runs:
        return []
    each = min(STATUS_READ, max(10, STATUS_BUDGET // len(runs)))
    pipe = redis.pipeline(transaction=False)
    for run_id, _ in runs:
        pipe.get(keys.run_owner(run_id))
        pipe.llen(keys.run_calls(run_id))
        pipe.lrange(keys.run_calls(run_id), -each, -1)
    found = pipe.execute()
    owners, sizes = found[::3], found[1::3]
    lists = [[as_text(c) for c in ids] for ids in found[2::3]]
    pipe = redis.pipeline(transaction=False)
    for ids in lists:
        for call_id in ids:
            pipe.hget(keys.call(call_id), "status")
    statuses = iter(pipe.execute() if any(lists) else [])
    out: list[RunSummary | None] = []
    for (run_id, at), raw_owner, size, ids in zip(runs, owners, sizes, lists, strict=True):
        counted = Counter(as_text(s) for s in (next(statuses) for _ in ids) if s is not None)
        if raw_owner is None and not ids:
            out.append(_archived(cold, run_id, at) if cold is not None else None)
            continue
        owner = RunOwner.decode(raw_owner) if raw_owner is not None else None
        out.append(
            RunSummary(
                run_id=run_id,
                tenant=owner.tenant_name if owner else DEFAULT_TENANT,
                owner=owner.principal if owner else None,
                last_dispatch_at=at,
                calls=size,
                statuses=dict(sorted(counted.items())),
                counted=len(ids),
            )
        )
    return out


def _archived(cold: ColdStore, run_id: str, at: float | None) -> RunSummary | None:
    """A run's summary from its archived calls; ``None`` when none was archived."""
    records = list(cold.records(cold.run_call_ids(run_id)).values())
    if not records:
        return None
    raw_owner = records[0].get("owner")
    owner = RunOwner.decode(raw_owner) if raw_owner else None
    counted = Counter(r.get("status", "") for r in records)
    return RunSummary(
        run_id=run_id,
        tenant=owner.tenant_name if owner else DEFAULT_TENANT,
        owner=owner.principal if owner else None,
        last_dispatch_at=at,
        calls=len(records),
        statuses=dict(sorted(counted.items())),
    )


def runs_page(
    redis: Any,
    scripts: Scripts,
    keys: Keys,
    *,
    limit: int,
    cursor: str | None = None,
    tenant: str | None = None,
    since: float | None = None,
    until: float | None = None,
    cold: ColdStore | None = None,
) -> Page[RunSummary]:
    """Runs last dispatched into within ``since``..``until``, newest first (one tenant's)."""
    check_limit(limit)
    lo, hi = bounds(since, until)
    index = keys.runs if tenant is None else keys.tenant_runs(tenant)

    def keep(chunk: Sequence[tuple[str, str]]) -> list[RunSummary | None]:
        return summaries(redis, keys, [(run_id, float(score)) for run_id, score in chunk], cold)

    items, next_cursor = walk(
        scripts, index, cursor=cursor, limit=limit, lo=lo, hi=hi, descending=True, keep=keep
    )
    hot = Page(items, next_cursor, int(redis.zcount(index, lo, hi)))
    if cold is None:
        return hot
    archived = _archived_page(redis, keys, cold, index, limit, cursor, tenant, since, until)
    return merge_pages([hot, archived], limit, key=lambda s: (s.last_dispatch_at or 0.0, s.run_id))


def _archived_page(
    redis: Any,
    keys: Keys,
    cold: ColdStore,
    index: str,
    limit: int,
    cursor: str | None,
    tenant: str | None,
    since: float | None,
    until: float | None,
) -> Page[RunSummary]:
    """A page of the history store's runs after ``cursor``, those still indexed left out."""
    after = Cursor.decode(cursor) if cursor else None
    wanted = RunBounds(tenant, since, until)
    rows = cold.runs(wanted, (float(after.score), after.member) if after else None, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    pipe = redis.pipeline(transaction=False)
    for run_id, _ in rows:
        pipe.zscore(index, run_id)
    indexed = pipe.execute() if rows else []
    shown = [row for row, score in zip(rows, indexed, strict=True) if score is None]
    items = [s for s in summaries(redis, keys, shown, cold) if s is not None]
    next_cursor = Cursor(repr(rows[-1][1]), rows[-1][0]).encode() if more else None
    lo, hi = bounds(since, until)
    live = [as_text(m) for m in redis.zrangebyscore(index, lo, hi)]
    total = cold.runs_total(wanted, besides=live)
    return Page(items, next_cursor, total)


def run_summary(redis: Any, keys: Keys, run_id: str, cold: ColdStore | None = None) -> RunSummary:
    """One run's summary; ``RunNotFoundError`` for a run with no calls and no owner."""
    at = redis.zscore(keys.runs, run_id)
    if at is None and cold is not None:
        at = cold.run_last_dispatch(run_id)
    [found] = summaries(redis, keys, [(run_id, float(at) if at is not None else None)], cold)
    if found is None:
        raise RunNotFoundError(f"unknown run id {run_id!r}", run_id=run_id)
    return found
