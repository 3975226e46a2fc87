"""``Gate``: run, park for approval, or deny, as the approval policy routes the call."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from toolq.approvals.policy import ApprovalPolicy
    from toolq.dispatch.stages.base import CallPlan, DispatchPlan


class Gate:
    """Sets the plan's ``route``; the policy's predicates see the plaintext (in memory only)."""

    refuses: ClassVar[bool] = True

    def __init__(self, policy: ApprovalPolicy) -> None:
        self.policy = policy

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` for this stage's question."""
        plan.route = self.policy.route(plan.tool, plan.call.arguments, dispatch.rules)
