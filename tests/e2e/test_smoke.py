from __future__ import annotations

import json

from toolq import CallStatus


def openai_call(call_id: str, name: str, arguments: object) -> dict[str, object]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def test_batch_round_trip(client, workers):
    workers.start()
    batch = client.dispatch(
        {
            "role": "assistant",
            "tool_calls": [
                openai_call("c1", "echo", {"text": "hi"}),
                openai_call("c2", "echo", '{"text": '),
                openai_call("c3", "add", {"a": 2, "b": 3}),
            ],
        }
    )
    results = batch.wait(timeout=20)
    assert [r.status for r in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
        CallStatus.SUCCEEDED,
    ]
    assert results[0].output == {"text": "hi"}
    assert results[2].output == 5
    messages = batch.to_messages()
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2", "c3"]
