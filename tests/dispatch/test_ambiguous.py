"""Payloads that are two providers' at once are refused, never read with one half dropped."""

from __future__ import annotations

from typing import Any

import pytest

from toolq import Client
from toolq.dispatch.providers import parse_tool_calls
from toolq.errors import PayloadError

OPENAI_CALL = {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "wipe", "input": {"target": "/"}}
FUNCTION_CALL_PART = {"functionCall": {"id": "fc_1", "name": "wipe", "args": {"target": "/"}}}
RESPONSES_CALL = {
    "type": "function_call",
    "call_id": "fc_2",
    "name": "wipe",
    "arguments": '{"target": "/"}',
}
MCP_REQUEST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": "hi"}},
}

AMBIGUOUS: dict[str, tuple[Any, str]] = {
    "openai tool_calls + anthropic tool_use blocks": (
        {"role": "assistant", "tool_calls": [OPENAI_CALL], "content": [TOOL_USE]},
        "OpenAI Chat Completions tool_calls and Anthropic tool_use blocks",
    ),
    "empty tool_calls + anthropic tool_use blocks": (
        {
            "role": "assistant",
            "tool_calls": [],
            "content": [{"type": "text", "text": ""}, TOOL_USE],
        },
        "OpenAI Chat Completions tool_calls and Anthropic tool_use blocks",
    ),
    "anthropic Message with tool_calls": (
        {
            "type": "message",
            "role": "assistant",
            "content": [TOOL_USE],
            "tool_calls": [OPENAI_CALL],
        },
        "Anthropic tool_use blocks",
    ),
    "openai tool_calls + gemini functionCall parts": (
        {"role": "assistant", "tool_calls": [OPENAI_CALL], "parts": [FUNCTION_CALL_PART]},
        "Gemini functionCall parts",
    ),
    "completion whose message is ambiguous": (
        {"choices": [{"message": {"tool_calls": [OPENAI_CALL], "content": [TOOL_USE]}}]},
        "Anthropic tool_use blocks",
    ),
    "gemini response with openai choices": (
        {
            "candidates": [{"content": {"role": "model", "parts": [FUNCTION_CALL_PART]}}],
            "choices": [{"message": {"role": "assistant", "tool_calls": [OPENAI_CALL]}}],
        },
        "Gemini functionCall parts",
    ),
    "responses output + openai tool_calls": (
        {"output": [RESPONSES_CALL], "tool_calls": [OPENAI_CALL]},
        "OpenAI Responses function_call items",
    ),
    "list of openai items and tool_use blocks": (
        [OPENAI_CALL, TOOL_USE],
        "Anthropic tool_use blocks",
    ),
    "list of responses items and gemini parts": (
        [RESPONSES_CALL, FUNCTION_CALL_PART],
        "Gemini functionCall parts",
    ),
    "anthropic content mixing tool_use and openai items": (
        {"type": "message", "role": "assistant", "content": [TOOL_USE, OPENAI_CALL]},
        "OpenAI Chat Completions tool_calls",
    ),
    "jsonrpc request with tool_calls": (
        {**MCP_REQUEST, "tool_calls": [OPENAI_CALL]},
        "MCP tools/call requests",
    ),
}


@pytest.mark.parametrize("case", list(AMBIGUOUS))
def test_ambiguous_payloads_are_refused(case: str) -> None:
    payload, named = AMBIGUOUS[case]
    with pytest.raises(PayloadError, match="ambiguous payload") as caught:
        parse_tool_calls(payload)
    assert named in caught.value.message
    assert len(caught.value.details["formats"]) == 2


@pytest.mark.parametrize("format", ["openai", "anthropic"])
def test_naming_the_format_does_not_drop_the_other_half(format: str) -> None:
    payload, _ = AMBIGUOUS["openai tool_calls + anthropic tool_use blocks"]
    with pytest.raises(PayloadError, match="ambiguous payload"):
        parse_tool_calls(payload, format)


LEGIT: dict[str, tuple[Any, list[str]]] = {
    "openai message with text parts and tool_calls": (
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "calling"}],
            "tool_calls": [OPENAI_CALL],
        },
        ["call_1"],
    ),
    "anthropic message param with text and tool_use": (
        {"role": "assistant", "content": [{"type": "text", "text": "hm"}, TOOL_USE]},
        ["toolu_1"],
    ),
    "gemini content with text and call parts": (
        {"role": "model", "parts": [{"text": "ok"}, FUNCTION_CALL_PART]},
        ["fc_1"],
    ),
    "responses output with message and call": (
        {
            "object": "response",
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]},
                RESPONSES_CALL,
            ],
        },
        ["fc_2"],
    ),
    "mcp batch": ([MCP_REQUEST, {**MCP_REQUEST, "id": "2"}], ["1", "2"]),
    "plain assistant text": ({"role": "assistant", "content": "no calls"}, []),
}


@pytest.mark.parametrize("case", list(LEGIT))
def test_single_format_payloads_still_parse(case: str) -> None:
    payload, ids = LEGIT[case]
    assert [call.id for call in parse_tool_calls(payload)] == ids


def test_dispatch_of_an_ambiguous_payload_writes_nothing(client: Client, r) -> None:
    payload, _ = AMBIGUOUS["openai tool_calls + anthropic tool_use blocks"]
    before = r.dbsize()
    with pytest.raises(PayloadError, match="ambiguous payload"):
        client.dispatch(payload, run_id="run-amb", principal="agent")
    assert r.dbsize() == before
    assert client.store.run_call_ids("run-amb") == []
