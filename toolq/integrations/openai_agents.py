"""OpenAI Agents SDK: ``FunctionTool``s whose invocations run on toolq workers.

Install with ``pip install 'toolq[openai-agents]'``. ``ToolqAgentTools(client, run_id=...)``
gives one ``FunctionTool`` per active registry tool; all calls of one SDK run go to the
toolq run ``run_id``. ``needs_approval`` dispatches the call and answers with toolq's gate,
so a parked call is one of the run's interruptions. ``approve`` / ``reject`` decide the
parked toolq call and the SDK's ``RunState`` together (``arguments=`` approves an edit); a
plain ``state.approve(item)`` also works (the tool approves the call when it runs). A
``RunState`` serialized and resumed in another process finds the same parked call: the
tools look it up by the model's call id in the same toolq run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.integrations._bridge import Bridge, error_text, output_of
from toolq.models import CallStatus
from toolq.registry.tool import Tool


class ToolqAgentTools:
    """The registry's tools as Agents SDK ``FunctionTool``s bound to one toolq run."""

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        run_id: str | None = None,
        principal: str | None = None,
        approver: str = "openai-agents",
        behavior: str | None = None,
        tools: Iterable[str] | None = None,
    ) -> None:
        self.bridge = Bridge(
            client, run_id=run_id, principal=principal, approver=approver, behavior=behavior
        )
        wanted = set(tools) if tools is not None else None
        self.tools: list[FunctionTool] = [
            self._function_tool(tool)
            for tool in self.bridge.client.registry.active()
            if wanted is None or tool.name in wanted
        ]

    @property
    def run_id(self) -> str:
        """The toolq run every call goes to."""
        return self.bridge.run_id

    def approve(
        self,
        state: RunState[Any],
        item: ToolApprovalItem,
        *,
        arguments: dict[str, Any] | None = None,
        by: str | None = None,
    ) -> None:
        """Approve the parked toolq call behind ``item`` (``arguments`` as an edit) and ``item``."""
        found = self.bridge.find(_call_id(item))
        if found is not None:
            self.bridge.approve(found.call_id, arguments, by)
        state.approve(item)

    def reject(
        self, state: RunState[Any], item: ToolApprovalItem, message: str, *, by: str | None = None
    ) -> None:
        """Deny the parked toolq call behind ``item``; the model reads ``message``."""
        found = self.bridge.find(_call_id(item))
        if found is not None:
            self.bridge.deny(found.call_id, message, by)
        state.reject(item, rejection_message=message)

    def call_for(self, item: ToolApprovalItem) -> str | None:
        """The toolq call id behind an approval item, if it was dispatched."""
        found = self.bridge.find(_call_id(item))
        return found.call_id if found is not None else None

    def _function_tool(self, tool: Tool) -> FunctionTool:
        bridge = self.bridge

        async def needs_approval(
            ctx: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
        ) -> bool:
            # toolq's gate answers; a call it parks is dispatched now, so approvers see it
            if not bridge.would_park(tool.name, arguments):
                return False
            return bridge.submit(call_id, tool.name, arguments).status is (
                CallStatus.AWAITING_APPROVAL
            )

        async def invoke(ctx: ToolContext[Any], raw: str) -> Any:
            arguments = json.loads(raw) if raw else {}
            # one quick Redis round trip, not awaited: a cancelled task never leaves
            # behind a call it dispatched without knowing its id
            state = bridge.submit(ctx.tool_call_id, tool.name, arguments)
            with bridge.cancelled_with_task(state.call_id):
                if state.status is CallStatus.AWAITING_APPROVAL:
                    # the SDK runs a gated tool only once its approval was given
                    await asyncio.to_thread(bridge.approve, state.call_id, arguments)
                result = await bridge.result(state.call_id)
            if result.status is CallStatus.SUCCEEDED:
                return _text(output_of(result))
            return error_text(result)

        return FunctionTool(
            name=tool.name,
            description=tool.description or tool.name,
            params_json_schema=tool.input_schema,
            on_invoke_tool=invoke,
            strict_json_schema=False,
            needs_approval=needs_approval,
        )


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    if not isinstance(value, str):
        raise ValueError(f"approval item {item!r} carries no call id")
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


__all__ = ["ToolqAgentTools"]
