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
answers keyed by tool call id, never by position: each resume value it makes carries the
answers by tool call id (``ANSWERS``), and every call reads all of its own on each replay,
whatever order LangGraph hands the values out in (calls interrupting in one task, as a
``ToolNode`` given several calls runs them, share that task's values).

A tool invoked without a ``ToolCall`` (a node calling ``tool.invoke(arguments, config)``)
has no provider call id: its call id is derived from the LangGraph task, the tool, the
arguments and how many such calls the task made before, so the node's replay on resume finds
the call it dispatched instead of dispatching another.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.types import Command, Interrupt, interrupt
from pydantic import ConfigDict, PrivateAttr, ValidationError

from toolq.approvals.models import Approve, Deny
from toolq.dispatch.async_client import AsyncClient
from toolq.dispatch.client import Client
from toolq.errors import CallIdConflictError, PayloadError
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

ANSWERS = "toolq.answers"
"""``type`` of a resume value ``resume_command`` makes: ``{"type", "answers": {tool call id:
answer}}``, read by each call for its own id."""

_SCRATCHPAD = "__pregel_scratchpad"
"""Where LangGraph keeps a task's resume values (``configurable``; ``interrupt`` reads it)."""

_DIRECT_CALLS: weakref.WeakKeyDictionary[Any, Counter[str]] = weakref.WeakKeyDictionary()
"""Per task execution: the calls it made so far without a provider call id. Keyed by its
scratchpad's ``get_null_resume`` (a function made per execution: the scratchpad itself is
neither hashable nor weakly referable), so it lives exactly as long as the execution."""
_DIRECT_LOCK = threading.Lock()

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
        bridge, call_id = self._call(config, arguments)
        state = _submitted(bridge, call_id, self.name, arguments)
        self._await_decision(bridge, state, config)
        return _returned(bridge.wait(state.call_id))

    async def _arun(self, config: RunnableConfig, **arguments: Any) -> Any:
        bridge, call_id = self._call(config, arguments)
        # one quick Redis round trip, not awaited: a cancelled task never leaves behind a
        # call it dispatched without knowing its id
        state = _submitted(bridge, call_id, self.name, arguments)
        self._await_decision(bridge, state, config)  # interrupt() raises; the call stays parked
        with bridge.cancelled_with_task(state.call_id):
            return _returned(await bridge.result(state.call_id))

    def _call(self, config: RunnableConfig, arguments: dict[str, Any]) -> tuple[Bridge, str]:
        run = self._fixed_run or (config.get("configurable") or {}).get("thread_id")
        bridge = self._bridge.with_run(str(run)) if run else self._bridge
        return bridge, _TOOL_CALL_ID.get() or _direct_call_id(config, self.name, arguments)

    def _await_decision(self, bridge: Bridge, state: CallResult, config: RunnableConfig) -> None:
        """Interrupt the graph until an approver decided the call in toolq.

        LangGraph re-runs the tool on every resume and hands a task's stored resume values
        to its ``interrupt()`` calls in order, the node's own questions included. So each
        replay interrupts exactly as often as the call did before (how often is kept in
        toolq: ``Bridge.asked``), reading the same values whatever toolq's state is now: a
        withdrawal given after a "go on" is never skipped, and the node's own questions
        after the call keep their answers. Only then is toolq's state read: decided, the
        call goes on; still parked, it interrupts once more. A call that was ever parked
        interrupts at least once. The answers ``resume_command`` made are also found by the
        call's tool call id among all the task's values, so calls interrupting in one task
        (a ``ToolNode`` given several calls) never take each other's. A withdrawal raises
        ``ToolException`` with its reason (or, when the call started already, lets its
        outcome stand).
        """
        request = bridge.request(state.call_id)
        if request.deadline is None:
            return  # never parked
        own = [
            value["answers"][state.tool_call_id]
            for value in _stored_answers(config)
            if _is_answers(value) and state.tool_call_id in value["answers"]
        ]
        for answer in own:
            if self._withdrawn(bridge, state, answer):
                return
        asked, made = bridge.asked(state.call_id), 0
        while True:
            if made >= asked:
                if made > 0:  # it asked before and read those answers: toolq decides now
                    request = bridge.request(state.call_id)
                    if request.status is not CallStatus.AWAITING_APPROVAL:
                        return
                asked = made + 1
                bridge.set_asked(state.call_id, asked)  # before interrupt(), which may pause
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
            )  # a stored value (LangGraph's order), or it pauses the graph (raises)
            made += 1
            if _is_answers(answer):
                continue  # read above when it holds this call's answer; never another's
            if self._withdrawn(bridge, state, answer):
                return

    @staticmethod
    def _withdrawn(bridge: Bridge, state: CallResult, answer: Any) -> bool:
        """Apply one answer: ``False`` to go on, ``True`` for a call withdrawn too late.

        A withdrawal cancels the call and raises ``ToolException`` with its reason; a call
        that started already keeps its outcome (``True``: wait for it).
        """
        reason = _withdrawal(answer, state.call_id)
        if reason is None:
            return False
        withdrawn = bridge.withdraw(state.call_id)
        if withdrawn.status is CallStatus.CANCELLED:
            raise ToolException(f"not run: {reason}")
        return True


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
    """``Command(resume={interrupt id: {"type": ANSWERS, "answers": {tool call id: answer}}})``.

    Each pending interrupt answered gets the answers of every call pending under the same
    interrupt id (calls that interrupt in one LangGraph task share it); each call reads its
    own by tool call id, never by position. A tool call id that has no pending toolq
    interrupt raises ``KeyError``.
    """
    pending = approval_requests(interrupts)
    missing = set(answers) - set(pending)
    if missing:
        raise KeyError(f"no pending toolq approval for tool call ids {sorted(missing)}")
    grouped: dict[str, dict[str, Any]] = {}
    for call_id, answer in answers.items():
        grouped.setdefault(pending[call_id].id, {})[call_id] = _wire(answer)
    return Command(
        resume={
            interrupt_id: {"type": ANSWERS, "answers": by_call}
            for interrupt_id, by_call in grouped.items()
        }
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


def _is_answers(value: Any) -> bool:
    """Whether a resume value is one ``resume_command`` made (answers by tool call id)."""
    return (
        isinstance(value, Mapping)
        and value.get("type") == ANSWERS
        and isinstance(value.get("answers"), Mapping)
    )


def _stored_answers(config: RunnableConfig) -> list[Any]:
    """The resume values LangGraph holds for the running task (``[]`` outside a graph)."""
    scratchpad = (config.get("configurable") or {}).get(_SCRATCHPAD)
    resume = getattr(scratchpad, "resume", None)
    return list(resume) if isinstance(resume, list) else []


def _direct_call_id(config: RunnableConfig, name: str, arguments: dict[str, Any]) -> str:
    """The call id of a call made without a provider call id, the same on every replay.

    Inside a LangGraph task: from the task (its checkpoint namespace, which a resumed task
    keeps), the tool, the arguments and how many equal calls the task made before in this
    execution. Elsewhere (no task to replay, or a LangGraph that keeps its task's state
    otherwise) a random one.
    """
    configurable = config.get("configurable") or {}
    task = configurable.get("checkpoint_ns")
    execution = getattr(configurable.get(_SCRATCHPAD), "get_null_resume", None)
    if execution is None or not task:
        return f"call_{uuid.uuid4().hex}"
    what = json.dumps([task, name, arguments], sort_keys=True, default=str)
    with _DIRECT_LOCK:  # a ToolNode runs its calls in threads
        counted = _DIRECT_CALLS.setdefault(execution, Counter())
        counted[what] += 1
        seen = counted[what]
    digest = hashlib.sha256(f"{what}\0{seen}".encode()).hexdigest()
    return f"call_{digest[:32]}"


def _submitted(
    bridge: Bridge, tool_call_id: str, name: str, arguments: dict[str, Any]
) -> CallResult:
    """``Bridge.submit``; a reused call id or a call over a limit is an error the model reads."""
    try:
        return bridge.submit(tool_call_id, name, arguments)
    except (CallIdConflictError, PayloadError) as exc:
        raise ToolException(exc.message) from None


def _returned(result: CallResult) -> Any:
    """A final toolq result as LangChain expects a tool's outcome."""
    if result.status is CallStatus.SUCCEEDED:
        return output_of(result)
    raise ToolException(error_text(result))


__all__ = [
    "ANSWERS",
    "APPROVAL_REQUEST",
    "ToolqTool",
    "approval_requests",
    "resume_command",
    "toolq_tools",
]
