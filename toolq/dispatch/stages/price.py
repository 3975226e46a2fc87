"""``Price``: what the call costs, when its tenant has a budget (``Tool.cost_of``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from toolq.dispatch.stages.base import CallPlan, DispatchPlan


class Price:
    """Sets the plan's ``cost``; a cost function that fails fails its own call only."""

    refuses: ClassVar[bool] = True

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` for this stage's question."""
        if dispatch.budget is not None:
            plan.cost = plan.tool.cost_of(plan.call.arguments)
