"""Read tool calls from a model's response; render results as its next turn's messages.

Each provider module (``openai``, ``openai_responses``, ``anthropic``, ``gemini``, ``mcp``)
has ``detect``, ``parse`` and ``render``; ``generic`` reads plain call dicts only.
SDK objects are dumped to their wire (alias) form first, so there is one code path per
provider.

Detection, first match wins:

1. An SDK object (or a list of them) is read by its SDK's providers: ``openai`` objects as
   Chat Completions or Responses (whichever fits), ``anthropic``, ``google.genai`` as
   gemini, ``mcp`` as mcp (CallToolRequestParams included).
2. Plain data is tried in this order, each on keys no earlier format claims:
   mcp (``jsonrpc``, ``method: tools/call``), openai (``choices``, ``tool_calls``,
   ``type: function`` items), openai-responses (``output``, ``type: function_call``),
   anthropic (``type: message``, ``tool_use``), gemini (``candidates``, ``parts``,
   ``functionCall``/``function_call``, ``{name, args}``), then generic (``name`` with
   ``arguments`` or ``id``) last, since a Responses ``function_call`` also has those keys.
   A list goes to the first provider with a call item in it.
3. An empty list, or a list of typed blocks/items or text parts with no call, holds no calls.

Anything else raises PayloadError. With ``format=`` the payload is read as that provider's,
and a payload another provider recognises is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolq.dispatch.providers import anthropic, gemini, generic, mcp, openai, openai_responses
from toolq.dispatch.providers.base import Provider, json_type, to_json
from toolq.errors import PayloadError
from toolq.models import CallResult, ProviderFormat, ToolCall

__all__ = ["PROVIDERS", "Provider", "parse_tool_calls", "provider_for", "to_messages"]

PROVIDERS: tuple[Provider, ...] = (mcp, openai, openai_responses, anthropic, gemini)
_BY_FORMAT: dict[ProviderFormat, Provider] = {provider.FORMAT: provider for provider in PROVIDERS}
_BY_SDK: dict[str, tuple[Provider, ...]] = {
    "openai": (openai, openai_responses),
    "anthropic": (anthropic,),
    "google": (gemini,),
    "mcp": (mcp,),
    "mcp_types": (mcp,),
}


def provider_for(format: ProviderFormat | str) -> Provider:
    """Return the provider module for ``format``; ValueError names the valid formats."""
    return _BY_FORMAT[ProviderFormat.parse(format)]


def parse_tool_calls(payload: Any, format: ProviderFormat | str | None = None) -> list[ToolCall]:
    """Read the tool calls in a model's response, in order.

    A call whose name is missing or whose arguments are not a JSON object comes back with
    ``error`` set and ``arguments={}``; only a payload that cannot be read raises
    PayloadError.
    """
    data, sdk = to_json(payload)
    if format is not None:
        provider = provider_for(format)
        if not provider.detect(data):
            other = _detect(data, PROVIDERS)
            if other is not None:
                raise PayloadError(
                    f"expected {provider.EXPECTED}; the payload is {other.FORMAT.value} instead",
                    format=provider.FORMAT.value,
                )
        return provider.parse(data)
    hinted = _BY_SDK.get(sdk or "")
    if hinted is not None:
        return (_detect(data, hinted) or hinted[0]).parse(data)
    detected = _detect(data, PROVIDERS)
    if detected is not None:
        return detected.parse(data)
    if generic.detect(data):
        return generic.parse(data)
    if isinstance(data, list) and all(map(_holds_no_call, data)):
        return []
    expected = "; ".join(p.EXPECTED for p in PROVIDERS)
    raise PayloadError(
        f"cannot read tool calls from this {json_type(data)}; expected {expected}; "
        f"or {generic.EXPECTED}"
    )


def to_messages(
    results: Sequence[CallResult], format: ProviderFormat | str
) -> list[dict[str, Any]]:
    """Render ``results`` as ``format``'s tool-result messages, keyed by ``tool_call_id``."""
    return provider_for(format).render(results)


def _detect(data: Any, providers: Sequence[Provider]) -> Provider | None:
    return next((provider for provider in providers if provider.detect(data)), None)


def _holds_no_call(item: Any) -> bool:
    return isinstance(item, dict) and (isinstance(item.get("type"), str) or "text" in item)
