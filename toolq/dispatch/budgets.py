"""Budgets: the calendar period (UTC) a charge falls in (a call's cost: ``Tool.cost_of``).

A call's cost is charged to its tenant's budget by the script that creates the call
(``create.lua``), so the charge and the call are one write: a retried dispatch finds the
call (``dup``) and charges nothing, and a call that would take the tenant past its limit is
created ``denied`` (``budget_exceeded``) instead of queued or parked. A charge is never
returned, and an approver's edit may not raise a call's cost past its charge (see the
docs: guide/tenants.md, "Budgets").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolq.quotas import Budget

KEY_GRACE_SECONDS = 3600
"""A period's spent counter outlives the period by this much (clocks of API and Redis)."""


@dataclass(frozen=True)
class BudgetPeriod:
    """One calendar period of a budget: its name (part of the counter's key) and bounds."""

    name: str
    start: float
    end: float

    @property
    def reset_at(self) -> str:
        """When the next period starts, ISO 8601 UTC (what the model reads)."""
        return datetime.fromtimestamp(self.end, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def key_ttl(self, now: float) -> int:
        """Seconds the counter of this period must live."""
        return max(1, math.ceil(self.end - now)) + KEY_GRACE_SECONDS


def period_of(budget: Budget, now: float) -> BudgetPeriod:
    """The period of ``budget`` that contains ``now`` (minute, hour, day or month, UTC)."""
    at = datetime.fromtimestamp(now, UTC)
    if budget.per == "minute":
        start = at.replace(second=0, microsecond=0)
        end = start + timedelta(minutes=1)
    elif budget.per == "hour":
        start = at.replace(minute=0, second=0, microsecond=0)
        end = start + timedelta(hours=1)
    elif budget.per == "day":
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=1)
    else:
        start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        next_month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
        end = start.replace(year=next_month[0], month=next_month[1])
    name = f"{budget.per}:{start.strftime('%Y-%m-%dT%H:%M')}"
    return BudgetPeriod(name, start.timestamp(), end.timestamp())
