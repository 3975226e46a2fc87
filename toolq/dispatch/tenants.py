"""What each tenant may do and is doing: its limits, its budget's use, its calls by state.

Read at request time from Redis (``GET /v1/tenants``, ``toolq tenants``, ``/metrics``),
nothing kept on the hot path: the counts come from the indexes of unfinished calls that
the call scripts keep anyway (queued and unsent, parked, running, and the admission
stage's backlogs) and each call's record fields ``tenant`` and ``throttled``, so a read
costs one pipelined ``HMGET`` per unfinished call; slot use is a ``ZCOUNT`` of the
admission stage's slot and start sets.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from toolq.dispatch.budgets import period_of
from toolq.keys import Keys
from toolq.models import CallStatus, RiskLevel
from toolq.quotas import (
    ANY_TENANT,
    DEFAULT_TENANT,
    OTHER_TENANTS,
    LimitScope,
    RateLimit,
    TenantConfig,
    tenant_config,
)
from toolq.results.connection import as_text

if TYPE_CHECKING:
    from toolq.dispatch.client import Client
    from toolq.registry.tool import Tool

COUNTED = (CallStatus.QUEUED, CallStatus.AWAITING_APPROVAL, CallStatus.RUNNING)
"""The unfinished states counted per tenant."""


class BudgetUse(BaseModel):
    """A tenant's budget in the current period (UTC)."""

    limit: float
    per: str
    used: float
    left: float
    period_start: float
    resets_at: float
    """When the next period starts (epoch seconds)."""


class TenantCalls(BaseModel):
    """A tenant's unfinished calls by state, fleet-wide, now."""

    queued: int = 0
    awaiting_approval: int = 0
    running: int = 0
    throttled: int = 0
    """Of the queued calls, those waiting in their backlog because a limit is reached
    (``call.throttled``)."""


class LimitUse(BaseModel):
    """What a tool or tenant uses of its fleet-wide limits, now."""

    slots_held: int = 0
    """Calls holding one of its concurrency slots (admitted, not finished)."""
    recent_starts: int = 0
    """Starts counted in its rate limit's current window."""


class TenantStatus(BaseModel):
    """One tenant: its configuration (its own entry, ``"*"``'s, or the defaults) and use."""

    tenant: str
    configured: bool
    """Named in ``TOOLQ_TENANTS`` (else it has ``"*"``'s configuration or the defaults)."""
    weight: float
    concurrency: int | None
    rate_limit: str | None
    budget: BudgetUse | None
    calls: TenantCalls = Field(default_factory=TenantCalls)
    use: LimitUse | None = None
    """Its concurrency slots and rate-limit starts in use (``None`` without such limits)."""


class ToolLimits(BaseModel):
    """A tool's fleet-wide limits and what one call costs."""

    name: str
    concurrency: int | None
    rate_limit: str | None
    cost: float | None
    """The cost of every call; ``None`` when a function of the arguments decides it."""
    cost_function: bool = False
    use: LimitUse | None = None
    """Its concurrency slots and rate-limit starts in use (``None`` without such limits)."""


class TenantDetail(TenantStatus):
    """``GET /v1/tenants/{tenant}``: one tenant, and the tools' limits."""

    tools: list[ToolLimits]


class TenantsReport(BaseModel):
    """``GET /v1/tenants``: every tenant configured or with unfinished calls, and the tools."""

    tenants: list[TenantStatus]
    tools: list[ToolLimits]


def tool_limits(tool: Tool, use: LimitUse | None = None) -> ToolLimits:
    """``tool``'s limits as reported, with ``use`` (what it uses of them now) if read."""
    rate = RateLimit.parse(tool.rate_limit) if tool.rate_limit is not None else None
    return ToolLimits(
        name=tool.name,
        concurrency=tool.concurrency,
        rate_limit=str(rate) if rate is not None else None,
        cost=None if callable(tool.cost) else float(tool.cost),
        cost_function=callable(tool.cost),
        use=use,
    )


def calls_by_tenant(client: Client, named: Sequence[str] | None = None) -> dict[str, TenantCalls]:
    """Unfinished calls per tenant, by state (records from before tenants: ``default``).

    With ``named`` (``/metrics``), parked calls are counted from the parked-calls indexes
    (a ``ZCARD`` per named tenant, whatever is parked) rather than call by call: each named
    tenant's, and every other tenant's together under ``OTHER_TENANTS``. With cells: the
    sum over every cell that answers.
    """
    counts: Counter[tuple[str, str]] = Counter()
    parked = CallStatus.AWAITING_APPROVAL.value
    for _, cell in client.reachable()[0]:
        r = cell.redis
        keys = cell.keys
        pipe = r.pipeline(transaction=False)
        scanned = [keys.queued, keys.unsent, keys.running]
        if named is None:
            scanned.append(keys.pending_approvals)
        for index in scanned:
            pipe.zrange(index, 0, -1)
        for level in RiskLevel:
            pipe.zrange(keys.lane(level), 0, -1)
        if named is not None:
            pipe.zcard(keys.parked)
            for tenant in named:
                pipe.zcard(keys.tenant_parked(tenant))
        found = pipe.execute()
        if named is not None:
            total, *each = found[-1 - len(named) :]
            found = found[: -1 - len(named)]
            for tenant, count in zip(named, each, strict=True):
                counts[(tenant, parked)] += count
            counts[(OTHER_TENANTS, parked)] += total - sum(each)
        ids = {as_text(c) for listed in found[: len(scanned)] for c in listed}
        backlogs = [as_text(b) for lane in found[len(scanned) :] for b in lane]
        ids.update(_waiting(r, keys, backlogs))
        if not ids:
            continue
        pipe = r.pipeline(transaction=False)
        for call_id in sorted(ids):
            pipe.hmget(keys.call(call_id), "status", "tenant", "throttled")
        for status, tenant, throttled in pipe.execute():
            if status is not None:
                name = as_text(tenant) if tenant else DEFAULT_TENANT
                counts[(name, as_text(status))] += 1
                if throttled and as_text(status) == CallStatus.QUEUED.value:
                    counts[(name, "throttled")] += 1
    out: dict[str, TenantCalls] = {}
    reported = {s.value for s in COUNTED} | {"throttled"}
    for (tenant, status), count in counts.items():
        if status in reported:
            calls = out.setdefault(tenant, TenantCalls())
            setattr(calls, status, getattr(calls, status) + count)
    return out


def _waiting(r: Any, keys: Keys, backlogs: list[str]) -> set[str]:
    """The calls waiting in ``backlogs``: each entry, and the calls a group's leader carries."""
    if not backlogs:
        return set()
    pipe = r.pipeline(transaction=False)
    for backlog in backlogs:
        pipe.lrange(backlog, 0, -1)
    leaders = sorted({as_text(c) for listed in pipe.execute() for c in listed})
    pipe = r.pipeline(transaction=False)
    for call_id in leaders:
        pipe.hget(keys.call(call_id), "carries")
    waiting = set(leaders)
    for carries in pipe.execute():
        if carries:
            waiting.update(str(c) for c in json.loads(carries))
    return waiting


class _Summed:
    """Numeric reads summed over every cell that answers: one pipeline per cell for all."""

    def __init__(self) -> None:
        self._reads: list[Callable[[Any, Keys], object]] = []

    def add(self, read: Callable[[Any, Keys], object]) -> int:
        """Queue ``read(pipeline, cell's keys)``; its total's index in ``run``'s answer."""
        self._reads.append(read)
        return len(self._reads) - 1

    def run(self, client: Client) -> list[float]:
        totals = [0.0] * len(self._reads)
        if not self._reads:
            return totals
        for _, cell in client.reachable()[0]:
            pipe = cell.redis.pipeline(transaction=False)
            for read in self._reads:
                read(pipe, cell.keys)
            for i, raw in enumerate(pipe.execute()):
                totals[i] += float(raw) if raw else 0.0
        return totals


_UseReads = tuple[int | None, int | None]
"""Where a limit's slots held and recent starts are in ``_Summed.run``'s answer."""


def _use_reads(
    reads: _Summed,
    scope: LimitScope,
    name: str,
    concurrency: int | None,
    rate: RateLimit | None,
    now_ms: int,
) -> _UseReads | None:
    """Queue the reads of a tool's or tenant's limit use (``None``: it has no limits)."""
    if concurrency is None and rate is None:
        return None
    held = started = None
    if concurrency is not None:
        held = reads.add(lambda pipe, keys: pipe.zcount(keys.slots(scope, name), now_ms, "+inf"))
    if rate is not None:
        since = now_ms - int(rate.seconds * 1000)
        started = reads.add(lambda pipe, keys: pipe.zcount(keys.starts(scope, name), since, "+inf"))
    return held, started


def _use(totals: list[float], at: _UseReads | None) -> LimitUse | None:
    if at is None:
        return None
    held, started = at
    return LimitUse(
        slots_held=int(totals[held]) if held is not None else 0,
        recent_starts=int(totals[started]) if started is not None else 0,
    )


def tenant_statuses(
    client: Client,
    names: Sequence[str],
    calls: dict[str, TenantCalls] | None = None,
    now: float | None = None,
) -> list[TenantStatus]:
    """Tenants' configuration, budget use, limit use and (given or) no calls.

    One pipeline per cell reads every tenant's budget and limits (with cells each cell
    charges and counts the runs it holds: the figures are their sums).
    """
    at = time.time() if now is None else now
    now_ms = int(at * 1000)
    reads = _Summed()
    planned = []
    for tenant in names:
        config: TenantConfig = tenant_config(client.settings.tenants, tenant)
        period = period_of(config.budget, at) if config.budget is not None else None
        spent = None
        if period is not None:
            spent = reads.add(_spent(tenant, period.name))
        use = _use_reads(reads, "tenant", tenant, config.concurrency, config.rate_limit, now_ms)
        planned.append((tenant, config, period, spent, use))
    totals = reads.run(client)
    statuses = []
    for tenant, config, period, spent, use in planned:
        budget = None
        if config.budget is not None and period is not None and spent is not None:
            used = totals[spent]
            budget = BudgetUse(
                limit=config.budget.limit,
                per=config.budget.per,
                used=used,
                left=max(0.0, config.budget.limit - used),
                period_start=period.start,
                resets_at=period.end,
            )
        statuses.append(
            TenantStatus(
                tenant=tenant,
                configured=tenant in client.settings.tenants and tenant != ANY_TENANT,
                weight=config.weight,
                concurrency=config.concurrency,
                rate_limit=str(config.rate_limit) if config.rate_limit is not None else None,
                budget=budget,
                calls=(calls or {}).get(tenant) or TenantCalls(),
                use=_use(totals, use),
            )
        )
    return statuses


def _spent(tenant: str, period: str) -> Callable[[Any, Keys], object]:
    return lambda pipe, keys: pipe.get(keys.tenant_spent(tenant, period))


def tools_in_use(client: Client) -> list[ToolLimits]:
    """Every tool's limits and what it uses of them now (one pipeline per cell)."""
    now_ms = int(time.time() * 1000)
    reads = _Summed()
    planned = []
    for tool in client.registry.list():
        rate = RateLimit.parse(tool.rate_limit) if tool.rate_limit is not None else None
        planned.append((tool, _use_reads(reads, "tool", tool.name, tool.concurrency, rate, now_ms)))
    totals = reads.run(client)
    return [tool_limits(tool, _use(totals, at)) for tool, at in planned]


def tenants_report(client: Client, only: str | None = None) -> TenantsReport:
    """Every tenant configured or with unfinished calls (or ``only`` that one), and tools."""
    calls = calls_by_tenant(client)
    if only is not None:
        names = [only]
    else:
        configured = {name for name in client.settings.tenants if name != ANY_TENANT}
        names = sorted(configured | set(calls) | {DEFAULT_TENANT})
    return TenantsReport(tenants=tenant_statuses(client, names, calls), tools=tools_in_use(client))
