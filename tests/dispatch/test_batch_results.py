"""A batch renders the results its ``wait`` returned, without reading the records again."""

from __future__ import annotations

import redis

from toolq import Client
from toolq.models import CallStatus

CALLS = [
    {"id": "b1", "name": "echo", "arguments": {"text": "one"}},
    {"id": "b2", "name": "add", "arguments": {"a": 1, "b": 2}},
    {"id": "b3", "name": "boom", "arguments": {}},
    {"id": "b4", "name": "nope", "arguments": {}},  # unknown tool: final at dispatch
]


def commands(r: redis.Redis, name: str) -> int:
    stats: dict[str, dict[str, int]] = r.info("commandstats")  # type: ignore[assignment]
    return stats.get(f"cmdstat_{name}", {}).get("calls", 0)


def test_to_messages_after_wait_uses_the_results_wait_returned(client: Client, workers, r) -> None:
    workers.start()
    batch = client.dispatch(CALLS)
    results = batch.wait(timeout=30)
    assert [x.status for x in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
        CallStatus.FAILED,
    ]
    expected = client.to_messages(batch.run_id, "openai")  # read from the records
    before = commands(r, "hgetall")
    assert batch.to_messages("openai") == expected
    assert batch.to_messages("anthropic")[0]["content"][0]["tool_use_id"] == "b1"
    assert commands(r, "hgetall") == before
    # The records are not needed any more: the batch holds the final results.
    r.delete(*(client.keys.call(c) for c in batch.call_ids))
    assert batch.to_messages("openai") == expected
    assert batch.wait(timeout=1) == results


def test_to_messages_before_wait_reads_the_current_results(client: Client) -> None:
    batch = client.dispatch([{"id": "q1", "name": "echo", "arguments": {"text": "x"}}])
    [message] = batch.to_messages()  # no worker: still queued
    assert message["tool_call_id"] == "q1"
    assert "queued" in message["content"]
