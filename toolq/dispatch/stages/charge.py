"""``Charge``: a priced call's charge against its tenant's budget (``toolq.dispatch.budgets``).

CREATE charges it with the call's creation, or creates the call denied with
``budget_exceeded`` when the budget cannot take it: the charge carries that denied call.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, ClassVar

from toolq.dispatch.budgets import period_of
from toolq.errors import BudgetExceededError
from toolq.models import CallStatus
from toolq.results import scripts
from toolq.results.scripts.calls import BUDGET_LEFT_MARK
from toolq.results.store import NewCall, dumps

if TYPE_CHECKING:
    from toolq.dispatch.stages.base import CallPlan, DispatchPlan
    from toolq.quotas import Budget


class Charge:
    """Sets the new call's ``charge`` when it costs something and its tenant has a budget."""

    refuses: ClassVar[bool] = False

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` for this stage's question."""
        assert plan.new is not None
        if dispatch.budget is not None and plan.cost > 0:
            charge = charge_of(plan.new, plan.cost, dispatch.budget)
            plan.new = dataclasses.replace(plan.new, charge=charge)


def charge_of(new: NewCall, cost: float, budget: Budget) -> scripts.Charge:
    """``new``'s charge, and the denied call it becomes if the budget cannot take it."""
    env = new.envelope
    period = period_of(budget, time.time())
    result = {
        "error": (
            f"denied: this call of {env.name!r} costs {cost:g} but tenant {env.tenant!r} "
            f"has {BUDGET_LEFT_MARK} left of its budget of {budget.limit:g} per "
            f"{budget.per}; the budget resets at {period.reset_at}"
        ),
        "error_type": BudgetExceededError.code,
    }
    data = {
        key: value
        for key, value in new.event_data.items()
        if key in ("name", "tool_call_id", "position", "tenant", "risk", "arguments")
    }
    data.update(status=CallStatus.DENIED.value, by="budget", **result)
    masked = data["arguments"]
    return scripts.Charge(
        cost=cost,
        limit=budget.limit,
        period=period.name,
        ttl=period.key_ttl(time.time()),
        denied_result=dumps(result),
        denied_data=dumps(data),
        denied_envelope=(
            env.model_copy(update={"arguments": masked}).model_dump_json()
            if masked != env.arguments
            else ""
        ),
    )
