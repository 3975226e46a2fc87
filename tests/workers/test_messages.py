"""The Celery message dispatch pushes itself is the one kombu would have pushed."""

from __future__ import annotations

import base64
import json

import redis

from tests.apps import registry
from toolq import Client, RiskLevel, Settings
from toolq.broker import HARD_LIMIT_GRACE, TASK_NAME, Publisher
from toolq.workers.app import create_celery

# Different for every message: task ids, delivery tags, the sender's process.
PER_MESSAGE = {"id", "root_id", "correlation_id", "delivery_tag", "origin"}


def _shape(raw: bytes) -> dict[str, object]:
    message = json.loads(raw)
    headers = {k: v for k, v in message["headers"].items() if k not in PER_MESSAGE}
    properties = {k: v for k, v in message["properties"].items() if k not in PER_MESSAGE}
    body = json.loads(base64.b64decode(message["body"]))
    rest = {k: v for k, v in message.items() if k not in {"headers", "properties", "body"}}
    return {"headers": headers, "properties": properties, "body": body, **rest}


def test_message_matches_what_kombu_publishes(r: redis.Redis, settings: Settings) -> None:
    app = create_celery(settings, registry)
    publisher = Publisher(app, settings)
    try:
        publisher.send("c1", RiskLevel.MODERATE, 5.0, "run1")
        [by_kombu] = r.lrange("toolq.moderate", 0, -1)
        queue, ours = publisher.message("c1", RiskLevel.MODERATE, 5.0, "run1")
    finally:
        app.close()
    assert queue == "toolq.moderate"
    assert _shape(ours.encode()) == _shape(by_kombu)
    shape = _shape(ours.encode())
    assert shape["headers"]["task"] == TASK_NAME  # type: ignore[index]
    assert shape["headers"]["timelimit"] == [5.0 + HARD_LIMIT_GRACE, None]  # type: ignore[index]
    assert shape["body"] == [["c1", "run1"], {}, {"callbacks": None, "errbacks": None,
                             "chain": None, "chord": None}]  # fmt: skip


def test_dispatch_stores_and_enqueues_in_one_step(r: redis.Redis, settings: Settings) -> None:
    client = Client(registry, settings)
    try:
        batch = client.dispatch(
            [
                {"id": "a", "name": "echo", "arguments": {"text": "x"}},
                {"id": "b", "name": "nope", "arguments": {}},
                {"id": "c", "name": "wipe", "arguments": {"target": "t"}},
            ]
        )
        again = client.dispatch(
            [{"id": "a", "name": "echo", "arguments": {"text": "x"}}], run_id=batch.run_id
        )
    finally:
        client.close()
    # Only the runnable call has a message (the unknown tool failed, the dangerous one is
    # parked), the duplicate dispatch pushed none, and nothing waits to be re-sent.
    messages = [json.loads(m) for m in r.lrange("toolq.safe", 0, -1)]
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in messages] == [
        [batch.call_ids[0], batch.run_id]
    ]
    assert r.llen("toolq.dangerous") == 0
    assert again.calls[0].duplicate and again.call_ids[0] == batch.call_ids[0]
    assert r.zcard("toolq:unsent") == 0
