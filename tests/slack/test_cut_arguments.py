"""A Slack message cuts long arguments: its Approve button would approve them whole, unseen."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.slack.conftest import button, interact, press, text_of
from tests.slack.test_slack_approvals import Stack, stack, value_of  # noqa: F401

pytestmark = pytest.mark.e2e


def test_approve_in_slack_never_approves_arguments_the_message_cut(stack: Stack):  # noqa: F811
    # The model puts a benign target first and what matters past the message's cut (2800).
    target = "staging-db " + "." * 3000 + " AND production-db"
    [call_id] = stack.dispatch("run-cut", ("w1", "wipe", {"target": target}))
    sent = stack.message(call_id)
    shown = text_of(sent.body["blocks"])
    assert "production-db" not in shown  # the message cut the arguments
    approve = button(sent.body["blocks"], "toolq.approve")
    if approve is not None:
        # The approver read the message and pressed Approve on what it showed.
        answered = interact(
            stack.api, press("toolq.approve", value_of(sent, "toolq.approve"), "UALICE")
        )
        assert answered.status_code == 200, answered.text
        time.sleep(0.5)
    got = httpx.get(
        f"{stack.api}/v1/calls/{call_id}", headers={"Authorization": "Bearer agent-t"}
    ).json()
    assert got["status"] == "awaiting_approval", (
        "Approve in a Slack message that cut the arguments approved them whole "
        f"(status {got['status']}): the approver never saw {json.dumps(target[-20:])}"
    )
