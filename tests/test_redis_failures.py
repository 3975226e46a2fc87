"""``store_error`` names each Redis failure, provoked for real on private redis-servers."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest
import redis

from tests.apps import registry
from toolq import Client
from toolq.cli.stack import EmbeddedRedis, _free_port
from toolq.errors import (
    RedisAuthError,
    RedisPermissionError,
    RedisUnavailableError,
    StoreUnavailableError,
    ToolqError,
)
from toolq.redis_failures import store_error, translated
from toolq.results.connection import probe_client
from toolq.settings import Settings


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    started = EmbeddedRedis(password=secrets.token_urlsafe(16))
    started.start()
    yield started
    started.stop()


def failure(client: redis.Redis, *command: object) -> ToolqError | None:
    with pytest.raises(redis.RedisError) as caught:
        client.execute_command(*command)
    return store_error(caught.value, "here")


def test_each_redis_failure_has_its_own_code_and_line(server):
    port = server.port
    admin = redis.Redis.from_url(server.url)
    no_password = probe_client(f"redis://127.0.0.1:{port}/0", 1)
    wrong = probe_client(f"redis://:guessed-pw@127.0.0.1:{port}/0", 1)
    for client in (no_password, wrong):
        error = failure(client, "SET", "k", "v")
        assert isinstance(error, RedisAuthError) and error.code == "redis_auth_failed"
        assert "credentials" in error.message and "guessed-pw" not in error.message
        assert "does not answer" not in error.message
    admin.acl_setuser("reader", enabled=True, passwords=["+pw"], keys=["*"], commands=["+get"])
    reader = probe_client(f"redis://reader:pw@127.0.0.1:{port}/0", 1)
    error = failure(reader, "SET", "k", "v")
    assert isinstance(error, RedisPermissionError) and "'set'" in error.message
    unreachable = probe_client(f"redis://127.0.0.1:{_free_port()}/0", 0.5)
    assert isinstance(failure(unreachable, "PING"), RedisUnavailableError)

    admin.config_set("maxmemory", 1)  # full: a command, a script, a MULTI
    try:
        for command in (
            ("SET", "k", "v"),
            ("EVAL", "return redis.call('SET', KEYS[1], 'v')", 1, "k"),
        ):
            error = failure(admin, *command)
            assert isinstance(error, StoreUnavailableError), command
            assert error.code == "store_unavailable" and error.details["reason"] == "full"
            assert "full" in error.message and "\n" not in error.message
        with pytest.raises(redis.RedisError) as caught:
            admin.pipeline().zrem("z", "a").hdel("h", "a").execute()
        assert isinstance(store_error(caught.value), StoreUnavailableError)
    finally:
        admin.config_set("maxmemory", 0)
    admin.config_set("min-replicas-to-write", 1)  # too few replicas
    try:
        error = failure(admin, "EVAL", "return redis.call('SET', KEYS[1], 'v')", 1, "k")
        assert isinstance(error, StoreUnavailableError)
        assert error.details["reason"] == "no_replicas"
    finally:
        admin.config_set("min-replicas-to-write", 0)
    # a script's own error is no Redis failure: it is raised as it is
    with pytest.raises(redis.ResponseError) as caught:
        admin.eval("return redis.error_reply('OOPS not mine')", 0)
    assert store_error(caught.value) is None
    for client in (admin, no_password, wrong, reader, unreachable):
        client.close()


def test_a_read_only_replica_refuses_dispatches(server):
    replica = EmbeddedRedis(password=server.password)
    replica.start()
    admin = redis.Redis.from_url(replica.url)
    try:
        admin.config_set("masterauth", server.password or "")
        admin.replicaof("127.0.0.1", server.port)
        deadline = time.monotonic() + 20
        while admin.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.1)
        settings = Settings(redis_url=replica.url, app="tests.apps:registry")
        with Client(registry, settings) as client:
            with pytest.raises(StoreUnavailableError) as caught:
                client.dispatch([{"id": "a", "name": "echo", "arguments": {"text": "x"}}])
            assert caught.value.details["reason"] == "read_only"
            assert "read-only replica" in caught.value.message
            assert server.password not in caught.value.message
            admin.replicaof("NO", "ONE")  # promoted: it takes writes
            batch = client.dispatch([{"id": "a", "name": "echo", "arguments": {"text": "x"}}])
            assert len(batch.call_ids) == 1
    finally:
        admin.close()
        replica.stop()


def test_translated_leaves_unreachable_to_the_caller_when_asked():
    unreachable = probe_client(f"redis://127.0.0.1:{_free_port()}/0", 0.5)
    with pytest.raises(redis.ConnectionError), translated("x", unreachable=False):
        unreachable.ping()
    with pytest.raises(RedisUnavailableError), translated("x"):
        unreachable.ping()
    unreachable.close()
