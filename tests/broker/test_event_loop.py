"""The consumer's sockets are registered with epoll once, not on every turn of the event loop."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Queue
from kombu.asynchronous import Hub

from tests.conftest import Workers, count_registrations
from toolq import CallStatus, Client, RiskLevel, Settings
from toolq.broker import Publisher, celery_app


def test_the_brpop_socket_is_registered_once_across_turns(
    settings: Settings, r: redis.Redis
) -> None:
    app = celery_app(settings)  # installs toolq's register_with_event_loop
    publisher = Publisher(app, settings)
    queue, _ = publisher.message("c0", RiskLevel.SAFE, None, "run0")
    received: list[Any] = []
    hub = Hub()
    registered = count_registrations(hub)
    conn = Connection(settings.redis_url)
    try:
        channel = conn.channel()
        consumer = Consumer(
            channel, queues=[Queue(queue)], callbacks=[lambda _b, m: received.append(m)]
        )
        consumer.consume()
        conn.transport.register_with_event_loop(conn.connection, hub)
        for i in range(10):
            _, message = publisher.message(f"c{i}", RiskLevel.SAFE, None, "run0")
            r.lpush(queue, message)
        deadline = time.monotonic() + 30
        turns = 0
        while len(received) < 10 and time.monotonic() < deadline:
            hub.run_once()
            turns += 1
        assert len(received) == 10
        assert turns >= 10
        [brpop_fd] = conn.transport.cycle.fds
        # Once by the transport when it connects, once when the hub first reads it.
        assert registered.count(brpop_fd) <= 2, (registered, turns)
        for message in received:
            message.ack()
    finally:
        hub.close()
        conn.close()
        app.close()


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_worker_whose_brpop_connection_is_killed_takes_calls_again(
    pool: str, workers: Workers, client: Client, r: redis.Redis
) -> None:
    workers.start("safe", pool=pool, concurrency=2)
    assert client.call("echo", {"text": "before"}, timeout=60).status is CallStatus.SUCCEEDED
    brpops = [c for c in r.client_list() if c.get("cmd") == "brpop"]
    assert brpops
    for c in brpops:
        r.client_kill_filter(_id=c["id"])
    results = client.dispatch(
        [{"id": f"t{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(5)]
    ).wait(timeout=60)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 5
