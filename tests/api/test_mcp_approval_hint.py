"""The text `toolq mcp` answers for a parked call names a command that can approve it."""

from __future__ import annotations

from toolq.api.mcp import render
from toolq.models import CallResult, CallStatus


def test_the_approval_hint_names_a_command_the_cli_accepts():
    parked = CallResult(
        call_id="c0ffee00c0ffee00c0ffee00c0ffee00",
        tool_call_id="t1",
        name="tickets_page_on_call",
        status=CallStatus.AWAITING_APPROVAL,
    )
    text = render(parked)["content"][0]["text"]
    # `toolq approvals approve ID --by NAME` alone exits 1: a signed approval needs the
    # registry (--app / TOOLQ_APP) or the API (--api URL --token TOKEN); docs/guide/cli.md.
    assert "toolq approvals approve c0ffee00c0ffee00c0ffee00c0ffee00" in text
    assert "--app" in text or "--api" in text, text
