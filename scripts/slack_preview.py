"""Screenshots of toolq's Slack messages for the docs, rendered from their Block Kit payloads.

Slack's own client cannot run here, so this renders the exact blocks toolq posts
(``toolq.slack.blocks``, for sample calls) to HTML in a Slack-like style (header, section
fields, mrkdwn code spans and blocks, dates, mentions, buttons) and screenshots them in
Chromium (``/usr/bin/chromium``, Playwright). The layout is an approximation of Slack's;
the text and buttons are the payload's.

    python scripts/slack_preview.py docs/guide/img
"""

from __future__ import annotations

import html
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolq.approvals.models import ApprovalRequest
from toolq.models import CallStatus, RiskLevel
from toolq.slack import blocks
from toolq.slack.blocks import Outcome

PUBLIC = "https://toolq.example.com"
EMOJI = {
    ":white_check_mark:": "\u2705",
    ":no_entry:": "\u26d4",
    ":hourglass:": "\u231b",
    ":heavy_multiplication_x:": "\u2716",
    ":alarm_clock:": "\u23f0",
    ":rotating_light:": "\U0001f6a8",
    ":warning:": "\u26a0\ufe0f",
}
STYLE = """
body { margin: 0; background: #fff; font: 15px/1.46 -apple-system, "Segoe UI", Lato, sans-serif;
  color: #1d1c1d; }
.msg { display: flex; gap: 8px; padding: 16px 20px; width: 640px; }
.avatar { width: 36px; height: 36px; border-radius: 6px; background: #3b5bdb; color: #fff;
  font-weight: 700; display: flex; align-items: center; justify-content: center; flex: none; }
.who { font-weight: 900; } .app { font-size: 10px; background: #e8e8e8; color: #616061;
  padding: 1px 3px; border-radius: 2px; margin-left: 4px; vertical-align: 2px; }
.time { color: #616061; font-size: 12px; margin-left: 6px; }
.header { font-size: 18px; font-weight: 900; margin: 6px 0 4px; }
.section { margin: 6px 0; white-space: pre-wrap; }
.fields { display: grid; grid-template-columns: 1fr 1fr; gap: 8px 16px; margin: 8px 0; }
.fields div { white-space: pre-wrap; }
.context { color: #616061; font-size: 13px; margin: 4px 0; }
code { font: 12px Monaco, Menlo, Consolas, monospace; color: #e01e5a; background: #f6f6f6;
  border: 1px solid #e1e1e1; border-radius: 3px; padding: 1px 3px; }
pre { font: 12px Monaco, Menlo, Consolas, monospace; background: #f8f8f8; border: 1px solid #e1e1e1;
  border-radius: 4px; padding: 8px; margin: 4px 0; white-space: pre-wrap; }
.mention { background: #e8f5fa; color: #1264a3; border-radius: 3px; padding: 0 2px; }
a { color: #1264a3; text-decoration: none; }
.actions { display: flex; gap: 8px; margin: 10px 0 2px; }
.btn { border: 1px solid #bbb; border-radius: 4px; padding: 3px 12px; font-weight: 700;
  font-size: 14px; background: #fff; }
.btn.primary { background: #007a5a; border-color: #007a5a; color: #fff; }
.btn.danger { background: #fff; border-color: #e01e5a; color: #e01e5a; }
.thread { color: #1264a3; font-size: 13px; font-weight: 700; margin-top: 4px; }
.label { color: #616061; font: 12px/1 sans-serif; margin: 18px 20px 0; text-transform: uppercase;
  letter-spacing: .05em; }
"""


def mrkdwn(text: str) -> str:
    """Slack mrkdwn as HTML, for the constructs toolq's messages use."""
    blocks_found: list[str] = []

    def stash_block(match: re.Match[str]) -> str:
        blocks_found.append(f"<pre>{match.group(1)}</pre>")
        return f"\x00{len(blocks_found) - 1}\x00"

    out = re.sub(r"```(.*?)```", stash_block, text, flags=re.S)
    out = re.sub(r"`([^`]*)`", r"<code>\1</code>", out)

    def date(match: re.Match[str]) -> str:
        moment = datetime.fromtimestamp(int(match.group(1)), UTC)
        return moment.strftime("Today at %H:%M")

    out = re.sub(r"<!date\^(\d+)\^[^|>]*\|[^>]*>", date, out)
    out = re.sub(r"<!subteam\^(\w+)>", r'<span class="mention">@oncall-approvers</span>', out)
    out = re.sub(r"<@(\w+)>", r'<span class="mention">@\1</span>', out)
    out = re.sub(r"<(https?://[^|>]+)\|([^>]+)>", r'<a href="\1">\2</a>', out)
    out = re.sub(r"\*([^*\n]+)\*", r"<b>\1</b>", out)
    for code, char in EMOJI.items():
        out = out.replace(code, char)
    for index, block in enumerate(blocks_found):
        out = out.replace(f"\x00{index}\x00", block)
    return out


def text_html(obj: dict[str, Any]) -> str:
    """A text object (plain or mrkdwn) as HTML."""
    if obj.get("type") == "plain_text":
        return html.escape(obj["text"])
    return mrkdwn(obj["text"])


def render(payload: list[dict[str, Any]], thread: str | None = None) -> str:
    """One message (its blocks) as HTML."""
    parts = []
    for block in payload:
        kind = block["type"]
        if kind == "header":
            parts.append(f'<div class="header">{text_html(block["text"])}</div>')
        elif kind == "section" and "fields" in block:
            cells = "".join(f"<div>{text_html(f)}</div>" for f in block["fields"])
            parts.append(f'<div class="fields">{cells}</div>')
        elif kind == "section":
            parts.append(f'<div class="section">{text_html(block["text"])}</div>')
        elif kind == "context":
            parts.append(
                '<div class="context">'
                + " ".join(text_html(e) for e in block["elements"])
                + "</div>"
            )
        elif kind == "actions":
            buttons = "".join(
                f'<span class="btn {e.get("style", "")}">{html.escape(e["text"]["text"])}</span>'
                for e in block["elements"]
            )
            parts.append(f'<div class="actions">{buttons}</div>')
    if thread:
        parts.append(f'<div class="thread">{thread}</div>')
    return (
        '<div class="msg"><div class="avatar">tq</div><div><span class="who">toolq</span>'
        '<span class="app">APP</span><span class="time">10:42</span>'
        + "".join(parts)
        + "</div></div>"
    )


def sample(
    call_id: str, name: str, risk: RiskLevel, arguments: dict[str, Any], **extra: Any
) -> ApprovalRequest:
    """A parked call as approvers see it, for a screenshot."""
    now = time.time()
    values: dict[str, Any] = {
        "call_id": call_id,
        "run_id": "support-ticket-4711",
        "tool_call_id": "toolu_01",
        "name": name,
        "risk": risk,
        "status": CallStatus.AWAITING_APPROVAL,
        "arguments": arguments,
        "digest": "9f2c" * 16,
        "submitter": "support-agent",
        "tenant": "acme",
        "created_at": now,
        "deadline": now + 3600,
    }
    values.update(extra)
    return ApprovalRequest(**values)


def pages() -> dict[str, str]:
    """The messages to screenshot, by file name."""
    refund = sample(
        "c-7f3a",
        "issue_refund",
        RiskLevel.DANGEROUS,
        {"order": "A-1042", "amount": 480, "card_token": "***"},
        preview={"customer": "ann@example.com", "refund": "480.00 EUR", "order_total": "480.00"},
    )
    edit = sample(
        "c-91b2",
        "edit_file",
        RiskLevel.MODERATE,
        {"path": "config/limits.yaml", "content": "max_refund: 500\n"},
        diff={"diff_output": "@@ -1 +1 @@\n-max_refund: 200\n+max_refund: 500\n"},
    )
    digest = [
        sample(f"c-{i}", "tag_ticket", RiskLevel.MODERATE, {"ticket": 4711 + i, "tag": tag})
        for i, tag in enumerate(["billing", "refund", "priority"])
    ]
    approved = refund.model_copy(update={"status": CallStatus.QUEUED})
    denied = edit.model_copy(update={"status": CallStatus.DENIED})
    done = [
        digest[0].model_copy(update={"status": CallStatus.SUCCEEDED}),
        digest[1].model_copy(update={"status": CallStatus.SUCCEEDED}),
        digest[2],
    ]
    escalation = blocks.approval_blocks(refund, PUBLIC, mention="S0ONCALL")
    return {
        "slack-approval.png": render(blocks.approval_blocks(refund, PUBLIC), "1 reply"),
        "slack-diff.png": render(blocks.approval_blocks(edit, PUBLIC)),
        "slack-approved.png": render(
            blocks.approval_blocks(approved, PUBLIC, Outcome(CallStatus.QUEUED, by="alice"))
        ),
        "slack-denied.png": render(
            blocks.approval_blocks(
                denied,
                PUBLIC,
                Outcome(CallStatus.DENIED, by="bob", reason="limit stays at 200 until Q3"),
            )
        ),
        "slack-escalation.png": render(escalation),
        "slack-digest.png": render(blocks.digest_blocks("support-ticket-4711", digest, PUBLIC)),
        "slack-digest-after.png": render(blocks.digest_blocks("support-ticket-4711", done, PUBLIC)),
    }


def main(folder: str) -> None:
    """Write every screenshot into ``folder``."""
    from playwright.sync_api import sync_playwright

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 700, "height": 400}, device_scale_factor=2)
        for name, body in pages().items():
            page.set_content(f"<!doctype html><style>{STYLE}</style>{body}")
            page.locator(".msg").screenshot(path=str(out / name))
            print(f"wrote {out / name}")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/guide/img")
