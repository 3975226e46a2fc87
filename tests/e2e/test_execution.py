"""Execution on real Redis: calls, retries, events on an in-process worker; kill -9,
prefetch and cancel of subprocess tools on real `toolq worker` processes."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from openai.types.chat import ChatCompletion

from toolq import AsyncClient, CallStatus, EventType
from toolq.errors import CallNotFoundError, WaitTimeoutError

pytestmark = pytest.mark.e2e


def openai_call(call_id: str, name: str, arguments: object) -> dict[str, object]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def completion(*calls: dict[str, object]) -> ChatCompletion:
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": list(calls)},
                }
            ],
        }
    )


def living_in_group(pgid: int) -> list[int]:
    """Pids of non-zombie processes in a process group, from /proc."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry))
    return alive


def executions(r, call_id: str) -> int:
    return int(r.llen(f"test:exec:{call_id}"))


def event_types(client, run_id: str, call_id: str) -> list[str]:
    return [e.type.value for e in client.events(run_id) if e.call_id == call_id]


def test_openai_batch_good_bad_json_and_moderate(client, inproc):
    inproc.start()
    response = completion(
        openai_call("call_good", "echo", {"text": "hello"}),
        openai_call("call_badjson", "echo", '{"text": "unterminated'),
        openai_call("call_moderate", "add", {"a": 40, "b": 2}),
        openai_call("call_unknown", "nope", {}),
        openai_call("call_invalid", "add", {"a": "x", "b": 2}),
    )
    batch = client.dispatch(response)
    results = batch.wait(timeout=20)
    assert [r.status for r in results] == [
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
        CallStatus.SUCCEEDED,
        CallStatus.FAILED,
        CallStatus.FAILED,
    ]
    assert results[0].output == {"text": "hello"}
    assert "not valid JSON" in (results[1].error or "")
    assert results[2].output == 42
    assert "unknown tool 'nope'" in (results[3].error or "")
    assert "a:" in (results[4].error or "")
    messages = batch.to_messages()
    assert [m["tool_call_id"] for m in messages] == [
        "call_good",
        "call_badjson",
        "call_moderate",
        "call_unknown",
        "call_invalid",
    ]
    assert all(m["role"] == "tool" for m in messages)
    assert "42" in messages[2]["content"]


def test_call_stays_queued_without_a_worker_for_its_risk(client, inproc, r):
    inproc.start("safe")
    batch = client.dispatch([{"id": "m1", "name": "add", "arguments": {"a": 1, "b": 1}}])
    with pytest.raises(WaitTimeoutError):
        batch.wait(timeout=1.5)
    assert client.result(batch.call_ids[0]).status is CallStatus.QUEUED
    assert r.llen("toolq.moderate") == 1
    inproc.start("moderate")
    assert batch.wait(timeout=20)[0].output == 2


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_kill9_mid_call_idempotent_rerun_once(client, workers, r, wait_for, pool):
    victim = workers.start(pool=pool, concurrency=1)
    batch = client.dispatch([{"id": "k1", "name": "slow_idempotent", "arguments": {"seconds": 3}}])
    call_id = batch.call_ids[0]
    wait_for(lambda: executions(r, call_id) == 1, message="call never started")
    workers.kill9(victim)
    workers.start(pool=pool, concurrency=1)
    [result] = batch.wait(timeout=30)
    assert result.status is CallStatus.SUCCEEDED
    assert result.output == "slept"
    assert executions(r, call_id) == 2  # the lost run and exactly one re-run
    types = event_types(client, batch.run_id, call_id)
    assert types.count("call.started") == 2
    assert "call.retrying" in types


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_kill9_mid_call_non_idempotent_is_unknown_not_rerun(client, workers, r, wait_for, pool):
    victim = workers.start(pool=pool, concurrency=1)
    started = time.monotonic()
    batch = client.dispatch([{"id": "k2", "name": "slow", "arguments": {"seconds": 3}}])
    call_id = batch.call_ids[0]
    wait_for(lambda: executions(r, call_id) == 1, message="call never started")
    workers.kill9(victim)
    workers.start(pool=pool, concurrency=1)
    wait_for(
        lambda: client.result(call_id).status is CallStatus.UNKNOWN,
        timeout=20,
        message="the lost call never became unknown",
    )
    # Recovered within about one lease (2 s), not kombu's visibility timeout (an hour).
    assert time.monotonic() - started < 20
    result = client.result(call_id)
    assert result.error_type == "outcome_unknown"
    with pytest.raises(WaitTimeoutError):  # not final: a person still decides it
        batch.wait(timeout=1.0)
    assert executions(r, call_id) == 1  # a redelivered copy did not run it again
    types = event_types(client, batch.run_id, call_id)
    assert types.count("call.started") == 1 and "call.unknown" in types
    assert "call.failed" not in types


def test_duplicate_dispatch_runs_once(client, inproc, r):
    inproc.start()
    payload = [{"id": "dup-1", "name": "wipe", "arguments": {"target": "x"}}]
    # wipe is dangerous: parked, so both dispatches see the same pending call
    first = client.dispatch(payload, run_id="run-dup")
    second = client.dispatch(payload, run_id="run-dup")
    assert first.call_ids == second.call_ids
    assert second.calls[0].duplicate
    client.approvals.approve(first.call_ids[0], by="alice")
    third = client.dispatch(payload, run_id="run-dup")
    assert third.call_ids == first.call_ids
    assert first.wait(timeout=20)[0].status is CallStatus.SUCCEEDED
    assert executions(r, first.call_ids[0]) == 1
    assert r.llen("toolq:run:run-dup:calls") == 1
    # Same provider id in another run is another call.
    other = client.dispatch(payload, run_id="run-other")
    assert other.call_ids != first.call_ids


def test_client_idempotency_key(client, inproc):
    inproc.start()
    payload = [{"id": "x", "name": "echo", "arguments": {"text": "a"}}]
    a = client.dispatch(payload, run_id="r1", idempotency_key="req-7")
    b = client.dispatch(
        [{"id": "y", "name": "echo", "arguments": {"text": "a"}}],
        run_id="r1",
        idempotency_key="req-7",
    )
    assert a.call_ids == b.call_ids


def test_cancel_parked_queued_and_running(client, workers, r, wait_for):
    parked = client.dispatch([{"id": "p", "name": "wipe", "arguments": {"target": "db"}}])
    assert parked.calls[0].status is CallStatus.AWAITING_APPROVAL
    assert client.cancel(parked.call_ids[0]).status is CallStatus.CANCELLED
    queued = client.dispatch([{"id": "q", "name": "echo", "arguments": {"text": "a"}}])
    assert client.cancel(queued.call_ids[0]).status is CallStatus.CANCELLED
    workers.start(concurrency=3)
    running = client.dispatch(
        [
            {"id": "s", "name": "slow", "arguments": {"seconds": 30}},
            {"id": "a", "name": "async_sleeper", "arguments": {"seconds": 30}},
            {"id": "sh", "name": "shell_sleep", "arguments": {"seconds": 30}},
        ]
    )
    ids = running.call_ids
    wait_for(lambda: all(s is CallStatus.RUNNING for s in client.store.statuses(ids)))
    wait_for(lambda: r.get(f"test:pgid:{ids[2]}") is not None)
    pgid = int(r.get(f"test:pgid:{ids[2]}"))
    for call_id in ids:
        client.cancel(call_id)
    results = running.wait(timeout=10)
    assert [x.status for x in results] == [CallStatus.CANCELLED] * 3
    # the subprocess tool's whole process group is gone (zombies awaiting a reaper aside):
    # SIGKILLed with its shell, its `sleep`s may need a moment on a loaded machine to be
    # scheduled and exit, but never the 30 s they would sleep
    wait_for(lambda: living_in_group(pgid) == [], timeout=5, message=str(living_in_group(pgid)))
    # parked and queued calls never ran
    assert parked.wait(timeout=5)[0].status is CallStatus.CANCELLED
    assert queued.wait(timeout=5)[0].status is CallStatus.CANCELLED
    assert executions(r, parked.call_ids[0]) == 0
    with pytest.raises(CallNotFoundError):
        client.cancel("no-such-call")


def test_late_reader_replays_in_order_and_resumes(client, inproc):
    inproc.start()
    batch = client.dispatch(
        [
            {"id": "e1", "name": "countdown", "arguments": {"n": 5}},
            {"id": "e2", "name": "echo", "arguments": {"text": "z"}},
        ]
    )
    batch.wait(timeout=20)
    events = list(client.events(batch.run_id))
    ids = [e.id for e in events]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    first = [e for e in events if e.call_id == batch.call_ids[0]]
    assert [e.type for e in first][:2] == [EventType.QUEUED, EventType.STARTED]
    assert [e.data["data"] for e in first if e.type is EventType.PROGRESS] == [
        {"left": 5},
        {"left": 4},
        {"left": 3},
        {"left": 2},
        {"left": 1},
        {"done": True},
    ]
    assert first[-1].type is EventType.SUCCEEDED
    middle = events[3].id
    assert [e.id for e in client.events(batch.run_id, after=middle)] == ids[4:]
    # A follower that connects late gets the backlog, then live events.
    live = client.dispatch(
        [{"id": "e3", "name": "echo", "arguments": {"text": "y"}}], run_id=batch.run_id
    )
    followed = list(client.events(batch.run_id, after=ids[-1], follow=True, timeout=5))
    assert {e.call_id for e in followed} == {live.call_ids[0]}
    assert followed[-1].type is EventType.SUCCEEDED


def test_retries_time_limits_and_failures(client, inproc, r):
    inproc.start()
    batch = client.dispatch(
        [
            {"id": "f", "name": "flaky", "arguments": {"failures": 2}},
            {"id": "t", "name": "too_slow", "arguments": {}},
            {"id": "b", "name": "boom", "arguments": {}},
        ]
    )
    flaky, slow, boom = batch.wait(timeout=30)
    assert flaky.status is CallStatus.SUCCEEDED and flaky.output == "ok after 3"
    assert flaky.attempts == 3
    assert event_types(client, batch.run_id, flaky.call_id).count("call.retrying") == 2
    assert slow.status is CallStatus.FAILED and slow.error_type == "timeout"
    assert boom.status is CallStatus.FAILED and "kaboom" in (boom.error or "")


def test_client_call_and_async_client(client, inproc, settings):
    from tests.apps import registry

    inproc.start()
    assert client.call("add", {"a": 1, "b": 2}, timeout=20).output == 3

    async def main() -> tuple[object, list[str]]:
        async with AsyncClient(registry, settings) as aclient:
            batch = await aclient.dispatch(
                [{"id": "a1", "name": "echo", "arguments": {"text": "q"}}]
            )
            results = await batch.wait(timeout=20)
            types = [e.type.value async for e in aclient.events(batch.run_id)]
            return results[0].output, types

    output, types = asyncio.run(main())
    assert output == {"text": "q"}
    assert types == ["call.queued", "call.started", "call.succeeded"]


@pytest.fixture
def unbatched(settings):
    """A client that sends one message per call (``calls_per_message=1``)."""
    from tests.apps import registry
    from toolq import Client

    with Client(registry, settings.model_copy(update={"calls_per_message": 1})) as c:
        yield c


def test_kill9_with_prefetched_calls_resends_them_quickly(unbatched, workers, r, wait_for):
    # The killed worker holds three messages it never started (kombu's "unacked" hash).
    client = unbatched
    victim = workers.start("safe", concurrency=1, prefetch=4, TOOLQ_REDELIVER_AFTER="3")
    batch = client.dispatch(
        [{"id": "k", "name": "slow", "arguments": {"seconds": 5}}]
        + [{"id": f"e{i}", "name": "echo", "arguments": {"text": str(i)}} for i in range(3)]
    )
    wait_for(lambda: executions(r, batch.call_ids[0]) == 1, message="slow call never started")
    wait_for(lambda: r.hlen("unacked") == 4, message="the echo calls were not prefetched")
    workers.kill9(victim)
    started = time.monotonic()
    workers.start("safe", concurrency=1, TOOLQ_REDELIVER_AFTER="3")
    results = client.wait(batch.call_ids[1:], timeout=30)
    assert [x.status for x in results] == [CallStatus.SUCCEEDED] * 3
    wait_for(lambda: client.result(batch.call_ids[0]).status is CallStatus.UNKNOWN, timeout=15)
    assert time.monotonic() - started < 15  # not kombu's visibility timeout (an hour)


def test_calls_waiting_behind_a_busy_slot_go_to_a_free_worker(unbatched, workers, r):
    # A busy worker holds no message it cannot start (prefetch 1 by default), and the
    # sweeper leaves the messages a live worker holds alone: the calls behind its one slot
    # stay in the queue, and a second worker runs them while the first is still busy.
    client = unbatched
    workers.start("safe", concurrency=1, TOOLQ_REDELIVER_AFTER="1")
    batch = client.dispatch(
        [{"id": "s", "name": "slow", "arguments": {"seconds": 15}}]
        + [{"id": f"w{i}", "name": "slow", "arguments": {"seconds": 0.1}} for i in range(3)]
    )
    workers.start("safe", concurrency=1, TOOLQ_REDELIVER_AFTER="1")
    slow, *quick = batch.call_ids
    assert [x.status for x in client.wait(quick, timeout=30)] == [CallStatus.SUCCEEDED] * 3
    assert client.result(slow).status is CallStatus.RUNNING
    assert not r.keys("toolq:resent:*")  # nothing a live worker held was sent again
    assert [x.status for x in batch.wait(timeout=30)] == [CallStatus.SUCCEEDED] * 4
    assert [executions(r, c) for c in batch.call_ids] == [1, 1, 1, 1]


def test_content_blocks_survive_the_round_trip(client, inproc):
    inproc.start("safe")
    batch = client.dispatch([{"id": "p", "name": "picture", "arguments": {"caption": "a cat"}}])
    [result] = batch.wait(timeout=20)
    assert [b.type for b in result.content] == ["text", "image"]
    blocks = batch.to_messages("anthropic")[0]["content"][0]["content"]
    assert {"type": "text", "text": "a cat"} in blocks
    assert any(b["type"] == "image" for b in blocks)
