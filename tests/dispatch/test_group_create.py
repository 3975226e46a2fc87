"""Group commit of CREATEs: a client's concurrent dispatches share round trips and messages.

Redis holds the first dispatch's CREATE pipeline (``CLIENT PAUSE WRITE``) while the other
threads' dispatches arrive: they wait for it and go together in the next pipeline, their
queued calls in shared messages. Each dispatch keeps its own run, calls, refusal and errors.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from tests.apps import registry
from tests.conftest import Workers
from tests.workers.test_group_commit import _together as together
from toolq import AsyncBatch, AsyncClient, CallStatus, Client, Settings
from toolq.dispatch.client import Batch
from toolq.errors import NotRunOwnerError, StoreUnavailableError
from toolq.keys import Keys

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

THREADS = 8


@pytest.fixture
def paused_client(r: redis.Redis, settings: Settings) -> Iterator[Client]:
    with Client(registry, settings) as client:
        try:
            yield client
        finally:
            r.execute_command("CLIENT", "UNPAUSE")


def _together(r: redis.Redis, steps: list[Callable[[], Any]], pause_ms: int) -> list[Any]:
    """Each step's return value (or exception), run on threads at once while Redis holds
    writes ``pause_ms``."""
    out: list[Any] = [None] * len(steps)

    def capture(n: int) -> None:
        try:
            out[n] = steps[n]()
        except Exception as exc:
            out[n] = exc

    together(r, [functools.partial(capture, n) for n in range(len(steps))], pause_ms)
    return out


def _messages(r: redis.Redis, queue: str) -> list[list[str]]:
    """The call ids each message waiting on ``queue`` carries."""
    found = []
    for raw in r.lrange(queue, 0, -1):
        args = json.loads(base64.b64decode(json.loads(raw)["body"]))[0]
        found.append([args[0]] if isinstance(args[0], str) else [c[0] for c in args[0]])
    return found


def _echoes(n: int, texts: int = 2) -> list[dict[str, Any]]:
    return [
        {"id": f"t{n}-{i}", "name": "echo", "arguments": {"text": f"{n}-{i}"}} for i in range(texts)
    ]


def test_concurrent_dispatches_share_round_trips_and_messages(
    r: redis.Redis, paused_client: Client, workers: Workers
) -> None:
    client = paused_client
    batches = _together(
        r,
        [lambda n=n: client.dispatch(_echoes(n), principal=f"p{n}") for n in range(THREADS)],
        500,
    )
    assert all(isinstance(b, Batch) for b in batches), batches
    # Without the group commit: one pipeline and one message per dispatch (8 of each).
    messages = _messages(r, "toolq.safe")
    assert len(messages) <= 3, messages
    carried = sorted(c for m in messages for c in m)
    assert carried == sorted(c for b in batches for c in b.call_ids)
    creates = client.dispatcher.creates
    assert creates.requests == THREADS and creates.round_trips <= 3
    # Each dispatch has its own run, owner and calls, in its own order.
    owners = Keys()
    for n, batch in enumerate(batches):
        assert [c.tool_call_id for c in batch.calls] == [f"t{n}-0", f"t{n}-1"]
        assert client.store.run_call_ids(batch.run_id) == batch.call_ids
        assert r.get(owners.run_owner(batch.run_id)) is not None
    assert len({b.run_id for b in batches}) == THREADS
    workers.start("safe", concurrency=2)
    for n, batch in enumerate(batches):
        results = batch.wait(timeout=60)
        assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 2
        assert [x.output for x in results] == [{"text": f"{n}-0"}, {"text": f"{n}-1"}]


def test_a_refused_dispatch_among_concurrent_ones_fails_alone(
    r: redis.Redis, paused_client: Client, workers: Workers
) -> None:
    client = paused_client
    owned = client.dispatch(_echoes(99, 1), principal="alice")
    r.delete("toolq.safe")

    def dispatch(n: int) -> Batch:
        if n == 3:  # into alice's run: refused
            return client.dispatch(_echoes(n), run_id=owned.run_id, principal="mallory")
        if n == 4:  # into her own run: added
            return client.dispatch(_echoes(n), run_id=owned.run_id, principal="alice")
        return client.dispatch(_echoes(n), principal=f"p{n}")

    # Dispatch 0 goes first and Redis holds it: the others, mallory's among them, queue
    # behind it and go together in the next pipeline, their calls in one shared message.
    r.execute_command("CLIENT", "PAUSE", 700, "WRITE")
    with ThreadPoolExecutor(THREADS) as pool:
        first = pool.submit(dispatch, 0)
        time.sleep(0.2)
        rest = [pool.submit(dispatch, n) for n in range(1, THREADS)]
        out = [f.exception() or f.result() for f in [first, *rest]]
    assert isinstance(out[3], NotRunOwnerError) and out[3].details["by"] == "mallory"
    batches = {n: b for n, b in enumerate(out) if n != 3}
    assert all(isinstance(b, Batch) for b in batches.values()), out
    messages = _messages(r, "toolq.safe")
    assert len(messages) == 2, messages  # 8 (one per dispatch) without the group commit
    carried = {c for m in messages for c in m}
    mine = {c for b in batches.values() for c in b.call_ids}
    assert mine <= carried
    assert client.store.run_call_ids(owned.run_id) == owned.call_ids + batches[4].call_ids
    workers.start("safe", concurrency=2)
    for n, batch in batches.items():
        assert [x.output for x in batch.wait(timeout=60)] == [
            {"text": f"{n}-0"},
            {"text": f"{n}-1"},
        ]
    # The ids mallory's calls have in the shared message name no record, and never will.
    stray = carried - mine
    assert len(stray) == 2 and client.store.statuses(sorted(stray)) == [None, None]


def test_a_script_error_of_one_dispatch_among_concurrent_ones_fails_it_alone(
    r: redis.Redis, paused_client: Client, workers: Workers
) -> None:
    client = paused_client
    # Dispatch 3's first call finds its idempotency key holding a hash: CREATE fails on it
    # (WRONGTYPE) before writing anything, however often it is sent.
    r.hset(client.keys.idempotency("p3", "run3", "call:t3-0"), "not", "a claim")

    def dispatch(n: int) -> Batch:
        return client.dispatch(_echoes(n), run_id=f"run{n}", principal=f"p{n}")

    out = _together(r, [lambda n=n: dispatch(n) for n in range(THREADS)], 500)
    assert isinstance(out[3], redis.ResponseError) and "WRONGTYPE" in str(out[3]), out
    batches = {n: b for n, b in enumerate(out) if n != 3}
    assert all(isinstance(b, Batch) for b in batches.values()), out
    creates = client.dispatcher.creates
    assert creates.requests == THREADS and creates.round_trips < 2 * THREADS
    assert client.store.run_call_ids("run3") == []
    workers.start("safe", concurrency=2)
    for n, batch in batches.items():
        assert client.store.run_call_ids(f"run{n}") == batch.call_ids
        assert [x.output for x in batch.wait(timeout=60)] == [
            {"text": f"{n}-0"},
            {"text": f"{n}-1"},
        ]


def test_a_redis_error_of_a_shared_commit_is_every_dispatch_s_and_a_retry_dedupes(
    r: redis.Redis, paused_client: Client, workers: Workers
) -> None:
    client = paused_client
    policy = r.config_get("maxmemory-policy")["maxmemory-policy"]
    limit = r.config_get("maxmemory")["maxmemory"]

    def dispatch(n: int) -> Batch:
        return client.dispatch(_echoes(n), run_id=f"run{n}", principal="p", idempotency_key=str(n))

    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)  # full: every write is refused
    try:
        out = _together(r, [lambda n=n: dispatch(n) for n in range(THREADS)], 500)
    finally:
        r.config_set("maxmemory", limit)
        r.config_set("maxmemory-policy", policy)
    assert all(isinstance(e, StoreUnavailableError) for e in out), out
    creates = client.dispatcher.creates
    assert creates.round_trips < creates.requests == THREADS
    assert r.llen("toolq.safe") == 0
    # Retried with the same keys: each dispatch gets its own calls, once.
    retried = [dispatch(n) for n in range(THREADS)]
    again = [dispatch(n) for n in range(THREADS)]
    for n, (batch, repeat) in enumerate(zip(retried, again, strict=True)):
        assert [c.duplicate for c in batch.calls] == [False, False]
        assert repeat.call_ids == batch.call_ids and all(c.duplicate for c in repeat.calls)
        assert client.store.run_call_ids(f"run{n}") == batch.call_ids
    workers.start("safe", concurrency=2)
    for n, batch in enumerate(retried):
        assert [x.output for x in batch.wait(timeout=60)] == [
            {"text": f"{n}-0"},
            {"text": f"{n}-1"},
        ]


def test_an_async_client_s_concurrent_dispatches_share_them_too(
    r: redis.Redis, settings: Settings, workers: Workers
) -> None:
    # AsyncClient dispatches on threads (asyncio.to_thread): the same group commit.
    async def main(client: AsyncClient) -> list[AsyncBatch]:
        return await asyncio.gather(*(client.dispatch(_echoes(n)) for n in range(5)))

    client = AsyncClient(registry, settings)
    try:
        r.execute_command("CLIENT", "PAUSE", 500, "WRITE")
        batches = asyncio.run(main(client))
        assert len(_messages(r, "toolq.safe")) <= 3  # one per dispatch without it: 5
        workers.start("safe", concurrency=2)
        for n, batch in enumerate(batches):
            outputs = [x.output for x in asyncio.run(batch.wait(timeout=60))]
            assert outputs == [{"text": f"{n}-0"}, {"text": f"{n}-1"}]
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
        client.sync.close()
