"""The data toolq moves around: calls, results, content blocks, events and their states."""

from __future__ import annotations

import os
import time
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from pydantic_core import to_jsonable_python

from toolq.quotas import DEFAULT_TENANT

RpcId = StrictInt | str
"""A JSON-RPC request id as sent: an integer stays an integer, a string stays a string."""


def new_id() -> str:
    """A random id of ``uuid.uuid4().hex``'s form: 32 hex digits, version 4, RFC 4122 variant.

    Made from the same 16 random bytes ``uuid4`` takes, without building a ``UUID``
    object (a third of the cost): a dispatch makes one per call and one per new run.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


_Member = TypeVar("_Member", bound=StrEnum)


def _parse_member(cls: type[_Member], value: _Member | str, what: str) -> _Member:
    """The member of ``cls`` that ``value`` is or names, in any case; ValueError naming all."""
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).lower())
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise ValueError(f"unknown {what} {value!r}; expected one of {choices}") from None


class RiskLevel(StrEnum):
    """How much harm a tool can do; each level has its own queue and worker pool."""

    SAFE = "safe"
    MODERATE = "moderate"
    DANGEROUS = "dangerous"

    @classmethod
    def parse(cls, value: RiskLevel | str) -> RiskLevel:
        """Accept a member or its name/value in any case (``"dangerous"``, ``"DANGEROUS"``)."""
        return _parse_member(cls, value, "risk level")


class ProviderFormat(StrEnum):
    """Wire formats toolq reads tool calls from and renders results into."""

    OPENAI = "openai"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    MCP = "mcp"

    @classmethod
    def parse(cls, value: ProviderFormat | str) -> ProviderFormat:
        """Accept a member or its value; a clear error names the valid formats."""
        return _parse_member(cls, value, "format")


class CallStatus(StrEnum):
    """Where a call is in its life; the final ones are ``FINAL_STATUSES``."""

    QUEUED = "queued"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    """Lost with its worker mid-call and not safe to run twice: whether its side effect
    happened is unknown. Parked for a person, who resolves it (``Resolution``): not final."""

    @property
    def is_final(self) -> bool:
        """True once the call can no longer change state."""
        return self in FINAL_STATUSES


class EventType(StrEnum):
    """Kinds of entries in a run's event stream."""

    QUEUED = "call.queued"
    AWAITING_APPROVAL = "call.awaiting_approval"
    APPROVED = "call.approved"
    DENIED = "call.denied"
    EXPIRED = "call.expired"
    STARTED = "call.started"
    PROGRESS = "call.progress"
    RETRYING = "call.retrying"
    THROTTLED = "call.throttled"
    SUCCEEDED = "call.succeeded"
    FAILED = "call.failed"
    CANCELLED = "call.cancelled"
    PREVIEWED = "call.previewed"
    UNDONE = "call.undone"
    UNDO_FAILED = "call.undo_failed"
    UNKNOWN = "call.unknown"
    """Its worker was lost mid-call; a person resolves it (``CallStatus.UNKNOWN``)."""

    @property
    def is_final(self) -> bool:
        """True for the event that records a call's final state (its data has that status)."""
        return self in FINAL_EVENTS


FINAL_EVENT_OF = {
    CallStatus.SUCCEEDED: EventType.SUCCEEDED,
    CallStatus.FAILED: EventType.FAILED,
    CallStatus.DENIED: EventType.DENIED,
    CallStatus.EXPIRED: EventType.EXPIRED,
    CallStatus.CANCELLED: EventType.CANCELLED,
}
"""The final states and, for each, the one event that records it: the one definition of
"final" (``CallStatus.is_final``, ``EventType.is_final`` and every waiter use it)."""
FINAL_STATUSES = frozenset(FINAL_EVENT_OF)
FINAL_EVENTS = frozenset(FINAL_EVENT_OF.values())


class AdmissionState(StrEnum):
    """A scheduled call's place in the admission stage (its record's ``admission``)."""

    WAITING = "waiting"
    """In its tenant's backlog, its message on its record, not pushed."""
    ADMITTED = "admitted"
    """Its message pushed onto its risk's queue by ADMIT."""


class AuditOutcome(StrEnum):
    """``outcome`` of an audit stream entry; a refused attempt is ``refused(reason)``."""

    APPROVED = "approved"
    APPROVED_PARTIAL = "approved:partial"
    """One approval of a quorum that still needs more."""
    DENIED = "denied"
    EXPIRED = "expired"
    ANCHOR = "anchor"
    """A deciding process's signature over the chain's head (``digest``: ``<seq>:<hash>``)."""
    RESOLVED_SUCCEEDED = "resolved:succeeded"
    """A call of unknown outcome recorded as having taken effect."""
    RESOLVED_FAILED = "resolved:failed"
    """A call of unknown outcome recorded as not having taken effect."""
    RESOLVED_RERUN = "resolved:rerun"
    """A call of unknown outcome sent to run again (a new attempt)."""

    @staticmethod
    def refused(reason: str) -> str:
        """``refused:<reason>``: an error code, the call's state, or a ``REFUSED_*`` reason."""
        return f"refused:{reason}"


REFUSED_STICKY_UNDER_QUORUM = "sticky_under_quorum"
"""Refusal reason: an ``always`` approval of a call that needs more than one approver."""
REFUSED_SAME_APPROVER = "same_approver"
"""Refusal reason: a second approval of one call by the same approver."""
REFUSED_NOT_REVIEWED = "not_reviewed"
"""Refusal reason: an approval without the digest of what its approver was shown."""
REFUSED_TOKEN_EDIT = "token_edit"
"""Refusal reason: a decision token's holder asked to approve other arguments."""
REFUSED_TOKEN_ALWAYS = "token_always"
"""Refusal reason: a decision token's holder asked for a sticky rule (``always``)."""


class Resolution(StrEnum):
    """What a person decides about a call of ``unknown`` outcome."""

    SUCCEEDED = "succeeded"
    """Its side effect happened: the call ends succeeded (with an optional result text)."""
    FAILED = "failed"
    """Its side effect did not happen: the call ends failed (the note is its error)."""
    RERUN = "rerun"
    """Run it again: queued for a new attempt."""


class PreviewState(StrEnum):
    """``preview_state`` of a parked call whose tool has a preview: pending → ready | failed."""

    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


class UndoState(StrEnum):
    """``undo_state`` of a call's record: requested → undoing → undone | failed."""

    REQUESTED = "requested"
    UNDOING = "undoing"
    UNDONE = "undone"
    FAILED = "failed"


# -- content blocks (MassGen's ExecutionResult output blocks) ------------------------------


class TextContent(BaseModel):
    """Plain text produced by a tool."""

    model_config = ConfigDict(frozen=True)
    type: Literal["text"] = "text"
    text: str


class ImageContent(BaseModel):
    """A base64-encoded image produced by a tool."""

    model_config = ConfigDict(frozen=True)
    type: Literal["image"] = "image"
    data: str
    mime_type: str = "image/png"


class AudioContent(BaseModel):
    """Base64-encoded audio produced by a tool."""

    model_config = ConfigDict(frozen=True)
    type: Literal["audio"] = "audio"
    data: str
    mime_type: str = "audio/wav"


ContentBlock = Annotated[TextContent | ImageContent | AudioContent, Field(discriminator="type")]


# -- calls in ---------------------------------------------------------------------------------


class ToolCall(BaseModel):
    """One tool call as the model asked for it.

    ``error`` is set (never raised) when the call cannot run as given, for example when its
    arguments are not valid JSON or not an object; the call still gets an answer.
    """

    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    format: ProviderFormat | None = None
    error: str | None = None
    rpc_id: RpcId | None = None
    """The JSON-RPC id of the MCP ``tools/call`` request the call came from; None otherwise."""


# -- results out ------------------------------------------------------------------------------


class ToolOutput(BaseModel):
    """What a handler may return to say more than a bare value (stageflow's ``ToolOutput``).

    A handler can also return any JSON-able value, which becomes ``CallResult.output``.
    """

    success: bool = True
    data: Any = None
    error: str | None = None
    content: list[ContentBlock] = Field(default_factory=list)
    artifacts: list[dict[str, Any]] = Field(default_factory=list)
    undo_metadata: dict[str, Any] | None = None

    @classmethod
    def ok(
        cls,
        data: Any = None,
        *,
        content: list[ContentBlock] | None = None,
        artifacts: list[dict[str, Any]] | None = None,
        undo_metadata: dict[str, Any] | None = None,
    ) -> ToolOutput:
        """A successful output, optionally with content blocks, artifacts and undo data."""
        return cls(
            data=data,
            content=content or [],
            artifacts=artifacts or [],
            undo_metadata=undo_metadata,
        )

    @classmethod
    def fail(cls, error: str, *, data: Any = None) -> ToolOutput:
        """A failed output whose message the model will read."""
        return cls(success=False, error=error, data=data)

    @classmethod
    def text(cls, text: str) -> ToolOutput:
        """A successful output made of one text block."""
        return cls(content=[TextContent(text=text)])


def jsonable(value: Any) -> Any:
    """A JSON-able copy of a handler's value: models dumped, dates ISO, unknown types as text."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return to_jsonable_python(value, fallback=str)


class CallResult(BaseModel):
    """The outcome of one call, final or not, as callers and renderers see it."""

    call_id: str
    tool_call_id: str
    name: str
    status: CallStatus
    output: Any = None
    error: str | None = None
    error_type: str | None = None
    content: list[ContentBlock] = Field(default_factory=list)
    artifacts: list[dict[str, Any]] = Field(default_factory=list)
    undo: dict[str, Any] | None = None
    duration_ms: float | None = None
    attempts: int = 0
    format: ProviderFormat | None = None
    run_id: str | None = None
    rpc_id: RpcId | None = None
    """The JSON-RPC id of the MCP request the call came from; its answer carries it back."""
    tenant: str = DEFAULT_TENANT
    """The tenant the call was run for."""
    retry_of: str | None = None
    """The call this one retries (``Client.retry``)."""
    retried_by: str | None = None
    """The call that retries this one."""

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.status is CallStatus.SUCCEEDED

    @property
    def is_final(self) -> bool:
        """True when the call can no longer change state."""
        return self.status.is_final


class Event(BaseModel):
    """One entry of a run's event stream; ``id`` is the Redis Stream id, ordered per run."""

    id: str
    type: EventType
    run_id: str
    call_id: str
    ts: float = Field(default_factory=time.time)
    data: dict[str, Any] = Field(default_factory=dict)


class CallEnvelope(BaseModel):
    """Everything a worker needs to run a call; stored in Redis as the call's record."""

    call_id: str
    run_id: str
    tool_call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    original_arguments: dict[str, Any] | None = None
    format: ProviderFormat | None = None
    risk: RiskLevel = RiskLevel.SAFE
    behavior: str | None = None
    principal: str | None = None
    tenant: str = DEFAULT_TENANT
    """The tenant the call is run for (``toolq.quotas``)."""
    idempotency_key: str | None = None
    created_at: float = Field(default_factory=time.time)
    position: int = 0
    traceparent: str | None = None
    """W3C trace context of the dispatch (``toolq.telemetry``); never part of the arguments,
    so approvals, which sign the arguments' digest, do not cover it."""
    tracestate: str | None = None
    rpc_id: RpcId | None = None
    """The JSON-RPC id of the MCP request the call came from, kept with its JSON type."""
