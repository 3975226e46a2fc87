"""Block Kit messages for parked calls: one call's approval message, a run's digest.

Every value a user or model chose (tool, run, principal, arguments, preview, diff, reason)
is inert text: in ``mrkdwn`` escaped as Slack asks and inside code spans or blocks that it
cannot close (``toolq.webhooks.payload``), or in ``plain_text``. Buttons carry the call id
and the digest of the tool and arguments the message shows: a decision on a changed call is
refused. A name is shown only in an ``Outcome``, from a notice whose signature vouched for
it; the record's list of approvals so far (Redis data) is not (the approval page shows it,
as verified by the API).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from toolq.approvals.models import ApprovalRequest, visible
from toolq.models import CallStatus
from toolq.webhooks.payload import slack_code, slack_escaped

APPROVE = "toolq.approve"
DENY = "toolq.deny"
OPEN = "toolq.open"
APPROVE_RUN = "toolq.approve_run"
DENY_VIEW = "toolq.deny"
"""``callback_id`` of the deny modal (its reason input is block and action ``reason``)."""
REASON = "reason"

SECTION_CHARS = 2800
"""Longest text put in one section (Slack allows 3000)."""
DIGEST_MAX = 12
"""Most calls one digest message lists: its button's value carries each id and digest."""
SHOWN_CHARS = 160
"""Arguments shown per call in a digest."""


@dataclass(frozen=True)
class Outcome:
    """What happened to a call, as a message shows it in place of the buttons."""

    status: CallStatus
    by: str | None = None
    """Who decided, when a signature vouched for it (``toolq.webhooks.provenance``)."""
    reason: str | None = None
    partial: bool = False
    """An approval of a quorum that still needs others: the buttons stay."""


def approval_link(public_url: str | None, call_id: str) -> str | None:
    """The phone-sized approval page of a call (``toolq.api.approval_page``)."""
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/approve/{quote(call_id, safe='')}"


def code_block(value: object) -> str:
    """``value`` in a Slack code block it cannot close, cut to ``SECTION_CHARS``."""
    return f"```{_code_text(value)[0]}```"


def _code_text(value: object) -> tuple[str, bool]:
    """``value`` as code block text, cut to ``SECTION_CHARS``; whether it was cut."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    text = visible(text, "\n\t")  # nothing that reorders or hides what is read
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = escaped.replace("`", "\u02cb")
    if len(escaped) > SECTION_CHARS:
        return escaped[:SECTION_CHARS] + "\n…", True
    return escaped, False


def slack_date(ts: float, fallback: str = "") -> str:
    """A time every reader sees in their own time zone (Slack's date formatting)."""
    return f"<!date^{int(ts)}^{{date_short_pretty}} {{time}}|{fallback or int(ts)}>"


def _plain(text: str, limit: int = 150) -> dict[str, Any]:
    return {"type": "plain_text", "text": text[:limit], "emoji": False}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def button_value(request: ApprovalRequest) -> str:
    """What the Approve and Deny buttons carry: the call and the digest shown."""
    return json.dumps({"call": request.call_id, "digest": request.digest}, separators=(",", ":"))


def fallback_text(request: ApprovalRequest, outcome: Outcome | None = None) -> str:
    """The notification text (and what clients without blocks show)."""
    tool, run = slack_code(request.name), slack_code(request.run_id)
    what = "is waiting for approval" if outcome is None else outcome_line(outcome)
    return f"toolq: call {tool} ({request.risk.value}) in run {run}: {what}"


def outcome_line(outcome: Outcome) -> str:
    """One line saying what happened (mrkdwn)."""
    by = f" by {slack_code(outcome.by)}" if outcome.by else ""
    if outcome.status is CallStatus.AWAITING_APPROVAL or outcome.partial:
        return f":white_check_mark: Approved{by}; more approvals are needed"
    if outcome.status is CallStatus.DENIED:
        reason = f": {slack_escaped(outcome.reason)}" if outcome.reason else ""
        return f":no_entry: Denied{by}{reason}"
    if outcome.status is CallStatus.EXPIRED:
        return ":hourglass: Expired: nobody approved it in time, so it did not run"
    if outcome.status is CallStatus.CANCELLED:
        return ":heavy_multiplication_x: Cancelled: it will not run"
    return f":white_check_mark: Approved{by}"


def approval_blocks(
    request: ApprovalRequest,
    public_url: str | None,
    outcome: Outcome | None = None,
    *,
    mention: str | None = None,
) -> list[dict[str, Any]]:
    """The approval message of one call: its facts, then buttons or its outcome."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(f"Approval needed: {request.name}")},
    ]
    if mention:
        blocks.append(_section(f"{mention_of(mention)} this call is still waiting for a decision"))
    fields = [
        f"*Tool*\n{slack_code(request.name)}",
        f"*Risk*\n{slack_escaped(request.risk.value)}",
        f"*Run*\n{slack_code(request.run_id)}",
        f"*Submitter*\n{slack_code(request.submitter or '-')}",
        f"*Tenant*\n{slack_code(request.tenant)}",
    ]
    if request.deadline:
        fields.append(f"*Deadline*\n{slack_date(request.deadline)}")
    blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]})
    shown, cut = _code_text(request.arguments)
    blocks.append(_section(f"*Arguments* (secrets masked)\n```{shown}```"))
    if cut:
        # Approve binds the digest of the whole arguments: a message that shows part of them
        # offers no Approve (an agent could put what matters past the cut).
        blocks.append(
            _section("_arguments cut here: open the call to review them whole and approve it_")
        )
    if request.preview is not None:
        blocks.append(_section("*Preview*\n" + code_block(request.preview)))
    diff = (request.diff or {}).get("diff_output")
    if diff:
        blocks.append(_section("*Diff*\n" + code_block(diff)))
    link = approval_link(public_url, request.call_id)
    if outcome is not None and not outcome.partial:
        blocks.append(_section(outcome_line(outcome)))
        return blocks
    if outcome is not None:
        blocks.append(_section(outcome_line(outcome)))
    value = button_value(request)
    approve = {
        "type": "button",
        "action_id": APPROVE,
        "text": _plain("Approve"),
        "style": "primary",
        "value": value,
    }
    buttons: list[dict[str, Any]] = [
        *([] if cut else [approve]),
        {
            "type": "button",
            "action_id": DENY,
            "text": _plain("Deny"),
            "style": "danger",
            "value": value,
        },
    ]
    if link:
        buttons.append(
            {
                "type": "button",
                "action_id": OPEN,
                "text": _plain("Open"),
                "url": link,
                "value": value,
            }
        )
    blocks.append(
        {"type": "actions", "block_id": f"toolq:{request.call_id}"[:255], "elements": buttons}
    )
    return blocks


def mention_of(who: str) -> str:
    """A user group (``S...``) or user (``U...``, ``W...``) id as a mention."""
    return f"<!subteam^{who}>" if who.startswith("S") else f"<@{who}>"


def digest_blocks(
    run_id: str, requests: Sequence[ApprovalRequest], public_url: str | None
) -> list[dict[str, Any]]:
    """One run's parked calls in one message, with one "approve all in this run" button.

    The button approves exactly the calls listed with their arguments shown whole, as
    shown, each one on its own (signed and audited like any decision). A call whose
    arguments are longer than ``SHOWN_CHARS`` is listed cut and left out of the button:
    its own message, or its approval page, shows it whole (an agent could put what matters
    past the cut).
    """
    whole = {r.call_id for r in requests if len(_one_line(r.arguments)) <= SHOWN_CHARS}
    waiting = [
        r for r in requests if r.status is CallStatus.AWAITING_APPROVAL and r.call_id in whole
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(f"{len(requests)} calls waiting for approval")},
        _section(f"Run {slack_code(run_id)}"),
    ]
    for request in requests:
        shown = _one_line(request.arguments)
        cut = ""
        if len(shown) > SHOWN_CHARS:
            shown = shown[:SHOWN_CHARS] + "…"
            if request.status is CallStatus.AWAITING_APPROVAL:
                cut = "\n_arguments cut here: not in “approve all”; open it to review it whole_"
        state = (
            ""
            if request.status is CallStatus.AWAITING_APPROVAL
            else f" — *{slack_escaped(request.status.value)}*"
        )
        link = approval_link(public_url, request.call_id)
        opener = f" <{link}|open>" if link else ""
        text = (
            f"{slack_code(request.name)} ({slack_escaped(request.risk.value)}){state}\n"
            f"{slack_code(shown)}{opener}{cut}"
        )
        blocks.append(_section(text))
    if waiting:
        value = json.dumps(
            {"run": run_id, "calls": [[r.call_id, r.digest] for r in waiting]},
            separators=(",", ":"),
        )
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE_RUN,
                        "text": _plain(f"Approve all {len(waiting)} in this run"),
                        "style": "primary",
                        "value": value,
                    }
                ],
            }
        )
    return blocks


def _one_line(arguments: dict[str, Any]) -> str:
    """A call's arguments on one line, as a digest shows them.

    Nothing in it reorders or hides what is read (``visible``): "approve all" approves what
    was read.
    """
    return visible(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))


def digest_text(run_id: str, count: int) -> str:
    """The notification text of a digest message."""
    return f"toolq: {count} calls in run {slack_code(run_id)} are waiting for approval"


def deny_view(call_id: str, digest: str, channel: str | None) -> dict[str, Any]:
    """The modal asking for a deny reason; its metadata names the call and digest shown."""
    metadata = json.dumps({"call": call_id, "digest": digest, "channel": channel})
    return {
        "type": "modal",
        "callback_id": DENY_VIEW,
        "private_metadata": metadata,
        "title": _plain("Deny the call", 24),
        "submit": _plain("Deny", 24),
        "close": _plain("Cancel", 24),
        "blocks": [
            {
                "type": "input",
                "block_id": REASON,
                "optional": True,
                "label": _plain("Reason (the model reads it)"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON,
                    "multiline": True,
                    "max_length": 3000,
                },
            }
        ],
    }
