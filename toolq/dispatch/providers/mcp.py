"""MCP: ``tools/call`` requests in, ``CallToolResult`` objects out.

Reads a JSON-RPC ``tools/call`` request (the call id is the JSON-RPC id as a string), a
batch of them, or the SDK's CallToolRequest / CallToolRequestParams (these carry no
JSON-RPC id, so one is generated). A successful output goes to ``structuredContent`` as
is when it is an object and as ``{"result": output}`` otherwise, since protocol versions
before 2026-07-28 allow objects only; its text also goes to ``content``, as the spec asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.dispatch.providers.base import dict_items, make_call
from toolq.dispatch.providers.outcome import outcome
from toolq.errors import PayloadError
from toolq.models import CallResult, ContentBlock, ProviderFormat, TextContent, ToolCall

FORMAT = ProviderFormat.MCP
EXPECTED = "an MCP tools/call request (JSON-RPC), or CallToolRequest params"
GENERATED_ID_PREFIX = "mcp_call_"


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and item.get("method") == "tools/call"


def detect(payload: Any) -> bool:
    """Tell whether ``payload`` is a JSON-RPC request, or a batch with a ``tools/call``."""
    if isinstance(payload, list):
        return any(_is_call(item) for item in payload)
    return isinstance(payload, dict) and ("jsonrpc" in payload or _is_call(payload))


def parse(payload: Any) -> list[ToolCall]:
    """Read one call per ``tools/call`` request; bare params are a request without id."""
    calls = []
    for item in dict_items(payload, EXPECTED):
        if "method" not in item and "name" in item:
            item = {"params": item}
        elif item.get("method") != "tools/call":
            method = item.get("method")
            got = f"method {method!r}" if method is not None else "no method"
            raise PayloadError(f"expected {EXPECTED}; got {got}")
        params = item.get("params")
        params = params if isinstance(params, dict) else {}
        calls.append(
            make_call(
                call_id=item.get("id"),
                name=params.get("name"),
                arguments=params.get("arguments"),
                format=FORMAT,
                id_prefix=GENERATED_ID_PREFIX,
            )
        )
    return calls


def render(results: Sequence[CallResult]) -> list[dict[str, Any]]:
    """Render one CallToolResult (camelCase wire form) per result."""
    return [_call_tool_result(result) for result in results]


def _call_tool_result(result: CallResult) -> dict[str, Any]:
    found = outcome(result)
    rendered: dict[str, Any] = {
        "content": [_content(block) for block in found.blocks],
        "isError": found.is_error,
    }
    if not found.is_error and found.value is not None:
        value = found.value
        rendered["structuredContent"] = value if isinstance(value, dict) else {"result": value}
    return rendered


def _content(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    return {"type": block.type, "data": block.data, "mimeType": block.mime_type}
