"""What every provider module shares: its interface and the reading of one tool call."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from toolq.errors import PayloadError
from toolq.models import CallResult, ProviderFormat, ToolCall


class Provider(Protocol):
    """One provider's wire format; each provider module satisfies this protocol."""

    FORMAT: ProviderFormat
    EXPECTED: str
    """What a payload of this format looks like, for error messages."""
    CALLS: str
    """What this format's tool calls are called, for error messages."""

    def detect(self, payload: Any) -> bool:
        """Tell whether the JSON-form ``payload`` is unmistakably this provider's."""
        ...

    def parse(self, payload: Any) -> list[ToolCall]:
        """Read the tool calls in the JSON-form ``payload``; PayloadError if it does not fit."""
        ...

    def render(self, results: Sequence[CallResult]) -> list[dict[str, Any]]:
        """Render the provider's tool-result messages for ``results``, in order."""
        ...


def to_json(payload: Any) -> tuple[Any, str | None]:
    """Dump SDK models in ``payload`` to their wire (alias) form; also return the SDK.

    The SDK is the top-level package of the first pydantic model found (``"openai"``,
    ``"anthropic"``, ``"google"``, ``"mcp_types"``), or None for plain data.
    """
    if isinstance(payload, BaseModel):
        sdk = type(payload).__module__.partition(".")[0]
        return payload.model_dump(mode="json", by_alias=True), sdk
    if isinstance(payload, list | tuple):
        items = [to_json(item) for item in payload]
        first = next((found for _, found in items if found is not None), None)
        return [item for item, _ in items], first
    return payload, None


MAX_CALL_ID_CHARS = 256
"""A provider's tool call id is at most this long (they are 20-40 characters): it is stored
with the call, its events and its history row."""
MAX_NAME_CHARS = 256
"""A longer tool name is no tool's (providers allow 64 characters)."""


def new_call_id(prefix: str = "call_") -> str:
    """Make a fresh id for a provider call that came without one."""
    return prefix + uuid.uuid4().hex


def make_call(
    *,
    call_id: Any,
    name: Any,
    arguments: Any,
    format: ProviderFormat | None,
    id_prefix: str = "call_",
) -> ToolCall:
    """Build one ToolCall; a missing name or unreadable arguments become its ``error``."""
    decoded, error = decode_arguments(arguments)
    if not isinstance(name, str) or not name:
        name, error = "", "tool call has no name"
    elif len(name) > MAX_NAME_CHARS:
        # no tool has such a name (providers allow 64): the call fails as one without a
        # name, and the name is not stored
        name, error = "", f"tool name is longer than {MAX_NAME_CHARS} characters ({len(name)})"
    if call_id in (None, ""):
        call_id = new_call_id(id_prefix)
    elif not isinstance(call_id, str | int) or isinstance(call_id, bool):
        # str() of a list, object, bool or float is an id the model never sent: the result
        # would answer no call of its turn. As an MCP request's id (bool is no int in JSON).
        raise PayloadError(
            f"a tool call id must be a string or an integer; this {str(name)[:64]!r} call has "
            f"{json_type(call_id)} {str(call_id)[:64]}"
        )
    call_id = str(call_id)
    if len(call_id) > MAX_CALL_ID_CHARS:
        raise PayloadError(
            f"a tool call id is at most {MAX_CALL_ID_CHARS} characters; this {name[:64]!r} "
            f"call's has {len(call_id)}",
            size=len(call_id),
            limit=MAX_CALL_ID_CHARS,
        )
    return ToolCall(id=call_id, name=name, arguments=decoded, format=format, error=error)


def decode_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Decode arguments from a dict or a JSON string; ``({}, message)`` when unreadable."""
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw, parse_constant=reject_constant)
        except ValueError as exc:
            return {}, f"arguments are not valid JSON: {exc}"
        except RecursionError:
            return {}, "arguments are not valid JSON: nested too deeply"
    if not isinstance(raw, dict):
        return {}, f"arguments must be a JSON object, got {json_type(raw)}"
    return raw, None


def reject_constant(name: str) -> Any:
    """``json.loads``'s ``parse_constant``: ``NaN`` and ``Infinity`` are not JSON."""
    raise ValueError(f"{name} is not allowed")


def json_type(value: Any) -> str:
    """Name ``value``'s JSON type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def dict_items(payload: Any, expected: str) -> list[dict[str, Any]]:
    """Return ``payload`` as a list of dicts; PayloadError naming ``expected`` otherwise."""
    items = payload if isinstance(payload, list) else [payload]
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise PayloadError(
                f"expected {expected}; item {position} is {json_type(item)}",
                position=position,
            )
    return items
