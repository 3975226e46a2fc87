"""``EventHub`` against the suite's private Redis: one blocking read for every followed run."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis

from tests.conftest import REDIS_URL
from toolq.keys import Keys
from toolq.results import hub as hub_module
from toolq.results.hub import EventHub

KEYS = Keys("t14")


def add(r: redis.Redis, run_id: str, call_id: str) -> str:
    entry = {"type": "call.progress", "call_id": call_id, "ts": repr(time.time()), "data": "{}"}
    return r.xadd(KEYS.run_stream(run_id), entry).decode()  # type: ignore[union-attr]


def test_a_run_joining_interrupts_the_blocked_read(r: redis.Redis, monkeypatch: pytest.MonkeyPatch):
    # With a 4 s block, an event of the joining run arrives within 2 s only if the read
    # that was blocked on the first run alone is interrupted and started again with both.
    monkeypatch.setattr(hub_module, "POLL_SECONDS", 4.0)

    async def scenario() -> None:
        hub = EventHub(REDIS_URL, KEYS, max_streams=10)
        try:
            first, backlog = await hub.join("run-a", None)
            assert backlog == []
            await asyncio.sleep(0.3)  # the hub's read blocks on run-a
            add(r, "run-b", "old")  # before joining: the backlog has it, the hub does not
            second, backlog = await hub.join("run-b", None)
            assert [e.call_id for e in backlog] == ["old"]
            started = time.monotonic()
            add(r, "run-b", "b1")
            got = await asyncio.wait_for(second.queue.get(), 5)
            assert got.call_id == "b1" and time.monotonic() - started < 2
            add(r, "run-a", "a1")
            assert (await asyncio.wait_for(first.queue.get(), 5)).call_id == "a1"
            assert second.queue.empty() and first.queue.empty()
            hub.leave(first)
            hub.leave(second)
            assert hub.streams == 0
        finally:
            await hub.close()

    asyncio.run(scenario())


def test_events_reach_every_listener_of_a_run_in_order(r: redis.Redis):
    async def scenario() -> None:
        hub = EventHub(REDIS_URL, KEYS, max_streams=10)
        try:
            one, _ = await hub.join("run-a", None)
            two, _ = await hub.join("run-a", None)
            ids = [add(r, "run-a", f"c{i}") for i in range(5)]
            for listener in (one, two):
                got = [await asyncio.wait_for(listener.queue.get(), 5) for _ in ids]
                assert [e.id for e in got] == ids
        finally:
            await hub.close()

    asyncio.run(scenario())


def test_a_killed_blocking_read_loses_nothing(r: redis.Redis):
    async def scenario() -> None:
        hub = EventHub(REDIS_URL, KEYS, max_streams=10)
        try:
            listener, _ = await hub.join("run-a", None)
            await asyncio.sleep(0.3)
            blocked = [
                c["id"] for c in r.client_list() if c.get("cmd") == "xread" and "b" in c["flags"]
            ]
            assert len(blocked) == 1
            r.client_kill_filter(_id=blocked[0])
            ids = [add(r, "run-a", f"c{i}") for i in range(3)]
            got = [await asyncio.wait_for(listener.queue.get(), 10) for _ in ids]
            assert [e.id for e in got] == ids
        finally:
            await hub.close()

    asyncio.run(scenario())


def test_json_of_the_events_is_parsed(r: redis.Redis):
    async def scenario() -> None:
        hub = EventHub(REDIS_URL, KEYS, max_streams=10)
        try:
            listener, _ = await hub.join("run-a", None)
            r.xadd(
                KEYS.run_stream("run-a"),
                {"type": "call.succeeded", "call_id": "c1", "ts": "1.5",
                 "data": json.dumps({"status": "succeeded"})},
            )  # fmt: skip
            event = await asyncio.wait_for(listener.queue.get(), 5)
            assert (event.data, event.ts, event.run_id) == ({"status": "succeeded"}, 1.5, "run-a")
        finally:
            await hub.close()

    asyncio.run(scenario())


def test_follow_returns_at_its_timeout_on_an_idle_stream(r: redis.Redis):
    # toolq's client (retries on TimeoutError, redis-py's 5 s socket timeout): a reader's
    # blocking reads must end before the socket times out, or the retries outlive the timeout.
    from toolq.results.connection import redis_client
    from toolq.results.events import EventLog

    add(r, "run-a", "c0")
    log = EventLog(redis_client(REDIS_URL), KEYS)
    started = time.monotonic()
    events = list(log.follow("run-a", timeout=5.5))
    assert [e.call_id for e in events] == ["c0"]
    assert 5.4 < time.monotonic() - started < 7.5
