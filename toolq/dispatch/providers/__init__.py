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

Ambiguous payloads are refused with PayloadError rather than read as one format with the
other's calls dropped: a payload (or the message a completion or response wraps, or a list
of content, parts, output or tool_calls items in either) in which two providers find calls,
for example an OpenAI message with ``tool_calls`` that also holds Anthropic ``tool_use``
blocks or Gemini ``functionCall`` parts, or a list that mixes their items.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
    provider = _provider_of(data, sdk, format)
    if provider is not None:
        calls = provider.parse(data)
        _refuse_ambiguous(data, provider)
        return calls
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


def _provider_of(
    data: Any, sdk: str | None, format: ProviderFormat | str | None
) -> Provider | None:
    """The provider that reads ``data``: the one asked for, the SDK's, or the detected one."""
    if format is not None:
        provider = provider_for(format)
        if not provider.detect(data):
            other = _detect(data, PROVIDERS)
            if other is not None:
                raise PayloadError(
                    f"expected {provider.EXPECTED}; the payload is {other.FORMAT.value} instead",
                    format=provider.FORMAT.value,
                )
        return provider
    hinted = _BY_SDK.get(sdk or "")
    if hinted is not None:
        return _detect(data, hinted) or hinted[0]
    return _detect(data, PROVIDERS)


def _refuse_ambiguous(data: Any, provider: Provider) -> None:
    """Raise PayloadError when calls of two providers share one message of ``data``.

    A message is read with its item lists; its reader counts even when it finds no calls,
    since reading the message its way would drop the calls another provider finds.
    """
    for reader, parts in _messages(data, provider):
        finders = [reader]
        for part in parts:
            finders += [p for p in PROVIDERS if p not in finders and _finds_calls(p, part)]
        if len(finders) > 1:
            kinds = " and ".join(p.CALLS for p in finders)
            raise PayloadError(
                f"ambiguous payload: it holds both {kinds}; toolq will not pick one format and "
                "drop the other's calls, so send each format's calls in a payload of its own",
                formats=[p.FORMAT.value for p in finders],
            )


_WRAPPERS: tuple[tuple[str, str, Provider], ...] = (
    ("choices", "message", openai),
    ("candidates", "content", gemini),
)
"""Where a completion or response keeps the one message toolq reads, and who reads it."""
_CONTAINERS = ("content", "output", "parts", "tool_calls")
"""Keys of a message whose list holds its content, output items, parts or calls."""


def _messages(data: Any, provider: Provider) -> Iterator[tuple[Provider, list[Any]]]:
    """``data`` and the message it wraps, each with its reader and item lists (no deeper)."""
    yield provider, _with_lists(data)
    if not isinstance(data, dict):
        return
    for outer, inner, reader in _WRAPPERS:
        wrapped = data.get(outer)
        if isinstance(wrapped, list) and wrapped and isinstance(wrapped[0], dict):
            message = wrapped[0].get(inner)
            if isinstance(message, dict):
                yield reader, _with_lists(message)


def _with_lists(message: Any) -> list[Any]:
    if not isinstance(message, dict):
        return [message]
    return [message, *(message[k] for k in _CONTAINERS if isinstance(message.get(k), list))]


def _finds_calls(provider: Provider, data: Any) -> bool:
    if not provider.detect(data):
        return False
    try:
        return bool(provider.parse(data))
    except PayloadError:
        return False


def _detect(data: Any, providers: Sequence[Provider]) -> Provider | None:
    return next((provider for provider in providers if provider.detect(data)), None)


def _holds_no_call(item: Any) -> bool:
    return isinstance(item, dict) and (isinstance(item.get("type"), str) or "text" in item)
