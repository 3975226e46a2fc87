"""pydantic-ai: ``ToolqToolset``, an ``AbstractToolset`` whose calls run on toolq workers.

Install with ``pip install 'toolq[pydantic-ai]'``. Each call is dispatched under the model's
``tool_call_id`` into the toolq run of the agent's conversation (``ctx.conversation_id``,
unless a ``run_id`` is given). A call toolq parks raises ``ApprovalRequired``, so the run
ends with ``DeferredToolRequests``; ``requests.metadata[id]["toolq"]`` names the toolq call.

An approver decides that call in toolq (``ApprovalClient`` with their own token or a decision
token, the dashboard, the CLI); the toolset never does. Resuming with ``ToolApproved()``
only lets the run go on: a call toolq still holds parked ends the resumed run with
``DeferredToolRequests`` again, one approved runs (with the approver's edit, if any), one
denied or expired is a ``ToolFailed`` with toolq's message. ``ToolApproved(override_args=...)``
with other arguments than the model's raises ``NotAuthorizedError`` (``{}`` too: it is an
edit to no arguments). ``await toolset.deny(requests, tool_call_id, message)`` gives the
``ToolDenied`` and withdraws the call at once: cancelled in toolq unless final already (that
is not a denial; the model reads the message). A plain ``ToolDenied`` is withdrawn at the
resumed run's next step, which a resume that defers again never reaches: until the run
after it an approver could still approve the call. ``deferred_results`` turns toolq's
decisions into ``DeferredToolResults``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Unpack

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
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.errors import CallIdConflictError, InvalidArgumentsError, PayloadError
from toolq.integrations._bridge import (
    Bridge,
    BridgeOptions,
    error_text,
    is_settled_approval,
    output_of,
    refused_on_resume,
)
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
        tools: list[str] | None = None,
        id: str | None = "toolq",
        **options: Unpack[BridgeOptions],
    ) -> None:
        self.bridge = Bridge(client, **options)
        self._names = tools
        self._id = id
        self._withdrawn: set[tuple[str, str]] = set()  # (run id, tool call id)

    @property
    def id(self) -> str | None:
        """The toolset's id among the agent's toolsets."""
        return self._id

    def run_id(self, ctx: RunContext[Any] | None = None) -> str:
        """The toolq run a pydantic-ai run's calls go to."""
        if self.bridge.fixed_run or ctx is None or ctx.conversation_id is None:
            return self.bridge.run_id
        return ctx.conversation_id

    def _bridge(self, ctx: RunContext[Any]) -> Bridge:
        run = self.run_id(ctx)
        return self.bridge if run == self.bridge.run_id else self.bridge.with_run(run)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The registry's active tools (or the ones named), with their JSON schemas."""
        await self._withdraw_denied(ctx)
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
        """Run the call on a worker; ``ApprovalRequired`` while toolq holds it parked."""
        bridge = self._bridge(ctx)
        call_id = ctx.tool_call_id or ""
        sent = _sent_arguments(ctx, call_id, tool_args)
        if ctx.tool_call_approved and tool_args != sent:
            raise refused_on_resume(call_id, "ToolApproved(override_args=...), an edit")
        try:
            # one quick Redis round trip, not awaited: a cancelled task never leaves behind
            # a call it dispatched without knowing its id
            state = bridge.submit(call_id, name, sent)
        except (CallIdConflictError, PayloadError) as exc:
            # a reused id, or a call toolq refuses to store (over a limit): the model reads why
            raise ToolFailed(exc.message) from None
        # a cancel while a parked call's request is read leaves it parked (no one decided)
        with bridge.cancelled_with_task(state.call_id, keep_parked=True):
            if state.status is CallStatus.AWAITING_APPROVAL:
                # Undecided in toolq (whatever the resume said): deferred again.
                request = await asyncio.to_thread(bridge.request, state.call_id)
                raise ApprovalRequired(
                    metadata={
                        METADATA_KEY: {
                            "call_id": state.call_id,
                            "run_id": bridge.run_id,
                            "risk": request.risk.value,
                            "digest": request.digest,
                            "preview": request.preview,
                            "approvals": request.approvals,
                        }
                    }
                )
            return _returned(await bridge.result(state.call_id))

    async def deferred_results(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """The decisions toolq holds on ``requests``, ready to resume with.

        Approved calls are ``ToolApproved()``, denied or expired ones ``ToolDenied`` with
        toolq's message; calls still parked are left out (``requests.remaining(...)``).
        """
        results = DeferredToolResults()
        for part in requests.approvals:
            info = requests.metadata.get(part.tool_call_id, {}).get(METADATA_KEY)
            if not info:
                continue
            current = await asyncio.to_thread(self.bridge.status, info["call_id"])
            if is_settled_approval(current.status):
                results.approvals[part.tool_call_id] = ToolApproved()
            elif current.status.is_final:
                results.approvals[part.tool_call_id] = ToolDenied(error_text(current))
        return results

    async def deny(
        self, requests: DeferredToolRequests, tool_call_id: str, message: str
    ) -> ToolDenied:
        """``ToolDenied(message)`` for one of ``requests``, its toolq call withdrawn now.

        The call is cancelled unless final already (not a denial: no approver decided it);
        no later approval can run it. A plain ``ToolDenied`` is withdrawn only at the next
        step of the resumed run, and a resume that defers again (another call still
        parked) has none before it ends: until the run after it, an approver could still
        approve the call.
        """
        info = requests.metadata.get(tool_call_id, {}).get(METADATA_KEY)
        if info:
            bridge = self.bridge.with_run(info["run_id"])
            await asyncio.to_thread(bridge.withdraw, info["call_id"])
            self._withdrawn.add((info["run_id"], tool_call_id))
        return ToolDenied(message)

    def events(self, run_id: str, after: str | None = None) -> Iterator[Event]:
        """A toolq run's events so far (progress included); ``run_id`` as ``run_id(ctx)``."""
        return self.bridge.with_run(run_id).events(after)

    async def _withdraw_denied(self, ctx: RunContext[Any]) -> None:
        """Withdraw the toolq calls this run answered with ``ToolDenied``.

        pydantic-ai hands a denial to the model without calling the toolset, so the
        toolset finds it in the history the next step starts with.
        """
        bridge = self._bridge(ctx)
        denied = {
            part.tool_call_id: part.tool_name
            for message in ctx.messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
            and part.outcome == "denied"
            and (bridge.run_id, part.tool_call_id) not in self._withdrawn
        }
        if not denied:
            return

        def withdraw() -> None:
            for result in bridge.calls():
                if denied.get(result.tool_call_id) == result.name:
                    bridge.withdraw(result.call_id)

        await asyncio.to_thread(withdraw)
        self._withdrawn.update((bridge.run_id, tool_call_id) for tool_call_id in denied)


def _sent_arguments(ctx: RunContext[Any], call_id: str, given: dict[str, Any]) -> dict[str, Any]:
    """The arguments the model sent under ``call_id`` (``given`` may be a resume's override)."""
    for message in reversed(ctx.messages):
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
                return part.args_as_dict()
    return given


def _returned(result: CallResult) -> Any:
    """A final toolq result as pydantic-ai expects a tool's outcome."""
    if result.status is CallStatus.SUCCEEDED:
        return output_of(result)
    if result.error_type == InvalidArgumentsError.code:
        raise ModelRetry(result.error or "invalid arguments")
    raise ToolFailed(error_text(result))


__all__ = ["METADATA_KEY", "ToolqToolset"]
