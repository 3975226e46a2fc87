"""``CallPlan``, ``DispatchPlan`` and ``Stage``: what the dispatcher's stages share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from toolq.errors import ToolDeniedError, ToolqError
from toolq.models import CallEnvelope, CallStatus, EventType, ToolCall
from toolq.results.store import NewCall

if TYPE_CHECKING:
    from toolq.approvals.policy import Route, RunRules
    from toolq.dispatch.submission import Submission
    from toolq.quotas import Budget
    from toolq.registry.tool import Tool


@dataclass(frozen=True)
class DispatchPlan:
    """What every call of one dispatch shares: its submission, run, rules and budget."""

    submission: Submission
    run_id: str
    rules: RunRules
    """The run's rules as they apply to the submitter's calls."""
    budget: Budget | None
    """The tenant's budget (``None``: nothing is charged)."""


@dataclass
class CallPlan:
    """One call on its way through the stages; ``new`` is set once its outcome is known."""

    call: ToolCall
    envelope: CallEnvelope
    key: str
    """The idempotency key the call is claimed under."""
    found: Tool | None
    """The call's tool as the registry has it (``None``: unknown to this process)."""
    fingerprint: str = ""
    """What the call's id names (``toolq.dispatch.conflicts``): every ``NewCall`` made for
    it is claimed with it."""
    cost: float = 0.0
    route: Route = "run"
    new: NewCall | None = None

    @property
    def tool(self) -> Tool:
        """The call's tool, once ``validate`` found it."""
        assert self.found is not None, "a stage past validate needs the tool"
        return self.found

    @property
    def base(self) -> dict[str, Any]:
        """The event data every first event of the call carries."""
        env = self.envelope
        return {
            "name": env.name,
            "tool_call_id": env.tool_call_id,
            "position": env.position,
            "tenant": env.tenant,
        }


class Stage(Protocol):
    """One step of a call's dispatch: asks the tool one question, fills in the plan."""

    refuses: ClassVar[bool]
    """A ``ToolqError`` it raises makes the call a failed (or denied) call."""

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` (or raise ``ToolqError``, when the stage ``refuses``)."""


def run_stages(stages: Sequence[Stage], plan: CallPlan, dispatch: DispatchPlan) -> NewCall:
    """The call ``plan`` becomes after ``stages``, in order."""
    for stage in stages:
        if plan.new is not None and plan.new.status not in _LIVE:
            break
        if not stage.refuses:
            stage(plan, dispatch)
            continue
        try:
            stage(plan, dispatch)
        except ToolqError as exc:
            plan.new = refused(plan, exc, dispatch.submission.admin)
            break
    assert plan.new is not None, "the route stage makes every call it reaches"
    return plan.new


def refused(plan: CallPlan, exc: ToolqError, admin: bool) -> NewCall:
    """The call a refusal makes: denied for ``ToolDeniedError``, else failed."""
    status = CallStatus.DENIED if isinstance(exc, ToolDeniedError) else CallStatus.FAILED
    envelope = plan.envelope
    # A call that will never run keeps its secrets masked, not encrypted.
    if plan.found is not None:
        envelope.arguments = plan.found.redact(plan.call.arguments, conservative=True)
    result = {"error": exc.message, "error_type": exc.code}
    event = EventType.DENIED if status is CallStatus.DENIED else EventType.FAILED
    data = {**plan.base, "status": status.value, **result, "arguments": envelope.arguments}
    return NewCall(
        envelope,
        status,
        event,
        data,
        result=result,
        idempotency_key=plan.key,
        admin=admin,
        fingerprint=plan.fingerprint,
    )


_LIVE = (CallStatus.QUEUED, CallStatus.AWAITING_APPROVAL)
"""The statuses of calls that will run, or may once approved: later stages still apply."""
