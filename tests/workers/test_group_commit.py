"""Group commit: calls of one process that end together share a round trip to Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import redis

from tests.apps import registry
from tests.conftest import Workers
from toolq import CallStatus, Client, Settings
from toolq.models import CallEnvelope, CallResult
from toolq.results.connection import redis_client
from toolq.results.store import CallStore
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


def test_finishes_of_concurrent_threads_share_round_trips(
    r: redis.Redis, settings: Settings
) -> None:
    # Redis holds the first thread's FINISH (CLIENT PAUSE) while the others end: they queue
    # behind its round trip and go together in the next one, on the sending thread's own
    # connection (a thread that sends nothing opens none).
    client = Client(registry, settings)
    store = CallStore(redis_client(settings.redis_url), settings)
    commits = GroupCommit(store, CANCELLED)
    try:
        calls = _started_calls(client, store, THREADS)
        connections, scripts = _stats(r)
        answers: list[tuple[list[bool], list[object]]] = []
        barrier = threading.Barrier(THREADS + 1)

        def finish(env: CallEnvelope, token: str) -> None:
            barrier.wait()
            answers.append(commits.commit([(env, token, _result(env))], []))

        threads = [threading.Thread(target=finish, args=call) for call in calls]
        for thread in threads:
            thread.start()
        r.execute_command("CLIENT", "PAUSE", 500, "WRITE")
        barrier.wait()
        for thread in threads:
            thread.join(10)
        after_connections, after_scripts = _stats(r)

        assert answers == [([True], [])] * THREADS
        assert after_scripts - scripts == THREADS  # one FINISH per call, none repeated
        assert commits.requests == THREADS
        # Without the group commit each thread sends its own round trip on its own
        # connection: 8 of each. The paused first one, then the rest together.
        assert commits.round_trips <= 3
        assert after_connections - connections <= 3
        for env, _ in calls:
            assert client.result(env.call_id).output == env.arguments["text"]
        assert store.statuses([env.call_id for env, _ in calls]) == [CallStatus.SUCCEEDED] * THREADS
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
        store.redis.close()
        client.close()


def test_a_lone_commit_is_sent_at_once(r: redis.Redis, settings: Settings) -> None:
    # No gathering window: a thread alone waits for its own round trip only.
    client = Client(registry, settings)
    store = CallStore(redis_client(settings.redis_url), settings)
    commits = GroupCommit(store, CANCELLED)
    try:
        ((env, token),) = _started_calls(client, store, 1)
        began = time.monotonic()
        assert commits.commit([(env, token, _result(env))], []) == ([True], [])
        assert time.monotonic() - began < 0.5
        assert (commits.round_trips, commits.requests) == (1, 1)
        # A repeat (a retry after a lost reply) answers as the first did; another token loses.
        assert commits.commit([(env, token, _result(env))], []) == ([True], [])
        assert commits.commit([(env, "other", _result(env))], []) == ([False], [])
    finally:
        store.redis.close()
        client.close()


def test_starts_and_finishes_of_threads_share_round_trips(
    r: redis.Redis, settings: Settings
) -> None:
    # A slot's FINISH and its next START, and other slots' as well, in one round trip.
    client = Client(registry, settings)
    store = CallStore(redis_client(settings.redis_url), settings)
    commits = GroupCommit(store, CANCELLED)
    try:
        running = _started_calls(client, store, THREADS // 2)
        batch = client.dispatch(
            [
                {"id": f"n{i}", "name": "echo", "arguments": {"text": "n"}}
                for i in range(THREADS // 2)
            ]
        )
        barrier = threading.Barrier(len(running) + 1)
        answers: dict[str, str] = {}

        def step(env: CallEnvelope, token: str, following: str) -> None:
            barrier.wait()
            held, started = commits.commit(
                [(env, token, _result(env))], [(following, batch.run_id, f"next-{following}")]
            )
            assert held == [True]
            answers[following] = started[0].outcome

        threads = [
            threading.Thread(target=step, args=(env, token, following))
            for (env, token), following in zip(running, batch.call_ids, strict=True)
        ]
        for thread in threads:
            thread.start()
        r.execute_command("CLIENT", "PAUSE", 300, "WRITE")
        barrier.wait()
        for thread in threads:
            thread.join(10)
        assert answers == dict.fromkeys(batch.call_ids, "ok")
        assert commits.round_trips <= 3 < len(running) + 1
        statuses = store.statuses([env.call_id for env, _ in running] + batch.call_ids)
        assert statuses == [CallStatus.SUCCEEDED] * len(running) + [CallStatus.RUNNING] * len(
            batch.call_ids
        )
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
        store.redis.close()
        client.close()


def test_a_worker_killed_while_its_slots_commit_together_loses_nothing(
    client: Client, workers: Workers, r: redis.Redis, wait_for: Callable[..., None]
) -> None:
    # Four slots' calls end while Redis holds the first FINISH: the others wait behind it.
    # The worker dies then (kill -9, all four messages unacknowledged, no FINISH in
    # Redis): each call is recovered after its lease, run again (the tool is idempotent)
    # and ends once, succeeded, with exactly one final event.
    doomed = workers.start("safe", pool="threads", concurrency=4)
    batches = [
        client.dispatch([{"id": "a", "name": "slow_idempotent", "arguments": {"seconds": 0.5}}])
        for _ in range(4)
    ]
    call_ids = [batch.call_ids[0] for batch in batches]
    wait_for(lambda: all(r.llen(f"test:exec:{c}") == 1 for c in call_ids), timeout=30)
    r.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        time.sleep(1.5)  # the handlers return: their FINISH round trips wait on Redis
        workers.kill9(doomed)
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
    # None of the held FINISHes outlived the process that sent them.
    assert client.store.statuses(call_ids) == [CallStatus.RUNNING] * 4
    workers.start("safe", pool="threads", concurrency=4)
    for batch in batches:
        assert [res.status for res in batch.wait(timeout=60)] == [CallStatus.SUCCEEDED]
    for batch, call_id in zip(batches, call_ids, strict=True):
        finals = [e.type.value for e in client.events(batch.run_id) if e.type.is_final]
        assert finals == ["call.succeeded"], finals
        assert r.llen(f"test:exec:{call_id}") == 2
