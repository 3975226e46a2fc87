"""``dispatch_stream``: each tool call of a streamed response is dispatched once complete.

The events are built with the provider SDKs' own models (openai, anthropic).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageStopEvent,
    ToolUseBlock,
)
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import (
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
)

from toolq import AsyncClient, Client
from toolq.models import CallStatus, ProviderFormat


def calls_stored(r: redis.Redis, client: Client) -> int:
    return sum(1 for _ in r.scan_iter(match=client.keys.call_match(""), count=1000))


def chunk(tool_calls: list[dict[str, Any]] | None = None, finish: str | None = None) -> Any:
    return ChatCompletionChunk.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": tool_calls} if tool_calls else {},
                    "finish_reason": finish,
                }
            ],
        }
    )


def chat_stream() -> list[Any]:
    return [
        chunk(
            [
                {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"te'},
                }
            ]
        ),
        chunk([{"index": 0, "function": {"arguments": 'xt": "one"}'}}]),
        chunk(
            [
                {
                    "index": 1,
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1,'},
                }
            ]
        ),
        chunk([{"index": 1, "function": {"arguments": ' "b": 2}'}}]),
        chunk(finish="tool_calls"),
    ]


def anthropic_call(index: int, call_id: str, name: str, parts: list[str]) -> list[Any]:
    return [
        RawContentBlockStartEvent(
            type="content_block_start",
            index=index,
            content_block=ToolUseBlock(type="tool_use", id=call_id, name=name, input={}),
        ),
        *(
            RawContentBlockDeltaEvent(
                type="content_block_delta",
                index=index,
                delta=InputJSONDelta(type="input_json_delta", partial_json=part),
            )
            for part in parts
        ),
        RawContentBlockStopEvent(type="content_block_stop", index=index),
    ]


def test_openai_chat_chunks_dispatch_each_call_before_the_stream_ends(
    client: Client, inproc, r
) -> None:
    inproc.start("safe,moderate")
    stored_when: list[int] = []

    def stream() -> Iterator[Any]:
        for event in chat_stream():
            stored_when.append(calls_stored(r, client))
            yield event

    batches = client.dispatch_stream(stream())
    # The first call was stored once the third chunk (the second call's start) was read.
    assert stored_when == [0, 0, 0, 1, 1]
    assert [b.calls[0].tool_call_id for b in batches] == ["c1", "c2"]
    assert len({b.run_id for b in batches}) == 1
    results = client.wait([b.call_ids[0] for b in batches], timeout=30)
    assert [x.output for x in results] == [{"text": "one"}, 3]
    assert batches[0].to_messages()[0]["tool_call_id"] == "c1"


def test_openai_responses_events_dispatch_at_output_item_done(client: Client, inproc) -> None:
    inproc.start("safe,moderate")
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "r1",
        "name": "echo",
        "status": "in_progress",
        "arguments": "",
    }
    events = [
        ResponseOutputItemAddedEvent.model_validate(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": item,
                "sequence_number": 1,
            }
        ),
        ResponseFunctionCallArgumentsDeltaEvent.model_validate(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 0,
                "delta": '{"text": "r"}',
                "sequence_number": 2,
            }
        ),
        ResponseOutputItemDoneEvent.model_validate(
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "sequence_number": 3,
                "item": {**item, "status": "completed", "arguments": '{"text": "r"}'},
            }
        ),
    ]
    [batch] = client.dispatch_stream(events)
    assert batch.format is ProviderFormat.OPENAI_RESPONSES
    [result] = batch.wait(timeout=30)
    assert result.output == {"text": "r"}
    assert batch.to_messages()[0]["call_id"] == "r1"


def test_anthropic_stream_cut_mid_call_dispatches_only_the_complete_ones(
    client: Client, inproc, r
) -> None:
    inproc.start("safe,moderate")

    def stream() -> Iterator[Any]:
        yield from anthropic_call(0, "t1", "echo", ['{"text"', ': "a"}'])
        second = anthropic_call(1, "t2", "echo", ['{"text"', ': "b"}'])
        yield from second[:2]  # started, half its arguments, then the connection drops
        raise ConnectionError("stream broke off")

    with pytest.raises(ConnectionError):
        client.dispatch_stream(stream())
    assert calls_stored(r, client) == 1
    # The whole stream dispatches both, then nothing for a message_stop.
    whole = [
        *anthropic_call(0, "t1", "echo", ['{"text": "a"}']),
        *anthropic_call(1, "t2", "add", ['{"a": 2', ', "b": 3}']),
        RawMessageStopEvent(type="message_stop"),
    ]
    batches = client.dispatch_stream(whole)
    assert [b.format for b in batches] == [ProviderFormat.ANTHROPIC] * 2
    results = client.wait([b.call_ids[0] for b in batches], timeout=30)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 2
    assert results[1].output == 5


def test_async_twin_reads_an_async_stream(settings, inproc) -> None:
    from tests.apps import registry

    inproc.start("safe,moderate")

    async def main() -> list[Any]:
        client = AsyncClient(registry, settings)

        async def stream() -> Any:
            for event in chat_stream():
                await asyncio.sleep(0)
                yield event

        try:
            batches = await client.dispatch_stream(stream())
            return [(await b.wait(timeout=30))[0].output for b in batches]
        finally:
            await client.close()

    assert asyncio.run(main()) == [{"text": "one"}, 3]


def test_async_twin_cancelled_dispatches_nothing_more(settings, r) -> None:
    from tests.apps import registry

    async def main() -> int:
        client = AsyncClient(registry, settings)
        resume = asyncio.Event()
        events = chat_stream()

        async def stream() -> Any:
            for event in events[:3]:  # the first call is complete
                yield event
            await resume.wait()
            for event in events[3:]:  # the second one is
                yield event

        try:
            task = asyncio.create_task(client.dispatch_stream(stream()))
            while calls_stored(r, client.sync) == 0:
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            resume.set()
            await asyncio.sleep(0.5)
            return calls_stored(r, client.sync)
        finally:
            await client.close()

    assert asyncio.run(main()) == 1
