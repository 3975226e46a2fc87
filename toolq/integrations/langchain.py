"""LangChain / LangGraph: ``ToolqTool``, a ``BaseTool`` (sync and async) that runs on toolq.

Install with ``pip install 'toolq[langchain]'``. ``toolq_tools(client)`` gives one tool per
active registry tool, for ``create_agent`` or ``ToolNode``. Each call is dispatched under the
model's tool call id into the toolq run of the graph's thread (``configurable.thread_id``,
unless a ``run_id`` is given). A call toolq parks calls LangGraph's ``interrupt`` with an
``approval_request``; ``Command(resume=...)`` decides it: ``True`` / ``{"kind": "approve",
"arguments": {...}}`` approves (the arguments as an edit), ``False`` / ``{"kind": "deny",
"reason": "..."}`` denies. ``resume_command`` builds that ``Command`` from decisions keyed
by tool call id, never by position.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.types import Command, Interrupt, interrupt
from pydantic import ConfigDict, PrivateAttr

from toolq.approvals.models import Approve, Deny
from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.integrations._bridge import Bridge, error_text, output_of
from toolq.models import CallResult, CallStatus

APPROVAL_REQUEST = "toolq.approval_request"
"""``type`` of the value every toolq interrupt carries."""

_TOOL_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "toolq_tool_call_id", default=None
)
Decision = bool | Approve | Deny | Mapping[str, Any]


class ToolqTool(BaseTool):
    """One registry tool; every invocation is a toolq call, awaited or parked."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    handle_tool_error: bool = True  # a failed call is an error ToolMessage the model reads
    _bridge: Bridge = PrivateAttr()
    _fixed_run: str | None = PrivateAttr(default=None)

    def __init__(self, bridge: Bridge, *, fixed_run: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._bridge = bridge
        self._fixed_run = bridge.run_id if fixed_run else None

    # the provider's call id reaches ``_run`` only through the context
    def run(self, tool_input: Any, *args: Any, tool_call_id: str | None = None, **kw: Any) -> Any:
        """See ``BaseTool.run``; remembers the tool call id for ``_run``."""
        token = _TOOL_CALL_ID.set(tool_call_id)
        try:
            return super().run(tool_input, *args, tool_call_id=tool_call_id, **kw)
        finally:
            _TOOL_CALL_ID.reset(token)

    async def arun(
        self, tool_input: Any, *args: Any, tool_call_id: str | None = None, **kw: Any
    ) -> Any:
        """See ``BaseTool.arun``; remembers the tool call id for ``_arun``."""
        token = _TOOL_CALL_ID.set(tool_call_id)
        try:
            return await super().arun(tool_input, *args, tool_call_id=tool_call_id, **kw)
        finally:
            _TOOL_CALL_ID.reset(token)

    def _run(self, config: RunnableConfig, **arguments: Any) -> Any:
        bridge, call_id = self._call(config)
        state = bridge.submit(call_id, self.name, arguments)
        if state.status is CallStatus.AWAITING_APPROVAL:
            self._decide(bridge, state, arguments)
        return _returned(bridge.wait(state.call_id))

    async def _arun(self, config: RunnableConfig, **arguments: Any) -> Any:
        bridge, call_id = self._call(config)
        # one quick Redis round trip, not awaited: a cancelled task never leaves behind a
        # call it dispatched without knowing its id
        state = bridge.submit(call_id, self.name, arguments)
        if state.status is CallStatus.AWAITING_APPROVAL:
            # interrupt() raises; the call stays parked for the resume
            self._decide(bridge, state, arguments)
        with bridge.cancelled_with_task(state.call_id):
            return _returned(await bridge.result(state.call_id))

    def _call(self, config: RunnableConfig) -> tuple[Bridge, str]:
        run = self._fixed_run or (config.get("configurable") or {}).get("thread_id")
        bridge = self._bridge.with_run(str(run)) if run else self._bridge
        return bridge, _TOOL_CALL_ID.get() or f"call_{uuid.uuid4().hex}"

    def _decide(self, bridge: Bridge, state: CallResult, arguments: dict[str, Any]) -> None:
        """Interrupt the graph with the approval request; apply the answer it resumes with."""
        request = bridge.request(state.call_id)
        answer = interrupt(
            {
                "type": APPROVAL_REQUEST,
                "tool_call_id": state.tool_call_id,
                "call_id": state.call_id,
                "run_id": bridge.run_id,
                "name": self.name,
                "arguments": request.arguments,
                "risk": request.risk.value,
                "digest": request.digest,
                "preview": request.preview,
            }
        )
        decision = _decision(answer)
        if isinstance(decision, Deny):
            bridge.deny(state.call_id, decision.reason, always=decision.always)
        else:
            bridge.approve(
                state.call_id,
                decision.arguments or arguments,
                note=decision.note,
                digest=decision.digest,
                always=decision.always,
            )


def toolq_tools(
    client: Client | AsyncClient,
    *,
    run_id: str | None = None,
    principal: str | None = None,
    approver: str = "langgraph",
    behavior: str | None = None,
    tools: Iterable[str] | None = None,
) -> list[ToolqTool]:
    """One ``ToolqTool`` per active registry tool (or per name in ``tools``)."""
    bridge = Bridge(
        client, run_id=run_id, principal=principal, approver=approver, behavior=behavior
    )
    wanted = set(tools) if tools is not None else None
    return [
        ToolqTool(
            bridge,
            fixed_run=run_id is not None,
            name=tool.name,
            description=tool.description or tool.name,
            args_schema=tool.input_schema,
        )
        for tool in bridge.client.registry.active()
        if wanted is None or tool.name in wanted
    ]


def approval_requests(interrupts: Iterable[Interrupt]) -> dict[str, Interrupt]:
    """The pending toolq interrupts, keyed by the model's tool call id."""
    return {
        item.value["tool_call_id"]: item
        for item in interrupts
        if isinstance(item.value, dict) and item.value.get("type") == APPROVAL_REQUEST
    }


def resume_command(
    interrupts: Iterable[Interrupt], decisions: Mapping[str, Decision]
) -> Command[Any]:
    """``Command(resume={interrupt id: decision})`` from decisions keyed by tool call id.

    A tool call id that has no pending toolq interrupt raises ``KeyError``.
    """
    pending = approval_requests(interrupts)
    missing = set(decisions) - set(pending)
    if missing:
        raise KeyError(f"no pending toolq approval for tool call ids {sorted(missing)}")
    return Command(
        resume={
            pending[call_id].id: _wire(decision) for call_id, decision in decisions.items()
        }
    )


def _wire(decision: Decision) -> Any:
    """A decision as plain data, so checkpoints stay serializable."""
    if isinstance(decision, Approve | Deny):
        return decision.model_dump(exclude_none=True)
    return decision if isinstance(decision, bool) else dict(decision)


def _decision(answer: Any) -> Approve | Deny:
    """Read a resume value: a bool, an ``Approve``/``Deny``, or their dict form."""
    if isinstance(answer, Approve | Deny):
        return answer
    if answer is True:
        return Approve()
    if answer is False:
        return Deny(reason="denied")
    if isinstance(answer, Mapping) and answer.get("kind") == "deny":
        return Deny.model_validate(dict(answer))
    if isinstance(answer, Mapping) and answer.get("kind", "approve") == "approve":
        return Approve.model_validate(dict(answer))
    raise ToolException(f"cannot read the approval decision {answer!r}")


def _returned(result: CallResult) -> Any:
    """A final toolq result as LangChain expects a tool's outcome."""
    if result.status is CallStatus.SUCCEEDED:
        return output_of(result)
    raise ToolException(error_text(result))


__all__ = [
    "APPROVAL_REQUEST",
    "ToolqTool",
    "approval_requests",
    "resume_command",
    "toolq_tools",
]
