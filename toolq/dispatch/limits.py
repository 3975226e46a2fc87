"""Limits on what ``dispatch`` accepts: payload size and JSON depth.

A new run's id length is checked where runs are created (``toolq.results.owners``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from toolq.errors import PayloadError
from toolq.settings import Settings

_ENCODER = json.JSONEncoder(default=str, allow_nan=False)
"""Measures a payload's JSON size (what cannot be encoded as its ``str``); refuses NaN and
Infinity as a JSON text's ``NaN`` is refused (``_not_json``): Python data with them comes
from parsers that take them (the MCP SDK's), and would be stored with ``null`` instead."""


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON-like value, counting stops once past ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list | tuple):
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_payload(payload: Any, settings: Settings) -> Any:
    """The payload (JSON text decoded), refused if over ``max_payload_bytes`` or too deep."""
    if isinstance(payload, bytes | bytearray | str):
        size = len(payload.encode() if isinstance(payload, str) else payload)
        _check_size(size, settings)
        try:
            payload = json.loads(payload, parse_constant=_not_json)
        except RecursionError:
            raise PayloadError(
                f"payload is nested deeper than {settings.max_json_depth} levels"
            ) from None
        except ValueError as exc:
            raise PayloadError(f"payload is not valid JSON: {exc}") from None
        _check_depth(payload, settings)
        return payload
    if isinstance(payload, BaseModel):
        return payload  # SDK objects are built by their own validators; sizes are bounded there
    try:
        size = len(_ENCODER.encode(payload))
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise PayloadError(
            f"payload is nested deeper than {settings.max_json_depth} levels"
        ) from None
    _check_size(size, settings)
    _check_depth(payload, settings)
    return payload


def _not_json(constant: str) -> Any:
    # json.loads takes NaN, Infinity and -Infinity; JSON has no such numbers, and a call's
    # arguments are stored as JSON (with null in their place), so it would run with others.
    raise ValueError(f"{constant} is not a JSON number")


def _check_depth(payload: Any, settings: Settings) -> None:
    if json_depth(payload, settings.max_json_depth) > settings.max_json_depth:
        raise PayloadError(f"payload is nested deeper than {settings.max_json_depth} levels")


def _check_size(size: int, settings: Settings) -> None:
    if size > settings.max_payload_bytes:
        raise PayloadError(
            f"payload is {size} bytes; the limit is {settings.max_payload_bytes} bytes",
            size=size,
            limit=settings.max_payload_bytes,
        )
