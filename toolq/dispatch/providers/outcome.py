"""How a CallResult reads to a model, whatever the provider: its blocks, text and error flag."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard

from toolq.models import (
    AudioContent,
    CallResult,
    CallStatus,
    ContentBlock,
    ImageContent,
    TextContent,
    jsonable,
)

MediaContent = ImageContent | AudioContent

# Image types the OpenAI and Anthropic APIs take inline.
WEB_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@dataclass(frozen=True)
class Outcome:
    """A result as the model should read it.

    ``blocks`` is never empty. ``is_error`` is true for every result that did not succeed,
    including results that are not final yet. ``value`` is the JSON form of a successful
    ``output`` (None when there is none, or on failure).
    """

    is_error: bool
    blocks: tuple[ContentBlock, ...]
    value: Any = None


def outcome(result: CallResult) -> Outcome:
    """Return the blocks and error flag that stand for ``result`` in a tool-result message."""
    status = result.status
    if status is CallStatus.SUCCEEDED:
        value = jsonable(result.output)
        blocks = tuple(result.content) or (TextContent(text=output_text(result.output)),)
        return Outcome(is_error=False, blocks=blocks, value=value)
    return Outcome(is_error=True, blocks=(TextContent(text=status_text(result)),))


def status_text(result: CallResult) -> str:
    """Return what the model reads for a result that did not succeed."""
    reason = result.error
    match result.status:
        case CallStatus.FAILED:
            return f"Error: {reason or 'the tool call failed'}"
        case CallStatus.DENIED:
            return f"Denied: {reason or 'the tool call was not approved'}"
        case CallStatus.EXPIRED:
            return f"Approval expired: {reason or 'nobody approved the call before its deadline'}"
        case CallStatus.CANCELLED:
            return f"Cancelled: {reason or 'the tool call was cancelled'}"
        case CallStatus.UNKNOWN:
            return f"Outcome unknown, being checked: {reason or 'the tool call was interrupted'}"
        case _:
            state = result.status.value.replace("_", " ")
            return f"Result not available yet: the tool call is {state}."


def output_text(output: Any) -> str:
    """Return a successful output as text: strings as they are, anything else as JSON."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, default=str)


def text_of(blocks: Iterable[ContentBlock]) -> str:
    """Join the blocks into one text; media is described, never dropped silently."""
    return "\n".join(block_text(block) for block in blocks)


def block_text(block: ContentBlock) -> str:
    """A block as text: its text, or a description of its media."""
    return block.text if isinstance(block, TextContent) else describe(block)


def is_web_image(block: ContentBlock) -> TypeGuard[ImageContent]:
    """Tell whether ``block`` is an image the OpenAI and Anthropic APIs take inline."""
    return isinstance(block, ImageContent) and block.mime_type in WEB_IMAGE_TYPES


def describe(block: MediaContent) -> str:
    """Return a stand-in text for media a provider cannot take here."""
    return f"[{block.mime_type} omitted: {len(block.data)} bytes base64]"


def data_url(block: MediaContent) -> str:
    """Return the block as a ``data:`` URL."""
    return f"data:{block.mime_type};base64,{block.data}"
