"""What each tenant may do and is doing: its limits, its budget's use, its calls by state.

Read at request time from Redis (``GET /v1/tenants``, ``toolq tenants``, ``/metrics``),
nothing kept on the hot path: the counts come from the indexes of unfinished calls that
the call scripts keep anyway (queued and unsent, parked, running) and each call's record
field ``tenant``, so a read costs one pipelined ``HMGET`` per unfinished call.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from toolq.dispatch.budgets import period_of
from toolq.models import CallStatus
from toolq.quotas import ANY_TENANT, DEFAULT_TENANT, TenantConfig, tenant_config
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


class ToolLimits(BaseModel):
    """A tool's fleet-wide limits and what one call costs."""

    name: str
    concurrency: int | None
    rate_limit: str | None
    cost: float | None
    """The cost of every call; ``None`` when a function of the arguments decides it."""
    cost_function: bool = False


class TenantDetail(TenantStatus):
    """``GET /v1/tenants/{tenant}``: one tenant, and the tools' limits."""

    tools: list[ToolLimits]


class TenantsReport(BaseModel):
    """``GET /v1/tenants``: every tenant configured or with unfinished calls, and the tools."""

    tenants: list[TenantStatus]
    tools: list[ToolLimits]


def tool_limits(tool: Tool) -> ToolLimits:
    """``tool``'s limits as reported."""
    function = callable(tool.cost)
    return ToolLimits(
        name=tool.name,
        concurrency=tool.concurrency,
        rate_limit=str(tool.rate_limit) if tool.rate_limit is not None else None,
        cost=None if callable(tool.cost) else float(tool.cost),
        cost_function=function,
    )


def calls_by_tenant(client: Client) -> dict[str, TenantCalls]:
    """Unfinished calls per tenant, by state (records from before tenants: ``default``).

    With cells: the sum over every cell that answers.
    """
    counts: Counter[tuple[str, str]] = Counter()
    for _, cell in client.reachable()[0]:
        r = cell.redis
        keys = cell.keys
        pipe = r.pipeline(transaction=False)
        for index in (keys.queued, keys.unsent, keys.pending_approvals, keys.running):
            pipe.zrange(index, 0, -1)
        ids = sorted({as_text(c) for found in pipe.execute() for c in found})
        if not ids:
            continue
        pipe = r.pipeline(transaction=False)
        for call_id in ids:
            pipe.hmget(keys.call(call_id), "status", "tenant")
        for status, tenant in pipe.execute():
            if status is not None:
                counts[(as_text(tenant) if tenant else DEFAULT_TENANT, as_text(status))] += 1
    out: dict[str, TenantCalls] = {}
    for (tenant, status), count in counts.items():
        if status in {s.value for s in COUNTED}:
            calls = out.setdefault(tenant, TenantCalls())
            setattr(calls, status, getattr(calls, status) + count)
    return out


def tenant_status(
    client: Client, tenant: str, calls: TenantCalls | None = None, now: float | None = None
) -> TenantStatus:
    """One tenant's configuration, budget use and (given or) no calls."""
    tenants = client.settings.tenants
    config: TenantConfig = tenant_config(tenants, tenant)
    budget = None
    if config.budget is not None:
        at = time.time() if now is None else now
        period = period_of(config.budget, at)
        # With cells each cell charges the runs it holds: the use is their sum.
        used = 0.0
        for _, cell in client.reachable()[0]:
            raw: Any = cell.redis.get(cell.keys.tenant_spent(tenant, period.name))
            used += float(raw) if raw else 0.0
        budget = BudgetUse(
            limit=config.budget.limit,
            per=config.budget.per,
            used=used,
            left=max(0.0, config.budget.limit - used),
            period_start=period.start,
            resets_at=period.end,
        )
    return TenantStatus(
        tenant=tenant,
        configured=tenant in tenants and tenant != ANY_TENANT,
        weight=config.weight,
        concurrency=config.concurrency,
        rate_limit=str(config.rate_limit) if config.rate_limit is not None else None,
        budget=budget,
        calls=calls or TenantCalls(),
    )


def tenants_report(client: Client, only: str | None = None) -> TenantsReport:
    """Every tenant configured or with unfinished calls (or ``only`` that one), and tools."""
    calls = calls_by_tenant(client)
    if only is not None:
        names = [only]
    else:
        configured = {name for name in client.settings.tenants if name != ANY_TENANT}
        names = sorted(configured | set(calls) | {DEFAULT_TENANT})
    now = time.time()
    return TenantsReport(
        tenants=[tenant_status(client, name, calls.get(name), now) for name in names],
        tools=[tool_limits(tool) for tool in client.registry.list()],
    )
