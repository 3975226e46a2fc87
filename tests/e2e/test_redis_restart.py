"""Redis killed and restarted (AOF on) in the middle of a run: no accepted call is lost."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, make_settings
from toolq import CallStatus, Client
from toolq.cli.stack import EmbeddedRedis
from toolq.results.connection import RETRY_SECONDS

pytestmark = pytest.mark.e2e


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(appendonly=True, directory=str(tmp_path))
    server.start()
    yield server
    if server.process and server.process.poll() is None:
        kill(server)


def kill(server: EmbeddedRedis) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)


def wait_until_recorded(server: EmbeddedRedis, tag: str, count: int) -> None:
    """Wait until handlers have recorded ``count`` executions tagged ``tag`` (tests.apps)."""
    r = redis.Redis.from_url(server.url)
    deadline = time.monotonic() + 60  # headroom for a loaded machine: not what is checked
    while time.monotonic() < deadline:
        entries = [e for key in r.scan_iter("test:exec:*") for e in r.lrange(key, 0, -1)]
        if sum(e.endswith(f":{tag}".encode()) for e in entries) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} {tag} calls started")


@contextmanager
def worker_on(server: EmbeddedRedis, log: Path, **settings: object) -> Iterator[Client]:
    """A client and a ``toolq worker`` (4 threads, logging to ``log``) on ``server``."""
    from tests.apps import registry

    workers = Workers(make_settings(redis_url=server.url, **settings))
    client = Client(registry, workers.settings)
    try:
        workers.start(concurrency=4, log=log)
        yield client
    finally:
        client.close()
        workers.stop_all()
        redis.Redis.from_url(server.url).flushall()


def test_redis_restart_during_a_run(private_redis: EmbeddedRedis, tmp_path: Path) -> None:
    flag = tmp_path / "redis-is-down"
    log = tmp_path / "worker.log"
    with worker_on(private_redis, log) as client:
        before = client.dispatch(
            # These write to Redis while it is down: their handlers are running then.
            [
                {"id": f"r{i}", "name": "record_twice", "arguments": {"flag": str(flag)}}
                for i in range(2)
            ]
            + [
                {"id": f"a{i}", "name": "slow_idempotent", "arguments": {"seconds": 1.0}}
                for i in range(4)
            ]
            + [{"id": f"e{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(20)]
        )
        wait_until_recorded(private_redis, "record_twice", 2)
        kill(private_redis)
        flag.touch()
        time.sleep(1.0)
        private_redis.start()  # same port, same AOF directory
        after = client.dispatch(
            [{"id": f"z{i}", "name": "echo", "arguments": {"text": "z"}} for i in range(10)]
        )
        results = before.wait(timeout=60) + after.wait(timeout=60)
        assert all(r.status is CallStatus.SUCCEEDED for r in results), [
            (r.name, r.status, r.error) for r in results if r.status is not CallStatus.SUCCEEDED
        ]
        assert len(results) == 36
        # An expected reconnect: one line per event, no tracebacks (acks of calls that
        # finished while Redis was down fail: their messages are re-delivered and skipped).
        text = log.read_text()
        assert "Traceback" not in text and "CRITICAL" not in text, text[-4000:]
        assert "DeprecationWarning" not in text, text[-4000:]


@pytest.mark.timeout(240)
def test_news_written_while_redis_is_away_longer_than_the_retries(
    private_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """A RETRYING event and progress (of a synchronous handler, and streamed by an async
    one) written while Redis stays away longer than the clients retry are dropped (logged),
    not the calls: they succeed once it is back."""
    flag = tmp_path / "redis-is-down"
    log = tmp_path / "worker.log"
    # A lease longer than the outage: the calls stay this worker's throughout.
    with worker_on(private_redis, log, lease_seconds=90.0) as client:
        batch = client.dispatch(
            [
                {
                    "id": f"news{fail_first:d}",
                    "name": "through_outage",
                    "arguments": {"flag": str(flag), "fail_first": fail_first},
                }
                for fail_first in (True, False)
            ]
            + [{"id": "stream", "name": "streams_through_outage", "arguments": {"flag": str(flag)}}]
        )
        wait_until_recorded(private_redis, "through_outage", 3)
        kill(private_redis)
        flag.touch()
        time.sleep(RETRY_SECONDS + 5)
        private_redis.start()  # same port, same AOF directory
        results = batch.wait(timeout=120)
        assert [(r.status, r.output) for r in results] == [
            (CallStatus.SUCCEEDED, "done on attempt 2"),
            (CallStatus.SUCCEEDED, "done on attempt 1"),
            (CallStatus.SUCCEEDED, "streamed"),
        ], [(r.status, r.error) for r in results]
        text = log.read_text()
        assert "retrying event of call" in text and "progress event of call" in text, text
        assert "Traceback" not in text, text[-4000:]


@pytest.mark.timeout(240)
def test_a_call_that_ends_while_redis_is_away_past_its_lease_is_recovered_not_failed(
    private_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """Redis away past the retries of a call's news and then of its FINISH (longer than
    its lease): the worker gives the FINISH up, and the call is recovered as after a lost
    worker once Redis is back (a tool that is not idempotent: ``unknown``), never failed."""
    flag = tmp_path / "redis-is-down"
    log = tmp_path / "worker.log"
    with worker_on(private_redis, log) as client:  # the suite's 2 s lease
        call_id = client.dispatch(
            [{"id": "late", "name": "through_outage", "arguments": {"flag": str(flag)}}]
        ).call_ids[0]
        wait_until_recorded(private_redis, "through_outage", 1)
        kill(private_redis)
        flag.touch()
        time.sleep(2 * RETRY_SECONDS + 5)
        private_redis.start()  # same port, same AOF directory: the lease has expired
        deadline = time.monotonic() + 60
        # one read per round: recovery may land between two reads
        while (seen := client.result(call_id)).status is not CallStatus.UNKNOWN:
            assert seen.status is CallStatus.RUNNING, seen
            assert time.monotonic() < deadline, "not recovered"
            time.sleep(0.1)
        line = f"call {call_id} lost its worker: unknown"
        while line not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)  # the sweeper logs just after its script made the call unknown
        assert line in log.read_text()
