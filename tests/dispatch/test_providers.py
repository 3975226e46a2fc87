"""Provider payloads built with the official SDK types; rendered messages checked by them."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import mcp.types as mcp_types
import pytest
from anthropic.types import Message, MessageParam
from google.genai import types as genai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
)
from openai.types.responses import Response, ResponseInputItemParam
from pydantic import BaseModel, TypeAdapter

from toolq.dispatch.providers import parse_tool_calls, to_messages
from toolq.errors import PayloadError
from toolq.models import (
    AudioContent,
    CallResult,
    CallStatus,
    ImageContent,
    ProviderFormat,
    TextContent,
    ToolCall,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
WAV = base64.b64encode(b"RIFFfake").decode()


# -- SDK payload builders --------------------------------------------------------------------


def chat_completion(*tool_calls: dict[str, Any], choices: int = 1) -> ChatCompletion:
    message = {"role": "assistant", "content": None, "tool_calls": list(tool_calls) or None}
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-x",
            "choices": [
                {"index": i, "finish_reason": "tool_calls", "message": message}
                for i in range(choices)
            ],
        }
    )


def chat_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def responses_response(*items: dict[str, Any]) -> Response:
    return Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1.0,
            "model": "gpt-x",
            "output": list(items),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


REASONING = {"type": "reasoning", "id": "rs_1", "summary": []}
OUTPUT_MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "let me look", "annotations": []}],
}


def anthropic_message(*blocks: dict[str, Any]) -> Message:
    return Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": list(blocks),
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


def tool_use(block_id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": block_id, "name": name, "input": input}


def gemini_response(*parts: dict[str, Any]) -> genai.GenerateContentResponse:
    return genai.GenerateContentResponse.model_validate(
        {"candidates": [{"content": {"role": "model", "parts": list(parts)}}]}
    )


def dumped(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [call.model_dump() for call in calls]


# -- validation helpers ----------------------------------------------------------------------


def _consume(value: Any) -> Any:
    # TypeAdapter validates Iterable fields lazily; walking them validates every item.
    if isinstance(value, dict):
        return {key: _consume(item) for key, item in value.items()}
    if isinstance(value, BaseModel):
        return _consume(value.model_dump(exclude_none=True))
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, list | tuple | Iterator):
        return [_consume(item) for item in value]
    return value


def validate_typed(tp: Any, value: dict[str, Any]) -> None:
    """Validate a TypedDict value and prove no key was unknown (extras are dropped silently)."""
    adapter = TypeAdapter(tp)
    assert _consume(adapter.validate_python(value)) == value


# -- results ---------------------------------------------------------------------------------


def result(
    tool_call_id: str,
    status: CallStatus = CallStatus.SUCCEEDED,
    *,
    name: str = "lookup",
    **fields: Any,
) -> CallResult:
    return CallResult(
        call_id=f"c-{tool_call_id}", tool_call_id=tool_call_id, name=name, status=status, **fields
    )


def sample_results() -> list[CallResult]:
    return [
        result("t1", output="plain text"),
        result("t2", output={"temp": 21.5, "city": "Zürich"}),
        result("t3", CallStatus.FAILED, error="boom"),
        result("t4", CallStatus.DENIED, error="not today"),
        result("t5", CallStatus.EXPIRED),
        result("t6", CallStatus.CANCELLED, error="user stopped it"),
        result("t7", CallStatus.AWAITING_APPROVAL),
        result("t8", output=[1, 2]),
    ]


def media_result(tool_call_id: str = "m1") -> CallResult:
    return result(
        tool_call_id,
        output={"width": 2},
        content=[
            TextContent(text="here is the chart"),
            ImageContent(data=PNG, mime_type="image/png"),
            AudioContent(data=WAV, mime_type="audio/wav"),
        ],
    )


# -- parsing: OpenAI Chat Completions ------------------------------------------------------


def test_openai_completion_object_and_dict_give_identical_calls() -> None:
    completion = chat_completion(
        chat_call("call_1", "get_weather", '{"city": "Paris"}'),
        chat_call("call_2", "get_time", ""),
    )
    from_object = parse_tool_calls(completion)
    from_dict = parse_tool_calls(completion.model_dump(mode="json"))
    assert dumped(from_object) == dumped(from_dict)
    assert from_object == [
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}, format="openai"),
        ToolCall(id="call_2", name="get_time", arguments={}, format="openai"),
    ]


def test_openai_message_and_tool_call_list_and_first_choice_only() -> None:
    completion = chat_completion(chat_call("call_1", "f", "{}"), choices=2)
    assert [c.id for c in parse_tool_calls(completion)] == ["call_1"]
    message = completion.choices[0].message
    assert dumped(parse_tool_calls(message)) == dumped(parse_tool_calls(completion))
    assert dumped(parse_tool_calls(message.tool_calls)) == dumped(parse_tool_calls(completion))
    plain = {"role": "assistant", "content": "no tools"}
    assert parse_tool_calls(plain) == []
    assert parse_tool_calls(chat_completion()) == []


def test_openai_bad_arguments_become_call_errors() -> None:
    completion = chat_completion(
        chat_call("call_1", "f", '{"a": 1 "b": 2}'),
        chat_call("call_2", "f", "[1, 2]"),
        chat_call("call_3", "f", '{"ok": true}'),
        chat_call("call_4", "f", "NaN"),
    )
    bad_json, not_object, good, nan = parse_tool_calls(completion)
    assert bad_json.error == (
        "arguments are not valid JSON: Expecting ',' delimiter: line 1 column 9 (char 8)"
    )
    assert bad_json.arguments == {}
    assert bad_json.id == "call_1"
    assert not_object.error == "arguments must be a JSON object, got array"
    assert good.error is None
    assert good.arguments == {"ok": True}
    assert nan.error == "arguments are not valid JSON: NaN is not allowed"


def test_openai_missing_name_keeps_id_and_custom_calls_are_skipped() -> None:
    payload = [
        {"id": "call_1", "type": "function", "function": {"arguments": "{}"}},
        {"id": "call_2", "type": "custom", "custom": {"name": "grammar", "input": "x"}},
    ]
    (call,) = parse_tool_calls(payload)
    assert call.id == "call_1"
    assert call.error == "tool call has no name"


# -- parsing: OpenAI Responses ---------------------------------------------------------------


def test_responses_reads_function_calls_only() -> None:
    response = responses_response(
        REASONING,
        OUTPUT_MESSAGE,
        function_call("call_a", "search", '{"q": "toolq"}'),
        function_call("call_b", "search", "{bad"),
    )
    calls = parse_tool_calls(response)
    assert dumped(calls) == dumped(parse_tool_calls(response.model_dump(mode="json")))
    assert dumped(calls) == dumped(parse_tool_calls(response.output))
    assert [(c.id, c.name, c.format) for c in calls] == [
        ("call_a", "search", ProviderFormat.OPENAI_RESPONSES),
        ("call_b", "search", ProviderFormat.OPENAI_RESPONSES),
    ]
    assert calls[0].arguments == {"q": "toolq"}
    assert calls[1].error is not None
    assert calls[1].error.startswith("arguments are not valid JSON: ")
    assert parse_tool_calls(responses_response(REASONING, OUTPUT_MESSAGE)) == []


# -- parsing: Anthropic ----------------------------------------------------------------------


def test_anthropic_reads_tool_use_blocks_only() -> None:
    message = anthropic_message(
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "Let me check."},
        tool_use("toolu_1", "get_weather", {"city": "Oslo", "unit": None}),
        tool_use("toolu_2", "get_time", {}),
    )
    calls = parse_tool_calls(message)
    assert dumped(calls) == dumped(parse_tool_calls(message.model_dump(mode="json")))
    assert dumped(calls) == dumped(parse_tool_calls(message.content))
    assert calls == [
        ToolCall(
            id="toolu_1",
            name="get_weather",
            arguments={"city": "Oslo", "unit": None},
            format="anthropic",
        ),
        ToolCall(id="toolu_2", name="get_time", arguments={}, format="anthropic"),
    ]
    assert parse_tool_calls(message.content[:2]) == []


# -- parsing: Gemini -------------------------------------------------------------------------


def test_gemini_same_function_twice_without_ids_gets_distinct_ids() -> None:
    response = gemini_response(
        {"text": "calling"},
        {"function_call": {"name": "get_weather", "args": {"city": "Rome"}}},
        {"function_call": {"name": "get_weather", "args": {"city": "Lima"}}},
    )
    first, second = parse_tool_calls(response)
    assert first.id != second.id
    assert first.id.startswith("gemini_call_")
    assert second.id.startswith("gemini_call_")
    assert (first.arguments, second.arguments) == ({"city": "Rome"}, {"city": "Lima"})
    assert first.format is ProviderFormat.GEMINI


def test_gemini_object_snake_and_camel_dicts_agree() -> None:
    response = gemini_response(
        {"function_call": {"id": "fc-1", "name": "add", "args": {"a": 1, "b": 2}}},
        {"function_call": {"id": "fc-2", "name": "noop"}},
    )
    from_object = dumped(parse_tool_calls(response))
    camel = response.model_dump(mode="json", by_alias=True, exclude_none=True)
    snake = response.model_dump(mode="json", exclude_none=True)
    assert "functionCall" in camel["candidates"][0]["content"]["parts"][0]
    assert from_object == dumped(parse_tool_calls(camel))
    assert from_object == dumped(parse_tool_calls(snake))
    content = response.candidates[0].content  # type: ignore[index]
    assert from_object == dumped(parse_tool_calls(content))
    assert from_object == dumped(parse_tool_calls(content.parts))  # type: ignore[union-attr]
    assert from_object == dumped(parse_tool_calls(response.function_calls))
    assert [c["arguments"] for c in from_object] == [{"a": 1, "b": 2}, {}]


# -- parsing: MCP ----------------------------------------------------------------------------


def test_mcp_jsonrpc_request_id_becomes_call_id() -> None:
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "/tmp/x"}},
    }
    assert parse_tool_calls(request) == [
        ToolCall(id="7", name="read_file", arguments={"path": "/tmp/x"}, format="mcp", rpc_id=7)
    ]
    validated = mcp_types.JSONRPCRequest.model_validate(request)
    assert parse_tool_calls(validated)[0].id == "7"
    batch = [request, {**request, "id": "b"}]
    assert [(c.id, c.rpc_id) for c in parse_tool_calls(batch)] == [("7", 7), ("b", "b")]


def test_mcp_sdk_request_and_params_get_generated_ids() -> None:
    params = mcp_types.CallToolRequestParams(name="echo", arguments={"text": "hi"})
    request = mcp_types.CallToolRequest(params=params)
    for payload in (request, params):
        (call,) = parse_tool_calls(payload)
        assert call.id.startswith("mcp_call_")
        assert (call.name, call.arguments, call.format) == ("echo", {"text": "hi"}, "mcp")
    (no_args,) = parse_tool_calls(mcp_types.CallToolRequestParams(name="ping"))
    assert no_args.arguments == {}


def test_mcp_other_methods_are_refused() -> None:
    with pytest.raises(PayloadError, match="got method 'tools/list'"):
        parse_tool_calls({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})


# -- parsing: generic and errors -------------------------------------------------------------


def test_generic_dicts() -> None:
    calls = parse_tool_calls(
        [
            {"id": "g1", "name": "add", "arguments": {"a": 1}},
            {"id": "g2", "name": "add", "arguments": '{"a": 2}'},
            {"name": "add", "arguments": "oops"},
            {"id": "g4", "arguments": {}},
        ]
    )
    assert [(c.id, c.arguments, c.format) for c in calls[:2]] == [
        ("g1", {"a": 1}, None),
        ("g2", {"a": 2}, None),
    ]
    assert calls[2].id.startswith("call_")
    assert calls[2].error is not None
    assert (calls[3].id, calls[3].error) == ("g4", "tool call has no name")


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ("[" * 100_000 + "]" * 100_000, "arguments are not valid JSON: nested too deeply"),
        ('"text"', "arguments must be a JSON object, got string"),
        ("null", "arguments must be a JSON object, got null"),
        (5, "arguments must be a JSON object, got number"),
        ("", None),
        (None, None),
    ],
)
def test_argument_decoding(arguments: Any, error: str | None) -> None:
    (call,) = parse_tool_calls({"id": "x", "name": "f", "arguments": arguments})
    assert (call.arguments, call.error) == ({}, error)


@pytest.mark.parametrize(
    "payload",
    [42, "a string", None, {"foo": 1}, [1, 2], {"choices": "nope"}],
)
def test_unrecognisable_payload_raises(payload: Any) -> None:
    with pytest.raises(PayloadError, match="expected"):
        parse_tool_calls(payload)


def test_lists_without_calls_hold_no_calls() -> None:
    assert parse_tool_calls([]) == []
    assert parse_tool_calls([{"type": "text", "text": "hi"}]) == []
    assert parse_tool_calls([{"text": "gemini text part"}]) == []


def test_forced_format() -> None:
    completion = chat_completion(chat_call("call_1", "f", "{}"))
    assert parse_tool_calls(completion, "openai")[0].id == "call_1"
    assert parse_tool_calls(completion, ProviderFormat.OPENAI)[0].id == "call_1"
    with pytest.raises(PayloadError, match=r"Anthropic Message.*the payload is openai instead"):
        parse_tool_calls(completion, "anthropic")
    with pytest.raises(PayloadError, match="Gemini"):
        parse_tool_calls({"foo": 1}, "gemini")
    with pytest.raises(ValueError, match="unknown format 'cohere'"):
        parse_tool_calls(completion, "cohere")
    # MCP params without envelope read as MCP only when asked.
    params = {"name": "echo", "arguments": {"text": "hi"}}
    assert parse_tool_calls(params)[0].format is None
    assert parse_tool_calls(params, "mcp")[0].format is ProviderFormat.MCP


# -- rendering -------------------------------------------------------------------------------


def test_render_openai() -> None:
    messages = to_messages([*sample_results(), media_result()], "openai")
    for message in messages:
        validate_typed(ChatCompletionToolMessageParam, message)
        TypeAdapter(ChatCompletionMessageParam).validate_python(message)
        assert set(message) == {"role", "tool_call_id", "content"}
    contents = {m["tool_call_id"]: m["content"] for m in messages}
    assert contents == {
        "t1": "plain text",
        "t2": '{"temp": 21.5, "city": "Zürich"}',
        "t3": "Error: boom",
        "t4": "Denied: not today",
        "t5": "Approval expired: nobody approved the call before its deadline",
        "t6": "Cancelled: user stopped it",
        "t7": "Result not available yet: the tool call is awaiting approval.",
        "t8": "[1, 2]",
        "m1": (
            f"here is the chart\n[image/png omitted: {len(PNG)} bytes base64]\n"
            f"[audio/wav omitted: {len(WAV)} bytes base64]"
        ),
    }


def test_render_openai_responses() -> None:
    items = to_messages([*sample_results(), media_result()], "openai-responses")
    for item in items:
        validate_typed(ResponseInputItemParam, item)
        assert set(item) == {"type", "call_id", "output"}
        assert item["type"] == "function_call_output"
    by_id = {item["call_id"]: item["output"] for item in items}
    assert by_id["t1"] == "plain text"
    assert by_id["t3"] == "Error: boom"
    assert by_id["m1"] == [
        {"type": "input_text", "text": "here is the chart"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
        {"type": "input_text", "text": f"[audio/wav omitted: {len(WAV)} bytes base64]"},
    ]


def test_render_anthropic() -> None:
    (message,) = to_messages([*sample_results(), media_result()], "anthropic")
    validate_typed(MessageParam, message)
    assert message["role"] == "user"
    blocks = {block["tool_use_id"]: block for block in message["content"]}
    assert blocks["t1"] == {"type": "tool_result", "tool_use_id": "t1", "content": "plain text"}
    assert blocks["t3"] == {
        "type": "tool_result",
        "tool_use_id": "t3",
        "content": "Error: boom",
        "is_error": True,
    }
    for failed in ("t4", "t5", "t6", "t7"):
        assert blocks[failed]["is_error"] is True
    assert blocks["m1"]["content"] == [
        {"type": "text", "text": "here is the chart"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": f"[audio/wav omitted: {len(WAV)} bytes base64]"},
    ]
    assert to_messages([], "anthropic") == []


def test_render_gemini() -> None:
    results = [*sample_results(), media_result(), result("gemini_call_abc", output="x")]
    (content,) = to_messages(results, "gemini")
    validated = genai.Content.model_validate(content)
    assert validated.role == "user"
    assert validated.model_dump(mode="json", by_alias=True, exclude_none=True) == content
    responses = [part["functionResponse"] for part in content["parts"]]
    by_id = {r.get("id"): r for r in responses}
    assert by_id["t1"] == {"id": "t1", "name": "lookup", "response": {"output": "plain text"}}
    assert by_id["t2"]["response"] == {"output": {"temp": 21.5, "city": "Zürich"}}
    assert by_id["t3"]["response"] == {"error": "Error: boom"}
    assert by_id["t7"]["response"]["error"].startswith("Result not available yet")
    assert by_id["m1"]["response"] == {
        "output": f"here is the chart\n[audio/wav omitted: {len(WAV)} bytes base64]"
    }
    assert by_id["m1"]["parts"] == [{"inlineData": {"mimeType": "image/png", "data": PNG}}]
    # Ids toolq generated for id-less Gemini calls are not sent back.
    assert by_id[None] == {"name": "lookup", "response": {"output": "x"}}
    image = validated.parts[-2].function_response.parts[0].inline_data  # type: ignore[index,union-attr]
    assert image.data == base64.b64decode(PNG)  # type: ignore[union-attr]


def test_render_mcp() -> None:
    results = to_messages([*sample_results(), media_result()], "mcp")
    for rendered in results:
        validated = mcp_types.CallToolResult.model_validate(rendered)
        assert validated.model_dump(mode="json", by_alias=True, exclude_none=True) == {
            **rendered,
            "resultType": "complete",
        }
    t1, t2, t3, *_, t8, m1 = results
    assert t1 == {
        "content": [{"type": "text", "text": "plain text"}],
        "isError": False,
        "structuredContent": {"result": "plain text"},
    }
    assert t2["structuredContent"] == {"temp": 21.5, "city": "Zürich"}
    assert json.loads(t2["content"][0]["text"]) == t2["structuredContent"]
    assert t3 == {"content": [{"type": "text", "text": "Error: boom"}], "isError": True}
    assert t8["structuredContent"] == {"result": [1, 2]}
    assert m1["content"] == [
        {"type": "text", "text": "here is the chart"},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "audio", "data": WAV, "mimeType": "audio/wav"},
    ]


def test_unsupported_image_types_are_described() -> None:
    svg = result("s1", content=[ImageContent(data="PHN2Zz4=", mime_type="image/svg+xml")])
    described = "[image/svg+xml omitted: 8 bytes base64]"
    (anthropic_message_,) = to_messages([svg], "anthropic")
    assert anthropic_message_["content"][0]["content"] == described
    (responses_item,) = to_messages([svg], "openai-responses")
    assert responses_item["output"] == described
    (gemini_content,) = to_messages([svg], "gemini")
    assert gemini_content["parts"][0]["functionResponse"]["response"] == {"output": described}


# -- round trips -----------------------------------------------------------------------------


def _answer(calls: list[ToolCall]) -> list[CallResult]:
    return [
        result(call.id, CallStatus.FAILED, name=call.name, error=call.error)
        if call.error
        else result(call.id, name=call.name, output={"echo": call.arguments})
        for call in calls
    ]


def _answered(format: str, messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """(call id, is error) for every answer in the rendered messages."""
    match format:
        case "openai":
            return [(m["tool_call_id"], m["content"].startswith("Error:")) for m in messages]
        case "openai-responses":
            return [(m["call_id"], m["output"].startswith("Error:")) for m in messages]
        case "anthropic":
            (message,) = messages
            return [(b["tool_use_id"], b.get("is_error", False)) for b in message["content"]]
        case "gemini":
            (content,) = messages
            responses = [p["functionResponse"] for p in content["parts"]]
            return [(r["id"], "error" in r["response"]) for r in responses]
        case _:
            raise AssertionError(format)


ROUND_TRIPS: dict[str, Callable[[], BaseModel]] = {
    "openai": lambda: chat_completion(
        chat_call("call_1", "f", '{"x": 1}'), chat_call("call_2", "g", "{broken")
    ),
    "openai-responses": lambda: responses_response(
        REASONING, function_call("call_1", "f", '{"x": 1}'), function_call("call_2", "g", "{")
    ),
    "anthropic": lambda: anthropic_message(
        {"type": "text", "text": "hi"},
        tool_use("toolu_1", "f", {"x": 1}),
        tool_use("toolu_2", "", {}),
    ),
    "gemini": lambda: gemini_response(
        {"function_call": {"id": "fc_1", "name": "f", "args": {"x": 1}}},
        {"function_call": {"id": "fc_2", "args": {}}},
    ),
}


@pytest.mark.parametrize("format", list(ROUND_TRIPS))
def test_round_trip_answers_every_call_once(format: str) -> None:
    calls = parse_tool_calls(ROUND_TRIPS[format]())
    assert len(calls) == 2
    assert calls[0].error is None
    assert calls[1].error is not None
    messages = to_messages(_answer(calls), format)
    answered = _answered(format, messages)
    assert sorted(call_id for call_id, _ in answered) == sorted(call.id for call in calls)
    assert dict(answered) == {calls[0].id: False, calls[1].id: True}


def test_round_trip_mcp() -> None:
    request = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "f", "arguments": "[]"},
    }
    (call,) = parse_tool_calls(request)
    assert call.error == "arguments must be a JSON object, got array"
    (rendered,) = to_messages(_answer([call]), "mcp")
    assert mcp_types.CallToolResult.model_validate(rendered).is_error is True


def test_openai_calls_without_type_field_are_read() -> None:
    from toolq import parse_tool_calls

    function = {"name": "store_memory", "arguments": '{"content": "hello"}'}
    calls = parse_tool_calls([{"id": "call_123", "function": function}])
    assert [(c.id, c.name, c.arguments, c.format.value) for c in calls] == [
        ("call_123", "store_memory", {"content": "hello"}, "openai")
    ]
