"""OpenAI Chat Completions: ``tool_calls`` in, ``role: tool`` messages out.

Reads a ChatCompletion (its first choice only: toolq answers one assistant turn), an
assistant message, one ``tool_calls`` item or a list of them. Calls of ``custom`` tools
(free-form text input) are left alone: toolq defines function tools only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.dispatch.providers.base import dict_items, make_call
from toolq.dispatch.providers.outcome import outcome, text_of
from toolq.errors import PayloadError
from toolq.models import CallResult, ProviderFormat, ToolCall

FORMAT = ProviderFormat.OPENAI
EXPECTED = "an OpenAI ChatCompletion, an assistant message with tool_calls, or tool_calls items"
CALLS = "OpenAI Chat Completions tool_calls"


def _is_call(item: Any) -> bool:
    # ``type`` may be missing: stageflow's and other hand-built calls leave it out.
    return (
        isinstance(item, dict)
        and item.get("type", "function") == "function"
        and isinstance(item.get("function"), dict)
    )


def detect(payload: Any) -> bool:
    """Tell whether ``payload`` is a completion, an assistant message, or tool_calls items."""
    if isinstance(payload, list):
        return any(_is_call(item) for item in payload)
    if not isinstance(payload, dict):
        return False
    return (
        payload.get("object") == "chat.completion"
        or isinstance(payload.get("choices"), list)
        or "tool_calls" in payload
        or _is_call(payload)
        or _is_plain_message(payload)
    )


def _is_plain_message(payload: dict[str, Any]) -> bool:
    # Anthropic assistant messages have a list of blocks, Gemini's role is "model".
    return payload.get("role") == "assistant" and not isinstance(payload.get("content"), list)


def parse(payload: Any) -> list[ToolCall]:
    """Read the function calls of the first choice, a message, or tool_calls items."""
    if isinstance(payload, dict) and "choices" in payload:
        choices = payload["choices"]
        if not isinstance(choices, list):
            raise PayloadError(f"expected {EXPECTED}; 'choices' is not a list")
        if not choices:
            return []
        first = choices[0]
        payload = first.get("message") if isinstance(first, dict) else None
        if not isinstance(payload, dict):
            raise PayloadError(f"expected {EXPECTED}; choices[0] has no message")
    if isinstance(payload, dict) and not _is_call(payload):
        if "tool_calls" not in payload and not _is_plain_message(payload):
            raise PayloadError(f"expected {EXPECTED}")
        payload = payload.get("tool_calls") or []
    calls = []
    for item in dict_items(payload, EXPECTED):
        if item.get("type", "function") != "function":
            continue
        function = item.get("function")
        function = function if isinstance(function, dict) else {}
        calls.append(
            make_call(
                call_id=item.get("id"),
                name=function.get("name"),
                arguments=function.get("arguments"),
                format=FORMAT,
            )
        )
    return calls


def render(results: Sequence[CallResult]) -> list[dict[str, Any]]:
    """Render one ``role: tool`` message per result; media is described in the text."""
    return [
        {
            "role": "tool",
            "tool_call_id": result.tool_call_id,
            "content": text_of(outcome(result).blocks),
        }
        for result in results
    ]
