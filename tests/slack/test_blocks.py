"""Block Kit messages as built, before any Slack call: what an approver is shown is what a
button decides."""

from __future__ import annotations

import json
import time
from typing import Any

from toolq.approvals.models import ApprovalRequest
from toolq.models import CallStatus, RiskLevel
from toolq.slack.blocks import APPROVE_RUN, SHOWN_CHARS, digest_blocks


def request(call_id: str, arguments: dict[str, Any]) -> ApprovalRequest:
    return ApprovalRequest(
        call_id=call_id,
        run_id="r",
        tool_call_id=call_id,
        name="edit_file",
        risk=RiskLevel.MODERATE,
        status=CallStatus.AWAITING_APPROVAL,
        arguments=arguments,
        digest=f"d-{call_id}",
        submitter="agent",
        created_at=time.time(),
    )


def test_approve_all_leaves_out_the_calls_whose_arguments_the_digest_cuts():
    """The agent puts what matters past the digest's cut (a harmless-looking start, then
    the path it means): that call is listed cut, marked, and not in "approve all", which
    decides only the calls shown whole (it decided every call listed)."""
    short = request("a", {"path": "notes.txt", "content": "hello"})
    sneaky = request("b", {"content": "x" * SHOWN_CHARS, "path": "/etc/cron.d/backdoor"})
    blocks = digest_blocks("r", [short, sneaky], None)
    text = json.dumps(blocks, ensure_ascii=False)
    assert "/etc/cron.d/backdoor" not in text  # cut from the message...
    assert "not in “approve all”" in text
    [actions] = [b for b in blocks if b["type"] == "actions"]
    [button] = actions["elements"]
    assert button["action_id"] == APPROVE_RUN and button["text"]["text"] == (
        "Approve all 1 in this run"
    )
    assert json.loads(button["value"])["calls"] == [["a", "d-a"]]  # ...and from the button
    only_cut = digest_blocks("r", [sneaky], None)
    assert [b for b in only_cut if b["type"] == "actions"] == []
