"""``TOOLQ_SENTINELS`` settings and what they make: redis-py and kombu Sentinel options."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.sentinel.app import registry
from toolq import Settings
from toolq.results.connection import RedisTarget
from toolq.workers.app import create_celery


def sentinel_settings(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "redis_url": "redis://app:s%40cret@ignored:7777/3",
        "sentinels": "10.0.0.1:26379, 10.0.0.2:26380",
        "sentinel_master": "toolq",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def test_the_target_keeps_credentials_and_db_from_the_url() -> None:
    target = RedisTarget.of(sentinel_settings(sentinel_password="sp"))
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert target.master_kwargs() == {"username": "app", "password": "s@cret", "db": 3}
    assert target.sentinel_kwargs()["password"] == "sp"
    assert "s@cret" not in target.describe() and "'toolq'" in target.describe()


def test_the_celery_broker_is_kombus_sentinel_transport() -> None:
    settings = sentinel_settings(sentinel_password="sp")
    target = RedisTarget.of(settings)
    assert target.broker_url() == (
        "sentinel://app:s%40cret@10.0.0.1:26379/3;sentinel://app:s%40cret@10.0.0.2:26380/3"
    )
    app = create_celery(settings, registry)
    options = app.conf.broker_transport_options
    assert options["master_name"] == "toolq"
    assert options["sentinel_kwargs"]["password"] == "sp"
    assert "visibility_timeout" in options
    with app.connection_for_write() as conn:
        assert type(conn.transport).__name__ == "SentinelTransport"
        assert conn.hostname == "10.0.0.1" and conn.password == "s@cret"


def test_without_sentinels_nothing_changes() -> None:
    settings = Settings(redis_url="redis://localhost:7777/0")
    target = RedisTarget.of(settings)
    assert not target.is_sentinel
    assert target.broker_url() == "redis://localhost:7777/0"
    assert target.broker_transport_options() == {
        "socket_timeout": 5.0,
        "socket_connect_timeout": 5.0,
    }


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"sentinel_master": None}, "TOOLQ_SENTINEL_MASTER"),
        ({"sentinels": "10.0.0.1"}, "'10.0.0.1' is not host:port"),
        ({"sentinels": "10.0.0.1:99999"}, "is not host:port"),
        ({"min_replicas_ack": -1}, "min_replicas_ack"),
    ],
)
def test_bad_sentinel_settings_are_refused(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        sentinel_settings(**values)
