"""Many calls per broker message (``calls_per_message``), on real worker processes.

A dispatch's queued calls of one risk and time limit share messages (``toolq.execute_many``);
the worker runs a message's calls as its slots free, each under its own lease, with its own
events and its own final state, and gives back to the queue those a busy slot cannot start.
"""

from __future__ import annotations

import base64
import json
import time

import psutil
import pytest

from tests.conftest import InProcess, Workers
from toolq import CallStatus, Client
from toolq.broker import BATCH_TASK_NAME
from toolq.keys import Keys

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def executions(r, call_id: str) -> int:
    return int(r.llen(f"test:exec:{call_id}"))


def queued_tasks(r, queue: str) -> list[tuple[str, list[object]]]:
    """``(task name, args)`` of every message waiting on ``queue``."""
    found = []
    for raw in r.lrange(queue, 0, -1):
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0]
        found.append((message["headers"]["task"], args))
    return found


def test_a_dispatch_shares_messages_and_every_call_keeps_its_bookkeeping(r, client: Client):
    keys = Keys()
    batch = client.dispatch(
        [{"id": f"s{i}", "name": "slow", "arguments": {"seconds": 0}} for i in range(40)]
        + [{"id": "m", "name": "add", "arguments": {"a": 1, "b": 2}}]  # moderate: alone
    )
    safe = queued_tasks(r, "toolq.safe")
    assert [(task, len(args[0])) for task, args in reversed(safe)] == [
        (BATCH_TASK_NAME, 16),
        (BATCH_TASK_NAME, 16),
        (BATCH_TASK_NAME, 8),
    ]
    assert [task for task, _ in queued_tasks(r, "toolq.moderate")] == ["toolq.execute"]
    carried = [call[0] for _, args in reversed(safe) for call in args[0]]
    assert {call[2] for _, args in safe for call in args[0]} == {"sync"}
    assert carried == batch.call_ids[:40]
    records = [r.hgetall(keys.call(c)) for c in batch.call_ids[:40]]
    assert [int(rec[b"push_seq"]) for rec in records] == [1] * 16 + [2] * 16 + [3] * 8
    assert len({rec[b"push_tag"] for rec in records}) == 3
    assert r.zcard(keys.queued) == 41 and r.zcard(keys.unsent) == 0
    assert all(s is CallStatus.QUEUED for s in client.store.statuses(batch.call_ids))


def test_calls_are_created_in_dispatch_order_even_when_redis_lost_its_scripts(r, client: Client):
    # Shared messages, a lone moderate call and a call final at dispatch, in one pipeline,
    # while Redis holds CREATE but not CREATE_GROUP: the invocations that miss their script
    # are re-run after loading it, and must not land after the others.
    r.script_flush()
    client.dispatch([{"id": "one", "name": "echo", "arguments": {"text": "0"}}])  # CREATE
    r.delete("toolq.safe")
    batch = client.dispatch(
        [
            {"id": "e1", "name": "echo", "arguments": {"text": "1"}},
            {"id": "m", "name": "add", "arguments": {"a": 1, "b": 2}},
            {"id": "e2", "name": "echo", "arguments": {"text": "2"}},
            {"id": "x", "name": "no_such_tool", "arguments": {}},
        ]
    )
    assert client.store.run_call_ids(batch.run_id) == batch.call_ids
    assert [task for task, _ in queued_tasks(r, "toolq.safe")] == [BATCH_TASK_NAME]


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_every_call_of_a_shared_message_runs_once(r, client: Client, workers: Workers, pool):
    workers.start("safe", pool=pool, concurrency=2)
    batch = client.dispatch(
        [{"id": f"s{i}", "name": "slow", "arguments": {"seconds": 0.05}} for i in range(50)]
    )
    results = batch.wait(timeout=60)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 50
    time.sleep(0.5)
    assert [executions(r, c) for c in batch.call_ids] == [1] * 50
    assert r.zcard(Keys().queued) == 0 and r.hlen("unacked") == 0


def test_a_long_call_does_not_hold_up_its_siblings(r, client: Client, workers: Workers):
    # its slot gives them back; the other slot takes them
    # the quick ones all finish while the long one (two minutes) still runs
    workers.start("safe", concurrency=2)
    batch = client.dispatch(
        [{"id": "long", "name": "slow", "arguments": {"seconds": 120}}]
        + [{"id": f"q{i}", "name": "slow", "arguments": {"seconds": 0.2}} for i in range(5)]
    )
    long, *quick = batch.call_ids
    start = time.monotonic()
    while not all(client.result(c).status is CallStatus.SUCCEEDED for c in quick):
        assert time.monotonic() - start < 60, [client.result(c).status for c in quick]
        time.sleep(0.05)
    assert client.result(long).status is CallStatus.RUNNING
    client.cancel(long)
    assert batch.wait(timeout=30)[0].status is CallStatus.CANCELLED


def test_cancel_one_sibling(r, client: Client, workers: Workers, wait_for):
    workers.start("safe", concurrency=2)
    batch = client.dispatch(
        [
            {"id": "a", "name": "slow", "arguments": {"seconds": 20}},
            {"id": "b", "name": "slow", "arguments": {"seconds": 2}},
        ]
    )
    first, second = batch.call_ids
    wait_for(lambda: executions(r, first) == 1 and executions(r, second) == 1)
    client.cancel(first)
    wait_for(lambda: client.result(first).status is CallStatus.CANCELLED, timeout=5)
    assert client.result(second).status is CallStatus.RUNNING
    assert batch.wait(timeout=10)[1].status is CallStatus.SUCCEEDED


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_async_siblings_share_one_event_loop(client: Client, workers: Workers, pool, settings):
    from tests.apps import registry

    # 100 calls on one slot side by side: each waits until all 100 have started (run one
    # after another, the first would wait alone until its 30 s are up).
    workers.start("safe", pool=pool, concurrency=1)
    wide = settings.model_copy(update={"calls_per_message": 100})
    with Client(registry, wide) as c:
        meet = {"key": pool, "count": 100, "seconds": 30}
        calls = [{"id": f"a{i}", "name": "rendezvous", "arguments": meet} for i in range(100)]
        results = c.dispatch(calls).wait(timeout=90)
    assert [(x.status, x.output) for x in results] == [(CallStatus.SUCCEEDED, "met")] * 100


def test_a_message_of_async_calls_reaches_the_loop_in_one_wake_up(
    client: Client, inproc: InProcess, monkeypatch
):
    # Each wake-up of the loop from the message's thread is a self-pipe write and a GIL
    # hand-off both ways; one per call cost ~10% of a worker's time on async batches.
    worker = inproc.worker("safe")
    loop = worker.app.toolq_runtimes.get().event_loop.loop()
    wake_ups = []
    wake = loop.call_soon_threadsafe
    monkeypatch.setattr(
        loop, "call_soon_threadsafe", lambda *a, **k: (wake_ups.append(a), wake(*a, **k))[1]
    )
    naps = [{"id": f"a{i}", "name": "async_sleeper", "arguments": {"seconds": 0.05}}
            for i in range(16)]  # fmt: skip
    batch = client.dispatch(naps)
    assert worker.drain() == 1  # the 16 calls' one message
    assert [x.status for x in batch.wait(timeout=10)] == [CallStatus.SUCCEEDED] * 16
    assert len(wake_ups) == 1  # one per call before: 16


def runner_pid(r, call_id: str) -> int:
    """The process that ran a call (``tests.apps.record``)."""
    return int(r.lindex(f"test:exec:{call_id}", 0).split(b":")[0])


@pytest.mark.parametrize("whole", [True, False], ids=["worker", "pool-process"])
def test_kill9_mid_message(r, client: Client, workers: Workers, wait_for, whole):
    """Killed with a shared message half done: every call ends or waits for a person
    (unknown), none runs twice unless idempotent (the started ones are recovered by their
    leases)."""
    # three slots: the long calls hold two, the quick ones (given back) run on the third
    victim = workers.start("safe", pool="prefork", concurrency=3, TOOLQ_REDELIVER_AFTER="2")
    batch = client.dispatch(
        [
            {"id": "n", "name": "slow", "arguments": {"seconds": 30}},
            {"id": "i", "name": "slow_idempotent", "arguments": {"seconds": 6}},
        ]
        + [{"id": f"q{i}", "name": "slow", "arguments": {"seconds": 0}} for i in range(4)]
    )
    calls = batch.call_ids
    quick = calls[2:]
    wait_for(lambda: executions(r, calls[0]) == 1 and executions(r, calls[1]) == 1)
    wait_for(lambda: all(client.result(c).status is CallStatus.SUCCEEDED for c in quick))
    if whole:
        workers.kill9(victim)
        workers.start("safe", pool="prefork", concurrency=3, TOOLQ_REDELIVER_AFTER="2")
    else:
        for pid in {runner_pid(r, calls[0]), runner_pid(r, calls[1])}:
            psutil.Process(pid).kill()  # Celery redelivers their messages
    results = client.wait(calls[1:], timeout=40)
    assert results[0].status is CallStatus.SUCCEEDED  # idempotent: run again
    assert [x.status for x in results[1:]] == [CallStatus.SUCCEEDED] * 4
    wait_for(lambda: client.result(calls[0]).status is CallStatus.UNKNOWN, timeout=20)
    time.sleep(1.0)  # let any copy be delivered and skipped
    assert [executions(r, c) for c in calls] == [1, 2, 1, 1, 1, 1]
