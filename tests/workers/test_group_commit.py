"""Group commit: calls of one process that end together share a round trip to Redis."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis

from tests.apps import registry
from tests.conftest import Workers
from toolq import CallStatus, Client, Settings
from toolq.keys import KOMBU_UNACKED
from toolq.models import CallEnvelope, CallResult
from toolq.results.connection import redis_client
from toolq.results.store import CallStore, Started
from toolq.workers.commit import GroupCommit

CANCELLED = {"error": "cancelled before it started", "error_type": "cancelled"}
THREADS = 8


def _started_calls(client: Client, store: CallStore, n: int) -> list[tuple[CallEnvelope, str]]:
    batch = client.dispatch(
        [{"id": str(i), "name": "echo", "arguments": {"text": str(i)}} for i in range(n)]
    )
    started = []
    for i, call_id in enumerate(batch.call_ids):
        token = f"tok{i}"
        got = store.start(call_id, token, CANCELLED, batch.run_id)
        assert got.outcome == "ok" and got.envelope is not None
        started.append((got.envelope, token))
    return started


def _result(env: CallEnvelope) -> CallResult:
    return CallResult(
        call_id=env.call_id,
        tool_call_id=env.tool_call_id,
        name=env.name,
        status=CallStatus.SUCCEEDED,
        output=env.arguments["text"],
    )


def _stats(r: redis.Redis) -> tuple[int, int]:
    """Connections Redis accepted and ``EVALSHA`` it ran so far (not a ``NOSCRIPT`` one)."""
    stats = r.info("stats")
    evalsha = r.info("commandstats").get("cmdstat_evalsha", {})
    calls = evalsha.get("calls", 0) - evalsha.get("failed_calls", 0)
    return int(stats["total_connections_received"]), int(calls)


@dataclass
class Setup:
    client: Client
    store: CallStore
    commits: GroupCommit


@pytest.fixture
def setup(r: redis.Redis, settings: Settings) -> Iterator[Setup]:
    client = Client(registry, settings)
    store = CallStore(redis_client(settings.redis_url), settings)
    try:
        yield Setup(client, store, GroupCommit(store, CANCELLED))
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
        store.redis.close()
        client.close()


def _together(r: redis.Redis, steps: list[Callable[[], None]], pause_ms: int) -> None:
    """Run ``steps`` on threads of their own at once, Redis holding writes ``pause_ms``."""
    barrier = threading.Barrier(len(steps) + 1)

    def run(step: Callable[[], None]) -> None:
        barrier.wait()
        step()

    threads = [threading.Thread(target=run, args=(step,)) for step in steps]
    for thread in threads:
        thread.start()
    r.execute_command("CLIENT", "PAUSE", pause_ms, "WRITE")
    barrier.wait()
    for thread in threads:
        thread.join(10)


def test_finishes_of_concurrent_threads_share_round_trips(r: redis.Redis, setup: Setup) -> None:
    # Redis holds the first thread's FINISH (CLIENT PAUSE) while the others end: they queue
    # behind its round trip and go together in the next one, on the sending thread's own
    # connection (a thread that sends nothing opens none).
    calls = _started_calls(setup.client, setup.store, THREADS)
    connections, scripts = _stats(r)
    answers: list[tuple[list[bool], list[Started]]] = []

    def finish(env: CallEnvelope, token: str) -> None:
        answers.append(setup.commits.commit([(env, token, _result(env))], []))

    _together(r, [functools.partial(finish, env, token) for env, token in calls], 500)
    after_connections, after_scripts = _stats(r)

    assert answers == [([True], [])] * THREADS
    assert after_scripts - scripts == THREADS  # one FINISH per call, none repeated
    assert setup.commits.requests == THREADS
    # Without the group commit each thread sends its own round trip on its own
    # connection: 8 of each. The paused first one, then the rest together.
    assert setup.commits.round_trips <= 3
    assert after_connections - connections <= 3
    for env, _ in calls:
        assert setup.client.result(env.call_id).output == env.arguments["text"]


def test_a_lone_commit_is_sent_at_once(setup: Setup) -> None:
    # No gathering window: a thread alone waits for its own round trip only.
    ((env, token),) = _started_calls(setup.client, setup.store, 1)
    commits = setup.commits
    began = time.monotonic()
    assert commits.commit([(env, token, _result(env))], []) == ([True], [])
    assert time.monotonic() - began < 0.5
    assert (commits.round_trips, commits.requests) == (1, 1)
    # A repeat (a retry after a lost reply) answers as the first did; another token loses.
    assert commits.commit([(env, token, _result(env))], []) == ([True], [])
    assert commits.commit([(env, "other", _result(env))], []) == ([False], [])


def test_starts_and_finishes_of_threads_share_round_trips(r: redis.Redis, setup: Setup) -> None:
    # A slot's FINISH and its next START, and other slots' as well, in one round trip.
    running = _started_calls(setup.client, setup.store, THREADS // 2)
    batch = setup.client.dispatch(
        [{"id": f"n{i}", "name": "echo", "arguments": {"text": "n"}} for i in range(THREADS // 2)]
    )
    answers: dict[str, tuple[list[bool], str]] = {}

    def step(env: CallEnvelope, token: str, following: str) -> None:
        held, started = setup.commits.commit(
            [(env, token, _result(env))], [(following, batch.run_id, f"next-{following}")]
        )
        answers[following] = (held, started[0].outcome)

    _together(
        r,
        [
            functools.partial(step, env, token, following)
            for (env, token), following in zip(running, batch.call_ids, strict=True)
        ],
        300,
    )
    assert answers == dict.fromkeys(batch.call_ids, ([True], "ok"))
    assert setup.commits.round_trips <= 3 < len(running) + 1
    statuses = setup.store.statuses([env.call_id for env, _ in running] + batch.call_ids)
    half = len(running)
    assert statuses == [CallStatus.SUCCEEDED] * half + [CallStatus.RUNNING] * half


def redis_addresses(pid: int, r: redis.Redis) -> set[str]:
    """The ``addr`` (as ``CLIENT LIST`` shows it) of each connection process ``pid`` has to
    the Redis of ``r``."""
    port = r.connection_pool.connection_kwargs["port"]
    return {
        f"{c.laddr.ip}:{c.laddr.port}"
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port
    }


def test_a_worker_killed_while_its_slots_commit_together_loses_nothing(
    client: Client,
    workers: Workers,
    r: redis.Redis,
    wait_for: Callable[..., None],
    tmp_path: Path,
) -> None:
    # Four slots' calls end while Redis holds the first FINISH: the others wait behind it,
    # each message's unacked entry removal behind its FINISH. The worker dies then (kill
    # -9, all four messages unacknowledged, no FINISH in Redis): each call is recovered
    # after its lease, run again (the tool is idempotent) and ends once, succeeded, with
    # exactly one final event. The calls end only on the test's go, given once Redis holds
    # writes: none can end before.
    go = tmp_path / "go"
    doomed = workers.start("safe", pool="threads", concurrency=4)
    call = {"id": "a", "name": "gated", "arguments": {"path": str(go), "seconds": 60}}
    batches = [client.dispatch([call]) for _ in range(4)]
    call_ids = [batch.call_ids[0] for batch in batches]
    wait_for(lambda: all(r.llen(f"test:exec:{c}") == 1 for c in call_ids), timeout=30)
    assert r.hlen(KOMBU_UNACKED) == 4
    r.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    try:
        go.touch()
        returned = [tmp_path / f"go.{call_id}" for call_id in call_ids]
        wait_for(lambda: all(path.exists() for path in returned), 30, "handlers not returned")
        # Headroom, not what is checked: from a handler's return to its FINISH queued
        # behind the held round trip is the worker's CPU only.
        time.sleep(0.5)
        held = redis_addresses(doomed.pid, r)
        assert held, "the worker holds no connection to Redis"
        workers.kill9(doomed)
        # Redis may not have read the dead connections' ends yet: unpaused then, it still ran
        # a FINISH one of them had sent (seen beside a second copy of the suite). Unpause once
        # it has dropped every one of them.
        wait_for(lambda: not held & {c["addr"] for c in r.client_list()}, 30,
                 "Redis kept the killed worker's connections")  # fmt: skip
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
    # None of the held FINISHes outlived the process that sent them.
    assert client.store.statuses(call_ids) == [CallStatus.RUNNING] * 4
    assert r.hlen(KOMBU_UNACKED) == 4  # nor did an acknowledgement held with them
    workers.start("safe", pool="threads", concurrency=4)
    for batch in batches:
        results = batch.wait(timeout=60)
        assert [(res.status, res.output) for res in results] == [(CallStatus.SUCCEEDED, "opened")]
    for batch, call_id in zip(batches, call_ids, strict=True):
        finals = [e.type.value for e in client.events(batch.run_id) if e.type.is_final]
        assert finals == ["call.succeeded"], finals
        assert r.llen(f"test:exec:{call_id}") == 2


def test_a_full_redis_fails_every_finish_in_the_round_trip_that_carried_it(
    r: redis.Redis, setup: Setup
) -> None:
    # A refusal of the whole Redis is every request's: not sent again request by request
    # (as a script's error of one request is), which would fail each again, one by one.
    calls = _started_calls(setup.client, setup.store, THREADS)
    errors: list[BaseException] = []

    def finish(env: CallEnvelope, token: str) -> None:
        try:
            setup.commits.commit([(env, token, _result(env))], [])
        except redis.ResponseError as exc:
            errors.append(exc)

    policy = r.config_get("maxmemory-policy")["maxmemory-policy"]
    limit = r.config_get("maxmemory")["maxmemory"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)  # full: every write is refused
    try:
        _together(r, [functools.partial(finish, env, token) for env, token in calls], 500)
    finally:
        r.config_set("maxmemory", limit)
        r.config_set("maxmemory-policy", policy)
    assert len(errors) == THREADS and all("OOM" in str(e) for e in errors), errors
    assert setup.commits.requests == THREADS
    assert setup.commits.round_trips <= 3  # the paused first one, then the rest together
