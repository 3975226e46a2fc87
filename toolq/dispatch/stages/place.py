"""``Place``: the call as the gate routed it: created queued, parked for approval, or denied."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from toolq.approvals.policy import digest_call, loosening_signature
from toolq.errors import ApprovalDeniedError
from toolq.models import CallStatus, EventType
from toolq.results.store import NewCall, Parking, dumps

if TYPE_CHECKING:
    from toolq.approvals.policy import ApprovalPolicy
    from toolq.dispatch.stages.base import CallPlan, DispatchPlan
    from toolq.registry.tool import Tool
    from toolq.settings import Settings


class Place:
    """Makes the plan's ``NewCall`` from its route and the tool's facts.

    The facts: risk, time limit, idempotence, approval metadata and preview.
    """

    refuses: ClassVar[bool] = False

    def __init__(self, settings: Settings, policy: ApprovalPolicy) -> None:
        self.settings = settings
        self.policy = policy

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` for this stage's question."""
        tool = plan.tool
        arguments = tool.redact(plan.envelope.arguments)
        data = {**plan.base, "risk": tool.risk.value, "arguments": arguments}
        if plan.route == "deny":
            plan.new = self._denied(plan, dispatch, data)
        elif plan.route == "park":
            plan.new = self._parked(plan, dispatch, tool, data)
        else:
            plan.new = self._queued(plan, dispatch, tool, data)

    def _denied(self, plan: CallPlan, dispatch: DispatchPlan, data: dict[str, Any]) -> NewCall:
        plan.envelope.arguments = data["arguments"]
        result = {
            "error": f"denied: tool {plan.tool.name!r} is denied for the rest of this run",
            "error_type": ApprovalDeniedError.code,
        }
        data.update(status=CallStatus.DENIED.value, by="rule", **result)
        return NewCall(
            plan.envelope,
            CallStatus.DENIED,
            EventType.DENIED,
            data,
            result=result,
            idempotency_key=plan.key,
            admin=dispatch.submission.admin,
            fingerprint=plan.fingerprint,
        )

    def _parked(
        self, plan: CallPlan, dispatch: DispatchPlan, tool: Tool, data: dict[str, Any]
    ) -> NewCall:
        deadline = time.time() + self.policy.deadline_seconds(tool, dispatch.rules)
        data.update(status=CallStatus.AWAITING_APPROVAL.value, deadline=deadline)
        metadata = tool.approval_metadata()
        parking = Parking(
            digest=digest_call(plan.envelope.name, plan.envelope.arguments),
            approval_metadata=dumps(metadata) if metadata is not None else "",
            preview=tool.has_preview,
        )
        return self._runnable(
            plan,
            dispatch,
            (CallStatus.AWAITING_APPROVAL, EventType.AWAITING_APPROVAL),
            data,
            deadline=deadline,
            parking=parking,
        )

    def _queued(
        self, plan: CallPlan, dispatch: DispatchPlan, tool: Tool, data: dict[str, Any]
    ) -> NewCall:
        data["status"] = CallStatus.QUEUED.value
        if tool.name in dispatch.rules.always_approve:
            data["approved_by"] = "rule"
        # Workers verify gated calls: one that runs by a loosening rule carries its signature.
        signed = loosening_signature(tool, dispatch.rules)
        approval = dumps(signed) if signed is not None else ""
        return self._runnable(
            plan, dispatch, (CallStatus.QUEUED, EventType.QUEUED), data, approval=approval
        )

    def _runnable(
        self,
        plan: CallPlan,
        dispatch: DispatchPlan,
        first: tuple[CallStatus, EventType],
        data: dict[str, Any],
        **extra: Any,
    ) -> NewCall:
        """A call that will run, or may once approved: the tool's run facts with ``extra``.

        Its final event comes later: it is copied to the submission's inbox (``notify``).
        """
        tool = plan.tool
        sub = dispatch.submission
        return NewCall(
            plan.envelope,
            *first,
            data,
            idempotent=tool.idempotent,
            timeout=tool.run_timeout(self.settings.default_timeout),
            idempotency_key=plan.key,
            admin=sub.admin,
            fingerprint=plan.fingerprint,
            notify=sub.notify or "",
            **extra,
        )
