"""LangChain / LangGraph: ``ToolqTool``, a ``BaseTool`` (sync and async) that runs on toolq.

Install with ``pip install 'toolq[langchain]'``. ``toolq_tools(client)`` gives one tool per
active registry tool, for ``create_agent`` or ``ToolNode``. Each call is dispatched under the
model's tool call id into the toolq run of the graph's thread (``configurable.thread_id``,
unless a ``run_id`` is given). A call toolq parks calls LangGraph's ``interrupt`` with an
``approval_request`` naming the toolq call.

An approver decides that call in toolq (``ApprovalClient`` with their own token or a decision
token, the dashboard, the CLI); the tool never does. ``Command(resume=...)`` only answers the
interrupt: ``True`` / ``Approve()`` goes on, and a call toolq still holds parked interrupts the
graph again, one approved runs (with the approver's edit, if any), one denied or expired is an
error ``ToolMessage`` with toolq's message. ``False`` / ``Deny(reason=...)`` withdraws the
call (cancelled unless final already: not a denial; the model reads the reason). A resume
value that tries to decide (``Approve(arguments=...)``, ``{}`` included, ``note``, ``digest``,
``always``) raises ``NotAuthorizedError``. ``resume_command`` builds the ``Command`` from
answers keyed by tool call id, never by position.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.types import Command, Interrupt, interrupt
from pydantic import ConfigDict, PrivateAttr, ValidationError

from toolq.approvals.models import Approve, Deny
from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.errors import CallIdConflictError
from toolq.integrations._bridge import (
    Bridge,
    BridgeOptions,
    error_text,
    output_of,
    refused_on_resume,
)
from toolq.models import CallResult, CallStatus

APPROVAL_REQUEST = "toolq.approval_request"
"""``type`` of the value every toolq interrupt carries."""

_TOOL_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "toolq_tool_call_id", default=None
)
Resume = bool | Approve | Deny | Mapping[str, Any]
"""A resume value: go on (``True``, ``Approve()``) or withdraw (``False``, ``Deny``)."""


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
        state = _submitted(bridge, call_id, self.name, arguments)
        self._await_decision(bridge, state)
        return _returned(bridge.wait(state.call_id))

    async def _arun(self, config: RunnableConfig, **arguments: Any) -> Any:
        bridge, call_id = self._call(config)
        # one quick Redis round trip, not awaited: a cancelled task never leaves behind a
        # call it dispatched without knowing its id
        state = _submitted(bridge, call_id, self.name, arguments)
        self._await_decision(bridge, state)  # interrupt() raises; the call stays parked
        with bridge.cancelled_with_task(state.call_id):
            return _returned(await bridge.result(state.call_id))

    def _call(self, config: RunnableConfig) -> tuple[Bridge, str]:
        run = self._fixed_run or (config.get("configurable") or {}).get("thread_id")
        bridge = self._bridge.with_run(str(run)) if run else self._bridge
        return bridge, _TOOL_CALL_ID.get() or f"call_{uuid.uuid4().hex}"

    def _await_decision(self, bridge: Bridge, state: CallResult) -> None:
        """Interrupt the graph until an approver decided the call in toolq.

        A call that was ever parked interrupts at least once, so every resume value is
        read and checked, even one given after the approver decided. Each resume replays
        the interrupts before it (LangGraph re-runs the tool); after each answer the call's
        state is read again, and the loop ends once toolq decided it. A resume that
        withdraws the call raises ``ToolException`` with its reason.
        """
        request = bridge.request(state.call_id)
        if request.deadline is None:
            return  # never parked
        while True:
            answer = interrupt(
                {
                    "type": APPROVAL_REQUEST,
                    "tool_call_id": state.tool_call_id,
                    "call_id": state.call_id,
                    "run_id": bridge.run_id,
                    "name": self.name,
                    "status": request.status.value,
                    "arguments": request.arguments,
                    "risk": request.risk.value,
                    "digest": request.digest,
                    "preview": request.preview,
                    "approvals": request.approvals,
                }
            )
            reason = _withdrawal(answer, state.call_id)
            if reason is not None:
                withdrawn = bridge.withdraw(state.call_id)
                if withdrawn.status is CallStatus.CANCELLED:
                    raise ToolException(f"not run: {reason}")
                return  # it started (or ended) already: its outcome stands
            request = bridge.request(state.call_id)
            if request.status is not CallStatus.AWAITING_APPROVAL:
                return


def toolq_tools(
    client: Client | AsyncClient,
    *,
    tools: Iterable[str] | None = None,
    **options: Unpack[BridgeOptions],
) -> list[ToolqTool]:
    """One ``ToolqTool`` per active registry tool (or per name in ``tools``)."""
    bridge = Bridge(client, **options)
    wanted = set(tools) if tools is not None else None
    return [
        ToolqTool(
            bridge,
            fixed_run=bridge.fixed_run,
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


def resume_command(interrupts: Iterable[Interrupt], answers: Mapping[str, Resume]) -> Command[Any]:
    """``Command(resume={interrupt id: answer})`` from answers keyed by tool call id.

    A tool call id that has no pending toolq interrupt raises ``KeyError``.
    """
    pending = approval_requests(interrupts)
    missing = set(answers) - set(pending)
    if missing:
        raise KeyError(f"no pending toolq approval for tool call ids {sorted(missing)}")
    return Command(
        resume={pending[call_id].id: _wire(answer) for call_id, answer in answers.items()}
    )


def _wire(answer: Resume) -> Any:
    """An answer as plain data, so checkpoints stay serializable."""
    if isinstance(answer, Approve | Deny):
        return answer.model_dump(exclude_none=True)
    return answer if isinstance(answer, bool) else dict(answer)


def _withdrawal(answer: Any, call_id: str) -> str | None:
    """Read a resume value: None to go on, or the reason the app withdraws the call.

    ``True``/``Approve()`` (or ``{"kind": "approve"}``) go on; ``False``/``Deny(reason=...)``
    withdraw. A resume value cannot decide: an ``Approve`` with ``arguments`` (``{}``
    included), ``note``, ``digest`` or ``always``, or a ``Deny`` with ``always``, raises
    ``NotAuthorizedError``.
    """
    if answer is True:
        return None
    if answer is False:
        return "withdrawn"
    decision = _decision(answer)
    if isinstance(decision, Deny):
        if decision.always:
            raise refused_on_resume(call_id, "Deny(always=True)")
        return decision.reason or "withdrawn"
    if decision.arguments is not None:
        raise refused_on_resume(call_id, "Approve(arguments=...), an edit")
    if decision.note is not None or decision.digest is not None or decision.always:
        raise refused_on_resume(call_id, "Approve(note=..., digest=..., always=...)")
    return None


def _decision(answer: Any) -> Approve | Deny:
    """A resume value other than a bool as an ``Approve`` or a ``Deny``."""
    if isinstance(answer, Approve | Deny):
        return answer
    if isinstance(answer, Mapping) and answer.get("kind", "approve") in ("approve", "deny"):
        model = Deny if answer.get("kind") == "deny" else Approve
        try:
            return model.model_validate(dict(answer))
        except ValidationError:
            pass
    raise ToolException(f"cannot read the resume value {answer!r}")


def _submitted(
    bridge: Bridge, tool_call_id: str, name: str, arguments: dict[str, Any]
) -> CallResult:
    """``Bridge.submit``; a call id that names another call is an error the model reads."""
    try:
        return bridge.submit(tool_call_id, name, arguments)
    except CallIdConflictError as exc:
        raise ToolException(exc.message) from None


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
