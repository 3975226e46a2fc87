"""``Validate``: a well-formed call of a known, enabled, allowed tool, with valid arguments."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from toolq.errors import PayloadError, ToolDeniedError

if TYPE_CHECKING:
    from toolq.dispatch.stages.base import CallPlan, DispatchPlan
    from toolq.registry.registry import ToolRegistry


class Validate:
    """Refuses a broken call, an unknown, disabled or disallowed tool, or invalid arguments.

    Broken: the provider's payload marked it so; disallowed: not in the submission's
    behavior; invalid: the tool's schema rejects the arguments.
    """

    refuses: ClassVar[bool] = True

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    def __call__(self, plan: CallPlan, dispatch: DispatchPlan) -> None:
        """Fill in ``plan`` for this stage's question."""
        call = plan.call
        if call.error:
            raise PayloadError(call.error)
        tool = self.registry.require(call.name)
        plan.found = tool
        behavior = dispatch.submission.behavior
        if not tool.is_behavior_allowed(behavior):
            allowed = ", ".join(tool.allowed_behaviors or ())
            raise ToolDeniedError(
                f"tool {tool.name!r} is not allowed in behavior {behavior!r} (allowed: {allowed})",
                reason="behavior_not_allowed",
            )
        self.registry.check_enabled(tool)
        tool.validate(call.arguments)
