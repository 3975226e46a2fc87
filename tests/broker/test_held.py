"""A consumer records each message it takes on a connection its thread keeps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Queue

from toolq import RiskLevel, Settings
from toolq.broker import Publisher, celery_app
from toolq.broker.held import held_for
from toolq.keys import KOMBU_UNACKED, KOMBU_UNACKED_INDEX


class _Taken:
    """A kombu consumer of the safe queue over the suite's Redis, with toolq's patches."""

    def __init__(self, settings: Settings, r: redis.Redis) -> None:
        self.app = celery_app(settings)  # installs toolq's record of a taken message
        self.publisher = Publisher(self.app, settings)
        self.r = r
        self.received: list[Any] = []
        self.conn = Connection(settings.redis_url)
        self.channel = self.conn.channel()
        queue, _ = self.publisher.message("c0", RiskLevel.SAFE, None, "run0")
        self.queue = queue
        self.consumer = Consumer(
            self.channel, queues=[Queue(queue)], callbacks=[lambda _b, m: self.received.append(m)]
        )
        self.consumer.consume()

    def take(self, call_id: str) -> str:
        """Push a call's message as dispatch does, drain it; its delivery tag."""
        _, message = self.publisher.message(call_id, RiskLevel.SAFE, None, "run0")
        self.r.lpush(self.queue, message)
        self.conn.drain_events(timeout=5)
        return str(self.received[-1].delivery_tag)

    def recorded(self, tag: str) -> bool:
        return (
            bool(self.r.hexists(KOMBU_UNACKED, tag))
            and self.r.zscore(KOMBU_UNACKED_INDEX, tag) is not None
        )

    def close(self) -> None:
        for message in self.received:
            message.ack()
        self.consumer.cancel()
        self.conn.close()
        self.app.close()


@pytest.fixture
def taken(settings: Settings, r: redis.Redis) -> Iterator[_Taken]:
    t = _Taken(settings, r)
    yield t
    t.close()


def test_taken_messages_are_recorded_without_a_pool_checkout(taken: _Taken) -> None:
    pool = taken.channel.pool
    checkouts = 0
    get_connection = pool.get_connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal checkouts
        checkouts += 1
        return get_connection(*args, **kwargs)

    pool.get_connection = counted
    try:
        tags = [taken.take(f"c{i}") for i in range(20)]
    finally:
        pool.get_connection = get_connection
    assert all(taken.recorded(tag) for tag in tags)
    assert checkouts == 0


def test_a_held_connection_killed_is_made_again(taken: _Taken, r: redis.Redis) -> None:
    assert taken.recorded(taken.take("c1"))
    conn = held_for(taken.channel)._local.conn
    conn.send_command("CLIENT", "ID")
    killed = r.client_kill_filter(_id=conn.read_response())
    assert killed == 1
    assert taken.recorded(taken.take("c2"))  # the write is retried on a new connection
    assert held_for(taken.channel)._local.conn is conn


def test_a_new_pool_gets_a_new_held_connection(taken: _Taken) -> None:
    first = held_for(taken.channel)
    taken.channel._pool = None  # as after a reconnect: kombu makes the pool again
    second = held_for(taken.channel)
    assert second is not first and second.pool is taken.channel.pool
    assert taken.recorded(taken.take("c3"))
