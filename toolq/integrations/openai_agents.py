"""OpenAI Agents SDK: ``FunctionTool``s whose invocations run on toolq workers.

Install with ``pip install 'toolq[openai-agents]'``. ``ToolqAgentTools(client, run_id=...)``
gives one ``FunctionTool`` per active registry tool; all calls of one SDK run go to the
toolq run ``run_id``, which is required (``ConfigurationError`` without it: the SDK names no
run a resumed ``RunState`` could find its calls in). ``needs_approval`` dispatches the call
and answers with toolq's gate, so a parked call is one of the run's interruptions
(``call_for(item)`` names its toolq call).

An approver decides that call in toolq (``ApprovalClient`` with their own token or a decision
token, the dashboard, the CLI); the tools never do. ``state.approve(item)`` only lets the SDK
invoke the tool, which then waits until toolq's call is final: it runs once approved (with the
approver's edit, if any), and the model reads toolq's message when it is denied or expires.
``tools.reject(state, item, message)`` rejects ``item`` and withdraws its toolq call (cancelled
unless final already: not a denial); a plain ``state.reject(item)`` leaves the toolq call
parked until an approver decides it or it expires. A ``RunState`` serialized and resumed in
another process finds the same parked call: the tools look it up by the model's call id,
tool and arguments in the same toolq run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Unpack

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.errors import CallIdConflictError, ConfigurationError, PayloadError
from toolq.integrations._bridge import Bridge, BridgeOptions, error_text, output_of
from toolq.models import CallResult, CallStatus
from toolq.registry.tool import Tool


class ToolqAgentTools:
    """The registry's tools as Agents SDK ``FunctionTool``s bound to one toolq run."""

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        tools: Iterable[str] | None = None,
        **options: Unpack[BridgeOptions],
    ) -> None:
        self.bridge = Bridge(client, **options)
        if not self.bridge.fixed_run:
            # The SDK has no run id of its own to fall back on: a made-up one would differ in
            # the process that resumes a serialized RunState, which would then dispatch the
            # parked call again instead of finding it.
            raise ConfigurationError(
                "ToolqAgentTools needs the toolq run of the conversation (run_id=..., or a "
                "Submission naming one): a RunState resumed in another process finds its "
                "parked calls there"
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

    def reject(self, state: RunState[Any], item: ToolApprovalItem, message: str) -> None:
        """Reject ``item`` and withdraw its toolq call; the model reads ``message``."""
        found = self._found(item)
        if found is not None:
            self.bridge.withdraw(found.call_id)
        state.reject(item, rejection_message=message)

    def call_for(self, item: ToolApprovalItem) -> str | None:
        """The toolq call id behind an approval item, if it was dispatched."""
        found = self._found(item)
        return found.call_id if found is not None else None

    def _found(self, item: ToolApprovalItem) -> CallResult | None:
        name = _field(item, "name") or item.tool_name or ""
        raw = _field(item, "arguments")
        try:
            arguments = _arguments(raw) if isinstance(raw, str) else {}
        except ValueError:
            return None  # not JSON: the tool dispatches no call for it (see invoke)
        return self.bridge.find(_call_id(item), name, arguments)

    def _function_tool(self, tool: Tool) -> FunctionTool:
        bridge = self.bridge

        async def needs_approval(
            ctx: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
        ) -> bool:
            # toolq's gate answers; a call it parks is dispatched now, so approvers see it
            if not bridge.would_park(tool.name, arguments):
                return False
            try:
                state = bridge.submit(call_id, tool.name, arguments)
            except (CallIdConflictError, PayloadError):
                return False  # the tool reports the refusal when it is invoked
            return state.status is CallStatus.AWAITING_APPROVAL

        async def invoke(ctx: ToolContext[Any], raw: str) -> Any:
            try:
                arguments = _arguments(raw)
            except ValueError as exc:
                # the SDK interrupts for such a call without asking needs_approval: nothing
                # was dispatched, and the model reads why
                return f"Error: arguments are not valid JSON: {exc}"
            try:
                # one quick Redis round trip, not awaited: a cancelled task never leaves behind
                # a call it dispatched without knowing its id
                state = bridge.submit(ctx.tool_call_id, tool.name, arguments)
            except (CallIdConflictError, PayloadError) as exc:
                return exc.message
            # a cancelled wait on a person leaves the call parked for the next resume
            with bridge.cancelled_with_task(state.call_id, keep_parked=True):
                # a parked call is final once an approver decided it in toolq and it ran
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


def _field(item: ToolApprovalItem, name: str) -> Any:
    raw = item.raw_item
    return raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)


def _call_id(item: ToolApprovalItem) -> str:
    value = _field(item, "call_id")
    if not isinstance(value, str):
        raise ValueError(f"approval item {item!r} carries no call id")
    return value


def _arguments(raw: str | None) -> Any:
    """The model's arguments text as JSON (``{}`` when empty); ``ValueError`` if not JSON."""
    return json.loads(raw) if raw else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


__all__ = ["ToolqAgentTools"]
