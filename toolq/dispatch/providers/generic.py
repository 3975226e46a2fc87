"""Plain ``{"id", "name", "arguments"}`` dicts, for callers that speak no provider format.

``arguments`` is a dict or a JSON string; a missing id is generated. These calls have
``format=None``: their results render in whichever format the caller asks for.
"""

from __future__ import annotations

from typing import Any

from toolq.dispatch.providers.base import dict_items, make_call
from toolq.models import ToolCall

EXPECTED = 'a {"id", "name", "arguments"} dict or a list of them'


def _is_call(item: Any) -> bool:
    return isinstance(item, dict) and "name" in item and ("arguments" in item or "id" in item)


def detect(payload: Any) -> bool:
    """Tell whether ``payload`` is a call dict, or a list of dicts that includes one."""
    if isinstance(payload, list):
        return all(isinstance(item, dict) for item in payload) and any(map(_is_call, payload))
    return _is_call(payload)


def parse(payload: Any) -> list[ToolCall]:
    """Read one call per dict."""
    return [
        make_call(
            call_id=item.get("id"),
            name=item.get("name"),
            arguments=item.get("arguments"),
            format=None,
        )
        for item in dict_items(payload, EXPECTED)
    ]
