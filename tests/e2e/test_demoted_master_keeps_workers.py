"""A worker whose Redis turns into a replica under it stays up.

Runbook "Redis is full or read-only": a read-only replica refuses writes, "toolq refuses new
work at once and waits for the rest; nothing exits". In a drill, ``REPLICAOF`` on the
workers' own Redis (as a demotion after a failover, or an operator's mistake, does) made
Redis answer each worker's blocked ``BRPOP`` with ``UNBLOCKED force unblock from blocking
operation, instance state changed (master -> replica?)``; every ``toolq worker`` logged
``CRITICAL ... Unrecoverable error: server:ResponseError`` and exited with status 1
(``toolq.broker.app._brpop_read_unless_refused`` only turns ``READONLY`` & co. into a lost
connection). The existing test starts its worker on a replica already, so its ``BRPOP`` is
refused with ``READONLY`` instead.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, make_settings
from toolq import CallStatus, Client
from toolq.cli.stack import EmbeddedRedis, _free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(password=secrets.token_urlsafe(16), directory=str(tmp_path))
    server.start()
    yield server
    server.stop()


def test_a_worker_stays_up_when_its_master_is_demoted(own_redis, tmp_path):
    from tests.apps import registry

    log = tmp_path / "worker.log"
    settings = make_settings(redis_url=own_redis.url)
    admin = redis.Redis.from_url(own_redis.url)
    workers = Workers(settings)
    try:
        worker = workers.start(concurrency=1, log=log)
        with Client(registry, settings) as client:
            batch = client.dispatch([{"id": "a", "name": "echo", "arguments": {"text": "x"}}])
            assert batch.wait(timeout=60)[0].status is CallStatus.SUCCEEDED
        time.sleep(1)  # the consumer is back in its BRPOP
        admin.replicaof("127.0.0.1", str(_free_port()))  # a replica of nothing: read-only
        time.sleep(5)
        assert worker.poll() is None, log.read_text()[-3000:]
        admin.replicaof("NO", "ONE")
        with Client(registry, settings) as client:
            batch = client.dispatch([{"id": "b", "name": "echo", "arguments": {"text": "y"}}])
            assert batch.wait(timeout=60)[0].status is CallStatus.SUCCEEDED
        assert worker.poll() is None
        assert "Unrecoverable error" not in log.read_text()
    finally:
        workers.stop_all()
        admin.close()
