"""Anthropic Messages: ``tool_use`` blocks in, one user message of ``tool_result`` blocks out.

Reads a Message (or an assistant message param), one content block, or a list of blocks.
Blocks other than ``tool_use`` (text, thinking, server tool use) are not toolq's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.dispatch.providers.base import dict_items, make_call
from toolq.dispatch.providers.outcome import block_text, is_web_image, outcome, text_of
from toolq.errors import PayloadError
from toolq.models import CallResult, ContentBlock, ProviderFormat, ToolCall

FORMAT = ProviderFormat.ANTHROPIC
EXPECTED = "an Anthropic Message, or its content blocks"
CALLS = "Anthropic tool_use blocks"


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "tool_use"


def detect(payload: Any) -> bool:
    """Tell whether ``payload`` is a Message, or blocks that include a ``tool_use``."""
    if isinstance(payload, list):
        return any(_is_call(item) for item in payload)
    if not isinstance(payload, dict):
        return False
    return payload.get("type") == "message" or _is_call(payload) or _is_message_param(payload)


def _is_message_param(payload: dict[str, Any]) -> bool:
    content = payload.get("content")
    return (
        payload.get("role") == "assistant"
        and isinstance(content, list)
        and all(isinstance(block, dict) and "type" in block for block in content)
    )


def parse(payload: Any) -> list[ToolCall]:
    """Read the ``tool_use`` blocks of a Message or of a list of content blocks."""
    if isinstance(payload, dict) and (payload.get("type") == "message" or "content" in payload):
        payload = payload.get("content") or []
        if not isinstance(payload, list):
            raise PayloadError(f"expected {EXPECTED}; 'content' is not a list of blocks")
    elif isinstance(payload, dict) and not isinstance(payload.get("type"), str):
        raise PayloadError(f"expected {EXPECTED}")
    return [
        make_call(
            call_id=block.get("id"),
            name=block.get("name"),
            arguments=block.get("input"),
            format=FORMAT,
        )
        for block in dict_items(payload, EXPECTED)
        if _is_call(block)
    ]


def render(results: Sequence[CallResult]) -> list[dict[str, Any]]:
    """Render one user message of ``tool_result`` blocks, one per result; none for none."""
    if not results:
        return []
    return [{"role": "user", "content": [_tool_result(result) for result in results]}]


def _tool_result(result: CallResult) -> dict[str, Any]:
    found = outcome(result)
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": result.tool_call_id,
        "content": _content(found.blocks),
    }
    if found.is_error:
        block["is_error"] = True
    return block


def _content(blocks: Sequence[ContentBlock]) -> str | list[dict[str, Any]]:
    if not any(is_web_image(block) for block in blocks):
        return text_of(blocks)
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if is_web_image(block):
            source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
            parts.append({"type": "image", "source": source})
        elif text := block_text(block):  # the API rejects empty text blocks
            parts.append({"type": "text", "text": text})
    return parts
