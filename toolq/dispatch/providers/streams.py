"""``StreamedCalls``: tool calls taken from a provider's streamed response as each completes.

Reads the events of OpenAI chat completion chunks (``ChatCompletionChunk``: ``delta.tool_calls``
fragments by ``index``), the OpenAI Responses stream (``response.output_item.done`` with a
``function_call`` item) and Anthropic's message stream (``content_block_start`` of a
``tool_use`` block, its ``input_json_delta`` fragments, ``content_block_stop``), as the SDKs'
models or as their JSON dicts. ``feed`` returns the calls an event completed, each in its
provider's non-streamed form (what ``dispatch`` parses); a call whose end never arrives (the
stream broke off) is never returned.

When a call is complete: Anthropic's at its ``content_block_stop``, a Responses call at its
``output_item.done``, a chat completion call when a chunk starts the next call's index or
gives a ``finish_reason`` (chat chunks carry no end of one call).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from toolq.dispatch.providers.base import reject_constant
from toolq.models import ProviderFormat


def _plain(event: Any) -> Any:
    """An SDK model as its JSON dict; dicts as they are."""
    dump = getattr(event, "model_dump", None)
    return dump(mode="json", exclude_none=False) if callable(dump) else event


@dataclass
class _Open:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamedCalls:
    """Assembles the tool calls of one streamed model response."""

    def __init__(self) -> None:
        self.format: ProviderFormat | None = None
        """The provider format the events turned out to be in (``None`` until a call starts)."""
        self._chat: dict[int, _Open] = {}
        self._blocks: dict[int, _Open] = {}

    def feed(self, event: Any) -> list[dict[str, Any]]:
        """The calls ``event`` completed, in their provider's non-streamed form."""
        data = _plain(event)
        if not isinstance(data, dict):
            return []
        if data.get("object") == "chat.completion.chunk" or "choices" in data:
            return self._chat_chunk(data)
        kind = data.get("type")
        if kind == "response.output_item.done":
            item = data.get("item") or {}
            if item.get("type") != "function_call":
                return []
            self.format = ProviderFormat.OPENAI_RESPONSES
            return [
                {
                    "type": "function_call",
                    "call_id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments") or "{}",
                }
            ]
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.format = ProviderFormat.ANTHROPIC
                self._blocks[int(data["index"])] = _Open(block.get("id", ""), block.get("name", ""))
            return []
        if kind == "content_block_delta":
            delta = data.get("delta") or {}
            open_block = self._blocks.get(int(data.get("index", -1)))
            if open_block is not None and delta.get("type") == "input_json_delta":
                open_block.arguments.append(delta.get("partial_json") or "")
            return []
        if kind == "content_block_stop":
            done = self._blocks.pop(int(data.get("index", -1)), None)
            return [] if done is None else [self._tool_use(done)]
        return []

    def _chat_chunk(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            for fragment in delta.get("tool_calls") or []:
                index = int(fragment.get("index", 0))
                if index not in self._chat:
                    # A new index: every call before it is complete.
                    out += [self._function(i) for i in sorted(self._chat) if i < index]
                    self._chat[index] = _Open()
                    self.format = ProviderFormat.OPENAI
                call = self._chat[index]
                call.id = fragment.get("id") or call.id
                function = fragment.get("function") or {}
                call.name = function.get("name") or call.name
                call.arguments.append(function.get("arguments") or "")
            if choice.get("finish_reason"):
                out += [self._function(i) for i in sorted(self._chat)]
        return out

    def _function(self, index: int) -> dict[str, Any]:
        call = self._chat.pop(index)
        return {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": "".join(call.arguments) or "{}"},
        }

    def _tool_use(self, block: _Open) -> dict[str, Any]:
        raw = "".join(block.arguments) or "{}"
        try:
            # NaN and Infinity are not JSON: left as text, the call fails as a chat call's does
            arguments: Any = json.loads(raw, parse_constant=reject_constant)
        except ValueError:
            arguments = raw  # dispatch records the call as failed with the decoding error
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments}
