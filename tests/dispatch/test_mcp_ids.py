"""MCP JSON-RPC ids: kept with their JSON type from request to response, through Redis.

Responses are checked with the MCP SDK's own types (``JSONRPCResponse``, ``JSONRPCError``,
``CallToolResult``); the store round trips use the suite's private Redis, no workers.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as mcp_types
import pytest
from pydantic import TypeAdapter

from toolq import Client
from toolq.dispatch.providers import parse_tool_calls, to_messages
from toolq.errors import PayloadError
from toolq.models import CallResult, CallStatus

IDS: list[int | str] = [0, 7, "7", "abc", 2**70]

Message = TypeAdapter(mcp_types.JSONRPCMessage)


def request(rpc_id: Any, name: str = "echo", **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def typed(value: Any) -> tuple[str, Any]:
    """An id with its type, so 7 and "7" never compare equal."""
    return (type(value).__name__, value)


def answered(responses: list[dict[str, Any]]) -> dict[tuple[str, Any], dict[str, Any]]:
    """Responses by typed id, after a trip through JSON text and the SDK's message type."""
    wire = json.loads(json.dumps(responses))
    out = {}
    for item in wire:
        message = Message.validate_python(item)
        assert isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError)
        assert typed(message.id) not in out
        out[typed(message.id)] = item
    return out


def result(rpc_id: Any, status: CallStatus = CallStatus.SUCCEEDED, **fields: Any) -> CallResult:
    return CallResult(
        call_id=f"c-{rpc_id!r}",
        tool_call_id=str(rpc_id),
        name="echo",
        status=status,
        rpc_id=rpc_id,
        **fields,
    )


# -- parsing ---------------------------------------------------------------------------------


def test_request_ids_keep_their_json_type() -> None:
    calls = parse_tool_calls([request(rpc_id, text=str(rpc_id)) for rpc_id in IDS])
    assert [typed(call.rpc_id) for call in calls] == [typed(rpc_id) for rpc_id in IDS]
    assert [call.id for call in calls] == ["0", "7", "7", "abc", str(2**70)]


def test_params_and_id_less_requests_have_no_request_id() -> None:
    no_id = {k: v for k, v in request(1).items() if k != "id"}
    params = mcp_types.CallToolRequestParams(name="echo", arguments={"text": "hi"})
    for payload in (no_id, {**no_id, "id": None}, params, mcp_types.CallToolRequest(params=params)):
        (call,) = parse_tool_calls(payload, "mcp")
        assert call.rpc_id is None and call.id.startswith("mcp_call_")


@pytest.mark.parametrize("bad", [True, False, 1.5, 7.0, {"n": 1}, [7]])
def test_ids_that_are_neither_string_nor_integer_are_refused(bad: Any) -> None:
    with pytest.raises(PayloadError, match="JSON-RPC id must be a string or an integer"):
        parse_tool_calls([request(1), request(bad)])


def test_an_id_used_twice_in_a_batch_is_refused() -> None:
    with pytest.raises(PayloadError, match="JSON-RPC id 7 is used twice"):
        parse_tool_calls([request(7), request("x"), request(7)])
    with pytest.raises(PayloadError, match="JSON-RPC id 'a' is used twice"):
        parse_tool_calls([request("a"), request("a")])
    # Two ids, not one: JSON-RPC tells 7 from "7".
    assert len(parse_tool_calls([request(7), request("7")])) == 2


# -- rendering -------------------------------------------------------------------------------


def test_calls_from_requests_render_as_jsonrpc_responses() -> None:
    results = [result(rpc_id, output={"echo": str(rpc_id)}) for rpc_id in IDS]
    responses = to_messages(results, "mcp")
    by_id = answered(responses)
    assert list(by_id) == [typed(rpc_id) for rpc_id in IDS]
    for rpc_id in IDS:
        response = mcp_types.JSONRPCResponse.model_validate(by_id[typed(rpc_id)])
        call_result = mcp_types.CallToolResult.model_validate(response.result)
        assert call_result.is_error is False
        assert call_result.structured_content == {"echo": str(rpc_id)}
    # The text on the wire: 7 is a number, "7" a string.
    text = json.dumps(responses)
    assert '"id": 7,' in text and '"id": "7",' in text and '"id": 0,' in text


def test_tool_failures_are_results_with_is_error() -> None:
    results = [
        result(1, CallStatus.FAILED, error="boom", error_type="execution_failed"),
        result(
            2,
            CallStatus.FAILED,
            error="invalid arguments for 'add'",
            error_type="invalid_arguments",
        ),
        result("d", CallStatus.DENIED, error="not today", error_type="approval_denied"),
        result("e", CallStatus.EXPIRED),
        result("p", CallStatus.AWAITING_APPROVAL),
    ]
    by_id = answered(to_messages(results, "mcp"))
    for key, text in [
        (typed(1), "Error: boom"),
        (typed(2), "Error: invalid arguments for 'add'"),
        (typed("d"), "Denied: not today"),
        (typed("e"), "Approval expired"),
        (typed("p"), "Result not available yet"),
    ]:
        response = mcp_types.JSONRPCResponse.model_validate(by_id[key])
        call_result = mcp_types.CallToolResult.model_validate(response.result)
        assert call_result.is_error is True
        assert call_result.content[0].text.startswith(text)  # type: ignore[union-attr]


def test_unknown_tools_and_unreadable_requests_are_jsonrpc_errors() -> None:
    results = [
        result(0, CallStatus.FAILED, error="unknown tool 'nope'", error_type="tool_not_found"),
        result("x", CallStatus.FAILED, error="tool call has no name", error_type="invalid_payload"),
    ]
    by_id = answered(to_messages(results, "mcp"))
    unknown = mcp_types.JSONRPCError.model_validate(by_id[typed(0)])
    assert unknown.id == 0 and unknown.error.code == mcp_types.INVALID_PARAMS
    assert unknown.error.message == "unknown tool 'nope'"
    unreadable = mcp_types.JSONRPCError.model_validate(by_id[typed("x")])
    assert unreadable.error.code == mcp_types.INVALID_PARAMS
    assert "result" not in by_id[typed(0)]


def test_calls_without_request_id_render_as_bare_call_tool_results() -> None:
    bare = result("mcp_call_1", output="hi").model_copy(update={"rpc_id": None})
    unknown = bare.model_copy(
        update={
            "status": CallStatus.FAILED,
            "error": "unknown tool",
            "error_type": "tool_not_found",
        }
    )
    ok, failed = to_messages([bare, unknown], "mcp")
    assert "jsonrpc" not in ok and "jsonrpc" not in failed
    assert mcp_types.CallToolResult.model_validate(ok).structured_content == {"result": "hi"}
    assert mcp_types.CallToolResult.model_validate(failed).is_error is True


# -- through Redis (no workers) --------------------------------------------------------------


def test_ids_survive_storage_approval_edits_and_redispatch(client: Client, r) -> None:
    batch = client.dispatch(
        [
            request(0, "echo", text="zero"),
            request(7, "transfer", amount=500),  # parks for approval
            request("7", "echo", text="seven"),
            request("abc", "no_such_tool"),
            request(2**70, "add", a=1),  # invalid arguments: a tool execution error
        ],
        run_id="run-mcp",
        principal="agent",
    )
    assert [typed(ref.rpc_id) for ref in batch.calls] == [
        typed(0),
        typed(7),
        typed("7"),
        typed("abc"),
        typed(2**70),
    ]
    assert len(set(batch.call_ids)) == 5  # 7 and "7" are two calls

    parked = batch.call_ids[1]
    client.approvals.approve(parked, by="alice", arguments={"amount": 50})  # envelope rewritten
    assert client.store.envelope(parked).rpc_id == 7

    # A fresh client reads the records back from Redis.
    from tests.apps import registry

    with Client(registry, client.settings) as other:
        results = other.results("run-mcp")
        by_id = answered(other.to_messages("run-mcp", "mcp"))
    assert [typed(res.rpc_id) for res in results] == [typed(ref.rpc_id) for ref in batch.calls]
    assert set(by_id) == {typed(rpc_id) for rpc_id in (0, 7, "7", "abc", 2**70)}
    unknown = mcp_types.JSONRPCError.model_validate(by_id[typed("abc")])
    assert (
        unknown.error.code == mcp_types.INVALID_PARAMS and "no_such_tool" in unknown.error.message
    )
    invalid = mcp_types.JSONRPCResponse.model_validate(by_id[typed(2**70)])
    assert mcp_types.CallToolResult.model_validate(invalid.result).is_error is True
    assert answered(batch.to_messages("mcp")) == by_id

    # The same requests again in the same run are the same calls, 7 and "7" each its own.
    again = client.dispatch(
        [request(7, "transfer", amount=500), request("7", "echo", text="seven")],
        run_id="run-mcp",
        principal="agent",
    )
    assert [ref.duplicate for ref in again.calls] == [True, True]
    assert again.call_ids == [batch.call_ids[1], batch.call_ids[2]]
