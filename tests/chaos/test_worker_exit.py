"""A Redis restart under ``toolq worker``: it keeps serving, or exits non-zero saying why.

Measured before the fix (``python -m bench.chaos.restarts``): workers exited with status 0
after Redis restarts, on ``AttributeError: 'NoneType' object has no attribute 'hostname'``
(or ``'client'``) from kombu's ``_connparams`` on a channel whose connection Celery's
consumer had already closed. ``toolq.broker.patch_kombu`` turns that into a
connection error (Celery reconnects), and ``toolq worker`` passes Celery's exit status on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu import Connection

from tests.conftest import ROOT, make_settings
from toolq import CallStatus, Client
from toolq.broker import Publisher
from toolq.cli.check import missing_queues
from toolq.cli.stack import EmbeddedRedis
from toolq.keys import KOMBU_UNACKED
from toolq.models import RiskLevel
from toolq.workers.app import create_celery

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(appendonly=True, directory=str(tmp_path))
    server.start()
    yield server
    if server.process and server.process.poll() is None:
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)


def restart(server: EmbeddedRedis, outage: float = 1.0) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)
    time.sleep(outage)
    server.start()


def start_worker(url: str, app: str, pool: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TOOLQ_REDIS_URL": url, "TOOLQ_APP": app, "PYTHONPATH": str(ROOT),
           "TOOLQ_SWEEP_INTERVAL": "0.2", "TOOLQ_HEARTBEAT_SECONDS": "0.5"}  # fmt: skip
    argv = [sys.executable, "-m", "toolq", "worker", "--pool", pool, "--concurrency", "2",
            "--loglevel", "warning"]  # fmt: skip
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv, env=env, cwd=ROOT, start_new_session=True, stdout=out, stderr=subprocess.STDOUT
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_closed_kombu_channel_raises_a_connection_error(private_redis: EmbeddedRedis) -> None:
    """The crash itself: a channel holding a message, its transport closed under it."""
    from tests.apps import registry

    settings = make_settings(redis_url=private_redis.url)
    queue, raw = Publisher(create_celery(settings, registry), settings).message(
        "c1", RiskLevel.SAFE, None, "r1"
    )
    r = redis.Redis.from_url(private_redis.url)
    r.lpush(queue, raw)
    with Connection(private_redis.url) as conn:
        channel = conn.default_channel
        message = channel.basic_get("toolq.safe", no_ack=False)
        assert message is not None and r.hexists(KOMBU_UNACKED, message.delivery_tag)
        conn._do_close_transport()  # what ``collect`` leaves after a connection loss
        # Was AttributeError ('NoneType' object has no attribute 'hostname'): unrecoverable.
        with pytest.raises(redis.ConnectionError):
            channel.close()
        with pytest.raises(redis.ConnectionError):
            message.ack()  # a task that finished after the loss (threads pool)
    # The message waits in kombu's unacked hash for the sweeper / visibility timeout.
    assert r.hexists(KOMBU_UNACKED, message.delivery_tag)


def test_worker_keeps_serving_through_redis_restarts(
    private_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    from tests.apps import registry

    settings = make_settings(redis_url=private_redis.url)
    procs = {
        pool: start_worker(private_redis.url, "tests.apps:registry", pool, tmp_path / f"{pool}.log")
        for pool in ("prefork", "threads")
    }
    client = Client(registry, settings)
    try:
        for n in range(5):
            batch = client.dispatch(
                [{"id": f"s{i}", "name": "slow", "arguments": {"seconds": 0.3}} for i in range(4)]
                + [{"id": f"e{i}", "name": "echo", "arguments": {"text": "x"}} for i in range(8)],
                run_id=f"round-{n}",
            )
            time.sleep(0.4)  # calls running and prefetched when Redis dies
            restart(private_redis)
            results = batch.wait(timeout=60)
            assert all(r.status in (CallStatus.SUCCEEDED, CallStatus.FAILED) for r in results)
            for pool, proc in procs.items():
                log = (tmp_path / f"{pool}.log").read_text(errors="replace")
                if proc.poll() is not None:  # if it died anyway: non-zero, with the reason
                    assert proc.returncode != 0, log[-3000:]
                    assert "toolq worker: exiting with status" in log.splitlines()[-1]
                    pytest.fail(f"{pool} worker exited after restart {n}: {log[-2000:]}")
        # Still serving after five restarts.
        after = client.dispatch([{"id": "z", "name": "echo", "arguments": {"text": "z"}}])
        assert after.wait(timeout=30)[0].status is CallStatus.SUCCEEDED
        assert all(p.poll() is None for p in procs.values())
    finally:
        client.close()
        for proc in procs.values():
            stop(proc)


def test_worker_whose_consumer_dies_exits_non_zero_with_the_reason(
    private_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    proc = start_worker(private_redis.url, "tests.chaos.crashing_app:registry", "threads", log)
    try:
        deadline = time.monotonic() + 30
        settings = make_settings(redis_url=private_redis.url)
        while missing_queues(settings, list(RiskLevel)):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(1.0)  # consuming, past the consumer's start-up connection
        restart(private_redis)
        proc.wait(60)
        lines = log.read_text(errors="replace").splitlines()
        assert proc.returncode == 1, lines[-20:]
        assert lines[-1] == (
            "toolq worker: exiting with status 1: Unrecoverable error: "
            "RuntimeError('injected: consumer died on ConnectionError')"
        ), lines[-20:]
    finally:
        stop(proc)
