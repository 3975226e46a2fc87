"""OpenAI Responses: ``function_call`` items in, ``function_call_output`` items out.

Reads a Response, one output item, or a list of output items. Items other than
``function_call`` (reasoning, messages, built-in and custom tool calls) are not toolq's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.dispatch.providers.base import dict_items, make_call
from toolq.dispatch.providers.outcome import block_text, data_url, is_web_image, outcome, text_of
from toolq.errors import PayloadError
from toolq.models import CallResult, ContentBlock, ProviderFormat, ToolCall

FORMAT = ProviderFormat.OPENAI_RESPONSES
EXPECTED = "an OpenAI Response, or Response output items"
CALLS = "OpenAI Responses function_call items"


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "function_call"


def detect(payload: Any) -> bool:
    """Tell whether ``payload`` is a Response, or items that include a ``function_call``."""
    if isinstance(payload, list):
        return any(_is_call(item) for item in payload)
    if not isinstance(payload, dict):
        return False
    return (
        payload.get("object") == "response"
        or isinstance(payload.get("output"), list)
        or _is_call(payload)
    )


def parse(payload: Any) -> list[ToolCall]:
    """Read the ``function_call`` items of a Response or of a list of output items."""
    if isinstance(payload, dict) and "output" in payload:
        payload = payload["output"] or []
        if not isinstance(payload, list):
            raise PayloadError(f"expected {EXPECTED}; 'output' is not a list")
    elif isinstance(payload, dict) and not isinstance(payload.get("type"), str):
        raise PayloadError(f"expected {EXPECTED}")
    return [
        make_call(
            call_id=item.get("call_id"),
            name=item.get("name"),
            arguments=item.get("arguments"),
            format=FORMAT,
        )
        for item in dict_items(payload, EXPECTED)
        if _is_call(item)
    ]


def render(results: Sequence[CallResult]) -> list[dict[str, Any]]:
    """Render one ``function_call_output`` item per result."""
    return [
        {"type": "function_call_output", "call_id": result.tool_call_id, "output": _output(result)}
        for result in results
    ]


def _output(result: CallResult) -> str | list[dict[str, Any]]:
    blocks = outcome(result).blocks
    if not any(is_web_image(block) for block in blocks):
        return text_of(blocks)
    return [_part(block) for block in blocks]


def _part(block: ContentBlock) -> dict[str, Any]:
    if is_web_image(block):
        return {"type": "input_image", "image_url": data_url(block)}
    return {"type": "input_text", "text": block_text(block)}
