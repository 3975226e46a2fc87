"""Hostile input found by fuzzing the HTTP API: each is a 4xx that says why, never a 500,
and a refused request writes nothing (no call decided, no call dispatched)."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import h

pytestmark = pytest.mark.e2e

MAX_ID = 2**64 - 1
"""The largest part of a Redis stream id: ``<MAX_ID>-<MAX_ID>`` is the largest id there is."""


def test_a_bearer_token_with_non_ascii_bytes_is_a_401_not_a_500(api):
    # secrets.compare_digest refuses str with non-ASCII characters (TypeError); a header
    # value arrives as latin-1 text, so any byte over 0x7f in the token reached it.
    for token in (b"\xff\xfe", "agent-t\u00e9".encode(), "jeton-\u00e9t\u00e9".encode()):
        got = httpx.get(f"{api}/v1/tools", headers={"Authorization": b"Bearer " + token})
        assert got.status_code == 401, got.text
        assert got.json()["error"]["code"] == "unauthenticated"


def test_events_after_the_largest_stream_id_are_not_a_500(api, client):
    client.dispatch(
        [{"id": "c1", "name": "wipe", "arguments": {"target": "t"}}],
        run_id="run-max-id",
        principal="agent",
    )
    largest = f"{MAX_ID}-{MAX_ID}"
    for params, headers in (
        ({"follow": "false", "after": largest}, h("agent-t")),
        ({"follow": "false"}, {**h("agent-t"), "Last-Event-ID": largest}),
    ):
        got = httpx.get(f"{api}/v1/runs/run-max-id/events", params=params, headers=headers)
        # Redis refuses XRANGE from "(<largest>" ("invalid start ID for the interval"):
        # there is nothing after it, so the answer is no events or a 400, not a 500.
        assert got.status_code < 500, got.text
        assert got.status_code == 400 or got.json() == [], got.text


def _parked(api: str, run_id: str) -> str:
    got = httpx.post(
        f"{api}/v1/runs/{run_id}/calls",
        json=[{"id": "c1", "name": "wipe", "arguments": {"target": "production"}}],
        headers=h("agent-t"),
    )
    assert got.status_code == 202, got.text
    call = got.json()["calls"][0]
    assert call["status"] == "awaiting_approval"
    return str(call["call_id"])


def test_an_approval_with_a_misspelt_field_is_refused_not_approved_unedited(api):
    # An approver who edits the arguments and misspells "arguments" meant another call than
    # the one parked; approving the parked arguments as they are would run what they refused.
    call_id = _parked(api, "run-typo-approve")
    shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("alice-t")).json()
    got = httpx.post(
        f"{api}/v1/approvals/{call_id}/approve",
        json={"digest": shown["digest"], "argumets": {"target": "staging"}},
        headers=h("alice-t"),
    )
    assert got.status_code == 422, got.text
    assert "argumets" in got.json()["error"]["message"]
    after = httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()
    assert after["status"] == "awaiting_approval"


def test_a_denial_with_a_misspelt_field_is_refused_not_denied_without_its_reason(api):
    call_id = _parked(api, "run-typo-deny")
    got = httpx.post(
        f"{api}/v1/approvals/{call_id}/deny",
        json={"reson": "not during the release"},
        headers=h("alice-t"),
    )
    assert got.status_code == 422, got.text
    assert "reson" in got.json()["error"]["message"]
    after = httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()
    assert after["status"] == "awaiting_approval"


@pytest.mark.parametrize("verb", ["approve", "deny"])
@pytest.mark.parametrize("always", ["yes", "true", 1, "on"])
def test_always_is_a_json_boolean_not_a_truthy_string(api, verb, always):
    # "always" extends the decision to the tool for the rest of the run: only a person's
    # true says so, never a string or number pydantic would coerce.
    call_id = _parked(api, f"run-always-{verb}-{always}")
    shown = httpx.get(f"{api}/v1/approvals/{call_id}", headers=h("alice-t")).json()
    got = httpx.post(
        f"{api}/v1/approvals/{call_id}/{verb}",
        json={"digest": shown["digest"], "always": always}
        if verb == "approve"
        else {"always": always},
        headers=h("alice-t"),
    )
    assert got.status_code == 422, got.text
    assert "always" in got.json()["error"]["message"]
    after = httpx.get(f"{api}/v1/calls/{call_id}", headers=h("agent-t")).json()
    assert after["status"] == "awaiting_approval"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_and_dispatch_nothing(api, r, constant):
    # Python's json.loads takes them; the call was stored with null in their place (its
    # arguments as JSON), so a 202 queued a call that fails on the worker, or that an
    # approver is shown with other arguments than were sent.
    before = r.dbsize()
    body = '[{"id": "c1", "name": "slow", "arguments": {"seconds": ' + constant + "}}]"
    got = httpx.post(
        f"{api}/v1/runs/run-{constant.lower()}/calls",
        content=body,
        headers={**h("agent-t"), "Content-Type": "application/json"},
    )
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["code"] == "invalid_payload" and constant.lstrip("-") in error["message"]
    assert r.dbsize() == before


@pytest.mark.parametrize(
    "payload",
    [
        [{"id": ["a", 1], "name": "echo", "arguments": {"text": "a"}}],
        [{"id": {"k": "v"}, "name": "echo", "arguments": {"text": "a"}}],
        {
            "role": "assistant",
            "tool_calls": [
                {"id": True, "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "tool_use", "id": 12.5, "name": "echo", "input": {"text": "a"}}],
        },
        {"candidates": [{"content": {"parts": [{"functionCall": {"id": [1], "name": "echo"}}]}}]},
        {
            "object": "response",
            "output": [{"type": "function_call", "call_id": {"x": 1}, "name": "echo"}],
        },
    ],
    ids=["generic-list", "generic-object", "openai-bool", "anthropic-float", "gemini", "responses"],
)
def test_a_provider_call_id_of_the_wrong_type_is_a_400_not_its_python_repr(api, r, payload):
    # The id was str()-ed: the call answered under tool_call_id "['a', 1]", "True" or
    # "{'x': 1}", an id the model never sent (an MCP request's id of these types is a 400).
    before = r.dbsize()
    got = httpx.post(f"{api}/v1/runs/run-wrong-id/calls", json=payload, headers=h("agent-t"))
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["code"] == "invalid_payload" and "call id" in error["message"]
    assert r.dbsize() == before


def test_a_tool_call_id_over_256_characters_is_a_400_and_writes_nothing(api, r):
    # It is stored with the call, each event and the history row: 1 MiB ids were taken.
    before = r.dbsize()
    payload = [
        {"id": "c1", "name": "echo", "arguments": {"text": "a"}},
        {"id": "x" * 257, "name": "echo", "arguments": {"text": "b"}},
    ]
    got = httpx.post(f"{api}/v1/runs/run-long-id/calls", json=payload, headers=h("agent-t"))
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["code"] == "invalid_payload" and "at most 256 characters" in error["message"]
    assert r.dbsize() == before
    ok = [{"id": "y" * 256, "name": "echo", "arguments": {"text": "c"}}]
    got = httpx.post(f"{api}/v1/runs/run-long-id/calls", json=ok, headers=h("agent-t"))
    assert got.status_code == 202, got.text


def test_a_tool_name_over_256_characters_fails_its_call_without_storing_the_name(api, r):
    payload = [
        {"id": "n1", "name": "e" * 100_000, "arguments": {}},
        {"id": "n2", "name": "echo", "arguments": {"text": "still here"}},
    ]
    got = httpx.post(f"{api}/v1/runs/run-long-name/calls", json=payload, headers=h("agent-t"))
    assert got.status_code == 202, got.text
    long_call, echo = got.json()["calls"]
    assert long_call["status"] in ("failed", "denied"), long_call
    assert echo["status"] == "queued"
    shown = httpx.get(f"{api}/v1/calls/{long_call['call_id']}", headers=h("agent-t")).json()
    assert "longer than 256 characters (100000)" in (shown["error"] or "")
    assert (
        len(httpx.get(f"{api}/v1/calls/{long_call['call_id']}", headers=h("agent-t")).text) < 5000
    )
