"""MCP JSON-RPC batches through a worker and the real HTTP API: answers matched by id.

Also the ambiguity refusal over HTTP: a payload that is two providers' at once gets a 400
naming both, and nothing is written to Redis.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import mcp.types as mcp_types
import pytest
from pydantic import TypeAdapter

import toolq
from tests.conftest import serve
from toolq import CallStatus
from toolq.api.app import create_app
from toolq.settings import ApiToken

pytestmark = pytest.mark.e2e

Message = TypeAdapter(mcp_types.JSONRPCMessage)
TOKENS = {"agent-t": ApiToken(principal="agent", roles=["submitter", "viewer"])}


def request(rpc_id: Any, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def by_typed_id(responses: list[dict[str, Any]]) -> dict[tuple[str, Any], Any]:
    """Each response, validated by the SDK after a trip through JSON text, by (type, id)."""
    out: dict[tuple[str, Any], Any] = {}
    for item in json.loads(json.dumps(responses)):
        message = Message.validate_python(item)
        assert isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError)
        key = (type(message.id).__name__, message.id)
        assert key not in out, f"two answers for id {message.id!r}"
        out[key] = message
    return out


def text_of(message: Any) -> str:
    result = mcp_types.CallToolResult.model_validate(message.result)
    return "".join(block.text for block in result.content)


def test_jsonrpc_batch_through_workers_is_answered_by_id(client, inproc, r) -> None:
    inproc.start()
    batch = client.dispatch(
        [
            request(0, "echo", text="zero"),
            request(7, "add", a=3, b=4),
            request("7", "echo", text="string seven"),
            request("abc", "boom"),
            request(99, "no_such_tool"),
            request("t", "transfer", amount=500),  # parks for approval
        ],
        run_id="mcp-batch",
        principal="agent",
    )
    assert batch.format is toolq.ProviderFormat.MCP
    parked = batch.call_ids[5]
    assert client.result(parked).status is CallStatus.AWAITING_APPROVAL
    client.approvals.approve(parked, by="alice", arguments={"amount": 50})
    results = batch.wait(timeout=60)
    assert [res.status for res in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
        CallStatus.FAILED,
        CallStatus.SUCCEEDED,
    ]

    answers = by_typed_id(batch.to_messages("mcp"))
    assert set(answers) == {
        ("int", 0),
        ("int", 7),
        ("str", "7"),
        ("str", "abc"),
        ("int", 99),
        ("str", "t"),
    }
    zero = mcp_types.CallToolResult.model_validate(answers["int", 0].result)
    assert zero.is_error is False and zero.structured_content == {"text": "zero"}
    seven = mcp_types.CallToolResult.model_validate(answers["int", 7].result)
    assert seven.structured_content == {"result": 7}
    assert text_of(answers["str", "7"]) == json.dumps({"text": "string seven"})
    boom = mcp_types.CallToolResult.model_validate(answers["str", "abc"].result)
    assert boom.is_error is True
    unknown = answers["int", 99]
    assert isinstance(unknown, mcp_types.JSONRPCError)
    assert unknown.error.code == mcp_types.INVALID_PARAMS
    assert "no_such_tool" in unknown.error.message
    assert text_of(answers["str", "t"]) == "moved 50"  # ran with the edited arguments

    # The same answers from the results wait() returned (built from the final events)
    # and from the run's records read back by the client.
    assert by_typed_id(toolq.to_messages(results, "mcp")) == answers
    assert by_typed_id(client.to_messages("mcp-batch", "mcp")) == answers


@pytest.fixture
def api(settings) -> Iterator[str]:
    from tests.apps import registry

    yield from serve(create_app(settings, registry, tokens=TOKENS))


AUTH = {"Authorization": "Bearer agent-t"}


def test_http_ids_keep_their_type_and_ambiguous_payloads_are_refused(api, r) -> None:
    # No workers: the calls stay queued; what matters is the id of each answer.
    sent = httpx.post(
        f"{api}/v1/runs/http-mcp/calls",
        json=[request(7, "echo", text="a"), request("7", "echo", text="b"), request(0, "nope")],
        headers=AUTH,
    )
    assert sent.status_code == 202, sent.text
    assert [c["tool_call_id"] for c in sent.json()["calls"]] == ["7", "7", "0"]
    got = httpx.get(f"{api}/v1/runs/http-mcp/messages", params={"format": "mcp"}, headers=AUTH)
    assert got.status_code == 200
    answers = by_typed_id(got.json())
    assert set(answers) == {("int", 7), ("str", "7"), ("int", 0)}
    assert isinstance(answers["int", 0], mcp_types.JSONRPCError)
    assert text_of(answers["int", 7]).startswith("Result not available yet")

    # The attack: one object that is an OpenAI message and an Anthropic message at once,
    # hoping the gate reads the harmless half and the other half slips by or is lost.
    ambiguous = {
        "role": "assistant",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
        ],
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "wipe", "input": {"target": "/"}}
        ],
    }
    before = r.dbsize()
    refused = httpx.post(f"{api}/v1/runs/http-amb/calls", json=ambiguous, headers=AUTH)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_payload"
    assert error["message"].startswith("ambiguous payload")
    assert "OpenAI Chat Completions tool_calls" in error["message"]
    assert "Anthropic tool_use blocks" in error["message"]
    assert r.dbsize() == before  # nothing written
    runs = httpx.get(f"{api}/v1/runs/http-amb/calls", headers=AUTH)
    assert runs.status_code == 200 and runs.json() == []
