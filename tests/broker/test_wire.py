"""``toolq.broker`` writes what kombu and Celery themselves publish, and reads it back.

Dispatch, approval and undo scripts push ``Publisher``'s messages straight onto the queues,
so a kombu or Celery release that changes its envelope would leave workers unable to read
them. These tests publish real messages through Celery and kombu's Redis transport to the
suite's Redis and compare them, field by field, with the encoder's: ``pyproject.toml``
bounds kombu and celery, and the bound is raised only when these tests pass.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Queue

from toolq import RiskLevel, Settings
from toolq.broker import (
    BATCH_TASK_NAME,
    HARD_LIMIT_GRACE,
    TASK_NAME,
    UNDO_TASK_NAME,
    Delivery,
    Publisher,
    celery_app,
    decode,
    unacked,
)
from toolq.broker.app import _KOMBU_APPEND
from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX

PER_MESSAGE = {"id", "root_id", "correlation_id", "delivery_tag"}
"""Fields that differ between any two messages: task ids and delivery tags."""
PER_SENDER = {"origin"}
"""``pid@host`` of the sending process (both senders here are this process)."""


def _fields(raw: bytes | str) -> dict[str, Any]:
    """A stored message as ``{top-level, headers, properties, body}`` field dictionaries."""
    message = json.loads(raw)
    body = message["body"]
    if message["properties"]["body_encoding"] == "base64":
        body = base64.b64decode(body)
    return {
        "top": {k: v for k, v in message.items() if k not in {"headers", "properties", "body"}},
        "headers": message["headers"],
        "properties": message["properties"],
        "body": json.loads(body),
    }


def _assert_same_shape(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Every field equal, one by one, but those that differ per message."""
    assert ours["top"] == theirs["top"]
    assert ours["body"] == theirs["body"]
    for part in ("headers", "properties"):
        assert set(ours[part]) == set(theirs[part]), part
        for name in ours[part]:
            if name in PER_MESSAGE:
                assert ours[part][name] != theirs[part][name], (part, name)
            else:
                assert ours[part][name] == theirs[part][name], (part, name)


@pytest.fixture
def publisher(settings: Settings) -> Any:
    app = celery_app(settings)
    yield Publisher(app, settings)
    app.close()


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_call_message_is_what_celery_publishes(
    r: redis.Redis, publisher: Publisher, timeout: float | None
) -> None:
    publisher.app.send_task(
        TASK_NAME,
        args=["c1", "run1"],
        queue="toolq.moderate",
        ignore_result=True,
        **({} if timeout is None else {"time_limit": timeout + HARD_LIMIT_GRACE}),
    )
    [theirs] = r.lrange("toolq.moderate", 0, -1)
    queue, ours = publisher.message("c1", RiskLevel.MODERATE, timeout, "run1")
    assert queue == "toolq.moderate"
    _assert_same_shape(_fields(ours), _fields(theirs))
    fields = _fields(ours)
    assert fields["headers"]["task"] == TASK_NAME
    limit = None if timeout is None else timeout + HARD_LIMIT_GRACE
    assert fields["headers"]["timelimit"] == [limit, None]
    assert fields["properties"]["delivery_info"] == {"exchange": "", "routing_key": queue}
    assert fields["properties"]["delivery_mode"] == 2
    assert fields["body"][0] == ["c1", "run1"]


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_batch_message_is_what_celery_publishes(
    r: redis.Redis, publisher: Publisher, timeout: float | None
) -> None:
    pairs = [["c1", "run1"], ["c2", "run1"], ["c3", "run2"]]
    publisher.app.send_task(
        BATCH_TASK_NAME,
        args=[pairs],
        queue="toolq.safe",
        ignore_result=True,
        **({} if timeout is None else {"time_limit": timeout + HARD_LIMIT_GRACE}),
    )
    [theirs] = r.lrange("toolq.safe", 0, -1)
    queue, ours = publisher.batch_message([tuple(p) for p in pairs], RiskLevel.SAFE, timeout)
    assert queue == "toolq.safe"
    _assert_same_shape(_fields(ours), _fields(theirs))
    assert _fields(ours)["body"][0] == [pairs]
    for raw in (theirs, ours):
        found = decode(raw)
        assert found is not None and found.task == BATCH_TASK_NAME
        assert found.call_ids == ("c1", "c2", "c3") and found.call_id == "c1"
    broken = json.loads(ours)
    broken["body"] = base64.b64encode(json.dumps([[["c1"]], {}, {}]).encode()).decode()
    assert decode(json.dumps(broken)) is None


def test_a_dispatched_batch_message_with_call_kinds_decodes(publisher: Publisher) -> None:
    # What a dispatch sends: (call_id, run_id, kind); the sweeper must read it to re-send
    # the calls of a batch message a killed worker took.
    _, ours = publisher.batch_message(
        [("c1", "run1", "sync"), ("c2", "run1", "async")], RiskLevel.SAFE, None
    )
    found = decode(ours)
    assert found is not None and found.call_ids == ("c1", "c2")


def test_undo_message_is_what_celery_publishes(r: redis.Redis, publisher: Publisher) -> None:
    publisher.app.send_task(
        UNDO_TASK_NAME, args=["c2"], queue="toolq.dangerous", ignore_result=True
    )
    [theirs] = r.lrange("toolq.dangerous", 0, -1)
    queue, ours = publisher.undo_message("c2", RiskLevel.DANGEROUS)
    assert queue == "toolq.dangerous"
    _assert_same_shape(_fields(ours), _fields(theirs))


def test_decode_reads_both_encoders(r: redis.Redis, publisher: Publisher) -> None:
    publisher.send("c3", RiskLevel.SAFE, None, "run3")
    [theirs] = r.lrange("toolq.safe", 0, -1)
    _, ours = publisher.message("c3", RiskLevel.SAFE, None, "run3")
    for raw in (theirs, ours):
        found = decode(raw)
        assert found is not None
        assert (found.task, found.args, found.call_id) == (TASK_NAME, ("c3", "run3"), "c3")
        assert found.delivery_tag == json.loads(raw)["properties"]["delivery_tag"]
    assert decode(None) is None
    assert decode(b"not json") is None
    other = json.loads(ours)
    other["headers"]["task"] = "someone.else"
    assert decode(json.dumps(other)) is None


def test_unacked_bookkeeping_is_kombus(r: redis.Redis, settings: Settings) -> None:
    """A message kombu delivered and nobody acknowledged is found under its delivery tag."""
    app = celery_app(settings)
    publisher = Publisher(app, settings)
    queue, message = publisher.message("c4", RiskLevel.SAFE, None, "run4")
    r.lpush(queue, message)  # as the dispatch script pushes it
    received: list[Any] = []
    try:
        with Connection(settings.redis_url) as conn:
            consumer = Consumer(
                conn.channel(),
                queues=[Queue(queue)],
                callbacks=[lambda _body, msg: received.append(msg)],
                accept=["json"],
            )
            with consumer:
                conn.drain_events(timeout=5)
                [delivered] = received
                tag = delivered.delivery_tag
                assert r.hexists(KOMBU_UNACKED, tag) and r.zscore(KOMBU_UNACKED_INDEX, tag)
                assert unacked.taken_before(r, time.time() - 60, 10) == []
                [(found_tag, found)] = unacked.taken_before(r, time.time() + 1, 10)
                assert found_tag == tag
                assert found == Delivery(TASK_NAME, ("c4", "run4"), tag)
                pipe = r.pipeline()
                unacked.queue_holds(pipe, tag)
                unacked.queue_holds(pipe, "no-such-tag")
                assert pipe.execute() == [True, False]
                delivered.ack()
        assert not r.hexists(KOMBU_UNACKED, tag)
        assert unacked.taken_before(r, time.time() + 1, 10) == []
    finally:
        app.close()


def test_a_taken_message_is_recorded_as_kombu_records_it(
    r: redis.Redis, settings: Settings
) -> None:
    """``_record_taken`` writes, without kombu's ``MULTI``, what kombu's ``QoS.append`` does."""
    app = celery_app(settings)  # installs toolq's append
    publisher = Publisher(app, settings)
    queue, message = publisher.message("c5", RiskLevel.SAFE, None, "run5")
    r.lpush(queue, message)
    received: list[Any] = []
    try:
        with Connection(settings.redis_url) as conn:
            channel = conn.channel()
            consumer = Consumer(
                channel, queues=[Queue(queue)], callbacks=[lambda _b, m: received.append(m)]
            )
            with consumer:
                conn.drain_events(timeout=5)
                [delivered] = received
                tag = delivered.delivery_tag
                ours = r.hget(KOMBU_UNACKED, tag), r.zscore(KOMBU_UNACKED_INDEX, tag)
                r.hdel(KOMBU_UNACKED, tag)
                r.zrem(KOMBU_UNACKED_INDEX, tag)
                _KOMBU_APPEND(channel.qos, delivered, tag)
                kombus = r.hget(KOMBU_UNACKED, tag), r.zscore(KOMBU_UNACKED_INDEX, tag)
                delivered.ack()
        assert ours[0] is not None and ours[0] == kombus[0]
        assert ours[1] is not None and kombus[1] is not None and abs(ours[1] - kombus[1]) < 60
    finally:
        app.close()


def test_a_long_batch_argsrepr_is_cut_as_celery_cuts_it(publisher: Publisher) -> None:
    pairs = [(f"call-{i:032x}", "run-0123456789abcdef") for i in range(16)]
    _, ours = publisher.batch_message(pairs, RiskLevel.SAFE, None)
    text = _fields(ours)["headers"]["argsrepr"]
    assert len(text) == 1024 and text.endswith("...")
    assert text.startswith(repr([[list(p) for p in pairs]])[:1000])
