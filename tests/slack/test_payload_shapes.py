"""A signed interaction of any shape, or one whose Slack Web API call fails, is never a 500."""

from __future__ import annotations

import pytest

from tests.slack.conftest import interact, press
from tests.slack.test_slack_approvals import Stack, stack, value_of  # noqa: F401

pytestmark = pytest.mark.e2e

DEEP = "[" * 100_000 + "]" * 100_000


def shapes(approve_value: str) -> list[dict]:
    """Payloads only Slack's signing secret can send: fields of the wrong JSON type."""
    good = press("toolq.approve", approve_value, "UALICE")
    return [
        {**good, "user": "UALICE"},
        {**good, "user": ["UALICE"], "team": "T1"},
        {**good, "team": ["T1"], "channel": "C1"},
        {**good, "actions": "toolq.approve"},
        {**good, "actions": [{"action_id": ["toolq.approve"], "value": approve_value}]},
        {**good, "actions": [{"action_id": "toolq.approve", "value": DEEP}]},
        {**good, "actions": [{"action_id": "toolq.approve", "value": "[1, 2]"}]},
        {**good, "actions": [{"action_id": "toolq.deny", "value": approve_value}], "trigger_id": 7},
        {"type": "view_submission", "user": {"id": "UALICE"}, "view": "V0MODAL"},
        {"type": "view_submission", "user": {"id": "UALICE"}, "view": ["V0MODAL"]},
        {
            "type": "view_submission",
            "user": {"id": "UALICE"},
            "view": {
                "callback_id": "toolq.deny",
                "private_metadata": approve_value,
                "state": {"values": {"reason": "not a block"}},
            },
        },
        {
            "type": "view_submission",
            "user": {"id": "UALICE"},
            "view": {
                "callback_id": "toolq.deny",
                "private_metadata": approve_value,
                "state": ["values"],
            },
        },
        {
            "type": "view_submission",
            "user": {"id": "UALICE"},
            "view": {"callback_id": "toolq.deny", "private_metadata": 12},
        },
    ]


def test_signed_payloads_of_the_wrong_shape_are_a_4xx_or_ignored(stack: Stack):  # noqa: F811
    [call_id] = stack.dispatch("run-shapes", ("w1", "wipe", {"target": "db"}))
    value = value_of(stack.message(call_id), "toolq.approve")
    for payload in shapes(value):
        answered = interact(stack.api, payload)
        assert answered.status_code in (200, 400), (payload, answered.status_code, answered.text)
        if answered.status_code == 400:
            assert answered.json()["error"]["code"] == "invalid_payload"
    # the deep value never reached a decision, nor did any other shape
    assert stack.call(call_id)["status"] == "awaiting_approval"


def test_a_deny_press_whose_modal_slack_refuses_is_not_a_500(stack: Stack):  # noqa: F811
    # Slack refuses views.open (an expired trigger_id: they live 3 s; here its rate limit)
    [call_id] = stack.dispatch("run-views-refused", ("w1", "wipe", {"target": "db"}))
    value = value_of(stack.message(call_id), "toolq.deny")
    stack.slack.limit["views.open"] = (10, 0)
    answered = interact(stack.api, press("toolq.deny", value, "UBOB"))
    assert answered.status_code in (200, 400), answered.text
    assert stack.call(call_id)["status"] == "awaiting_approval"
