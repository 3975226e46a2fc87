"""A ``requires_approval`` predicate sees a ``null`` that means "not given" as not given.

OpenAI's strict mode sends every property, ``null`` for the ones the model leaves out, and
toolq gives the handler the field's default for such a ``null``. A predicate that read the
raw ``null`` (``args.get("target", "prod")`` is ``None``, not ``"prod"``) let a model skip
the approval its default needs, and the handler still got ``"prod"``.
"""

from __future__ import annotations

from toolq import Client, ToolRegistry
from toolq.approvals.policy import RunRules, route
from toolq.models import CallStatus


def _registry() -> ToolRegistry:
    local = ToolRegistry()

    @local.tool(requires_approval=lambda args: args.get("target", "prod") == "prod")
    def ship(target: str = "prod") -> str:
        """Ship to a target; shipping to prod needs a person."""
        return f"shipped to {target}"

    return local


def test_a_null_for_a_defaulted_argument_cannot_skip_the_predicate(settings):
    local = _registry()
    payload = [
        {"id": f"call_{name}", "name": "ship", "arguments": arguments}
        for name, arguments in (
            ("null", {"target": None}),
            ("absent", {}),
            ("prod", {"target": "prod"}),
            ("dev", {"target": "dev"}),
        )
    ]
    with Client(local, settings) as c:
        statuses = {ref.tool_call_id: ref.status for ref in c.dispatch(payload).calls}
    assert statuses == {
        "call_null": CallStatus.AWAITING_APPROVAL,
        "call_absent": CallStatus.AWAITING_APPROVAL,
        "call_prod": CallStatus.AWAITING_APPROVAL,
        "call_dev": CallStatus.QUEUED,
    }
    # The worker's own gate (ApprovalGuard.gated: a Redis writer's 'queued' record of the
    # null call) agrees, and the handler would have got the default.
    tool = local.get("ship")
    assert tool is not None
    assert tool.schema.validate({"target": None}) == {"target": "prod"}
    assert route(tool, {"target": None}, RunRules()) == "park"
