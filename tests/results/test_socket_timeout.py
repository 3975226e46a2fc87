"""``redis_socket_timeout`` reaches every Redis client toolq makes, above every blocking read."""

from __future__ import annotations

import inspect

import pytest
from kombu.transport import redis as kombu_redis
from pydantic import ValidationError

from toolq.broker.app import celery_app
from toolq.history.archiver import ArchiverThread
from toolq.results import events, waits
from toolq.results.connection import async_redis_client, redis_client
from toolq.settings import LONGEST_BLOCK_SECONDS, Settings
from toolq.webhooks import deliverer


def test_every_blocking_read_blocks_shorter_than_the_smallest_socket_timeout() -> None:
    blocks = {
        "shared reader": waits.BLOCK_MS / 1000,
        "EventLog.follow": events.BLOCK_SECONDS,
        "API event hub": events.POLL_SECONDS,
        "webhook deliverer": deliverer.IDLE_WAIT,
        "history archiver": inspect.signature(ArchiverThread).parameters["block_ms"].default / 1000,
        "Celery consumer (kombu's BRPOP)": kombu_redis.Transport.brpop_timeout,
    }
    assert max(blocks.values()) <= LONGEST_BLOCK_SECONDS, blocks
    with pytest.raises(ValidationError, match="redis_socket_timeout"):
        Settings(redis_socket_timeout=LONGEST_BLOCK_SECONDS + 0.5)


def test_a_socket_timeout_of_infinity_is_refused_not_failed_on_every_connect() -> None:
    # A socket cannot take it (OverflowError): every connection to Redis would fail.
    with pytest.raises(ValidationError, match="redis_socket_timeout"):
        Settings(redis_socket_timeout=float("inf"))


def test_a_socket_timeout_below_the_wait_for_replicas_is_refused() -> None:
    with pytest.raises(ValidationError, match="TOOLQ_REPLICA_ACK_TIMEOUT_MS"):
        Settings(min_replicas_ack=1, replica_ack_timeout_ms=5000, redis_socket_timeout=5.0)
    Settings(min_replicas_ack=1, replica_ack_timeout_ms=5000, redis_socket_timeout=6.0)
    Settings(replica_ack_timeout_ms=5000, redis_socket_timeout=3.0)  # no WAIT is sent


@pytest.mark.parametrize("timeout", [3.0, 7.5])
def test_every_client_waits_the_setting_for_an_answer(settings: Settings, timeout: float) -> None:
    settings = settings.model_copy(update={"redis_socket_timeout": timeout})
    expected = {"socket_timeout": timeout, "socket_connect_timeout": timeout}

    def options(pool: object) -> dict[str, object]:
        kwargs = pool.connection_kwargs  # type: ignore[attr-defined]
        return {name: kwargs[name] for name in expected}

    for client in (redis_client(settings), redis_client(settings, max_connections=4)):
        assert options(client.connection_pool) == expected
        client.close()
    assert options(async_redis_client(settings, 4).connection_pool) == expected
    app = celery_app(settings)
    with app.connection_for_write() as conn:
        assert options(conn.default_channel.pool) == expected
