"""pydantic-ai: ``ToolqToolset``, an ``AbstractToolset`` whose calls run on toolq workers.

Install with ``pip install 'toolq[pydantic-ai]'``. Each call is dispatched under the model's
``tool_call_id`` into the toolq run of the agent's conversation (``ctx.conversation_id``,
unless a ``run_id`` is given). A call toolq parks raises ``ApprovalRequired``, so the run
ends with ``DeferredToolRequests``; resuming with ``DeferredToolResults`` decides the parked
call: ``ToolApproved`` approves it (``override_args`` as an edit), ``ToolDenied`` denies it
with its message. ``deferred_results`` turns decisions made elsewhere (the dashboard, the
CLI) into ``DeferredToolResults`` for the resume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from pydantic_ai import (
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.errors import InvalidArgumentsError
from toolq.integrations._bridge import Bridge, error_text, is_settled_approval, output_of
from toolq.models import CallResult, CallStatus, Event

# toolq validates the arguments against the tool's own schema when it dispatches.
_ANY_ARGS = SchemaValidator(schema=core_schema.any_schema())

METADATA_KEY = "toolq"
"""Key of toolq's entry in ``DeferredToolRequests.metadata[tool_call_id]``."""


class ToolqToolset(AbstractToolset[Any]):
    """The registry's active tools, each call dispatched to toolq and awaited."""

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        run_id: str | None = None,
        principal: str | None = None,
        approver: str = "pydantic-ai",
        behavior: str | None = None,
        tools: list[str] | None = None,
        id: str | None = "toolq",
    ) -> None:
        self.bridge = Bridge(
            client, run_id=run_id, principal=principal, approver=approver, behavior=behavior
        )
        self._fixed_run = run_id
        self._names = tools
        self._id = id
        self._denials_sent: set[str] = set()

    @property
    def id(self) -> str | None:
        """The toolset's id among the agent's toolsets."""
        return self._id

    def run_id(self, ctx: RunContext[Any] | None = None) -> str:
        """The toolq run a pydantic-ai run's calls go to."""
        if self._fixed_run is not None or ctx is None or ctx.conversation_id is None:
            return self.bridge.run_id
        return ctx.conversation_id

    def _bridge(self, ctx: RunContext[Any]) -> Bridge:
        run = self.run_id(ctx)
        return self.bridge if run == self.bridge.run_id else self.bridge.with_run(run)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The registry's active tools (or the ones named), with their JSON schemas."""
        await self._send_denials(ctx)
        registry = self.bridge.client.registry
        tools = {}
        for tool in registry.active():
            if self._names is not None and tool.name not in self._names:
                continue
            definition = ToolDefinition(
                name=tool.name,
                description=tool.description,
                parameters_json_schema=tool.input_schema,
            )
            tools[tool.name] = ToolsetTool(
                toolset=self, tool_def=definition, max_retries=1, args_validator=_ANY_ARGS
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run the call on a worker; park it as ``ApprovalRequired`` while toolq holds it."""
        bridge = self._bridge(ctx)
        call_id = ctx.tool_call_id or ""
        # one quick Redis round trip, not awaited: a cancelled task never leaves behind a
        # call it dispatched without knowing its id
        state = bridge.submit(call_id, name, tool_args)
        with bridge.cancelled_with_task(state.call_id):
            return await self._finish(bridge, state, tool_args, ctx)

    async def _finish(
        self, bridge: Bridge, state: CallResult, tool_args: dict[str, Any], ctx: RunContext[Any]
    ) -> Any:
        if state.status is CallStatus.AWAITING_APPROVAL:
            if not ctx.tool_call_approved:
                request = await asyncio.to_thread(bridge.request, state.call_id)
                raise ApprovalRequired(
                    metadata={
                        METADATA_KEY: {
                            "call_id": state.call_id,
                            "run_id": bridge.run_id,
                            "risk": request.risk.value,
                            "digest": request.digest,
                            "preview": request.preview,
                        }
                    }
                )
            by = _approver(ctx.tool_call_metadata)
            await asyncio.to_thread(bridge.approve, state.call_id, tool_args, by)
        result = await bridge.result(state.call_id)
        return _returned(result)

    async def deferred_results(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """Decisions toolq holds already (dashboard, CLI) for ``requests``, ready to resume with.

        Calls still parked are left out (``requests.remaining(...)`` lists them).
        """
        results = DeferredToolResults()
        for part in requests.approvals:
            info = requests.metadata.get(part.tool_call_id, {}).get(METADATA_KEY)
            if not info:
                continue
            current = await asyncio.to_thread(self.bridge.client.result, info["call_id"])
            if is_settled_approval(current.status):
                results.approvals[part.tool_call_id] = ToolApproved()
            elif current.status.is_final:
                results.approvals[part.tool_call_id] = ToolDenied(error_text(current))
        return results

    def events(self, run_id: str, after: str | None = None) -> Iterator[Event]:
        """A toolq run's events so far (progress included); ``run_id`` as ``run_id(ctx)``."""
        return self.bridge.with_run(run_id).events(after)

    async def _send_denials(self, ctx: RunContext[Any]) -> None:
        """Deny in toolq the parked calls this run answered with ``ToolDenied``.

        pydantic-ai hands a denial to the model without calling the toolset, so the
        toolset finds it in the history the next step starts with.
        """
        denied = {
            part.tool_call_id: part.model_response_str()
            for message in ctx.messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
            and part.outcome == "denied"
            and part.tool_call_id not in self._denials_sent
        }
        if not denied:
            return
        bridge = self._bridge(ctx)

        def send() -> None:
            for result in bridge.client.results(bridge.run_id):
                reason = denied.get(result.tool_call_id)
                if reason is not None and result.status is CallStatus.AWAITING_APPROVAL:
                    bridge.deny(result.call_id, reason)

        await asyncio.to_thread(send)
        self._denials_sent.update(denied)


def _approver(metadata: Any) -> str | None:
    """Who approved, from ``DeferredToolResults.metadata[id]["approved_by"]`` if given."""
    if isinstance(metadata, dict):
        by = metadata.get("approved_by")
        return by if isinstance(by, str) and by else None
    return None


def _returned(result: CallResult) -> Any:
    """A final toolq result as pydantic-ai expects a tool's outcome."""
    if result.status is CallStatus.SUCCEEDED:
        return output_of(result)
    if result.error_type == InvalidArgumentsError.code:
        raise ModelRetry(result.error or "invalid arguments")
    raise ToolFailed(error_text(result))


__all__ = ["METADATA_KEY", "ToolqToolset"]
