"""Redis that hangs (SIGSTOP: it keeps its connections and answers nothing): toolq's commands
end within a bound, ride out a short hang, and a call in flight finishes exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu.exceptions import OperationalError

from tests.apps import registry
from tests.conftest import Workers, make_settings
from toolq import CallStatus, Client
from toolq.cli.stack import EmbeddedRedis
from toolq.keys import Keys
from toolq.models import Event, EventType, RiskLevel
from toolq.results.connection import RETRY_SECONDS, RedisTarget
from toolq.results.hub import EventHub
from toolq.settings import Settings

pytestmark = pytest.mark.e2e

SOCKET_TIMEOUT = 3.0
"""The shortest ``redis_socket_timeout`` allowed, so the tests wait the least."""
BOUND = RETRY_SECONDS + 2 * SOCKET_TIMEOUT + 3.0
"""Longest a command may take on a Redis that never answers: the retry window, the attempt
under way when it closes (one socket timeout, at most a second of backoff before it), and
as much again as a margin for a loaded machine."""


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    started = EmbeddedRedis()
    started.start()
    yield started
    assert started.process is not None
    started.process.send_signal(signal.SIGCONT)  # a test that failed may leave it stopped
    started.stop()


@contextmanager
def hung(server: EmbeddedRedis) -> Iterator[None]:
    """``server`` stopped (by the PID of the process this test started) until the block ends.

    A ``PING`` first: Redis writes the replies of one turn of its loop together, and a busy
    machine can pause it between two of them, say after a client saw a call's final event
    but before the worker got its ``FINISH`` reply, which the stop would then hold back. The
    ``PING``'s answer comes from a later turn, once every reply of the earlier ones is out.
    """
    assert server.process is not None
    pinger = redis.Redis.from_url(server.url)
    try:
        pinger.ping()
    finally:
        pinger.close()
    server.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)


def settings_on(server: EmbeddedRedis, **overrides: object) -> Settings:
    return make_settings(redis_url=server.url, redis_socket_timeout=SOCKET_TIMEOUT, **overrides)


def echo(text: str) -> list[dict[str, Any]]:
    return [{"id": f"c-{text}", "name": "echo", "arguments": {"text": text}}]


def timed(work: Any) -> tuple[float, BaseException | None]:
    """Seconds ``work()`` took, and what it raised."""
    started = time.monotonic()
    try:
        work()
    except BaseException as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


@pytest.mark.timeout(60)
def test_commands_and_waits_on_a_redis_that_never_answers_fail_within_the_retry_window(
    server: EmbeddedRedis,
) -> None:
    with Client(registry, settings_on(server)) as client:
        waited = client.dispatch(echo("queued"))  # no worker: it stays queued
        outcome: list[tuple[float, BaseException | None]] = []
        waiter = threading.Thread(target=lambda: outcome.append(timed(lambda: waited.wait())))
        waiter.start()
        time.sleep(0.5)  # the shared reader is blocked in its XREAD
        with hung(server):
            took, error = timed(lambda: client.dispatch(echo("during")))
            waiter.join(BOUND)
        assert not waiter.is_alive(), "the wait did not end"
        assert isinstance(error, redis.TimeoutError | redis.ConnectionError), error
        assert took < BOUND, took
        [(wait_took, wait_error)] = outcome
        assert isinstance(wait_error, redis.TimeoutError | redis.ConnectionError), wait_error
        assert wait_took < BOUND + 0.5, wait_took
        # Redis back: the same client works again.
        assert client.result(waited.call_ids[0]).status is CallStatus.QUEUED


@pytest.mark.timeout(60)
def test_a_publish_on_a_redis_that_never_answers_fails_within_the_retry_window(
    server: EmbeddedRedis,
) -> None:
    """Celery's broker connection (kombu) has a socket timeout too: a message sent while
    Redis hangs (an approved call, a re-sent one) fails instead of waiting forever."""
    with Client(registry, settings_on(server)) as client:
        publisher = client.backend.publisher
        publisher.send("warm-up", RiskLevel.SAFE)  # the producer's connection is open
        with hung(server):
            took, error = timed(lambda: publisher.send("during", RiskLevel.SAFE))
        # Celery's publish retries (task_publish_retry_policy), then kombu names the error.
        assert isinstance(error, OperationalError) and "Timeout" in str(error), repr(error)
        assert took < BOUND, took


@pytest.mark.timeout(60)
def test_a_short_hang_is_ridden_out_by_commands_and_by_the_shared_reader(
    server: EmbeddedRedis, tmp_path: Path
) -> None:
    """A hang longer than the socket timeout, shorter than the retry window: a dispatch sent
    during it and a wait begun before it both complete after it, once each."""
    log = tmp_path / "worker.log"
    workers = Workers(settings_on(server, lease_seconds=30.0))
    try:
        workers.start(concurrency=2, log=log, TOOLQ_REDIS_SOCKET_TIMEOUT=str(SOCKET_TIMEOUT))
        with Client(registry, workers.settings) as client:
            before = client.dispatch([{"id": "s", "name": "slow", "arguments": {"seconds": 1.0}}])
            assert client.result(before.call_ids[0]).status is not CallStatus.SUCCEEDED
            results: list[Any] = []
            waiter = threading.Thread(target=lambda: results.extend(before.wait(timeout=50)))
            waiter.start()
            wait_until(lambda: executions(server, before.call_ids[0]) == 1)
            dispatched: list[Any] = []
            with hung(server):
                # The call finishes meanwhile: its FINISH, the wait and a dispatch all wait
                # on the stopped Redis, past the socket timeout.
                sender = threading.Thread(target=lambda: dispatched.append(send(client)))
                sender.start()
                time.sleep(2 * SOCKET_TIMEOUT + 1)
            resumed = time.monotonic()
            sender.join(RETRY_SECONDS)
            waiter.join(RETRY_SECONDS)
            assert not sender.is_alive() and not waiter.is_alive()
            assert time.monotonic() - resumed < SOCKET_TIMEOUT + 3  # resumed, not timed out
            [result] = results
            assert result.status is CallStatus.SUCCEEDED, result.error
            assert result.output == "slept"
            assert executions(server, before.call_ids[0]) == 1
            events = list(client.events(before.run_id))
            finals = [e for e in events if e.type.is_final and e.call_id == before.call_ids[0]]
            assert len(finals) == 1, finals
            [batch] = dispatched
            [late] = batch.wait(timeout=30)
            assert late.status is CallStatus.SUCCEEDED and late.output == {"text": "during"}
        text = log.read_text()
        assert "Traceback" not in text and "CRITICAL" not in text, text[-4000:]
    finally:
        workers.stop_all()


@pytest.mark.timeout(60)
def test_the_api_event_hub_rides_out_a_short_hang(server: EmbeddedRedis) -> None:
    """The asyncio client (the API's event streams) retries as the others do: a read sent
    while Redis hangs past the socket timeout returns once it answers again."""
    settings = settings_on(server)
    with Client(registry, settings) as client:
        run_id = client.dispatch(echo("before")).run_id
    assert server.process is not None
    pid = server.process.pid

    async def read_across_a_hang() -> tuple[list[Event], list[Event], float]:
        hub = EventHub(RedisTarget.of(settings), Keys(settings.key_prefix), 10)
        try:
            before = await hub.read(run_id, None)  # its connection is open
            loop = asyncio.get_running_loop()
            os_kill(pid, signal.SIGSTOP)
            loop.call_later(2 * SOCKET_TIMEOUT + 1, os_kill, pid, signal.SIGCONT)
            started = time.monotonic()
            after = await hub.read(run_id, None)
            return before, after, time.monotonic() - started
        finally:
            await hub.close()

    before, after, took = asyncio.run(read_across_a_hang())
    assert [e.type for e in before] == [EventType.QUEUED]
    assert after == before
    assert 2 * SOCKET_TIMEOUT + 1 <= took < 2 * SOCKET_TIMEOUT + 6, took


def os_kill(pid: int, signum: int) -> None:
    """Signal the ``redis-server`` this test started (its PID, never a name)."""
    os.kill(pid, signum)


def send(client: Client) -> Any:
    return client.dispatch(echo("during"))


def executions(server: EmbeddedRedis, call_id: str) -> int:
    """Executions of ``call_id`` its handler recorded (``tests.apps.record``)."""
    return int(redis.Redis.from_url(server.url).llen(f"test:exec:{call_id}"))


def wait_until(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.mark.timeout(120)
def test_a_worker_outlives_a_hang_longer_than_the_retries(
    server: EmbeddedRedis, tmp_path: Path
) -> None:
    """Its commands time out as a lost connection's do: the worker stays up (its
    maintenance pauses and resumes) and runs the calls dispatched once Redis answers."""
    log = tmp_path / "worker.log"
    workers = Workers(settings_on(server, lease_seconds=90.0))
    try:
        timeout = str(SOCKET_TIMEOUT)
        proc = workers.start(concurrency=2, log=log, TOOLQ_REDIS_SOCKET_TIMEOUT=timeout)
        with Client(registry, workers.settings) as client:
            [before] = client.dispatch(echo("before")).wait(timeout=30)
            assert before.status is CallStatus.SUCCEEDED
            with hung(server):
                time.sleep(BOUND)
            [after] = client.dispatch(echo("after")).wait(timeout=30)
            assert after.status is CallStatus.SUCCEEDED, after.error
            assert proc.poll() is None
        text = log.read_text()
        assert "maintenance paused" in text, text[-4000:]
        assert "Traceback" not in text and "CRITICAL" not in text, text[-4000:]
    finally:
        workers.stop_all()


@pytest.mark.timeout(120)
def test_a_finish_caught_by_a_hang_longer_than_the_retries_is_retried_within_the_lease(
    server: EmbeddedRedis, tmp_path: Path
) -> None:
    """Redis stops while a call's ``FINISH`` is on its way, for longer than a command's
    retries: the worker goes on repeating it within the call's lease, and once Redis
    answers the call is final after its one execution, with no error in the worker's log
    (a ``FINISH`` that timed out may have been done; its repeat is answered alike)."""
    log = tmp_path / "worker.log"
    started, go = tmp_path / "started", tmp_path / "go"
    workers = Workers(settings_on(server, lease_seconds=90.0))
    try:
        proc = workers.start(
            concurrency=2, log=log, loglevel="info", TOOLQ_REDIS_SOCKET_TIMEOUT=str(SOCKET_TIMEOUT)
        )
        with Client(registry, workers.settings) as client:
            call = {"id": "c-held", "name": "hold_until"}
            call["arguments"] = {"started": str(started), "go": str(go)}
            handle = client.dispatch([call])
            deadline = time.monotonic() + 30
            while not started.exists():
                assert time.monotonic() < deadline, "the call never started"
                time.sleep(0.02)
            with hung(server):
                go.touch()  # the handler returns: its FINISH meets the stopped Redis
                time.sleep(BOUND)
            [held] = handle.wait(timeout=30)
            assert held.status is CallStatus.SUCCEEDED, held.error
            assert (held.output, held.attempts) == ("went", 1)
            assert proc.poll() is None
        text = log.read_text()
        assert "retrying a write" in text, text[-4000:]
        assert "Traceback" not in text and "CRITICAL" not in text, text[-4000:]
    finally:
        workers.stop_all()
