"""What a webhook receives: toolq's JSON document, or ``{"text": ...}`` for Slack.

Only fields of the event that approvers may see go out: arguments as events carry them
(secret values masked), never a call's output. In Slack's text every value a user or model
chose (tool, run id, principal, error, reason) is inert: ``&``, ``<`` and ``>`` escaped as
Slack asks (no ``<!channel>``, no ``<url|label>`` link), on one line, and inside code spans
without a backtick that would close them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from toolq.models import EventType

SHOWN_FIELDS = (
    "status",
    "tenant",
    "arguments",
    "edited_arguments",
    "deadline",
    "by",
    "approved_by",
    "decision",
    "reason",
    "error",
    "error_type",
    "attempts",
    "duration_ms",
)
"""Event data fields a notification carries; everything else stays in Redis (``tenant``
is in a call's first event: queued, awaiting_approval, or failed/denied at dispatch)."""


@dataclass(frozen=True)
class Notice:
    """One event on its way to one endpoint, as read from a delivery record."""

    delivery_id: str
    type: str
    call_id: str
    run_id: str
    tool: str
    risk: str
    ts: float
    data: dict[str, Any]

    def link(self, public_url: str | None) -> str | None:
        """The call's page on the dashboard, when ``TOOLQ_PUBLIC_URL`` is set."""
        if not public_url:
            return None
        return f"{public_url.rstrip('/')}/#/calls/{quote(self.call_id, safe='')}"


def document(notice: Notice, public_url: str | None) -> dict[str, Any]:
    """The JSON document toolq sends (``format: json``)."""
    return {
        "id": notice.delivery_id,
        "type": notice.type,
        "ts": notice.ts,
        "call": {
            "id": notice.call_id,
            "run_id": notice.run_id,
            "tool": notice.tool,
            "risk": notice.risk,
        },
        "data": {k: notice.data[k] for k in SHOWN_FIELDS if k in notice.data},
        "url": notice.link(public_url),
    }


_SAID = {
    EventType.AWAITING_APPROVAL.value: "is waiting for approval",
    EventType.APPROVED.value: "was approved",
    EventType.DENIED.value: "was denied",
    EventType.EXPIRED.value: "expired: nobody approved it in time",
    EventType.FAILED.value: "failed",
    EventType.SUCCEEDED.value: "succeeded",
    EventType.CANCELLED.value: "was cancelled",
}


def slack_escaped(value: object) -> str:
    """``value`` as inert Slack text: on one line, ``&``, ``<``, ``>`` escaped."""
    text = " ".join(str(value).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_code(value: object) -> str:
    """``value`` in a Slack code span; a backtick in it becomes one that closes nothing."""
    return "`" + slack_escaped(value).replace("`", "\u02cb") + "`"


def slack_text(notice: Notice, public_url: str | None) -> str:
    """One line for a chat channel, linking to the call's page."""
    what = _SAID.get(notice.type, slack_escaped(notice.type))
    tool, risk, run = slack_code(notice.tool), slack_escaped(notice.risk), slack_code(notice.run_id)
    text = f"toolq: call {tool} ({risk}) in run {run} {what}"
    by = notice.data.get("by")
    if by and notice.type in (EventType.APPROVED.value, EventType.DENIED.value):
        text += f" by {slack_code(by)}"
    error = notice.data.get("reason") or notice.data.get("error")
    if error and notice.type != EventType.APPROVED.value:
        text += f": {slack_escaped(error)}"
    link = notice.link(public_url)
    return f"{text} <{slack_escaped(link)}|open>" if link else text


def body(notice: Notice, format: str, public_url: str | None) -> bytes:
    """The request body for an endpoint of ``format``."""
    value = (
        {"text": slack_text(notice, public_url)}
        if format == "slack"
        else document(notice, public_url)
    )
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
