"""Gemini: ``functionCall`` parts in, one user Content of ``functionResponse`` parts out.

Reads a GenerateContentResponse (its first candidate only), a Content, one Part, one
FunctionCall, or a list of parts or FunctionCalls; both the SDK's snake_case and the REST
camelCase keys. Calls without an id get ``gemini_call_<hex>``; such ids are never sent back,
so Gemini matches those responses by name and order, as it does for its own id-less calls.
Rendered keys are REST camelCase, which the SDK accepts as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeGuard

from toolq.dispatch.providers.base import dict_items, make_call
from toolq.dispatch.providers.outcome import block_text, outcome
from toolq.errors import PayloadError
from toolq.models import CallResult, ContentBlock, ImageContent, ProviderFormat, ToolCall

FORMAT = ProviderFormat.GEMINI
EXPECTED = "a Gemini GenerateContentResponse, a Content, or its parts"
CALLS = "Gemini functionCall parts"
GENERATED_ID_PREFIX = "gemini_call_"

# Media Gemini takes inside a function response.
_INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp"})


def _function_call(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    call = item.get("functionCall") or item.get("function_call")
    if isinstance(call, dict):
        return call
    if "name" in item and "args" in item:
        return item
    return None


def detect(payload: Any) -> bool:
    """Tell whether ``payload`` is a response, a Content, or parts with a function call."""
    if isinstance(payload, list):
        return any(_function_call(item) is not None for item in payload)
    if not isinstance(payload, dict):
        return False
    return "candidates" in payload or "parts" in payload or _function_call(payload) is not None


def parse(payload: Any) -> list[ToolCall]:
    """Read the function calls of the first candidate, a Content, or a list of parts."""
    if isinstance(payload, dict) and "candidates" in payload:
        candidates = payload["candidates"] or []
        if not isinstance(candidates, list):
            raise PayloadError(f"expected {EXPECTED}; 'candidates' is not a list")
        first = candidates[0] if candidates else {}
        payload = (first.get("content") if isinstance(first, dict) else None) or {}
    if isinstance(payload, dict) and _function_call(payload) is None:
        if "parts" not in payload and payload:
            raise PayloadError(f"expected {EXPECTED}")
        payload = payload.get("parts") or []
    calls = []
    for item in dict_items(payload, EXPECTED):
        call = _function_call(item)
        if call is not None:
            calls.append(
                make_call(
                    call_id=call.get("id"),
                    name=call.get("name"),
                    arguments=call.get("args"),
                    format=FORMAT,
                    id_prefix=GENERATED_ID_PREFIX,
                )
            )
    return calls


def render(results: Sequence[CallResult]) -> list[dict[str, Any]]:
    """Render one ``role: user`` Content with a ``functionResponse`` part per result."""
    if not results:
        return []
    parts = [{"functionResponse": _function_response(result)} for result in results]
    return [{"role": "user", "parts": parts}]


def _function_response(result: CallResult) -> dict[str, Any]:
    found = outcome(result)
    response: dict[str, Any] = {"name": result.name}
    if not result.tool_call_id.startswith(GENERATED_ID_PREFIX):
        response["id"] = result.tool_call_id
    images = [block for block in found.blocks if _is_inline(block)]
    text = "\n".join(block_text(block) for block in found.blocks if not _is_inline(block))
    if found.is_error:
        response["response"] = {"error": text}
    else:
        # Gemini's convention: a success is {"output": ...}, a failure {"error": ...}.
        response["response"] = {"output": text if result.content else found.value}
    if images:
        response["parts"] = [
            {"inlineData": {"mimeType": image.mime_type, "data": image.data}} for image in images
        ]
    return response


def _is_inline(block: ContentBlock) -> TypeGuard[ImageContent]:
    return isinstance(block, ImageContent) and block.mime_type in _INLINE_TYPES
