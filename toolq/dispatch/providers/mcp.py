"""MCP: ``tools/call`` requests in; CallToolResults, or JSON-RPC responses to requests, out.

Reads a JSON-RPC ``tools/call`` request, a batch of them, or the SDK's CallToolRequest /
CallToolRequestParams. A request's id is kept with its JSON type (``ToolCall.rpc_id``; the
call id is its text) and must be a string or an integer, unique in its batch, as MCP asks.
Params, and requests without an id, have no id to answer to: one is generated.

A call from a request with an id renders as its JSON-RPC response, ``{"jsonrpc": "2.0",
"id": <the request's id>, "result": <CallToolResult>}``, so a batch of answers matches its
requests; an unknown tool, or a request whose name or arguments cannot be read, is the
JSON-RPC error ``-32602`` (invalid params) instead, as MCP asks for protocol errors. Every
other outcome, failures included, is a CallToolResult (``isError`` when it did not succeed)
the model reads. Calls without a request id render as bare CallToolResults.

A successful output goes to ``structuredContent`` as is when it is an object and as
``{"result": output}`` otherwise, since protocol versions before 2026-07-28 allow objects
only; its text also goes to ``content``, as the spec asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.dispatch.providers.base import dict_items, json_type, make_call
from toolq.dispatch.providers.outcome import outcome
from toolq.errors import PayloadError, ToolNotFoundError
from toolq.models import (
    CallResult,
    CallStatus,
    ContentBlock,
    ProviderFormat,
    RpcId,
    TextContent,
    ToolCall,
)

FORMAT = ProviderFormat.MCP
EXPECTED = "an MCP tools/call request (JSON-RPC), or CallToolRequest params"
CALLS = "MCP tools/call requests"
GENERATED_ID_PREFIX = "mcp_call_"
INVALID_PARAMS = -32602
"""JSON-RPC's code for invalid method parameters; MCP's for an unknown tool."""

# Error types of calls MCP counts as protocol errors: the request itself was wrong.
_PROTOCOL_ERRORS = frozenset({ToolNotFoundError.code, PayloadError.code})


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
    seen: set[tuple[type, RpcId]] = set()
    for position, item in enumerate(dict_items(payload, EXPECTED)):
        if "method" not in item and "name" in item:
            item = {"params": item}
        elif item.get("method") != "tools/call":
            method = item.get("method")
            got = f"method {method!r}" if method is not None else "no method"
            raise PayloadError(f"expected {EXPECTED}; got {got}")
        rpc_id = _request_id(item, position)
        if rpc_id is not None:
            # 7 and "7" are different JSON-RPC ids.
            if (type(rpc_id), rpc_id) in seen:
                raise PayloadError(
                    f"JSON-RPC id {rpc_id!r} is used twice in this batch; MCP request ids "
                    "must be unique",
                    position=position,
                )
            seen.add((type(rpc_id), rpc_id))
        params = item.get("params")
        params = params if isinstance(params, dict) else {}
        call = make_call(
            call_id=rpc_id,
            name=params.get("name"),
            arguments=params.get("arguments"),
            format=FORMAT,
            id_prefix=GENERATED_ID_PREFIX,
        )
        calls.append(call.model_copy(update={"rpc_id": rpc_id}) if rpc_id is not None else call)
    return calls


def _request_id(item: dict[str, Any], position: int) -> RpcId | None:
    """The request's id as sent; None when it has none (or null, which MCP forbids)."""
    rpc_id = item.get("id")
    if rpc_id is None:
        return None
    # bool is an int in Python, not in JSON.
    if isinstance(rpc_id, str) or (isinstance(rpc_id, int) and not isinstance(rpc_id, bool)):
        return rpc_id
    raise PayloadError(
        f"a JSON-RPC id must be a string or an integer; request {position} has "
        f"{json_type(rpc_id)} {rpc_id!r}",
        position=position,
    )


def render(results: Sequence[CallResult]) -> list[dict[str, Any]]:
    """Render a JSON-RPC response per result with a request id, else a CallToolResult."""
    return [_answer(result) for result in results]


def _answer(result: CallResult) -> dict[str, Any]:
    if result.rpc_id is None:
        return _call_tool_result(result)
    if result.status is CallStatus.FAILED and result.error_type in _PROTOCOL_ERRORS:
        error = {"code": INVALID_PARAMS, "message": result.error or "invalid params"}
        return {"jsonrpc": "2.0", "id": result.rpc_id, "error": error}
    return {"jsonrpc": "2.0", "id": result.rpc_id, "result": _call_tool_result(result)}


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
