"""Approvals as data: what an approver sees, and the decisions they can make."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    computed_field,
    field_validator,
)

from toolq.models import CallStatus, Resolution, RiskLevel
from toolq.quotas import DEFAULT_TENANT


class ApprovalRequest(BaseModel):
    """A parked call as shown to approvers; secret arguments are redacted."""

    call_id: str
    run_id: str
    tool_call_id: str
    name: str
    risk: RiskLevel
    status: CallStatus
    arguments: dict[str, Any]
    original_arguments: dict[str, Any] | None = None
    digest: str
    """SHA-256 of the tool's name and the arguments as stored: what an approval binds."""
    submitter: str | None = None
    tenant: str = DEFAULT_TENANT
    created_at: float
    deadline: float | None = None
    approval_metadata: dict[str, Any] | None = None
    preview: Any = None
    preview_error: str | None = None
    diff: dict[str, Any] | None = None
    approvals: list[str] = Field(default_factory=list)
    decided_by: str | None = None

    @field_validator("approval_metadata")
    @classmethod
    def _metadata_shown_as_it_is(cls, metadata: dict[str, Any] | None) -> dict[str, Any] | None:
        """``approval_metadata()`` with its keys and strings ``visible``.

        It comes from tool code (or an upstream MCP server's annotations), and every view
        shows it as text beside the arguments.
        """
        return None if metadata is None else _escaped_strings(metadata)

    @field_validator("preview_error")
    @classmethod
    def _preview_error_shown_as_it_is(cls, error: str | None) -> str | None:
        """A failed preview's message (tool code's) ``visible``, as ``diff_output``.

        The dashboard and the call page show it beside the arguments.
        """
        return None if error is None else visible(error, "\n\t")

    @field_validator("diff")
    @classmethod
    def _diff_shown_as_it_is(cls, diff: dict[str, Any] | None) -> dict[str, Any] | None:
        """The rendered diff with hidden and reordering characters escaped (``visible``).

        A worker computes it from the tool's ``preview`` (tool code): every view shows
        ``diff_output`` as text, and it must not read as other text than it holds.
        """
        if diff is not None and isinstance(diff.get("diff_output"), str):
            return {**diff, "diff_output": visible(diff["diff_output"], "\n\t")}
        return diff

    @computed_field  # type: ignore[prop-decorator]
    @property
    def arguments_text(self) -> str:
        """``arguments`` as indented JSON text, every number exactly as it will run.

        What a browser shows: its ``JSON.parse`` rounds integers beyond 2**53 (an account
        number of 17 digits would be shown as another one), so the dashboard and the
        approval page show this text instead.
        """
        return _text(self.arguments)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def original_arguments_text(self) -> str | None:
        """``original_arguments`` (before an edit) as text, as ``arguments_text``."""
        return None if self.original_arguments is None else _text(self.original_arguments)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def preview_text(self) -> str | None:
        """``preview`` as text (a string ``visible``, else JSON as ``arguments_text``)."""
        if self.preview is None:
            return None
        if isinstance(self.preview, str):
            return visible(self.preview, "\n\t")
        return _text(self.preview)


def _escaped_strings(value: Any) -> Any:
    """``value`` with every string in it (dict keys too) ``visible``."""
    if isinstance(value, str):
        return visible(value, "\n\t")
    if isinstance(value, dict):
        return {_escaped_strings(k): _escaped_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped_strings(item) for item in value]
    return value


def _text(value: Any) -> str:
    """``value`` as indented JSON text: what a browser shows without parsing it.

    Characters that would show other text than the value holds are escaped (``visible``):
    the text is still JSON of the same value.
    """
    return visible(json.dumps(value, indent=2, ensure_ascii=False), "\n")


def visible(text: str, keep: str = "") -> str:
    r"""``text`` as a person is shown it: every character ``str.isprintable`` refuses, escaped.

    A call's arguments, its preview and any field a Redis writer set may carry characters
    that reorder or hide what is read (U+202E turns ``gnp.exe`` into ``exe.png`` on
    screen, U+200B hides in a name) or, on a terminal, escape sequences (move the cursor
    up, erase a line: other arguments painted over the ones a person is asked to approve).
    Each is shown as its JSON escape (``\u202e``), so JSON text keeps its value: what an
    approver reads on the dashboard, the approval page, Slack or the CLI is what runs.
    ``keep``: characters left as they are (``"\n"`` in text of several lines).
    """
    if text.isprintable() and not _IGNORABLE.search(text):
        return text
    return "".join(
        c if (c.isprintable() and not _IGNORABLE.match(c)) or c in keep else _escaped(c)
        for c in text
    )


_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)
"""Default-ignorable code points (Unicode's ``Default_Ignorable_Code_Point``) that
``str.isprintable`` accepts: drawn as nothing or as a blank, they hide in a value as U+200B
does (the others of that property are format characters, which it refuses)."""


def _escaped(char: str) -> str:
    """``char`` as a JSON escape (a surrogate pair beyond the BMP)."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class Approve(BaseModel):
    """Approve a call, optionally with edited arguments (re-validated before use).

    The body of ``POST /v1/approvals/{id}/approve`` (and of ``/v1/decisions/{id}/approve``,
    with a decision token). As a LangGraph resume value, ``Approve()`` only says "go on".
    """

    kind: Literal["approve"] = "approve"
    arguments: dict[str, Any] | None = None
    """The edited arguments: absent (None) leaves them as they are; ``{}`` is an edit to no
    arguments (the tool's defaults fill in; a required parameter refuses it)."""
    note: str | None = None
    digest: str | None = None
    """The digest (of the tool's name and arguments) the approver reviewed; a changed call is
    refused. Required by ``POST /v1/approvals/{id}/approve`` (the ``digest`` of ``GET
    /v1/approvals/{id}``); a decision token is bound to the digest it was issued for."""
    always: StrictBool = False
    """Also approve this tool for the rest of the run (a JSON ``true``: no string or number
    stands in for it)."""


class TokenRequest(BaseModel):
    """The body of ``POST /v1/approvals/{id}/decision-token``: what the approver reviewed.

    The token is bound to this digest (of the tool's name and arguments, the ``digest`` of
    ``GET /v1/approvals/{id}``): a call changed since it was reviewed gets no token
    (``digest_mismatch``), so its holder can only approve what the approver saw.
    """

    digest: str | None = None
    """Required (the route answers 422 without it)."""


class UndoData(BaseModel):
    """What undoing a call would pass to its tool's undo handler, as an approver reviews it.

    The answer of ``GET /v1/calls/{call_id}/undo`` (``Client.undo_data``). ``undo_digest``
    goes back with the undo (``UndoRequest``): the approval of a gated undo is signed for
    exactly this data, and data changed since is refused (``digest_mismatch``).
    """

    call_id: str
    tool: str
    gated: RiskLevel | None
    """The risk whose approver role the undo needs (``Client.undo_gate``); None: not gated."""
    undo_data: Any
    """The undo data parsed (None when it is not strict JSON: see ``undo_text``)."""
    undo_text: str
    """What the handler will get, whole: indented JSON, or the stored text when it is not
    strict JSON (``NaN``, too deeply nested): what an approver reviews."""
    undo_digest: str
    """SHA-256 of the undo data as stored (``toolq.approvals.undoing.undo_digest``)."""


class UndoRequest(BaseModel):
    """The body of ``POST /v1/calls/{call_id}/undo``: the undo data the caller reviewed.

    Required for the undo of a gated tool (an approver's decision, signed for that data);
    optional otherwise (checked when given).
    """

    model_config = ConfigDict(extra="forbid")

    undo_digest: str | None = Field(None, min_length=1, max_length=200)
    """``undo_digest`` of ``GET /v1/calls/{call_id}/undo``."""


class ShownCall(BaseModel):
    """A parked call as the approver reviewed it: its id and digest (of its tool and arguments)."""

    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(min_length=1, max_length=200)
    digest: str = Field(min_length=1, max_length=200)


class ApproveRun(BaseModel):
    """Approve the listed calls of a run, each as its arguments were shown.

    The body of ``POST /v1/runs/{run_id}/approvals/approve``. Only the listed calls are
    approved: one parked in the run after the listing the approver reviewed, or whose
    tool or arguments changed since (another digest), is not.
    """

    model_config = ConfigDict(extra="forbid")

    calls: list[ShownCall] = Field(min_length=1, max_length=1000)

    @field_validator("calls")
    @classmethod
    def _once_each(cls, calls: list[ShownCall]) -> list[ShownCall]:
        ids = [c.call_id for c in calls]
        if len(set(ids)) != len(ids):
            raise ValueError("a call is listed twice")
        return calls


class Deny(BaseModel):
    """Deny a call with a reason the model will read.

    The body of ``POST /v1/approvals/{id}/deny`` (and of ``/v1/decisions/{id}/deny``, with a
    decision token). As a LangGraph resume value, ``Deny`` withdraws the call.
    """

    kind: Literal["deny"] = "deny"
    reason: str = ""
    always: StrictBool = False
    """Also deny this tool for the rest of the run."""


class Resolve(BaseModel):
    """A person's outcome for a call of unknown outcome (lost with its worker mid-call).

    The body of ``POST /v1/calls/{id}/resolve``.
    """

    outcome: Resolution
    """``succeeded`` (it took effect), ``failed`` (it did not) or ``rerun`` (run it again)."""
    note: str | None = None
    """Why: stored with the decision and audited; the error the model reads on ``failed``."""
    result: str | None = None
    """The output text the model reads on ``succeeded`` (default: the note, else a line
    saying it took effect)."""


class AuditEntry(BaseModel):
    """One line of the audit stream: a decision, a refusal or an expiry."""

    id: str
    call_id: str
    run_id: str
    tool: str
    by: str
    outcome: str
    digest: str
    ts: float
    sig: str = ""
    """Signature of the deciding process over the fields above (empty: unsigned)."""
    system: bool = False
    """Written by a worker or the sweeper, which hold no signing key."""
    reason: str | None = None
    seq: int | None = None
    """The entry's place in the audit hash chain (1, 2, 3, ...; None: written before it)."""
    prev: str | None = None
    """The hash of the entry before (forty zeros for seq 1)."""
    hash: str | None = None
    """SHA1 of ``prev`` and the entry's fields (see the security model)."""
